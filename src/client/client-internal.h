/* Shared by the files of the client library only (src/client/): the client, one transfer, and
 * the transfer engine of transfer.c that every public call of client.c goes through. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <curl/curl.h>

#include "client/sse.h"
#include "sandpool/client.h"
#include "util/buf.h"
#include "util/macro.h"

#define DEFAULT_TIMEOUT_MS 30000L
#define CONNECT_TIMEOUT_MS 5000L
#define PATH_MAX_BYTES     (64u << 10) /* an encoded request path; file paths are <= 4096 */

struct sp_client {
    CURL *easy;
    char *url;       /* as given, for messages */
    char *base;      /* prefix of every request URL: "http://host:port" or "http://localhost" */
    char *unix_path; /* NULL unless the URL was unix:/path */
    char *auth;      /* "Authorization: Bearer ..." or NULL */
    long timeout_ms;
    sp_client_progress_cb *progress;
    void *progress_userdata;
};

enum sink {
    SINK_UNROUTED,
    SINK_BUFFER,
    SINK_FILE,
    SINK_SSE,
};

struct xfer {
    struct sp_client *c;
    enum sink sink;
    struct buf answer; /* JSON answer or error body */
    FILE *out;         /* downloads: the 2xx body goes here */
    uint64_t out_bytes;
    FILE *in; /* uploads */
    bool long_running;
    bool want_sse;
    struct client_sse sse;
    sp_client_event_cb *cb;
    void *userdata;
    json_t *done; /* the "done" event's Execution */
    /* Set by a callback that stopped the transfer. */
    int fail_r;
    char fail_msg[384];
};

struct body {
    const char *data; /* JSON body, or NULL */
    size_t len;
    int64_t upload_size; /* with xfer.in: -1 = unknown (chunked) */
};

/* Fills reterr (may be NULL) and returns r: `return client_error(reterr, -EINVAL, 0, "", ...)`. */
int client_error(struct sp_error *e, int r, int http_status, const char *code, const char *fmt, ...)
    PRINTF_LIKE(5, 6);
/* An HTTP error answer (status, the buffered body) as the errno of util/errcode.c's table, with
 * the daemon's {"error": {"code", "message"}} in reterr when the body is that. */
int client_http_error(struct xfer *x, long status, struct sp_error *reterr);
/* The SSE parser's callback for an execution's stream (userdata: the struct xfer). */
int client_on_sse_event(const struct client_sse_event *ev, void *userdata);

void client_xfer_init(struct xfer *x, struct sp_client *c);
void client_xfer_done(struct xfer *x);
/* Runs one request. Returns 0 with the answer's status in *ret_status (2xx, or any status when
 * any_status), or a negative errno with reterr filled. */
int client_perform(struct xfer *x, const char *method, const char *path, const struct body *b,
                   bool any_status, long *ret_status, struct sp_error *reterr);
/* Parses the buffered answer into *ret (NULL for an empty answer); ret may be NULL. */
int client_parse_answer(struct xfer *x, long status, json_t **ret, struct sp_error *reterr);
/* One JSON request (body borrowed, may be NULL) and its parsed answer (ret may be NULL). */
int client_call_json(struct sp_client *c, const char *method, const char *path, json_t *body,
                     json_t **ret, struct sp_error *reterr);
/* Builds prefix + percent-encoded arg (RFC 3986 unreserved characters stay, and '/' when
 * keep_slash) + suffix into b; -EINVAL for an empty arg or past b's bound. */
int client_make_path(struct buf *b, const char *prefix, const char *arg, bool keep_slash,
                     const char *suffix, struct sp_error *reterr);
/* client_call_json() on prefix + encoded(arg) + suffix. */
int client_call_on(struct sp_client *c, const char *method, const char *prefix, const char *arg,
                   const char *suffix, json_t *body, json_t **ret, struct sp_error *reterr);
