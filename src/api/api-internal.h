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
struct hashmap;
struct session;

#define API_MAX_HEADERS_BYTES 16384u
#define API_CONN_TIMEOUT_S    60 /* a connection idle this long (reading or writing) is closed */

struct api {
    struct event_base *base;           /* borrowed */
    const struct cfg *cfg;             /* borrowed */
    const struct api_backend *backend; /* borrowed */
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    struct hashmap *conns; /* the filter bufferevent's address -> struct api_conn (body.c) */
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

/* File endpoints (files.c). params[1] is the raw (still percent-encoded) file path. */
api_handler_fn api_files_list;
api_handler_fn api_files_get;
api_handler_fn api_files_put;
api_handler_fn api_files_delete;

/* ---- streamed request bodies (body.c) ---- */

struct api_conn;
/* evhttp_set_bevcb callback: the bufferevent of a new connection, with the body filter. */
struct bufferevent *api_conn_bev_new(struct event_base *base, void *arg);
/* The body this request's connection holds back for its handler, or NULL when evhttp read the
 * body (if any) the usual way. */
struct api_conn *api_body_held(struct api *a, struct evhttp_request *req);
uint64_t api_body_length(const struct api_conn *c);
/* True until every byte of the held body was read. */
bool api_body_unread(const struct api_conn *c);
/* The bytes still to read. */
uint64_t api_body_left(const struct api_conn *c);
/* The client asked for "100 Continue" and got none yet: it waits before sending the body, so an
 * answer now needs nothing read (the connection then closes, see api.c). */
bool api_body_awaits_continue(const struct api_conn *c);
/* Sends "100 Continue" if the client asked for it and nothing was read yet. */
void api_body_continue(struct api_conn *c);
typedef void api_body_data_cb(const char *data, size_t n, void *userdata);
/* r == 0: every byte came; r < 0: the client went away, stopped sending for API_CONN_TIMEOUT_S
 * (-ETIMEDOUT) or the socket failed. The connection is unusable after a failure. */
typedef void api_body_end_cb(int r, void *userdata);
/* Starts reading the held body (sending "100 Continue" first when asked for). on_data NULL
 * discards it. Callbacks never fire from inside this call. */
void api_body_read(struct api_conn *c, api_body_data_cb *on_data, api_body_end_cb *on_end,
                   void *userdata);
void api_body_pause(struct api_conn *c, bool pause);
/* No more callbacks (the request is gone or answered). */
void api_body_cancel(struct api_conn *c);

/* Parses the request body as a JSON object (an empty body gives an empty object when
 * allow_empty). 0 with a new reference, or -EINVAL/-EMSGSIZE with a message in reterr. */
int api_body_json(struct evhttp_request *req, bool allow_empty, json_t **ret, struct err *reterr);
/* Authenticates a tenant; on failure replies 401 and returns NULL. */
const struct cfg_tenant *api_require_tenant(struct api *a, struct evhttp_request *req);
/* The tenant's session with this id, or NULL after replying 404. */
struct session *api_find_session(struct api *a, struct evhttp_request *req,
                                 const struct cfg_tenant *t, const char *id);
