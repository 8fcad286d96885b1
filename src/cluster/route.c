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
#include "store/redis.h"
#include "store/schema.h"
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
        (void)answer(ret, ROUTE_DOWN, o->node, "the session's node '%s' is not in the registry",
                     o->node);
    } else if (!store_node_live(n, time_wall_ms())) {
        (void)answer(ret, ROUTE_DOWN, o->node, "the session's node '%s' is %s", o->node,
                     n->stopped ? "restarting" : "not answering its heartbeats");
    } else if (strncmp(n->url, "http://", 7) != 0) {
        (void)answer(ret, ROUTE_DOWN, o->node,
                     "the session's node '%s' advertises no network address (%s)", o->node, n->url);
    } else if (strcmp(n->url, r->cfg->cluster_advertise_url) == 0) {
        /* The registry names our own address for another node: forwarding would come back. */
        (void)answer(ret, ROUTE_UNAVAILABLE, o->node,
                     "the node registry names this node's address for node '%s'", o->node);
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

static void
on_record(int rc, redisReply *reply, void *userdata)
{
    struct route_op *op = userdata;
    struct route *r = op->r;
    struct route_answer ans;
    const char *node = NULL, *tenant = NULL, *state = NULL;

    r->stats.in_flight--;
    if (rc == 0 && reply->type == REDIS_REPLY_ARRAY && reply->elements == 3) {
        node = element(reply, 0);
        tenant = element(reply, 1);
        state = element(reply, 2);
    }
    if (node == NULL || tenant == NULL || state == NULL) {
        r->stats.lookup_failures++;
        (void)answer(&ans, ROUTE_UNAVAILABLE, NULL, "the session store did not answer: %s",
                     rc < 0 ? strerror(-rc) : "an unexpected reply");
    } else if (strcmp(state, "lost") == 0 && (op->any_tenant || strcmp(tenant, op->tenant) == 0)) {
        (void)answer(&ans, ROUTE_NONE, node, "session %s ended: its node '%s' was lost", op->id,
                     node);
        ans.node_lost = true;
    } else if (node[0] == '\0' || strcmp(state, "ending") == 0 || strcmp(state, "lost") == 0) {
        (void)answer(&ans, ROUTE_NONE, NULL, "no such session");
    } else {
        struct owner o = {0};

        (void)snprintf(o.node, sizeof(o.node), "%s", node);
        (void)snprintf(o.tenant, sizeof(o.tenant), "%s", tenant);
        if (strcmp(node, r->cfg->node_id) != 0) {
            (void)owners_put(r->owners, op->id, node, tenant);
        }
        resolve(r, &o, op->any_tenant ? NULL : op->tenant, &ans);
    }
    if (op->cb != NULL) {
        op->cb(&ans, op->userdata);
    }
    free(op);
}

int
route_find(struct route *r, const char *id, const char *tenant, struct route_answer *ret,
           route_cb *cb, void *userdata, struct route_op **ret_op)
{
    const struct owner *o = owners_get(r->owners, id);
    char key[KEY_MAX];
    struct route_op *op;

    *ret_op = NULL;
    if (o != NULL && lost(r, o->node)) {
        owners_forget(r->owners, id); /* claimed by now, or soon: the record says */
        o = NULL;
    }
    if (o != NULL) {
        r->stats.cache_hits++;
        resolve(r, o, tenant, ret);
        return 1;
    }
    if (registry_peers(r->registry) == 0) {
        /* A node alone (no other ever in the registry's last list) holds every session there
         * is: nothing to look up, and a Redis that is down changes nothing. */
        return answer(ret, ROUTE_NONE, NULL, "no such session");
    }
    if (strlen(id) > OWNER_ID_MAX || (tenant != NULL && strlen(tenant) > OWNER_ID_MAX) ||
        store_key_session(key, sizeof(key), r->cfg->redis_prefix, id) < 0) {
        return answer(ret, ROUTE_NONE, NULL, "no such session");
    }
    if (r->stats.in_flight >= ROUTE_LOOKUPS_MAX || !store_redis_is_up(r->redis)) {
        r->stats.refused++;
        return answer(ret, ROUTE_UNAVAILABLE, NULL,
                      r->stats.in_flight >= ROUTE_LOOKUPS_MAX ? "too many session lookups at once"
                                                              : "the session store is unreachable");
    }
    op = xcalloc(1, sizeof(*op));
    op->r = r;
    op->cb = cb;
    op->userdata = userdata;
    op->any_tenant = tenant == NULL;
    (void)snprintf(op->id, sizeof(op->id), "%s", id);
    (void)snprintf(op->tenant, sizeof(op->tenant), "%s", tenant != NULL ? tenant : "");
    if (store_redis_commandv(r->redis, on_record, op, "HMGET", key, "node", "tenant", "state",
                             NULL) < 0) {
        free(op);
        r->stats.refused++;
        return answer(ret, ROUTE_UNAVAILABLE, NULL, "the session store is unreachable");
    }
    r->stats.lookups++;
    r->stats.in_flight++;
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
