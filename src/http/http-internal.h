/* Shared by the files of the api module only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include <event2/http.h>

#include "http/http.h"
#include "http/auth.h"
#include "http/waiting.h"
#include "util/buf.h"
#include "util/chunked.h"
#include "util/macro.h"

struct bufferevent;
struct event_base;
struct evhttp;
struct evhttp_bound_socket;
struct http_conns;
struct evconnlistener;
struct exec_req;
struct e2b_run;
struct mcp_server;
struct session;

#define HTTP_MAX_HEADERS_BYTES 8192u /* a request head's lines (evhttp's limit) */
#define HTTP_CONN_TIMEOUT_S    60    /* a connection idle this long (reading or writing) is closed */
/* Lingering closes at once (conns.c), within the connection slots. */
#define HTTP_LINGER_MAX(max_connections) MIN(64u, MAX(1u, (max_connections) / 16u))

struct http {
    struct event_base *base;           /* borrowed */
    const struct cfg *cfg;             /* borrowed */
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
    struct http_gate *files_gate;        /* gate.c: the files API's engine operations in flight */
    struct http_waiting_budget *waiting; /* waiting.c: what calls waiting for a sandbox hold */
    struct http_buckets *engine_ops;     /* bucket.c: pauses, hibernations, snapshots per tenant */
    struct mcp_server *mcp;             /* mcp-sessions.c; NULL when MCP is off */
    TAILQ_HEAD(, e2b_run) e2b_runs;     /* e2b-run.c: E2B executions in progress */
    struct e2b_stats e2b_stats;     /* running and waiting are counted when asked */
    struct http_stats stats;
    struct http_forwarder *forwarder; /* forward.c; NULL without a route (no Redis) */
    struct gather *gathers;          /* lists across nodes under way (gather.c), linked */
    char unix_path[108];
};

/* A request handler; path is the decoded path, params[] its "*" segments. */
typedef void http_handler_fn(struct http *a, struct evhttp_request *req, const char *const *params);

/* Session endpoints (sessions.c). */
http_handler_fn rest_sessions_create;
http_handler_fn rest_sessions_list;
http_handler_fn rest_sessions_get;
http_handler_fn rest_sessions_delete;
http_handler_fn rest_sessions_execute;
http_handler_fn rest_sessions_interrupt;
http_handler_fn rest_sessions_restart;
http_handler_fn rest_sessions_executions;
http_handler_fn rest_sessions_pause;
http_handler_fn rest_sessions_hibernate;
http_handler_fn rest_sessions_wake;

/* Snapshot endpoints (snapshots.c). */
http_handler_fn rest_snapshots_take;
http_handler_fn rest_snapshots_list;
http_handler_fn rest_snapshots_get;
http_handler_fn rest_snapshots_delete;
http_handler_fn rest_admin_snapshots;
http_handler_fn rest_admin_nodes;
http_handler_fn rest_admin_snapshot_delete;
/* A session just created for a POST /v1/sessions {"snapshot": id}: the snapshot is restored into
 * it, then req is answered (201, or the error after the session is ended). */
void rest_snapshots_restore_reply(struct http *a, struct evhttp_request *req, struct session *s,
                                 const char *snapshot);

/* Admin endpoints (admin.c): admin token only. */
http_handler_fn rest_admin_pools;
http_handler_fn rest_admin_pool_put;
http_handler_fn rest_admin_sessions;
http_handler_fn rest_admin_session_get;
http_handler_fn rest_admin_session_delete;
http_handler_fn rest_admin_drain;
http_handler_fn rest_admin_undrain;
http_handler_fn rest_admin_policy;

/* MCP endpoints (mcp.c): POST and DELETE of /mcp and of /v1/sessions/{id}/mcp. */
http_handler_fn mcp_route_post;
http_handler_fn mcp_route_delete;
http_handler_fn mcp_route_bound_post;
http_handler_fn mcp_route_bound_delete;

/* E2B endpoints (e2b.c): the control plane under /e2b/api/, sandbox traffic under /e2b/sbx/;
 * params[1] is the rest of the path. */
