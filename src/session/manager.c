/* The session manager: the registry of sessions (by id, by container, and a list in creation
 * order), the Redis operations in flight, the cron tick and the reaper, stats and tenant counts.
 *
 * Redis operations: one struct sop per operation in flight, on the manager's list. Its callback
 * finds the session again by id (the session may have ended meanwhile); at manager shutdown
 * every sop is detached (m = NULL) and then only frees itself when Redis answers or is freed.
 *
 * Nothing here (nor anywhere in src/session/) logs what the edge should say or writes the audit
 * log: both go to the callbacks the edge sets (session_manager_set_notify(),
 * session_manager_set_audit()). */
#define LOG_MODULE "session"
#include <stdio.h>
#include <string.h>

#include "kernel/kernel.h"
#include "log/log.h"
#include "pool/pool.h"
#include "session-internal.h"
#include "store/redis.h"
#include "store/sessions.h"
#include "util/hashmap.h"
#include "util/macro.h"
#include "util/time.h"

void
manager_notify(struct session_manager *m, const char *event, const struct store_session_rec *rec,
               const char *detail)
{
    if (m->notify != NULL) {
        m->notify(event, rec->id, rec->tenant, detail, m->notify_userdata);
    }
}

void
session_manager_set_notify(struct session_manager *m, session_notify_cb *cb, void *userdata)
{
    m->notify = cb;
    m->notify_userdata = userdata;
}

void
manager_audit(struct session_manager *m, const struct session_audit *a)
{
    if (m->audit != NULL) {
        m->audit(a, m->audit_userdata);
    }
}

void
session_manager_set_audit(struct session_manager *m, session_audit_cb *cb, void *userdata)
{
    m->audit = cb;
    m->audit_userdata = userdata;
}

const char *
tenant_actor(const char *tenant, char *out, size_t n)
{
    (void)snprintf(out, n, "tenant:%s", tenant);
    return out;
}

/* ---- Redis operations ------------------------------------------------------------------------ */

struct sop *
sop_new(struct session_manager *m, enum sop_kind kind, const char *id)
{
    struct sop *op = xcalloc(1, sizeof(*op));

    op->m = m;
    op->kind = kind;
    if (id != NULL) {
        (void)snprintf(op->id, sizeof(op->id), "%s", id);
    }
    TAILQ_INSERT_TAIL(&m->sops, op, link);
    return op;
}

void
sop_free(struct sop *op)
{
    if (op->m != NULL) {
        TAILQ_REMOVE(&op->m->sops, op, link);
    }
    free(op->egress);
    free(op);
}

static void
on_record_deleted(int r, void *userdata)
{
    sop_free(userdata); /* on failure the next start finishes it */
}

void
manager_delete_record(struct session_manager *m, const char *id)
{
    struct sop *op = sop_new(m, SOP_DELETE, id);

    if (store_sessions_delete(m->store, id, on_record_deleted, op) < 0) {
        sop_free(op);
    }
}

static void
on_container_removed(int r, void *userdata)
{
    struct sop *op = userdata;

    /* Not removed (the pool was freed first): the record stays `ending`, the next start
     * finishes it. */
    if (op->m == NULL || r < 0) {
        sop_free(op);
        return;
    }
    log_debug("session=%s: its container is gone, its record goes", op->id);
    if (store_sessions_delete(op->m->store, op->id, on_record_deleted, op) < 0) {
        sop_free(op);
    }
}

void
manager_release_then_delete(struct session_manager *m, struct pool_slot *slot, const char *id)
{
    if (slot == NULL) {
        manager_delete_record(m, id);
        return;
    }
    pool_slot_release_then(slot, on_container_removed, sop_new(m, SOP_DELETE, id));
}

/* ---- lookups --------------------------------------------------------------------------------- */

const struct cfg_profile *
manager_profile_find(const struct session_manager *m, const char *name)
{
    if (name == NULL) {
        return m->n_pools > 0 ? pool_profile(m->pools[0]) : NULL;
    }
    return cfg_profile_find(m->cfg, name);
}

