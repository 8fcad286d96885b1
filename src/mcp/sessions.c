/* MCP sessions: the registry and the records in Redis; see mcp-internal.h and docs/mcp.md.
 *
 * The registry is what this daemon knows: bounded by mcp.max_sessions in all and
 * mcp.max_sessions_per_tenant per tenant (creates in flight counted). Each session's record
 * lives in Redis under "<prefix>mcp:<id>" as one JSON string with a time to live, written with
 * SET ... PX in one command (a record never exists without its expiry) before initialize
 * answers: an id the client holds always survives a kill -9. After a restart the registry is
 * empty and fills again from Redis as the sessions' next requests come (at most MCP_LOOKUPS_MAX
 * reads in flight: one more answers 503, as does any read while Redis is down).
 *
 * The time to live is mcp.idle_timeout_s while the session has no sandbox of its own, and its
 * sandbox's idle timeout plus a minute once it has one (the sandbox ends first, and the next
 * request learns it). A sweep every MCP_SWEEP_MS forgets sessions unused past their time to live
 * and those whose sandbox ended. Redis operations in flight outlive the registry (the api is
 * freed before the store): each carries an op that the registry's end detaches. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/http.h>
#include <hiredis/hiredis.h>
#include <jansson.h>

#define LOG_MODULE "mcp"
#include "log/log.h"
#include "mcp/mcp-internal.h"
#include "session/session.h"
#include "store/redis.h"
#include "store/schema.h"
#include "util/hashmap.h"
#include "util/macro.h"
#include "util/parse.h"
#include "util/random.h"
#include "util/time.h"

#define MCP_SWEEP_MS     5000u
#define MCP_TTL_MARGIN_S 60u

/* A Redis operation of the registry in flight: a create's SET or a lookup's GET. */
struct mcp_op {
    TAILQ_ENTRY(mcp_op) link;
    struct mcp_server *srv; /* NULL once the registry is gone */
    bool is_lookup;
    bool cancelled; /* the registry ended: its requester was told -ECANCELED */
    char tenant[65];
    struct mcp_session *ms; /* create: the session to announce */
    char id[2 * MCP_SESSION_ID_BYTES + 1];
    mcp_session_cb *cb;
    void *userdata;
};

struct mcp_server {
    struct http *a;
    struct hashmap *by_id;
    TAILQ_HEAD(, mcp_session) lru;
    TAILQ_HEAD(, mcp_op) ops;
    unsigned n_creating, n_lookups;
    struct event *sweep;
    struct mcp_stats stats;
};

static struct store_redis *
redis_of(const struct mcp_server *srv)
{
    return srv->a->backend->redis;
}

static void
key_of(const struct mcp_server *srv, const char *id, char *out, size_t n)
{
    (void)store_key_mcp(out, n, srv->a->cfg->redis_prefix, id); /* ids are checked names */
}

/* ---- sessions -------------------------------------------------------------------------------- */

static void
session_free(struct mcp_session *ms)
{
    free(ms);
}

void
mcp_session_ref(struct mcp_session *ms)
{
    ms->refs++;
}

void
mcp_session_unref(struct mcp_session *ms)
{
    if (--ms->refs == 0 && ms->gone) {
        session_free(ms);
    }
}

uint64_t
mcp_session_ttl_ms(const struct mcp_session *ms)
{
    const struct cfg *cfg = ms->srv->a->cfg;
    unsigned s = cfg->mcp_idle_timeout_s;

    if (!ms->rec.bound && ms->rec.sandbox[0] != '\0') {
        const struct cfg_profile *p = cfg_profile_find(cfg, ms->rec.profile);

        s = ms->rec.idle_timeout_s ? ms->rec.idle_timeout_s : p ? p->idle_timeout_s : s;
        s += MCP_TTL_MARGIN_S;
    }
    return (uint64_t)s * 1000u;
}

/* The record's key and its time to live in ms, as Redis arguments. */
static void
key_and_ttl(const struct mcp_session *ms, char key[256], char px[24])
{
    key_of(ms->srv, ms->id, key, 256);
    (void)snprintf(px, 24, "%llu", (unsigned long long)mcp_session_ttl_ms(ms));
}

/* SET key record PX ttl: cb NULL fires and forgets. */
static int
record_write(struct mcp_server *srv, struct mcp_session *ms, store_redis_reply_cb *cb, void *arg)
{
    char key[256], px[24];
    char *text = store_mcp_rec_dump(&ms->rec);
    int r;

    key_and_ttl(ms, key, px);
    r = store_redis_commandv(redis_of(srv), cb, arg, "SET", key, text, "PX", px, NULL);
    free(text);
    ms->pushed_ms = time_now_ms();
    return r;
}

