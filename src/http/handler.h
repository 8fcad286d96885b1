/* What a protocol's handlers use of the HTTP core (src/rest, src/mcp and src/e2b include this,
 * never http-internal.h): the core's state, authorization, the sessions a request names and waits
 * for, the files gate, the engine-operation buckets, forwarding and lists across nodes, held
 * request bodies and the shared request validators. Loop context only but where a section says
 * pure. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/http.h>

#include "http/auth.h"
#include "http/http.h"
#include "http/waiting.h"
#include "http/ws.h"
#include "util/buf.h"
#include "util/macro.h"

struct evhttp;
struct evhttp_bound_socket;
struct exec_req;
struct http_conns;
struct http_conn;
struct http_gate;
struct http_buckets;
struct http_forwarder;
struct gather;
struct session;
struct err;

#define HTTP_MAX_HEADERS_BYTES 8192u /* a request head's lines (evhttp's limit) */
#define HTTP_CONN_TIMEOUT_S    60 /* a connection idle this long (reading or writing) is closed */

/* The core's state. Handlers read cfg, backend, base and the shared bounds (files_gate, waiting);
 * the rest is the core's. */
#define HTTP_PROTOCOLS_MAX 8

struct http {
    struct event_base *base;            /* borrowed */
    const struct cfg *cfg;              /* borrowed */
    const struct http_backend *backend; /* borrowed */
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    struct http_conns *conns; /* conns.c: the main listener's connections */
    /* http.health_listen: /healthz, /readyz and /metrics only, with connections of their own,
     * so that a flood of the main port never reaches the kubelet's probes. */
    struct evhttp *health_http;
    struct evhttp_bound_socket *health_bound;
    struct http_conns *health_conns;
    char health_unix_path[108];
    struct http_routes *routes;          /* http.c: the core's, then each protocol's */
    struct http_gate *files_gate;        /* gate.c: the files API's engine operations in flight */
    struct http_waiting_budget *waiting; /* waiting.c: what calls waiting for a sandbox hold */
    struct http_buckets *engine_ops;     /* bucket.c: pauses, hibernations, snapshots per tenant */
    struct {
        const struct http_protocol *protocol; /* borrowed */
        void *state;                          /* its start()'s */
    } protocols[HTTP_PROTOCOLS_MAX];
    size_t n_protocols;
    struct http_stats stats;
    struct http_forwarder *forwarder; /* forward.c; NULL without a route (no Redis) */
    struct gather *gathers;           /* lists across nodes under way (gather.c), linked */
    struct http_ws *websockets;       /* WebSocket streams (ws.c), linked */
    char unix_path[108];
};

/* ---- a request answered later (pending.c) ----
 *
 * What every asynchronous handler keeps (REST's calls, MCP's calls, E2B's waits and runs, the
 * forwarder, the lists across nodes, the waits for a live session): the request, its connection,
 * the log's request id for the lines of its completion, and what to do when the client goes
 * first. Embedded in the handler's own struct. Loop context only. */

struct http_pending;
/* The client went away before the answer: p->req is NULL now (a request evhttp detached and left
 * to its handler is freed: libevent 2.1, evhttp_connection_incoming_fail). The owner cancels what
 * it started and may free itself. Never called after http_pending_end(). */
typedef void http_pending_gone_fn(struct http_pending *p);
struct http_pending {
    struct evhttp_request *req; /* NULL once the client went away, or once ended */
    struct evhttp_connection *conn;
    http_pending_gone_fn *gone;
    char request[33]; /* the log's request id when it began (LOG_REQUEST_ID_MAX + 1) */
};
/* Starts watching req's connection (gone: the owner's callback, never NULL). */
void http_pending_start(struct http_pending *p, struct evhttp_request *req,
                        http_pending_gone_fn *gone);
/* Stops watching: call it before (or just after) sending the answer, and before freeing the owner.
 * p->req is NULL afterwards. Idempotent; harmless after the client went. */
void http_pending_end(struct http_pending *p);
/* The request went to another owner that watches the connection itself now (the forwarder): p
 * forgets it without touching the connection. */
void http_pending_handoff(struct http_pending *p);
/* The request's log id again, for the lines a completion writes (log_set_request()). */
void http_pending_log(const struct http_pending *p);

/* ---- the files API's gate (gate.c) ----
 *
 * Engine operations of the files API in flight, bounded per session, per tenant and in all; see
 * gate.c. Loop context only. */

#define HTTP_GATE_WAIT_MS      10000u /* a waiting operation is refused (429) after this */
#define HTTP_GATE_LEFT_HOLD_MS 500u   /* http_gate_leave_later() */