size_t
manager_profile_index(const struct session_manager *m, const char *profile)
{
    size_t i = 0;

    while (i < m->n_pools && strcmp(pool_name(m->pools[i]), profile) != 0) {
        i++;
    }
    return i;
}

struct session *
manager_by_container(const struct session_manager *m, const char *container_id)
{
    struct session *s = hashmap_get(m->by_container, container_id);

    return s != NULL && s->slot != NULL ? s : NULL;
}

unsigned
manager_tenant_running(const struct session_manager *m, const char *tenant)
{
    const struct session *s;
    unsigned n = 0;

    TAILQ_FOREACH (s, &m->sessions, link) {
        n += s->exec != NULL && strcmp(s->rec.tenant, tenant) == 0;
    }
    return n;
}

bool
session_manager_want_list(const struct session_manager *m)
{
    return m->want_list;
}

bool
session_manager_loaded(const struct session_manager *m)
{
    return m->loaded;
}

/* ---- periodic work --------------------------------------------------------------------------- */

static void
on_claimed(int r, const char *const *ids, size_t n, void *userdata)
{
    struct sop *op = userdata;
    struct session_manager *m = op->m;

    sop_free(op);
    if (m == NULL) {
        return;
    }
    m->claiming = false;
    for (size_t i = 0; r == 0 && i < n; i++) {
        struct session *s = hashmap_get(m->by_id, ids[i]);

        m->stats.reaped_total++;
        /* The claim made this daemon the owner of the ending. */
        if (s == NULL) {
            recovery_forget(m, ids[i]);
            manager_delete_record(m, ids[i]);
        } else if (s->state != SESSION_ENDING) {
            session_reaped(s);
        } else {
            s->end_claimed = true; /* the end under way finishes it, even if it fails */
        }
    }
}

static uint64_t
touch_interval_ms(const struct session *s)
{
    uint64_t third = (uint64_t)s->rec.idle_timeout_s * 1000u / 3;

    return MAX(MIN(third, (uint64_t)TOUCH_MAX_MS), (uint64_t)TOUCH_MIN_MS);
}

void
session_manager_tick(struct session_manager *m)
{
    struct session *s;
    struct sop *op;
    uint64_t now = time_now_ms();

    if (!store_redis_is_up(m->redis)) {
        return;
    }
    recovery_load_records(m);
    if (m->want_adopt) {
        session_manager_load_adopted(m);
    }
    pause_tick(m);
    /* A running execution is activity: keep its session's deadline ahead. */
    TAILQ_FOREACH (s, &m->sessions, link) {
        if (s->exec != NULL && now - s->last_touch_ms >= touch_interval_ms(s)) {
            session_touch(s);
        }
    }
    if (!m->claiming) {
        op = sop_new(m, SOP_CLAIM, NULL);
        if (store_sessions_claim_expired(m->store, time_wall_ms(), REAP_BATCH, on_claimed, op) <
            0) {
            sop_free(op);
        } else {
            m->claiming = true;
        }
    }
}

bool
session_manager_busy(const struct session_manager *m)
{
    const struct session *s;

    TAILQ_FOREACH (s, &m->sessions, link) {
        if (s->exec != NULL) {
            return true;
        }
    }
    return false;
}

void
session_manager_cut(struct session_manager *m)
{
    struct session *s;

    TAILQ_FOREACH (s, &m->sessions, link) {
        if (s->exec != NULL && s->kernel != NULL) {
            (void)kernel_interrupt(s->kernel, s->exec->id);
        }
    }
}

/* ---- stats ----------------------------------------------------------------------------------- */

void
session_manager_get_stats(const struct session_manager *m, struct session_manager_stats *ret)
{
    const struct session *s;

    *ret = m->stats;
    ret->sessions = 0;
    ret->busy = 0;
    ret->paused = 0;
    ret->hibernated = 0;
    TAILQ_FOREACH (s, &m->sessions, link) {
        ret->sessions++;
        ret->busy += s->exec != NULL;
        ret->paused += pause_is_paused(s);
        ret->hibernated += session_is_hibernated(s);
    }
}

