/* A fake peer node for unit tests: another sandpoold of the cluster as the forwarder
 * (src/http/forward.c, over src/cluster/peer.c) reaches it, without a second daemon. It is an
 * HTTP/1.1 server (evhttp) on 127.0.0.1 at a free port, on the test's event_base, that joins the
 * node registry in the (fake) Redis the way a daemon does: through src/store's own functions, a
 * heartbeat (store_nodes_heartbeat()) every heartbeat_ms from its own Redis client, naming its
 * address as its cluster.advertise_url. Sessions it "holds" are written with
 * store_sessions_create() under its node id, so a daemon's route lookup (one HMGET of the record)
 * finds it as their owner.
 *
 * Every request it gets is recorded (method, URI, headers, body); it answers each with what the
 * test scripted (a status, a Content-Type, a body: by default 200 {"peer": "NODE_ID"}), with an
 * X-Fake-Peer header (its id: an end-to-end header the caller must pass on) and the request's
 * X-Request-Id echoed as a daemon does. Faults, for the next n requests: the answer comes late
 * (ms later), the connection is closed before any answer (the caller sees it break), a 5xx
 * instead of the script, no answer at all (HANG: held until the caller goes or the peer is
 * freed), or no answer and no more heartbeats (FREEZE: a node frozen with the request in hand).
 * A peer can also stop heartbeating (frozen or killed: it turns lost for the others once 3
 * heartbeats pass) and leave cleanly (a last heartbeat saying "stopped").
 *
 * An answer written to a caller that went away must not kill the test: fake_peer_new() ignores
 * SIGPIPE, as the daemon's main does. Loop context only; nothing blocks. Everything is freed by
 * fake_peer_free(). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct fake_peer;

enum fake_peer_fault {
    FAKE_PEER_LATE,   /* answered ms later */
    FAKE_PEER_DROP,   /* the connection is closed, nothing answered */
    FAKE_PEER_FAIL,   /* answered with status ms (a 5xx) and an error body */
    FAKE_PEER_HANG,   /* never answered */
    FAKE_PEER_FREEZE, /* never answered, and the heartbeats stop from then on (a frozen node) */
    FAKE_PEER__COUNT,
};

/* What the peer received: one request. Borrowed until fake_peer_free(). */
struct fake_peer_request {
    char method[8];
    char *uri;     /* as sent: path and query */
    char *headers; /* "Name: value\n" each, in order */
    char *body;    /* NUL-terminated (binary bodies: body_len) */
    size_t body_len;
};

/* Listens on 127.0.0.1 at a free port and starts heartbeating into redis_url (a redis.url
 * value) under prefix, as node node_id, a heartbeat every heartbeat_ms (ttl: 3 of them). Aborts
 * on failure (a test set-up). */
struct fake_peer *fake_peer_new(struct event_base *base, const char *redis_url, const char *prefix,
                                const char *node_id, unsigned heartbeat_ms);
struct fake_peer *fake_peer_free(struct fake_peer *fp);
/* "http://127.0.0.1:PORT", its advertised address. */
const char *fake_peer_url(const struct fake_peer *fp);
/* Heartbeats written so far (answered by Redis). */
unsigned fake_peer_heartbeats(const struct fake_peer *fp);

/* Writes session id of tenant into the session store as this node's (state active, profile
 * profile). Returns 0 once Redis answered, or a negative errno; runs the loop meanwhile (at most
 * 5 s). */
int fake_peer_own_session(struct fake_peer *fp, const char *id, const char *tenant,
                          const char *profile);

/* ---- answers and faults -------------------------------------------------------------------- */

/* Every later request is answered with status, content_type and body (copied). */
void fake_peer_answer(struct fake_peer *fp, int status, const char *content_type, const char *body);
/* The next n requests meet fault (ms: LATE's delay, FAIL's status; else ignored). */
void fake_peer_fault(struct fake_peer *fp, enum fake_peer_fault fault, unsigned n, unsigned ms);
/* Heartbeats stop (false: a frozen or killed node, lost for the others after 3 heartbeats) or
 * start again (true). */
void fake_peer_set_beating(struct fake_peer *fp, bool beating);
/* A clean stop: a last heartbeat saying "stopped" (the others answer "restarting"), then none.
 * Runs the loop until Redis answered (at most 5 s); returns 0 or a negative errno. */
int fake_peer_leave(struct fake_peer *fp);

/* ---- inspection ---------------------------------------------------------------------------- */

/* Requests received so far (faulty ones included), and the i-th of them (NULL past the end). */
unsigned fake_peer_requests(const struct fake_peer *fp);
const struct fake_peer_request *fake_peer_request(const struct fake_peer *fp, unsigned i);
/* The value of the i-th request's header name (case-insensitive; its first), or NULL. Returned
 * in a buffer of the peer's, valid until the next call. */
const char *fake_peer_header(struct fake_peer *fp, unsigned i, const char *name);
/* Requests the peer holds unanswered (HANG, or LATE not yet due), and connections that went
 * away while it held one of theirs. */
unsigned fake_peer_held(const struct fake_peer *fp);
unsigned fake_peer_gone(const struct fake_peer *fp);
