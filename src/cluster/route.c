/* The route of a request for a session held elsewhere; see route.h. */
#define LOG_MODULE "cluster"
#include "cluster/route.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "cluster/registry.h"
#include "config/config.h"
#include "log/log.h"
#include "store/mcp-record.h"
#include "store/redis.h"
#include "store/schema.h"
#include "util/err.h"
#include "util/macro.h"
#include "util/time.h"

#define ROUTE_LOOKUPS_MAX 256   /* records being read at once; more: 503 */
#define ROUTE_CACHE_MAX   65536 /* owners cached (about 200 bytes each) */
#define KEY_MAX           256

struct route {
    const struct cfg *cfg;           /* borrowed */
    struct store_redis *redis;       /* borrowed */
    const struct registry *registry; /* borrowed */
    struct owners *owners;
    struct route_stats stats;
};

/* A record being read; it outlives a cancel (Redis answers every command). */
struct route_op {
    struct route *r;
    route_cb *cb; /* NULL once cancelled */
    void *userdata;
    char id[OWNER_ID_MAX + 1];
    char tenant[OWNER_ID_MAX + 1];
    bool any_tenant;
    char mcp_id[OWNER_ID_MAX + 1]; /* route_find_mcp(): the MCP session; then id is its sandbox */
};

static int answer(struct route_answer *ret, enum route_verdict v, const char *node, const char *fmt,
                  ...) __attribute__((format(printf, 4, 5)));

static int
answer(struct route_answer *ret, enum route_verdict v, const char *node, const char *fmt, ...)
{
    va_list ap;

    *ret = (struct route_answer){.verdict = v};
    (void)snprintf(ret->node, sizeof(ret->node), "%s", node != NULL ? node : "");
    va_start(ap, fmt);
    (void)vsnprintf(ret->why, sizeof(ret->why), fmt, ap);
    va_end(ap);
    return 1;
}

/* The answer for a session whose owner is known. */
static void
resolve(const struct route *r, const struct owner *o, const char *tenant, struct route_answer *ret)
{
    const struct store_node_rec *n;

    if (tenant != NULL && strcmp(o->tenant, tenant) != 0) {
        (void)answer(ret, ROUTE_NONE, NULL, "no such session"); /* not a word more */
        return;
    }
    if (strcmp(o->node, r->cfg->node_id) == 0) {
        (void)answer(ret, ROUTE_NONE, NULL, "no such session"); /* ours, and it ended */
        return;
    }
    n = registry_node(r->registry, o->node);
    if (n == NULL) {
        (void)answer(ret, ROUTE_DOWN, o->node, "the session's node is not in the node registry");
    } else if (!store_node_live(n, time_wall_ms())) {
        (void)answer(ret, ROUTE_DOWN, o->node, "the session's node is %s",
                     n->stopped ? "restarting" : "not answering its heartbeats");
    } else if (strncmp(n->url, "http://", 7) != 0) {
        (void)answer(ret, ROUTE_DOWN, o->node,
                     "the session's node advertises no network address to forward to");
    } else if (strcmp(n->url, r->cfg->cluster_advertise_url) == 0) {
        /* The registry names our own address for another node: forwarding would come back. */
        (void)answer(ret, ROUTE_UNAVAILABLE, o->node,
                     "the node registry names this node's address for the session's node");
    } else {
        (void)answer(ret, ROUTE_FORWARD, o->node, "forwarded");
        (void)snprintf(ret->url, sizeof(ret->url), "%s", n->url);
    }
}

/* Whether the registry says node is lost: not live, and not stopped cleanly. */
static bool
lost(const struct route *r, const char *node)
{
    const struct store_node_rec *n = registry_node(r->registry, node);

    return n != NULL && !n->stopped && !store_node_live(n, time_wall_ms());
}

/* A reply element as a string, "" for nil; NULL when it is neither. */
static const char *
element(const redisReply *reply, size_t i)
{
    const redisReply *e = reply->element[i];

    if (e->type == REDIS_REPLY_NIL) {
        return "";
    }
    return e->type == REDIS_REPLY_STRING && strlen(e->str) == e->len ? e->str : NULL;
}

