/* Shared by the files of the api module only. */
#pragma once

#include <stdbool.h>

#include "api/api.h"
#include "api/auth.h"

struct evhttp;
struct evhttp_bound_socket;

struct api {
    struct event_base *base;           /* borrowed */
    const struct cfg *cfg;             /* borrowed */
    const struct api_backend *backend; /* borrowed */
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
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

/* Parses the request body as a JSON object (an empty body gives an empty object when
 * allow_empty). 0 with a new reference, or -EINVAL/-EMSGSIZE with a message in reterr. */
int api_body_json(struct evhttp_request *req, bool allow_empty, json_t **ret, struct err *reterr);
/* Authenticates a tenant; on failure replies 401 and returns NULL. */
const struct cfg_tenant *api_require_tenant(struct api *a, struct evhttp_request *req);
