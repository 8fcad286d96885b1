/* Shared by the files of the api module only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/api.h"
#include "api/auth.h"

struct bufferevent;
struct event_base;
struct evhttp;
struct evhttp_bound_socket;
struct api_conns;
struct evconnlistener;
struct exec_req;
struct session;

#define API_MAX_HEADERS_BYTES 16384u
#define API_CONN_TIMEOUT_S    60 /* a connection idle this long (reading or writing) is closed */

struct api {
    struct event_base *base;           /* borrowed */
    const struct cfg *cfg;             /* borrowed */
    const struct api_backend *backend; /* borrowed */
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    struct api_conns *conns; /* body.c */
    struct api_stats stats;
    char unix_path[108];
};

/* A request handler; path is the decoded path, params[] its "*" segments. */
typedef void api_handler_fn(struct api *a, struct evhttp_request *req, const char *const *params);

/* Session endpoints (sessions.c). */
api_handler_fn api_sessions_create;
api_handler_fn api_sessions_list;
api_handler_fn api_sessions_get;
api_handler_fn api_sessions_delete;
api_handler_fn api_sessions_execute;
api_handler_fn api_sessions_interrupt;
api_handler_fn api_sessions_restart;
api_handler_fn api_sessions_executions;

/* Admin endpoints (admin.c): admin token only. */
api_handler_fn api_admin_pools;
api_handler_fn api_admin_pool_put;
api_handler_fn api_admin_sessions;
api_handler_fn api_admin_session_get;
api_handler_fn api_admin_session_delete;
api_handler_fn api_admin_drain;
api_handler_fn api_admin_undrain;
api_handler_fn api_admin_policy;

/* File endpoints (files.c). params[1] is the raw (still percent-encoded) file path. */
api_handler_fn api_files_list;
api_handler_fn api_files_get;
api_handler_fn api_files_put;
api_handler_fn api_files_delete;

/* ---- streamed request bodies (body.c) ---- */

struct api_conn;
/* The connections of an api (they may outlive it by a loop iteration) and their lingering
 * closes. At max connections (0: no bound) the listener is paused until one closes; a request
 * head must arrive within head_timeout_s (0: no bound) once it started. api_conns_free() ends the
 * lingering closes. */
struct api_conns *api_conns_new(size_t max, unsigned head_timeout_s);
/* The listener to pause at the bound (borrowed), or NULL once it is gone. */
void api_conns_set_listener(struct api_conns *reg, struct evconnlistener *listener);
void api_conns_free(struct api_conns *reg);
/* Open connections. */
size_t api_conns_count(const struct api_conns *reg);
/* evhttp_set_bevcb callback (arg: the api): the bufferevent of a new connection, with the body
 * filter. */
struct bufferevent *api_conn_bev_new(struct event_base *base, void *arg);
/* evhttp dispatched req: its connection's head deadline stops; a connection the filter could
 * not follow gets "Connection: close" on the reply (its next head could not be timed). */
void api_conn_dispatched(struct api *a, struct evhttp_request *req);

/* A body the connection holds back for its request's handler. */
struct api_body {
    struct api_conn *conn;
    uint64_t seq; /* which of the connection's held bodies */
};
/* True, with *ret, when this request's body is held for its handler; false when evhttp read the
 * body (if any) the usual way. */
bool api_body_held(struct api *a, struct evhttp_request *req, struct api_body *ret);
uint64_t api_body_length(const struct api_body *b);
/* True until every byte of the body was read (also after a failed read). While it is, the
 * connection must close after the reply: api.c adds "Connection: close" to such requests, and a
 * handler that read the whole body removes it. */
bool api_body_unread(const struct api_body *b);
/* The client asked for "100 Continue" and got none yet: it waits before sending the body. */
bool api_body_awaits_continue(const struct api_body *b);
typedef void api_body_data_cb(const char *data, size_t n, void *userdata);
/* r == 0: every byte came; r < 0: the client went away, stopped sending for API_CONN_TIMEOUT_S
 * (-ETIMEDOUT) or the socket failed. The connection is unusable after a failure. */