void
mcp_session_save(struct mcp_session *ms)
{
    if (!ms->gone && record_write(ms->srv, ms, NULL, NULL) < 0) {
        log_warn("mcp session=%s: its record could not be written (redis is down)", ms->id);
    }
}

void
mcp_session_used(struct mcp_session *ms)
{
    struct mcp_server *srv = ms->srv;
    uint64_t now = time_now_ms();

    if (ms->gone) {
        return;
    }
    ms->used_ms = now;
    TAILQ_REMOVE(&srv->lru, ms, link);
    TAILQ_INSERT_TAIL(&srv->lru, ms, link);
    if (now - ms->pushed_ms > mcp_session_ttl_ms(ms) / 10u) {
        char key[256], px[24];

        key_and_ttl(ms, key, px);
        if (store_redis_commandv(redis_of(srv), NULL, NULL, "PEXPIRE", key, px, NULL) == 0) {
            ms->pushed_ms = now;
        }
    }
}

static void
registry_add(struct mcp_server *srv, struct mcp_session *ms)
{
    ms->used_ms = time_now_ms();
    hashmap_put(srv->by_id, ms->id, ms);
    TAILQ_INSERT_TAIL(&srv->lru, ms, link);
    srv->stats.sessions++;
    ms->refs++; /* the registry's */
}

void
mcp_session_forget(struct mcp_session *ms, const char *why)
{
    struct mcp_server *srv = ms->srv;
    char key[256];

    if (ms->gone) {
        return;
    }
    ms->gone = true;
    (void)hashmap_remove(srv->by_id, ms->id);
    TAILQ_REMOVE(&srv->lru, ms, link);
    srv->stats.sessions--;
    if (strcmp(why, "deleted") == 0) {
        srv->stats.sessions_deleted++;
    } else if (strcmp(why, "elsewhere") != 0) {
        srv->stats.sessions_expired++;
    }
    if (strcmp(why, "elsewhere") != 0) { /* else another node's: its record is not ours */
        key_of(srv, ms->id, key, sizeof(key));
        (void)store_redis_commandv(redis_of(srv), NULL, NULL, "DEL", key, NULL);
    }
    log_info("mcp session forgotten mcp_session=%s tenant='%s': %s", ms->id, ms->rec.tenant, why);
    mcp_calls_cancel_all(ms);
    mcp_session_unref(ms);
}

static unsigned
tenant_count(const struct mcp_server *srv, const char *tenant)
{
    const struct mcp_session *ms;
    const struct mcp_op *op;
    unsigned n = 0;

    TAILQ_FOREACH (ms, &srv->lru, link) {
        n += strcmp(ms->rec.tenant, tenant) == 0;
    }
    TAILQ_FOREACH (op, &srv->ops, link) {
        n += !op->is_lookup && strcmp(op->tenant, tenant) == 0;
    }
    return n;
}

/* ---- create ---------------------------------------------------------------------------------- */

static void
op_end(struct mcp_op *op)
{
    if (op->srv != NULL) {
        TAILQ_REMOVE(&op->srv->ops, op, link);
        if (op->is_lookup) {
            op->srv->n_lookups--;
        } else {
            op->srv->n_creating--;
        }
    }
    free(op);
}

static void
on_created(int r, struct redisReply *reply, void *userdata)
{
    struct mcp_op *op = userdata;
    struct mcp_server *srv = op->srv;
    struct mcp_session *ms = op->ms;

    if (srv == NULL || op->cancelled) {
        free(ms);
        op_end(op);
        return;
    }
    if (r == 0 && reply->type == REDIS_REPLY_STATUS) {
        registry_add(srv, ms);
        srv->stats.sessions_created++;
        ms->refs++; /* the caller's */
        log_info("mcp session created mcp_session=%s tenant='%s' mount=%s%s%s", ms->id,
                 ms->rec.tenant, ms->rec.bound ? "bound" : "own", ms->rec.bound ? " session=" : "",
                 ms->rec.bound ? ms->rec.sandbox : "");
        op->cb(0, ms, NULL, op->userdata);
    } else {
        free(ms);
        op->cb(-ENOTCONN, NULL, "redis did not take the session's record; retry", op->userdata);
    }
    op_end(op);
}

static struct mcp_op *
op_new(struct mcp_server *srv, bool is_lookup, const char *tenant, mcp_session_cb *cb, void *arg)
{
    struct mcp_op *op = xcalloc(1, sizeof(*op));

    op->srv = srv;
    op->is_lookup = is_lookup;
    (void)snprintf(op->tenant, sizeof(op->tenant), "%s", tenant);
    op->cb = cb;
    op->userdata = arg;
    TAILQ_INSERT_TAIL(&srv->ops, op, link);
    if (is_lookup) {
        srv->n_lookups++;
    } else {
        srv->n_creating++;
    }
    return op;
}

