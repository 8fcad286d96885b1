/* The one table of the HTTP API's errors: negative errno <-> HTTP status <-> error code (the
 * SANDPOOL_ERR_* codes of include/sandpool/api.h). The daemon answers an errno with its row
 * (src/http/http.c, http_reply_error()); the client library turns a status it received back into an
 * errno with the same table (src/client/), so the two can never disagree. Pure; linked into the
 * daemon and into libsandpool_client (no dependency beyond libc). */
#pragma once

#include <stdbool.h>

struct errcode {
    int err;            /* negative errno */
    int status;         /* HTTP status */
    const char *code;   /* SANDPOOL_ERR_* */
    const char *reason; /* the status line's reason phrase */
    bool retry_after;   /* the answer carries "Retry-After: 1" */
};

/* The row the daemon answers errno r with (several errnos share a status and a code); never
 * NULL: an errno the table does not name is 500 "internal". */
const struct errcode *errcode_from_errno(int r);
/* The row a client takes an HTTP status for: the first with that status, whose errno is the
 * one the client library returns (include/sandpool/client.h lists them); NULL for a status the
 * API does not use. */
const struct errcode *errcode_from_status(int status);
