/* Creating sessions: the tenant's quotas, the fair shares of the warm pools, binding a warm
 * container or waiting for one made on demand (cold), and writing the record.
 *
 * A create takes a warm container from its profile's pool (no engine call) or, when none may be
 * taken and the profile is under max, waits for one made on demand (struct cold, at most
 * COLD_WAIT_FACTOR engine deadlines). The session is CREATING while its record is written (it is
 * in by_container, not in the registry: a quarantine or a broken kernel makes it CREATE_LOST,
 * and the create fails when Redis answers). Quotas count sessions being created too, so a burst
 * of creates cannot pass them. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "egress/rules.h"
#include "kernel/kernel.h"
#include "pool/pool.h"
#include "session-internal.h"
#include "store/redis.h"
#include "store/sessions.h"
#include "util/hashmap.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/time.h"

static struct pool *
pool_for(const struct session_manager *m, const char *profile)
{
    size_t i = manager_profile_index(m, profile);

    return i < m->n_pools ? m->pools[i] : NULL;
}

/* A session is ready: its acquire latency and the audit event. */
static void
session_created(struct session *s)
{
    size_t i = manager_profile_index(s->m, s->profile->name);
    char actor[80];

    if (i < s->m->n_pools) {
        metrics_hist_observe(&s->m->pstats[i].acquire[s->cold ? 1 : 0],
                             time_now_us() - s->create_started_us);
    }
    manager_audit(s->m, &(struct session_audit){
                            .kind = SESSION_AUDIT_CREATED,
                            .actor = tenant_actor(s->rec.tenant, actor, sizeof(actor)),
                            .tenant = s->rec.tenant,
                            .session = s->rec.id,
                            .profile = s->rec.profile,
                            .container = s->rec.container,
                            .cold = s->cold,
                        });
}

static void
on_created(int r, void *userdata)
{
    struct sop *op = userdata;
    struct session_manager *m = op->m;
    struct session *s = op->pending;
    struct err e = {0};

    if (m == NULL) {
        /* The manager is gone; the record (if written) and the container are found again at
         * the next start. */
        store_session_rec_done(&s->rec);
        free(s);
        sop_free(op);
        return;
    }
    if (r == 0 && s->state == SESSION_CREATE_LOST) {
        /* The container went away while its record was written: undo the record. */
        manager_delete_record(m, s->rec.id);
        r = -EPIPE;
    }
    if (r < 0) {
        struct pool_slot *slot = s->slot;

        if (r == -EPIPE) {
            (void)err_set(&e, -EPIPE, "the sandbox was lost while the session was created");
        } else {
            (void)err_set(&e, r == -ENOTCONN || r == -ETIMEDOUT || r == -ECANCELED ? -ENOTCONN : r,
                          "could not record the session in redis: %s", strerror(-r));
        }
        if (op->admitted) {
            create_unadmit(m, s->rec.tenant, s->rec.id);
        }
        session_destroy(s);
        pool_slot_release(slot); /* bound once: never goes back to the pool */
        op->create_cb(e.code, NULL, &e, op->userdata);
        sop_free(op);
        return;
    }
    session_register(s);
    m->stats.created_total++;
    session_created(s);
    op->create_cb(0, s, NULL, op->userdata);
    sop_free(op);
}