const struct session_profile_stats *
session_manager_profile_stats(const struct session_manager *m, size_t i)
{
    return &m->pstats[i];
}

/* Adds one to ret[index of tenant] when map knows it (the map holds index + 1). */
static void
count_tenant(const struct hashmap *map, const char *tenant, unsigned *ret)
{
    uintptr_t i = (uintptr_t)hashmap_get(map, tenant);

    if (i > 0) {
        ret[i - 1]++;
    }
}

void
session_manager_tenant_counts(const struct session_manager *m, const char *const *tenants, size_t n,
                              unsigned *ret_sessions, unsigned *ret_running)
{
    struct hashmap *map = hashmap_new();
    const struct session *s;
    const struct cold *c;
    const struct sop *op;

    /* One pass over everything, whatever the number of tenants: a scrape stays O(sessions). */
    for (size_t i = 0; i < n; i++) {
        hashmap_put(map, tenants[i], (void *)(uintptr_t)(i + 1));
        ret_sessions[i] = ret_running[i] = 0;
    }
    TAILQ_FOREACH (s, &m->sessions, link) {
        if (s->state != SESSION_ENDING) {
            count_tenant(map, s->rec.tenant, ret_sessions);
        }
        if (s->exec != NULL) {
            count_tenant(map, s->rec.tenant, ret_running);
        }
    }
    TAILQ_FOREACH (c, &m->colds, link) {
        count_tenant(map, c->tenant, ret_sessions);
    }
    TAILQ_FOREACH (op, &m->sops, link) {
        if (op->kind == SOP_CREATE && op->pending != NULL) {
            count_tenant(map, op->pending->rec.tenant, ret_sessions);
        }
    }
    hashmap_free(map);
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

struct session_manager *
session_manager_new(struct event_base *base, const struct cfg *cfg, struct pool **pools,
                    size_t n_pools, struct store_redis *redis)
{
    struct session_manager *m = xcalloc(1, sizeof(*m));

    m->base = base;
    m->cfg = cfg;
    m->pools = pools;
    m->n_pools = n_pools;
    m->redis = redis;
    m->store = store_sessions_new(redis, cfg->redis_prefix, cfg->node_id);
    m->pstats = xcalloc(n_pools ? n_pools : 1, sizeof(*m->pstats));
    m->by_id = hashmap_new();
    m->by_container = hashmap_new();
    m->takes = hashmap_new();
    m->askers = hashmap_new();
    TAILQ_INIT(&m->sessions);
    TAILQ_INIT(&m->sops);
    TAILQ_INIT(&m->colds);
    TAILQ_INIT(&m->held);
    return m;
}

struct session_manager *
session_manager_free(struct session_manager *m)
{
    struct session *s;
    struct sop *op;
    struct cold *c;
    struct held *h;

    if (m == NULL) {
        return NULL;
    }
    m->freeing = true;
    /* Redis answers (or its own shutdown) still reach these: they find m == NULL. */
    while ((op = TAILQ_FIRST(&m->sops)) != NULL) {
        TAILQ_REMOVE(&m->sops, op, link);
        op->m = NULL;
    }
    while ((c = TAILQ_FIRST(&m->colds)) != NULL) {
        pool_wait_cancel(c->waiter);
        create_cold_free(c);
    }
    while ((h = TAILQ_FIRST(&m->held)) != NULL) {
        TAILQ_REMOVE(&m->held, h, link);
        free(h);
    }
    /* Containers stay (the pools are freed next); only the objects go. */
    while ((s = TAILQ_FIRST(&m->sessions)) != NULL) {
        session_destroy(s);
    }
    hashmap_free(m->by_id);
    hashmap_free(m->by_container);
    hashmap_free_with(m->takes, free);
    hashmap_free_with(m->askers, free);
    store_sessions_free(m->store);
    recovery_unmatched_free(m);
    free(m->pstats);
    free(m);
    return NULL;
}
