/* Hibernation: a session whose state is in a snapshot and that holds no container
 * (docs/hibernate.md, "Hibernate").
 *
 *   READY -> HIBERNATING -> HIBERNATED -> WAKING -> READY
 *
 * Hibernating: the snapshot service takes a hibernation snapshot (the kernel saves the globals,
 * the workspace streams into the store), then one Redis script makes the record hibernated on it
 * (store_sessions_hibernate(): only while the record is still live on this container), and only
 * then is the container released. A crash before that script leaves a live session (its
 * container is adopted) and a snapshot no record names, which the sweep removes at its write
 * deadline; after it, a hibernated record and a container that claims a session no longer live
 * on it, which adoption releases: never neither, never both. A call that needs the session while
 * it hibernates waits; if one waits when the snapshot is ready, the hibernation is called off
 * (the snapshot goes to the sweep) and the call goes on at once, without a wake.
 *
 * Waking: the first call that needs it (session_ensure_live()) claims a container as a create
 * does (warm, else one made on demand), binds it to the session and has the snapshot restored
 * into it; then one script makes the record live on the new container with the epoch increased
 * (store_sessions_wake(), which hands the snapshot to the sweep). A crash before it leaves the
 * record hibernated (the new container is released at adoption); after it, a live session.
 * Calls during a wake wait for it (two wakes are one). A snapshot found missing or corrupt ends
 * the session (snapshot_lost: the log, the audit line and the waiting calls' answer say so); a
 * failure for now (the store, Redis, the engine, no container) leaves it hibernated, and the
 * calls get a 503 to retry.
 *
 * The snapshot service is reached through m->snap (session.h), which the server sets. */
#define LOG_MODULE "session"
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "kernel/kernel.h"
#include "log/log.h"
#include "pool/pool.h"
#include "session-internal.h"
#include "store/redis.h"
#include "store/sessions.h"
#include "util/hashmap.h"
#include "util/macro.h"
#include "util/time.h"

static bool
may_hibernate(const struct session *s)
{
    return s->m->snap != NULL && cfg_profile_may_hibernate(s->m->cfg, s->profile);
}

bool
session_is_hibernated(const struct session *s)
{
    return s->state == SESSION_HIBERNATING || s->state == SESSION_HIBERNATED ||
           s->state == SESSION_WAKING;
}

bool
hibernate_on_idle_action(const struct session *s)
{
    enum store_idle_action a = s->rec.idle_action;

    if (a == STORE_IDLE_PROFILE) {
        a = strcmp(s->profile->idle_action, "hibernate") == 0 ? STORE_IDLE_HIBERNATE
                                                              : STORE_IDLE_END;
    }
    return a == STORE_IDLE_HIBERNATE && may_hibernate(s);
}

bool
hibernate_on_idle(const struct session *s)
{
    return hibernate_on_idle_action(s) && (s->state == SESSION_READY || pause_is_paused(s));
}

static struct session_profile_stats *
profile_stats(struct session *s)
{
    size_t i = manager_profile_index(s->m, s->rec.profile);

    return i < s->m->n_pools ? &s->m->pstats[i] : NULL;
}

static void
on_sop_done(int r, void *userdata)
{
    sop_free(userdata); /* best effort */
}

/* The snapshot the session hibernates on (id NULL: none), and what its record says of its bytes
 * (snapshot: the take's answer), which the session keeps for a Redis that loses the record. */
static void
set_snapshot(struct session *s, const char *id, const json_t *snapshot)
{
    const char *sha = json_string_value(json_object_get(snapshot, "sha256"));

    (void)snprintf(s->rec.snapshot, sizeof(s->rec.snapshot), "%s", id != NULL ? id : "");
    (void)snprintf(s->rec.snapshot_sha256, sizeof(s->rec.snapshot_sha256), "%s",
                   id != NULL && sha != NULL ? sha : "");
    s->rec.snapshot_size =
        id != NULL ? (uint64_t)json_integer_value(json_object_get(snapshot, "size")) : 0;
}