/* The record of a new session on slot. */
static void
new_record(struct session_manager *m, struct pool_slot *slot, const struct session_create_req *req,
           const struct cfg_profile *p, const char *id, struct store_session_rec *rec)
{
    uint64_t now = time_wall_ms();

    if (id != NULL) {
        (void)snprintf(rec->id, sizeof(rec->id), "%s", id); /* admitted (admit.c) */
    } else {
        random_hex(rec->id, 16); /* 128 bits */
    }
    (void)snprintf(rec->tenant, sizeof(rec->tenant), "%s", req->tenant);
    (void)snprintf(rec->profile, sizeof(rec->profile), "%s", p->name);
    (void)snprintf(rec->container, sizeof(rec->container), "%s", pool_slot_container(slot));
    (void)snprintf(rec->node, sizeof(rec->node), "%s", m->cfg->node_id);
    rec->metadata = xstrdup(req->metadata_json ? req->metadata_json : "{}");
    rec->egress = xstrdup(req->egress_json ? req->egress_json : "");
    rec->created_at = rec->last_active_at = now;
    rec->idle_timeout_s = req->idle_timeout_s ? req->idle_timeout_s : p->idle_timeout_s;
    rec->pause_after_s = req->pause_after_s; /* 0: the profile's, as it is at the time */
    if (req->idle_action != NULL) {
        (void)store_idle_action_parse(req->idle_action, &rec->idle_action); /* checked */
    }
    rec->expires_at =
        now + (uint64_t)(req->lifetime_s ? req->lifetime_s : p->max_lifetime_s) * 1000u;
    rec->ext = xstrdup(req->ext ? req->ext : "");
    rec->epoch = 1;
    rec->gen = kernel_gen(pool_slot_kernel(slot));
    rec->state = STORE_SESSION_ACTIVE;
}

/* Turns a BOUND slot into a session and writes its record (its id: the one admitted, or NULL
 * for a new one). */
static int
bind_slot(struct session_manager *m, struct pool_slot *slot, const struct session_create_req *req,
          const struct cfg_profile *p, session_create_cb *cb, void *userdata, uint64_t started_us,
          bool cold, const char *id)
{
    struct store_session_rec *rec = xcalloc(1, sizeof(*rec));
    struct session *s;
    struct sop *op;
    int r;

    new_record(m, slot, req, p, id, rec);
    s = session_alloc(m, slot, p, rec);
    store_session_rec_done(rec);
    free(rec);
    s->create_started_us = started_us;
    s->cold = cold;
    /* The container remembers whom it serves, even if Redis loses the record. */
    (void)kernel_bind(s->kernel, s->rec.id);
    op = sop_new(m, SOP_CREATE, s->rec.id);
    op->pending = s;
    op->create_cb = cb;
    op->userdata = userdata;
    op->admitted = id != NULL;
    r = store_sessions_create(m->store, &s->rec, on_created, op);
    if (r < 0) {
        op->pending = NULL;
        sop_free(op);
        if (id != NULL) {
            create_unadmit(m, s->rec.tenant, s->rec.id);
        }
        session_destroy(s);
        pool_slot_release(slot);
        return -ENOTCONN;
    }
    return 0;
}

void
create_cold_free(struct cold *c)
{
    TAILQ_REMOVE(&c->m->colds, c, link);
    free(c->metadata);
    free(c->ext);
    free(c->egress);
    free(c);
}

static void
on_cold_slot(int r, struct pool_slot *slot, const struct err *e, void *userdata)
{
    struct cold *c = userdata;
    struct session_manager *m = c->m;
    session_create_cb *cb = c->cb;
    void *ud = c->userdata;
    struct err e2 = {0};

    c->waiter = NULL;
    if (r == 0) {
        r = bind_slot(m, slot, &c->req, manager_profile_find(m, c->profile), cb, ud, c->started_us,
                      true, c->id[0] ? c->id : NULL);
        if (r < 0) {
            (void)err_set(&e2, r, "redis is unavailable");
            e = &e2;
        }
    } else if (c->id[0] != '\0') {
        create_unadmit(m, c->tenant, c->id);
    }
    create_cold_free(c);
    if (r < 0) {
        cb(r, NULL, e, ud);
    }
}

/* ---- tenant quotas --------------------------------------------------------------------------- */

static bool
is_of(const char *tenant, const char *profile, const char *want_tenant, const char *want_profile)
{
    return strcmp(tenant, want_tenant) == 0 &&
           (want_profile == NULL || strcmp(profile, want_profile) == 0);
}

