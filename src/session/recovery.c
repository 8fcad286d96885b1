/* Recovery: what the daemon learns after a start or a break, from Redis and from the engine.
 *
 *  - Adoption: a container whose kernel says it serves a session (pool found_session) is matched
 *    with this node's records once they are loaded (containers found before that are held).
 *    A record in state `ending` (the daemon stopped between marking it and deleting it, see
 *    session.c) is finished: its container is removed, its record deleted, the audit says
 *    "session.ended".
 *  - Reconciliation: a full container list ends records whose container is gone (their state is
 *    lost; an `ending` one is finished) and decides for DETACHED sessions: container running ->
 *    RECONNECTING, else the session ends.
 *  - Container events (docker/list.h): a death or a removal ends the session the container
 *    served, or judges the record whose container went before its hello; "oom"
 *    is remembered (an OOM kill explains a death within OOM_DEATH_MS); under a runtime other
 *    than runc a death during an execution makes the session DYING for OOM_WAIT_MS, waiting for
 *    a late "oom". A drifted container is quarantined (its session ends).
 *
 * Container lookups go through the manager's by_container index. */
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "docker/list.h"
#include "kernel/kernel.h"
#include "pool/pool.h"
#include "session-internal.h"
#include "store/redis.h"
#include "store/sessions.h"
#include "util/hashmap.h"
#include "util/macro.h"
#include "util/time.h"

/* ---- adoption -------------------------------------------------------------------------------- */

/* Builds a session from a loaded record and an adopted container. */
static void
adopt(struct session_manager *m, struct pool_slot *slot, const struct store_session_rec *rec,
      int64_t gen, const char *busy)
{
    const struct cfg_profile *p = manager_profile_find(m, rec->profile);
    struct session *s;

    if (p == NULL) {
        pool_slot_release(slot);
        return;
    }
    s = session_alloc(m, slot, p, rec);
    session_register(s);
    m->stats.adopted_total++;
    manager_notify(m, "adopted", rec, "re-adopted after a restart");
    if (result_epoch_moves(rec->gen, gen)) {
        /* The worker restarted while we were away: the namespace is gone. */
        session_epoch_bump(s, gen, "the interpreter restarted while the daemon was down");
    }
    if (busy != NULL && busy[0] != '\0') {
        execution_orphan(s, busy);
    }
}

static ssize_t
unmatched_find(struct session_manager *m, const char *id)
{
    for (size_t i = 0; i < m->n_unmatched; i++) {
        if (strcmp(m->unmatched[i].id, id) == 0) {
            return (ssize_t)i;
        }
    }
    return -1;
}

/* Moves record i out of the unmatched ones into *ret (its texts then ret's). */
static void
unmatched_take(struct session_manager *m, size_t i, struct store_session_rec *ret)
{
    *ret = m->unmatched[i];
    m->unmatched[i] = m->unmatched[--m->n_unmatched];
}

void
recovery_unmatched_free(struct session_manager *m)
{
    for (size_t i = 0; i < m->n_unmatched; i++) {
        store_session_rec_done(&m->unmatched[i]);
    }
    free(m->unmatched);
    m->unmatched = NULL;
    m->n_unmatched = 0;
}

void
recovery_forget(struct session_manager *m, const char *id)
{
    ssize_t i = unmatched_find(m, id);
    struct store_session_rec rec;

    if (i >= 0) {
        unmatched_take(m, (size_t)i, &rec);
        store_session_rec_done(&rec);
    }
}

/* A record marked ending by a daemon that stopped before deleting it: the end is finished (its
 * container slot, NULL when none came back, is released; the record goes once it is gone). */
static void
finish_ending(struct session_manager *m, const struct store_session_rec *rec,
              struct pool_slot *slot)
{
    manager_notify(m, "ended", rec, "it was being ended when the daemon stopped: finished");
    manager_audit(m, &(struct session_audit){
                         .kind = SESSION_AUDIT_ENDED,
                         .actor = "daemon",
                         .tenant = rec->tenant,
                         .session = rec->id,
                         .why = "ended",
                         .detail = "it was being ended when the daemon stopped",
                     });
    manager_release_then_delete(m, slot, rec->id);
}