void
mcp_session_create(struct mcp_server *srv, const struct store_mcp_rec *rec, mcp_session_cb *cb,
                   void *userdata)
{
    const struct cfg *cfg = srv->a->cfg;
    struct mcp_session *ms;
    struct mcp_op *op;

    if (srv->stats.sessions + srv->n_creating >= cfg->mcp_max_sessions) {
        cb(-EUSERS, NULL, "this daemon holds mcp.max_sessions MCP sessions; retry later", userdata);
        return;
    }
    if (tenant_count(srv, rec->tenant) >= cfg->mcp_max_sessions_per_tenant) {
        cb(-EDQUOT, NULL,
           "this tenant holds mcp.max_sessions_per_tenant MCP sessions; end one (DELETE) first",
           userdata);
        return;
    }
    ms = xcalloc(1, sizeof(*ms));
    ms->srv = srv;
    ms->rec = *rec;
    TAILQ_INIT(&ms->calls);
    random_hex(ms->id, MCP_SESSION_ID_BYTES);
    op = op_new(srv, false, rec->tenant, cb, userdata);
    op->ms = ms;
    if (record_write(srv, ms, on_created, op) < 0) {
        op_end(op);
        free(ms);
        cb(-ENOTCONN, NULL, "redis is unavailable; retry", userdata);
    }
}

/* ---- lookup ---------------------------------------------------------------------------------- */

/* A session id as the client sent it: 32 lowercase hex digits, or it cannot be one. */
static bool
id_valid(const char *id)
{
    size_t n = strlen(id);

    if (n != (size_t)MCP_SESSION_ID_BYTES * 2) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'))) {
            return false;
        }
    }
    return true;
}

static void
on_looked_up(int r, struct redisReply *reply, void *userdata)
{
    struct mcp_op *op = userdata;
    struct mcp_server *srv = op->srv;
    struct mcp_session *ms;
    struct store_mcp_rec rec;
    struct err e = {0};

    if (srv == NULL || op->cancelled) {
        op_end(op);
        return;
    }
    if (r < 0 || reply->type == REDIS_REPLY_ERROR) {
        op->cb(-EAGAIN, NULL, "redis could not be read; retry", op->userdata);
        op_end(op);
        return;
    }
    ms = hashmap_get(srv->by_id, op->id); /* another lookup of the same id came first */
    if (ms == NULL && reply->type == REDIS_REPLY_STRING &&
        mcp_record_load(reply->str, reply->len, &rec, &e) == 0 &&
        strcmp(rec.tenant, op->tenant) == 0) {
        if (srv->stats.sessions + srv->n_creating >= srv->a->cfg->mcp_max_sessions) {
            op->cb(-EAGAIN, NULL, "this daemon holds mcp.max_sessions MCP sessions; retry later",
                   op->userdata);
            op_end(op);
            return;
        }
        ms = xcalloc(1, sizeof(*ms));
        ms->srv = srv;
        ms->rec = rec;
        TAILQ_INIT(&ms->calls);
        memcpy(ms->id, op->id, sizeof(ms->id));
        registry_add(srv, ms);
        srv->stats.sessions_restored++;
        log_info("mcp session restored from redis mcp_session=%s tenant='%s'", ms->id,
                 ms->rec.tenant);
    } else if (reply->type == REDIS_REPLY_STRING && e.code != 0) {
        log_warn("mcp session=%s: its record in redis is damaged (%s); it is unknown", op->id,
                 e.msg);
    }
    if (ms != NULL && strcmp(ms->rec.tenant, op->tenant) == 0) {
        ms->refs++;
        op->cb(0, ms, NULL, op->userdata);
    } else {
        op->cb(-ENOENT, NULL, NULL, op->userdata);
    }
    op_end(op);
}

void
mcp_session_lookup(struct mcp_server *srv, const char *tenant, const char *id, mcp_session_cb *cb,
                   void *userdata)
{
    struct mcp_session *ms = id_valid(id) ? hashmap_get(srv->by_id, id) : NULL;
    struct mcp_op *op;
    char key[256];

    if (ms != NULL || !id_valid(id)) {
        if (ms != NULL && strcmp(ms->rec.tenant, tenant) == 0) {
            ms->refs++;
            cb(0, ms, NULL, userdata);
        } else {
            cb(-ENOENT, NULL, NULL, userdata); /* another tenant's is as unknown as none */
        }
        return;
    }
    if (srv->n_lookups >= MCP_LOOKUPS_MAX || !store_redis_is_up(redis_of(srv))) {
        cb(-EAGAIN, NULL, "MCP sessions are being read back from redis; retry", userdata);
        return;
    }
    op = op_new(srv, true, tenant, cb, userdata);
    memcpy(op->id, id, sizeof(op->id));
    key_of(srv, id, key, sizeof(key));
    if (store_redis_commandv(redis_of(srv), on_looked_up, op, "GET", key, NULL) < 0) {
        op_end(op);
        cb(-EAGAIN, NULL, "redis is unavailable; retry", userdata);
    }
}