struct http_gate_limits {
    unsigned per_session, per_tenant, max;
    unsigned per_tenant_queue; /* waiting at most */
};
struct http_gate_stats {
    unsigned inflight, waiting;
    uint64_t queued_total, refused_total;
};
struct http_gate;
struct http_gate_waiter;
/* r == 0: the operation is in (it must http_gate_leave() when it ends); -EDQUOT: it waited
 * HTTP_GATE_WAIT_MS in vain. Never called from inside http_gate_enter() or http_gate_leave(). */
typedef void http_gate_cb(int r, void *arg);
struct http_gate *http_gate_new(struct event_base *base, const struct http_gate_limits *lim);
void http_gate_free(struct http_gate *g);
/* 0: in now (*ret NULL); 1: waiting (*ret, until cb, or http_gate_cancel()); -EDQUOT: its
 * tenant has per_tenant_queue waiting already (refuse it). ids are copied. */
int http_gate_enter(struct http_gate *g, const char *tenant, const char *session, http_gate_cb *cb,
                    void *arg, struct http_gate_waiter **ret);
void http_gate_cancel(struct http_gate_waiter *w);
/* An operation that entered ended. */
void http_gate_leave(struct http_gate *g, const char *tenant, const char *session);
/* The same, HTTP_GATE_LEFT_HOLD_MS from now: for an operation whose client left while the
 * engine still works on it (at most one per operation in, so bounded by the gate). */
void http_gate_leave_later(struct http_gate *g, const char *tenant, const char *session);
void http_gate_get_stats(const struct http_gate *g, struct http_gate_stats *ret);

/* A token of a->engine_ops for an operation of tenant (what: "pauses", ...): 0, or -EDQUOT with
 * reterr saying why (answered 429 quota_exceeded with Retry-After). */
int http_engine_op(struct http *a, const char *tenant, const char *what, struct err *reterr);

/* ---- sessions other nodes hold (forward.c, docs/cluster.md#routing) ---- */

/* A request forwarded by a node carries this (that node's id): it is never forwarded again. */
#define HTTP_FORWARDED_HEADER "X-Sandpool-Forwarded"
/* A forwarded answer carries this: the node that answered. */
#define HTTP_NODE_HEADER "X-Sandpool-Node"
/* A list across nodes that is an array (E2B's) carries one per node that did not answer. */
#define HTTP_MISSING_NODE_HEADER "X-Sandpool-Missing-Node"
struct http_forwarder;
struct route_answer;
struct gather;
/* How a routed request that is not forwarded is answered, by the layer it came through and in
 * its shapes (the E2B and MCP routes'); NULL members (or a NULL style): REST's. */
struct http_route_style {
    /* ROUTE_NONE (no such session: ans->why, ans->node_lost) or ROUTE_HERE (an MCP session this
     * node serves after all): req is the layer's again. */
    void (*here)(struct http *a, struct evhttp_request *req, const struct route_answer *ans);
    /* A refusal: err -ENOTCONN (503: its node cannot be reached now; a Retry-After is due) or
     * -EINVAL (400), with msg. */
    void (*refuse)(struct http *a, struct evhttp_request *req, int err, const char *msg);
};
/* req, authenticated, names session id (of tenant; NULL: the admin asks, or an E2B sandbox's
 * own token, which its owner checks), which this node does not hold: answered by its owner
 * (forwarded), or here with 404 (no such session) or 503 (its node cannot be reached now, or
 * this node cannot tell yet: the node registry not read or its own sessions not loaded since it
 * started), in style's shapes (NULL: REST's). */
void http_forward_session(struct http *a, struct evhttp_request *req, const char *id,
                          const char *tenant, const struct http_route_style *style);
/* req names the MCP session id (on /mcp) of tenant, which this node does not hold: forwarded to
 * the node that serves it (route_find_mcp()), or style->here() when that is this one. */
void http_forward_mcp(struct http *a, struct evhttp_request *req, const char *id,
                      const char *tenant, const struct http_route_style *style);
/* The forwarder's HTTP client (gather.c's calls go through it too). */
struct peer_client *http_forwarder_peers(struct http *a);
/* What a list across nodes answers (gather.c). */
struct http_gather_spec {
    /* {member: [...]}, with "missing_nodes" naming the nodes that did not answer; NULL: the
     * answer is the array alone (E2B's list; HTTP_MISSING_NODE_HEADER names them). */
    const char *member;
    /* All nodes' items, before they are sent: a page is cut here (more: a node said there are
     * more, with X-Next-Token); NULL: all of them, in the nodes' order. */
    void (*merge)(struct http *a, struct evhttp_request *req, json_t *list, bool more);
    /* A refusal (503: too many lists under way), in the layer's shapes (NULL: REST's). */
    void (*refuse)(struct http *a, struct evhttp_request *req, int err, const char *msg);
};
/* A list request (GET) whose answer is this node's items, local (more: this node has more than
 * it listed): when other nodes share this one's Redis, every live node is asked for its own
 * with the same request, and the answer is all of them as spec says; true, local taken. A
 * request with the hop marker (another node's, or a client's) is answered with local alone,
 * every other node named missing; true too. false: answer local alone (still the caller's: no
 * other node). who (a tenant's id, or "(admin)", which no tenant id is) has at most
 * GATHER_PER_CLIENT of them under way, the node GATHER_MAX: then 503; so is a list before the
 * node registry's first read (which nodes to ask is not known yet). */