/* Matches a container with its record once records are loaded. */
static void
adopt_or_release(struct session_manager *m, struct pool_slot *slot, const char *session,
                 int64_t gen, const char *busy)
{
    ssize_t i = unmatched_find(m, session);
    struct store_session_rec rec;

    if (i < 0 || hashmap_get(m->by_id, session) != NULL ||
        strcmp(m->unmatched[i].container, pool_slot_container(slot)) != 0) {
        pool_slot_release(slot); /* no record (ended, lost) or not this container */
        return;
    }
    unmatched_take(m, (size_t)i, &rec);
    if (rec.state == STORE_SESSION_ENDING) {
        finish_ending(m, &rec, slot); /* it was being ended when the daemon stopped */
    } else {
        adopt(m, slot, &rec, gen, busy);
    }
    store_session_rec_done(&rec);
}

void
session_manager_adopt(struct session_manager *m, struct pool_slot *slot,
                      const struct kernel_msg *hello)
{
    struct held *h;

    if (m->loaded) {
        adopt_or_release(m, slot, hello->session, hello->gen, hello->busy);
        return;
    }
    h = xcalloc(1, sizeof(*h));
    h->slot = slot;
    h->gen = hello->gen;
    (void)snprintf(h->session, sizeof(h->session), "%s", hello->session);
    (void)snprintf(h->busy, sizeof(h->busy), "%s", hello->busy ? hello->busy : "");
    TAILQ_INSERT_TAIL(&m->held, h, link);
}

/* ---- loading --------------------------------------------------------------------------------- */

static void
on_loaded(int r, const struct store_session_rec *recs, size_t n, size_t malformed, void *userdata)
{
    struct sop *op = userdata;
    struct session_manager *m = op->m;
    struct held *h;

    sop_free(op);
    if (m == NULL) {
        return;
    }
    m->loading = false;
    if (r < 0) {
        return; /* the next tick tries again */
    }
    recovery_unmatched_free(m);
    m->unmatched = xcalloc(n ? n : 1, sizeof(*m->unmatched));
    for (size_t i = 0; i < n; i++) {
        if (hashmap_get(m->by_id, recs[i].id) != NULL) {
            continue;
        }
        /* A hibernated one has no container to wait for: it is registered now, so that a
         * container still claiming it (a crash during its hibernation or wake) is released. */
        if (recs[i].state == STORE_SESSION_HIBERNATED) {
            hibernate_adopt_record(m, &recs[i]);
        } else {
            store_session_rec_copy(&m->unmatched[m->n_unmatched++], &recs[i]);
        }
    }
    m->loaded = true;
    while ((h = TAILQ_FIRST(&m->held)) != NULL) {
        TAILQ_REMOVE(&m->held, h, link);
        adopt_or_release(m, h->slot, h->session, h->gen, h->busy);
        free(h);
    }
    /* The records still unmatched are judged by the next list (a container that is gone ends
     * its record, an ending one is finished): ask for it now, not at the next periodic one. */
    if (m->n_unmatched > 0) {
        m->want_list = true;
    }
}

void
recovery_load_records(struct session_manager *m)
{
    struct sop *op;

    if (m->loaded || m->loading || !store_redis_is_up(m->redis)) {
        return;
    }
    op = sop_new(m, SOP_LOAD, NULL);
    if (store_sessions_load_all(m->store, on_loaded, op) < 0) {
        sop_free(op);
        return;
    }
    m->loading = true;
}

/* The records of this node's set after it claimed a lost node: its hibernated sessions, now
 * ours, are registered (the rest is in memory already). */