http_handler_fn e2b_route_control;
http_handler_fn e2b_route_sandbox;
http_handler_fn e2b_route_upload; /* POST /e2b/sbx/files: its body streamed (held, chunked too) */
/* E2B executions now (e2b-run.c): running, and waiting for their busy sandbox. */
void e2b_runs_count(const struct http *a, unsigned *ret_running, unsigned *ret_waiting);

/* File endpoints (files.c). params[1] is the raw (still percent-encoded) file path. */
http_handler_fn rest_files_list;
http_handler_fn rest_files_get;
http_handler_fn rest_files_put;
http_handler_fn rest_files_delete;

/* ---- client connections (conns.c) ----
 *
 * Slots, per-peer shares and lingering closes of one listener's connections; the rules are in
 * conns.c's opening comment. Loop context only. */

/* A connection's standing: the one state conns.c keeps per connection. */
enum http_conn_standing {
    HTTP_CONN_ANON_IDLE, /* no valid token seen on it; no request in progress */
    HTTP_CONN_ANON_BUSY, /* no valid token seen; a request in progress */
    HTTP_CONN_AUTH_IDLE, /* a request on it was authenticated; none in progress */
    HTTP_CONN_AUTH_BUSY,
    HTTP_CONN_CLOSING,   /* evicted or refused: shut down, evhttp frees it next */
    HTTP_CONN_LINGERING, /* freed by evhttp; a refused upload's body is drained */
    HTTP_CONN__COUNT,
    HTTP_CONN__INVALID = -22,
};

struct http_conns_limits {
    unsigned max;            /* slots (0: no bound) */
    unsigned per_peer;       /* anonymous connections per peer (0: no bound) */
    unsigned linger_max;     /* lingering closes at once (0: none) */
    unsigned head_timeout_s; /* a request head must arrive within this (0: no bound) */
    unsigned anon_busy_ms;   /* an anonymous connection busy this long is a victim (0: never) */
};

struct http_conns_stats {
    unsigned idle, busy, anonymous, lingering, closing; /* now */
    uint64_t evicted_total;        /* idle connections closed for a newcomer at the cap */
    uint64_t evicted_peer_total;   /* ... for a newcomer of the same peer at its share */
    uint64_t refused_total;        /* newcomers refused: their peer's share was all busy */
    uint64_t linger_skipped_total; /* closes that could not linger (linger_max reached) */
};

struct http_conn_entry;
/* The registry of one listener's connections (limits copied). It outlives the api until its
 * last connection is gone (libevent frees connections from a deferred finalizer). */
struct http_conns *http_conns_new(const struct http_conns_limits *lim);
/* The listener to pause when the cap is reached with nothing idle (borrowed), or NULL. */
void http_conns_set_listener(struct http_conns *reg, struct evconnlistener *listener);
/* Ends the lingering closes and drops the api's reference. Accepts NULL. */
void http_conns_free(struct http_conns *reg);
void http_conns_get_stats(const struct http_conns *reg, struct http_conns_stats *ret);
const struct http_conns_limits *http_conns_limits(const struct http_conns *reg);
/* A new connection (sock: its socket bufferevent, filter: the bufferevent evhttp uses; owner:
 * what http_conns_find() returns for filter). Its peer is admitted on the next loop turn, or
 * earlier by http_conns_admit(); past the cap a victim is closed then (conns.c, rule 2). */
struct http_conn_entry *http_conns_add(struct http_conns *reg, struct bufferevent *sock,
                                     struct bufferevent *filter, void *owner);
/* Bytes of the connection came: applies the per-peer share once the descriptor is known
 * (idempotent; without bytes it is applied on the loop turn after the accept): false when the
 * connection was refused (answered 503 and shut down). */
bool http_conns_admit(struct http_conn_entry *e);
/* Moves e to standing to: busy/idle and anonymous/authenticated (a CLOSING or LINGERING entry
 * stays so). */