/* The snapshot no record names (a hibernation that did not happen) goes to the sweep. */
static void
drop_snapshot(struct session *s, const char *snapshot)
{
    struct sop *op = sop_new(s->m, SOP_HIBERNATE, s->rec.id);

    if (store_sessions_drop_snapshot(s->m->store, snapshot, on_sop_done, op) < 0) {
        sop_free(op); /* its write deadline removes it */
    }
}

/* An idle hibernation that did not happen: the reaper's claim took the deadline; it comes back
 * at at (wall ms). */
static void
requeue(struct session *s, uint64_t at)
{
    struct sop *op = sop_new(s->m, SOP_HIBERNATE, s->rec.id);

    if (store_sessions_requeue(s->m->store, s->rec.id, at, on_sop_done, op) < 0) {
        sop_free(op); /* Redis is down: the next start gives it its deadline back */
    }
}

/* ---- hibernating ----------------------------------------------------------------------------- */

/* The hibernation did not happen: the session stays live (an idle one ends instead when the
 * cause will not go away, or is tried again later). */
static void
hibernate_failed(struct session *s, int r, const char *why)
{
    bool idle = s->idle_hibernation;
    bool cancelled = r == -ECANCELED;
    struct err e = {0};

    s->idle_hibernation = false;
    if (s->state == SESSION_HIBERNATING) {
        session_set_state(s, SESSION_READY);
    }
    if (!cancelled) {
        s->m->stats.hibernate_failures++;
        log_warn("session=%s could not hibernate: %s", s->rec.id, why);
    }
    waiters_answer(s, WAIT_HIBERNATE, cancelled ? -EBUSY : r,
                   cancelled ? "a call needed the session while it hibernated: it stays live"
                             : why);
    waiters_answer(s, WAIT_LIVE, 0, NULL);
    if (!idle) {
        return;
    }
    if (cancelled || r == -ENOTCONN || r == -ETIMEDOUT || r == -EPIPE) {
        requeue(s, cancelled ? store_session_deadline(&s->rec, time_wall_ms())
                             : time_wall_ms() + HIBERNATE_RETRY_MS);
        return;
    }
    /* What idle_action "end" would have done, saying why it did not hibernate. */
    session_set_end_cause(s, "daemon", "idle");
    (void)snprintf(s->end_detail, sizeof(s->end_detail), "it could not hibernate: %.160s", why);
    if (session_end(s, NULL, NULL, &e) < 0 && e.code != -EALREADY) {
        session_drop(s); /* the record goes at the next start (no container) */
    }
}

static void
on_hibernated(int r, void *userdata)
{
    struct sop *op = userdata;
    struct session_manager *m = op->m;
    struct session *s = m != NULL ? hashmap_get(m->by_id, op->id) : NULL;
    struct session_profile_stats *ps;
    struct pool_slot *slot;
    char actor[80];

    sop_free(op);
    if (s == NULL || s->state != SESSION_HIBERNATING) {
        return; /* ended meanwhile: its end hands the snapshot to the sweep (or its deadline) */
    }
    if (r < 0) {
        drop_snapshot(s, s->rec.snapshot);
        set_snapshot(s, NULL, NULL);
        hibernate_failed(s, r == -ENOENT ? -EPIPE : -ENOTCONN,
                         r == -ENOENT ? "its record changed meanwhile" : "redis is unavailable");
        return;
    }
    slot = s->slot;
    if (hashmap_get(m->by_container, s->rec.container) == s) {
        (void)hashmap_remove(m->by_container, s->rec.container);
    }
    session_keep_egress_bytes(s);
    s->slot = NULL;
    s->kernel = NULL;
    s->rec.container[0] = '\0';
    session_timers(s, false);
    pool_slot_release(slot); /* its record no longer names it: removed, never reused */
    m->stats.hibernated_total++;
    ps = profile_stats(s);
    if (ps != NULL) {
        metrics_hist_observe(&ps->hibernate, time_now_us() - s->hibernate_started_us);
    }
    manager_audit(m, &(struct session_audit){
                         .kind = SESSION_AUDIT_HIBERNATED,
                         .actor = s->idle_hibernation ? "daemon"
                                  : s->hibernate_by_admin
                                      ? "admin"
                                      : tenant_actor(s->rec.tenant, actor, sizeof(actor)),
                         .tenant = s->rec.tenant,
                         .session = s->rec.id,
                         .why = s->idle_hibernation ? "idle" : "requested",
                         .snapshot = s->rec.snapshot,
                         .bytes = s->rec.snapshot_size,
                         .duration_ms = (time_now_us() - s->hibernate_started_us) / 1000u,
                     });
    log_info("session=%s hibernated on snapshot %s (%llu bytes)", s->rec.id, s->rec.snapshot,
             (unsigned long long)s->rec.snapshot_size);
    s->idle_hibernation = false;
    json_decref(s->restored); /* its wake says what comes back */
    s->restored = NULL;
    s->rec.state = STORE_SESSION_HIBERNATED; /* as Redis has it now */
    session_set_state(s, SESSION_HIBERNATED);
    waiters_answer(s, WAIT_HIBERNATE, 0, NULL);
    if (waiters_count(s, WAIT_LIVE) > 0) {
        hibernate_wake(s); /* a call came while the record was written */
    }
}