typedef void api_body_end_cb(int r, void *userdata);
/* Starts reading the body (sending "100 Continue" first when asked for). on_data NULL discards
 * it. Callbacks never fire from inside this call. */
void api_body_read(const struct api_body *b, api_body_data_cb *on_data, api_body_end_cb *on_end,
                   void *userdata);
void api_body_pause(const struct api_body *b, bool pause);
/* No more callbacks (the request is gone or answered). */
void api_body_cancel(const struct api_body *b);

/* api_request_json() over the request's body (evhttp read it whole, within http.max_body_bytes). */
int api_body_json(struct evhttp_request *req, bool allow_empty, json_t **ret, struct err *reterr);
/* Authenticates a tenant; on failure replies 401 (403 for the admin token) and returns NULL. */
const struct cfg_tenant *api_require_tenant(struct api *a, struct evhttp_request *req);
/* Authenticates the admin; on failure replies 401 (403 for a tenant's token) and returns false. */
bool api_require_admin(struct api *a, struct evhttp_request *req);

/* Who made a request on a session. */
struct api_actor {
    bool admin;
    char name[80]; /* "tenant:<id>" or "admin" (audit) */
};
/* Authenticates a tenant or the admin and finds the session with this id: the tenant's own, or
 * any tenant's for the admin. NULL after replying 401 or 404 (another tenant's session is
 * exactly as absent as an unknown one). */
struct session *api_session_for(struct api *a, struct evhttp_request *req, const char *id,
                                struct api_actor *ret);
/* Ends s and answers 204 (or the error). */
void api_session_delete(struct api *a, struct evhttp_request *req, struct session *s,
                        const struct api_actor *who);

/* ---- request validation (request.c) ----
 *
 * Pure: no evhttp request, no loop; fuzzed by tests/fuzz/fuzz-api-request.c. Each returns 0, or
 * a negative errno with the message the client receives (api_reply_error(req, e.code, "%s",
 * e.msg)). ret_* are written only on success. */

/* Parses len bytes of data (need not be NUL-terminated; NULL when len is 0) as a JSON object;
 * no bytes at all give an empty object with allow_empty, and are refused without. 0 with a new
 * reference in *ret, or -EINVAL. */
int api_request_json(const char *data, size_t len, bool allow_empty, json_t **ret,
                     struct err *reterr);

/* The body of POST /v1/sessions. */
struct api_create_body {
    const char *profile;     /* borrowed from the body; NULL: the tenant's first profile */
    unsigned idle_timeout_s; /* 0: the profile's */
    char *metadata_json;     /* owned: 'metadata' as compact text with sorted keys, or NULL */
};
/* Validates a create body (a JSON object): -EINVAL for an unknown field or a wrong type,
 * -EMSGSIZE for metadata over 4 KiB. The caller frees ret->metadata_json. */
int api_request_create(json_t *body, struct api_create_body *ret, struct err *reterr);
/* Validates an execute body (a JSON object): exactly one of "code" (a string) and "command" (1 to
 * 4096 strings without NUL), and an optional "timeout_s". ret->code or ret->argv is borrowed from
 * body. -EINVAL otherwise. */
int api_request_exec(json_t *body, struct exec_req *ret, struct err *reterr);

/* Percent-decodes the {path} of a files URL into *ret (malloc'd, ret_len bytes, may hold a NUL:
 * files_normalize() refuses it). -EINVAL. */
int api_request_path(const char *encoded, char **ret, size_t *ret_len, struct err *reterr);
/* Checks a decoded client path (len bytes) and normalizes it into out (files_normalize(), which
 * says what allow_root and out are): -EINVAL for ill-formed UTF-8, which could not reach the
 * engine in JSON, or for what files_normalize() refuses. */
int api_request_file_path(const char *path, size_t len, bool allow_root, char *out, size_t out_n,
                          struct err *reterr);
/* The decoded "dir" parameter of a query string (query may be NULL) into *ret_dir (malloc'd, or
 * NULL when absent). -EINVAL for a malformed query or an encoded NUL. */
int api_request_dir(const char *query, char **ret_dir, struct err *reterr);