void http_conns_set(struct http_conn_entry *e, enum http_conn_standing to);
enum http_conn_standing http_conn_standing(const struct http_conn_entry *e);
bool http_conns_closing(const struct http_conn_entry *e);
/* The owner of the connection whose filter bufferevent this is, or NULL. */
void *http_conns_find(const struct http_conns *reg, const struct bufferevent *filter);
/* evhttp freed e's connection. linger: a held body was left unread (the client may still be
 * sending): an authenticated connection then drains it for a while if a lingering slot is free.
 * e is not used afterwards. */
void http_conns_release(struct http_conn_entry *e, bool linger);
/* Slots in use: every connection but the CLOSING ones, lingering closes included. */
unsigned http_conns_live(const struct http_conns *reg);

/* The pure table under the registry (unit tests): no loop, no descriptor. */
struct http_conn_entry *http_conns_table_add(struct http_conns *reg);
void http_conns_table_set(struct http_conns *reg, struct http_conn_entry *e,
                         enum http_conn_standing to);
/* The connection a newcomer at the cap closes: the anonymous one idle longest with nothing
 * unread; only with no anonymous connection at all, the authenticated one idle longest with
 * nothing unread; never exclude; NULL otherwise (conns.c says why). */
struct http_conn_entry *http_conns_table_victim(const struct http_conns *reg,
                                              const struct http_conn_entry *exclude);
/* Counts e against peer (a key; "" or NULL: exempt). 0, with *ret_victim set when that peer
 * had its share and one of its anonymous connections is idle (to be closed); -EUSERS when its
 * share is all busy (e is not counted: refuse it). */
int http_conns_table_admit(struct http_conns *reg, struct http_conn_entry *e, const char *peer,
                          struct http_conn_entry **ret_victim);

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

/* bucket.c: engine operations a tenant asks for at will (pause, hibernate, snapshot), a token
 * bucket per tenant. Pure; per_s and burst > 0. */
struct http_buckets;
struct err;
struct http_buckets_stats {
    uint64_t taken_total, refused_total;
};
struct http_buckets *http_buckets_new(unsigned per_s, unsigned burst);
void http_buckets_free(struct http_buckets *b);
/* 0: a token taken for tenant (id copied) at now_ms (monotonic); -EDQUOT: its bucket is empty. */
int http_buckets_take(struct http_buckets *b, const char *tenant, uint64_t now_ms);
void http_buckets_get_stats(const struct http_buckets *b, struct http_buckets_stats *ret);
/* A token of a->engine_ops for an operation of tenant (what: "pauses", ...): 0, or -EDQUOT with
 * reterr saying why (answered 429 quota_exceeded with Retry-After). */
int http_engine_op(struct http *a, const char *tenant, const char *what, struct err *reterr);

/* ---- routes (api.c) ---- */

/* A route's handler reads the request body itself, as it comes (http_body_read()): the filter
 * holds such a body back from evhttp (body.c). */
#define HTTP_ROUTE_STREAMED_BODY 0x1u
/* ... a chunked one too (the handler takes a body of unknown length: http_body_chunked()). */
#define HTTP_ROUTE_STREAMED_CHUNKED 0x2u
/* The flags of the route that method and the path (len bytes, percent-encoded as sent, without
 * query) resolve to: 0 when none does. Pure. */
unsigned http_route_flags(enum evhttp_cmd_type method, const char *path, size_t len);

/* ---- request heads (head.c) ----
 *
 * Pure: the bytes of a connection before evhttp sees them; fuzzed by
 * tests/fuzz/fuzz-api-head.c. */

/* The marker of a held body's head: "X-Sandpool-Held: N", the connection's Nth held body. A head
 * that carries it itself is not understood. */
#define HTTP_HELD_HEADER "X-Sandpool-Held"

/* ---- sessions other nodes hold (forward.c, docs/cluster.md#routing) ---- */

/* A request forwarded by a node carries this (that node's id): it is never forwarded again. */
#define HTTP_FORWARDED_HEADER "X-Sandpool-Forwarded"
/* A forwarded answer carries this: the node that answered. */
#define HTTP_NODE_HEADER "X-Sandpool-Node"
/* A list across nodes that is an array (E2B's) carries one per node that did not answer. */
#define HTTP_MISSING_NODE_HEADER "X-Sandpool-Missing-Node"
struct http_forwarder;
struct http_forwarder *http_forwarder_new(struct http *a);
/* After evhttp_free(): the requests forwarded were cancelled when their connections went. */
void http_forwarder_free(struct http_forwarder *fw);
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
void http_forward_mcp(struct http *a, struct evhttp_request *req, const char *id, const char *tenant,
                     const struct http_route_style *style);
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