static void
on_taken(int r, json_t *result, const struct err *e, void *userdata)
{
    struct session *s = userdata; /* valid: session_destroy() forgets the job */
    const char *id = json_string_value(json_object_get(result, "id"));
    struct sop *op;

    s->snap_job = false;
    if (r < 0 || id == NULL) {
        hibernate_failed(s, r < 0 ? r : -EIO, e != NULL ? e->msg : "the snapshot has no id");
        return;
    }
    if (s->state != SESSION_HIBERNATING || waiters_count(s, WAIT_LIVE) > 0) {
        /* Its kernel connection broke, or a call needs it: it stays live. */
        drop_snapshot(s, id);
        hibernate_failed(s, -ECANCELED, "a call needed the session while it hibernated");
        return;
    }
    set_snapshot(s, id, result);
    op = sop_new(s->m, SOP_HIBERNATE, s->rec.id);
    if (store_sessions_hibernate(s->m->store, s->rec.id, s->rec.container, id, on_hibernated, op) <
        0) {
        sop_free(op);
        drop_snapshot(s, id);
        set_snapshot(s, NULL, NULL);
        hibernate_failed(s, -ENOTCONN, "redis is unavailable");
    }
}

/* The tenant's sessions that hold a snapshot instead of a container, or are about to. */
static unsigned
tenant_hibernated(const struct session_manager *m, const char *tenant)
{
    const struct session *s;
    unsigned n = 0;

    TAILQ_FOREACH (s, &m->sessions, link) {
        n += (s->state == SESSION_HIBERNATING || s->state == SESSION_HIBERNATED) &&
             strcmp(s->rec.tenant, tenant) == 0;
    }
    return n;
}