unsigned
create_tenant_sessions(const struct session_manager *m, const char *tenant, const char *profile)
{
    const struct session *s;
    const struct cold *c;
    const struct sop *op;
    unsigned n = 0;

    /* Of a profile: what holds (or will hold) its containers, so not the hibernated. */
    TAILQ_FOREACH (s, &m->sessions, link) {
        n += s->state != SESSION_ENDING && (profile == NULL || s->state != SESSION_HIBERNATED) &&
             is_of(s->rec.tenant, s->rec.profile, tenant, profile);
    }
    TAILQ_FOREACH (c, &m->colds, link) {
        n += is_of(c->tenant, c->profile, tenant, profile);
    }
    TAILQ_FOREACH (op, &m->sops, link) {
        n += op->kind == SOP_CREATE && op->pending != NULL &&
             is_of(op->pending->rec.tenant, op->pending->rec.profile, tenant, profile);
    }
    return n;
}

int
create_share_check(const struct session_manager *m, const char *tenant, const struct cfg_profile *p,
                   const char *advice, struct err *reterr)
{
    /* A share of the whole profile bounds nothing the profile's max does not (that answer,
     * 503 capacity_exhausted, says more). */
    unsigned share = cfg_profile_tenant_share(m->cfg, p);

    if (share > 0 && share < p->max && create_tenant_sessions(m, tenant, p->name) >= share) {
        return err_set(reterr, -EDQUOT,
                       "tenant '%s' holds %u of profile '%s''s %u containers, its share "
                       "(max_per_tenant); %s",
                       tenant, share, p->name, p->max, advice);
    }
    return 0;
}

/* ---- fair shares of the warm pools --------------------------------------------------------------
 *
 * A tenant that takes warm containers faster than its pool refills them would leave every other
 * tenant the cold path (churning create+delete at 6/s took another tenant's creates from 2 ms to
 * over a second). Warm takes are counted per tenant and profile over TAKE_WINDOW_S: a tenant
 * that took more than the profile's warm target in that time is a heavy taker, and a heavy
 * taker leaves half the warm target ready for the others, as long as another tenant asked for
 * a session of the profile within ASKER_WINDOW_S (nobody else there, nothing is kept); past
 * that, its creates wait for a fresh container like a cold one. A tenant that takes less never
 * notices. The askers' window is longer than the takes': a neighbour that comes back every
 * 15 s must not find the pool drained each time because it was quiet for 10 s (the heavy taker
 * had it all to itself in between). */

#define TAKE_WINDOW_S  10u
#define ASKER_WINDOW_S 60u

struct take_rate {
    uint64_t sec[TAKE_WINDOW_S];
    unsigned n[TAKE_WINDOW_S];
    char key[160];
};

/* The two tenants that last asked for a session of a profile, and when (monotonic s). */
struct askers {
    char tenant[2][65];
    uint64_t at_s[2];
    char key[80];
};

static struct askers *
askers_of(struct session_manager *m, const char *profile)
{
    struct askers *a = hashmap_get(m->askers, profile);

    if (a == NULL) {
        a = xcalloc(1, sizeof(*a));
        (void)snprintf(a->key, sizeof(a->key), "%s", profile);
        hashmap_put(m->askers, a->key, a);
    }
    return a;
}

/* tenant asks for a session of profile now: it becomes the latest asker, the previous latest
 * (if another tenant) the one before. */
static void
asker_note(struct session_manager *m, const char *tenant, const char *profile, uint64_t now_s)
{
    struct askers *a = askers_of(m, profile);

    if (strcmp(a->tenant[0], tenant) != 0) {
        memcpy(a->tenant[1], a->tenant[0], sizeof(a->tenant[1]));
        a->at_s[1] = a->at_s[0];
        (void)snprintf(a->tenant[0], sizeof(a->tenant[0]), "%s", tenant);
    }
    a->at_s[0] = now_s;
}

