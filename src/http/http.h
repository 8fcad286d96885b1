/* The HTTP core: listeners, connection admission, the body filter, auth, routing and JSON
 * replies, the files gate, the queues of calls waiting for a sandbox, and forwarding between
 * nodes. It names no protocol: REST (src/rest), MCP (src/mcp) and E2B (src/e2b) each hand it a
 * struct http_protocol, their routes and the state they keep, and the server wires them in
 * (docs/internals/architecture.md). Errors are answered from the project's one errno -> HTTP
 * status -> code table, util/errcode.h (docs/internals/style.md §4).
 *
 * The core knows nothing about curl or Redis: what it needs from the rest of the daemon comes
 * through struct http_backend, filled in by the server. Every handler sends exactly one reply.
 * Loop context only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "metrics/metrics.h"
#include "util/buf.h"
#include "util/err.h"

struct event_base;
struct docker_client;
struct evhttp_request;
struct pool;
struct route;
struct session_manager;
struct store_redis;
struct http;

typedef struct json_t json_t;

/* What the node takes on. */
enum http_drain {
    HTTP_SERVING,  /* everything */
    HTTP_DRAINED,  /* POST /v1/admin/drain: no new sessions; existing ones go on until idle */
    HTTP_LEAVING,  /* SIGTERM, for shutdown_delay_s: not ready, no new sessions; existing ones
                    * are served as before while the endpoint is taken out of rotation */
    HTTP_STOPPING, /* after that: no new sessions nor executions, no new connections */
};

/* GET /v1/admin/policy: the server's drift check report (borrowed for the call). */
typedef void http_policy_cb(json_t *report, void *arg);
struct http_policy_wait;

/* Dependency checks for /readyz, answered by the server. */
struct http_backend {
    struct pool **pools; /* borrowed array of n_pools */
    size_t n_pools;
    struct session_manager *sessions; /* borrowed */
    struct snapshots *snapshots;      /* borrowed; NULL: snapshots are off (501) */
    struct docker_client *engine;     /* borrowed: file transfers exec in the sandboxes */
    struct store_redis *redis;        /* borrowed: the MCP sessions' records */
    struct registry *registry;        /* borrowed: the node registry's view (admin) */
    struct route *route;              /* borrowed: where other nodes' sessions are (forward.c) */
    /* Returns true when the engine answered recently; writes a reason otherwise. */
    bool (*engine_ok)(void *userdata, char *why, size_t n);
    bool (*redis_ok)(void *userdata, char *why, size_t n);
    enum http_drain (*drain_state)(void *userdata);
    /* Admin: drain (true) or undrain (false) this node. */
    void (*set_drained)(void *userdata, bool drained);
    /* Admin: runs a policy drift check (or joins the one in flight) and quarantines what drifted;
     * cb once with the report, never from inside the call, unless cancelled first. */
    struct http_policy_wait *(*policy_check)(void *userdata, http_policy_cb *cb, void *arg);
    void (*policy_cancel)(void *userdata, struct http_policy_wait *w);
    /* Appends Prometheus text exposition of every metric to out; the series that name tenants
     * only with tenants (the request carried the metrics or the admin token). */
    void (*metrics)(void *userdata, bool tenants, struct buf *out);
    void *userdata;
};

/* Connection slots of the health listener (http.health_listen): probes and scrapes. */
#define HTTP_HEALTH_MAX_CONNECTIONS 64u
/* An anonymous request is answered at once (health, 401, the open /metrics): a connection whose
 * reply is still untaken after this long is a victim at the cap (src/http/conns.c). */
#define HTTP_ANON_BUSY_MS 1000u
/* The listen backlog (the kernel holds these, not the daemon). */
#define HTTP_LISTEN_BACKLOG 511u
/* Descriptors a listener's clients hold past its slots: newcomers past the cap not looked at
 * yet, and closed connections evhttp has not freed yet (src/http/conns.c: PAST_CAP_MAX and
 * CLOSING_MAX, 4 each). */
#define HTTP_CONNS_SLACK 8u

/* A request handler; params[] are the route's "*" segments (for a route ending in "**", params[1]
 * is the rest of the path, still percent-encoded). */
typedef void http_handler_fn(struct http *h, struct evhttp_request *req, const char *const *params);

/* A route's handler reads the request body itself, as it comes (http_body_read()): the filter
 * holds such a body back from evhttp (body.c). */
#define HTTP_ROUTE_STREAMED_BODY 0x1u
/* ... a chunked one too (the handler takes a body of unknown length: http_body_chunked()). */
#define HTTP_ROUTE_STREAMED_CHUNKED 0x2u