/* Starts the take of a READY session with nothing running. */
static int
hibernate_begin(struct session *s, struct err *reterr)
{
    unsigned max = s->m->cfg->snapshots_max_hibernated_per_tenant;

    if (tenant_hibernated(s->m, s->rec.tenant) >= max) {
        return err_set(reterr, -EDQUOT,
                       "tenant '%s' has %u hibernated sessions "
                       "(snapshots.max_hibernated_per_tenant): end one first",
                       s->rec.tenant, max);
    }
    if (s->exec != NULL || !TAILQ_EMPTY(&s->restarts) || s->uses > 0) {
        return err_set(reterr, -EBUSY,
                       "an execution, a restart or a file transfer runs in this session");
    }
    if (s->state != SESSION_READY || s->slot == NULL) {
        return err_set(reterr, -ENOTCONN,
                       "the connection to the sandbox broke (engine restart?); retry shortly");
    }
    if (!store_redis_is_up(s->m->redis)) {
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    if (s->m->snap->take(s->m->snap_userdata, s, on_taken, s, reterr) < 0) {
        return reterr->code;
    }
    s->snap_job = true;
    s->hibernate_started_us = time_now_us();
    session_set_state(s, SESSION_HIBERNATING);
    return 0;
}

int
session_hibernate(struct session *s, const char *actor, session_live_cb *cb, void *userdata,
                  struct session_waiter **ret, struct err *reterr)
{
    int r;

    if (s->state == SESSION_ENDING) {
        return err_set(reterr, -ENOENT, "the session is ending");
    }
    if (s->m->snap == NULL) {
        return err_set(reterr, -ENOSYS,
                       "hibernation needs a snapshot store (snapshots.store), and none is set");
    }
    if (!cfg_profile_may_hibernate(s->m->cfg, s->profile)) {
        return err_set(reterr, -EPERM, "profile '%s' never hibernates ('hibernate': \"never\")",
                       s->profile->name);
    }
    if (s->state == SESSION_HIBERNATED) {
        return 0;
    }
    if (waiters_count(s, WAIT_HIBERNATE) >= MAX_LIVE_WAITERS) {
        return err_set(reterr, -EBUSY, "too many calls wait for this session to hibernate");
    }
    if (s->state == SESSION_HIBERNATING) {
        *ret = waiter_add(s, WAIT_HIBERNATE, cb, userdata);
        return 1;
    }
    if (s->state == SESSION_WAKING || pause_is_paused(s)) {
        return err_set(reterr, -EBUSY, "the session is %s; retry shortly",
                       session_state_name(s->state));
    }
    r = hibernate_begin(s, reterr);
    if (r < 0) {
        return r;
    }
    s->hibernate_by_admin = actor != NULL && strcmp(actor, "admin") == 0; /* else its tenant */
    *ret = waiter_add(s, WAIT_HIBERNATE, cb, userdata);
    return 1;
}

static void
on_live_for_idle(int r, const struct err *e, void *userdata)
{
    struct session *s = userdata; /* valid while r != -ENOENT (destroy answers first) */
    struct err e2 = {0};

    if (r == -ENOENT) {
        return;
    }
    if (r < 0) {
        hibernate_failed(s, -ENOTCONN, e != NULL ? e->msg : "it could not be resumed");
        return;
    }
    if (s->state != SESSION_READY || hibernate_begin(s, &e2) < 0) {
        hibernate_failed(s, e2.code < 0 ? e2.code : -ENOTCONN,
                         e2.code < 0 ? e2.msg : "it is not live");
    }
}

void
hibernate_idle(struct session *s)
{
    struct session_waiter *w = NULL;
    struct err e = {0};
    int r;

    s->idle_hibernation = true;
    r = session_ensure_live(s, on_live_for_idle, s, &w, &e); /* a paused one resumes first */
    if (r == 0 && hibernate_begin(s, &e) < 0) {
        r = e.code;
    }
    if (r < 0) {
        hibernate_failed(s, r, e.msg);
    }
}

/* ---- waking ---------------------------------------------------------------------------------- */

void
hibernate_drop_container(struct session *s)
{
    struct pool_slot *slot = s->slot;

    if (s->wake_wait != NULL) {
        pool_wait_cancel(s->wake_wait);
        s->wake_wait = NULL;
    }
    if (slot == NULL) {
        return;
    }
    if (hashmap_get(s->m->by_container, s->rec.container) == s) {
        (void)hashmap_remove(s->m->by_container, s->rec.container);
    }
    session_keep_egress_bytes(s);
    s->slot = NULL;
    s->kernel = NULL;
    s->rec.container[0] = '\0';
    session_timers(s, false);
    pool_slot_release(slot); /* bound to this session: removed, never reused */
}

void
hibernate_wake_failed(struct session *s, int r, const char *why)
{
    if (s->snap_job) {
        hibernate_forget(s);
    }
    hibernate_drop_container(s);
    session_set_state(s, SESSION_HIBERNATED);
    s->m->stats.wake_failures++;
    log_warn("session=%s could not be woken: %s", s->rec.id, why);
    waiters_answer(s, WAIT_LIVE, r == -EUSERS ? -EUSERS : -ENOTCONN, why);
}

/* Its snapshot is missing or corrupt: the session ends (never presented half-restored). */
static void
snapshot_lost(struct session *s, const char *why)
{
    struct err e = {0};

    log_error("session=%s: its snapshot %s is lost: %s", s->rec.id, s->rec.snapshot, why);
    s->m->stats.wake_failures++;
    session_set_end_cause(s, "daemon", "snapshot_lost");
    (void)snprintf(s->end_detail, sizeof(s->end_detail),
                   "the session's snapshot is lost, so it ended: %.140s", why);
    manager_notify(s->m, "ended", &s->rec, s->end_detail);
    if (session_end(s, NULL, NULL, &e) < 0) {
        session_drop(s); /* Redis is down: the next start finds it hibernated again */
    }
}

static void
on_wake_recorded(int r, void *userdata)
{
    struct sop *op = userdata;
    struct session_manager *m = op->m;
    struct session *s = m != NULL ? hashmap_get(m->by_id, op->id) : NULL;
    struct session_profile_stats *ps;
    char detail[160];

    sop_free(op);
    if (s == NULL || s->state != SESSION_WAKING) {
        return; /* ended meanwhile: its end releases the new container */
    }
    if (r == -ENOENT) {
        session_lost(s, "its record is no longer hibernated on its snapshot");
        return;
    }
    if (r < 0) {
        hibernate_wake_failed(s, -ENOTCONN, "redis is unavailable");
        return;
    }
    s->rec.epoch++;
    s->rec.gen = kernel_gen(s->kernel);
    s->rec.last_active_at = time_wall_ms();
    s->last_touch_ms = s->last_use_ms = time_now_ms();
    m->stats.woken_total++;
    ps = profile_stats(s);
    if (ps != NULL) {
        metrics_hist_observe(&ps->wake, time_now_us() - s->hibernate_started_us);
    }
    manager_audit(m, &(struct session_audit){
                         .kind = SESSION_AUDIT_WOKEN,
                         .actor = "daemon",
                         .tenant = s->rec.tenant,
                         .session = s->rec.id,
                         .snapshot = s->rec.snapshot,
                         .container = s->rec.container,
                         .cold = s->cold,
                         .epoch = s->rec.epoch,
                         .duration_ms = (time_now_us() - s->hibernate_started_us) / 1000u,
                     });
    (void)snprintf(detail, sizeof(detail),
                   "kernel_epoch is now %llu: woken from its snapshot (variables restored)",
                   (unsigned long long)s->rec.epoch);
    manager_notify(m, "epoch", &s->rec, detail);
    set_snapshot(s, NULL, NULL);
    s->rec.state = STORE_SESSION_ACTIVE;
    session_set_state(s, SESSION_READY);
    waiters_answer(s, WAIT_LIVE, 0, NULL);
}

static void
on_restored(int r, json_t *restored, const struct err *e, void *userdata)
{
    struct session *s = userdata; /* valid: session_destroy() forgets the job */
    const char *why = e != NULL ? e->msg : strerror(-r);
    struct sop *op;

    s->snap_job = false;
    if (r == -EBADMSG || r == -ENOENT) {
        snapshot_lost(s, why);
        return;
    }
    if (r < 0) {
        hibernate_wake_failed(s, r, why);
        return;
    }
    session_set_restored(s, restored);
    op = sop_new(s->m, SOP_HIBERNATE, s->rec.id);
    if (store_sessions_wake(s->m->store, s->rec.id, s->rec.container, s->rec.epoch + 1,
                            kernel_gen(s->kernel), time_wall_ms(), s->rec.snapshot,
                            on_wake_recorded, op) < 0) {
        sop_free(op);
        hibernate_wake_failed(s, -ENOTCONN, "redis is unavailable");
    }
}

/* The wake has its container: bind it, restore the snapshot into it. */
static void
wake_attach(struct session *s, struct pool_slot *slot, bool cold)
{
    struct err e = {0};

    s->slot = slot;
    s->kernel = pool_slot_kernel(slot);
    s->cold = cold;
    session_timers(s, true);
    kernel_set_handlers(s->kernel, &session_kernel_handlers, s);
    (void)snprintf(s->rec.container, sizeof(s->rec.container), "%s", pool_slot_container(slot));
    hashmap_put(s->m->by_container, s->rec.container, s);
    session_bind_gate(s);
    /* The container remembers whom it serves: after a crash, it claims a session whose record
     * is still hibernated (released at adoption) or live on it (adopted). */
    (void)kernel_bind(s->kernel, s->rec.id);
    if (s->m->snap->restore(s->m->snap_userdata, s, s->rec.snapshot, on_restored, s, &e) < 0) {
        hibernate_wake_failed(s, e.code, e.msg);
        return;
    }
    s->snap_job = true;
}

static void
on_wake_slot(int r, struct pool_slot *slot, const struct err *e, void *userdata)
{
    struct session *s = userdata; /* valid: hibernate_drop_container() cancels the wait */

    s->wake_wait = NULL;
    if (r < 0) {
        hibernate_wake_failed(s, r, e != NULL ? e->msg : "no container came");
        return;
    }
    wake_attach(s, slot, true);
}

int
hibernate_wake_admit(const struct session *s, struct err *reterr)
{
    const struct cfg_profile *p = manager_profile_find(s->m, s->rec.profile);

    if (p == NULL) {
        return 0; /* hibernate_wake() says why it cannot */
    }
    return create_share_check(s->m, s->rec.tenant, p,
                              "the session stays hibernated, intact: end or hibernate another "
                              "of its sessions, or retry later",
                              reterr);
}

void
hibernate_wake(struct session *s)
{
    size_t i = manager_profile_index(s->m, s->rec.profile);
    struct pool *pool = i < s->m->n_pools ? s->m->pools[i] : NULL;
    struct pool_slot *slot;
    struct err e = {0};
    unsigned keep;

    if (s->m->snap == NULL || pool == NULL || !store_redis_is_up(s->m->redis)) {
        waiters_answer(s, WAIT_LIVE, -ENOTCONN,
                       s->m->snap == NULL ? "the session is hibernated and no snapshot store is set"
                       : pool == NULL     ? "the session's profile is no longer configured"
                                          : "redis is unavailable");
        return;
    }
    /* A wake claims a container as a create does, so it passes the same admission: without it,
     * hibernating, creating and waking again held any number of containers. */
    if (hibernate_wake_admit(s, &e) < 0) {
        s->m->stats.wake_refused++;
        waiters_answer(s, WAIT_LIVE, e.code, e.msg);
        return;
    }
    s->hibernate_started_us = time_now_us();
    session_set_state(s, SESSION_WAKING);
    /* As a create: a warm container (other tenants' reserved share, and what a heavy taker
     * leaves, stay theirs), else one made on demand. */
    if (create_take_warm(s->m, pool, s->rec.tenant, manager_profile_find(s->m, s->rec.profile),
                         s->hibernate_started_us / 1000000u, &slot, &keep) == 0) {
        wake_attach(s, slot, false);
        return;
    }
    if (pool_wait(pool, COLD_WAIT_FACTOR * s->m->cfg->engine_timeout_ms, on_wake_slot, s,
                  &s->wake_wait) < 0) {
        hibernate_wake_failed(s, -EUSERS,
                              "its profile is at its maximum of containers; retry later");
    }
}

void
hibernate_forget(struct session *s)
{
    if (s->snap_job && s->m->snap != NULL) {
        s->m->snap->forget(s->m->snap_userdata, s->rec.id);
    }
    s->snap_job = false;
    if (s->wake_wait != NULL) {
        pool_wait_cancel(s->wake_wait);
        s->wake_wait = NULL;
    }
}

/* ---- records and the manager ----------------------------------------------------------------- */

void
hibernate_adopt_record(struct session_manager *m, const struct store_session_rec *rec)
{
    const struct cfg_profile *p = manager_profile_find(m, rec->profile);
    struct session *s;

    if (p == NULL) {
        return; /* its profile went: it stays in Redis for a daemon that has it */
    }
    s = session_alloc(m, NULL, p, rec);
    session_register_as(s, SESSION_HIBERNATED);
}

void
session_manager_set_snapshots(struct session_manager *m, const struct session_snapshot_ops *ops,
                              void *userdata)
{
    struct session *s;

    if (ops == NULL) { /* the service goes: nothing of it may call back */
        TAILQ_FOREACH (s, &m->sessions, link) {
            hibernate_forget(s);
        }
    }
    m->snap = ops;
    m->snap_userdata = userdata;
}
