/* The MCP front end (docs/mcp.md), shared by its three files:
 *
 *   mcp.c           the transport: the checks of a POST in the contract's order, the methods
 *                   answered at once, and the replies (JSON, SSE);
 *   sessions.c  the MCP sessions: a registry bounded in all and per tenant, their records in
 *                   Redis (written before initialize answers, read back after a restart), expiry;
 *   calls.c     what needs the sandbox: tool calls and resource reads, one at a time per MCP
 *                   session behind a bounded queue, streamed, cancellable.
 *
 * The pure part (messages, tool arguments, results) is proto.c and render.c; the Redis record
 * is store/mcp-record.h. Loop context only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "http/handler.h"
#include "mcp/mcp.h"
#include "mcp/proto.h"
#include "store/mcp-record.h"

struct evhttp_request;
struct mcp_call;
struct mcp_server;

#define MCP_SESSION_ID_BYTES 16u /* 128 random bits, 32 hex digits */
#define MCP_LOOKUPS_MAX      64u /* Redis reads of unknown MCP session ids in flight */
#define MCP_KEEPALIVE_MS     15000u
#define MCP_PROGRESS_MS      50u
#define MCP_PROGRESS_BYTES   4096u
#define MCP_BUSY_RETRY_MS    25u
#define MCP_IMAGES_MAX       8u

/* One MCP session. The registry holds it while it is known; each call holds a reference. */
struct mcp_session {
    TAILQ_ENTRY(mcp_session) link; /* the registry's, least recently used first */
    struct mcp_server *srv;
    char id[2 * MCP_SESSION_ID_BYTES + 1];
    struct store_mcp_rec rec;
    uint64_t used_ms;   /* monotonic: the last request */
    uint64_t pushed_ms; /* monotonic: the last time its record's time to live was pushed */
    TAILQ_HEAD(, mcp_call) calls; /* the running one first, then those waiting */
    unsigned n_calls;
    unsigned refs;
    bool gone; /* forgotten (deleted, expired, its sandbox ended): freed with its last ref */
};

/* The routes (mcp.c): POST and DELETE of /mcp and of /v1/sessions/{id}/mcp. */
http_handler_fn mcp_route_post;
http_handler_fn mcp_route_delete;
http_handler_fn mcp_route_bound_post;
http_handler_fn mcp_route_bound_delete;

/* ---- the registry (sessions.c) ---- */

/* The protocol's state: NULL when MCP is off. */
static inline struct mcp_server *
mcp_of(const struct http *h)
{
    return http_protocol_state(h, &mcp_protocol);
}

struct mcp_server *mcp_server_new(struct http *a);
void mcp_server_free(struct mcp_server *srv);
void mcp_server_get_stats(const struct mcp_server *srv, struct mcp_stats *ret);
struct mcp_stats *mcp_server_stats(struct mcp_server *srv);

/* initialize: a new session of tenant with rec's settings (rec->tenant is set); its record is
 * written to Redis first. cb(0, ms) with a reference to release, or cb(r < 0, NULL) with why:
 * -EDQUOT (its tenant's bound), -EUSERS (the daemon's), -ENOTCONN (Redis). cb runs exactly once,
 * possibly from inside the call; -ECANCELED when the registry ends first (the waiter frees
 * itself, replying nothing). */
typedef void mcp_session_cb(int r, struct mcp_session *ms, const char *why, void *userdata);
void mcp_session_create(struct mcp_server *srv, const struct store_mcp_rec *rec, mcp_session_cb *cb,
                        void *userdata);
/* The session with this id of tenant: from memory, or its record in Redis after a restart.
 * cb(0, ms) with a reference; -ENOENT unknown (another tenant's too), -EAGAIN Redis cannot say
 * now (503). cb runs exactly once, as for mcp_session_create(). */
void mcp_session_lookup(struct mcp_server *srv, const char *tenant, const char *id,
                        mcp_session_cb *cb, void *userdata);
/* Whether this daemon holds session id in memory (or id cannot be one: nothing to route). */
bool mcp_session_held(const struct mcp_server *srv, const char *id);
void mcp_session_ref(struct mcp_session *ms);
void mcp_session_unref(struct mcp_session *ms);
/* A request used it: it moves to the end of the LRU, and its record's time to live is pushed
 * when a tenth of it went by. */
void mcp_session_used(struct mcp_session *ms);
/* Its record changed (sandbox created, epoch seen): written again (fire and forget). */
void mcp_session_save(struct mcp_session *ms);
/* Forgets it: out of the registry, its record deleted, its calls cancelled. why: "deleted",
 * "expired", "sandbox_ended"; "elsewhere": another node serves it (its record stays). */
void mcp_session_forget(struct mcp_session *ms, const char *why);
/* The time to live of its record, in ms. */
uint64_t mcp_session_ttl_ms(const struct mcp_session *ms);

/* ---- calls that need the sandbox (calls.c) ---- */

/* Queues a tools/call, resources/list or resources/read request (msg is taken over: its root
 * is released with the call) on ms, and answers it in time (SSE for tools/call, JSON
 * otherwise). */
void mcp_call_start(struct http *a, struct mcp_session *ms, struct evhttp_request *req,
                    struct mcp_msg *msg);
/* notifications/cancelled: the call of ms with this JSON-RPC id, if any, is cancelled. */
void mcp_call_cancel_id(struct mcp_session *ms, json_t *request_id);
/* Every call of ms is cancelled (the session is forgotten). */
void mcp_calls_cancel_all(struct mcp_session *ms);

/* ---- replies (mcp.c) ---- */

/* A JSON-RPC message (stolen) as the JSON reply with this HTTP status. */
void mcp_reply(struct evhttp_request *req, int status, json_t *msg);
/* A JSON-RPC message (stolen) as a whole SSE reply of one event. */
void mcp_reply_sse(struct evhttp_request *req, json_t *msg);
/* The SSE headers of an MCP stream (before stream_out_start()). */
void mcp_sse_headers(struct evhttp_request *req);
/* One SSE event of an MCP stream: "event: message", the message (stolen) on one data line. */
struct evbuffer *mcp_sse_event(json_t *msg);