/* A session's record ({node, tenant, state}, or NULLs when Redis failed) as the route of op. */
static void
record_route(struct route_op *op, int rc, const char *node, const char *tenant, const char *state,
             struct route_answer *ans)
{
    struct route *r = op->r;

    if (node == NULL || tenant == NULL || state == NULL) {
        r->stats.lookup_failures++;
        (void)answer(ans, ROUTE_UNAVAILABLE, NULL, "the session store did not answer: %s",
                     rc < 0 ? strerror(-rc) : "an unexpected reply");
    } else if (strcmp(state, "lost") == 0 && (op->any_tenant || strcmp(tenant, op->tenant) == 0)) {
        (void)answer(ans, ROUTE_NONE, node, "session %s ended: its node was lost", op->id);
        ans->node_lost = true;
    } else if (node[0] == '\0' || strcmp(state, "ending") == 0 || strcmp(state, "lost") == 0) {
        (void)answer(ans, ROUTE_NONE, NULL, "no such session");
    } else {
        struct owner o = {0};

        (void)snprintf(o.node, sizeof(o.node), "%s", node);
        (void)snprintf(o.tenant, sizeof(o.tenant), "%s", tenant);
        if (strcmp(node, r->cfg->node_id) != 0) {
            (void)owners_put(r->owners, op->id, node, tenant);
        }
        resolve(r, &o, op->any_tenant ? NULL : op->tenant, ans);
    }
}

/* An MCP session's route from what its sandbox's route (or its node's) says. */
static void
mcp_route(struct route_op *op, struct route_answer *ans)
{
    char key[OWNER_ID_MAX + 1];

    if (ans->verdict == ROUTE_NONE) {
        /* Its sandbox ended (or is ours): this node answers as it would alone. */
        (void)answer(ans, ROUTE_HERE, NULL, "served here");
    } else if (ans->verdict == ROUTE_FORWARD &&
               snprintf(key, sizeof(key), "m:%s", op->mcp_id) < (int)sizeof(key)) {
        (void)owners_put(op->r->owners, key, ans->node, op->tenant);
    }
}

static void
on_record(int rc, redisReply *reply, void *userdata)
{
    struct route_op *op = userdata;
    struct route_answer ans;
    bool ok = rc == 0 && reply->type == REDIS_REPLY_ARRAY && reply->elements == 3;

    op->r->stats.in_flight--;
    record_route(op, rc, ok ? element(reply, 0) : NULL, ok ? element(reply, 1) : NULL,
                 ok ? element(reply, 2) : NULL, &ans);
    if (op->mcp_id[0] != '\0') {
        mcp_route(op, &ans);
    }
    if (op->cb != NULL) {
        op->cb(&ans, op->userdata);
    }
    free(op);
}

/* The answer from the cache for key (a session's id, or "m:" and an MCP session's): 1 with *ret,
 * or 0 when it is not there (or its node is lost: claimed by now, or soon, and the record says). */
static int
cached(struct route *r, const char *key, const char *tenant, struct route_answer *ret)
{
    const struct owner *o = owners_get(r->owners, key);

    if (o != NULL && lost(r, o->node)) {
        owners_forget(r->owners, key);
        o = NULL;
    }
    if (o == NULL) {
        return 0;
    }
    r->stats.cache_hits++;
    resolve(r, o, tenant, ret);
    return 1;
}

/* Before the node registry's first read this node cannot tell a session that never was from one
 * another node holds: a 404 would tell the client its session is gone. */
static int
not_listed(struct route_answer *ret)
{
    return answer(ret, ROUTE_UNAVAILABLE, NULL,
                  "this node has not read the node registry yet (it is starting): retry");
}

/* Whether a lookup may be sent now; else *ret says why not. */
static bool
may_look_up(struct route *r, struct route_answer *ret)
{
    if (r->stats.in_flight < ROUTE_LOOKUPS_MAX && store_redis_is_up(r->redis)) {
        return true;
    }
    r->stats.refused++;
    (void)answer(ret, ROUTE_UNAVAILABLE, NULL, "%s",
                 r->stats.in_flight >= ROUTE_LOOKUPS_MAX ? "too many session lookups at once"
                                                         : "the session store is unreachable");
    return false;
}