/* Whether a tenant other than tenant asked for profile within ASKER_WINDOW_S. */
static bool
others_asked(struct session_manager *m, const char *tenant, const char *profile, uint64_t now_s)
{
    const struct askers *a = askers_of(m, profile);

    for (int i = 0; i < 2; i++) {
        if (a->tenant[i][0] != '\0' && strcmp(a->tenant[i], tenant) != 0 &&
            now_s - a->at_s[i] < ASKER_WINDOW_S) {
            return true;
        }
    }
    return false;
}

static struct take_rate *
take_rate(struct session_manager *m, const char *tenant, const char *profile)
{
    char key[160];
    struct take_rate *r;

    (void)snprintf(key, sizeof(key), "%s/%s", tenant, profile);
    r = hashmap_get(m->takes, key);
    if (r == NULL) {
        r = xcalloc(1, sizeof(*r));
        memcpy(r->key, key, sizeof(key));
        hashmap_put(m->takes, r->key, r);
    }
    return r;
}

static unsigned
takes_recent(const struct take_rate *r, uint64_t now_s)
{
    unsigned n = 0;

    for (unsigned i = 0; i < TAKE_WINDOW_S; i++) {
        n += now_s - r->sec[i] < TAKE_WINDOW_S ? r->n[i] : 0;
    }
    return n;
}

static void
take_note(struct take_rate *r, uint64_t now_s)
{
    unsigned i = (unsigned)(now_s % TAKE_WINDOW_S);

    if (r->sec[i] != now_s) {
        r->sec[i] = now_s;
        r->n[i] = 0;
    }
    r->n[i]++;
}

/* The ready containers a create of tenant must leave in p's pool: other tenants' reserved share,
 * and half the warm target from a heavy taker. */
static unsigned
warm_keep(struct session_manager *m, const char *tenant, const struct cfg_profile *p,
          uint64_t now_s)
{
    unsigned keep = cfg_reserved_for_others(m->cfg, tenant, p->name);
    const struct take_rate *r = take_rate(m, tenant, p->name);

    if (p->warm > 0 && takes_recent(r, now_s) > p->warm &&
        others_asked(m, tenant, p->name, now_s)) {
        keep = MAX(keep, (p->warm + 1) / 2);
    }
    return keep;
}

int
create_take_warm(struct session_manager *m, struct pool *pool, const char *tenant,
                 const struct cfg_profile *p, uint64_t now_s, struct pool_slot **ret,
                 unsigned *ret_keep)
{
    /* Other tenants' reserved share of the warm pool, and the fair share a heavy taker leaves,
     * stay for them: past it, the claim waits for a fresh container like a cold one. */
    unsigned keep = warm_keep(m, tenant, p, now_s);

    asker_note(m, tenant, p->name, now_s);
    *ret_keep = keep;
    if (pool_take(pool, keep, ret) < 0) {
        return -EAGAIN;
    }
    take_note(take_rate(m, tenant, p->name), now_s);
    return 0;
}

/* A warm container was taken for req: bound. */
static int
take_warm(struct session_manager *m, struct pool_slot *slot, const struct session_create_req *req,
          const struct cfg_profile *p, session_create_cb *cb, void *userdata, uint64_t started_us,
          const char *id, struct err *reterr)
{
    int r = bind_slot(m, slot, req, p, cb, userdata, started_us, false, id);

    return r < 0 ? err_set(reterr, r, "redis is unavailable") : 0;
}

struct cold *
create_cold_new(struct session_manager *m, const struct session_create_req *req,
                const struct cfg_profile *p, session_create_cb *cb, void *userdata,
                uint64_t started_us)
{
    struct cold *c = xcalloc(1, sizeof(*c));

    c->m = m;
    c->cb = cb;
    c->userdata = userdata;
    c->started_us = started_us;
    (void)snprintf(c->tenant, sizeof(c->tenant), "%s", req->tenant);
    (void)snprintf(c->profile, sizeof(c->profile), "%s", p->name);
    c->metadata = req->metadata_json ? xstrdup(req->metadata_json) : NULL;
    c->ext = req->ext ? xstrdup(req->ext) : NULL;
    c->egress = req->egress_json ? xstrdup(req->egress_json) : NULL;
    c->req = *req;
    c->req.tenant = c->tenant;
    c->req.profile = c->profile;
    c->req.metadata_json = c->metadata;
    (void)snprintf(c->idle_action, sizeof(c->idle_action), "%s",
                   req->idle_action ? req->idle_action : "");
    c->req.idle_action = req->idle_action ? c->idle_action : NULL;
    c->req.ext = c->ext;
    c->req.egress_json = c->egress;
    TAILQ_INSERT_TAIL(&m->colds, c, link);
    return c;
}

