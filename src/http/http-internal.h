/* Shared by the files of the HTTP core (src/http) only: connections, request heads, the body
 * filter and the route table. Protocols include http/handler.h. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/http.h>

#include "http/handler.h"
#include "util/buf.h"
#include "util/chunked.h"
#include "util/macro.h"

struct bufferevent;
struct event_base;
struct evconnlistener;
struct http_routes;

/* Lingering closes at once (conns.c), within the connection slots. */
#define HTTP_LINGER_MAX(max_connections) MIN(64u, MAX(1u, (max_connections) / 16u))

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
    /* Which routes hold their bodies (borrowed; it outlives the registry's connections). */
    const struct http_routes *routes;
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

/* ---- routes (http.c, ops.c) ---- */

/* The core's own routes (ops.c): /healthz, /metrics and /readyz, all the health listener serves. */
extern const struct http_route http_ops_routes[];
extern const size_t http_n_ops_routes;

/* Every route the server serves, in order: the core's own, then each protocol's. */
struct http_routes;
/* The n protocols' (borrowed: they must outlive the table). */
struct http_routes *http_routes_new(const struct http_protocol *const *protocols, size_t n);
void http_routes_free(struct http_routes *rt);
/* The flags of the route that method and the path (len bytes, percent-encoded as sent, without
 * query) resolve to: 0 when none does. Pure. */
unsigned http_route_flags(const struct http_routes *rt, enum evhttp_cmd_type method,
                          const char *path, size_t len);

/* ---- request heads (head.c) ----
 *
 * Pure: the bytes of a connection before evhttp sees them; fuzzed by
 * tests/fuzz/fuzz-api-head.c. */

/* The marker of a held body's head: "X-Sandpool-Held: N", the connection's Nth held body. A head
 * that carries it itself is not understood. */
#define HTTP_HELD_HEADER "X-Sandpool-Held"

/* Ends every WebSocket stream (1001, what the socket takes of the close frame at once): first
 * thing in http_free(), whose evhttp_free() then frees their connections. */
void http_ws_stop_all(struct http *a);

struct http_forwarder *http_forwarder_new(struct http *a);
/* After evhttp_free(): the requests forwarded were cancelled when their connections went. */
void http_forwarder_free(struct http_forwarder *fw);

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
    bool upgrade;         /* a GET with "Upgrade" and no body, HTTP/1.1, on a route with
                           * HTTP_ROUTE_WEBSOCKET: what follows the head is no HTTP */
    uint64_t length;      /* body bytes after the head, unless chunked (0 for HEAD) */
};
/* Judges the complete head head[0..len) (http_head_find_end()'s). */
void http_head_parse(const struct http_routes *rt, const char *head, size_t len,
                     struct http_head *ret);
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