static struct route_op *
op_new(struct route *r, const char *id, const char *tenant, route_cb *cb, void *userdata)
{
    struct route_op *op = xcalloc(1, sizeof(*op));

    op->r = r;
    op->cb = cb;
    op->userdata = userdata;
    op->any_tenant = tenant == NULL;
    (void)snprintf(op->id, sizeof(op->id), "%s", id);
    (void)snprintf(op->tenant, sizeof(op->tenant), "%s", tenant != NULL ? tenant : "");
    return op;
}

/* Sends op's command (argv, NULL-terminated after the key) with cb: 0, or -ENOTCONN. */
static int
op_send(struct route_op *op, store_redis_reply_cb *cb, const char *cmd, const char *key,
        const char *f1, const char *f2, const char *f3)
{
    if (store_redis_commandv(op->r->redis, cb, op, cmd, key, f1, f2, f3, NULL) < 0) {
        op->r->stats.refused++;
        return -ENOTCONN;
    }
    op->r->stats.lookups++;
    op->r->stats.in_flight++;
    return 0;
}

int
route_find(struct route *r, const char *id, const char *tenant, struct route_answer *ret,
           route_cb *cb, void *userdata, struct route_op **ret_op)
{
    char key[KEY_MAX];
    struct route_op *op;

    *ret_op = NULL;
    if (cached(r, id, tenant, ret)) {
        return 1;
    }
    if (!registry_listed(r->registry)) {
        return not_listed(ret);
    }
    if (registry_peers(r->registry) == 0) {
        /* A node alone (no other in the registry's last list) holds every session there is:
         * nothing to look up, and a Redis that is down changes nothing. */
        return answer(ret, ROUTE_NONE, NULL, "no such session");
    }
    if (strlen(id) > OWNER_ID_MAX || (tenant != NULL && strlen(tenant) > OWNER_ID_MAX) ||
        store_key_session(key, sizeof(key), r->cfg->redis_prefix, id) < 0) {
        return answer(ret, ROUTE_NONE, NULL, "no such session");
    }
    if (!may_look_up(r, ret)) {
        return 1;
    }
    op = op_new(r, id, tenant, cb, userdata);
    if (op_send(op, on_record, "HMGET", key, "node", "tenant", "state") < 0) {
        free(op);
        return answer(ret, ROUTE_UNAVAILABLE, NULL, "the session store is unreachable");
    }
    *ret_op = op;
    return 0;
}

/* ---- MCP sessions ---------------------------------------------------------------------------- */

/* The route of an MCP session without a sandbox: its node's. */
static void
mcp_node_route(struct route_op *op, const struct store_mcp_rec *rec, struct route_answer *ans)
{
    struct owner o = {0};

    (void)snprintf(o.node, sizeof(o.node), "%s", rec->node);
    (void)snprintf(o.tenant, sizeof(o.tenant), "%s", rec->tenant);
    resolve(op->r, &o, op->tenant, ans);
    /* This node's, one whose record names none (written before records did), or one whose node
     * the registry says is lost (it exits if it comes back running: nothing of the session can
     * live on there): served here. A node that is restarting (a clean stop) or unknown to the
     * last read keeps it: 503 until it is back, as a REST session's requests get, so that two
     * nodes never hold one session. */
    if (ans->verdict == ROUTE_NONE || rec->node[0] == '\0' ||
        (ans->verdict == ROUTE_DOWN && lost(op->r, rec->node))) {
        (void)answer(ans, ROUTE_HERE, NULL, "served here");
    }
    mcp_route(op, ans);
}