bool http_gather(struct http *a, struct evhttp_request *req, const struct http_gather_spec *spec,
                 const char *who, json_t *local, bool more);
/* {"sessions": [...]}: the REST and admin lists. */
extern const struct http_gather_spec http_gather_sessions;
/* Whether other nodes may share this one's Redis (the registry's last read), so that routing
 * has a point: true too before the registry's first read (this node cannot know yet that it is
 * alone; the route then answers 503). */
bool http_clustered(const struct http *a);
/* req goes to node (at url) as it is, and is answered from there (placement of a create). */
void http_forward_to(struct http *a, struct evhttp_request *req, const char *node, const char *url);
/* A create of profile (NULL: the first) that another node should take: this one has no warm
 * container for it, or is draining, and the registry names a better node (registry_place()).
 * True when req went there (and is answered from there). */
bool http_place(struct http *a, struct evhttp_request *req, const char *profile, bool draining);
/* req came from another node (it carries HTTP_FORWARDED_HEADER): it is never forwarded again. */
bool http_forwarded(struct evhttp_request *req);

/* A request on req's connection carried a valid token. */
void http_conn_authenticated(struct http_conns *reg, struct evhttp_request *req);

/* A body the connection holds back for its request's handler. */
struct http_body {
    struct http_conn *conn;
    uint64_t seq; /* which of the connection's held bodies */
};
/* True, with *ret, when this request's body is held for its handler; false when evhttp read the
 * body (if any) the usual way. */
bool http_body_held(struct http_conns *reg, struct evhttp_request *req, struct http_body *ret);
uint64_t http_body_length(const struct http_body *b);
/* The body is chunked (while it is the connection's current one): its length is known once it
 * was read; http_body_length() gives the bytes read so far until then. */
bool http_body_chunked(const struct http_body *b);
/* True until every byte of the body was read (also after a failed read). While it is, the
 * connection must close after the reply: api.c adds "Connection: close" to such requests, and a
 * handler that read the whole body removes it. */
bool http_body_unread(const struct http_body *b);
/* The client asked for "100 Continue" and got none yet: it waits before sending the body. */
bool http_body_awaits_continue(const struct http_body *b);
typedef void http_body_data_cb(const char *data, size_t n, void *userdata);
/* r == 0: every byte came; r < 0: the client went away, stopped sending for HTTP_CONN_TIMEOUT_S
 * (-ETIMEDOUT) or the socket failed. The connection is unusable after a failure. */
typedef void http_body_end_cb(int r, void *userdata);
/* Starts reading the body (sending "100 Continue" first when asked for). on_data NULL discards
 * it. Callbacks never fire from inside this call. */
void http_body_read(const struct http_body *b, http_body_data_cb *on_data, http_body_end_cb *on_end,
                    void *userdata);
void http_body_pause(const struct http_body *b, bool pause);
/* No more callbacks (the request is gone or answered). */
void http_body_cancel(const struct http_body *b);

/* http_request_json() over the request's body (evhttp read it whole, within http.max_body_bytes).
 */
int http_body_json(struct evhttp_request *req, bool allow_empty, json_t **ret, struct err *reterr);

/* ---- authorization (auth.c) ----
 *
 * Every handler authorizes its request first, through one of these; the ones that can refuse
 * answer the request themselves and return NULL or false. */

/* http_auth() of req, and a connection that carried a valid token counts as authenticated from
 * then on (conns.c). */
enum auth_role http_authenticate(struct http *a, struct evhttp_request *req,
                                 const struct cfg_tenant **ret_tenant);
/* The open endpoints (/healthz, /readyz) need no token, but one offered is checked: a valid one
 * keeps the connection open (an anonymous connection gets one answer, body.c). Never replies. */
void http_authenticate_offered(struct http *a, struct evhttp_request *req);
/* Authenticates a tenant; on failure replies 401 (403 for the admin token) and returns NULL. */
const struct cfg_tenant *http_require_tenant(struct http *a, struct evhttp_request *req);
/* Authenticates the admin; on failure replies 401 (403 for a tenant's token) and returns false. */
bool http_require_admin(struct http *a, struct evhttp_request *req);

/* Who made a request on a session. */
struct http_actor {
    bool admin;
    char name[80]; /* "tenant:<id>" or "admin" (audit) */
};
/* Authenticates a tenant or the admin and finds the session with this id: the tenant's own, or
 * any tenant's for the admin. NULL after replying 401 or 404 (another tenant's session is
 * exactly as absent as an unknown one). */