/* {method, flags, path pattern, handler}: a pattern segment "*" matches one path segment, a
 * final "**" the non-empty rest of the path. The first route a path matches gives its flags. */
struct http_route {
    int method; /* enum evhttp_cmd_type */
    unsigned flags;
    const char *pattern;
    http_handler_fn *handler;
};

/* A protocol the core serves (curl's struct Curl_handler is the model): its routes, and the state
 * it keeps while the server lives. The core calls nothing else of it. */
struct http_protocol {
    const char *name;
    const struct http_route *routes;
    size_t n_routes;
    /* The protocol's state, once the core is set up (routes may not run yet); NULL: the protocol
     * keeps none, or is off (its handlers then see NULL). Optional. */
    void *(*start)(struct http *h);
    /* First thing in http_free(), before evhttp frees the connections: the protocol's calls stop
     * watching them (a protocol that frees its state here has no free()). Optional. */
    void (*stop)(void *state);
    /* After evhttp freed every connection (their close callbacks ran). Optional. */
    void (*free)(void *state);
};
/* What p's start() returned (NULL when p is not served). */
void *http_protocol_state(const struct http *h, const struct http_protocol *p);

/* Binds cfg->listen and starts serving the n protocols (borrowed, each served once, in this order
 * after the core's own /healthz, /readyz and /metrics). cfg and backend are borrowed and must
 * outlive the core. Errors: -EADDRINUSE, -EACCES, -EINVAL with a message. */
int http_new(struct event_base *base, const struct cfg *cfg, const struct http_backend *backend,
             const struct http_protocol *const *protocols, size_t n, struct http **ret,
             struct err *reterr);
/* Stops listening and frees (the protocols' state first); open requests are dropped. Accepts
 * NULL. */
struct http *http_free(struct http *a);
/* Stops accepting new connections (drain); requests in progress go on. */
void http_stop_listening(struct http *a);

struct http_stats {
    uint64_t upload_bytes;   /* file bytes sent into sandboxes (PUT .../files/...) */
    uint64_t download_bytes; /* file bytes sent to clients (GET .../files/...) */
    /* client connections of the main listener (conns.c) */
    unsigned conns_idle, conns_busy, conns_anonymous, conns_lingering, conns_closing;
    uint64_t conns_evicted_total;        /* closed for a newcomer (at the cap, or its peer's) */
    uint64_t conns_refused_total;        /* refused: their peer's share was all busy */
    uint64_t conns_linger_skipped_total; /* closed at once: no lingering slot was free */
    /* file operations at the gate (gate.c) */
    unsigned files_inflight, files_waiting;
    uint64_t files_queued_total;  /* had to wait */
    uint64_t files_refused_total; /* answered 429: waited in vain, or too many waiting */
    /* calls waiting for a busy sandbox (waiting.c) */
    uint64_t waiting_bytes, waiting_calls;
    uint64_t waiting_refused_total; /* over a byte budget or their sandbox's queue */
    /* pauses, hibernations and snapshots tenants asked for (bucket.c): let through, refused */
    uint64_t engine_ops_total, engine_ops_refused_total;
    unsigned websockets; /* WebSocket streams open (ws.c) */
};
void http_get_stats(const struct http *a, struct http_stats *ret);

/* Requests for sessions on other nodes (forward.c). */
enum http_forward_outcome {
    HTTP_FWD_OK,          /* the owner's answer went to the client, whatever its status */
    HTTP_FWD_UNREACHABLE, /* the owner did not answer: 503 */
    HTTP_FWD_BROKEN,      /* its answer broke off mid-stream: so did the client's */
    HTTP_FWD_CLIENT_GONE, /* the client went first: the owner's call was cancelled */
    HTTP_FWD__COUNT,
};
const char *http_forward_outcome_name(enum http_forward_outcome o);
struct http_forward_stats {
    uint64_t outcomes[HTTP_FWD__COUNT];
    uint64_t verdicts[5];        /* by enum route_verdict: forward, none, down, unavailable, here */
    uint64_t placed;             /* creates sent to another node (no warm container here) */
    uint64_t peer_failures;      /* calls to owners that failed (refused, timed out, broke) */
    struct metrics_hist latency; /* until the owner's answer began */
    unsigned in_flight;
};
void http_get_forward_stats(const struct http *a, struct http_forward_stats *ret);

/* The reply to req closes its connection ("Connection: close", once). */
void http_reply_close(struct evhttp_request *req);
/* Sends body (stolen) as JSON with status. */
void http_reply_json_new(struct evhttp_request *req, int status, json_t *body);
/* Sends {"error": {"code", "message"}} for errno r, with the status, code and Retry-After of
 * errcode_from_errno(r). */
void http_reply_error(struct evhttp_request *req, int r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
