/* struct err: a negative errno plus a human sentence, carried in a fixed-size out-parameter
 * (hiredis errstr, crun's errno+message) so that reporting an error never allocates.
 * `msg` must be safe to show to API clients: never put tokens or request bodies in it. */
#pragma once

#include "macro.h"

struct err {
    int code; /* negative errno, 0 when unset */
    char msg[192];
};

/* Records code and message in e (which may be NULL) and returns code, so that
 * `return err_set(reterr, -EINVAL, "...")` reads naturally. A message that does not fit is cut. */
int err_set(struct err *e, int code, const char *fmt, ...) PRINTF_LIKE(3, 4);
/* Like err_set(), but keeps an existing message in e and prefixes it with the new context. */
int err_wrap(struct err *e, int code, const char *fmt, ...) PRINTF_LIKE(3, 4);
/* Clears e (may be NULL). */
void err_clear(struct err *e);
/* Returns e->msg, or strerror(-code) when no message was recorded. */
const char *err_msg(const struct err *e);