static void
on_adopted_loaded(int r, const struct store_session_rec *recs, size_t n, size_t malformed,
                  void *userdata)
{
    struct sop *op = userdata;
    struct session_manager *m = op->m;

    sop_free(op);
    if (m == NULL) {
        return;
    }
    if (r < 0) {
        m->want_adopt = true; /* the next tick reads them again */
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (recs[i].state == STORE_SESSION_HIBERNATED &&
            hashmap_get(m->by_id, recs[i].id) == NULL) {
            hibernate_adopt_record(m, &recs[i]);
            m->stats.adopted_total++;
            manager_notify(m, "adopted", &recs[i], "a lost node's hibernated session");
        }
    }
}

void
session_manager_load_adopted(struct session_manager *m)
{
    struct sop *op;

    m->want_adopt = false;
    if (!m->loaded) {
        return; /* the first load reads them with the rest */
    }
    op = sop_new(m, SOP_LOAD, NULL);
    if (store_sessions_load_all(m->store, on_adopted_loaded, op) < 0) {
        sop_free(op);
        m->want_adopt = true;
    }
}

static void
on_restored(int r, void *userdata)
{
    sop_free(userdata);
}

void
session_manager_redis_up(struct session_manager *m)
{
    struct session *s;

    recovery_load_records(m);
    if (!m->loaded) {
        return;
    }
    /* Redis may have come back empty (restarted without persistence): what we hold in memory
     * is then the only copy; write back whatever it lost. */
    TAILQ_FOREACH (s, &m->sessions, link) {
        struct sop *op;

        if (s->state == SESSION_ENDING) {
            continue;
        }
        op = sop_new(m, SOP_EPOCH, s->rec.id);
        if (store_sessions_restore(m->store, &s->rec, on_restored, op) < 0) {
            sop_free(op);
        }
    }
}

/* ---- reconciliation -------------------------------------------------------------------------- */

/* A detached session and its container's entry in a list asked for after the break (NULL: not
 * in it): attach again if the container runs, else end the session. */
static void
reconnect_or_end(struct session *s, const struct docker_container_summary *c)
{
    struct err e = {0};
    char msg[256];

    if (c == NULL || c->state != DOCKER_CONTAINER_RUNNING) {
        (void)snprintf(msg, sizeof(msg), "the sandbox was lost: its container %s",
                       c == NULL ? "is gone" : "stopped");
        session_lost(s, msg);
        return;
    }
    if (s->exec != NULL) { /* its container still runs: the break was not an OOM kill */
        (void)evtimer_del(s->settle_timer);
        execution_disconnected(s->exec);
    }
    if (pool_slot_reconnect(s->slot, &session_kernel_handlers, s, &e) < 0) {
        s->kernel = NULL;
        (void)snprintf(msg, sizeof(msg), "the sandbox was lost: attaching again failed: %s", e.msg);
        session_lost(s, msg);
        return;
    }
    s->kernel = pool_slot_kernel(s->slot);
    session_set_state(s, SESSION_RECONNECTING);
}

/* A record whose container is not on the engine lost its state: end it (an ending one is
 * finished). */
static void
unmatched_gone(struct session_manager *m, const struct store_session_rec *rec)
{
    if (rec->state == STORE_SESSION_ENDING) {
        finish_ending(m, rec, NULL);
        return;
    }
    manager_notify(m, "ended", rec, "its container is gone: its state was lost");
    manager_audit(m, &(struct session_audit){
                         .kind = SESSION_AUDIT_ENDED,
                         .actor = "daemon",
                         .tenant = rec->tenant,
                         .session = rec->id,
                         .why = "lost",
                         .detail = "its container was gone at start",
                     });
    manager_delete_record(m, rec->id);
}