enum http_head_end {
    HTTP_HEAD_MORE,        /* no end yet: more bytes are needed */
    HTTP_HEAD_COMPLETE,    /* *ret_len bytes are the head, its empty line included */
    HTTP_HEAD_EMPTY_FIRST, /* an empty line before any request line: evhttp's business */
};
/* Looks for the end of a head in buf[0..len). *line_start is where the line not yet complete
 * starts (0 at a head's first byte): updated as lines complete, so that bytes appended later
 * are looked at once. */
enum http_head_end http_head_find_end(const char *buf, size_t len, size_t *line_start,
                                    size_t *ret_len);

/* What a complete head says. */
struct http_head {
    bool understood;      /* by evhttp's rules (head.c); false: the connection goes blind */
    bool nul;             /* it holds a NUL byte (not understood) */
    bool held;            /* a body of its route's is streamed (HTTP_ROUTE_STREAMED_BODY) */
    bool expect_continue; /* held, and the HTTP/1.1 client waits for "100 Continue" */
    bool chunked;         /* the body is chunked (Transfer-Encoding: chunked, HTTP/1.1) */
    uint64_t length;      /* body bytes after the head, unless chunked (0 for HEAD) */
};
/* Judges the complete head head[0..len) (http_head_find_end()'s). */
void http_head_parse(const char *head, size_t len, struct http_head *ret);
/* Appends to out the head evhttp gets for a held body: every line of head but Content-Length
 * and Transfer-Encoding, then "Content-Length: 0" and HTTP_HELD_HEADER with seq, then the empty
 * line, every line ending in CRLF. -EMSGSIZE past out's bound (2 * len + 64 bytes always fit: a
 * line of at least two bytes grows by its CR at most). */
int http_head_rewrite(const char *head, size_t len, uint64_t seq, struct buf *out);

/* ---- chunked framing (util/chunked.h) ----
 *
 * The body filter's rules: a strict subset of what evhttp 2.1 reads (http.c,
 * evhttp_handle_chunked_read: a size line through strtoll, then a blank and anything; empty
 * lines skipped between chunks; header-like trailer lines after the last chunk). 15 digits keep
 * every size below 2^60, inside evhttp's int64; a bare LF ends a line, as it does for evhttp. The
 * filter passes a chunked body on to evhttp unchanged while it reads it so, and goes blind at the
 * first byte it does not (evhttp frames the rest itself: the two never disagree); a body it holds
 * for its handler evhttp never sees, and that one must be well formed. tests/fuzz/fuzz-chunked.c
 * checks the subset against a model of evhttp's reading. */
#define HTTP_CHUNKED_RULES \
    ((struct chunked_rules){.max_digits = 15, .max_size = (UINT64_C(1) << 60) - 1, .bare_lf = true})

/* ---- streamed request bodies (body.c) ---- */

/* evhttp_set_bevcb callback (arg: the listener's struct http_conns): the bufferevent of a new
 * connection, with the body filter. */
struct bufferevent *http_conn_bev_new(struct event_base *base, void *arg);
/* evhttp dispatched req on a connection of reg: it is busy until its reply is complete, and its
 * head deadline stops; a connection the filter could not follow gets "Connection: close" on
 * the reply (its next head could not be timed). False when the request must be refused with
 * 400 (its head holds a NUL byte, which evhttp would cut the header value at). */
bool http_conn_dispatched(struct http_conns *reg, struct evhttp_request *req);
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

/* http_request_json() over the request's body (evhttp read it whole, within http.max_body_bytes). */
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
/* Ends s and answers 204 (or the error). */
void rest_session_delete(struct http *a, struct evhttp_request *req, struct session *s,
                        const struct http_actor *who);

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