bool
mcp_session_held(const struct mcp_server *srv, const char *id)
{
    return !id_valid(id) || hashmap_get(srv->by_id, id) != NULL;
}

/* ---- the registry ---------------------------------------------------------------------------- */

/* Forgets what expired: unused past its time to live with no call, or its sandbox ended. */
static void
on_sweep(evutil_socket_t fd, short what, void *arg)
{
    struct mcp_server *srv = arg;
    struct session_manager *sm = srv->a->backend->sessions;
    uint64_t now = time_now_ms();
    struct mcp_session *ms, *next;

    if (!session_manager_loaded(sm)) {
        return; /* sandboxes are not known yet: none can be said to have ended */
    }
    for (ms = TAILQ_FIRST(&srv->lru); ms != NULL; ms = next) {
        next = TAILQ_NEXT(ms, link);
        if (ms->n_calls > 0) {
            continue;
        }
        if (ms->rec.sandbox[0] != '\0' &&
            session_find(sm, ms->rec.tenant, ms->rec.sandbox) == NULL) {
            mcp_session_forget(ms, "sandbox_ended");
        } else if (now - ms->used_ms > mcp_session_ttl_ms(ms)) {
            mcp_session_forget(ms, "expired");
        }
    }
}

bool
mcp_get_stats(const struct http *h, struct mcp_stats *ret)
{
    const struct mcp_server *srv = mcp_of(h);

    if (srv == NULL) {
        return false;
    }
    mcp_server_get_stats(srv, ret);
    return true;
}

struct mcp_server *
mcp_server_new(struct http *a)
{
    struct mcp_server *srv = xcalloc(1, sizeof(*srv));
    struct timeval tv;

    srv->a = a;
    srv->by_id = hashmap_new();
    TAILQ_INIT(&srv->lru);
    TAILQ_INIT(&srv->ops);
    srv->sweep = OOM_CHECK(event_new(a->base, -1, EV_PERSIST, on_sweep, srv));
    time_tv_from_ms(&tv, MCP_SWEEP_MS);
    (void)event_add(srv->sweep, &tv);
    return srv;
}

void
mcp_server_free(struct mcp_server *srv)
{
    struct mcp_session *ms;
    struct mcp_op *op;

    if (srv == NULL) {
        return;
    }
    /* The records stay in Redis for the next start: nothing is deleted here. */
    while ((ms = TAILQ_FIRST(&srv->lru)) != NULL) {
        TAILQ_REMOVE(&srv->lru, ms, link);
        ms->gone = true;
        mcp_calls_cancel_all(ms);
        mcp_session_unref(ms);
    }
    while ((op = TAILQ_FIRST(&srv->ops)) != NULL) {
        TAILQ_REMOVE(&srv->ops, op, link);
        op->srv = NULL; /* its reply frees it */
        if (!op->cancelled) {
            op->cancelled = true;
            op->cb(-ECANCELED, NULL, NULL, op->userdata); /* the waiter frees itself */
        }
    }
    event_free(srv->sweep);
    hashmap_free(srv->by_id);
    free(srv);
}

void
mcp_server_get_stats(const struct mcp_server *srv, struct mcp_stats *ret)
{
    const struct mcp_session *ms;

    *ret = srv->stats;
    ret->calls_waiting = ret->calls_running = 0;
    TAILQ_FOREACH (ms, &srv->lru, link) {
        ret->calls_running += ms->n_calls > 0;
        ret->calls_waiting += ms->n_calls > 0 ? ms->n_calls - 1 : 0;
    }
}

struct mcp_stats *
mcp_server_stats(struct mcp_server *srv)
{
    return &srv->stats;
}

/* ---- the protocol -------------------------------------------------------------------------- */

static void *
mcp_start(struct http *h)
{
    if (h->cfg->mcp_max_sessions == 0 || h->backend->redis == NULL) {
        return NULL; /* off: the routes answer 404 */
    }
    return mcp_server_new(h);
}

static void
mcp_stop(void *state)
{
    mcp_server_free(state);
}

static const struct http_route routes[] = {
    {EVHTTP_REQ_POST, 0, "/mcp", mcp_route_post},
    {EVHTTP_REQ_DELETE, 0, "/mcp", mcp_route_delete},
    {EVHTTP_REQ_POST, 0, "/v1/sessions/*/mcp", mcp_route_bound_post},
    {EVHTTP_REQ_DELETE, 0, "/v1/sessions/*/mcp", mcp_route_bound_delete},
};

const struct http_protocol mcp_protocol = {
    .name = "mcp",
    .routes = routes,
    .n_routes = ELEMENTSOF(routes),
    .start = mcp_start,
    .stop = mcp_stop,
};