/* No warm container may be taken: c waits for one made on demand (or is freed). */
static int
create_cold(struct session_manager *m, struct pool *pool, struct cold *c,
            const struct cfg_profile *p, unsigned keep, struct err *reterr)
{
    unsigned reserved = cfg_reserved_for_others(m->cfg, c->tenant, p->name);
    struct pool_slot *slot;
    int r;

    if (pool_wait(pool, COLD_WAIT_FACTOR * m->cfg->engine_timeout_ms, on_cold_slot, c,
                  &c->waiter) == 0) {
        return 0;
    }
    /* At max no fresh container comes: what a heavy taker left ready for the others is better
     * taken than refused (reservations stay theirs). */
    if (keep > reserved && pool_take(pool, reserved, &slot) == 0) {
        take_note(take_rate(m, c->tenant, p->name), c->started_us / 1000000u);
        r = take_warm(m, slot, &c->req, p, c->cb, c->userdata, c->started_us,
                      c->id[0] ? c->id : NULL, reterr);
        create_cold_free(c);
        return r;
    }
    if (c->id[0] != '\0') {
        create_unadmit(m, c->tenant, c->id);
    }
    create_cold_free(c);
    return err_set(reterr, -EUSERS, "profile '%s' is at its maximum of %u containers; retry later",
                   p->name, p->max);
}

int
create_claim(struct session_manager *m, struct cold *c, struct err *reterr)
{
    const struct cfg_profile *p = manager_profile_find(m, c->profile);
    struct pool *pool = p != NULL ? pool_for(m, p->name) : NULL;
    struct pool_slot *slot;
    unsigned keep;
    int r;

    if (pool == NULL) { /* its profile went while it was admitted */
        create_unadmit(m, c->tenant, c->id);
        create_cold_free(c);
        return err_set(reterr, -ENOENT, "no profile '%.48s'", c->profile);
    }
    if (create_take_warm(m, pool, c->tenant, p, c->started_us / 1000000u, &slot, &keep) == 0) {
        r = take_warm(m, slot, &c->req, p, c->cb, c->userdata, c->started_us,
                      c->id[0] ? c->id : NULL, reterr);
        create_cold_free(c);
        return r;
    }
    return create_cold(m, pool, c, p, keep, reterr);
}

int
session_check_egress(const struct cfg_profile *p, const char *text, struct err *reterr)
{
    struct egress_narrowing n;
    json_t *j;
    int r;

    if (p->egress == NULL) {
        return err_set(reterr, -EINVAL,
                       "'egress': profile '%s' has no egress list; a session can only narrow "
                       "its profile's",
                       p->name);
    }
    if (strlen(text) > STORE_EGRESS_MAX) {
        return err_set(reterr, -EINVAL, "'egress' is larger than %u bytes", STORE_EGRESS_MAX);
    }
    j = json_loads(text, 0, NULL);
    r = egress_narrowing_from_json(j, "egress", &n, reterr);
    json_decref(j);
    if (r == 0) {
        egress_narrowing_done(&n);
    }
    return r;
}

