/* The HTTP front end: evhttp server, route table, JSON replies and the single errno -> HTTP
 * status mapping (STYLE.md §4).
 *
 * The api module knows nothing about curl or Redis: what it needs from the rest of the daemon
 * comes through struct api_backend, filled in by the server. Every handler sends exactly one
 * reply. Loop context only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"
#include "util/buf.h"
#include "util/err.h"

struct event_base;
struct docker_client;
struct evhttp_request;
struct pool;
struct session_manager;
struct api;

typedef struct json_t json_t;

/* Dependency checks for /readyz, answered by the server. */
struct api_backend {
    struct pool **pools; /* borrowed array of n_pools */
    size_t n_pools;
    struct session_manager *sessions; /* borrowed */
    struct docker_client *engine;     /* borrowed: file transfers exec in the sandboxes */
    /* Returns true when the engine answered recently; writes a reason otherwise. */
    bool (*engine_ok)(void *userdata, char *why, size_t n);
    bool (*redis_ok)(void *userdata, char *why, size_t n);
    bool (*draining)(void *userdata);
    /* Appends Prometheus text exposition of every metric to out. */
    void (*metrics)(void *userdata, struct buf *out);
    void *userdata;
};

/* Binds cfg->listen and starts serving. cfg and backend are borrowed and must outlive the api.
 * Errors: -EADDRINUSE, -EACCES, -EINVAL with a message. */
int api_new(struct event_base *base, const struct cfg *cfg, const struct api_backend *backend,
            struct api **ret, struct err *reterr);
/* Stops listening and frees; open requests are dropped. Accepts NULL. */
struct api *api_free(struct api *a);
/* Stops accepting new connections (drain); requests in progress go on. */
void api_stop_listening(struct api *a);

/* Maps a negative errno to {HTTP status, error code}. The one table of the project. */
struct api_status {
    int status;
    const char *code;
    const char *reason;
    bool retry_after;
};
const struct api_status *api_status_from_errno(int r);

/* Sends body (stolen) as JSON with status. */
void api_reply_json_new(struct evhttp_request *req, int status, json_t *body);
/* Sends {"error": {"code", "message"}} for errno r (Retry-After where the table says so). */
void api_reply_error(struct evhttp_request *req, int r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