static void
on_mcp_record(int rc, redisReply *reply, void *userdata)
{
    struct route_op *op = userdata;
    struct route *r = op->r;
    struct route_answer ans;
    struct store_mcp_rec rec;
    struct err e = {0};
    char key[KEY_MAX];

    r->stats.in_flight--;
    if (rc < 0 || reply->type == REDIS_REPLY_ERROR) {
        r->stats.lookup_failures++;
        (void)answer(&ans, ROUTE_UNAVAILABLE, NULL, "the session store did not answer: %s",
                     rc < 0 ? strerror(-rc) : "an error");
    } else if (reply->type != REDIS_REPLY_STRING ||
               store_mcp_rec_load(reply->str, reply->len, &rec, &e) < 0 ||
               strcmp(rec.tenant, op->tenant) != 0 || rec.bound ||
               (rec.sandbox[0] != '\0' &&
                store_key_session(key, sizeof(key), r->cfg->redis_prefix, rec.sandbox) < 0)) {
        /* None, damaged, another tenant's, a bound one (refused on /mcp) or one whose sandbox is
         * no name: answered here. Its MCP revision is not read: the node that serves it judges. */
        (void)answer(&ans, ROUTE_HERE, NULL, "served here");
    } else if (rec.sandbox[0] == '\0') {
        mcp_node_route(op, &rec, &ans);
    } else {
        /* Where its sandbox is: a second read, of the sandbox's record, with the same op. */
        (void)snprintf(op->id, sizeof(op->id), "%s", rec.sandbox);
        if (op_send(op, on_record, "HMGET", key, "node", "tenant", "state") == 0) {
            return;
        }
        (void)answer(&ans, ROUTE_UNAVAILABLE, NULL, "the session store is unreachable");
    }
    if (op->cb != NULL) {
        op->cb(&ans, op->userdata);
    }
    free(op);
}

int
route_find_mcp(struct route *r, const char *id, const char *tenant, struct route_answer *ret,
               route_cb *cb, void *userdata, struct route_op **ret_op)
{
    char cache_key[OWNER_ID_MAX + 1], key[KEY_MAX];
    struct route_op *op;

    *ret_op = NULL;
    if (!registry_listed(r->registry)) {
        return not_listed(ret);
    }
    if (strlen(id) + 2 > OWNER_ID_MAX || strlen(tenant) > OWNER_ID_MAX ||
        registry_peers(r->registry) == 0) {
        return answer(ret, ROUTE_HERE, NULL, "served here");
    }
    (void)snprintf(cache_key, sizeof(cache_key), "m:%s", id);
    if (cached(r, cache_key, tenant, ret)) {
        if (ret->verdict == ROUTE_FORWARD) {
            return 1;
        }
        if (ret->verdict == ROUTE_NONE) { /* another tenant's: as unknown here as anywhere */
            return answer(ret, ROUTE_HERE, NULL, "served here");
        }
        /* Its node stopped, or is this one now: the record (which may have changed: a session
         * without a sandbox is taken over) says where it is served. */
        owners_forget(r->owners, cache_key);
    }
    if (!may_look_up(r, ret)) {
        return 1;
    }
    op = op_new(r, "", tenant, cb, userdata);
    (void)snprintf(op->mcp_id, sizeof(op->mcp_id), "%s", id);
    if (store_key_mcp(key, sizeof(key), r->cfg->redis_prefix, id) < 0) {
        free(op);
        return answer(ret, ROUTE_HERE, NULL, "served here");
    }
    if (op_send(op, on_mcp_record, "GET", key, NULL, NULL, NULL) < 0) {
        free(op);
        return answer(ret, ROUTE_UNAVAILABLE, NULL, "the session store is unreachable");
    }
    *ret_op = op;
    return 0;
}

void
route_cancel(struct route_op *op)
{
    if (op != NULL) {
        op->cb = NULL;
    }
}

void
route_forget(struct route *r, const char *id)
{
    owners_forget(r->owners, id);
}

void
route_forget_mcp(struct route *r, const char *id)
{
    char key[OWNER_ID_MAX + 1];

    if (snprintf(key, sizeof(key), "m:%s", id) < (int)sizeof(key)) {
        owners_forget(r->owners, key);
    }
}

void
route_get_stats(const struct route *r, struct route_stats *ret)
{
    *ret = r->stats;
    ret->cached = owners_size(r->owners);
}

struct route *
route_new(const struct cfg *cfg, struct store_redis *redis, const struct registry *registry)
{
    struct route *r = xcalloc(1, sizeof(*r));

    r->cfg = cfg;
    r->redis = redis;
    r->registry = registry;
    r->owners = owners_new(ROUTE_CACHE_MAX);
    return r;
}

struct route *
route_free(struct route *r)
{
    if (r != NULL) {
        owners_free(r->owners);
        free(r);
    }
    return NULL;
}