struct session *http_session_for(struct http *a, struct evhttp_request *req, const char *id,
                                 struct http_actor *ret);
/* http_session_for() for a call that needs the session's container (a route with the session id as
 * its one parameter): a paused session is resumed first and self(a, req, {id}) called again once
 * it is live. NULL after replying, or while it waits. */
struct session *http_session_live(struct http *a, struct evhttp_request *req,
                                  const char *const *params, http_handler_fn *self,
                                  struct http_actor *ret);
/* The same for a session the handler found and authorized itself: 0 when it is live (go on), 1
 * when it waits (self(a, req, params) runs again once it is live; params: two entries, either may
 * be NULL, copied), or a negative errno (reply it). */
int http_live_wait(struct http *a, struct evhttp_request *req, struct session *s,
                   const char *const *params, http_handler_fn *self, struct err *reterr);
/* The admin endpoints' version: the admin token only (401/403 otherwise, as http_require_admin()),
 * any tenant's session with this id (404 otherwise); *ret is the admin. */
struct session *http_admin_session_for(struct http *a, struct evhttp_request *req, const char *id,
                                       struct http_actor *ret);

/* ---- request validation (request.c) ----
 *
 * Pure: no evhttp request, no loop; fuzzed by tests/fuzz/fuzz-api-request.c. Each returns 0, or
 * a negative errno with the message the client receives (http_reply_error(req, e.code, "%s",
 * e.msg)). ret_* are written only on success. */

/* Parses len bytes of data (need not be NUL-terminated; NULL when len is 0) as a JSON object;
 * no bytes at all give an empty object with allow_empty, and are refused without. 0 with a new
 * reference in *ret, or -EINVAL. */
int http_request_json(const char *data, size_t len, bool allow_empty, json_t **ret,
                      struct err *reterr);

/* The body of POST /v1/sessions. */
struct http_create_body {
    const char *profile;     /* borrowed from the body; NULL: the tenant's first profile */
    unsigned idle_timeout_s; /* 0: the profile's */
    unsigned pause_after_s;  /* 0: the profile's */
    const char *snapshot;    /* borrowed: the snapshot to restore it from, or NULL */
    const char *idle_action; /* borrowed: "end", "hibernate" (checked by the session), or NULL */
    char *metadata_json;     /* owned: 'metadata' as compact text with sorted keys, or NULL */
    char *egress_json;       /* owned: 'egress' (a narrowing of the profile's list) as compact
                              * text, or NULL; the session checks it against the profile */
};
/* Validates a create body (a JSON object): -EINVAL for an unknown field, a wrong type or an
 * 'egress' that is no narrowing (rules.h), -EMSGSIZE for metadata or egress over 4 KiB.
 * http_create_body_done() frees what it holds. */
int http_request_create(json_t *body, struct http_create_body *ret, struct err *reterr);
/* A create's "metadata" (NULL or null: *ret_text NULL; else an object of at most 32 strings, as
 * compact text with sorted keys, 4 KiB at most) and "egress" (a narrowing of a profile's list,
 * egress/rules.h, as compact text): the checks of http_request_create(), for a protocol whose
 * create says the same in its own shape (E2B's). 0 with *ret_text malloc'd, or -EINVAL,
 * -EMSGSIZE. */
int http_request_metadata(json_t *meta, char **ret_text, struct err *reterr);
int http_request_egress(json_t *eg, char **ret_text, struct err *reterr);
void http_create_body_done(struct http_create_body *cb);
/* Validates an execute body (a JSON object): exactly one of "code" (a string) and "command" (1 to
 * 4096 strings without NUL), and an optional "timeout_s". ret->code or ret->argv is borrowed from
 * body. -EINVAL otherwise. */
int http_request_exec(json_t *body, struct exec_req *ret, struct err *reterr);

/* Percent-decodes the {path} of a files URL into *ret (malloc'd, ret_len bytes, may hold a NUL:
 * files_normalize() refuses it). -EINVAL. */
int http_request_path(const char *encoded, char **ret, size_t *ret_len, struct err *reterr);
/* Checks a decoded client path (len bytes) and normalizes it into out (files_normalize(), which
 * says what allow_root and out are): -EINVAL for ill-formed UTF-8, which could not reach the
 * engine in JSON, or for what files_normalize() refuses. */
int http_request_file_path(const char *path, size_t len, bool allow_root, char *out, size_t out_n,
                           struct err *reterr);
/* The decoded "dir" parameter of a query string (query may be NULL) into *ret_dir (malloc'd, or
 * NULL when absent). -EINVAL for a malformed query or an encoded NUL. */
int http_request_dir(const char *query, char **ret_dir, struct err *reterr);