int
session_create(struct session_manager *m, const struct session_create_req *req,
               session_create_cb *cb, void *userdata, struct err *reterr)
{
    const struct cfg_profile *p = manager_profile_find(m, req->profile);
    struct pool *pool = p != NULL ? pool_for(m, p->name) : NULL;
    const struct cfg_tenant *t = cfg_tenant_find(m->cfg, req->tenant);
    uint64_t started_us = time_now_us();
    struct pool_slot *slot;
    unsigned keep;

    if (pool == NULL) {
        return err_set(reterr, -ENOENT, "no profile '%.48s'", req->profile ? req->profile : "");
    }
    if (t != NULL && !cfg_tenant_allows(t, p->name)) {
        return err_set(reterr, -EPERM, "tenant '%s' may not use profile '%s'", t->id, p->name);
    }
    if (pool_refused(pool)) { /* the engine cannot enforce it: say why (503, see readyz) */
        struct pool_stats st;

        pool_get_stats(pool, &st);
        return err_set(reterr, -ECONNREFUSED, "%s", st.refused);
    }
    if (t != NULL && t->max_sessions > 0 &&
        create_tenant_sessions(m, t->id, NULL) >= t->max_sessions) {
        return err_set(reterr, -EDQUOT,
                       "tenant '%s' has max_sessions %u sessions; end one, or retry later", t->id,
                       t->max_sessions);
    }
    if (create_share_check(m, req->tenant, p, "end one, or retry later", reterr) < 0) {
        return -EDQUOT;
    }
    if (req->idle_timeout_s > p->idle_timeout_s) {
        return err_set(reterr, -EINVAL, "'idle_timeout_s' must be at most %u for profile '%s'",
                       p->idle_timeout_s, p->name);
    }
    if (req->pause_after_s > (req->idle_timeout_s ? req->idle_timeout_s : p->idle_timeout_s)) {
        return err_set(reterr, -EINVAL,
                       "'pause_after_s' must be at most the session's idle timeout (%u s)",
                       req->idle_timeout_s ? req->idle_timeout_s : p->idle_timeout_s);
    }
    if (req->lifetime_s > p->max_lifetime_s) {
        return err_set(reterr, -EINVAL, "a lifetime must be at most %u s for profile '%s'",
                       p->max_lifetime_s, p->name);
    }
    if (req->idle_action != NULL && strcmp(req->idle_action, "end") != 0 &&
        strcmp(req->idle_action, "hibernate") != 0) {
        return err_set(reterr, -EINVAL, "'idle_action' must be \"end\" or \"hibernate\"");
    }
    if (req->idle_action != NULL && strcmp(req->idle_action, "hibernate") == 0 &&
        (m->snap == NULL || !cfg_profile_may_hibernate(m->cfg, p))) {
        return err_set(reterr, -EINVAL,
                       "'idle_action' \"hibernate\" needs a snapshot store and a profile that "
                       "may hibernate ('%s' %s)",
                       p->name, m->snap == NULL ? "has no store" : "never hibernates");
    }
    if (req->metadata_json != NULL && strlen(req->metadata_json) > STORE_METADATA_MAX) {
        return err_set(reterr, -EMSGSIZE, "the session's metadata is larger than %u bytes",
                       STORE_METADATA_MAX);
    }
    if (req->ext != NULL && strlen(req->ext) > STORE_EXT_MAX) {
        return err_set(reterr, -EINVAL, "the session's extension record is too long");
    }
    if (req->egress_json != NULL && session_check_egress(p, req->egress_json, reterr) < 0) {
        return -EINVAL;
    }
    if (!store_redis_is_up(m->redis)) {
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    /* A tenant's max_sessions holds across the cluster: admitted in Redis before a container
     * is claimed (admit.c). Without that bound, no round trip. */
    if (t != NULL && t->max_sessions > 0) {
        return create_admit(create_cold_new(m, req, p, cb, userdata, started_us), t->max_sessions,
                            reterr);
    }
    if (create_take_warm(m, pool, req->tenant, p, started_us / 1000000u, &slot, &keep) == 0) {
        return take_warm(m, slot, req, p, cb, userdata, started_us, NULL, reterr);
    }
    return create_cold(m, pool, create_cold_new(m, req, p, cb, userdata, started_us), p, keep,
                       reterr);
}