void
session_manager_reconcile(struct session_manager *m, const struct docker_container_list *list,
                          uint64_t listed_at_ms)
{
    struct session *s, *next;

    m->want_list = false;
    for (s = TAILQ_FIRST(&m->sessions); s != NULL; s = next) {
        next = TAILQ_NEXT(s, link);
        if (s->state != SESSION_DETACHED) {
            continue;
        }
        if (listed_at_ms < s->detached_ms) {
            m->want_list = true; /* asked for before the break: it cannot tell */
            continue;
        }
        reconnect_or_end(s, docker_container_list_find(list, pool_slot_container(s->slot)));
    }
    /* Nothing can be judged before the records are in. A record whose container is there but
     * not adopted yet waits for its kernel's hello. */
    for (size_t i = 0; m->loaded && i < m->n_unmatched;) {
        if (docker_container_list_find(list, m->unmatched[i].container) == NULL) {
            struct store_session_rec rec;

            unmatched_take(m, i, &rec);
            unmatched_gone(m, &rec);
            store_session_rec_done(&rec);
            continue;
        }
        i++;
    }
}

/* ---- container events ------------------------------------------------------------------------ */

/* The container of s died (die) or was removed: s ends, saying why. waited: it was DYING and
 * its wait is over. */
static void
container_gone(struct session *s, bool died, bool waited)
{
    char msg[192];

    if (s->state == SESSION_ENDING || (s->state == SESSION_DYING && !waited)) {
        return;
    }
    if (session_died_of_oom(s)) {
        (void)snprintf(msg, sizeof(msg),
                       "the sandbox was lost: it ran out of memory (memory_mb %u); under "
                       "runtime %s the cap holds for the whole sandbox, which was killed",
                       s->profile->memory_mb, s->profile->runtime);
        session_lost(s, msg);
        return;
    }
    if (!waited && s->exec != NULL && !cfg_runtime_is_default(s->profile) &&
        (s->state == SESSION_READY || s->state == SESSION_DETACHED)) {
        struct timeval tv;

        s->oom_wait_die = died;
        session_set_state(s, SESSION_DYING);
        time_tv_from_ms(&tv, OOM_WAIT_MS);
        (void)evtimer_add(s->oom_wait_timer, &tv);
        return;
    }
    (void)snprintf(msg, sizeof(msg), "the sandbox was lost: its container %s",
                   died ? "stopped" : "was removed");
    session_lost(s, msg);
}

void
recovery_on_oom_wait_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;

    container_gone(s, s->oom_wait_die, true);
}

void
session_manager_container_gone(struct session_manager *m, const char *container_id, bool died)
{
    struct session *s = manager_by_container(m, container_id);

    if (s != NULL && session_is_registered(s)) {
        container_gone(s, died, false);
        return;
    }
    /* A record from before the start whose container went before its kernel said hello (or
     * that was being ended): containers are never restarted, so it is judged now rather than
     * at the next list. */
    for (size_t i = 0; s == NULL && m->loaded && i < m->n_unmatched; i++) {
        if (strcmp(m->unmatched[i].container, container_id) == 0) {
            struct store_session_rec rec;

            unmatched_take(m, i, &rec);
            unmatched_gone(m, &rec);
            store_session_rec_done(&rec);
            return;
        }
    }
}

void
session_manager_container_oom(struct session_manager *m, const char *container_id)
{
    struct session *s = manager_by_container(m, container_id);

    if (s == NULL || !session_is_registered(s)) {
        return;
    }
    s->oom_ms = time_now_ms();
    if (s->state == SESSION_DYING) { /* its "die" came first: end it now, as an OOM kill */
        (void)evtimer_del(s->oom_wait_timer);
        container_gone(s, s->oom_wait_die, true);
    }
}

bool
session_manager_quarantine(struct session_manager *m, const char *container_id, const char *why,
                           char *ret_session, size_t n)
{
    struct session *s = manager_by_container(m, container_id);

    if (s == NULL) {
        return false;
    }
    (void)snprintf(ret_session, n, "%s", s->rec.id);
    /* A session being created on it: the create fails (session_lost() marks it). */
    if (s->state != SESSION_ENDING) {
        session_lost(s, why);
    }
    return true;
}
