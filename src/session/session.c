/* One session's state machine; see session.h for the contract and session-internal.h for the
 * states.
 *
 * Objects and who frees them:
 *  - struct session: owned by the manager (registry); freed only by session_destroy(), after
 *    its record is marked ending or gone from Redis (end, reap, lost) or at manager shutdown.
 *  - struct execution: owned by its session (s->exec); freed right after on_done returns.
 *  - pool slots: a session holds one BOUND slot and borrows its kernel connection; ending the
 *    session releases the slot (the pool removes the container).
 *
 * s->state is written by session_set_state() alone, which asserts the transition against the
 * table below and logs it at debug level ("session=<id> state A -> B").
 *
 * Ending: the record is marked `ending` in Redis first (the end survives a crash: recovery
 * finishes an ending record, see recovery.c), then the session is dropped (its container
 * released, the audit's "session.ended") and the record deleted. Between the mark and the
 * delete the log says, at debug level, "session=<id> marked ending: its container goes, then
 * its record".
 *
 * Connection breaks: when the attach stream to a kernel ends (its container stopped, or the
 * engine restarted: with live-restore the container outlives it) the session is DETACHED: a
 * running execution is answered (its output is incomplete), new ones get ENOTCONN, and the
 * next container list decides (recovery.c): container running -> RECONNECTING, and the kernel's
 * hello must claim this session (its generation and busy execution are handled as at
 * re-adoption); container gone or stopped, or RECONNECT_TRIES attempts without a hello -> the
 * session ends.
 *
 * Epochs: s->rec.gen is the kernel worker generation the current epoch belongs to, and the
 * epoch moves exactly when a generation the kernel reports differs from it
 * (result_epoch_moves()): in "restarted" (a new worker) or in a hello (after a reconnection or a
 * re-adoption). Nothing else moves it: the kernel sends "restarted" before the "done" of an
 * execution the restart ended, and an execution preserved its state exactly when the epoch did
 * not move while it ran (x->epoch0). */
#define LOG_MODULE "session"
#include "session.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "egress/proxy.h"
#include "kernel/kernel.h"
#include "log/log.h"
#include "pool/pool.h"
#include "session-internal.h"
#include "store/sessions.h"
#include "util/hashmap.h"
#include "util/macro.h"
#include "util/time.h"

_Static_assert(SESSION_ID_MAX == STORE_ID_MAX, "session ids are the store's");
_Static_assert(SESSION_EXT_MAX == STORE_EXT_MAX, "session_ext() is the store's ext");

/* ---- states ---------------------------------------------------------------------------------- */

static const char *const state_names[SESSION__COUNT] = {
    [SESSION_CREATING] = "creating",
    [SESSION_CREATE_LOST] = "create_lost",
    [SESSION_READY] = "ready",
    [SESSION_DETACHED] = "detached",
    [SESSION_RECONNECTING] = "reconnecting",
    [SESSION_DYING] = "dying",
    [SESSION_ENDING] = "ending",
    [SESSION_PAUSING] = "pausing",
    [SESSION_PAUSED] = "paused",
    [SESSION_RESUMING] = "resuming",
    [SESSION_HIBERNATING] = "hibernating",
    [SESSION_HIBERNATED] = "hibernated",
    [SESSION_WAKING] = "waking",
};

#define BIT(st) (1u << (st))

/* transitions[from]: the states it may go to. */
static const unsigned transitions[SESSION__COUNT] = {
    [SESSION_CREATING] = BIT(SESSION_READY) | BIT(SESSION_CREATE_LOST) | BIT(SESSION_HIBERNATED),
    [SESSION_CREATE_LOST] = 0,
    [SESSION_READY] = BIT(SESSION_DETACHED) | BIT(SESSION_DYING) | BIT(SESSION_ENDING) |
                      BIT(SESSION_PAUSING) | BIT(SESSION_HIBERNATING),
    [SESSION_DETACHED] = BIT(SESSION_RECONNECTING) | BIT(SESSION_DYING) | BIT(SESSION_ENDING),
    [SESSION_RECONNECTING] = BIT(SESSION_READY) | BIT(SESSION_DETACHED) | BIT(SESSION_ENDING),
    [SESSION_DYING] = BIT(SESSION_ENDING),
    /* A failed end goes back (see end_failed()). */
    [SESSION_ENDING] =
        BIT(SESSION_READY) | BIT(SESSION_DETACHED) | BIT(SESSION_PAUSED) | BIT(SESSION_HIBERNATED),
    [SESSION_PAUSING] =
        BIT(SESSION_PAUSED) | BIT(SESSION_READY) | BIT(SESSION_DETACHED) | BIT(SESSION_ENDING),
    [SESSION_PAUSED] = BIT(SESSION_RESUMING) | BIT(SESSION_DETACHED) | BIT(SESSION_ENDING),
    [SESSION_RESUMING] =
        BIT(SESSION_READY) | BIT(SESSION_PAUSED) | BIT(SESSION_DETACHED) | BIT(SESSION_ENDING),
    [SESSION_HIBERNATING] =
        BIT(SESSION_HIBERNATED) | BIT(SESSION_READY) | BIT(SESSION_DETACHED) | BIT(SESSION_ENDING),
    [SESSION_HIBERNATED] = BIT(SESSION_WAKING) | BIT(SESSION_ENDING),
    [SESSION_WAKING] = BIT(SESSION_READY) | BIT(SESSION_HIBERNATED) | BIT(SESSION_ENDING),
};

bool
session_state_allowed(enum session_state from, enum session_state to)
{
    return from >= 0 && from < SESSION__COUNT && to >= 0 && to < SESSION__COUNT &&
           (transitions[from] & BIT(to)) != 0;
}

const char *
session_state_name(enum session_state st)
{
    return st >= 0 && st < SESSION__COUNT ? state_names[st] : "invalid";
}

void
session_set_state(struct session *s, enum session_state to)
{
    assert(session_state_allowed(s->state, to));
    log_debug("session=%s state %s -> %s", s->rec.id[0] ? s->rec.id : "-", state_names[s->state],
              state_names[to]);
    s->state = to;
}

bool
session_is_registered(const struct session *s)
{
    return s->state != SESSION_CREATING && s->state != SESSION_CREATE_LOST;
}

/* ---- objects --------------------------------------------------------------------------------- */

static void
on_settle_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;

    /* Not while its container's death waits for an "oom" (DYING): that ends it and answers. */
    if (s->exec != NULL && s->state == SESSION_DETACHED) {
        execution_disconnected(s->exec);
    }
}

void
session_timers(struct session *s, bool on)
{
    struct event **timers[] = {&s->restart_timer, &s->settle_timer, &s->oom_wait_timer};
    event_callback_fn fns[] = {session_on_restart_timeout, on_settle_timeout,
                               recovery_on_oom_wait_timeout};

    for (size_t i = 0; i < ELEMENTSOF(timers); i++) {
        if (on && *timers[i] == NULL) {
            *timers[i] = OOM_CHECK(evtimer_new(s->m->base, fns[i], s));
        } else if (!on && *timers[i] != NULL) {
            event_free(*timers[i]);
            *timers[i] = NULL;
        }
    }
}

struct session *
session_alloc(struct session_manager *m, struct pool_slot *slot, const struct cfg_profile *p,
              const struct store_session_rec *rec)
{
    struct session *s = xcalloc(1, sizeof(*s));

    s->m = m;
    s->profile = p;
    s->slot = slot;
    s->kernel = slot != NULL ? pool_slot_kernel(slot) : NULL;
    /* s->state is SESSION_CREATING (0, from xcalloc): the initial state, no transition. */
    store_session_rec_copy(&s->rec, rec);
    s->last_touch_ms = s->last_use_ms = time_now_ms();
    TAILQ_INIT(&s->restarts);
    TAILQ_INIT(&s->waiters);
    session_timers(s, slot != NULL);
    if (slot != NULL) {
        kernel_set_handlers(s->kernel, &session_kernel_handlers, s);
        hashmap_put(m->by_container, s->rec.container, s);
        session_bind_gate(s);
    }
    return s;
}

void
session_bind_gate(struct session *s)
{
    struct egress_gate *g = pool_slot_gate(s->slot);
    struct egress_narrowing n = {0};
    struct err e = {0};
    json_t *j;

    if (g == NULL || s->profile->egress == NULL) {
        return;
    }
    if (s->rec.egress == NULL || s->rec.egress[0] == '\0') {
        egress_gate_bind(g, s->rec.tenant, s->rec.id, s->profile->egress, NULL, s->egress_bytes);
        return;
    }
    j = json_loads(s->rec.egress, 0, NULL);
    if (egress_narrowing_from_json(j, "egress", &n, &e) < 0) {
        /* Checked at its creation: a record changed since narrows to nothing, never wider. */
        log_error("session %s: its egress narrowing no longer parses (%s): nothing is reached",
                  s->rec.id, e.msg);
        n = (struct egress_narrowing){0};
    }
    json_decref(j);
    egress_gate_bind(g, s->rec.tenant, s->rec.id, s->profile->egress, &n, s->egress_bytes);
    egress_narrowing_done(&n);
}

void
session_keep_egress_bytes(struct session *s)
{
    const struct egress_gate *g = s->slot != NULL ? pool_slot_gate(s->slot) : NULL;

    if (g != NULL) {
        s->egress_bytes = egress_gate_bytes(g);
    }
}

void
session_register_as(struct session *s, enum session_state st)
{
    hashmap_put(s->m->by_id, s->rec.id, s);
    TAILQ_INSERT_TAIL(&s->m->sessions, s, link);
    session_set_state(s, st);
}

void
session_register(struct session *s)
{
    session_register_as(s, SESSION_READY);
}

bool
session_died_of_oom(const struct session *s)
{
    return s->oom_ms != 0 && time_now_ms() - s->oom_ms <= OOM_DEATH_MS;
}

void
session_destroy(struct session *s)
{
    if (s->exec != NULL) {
        execution_abort(s->exec, "SessionEnded", "the session ended while this was running");
    }
    restarts_answer(s, -ENOENT, "the session ended before its kernel restarted");
    hibernate_forget(s);
    pause_waiters_answer(
        s, s->end_why[0] != '\0' && strcmp(s->end_why, "snapshot_lost") == 0 ? -EBADMSG : -ENOENT,
        s->end_detail[0] != '\0' ? s->end_detail : "the session ended");
    json_decref(s->restored);
    session_timers(s, false);
    if (hashmap_get(s->m->by_container, s->rec.container) == s) {
        (void)hashmap_remove(s->m->by_container, s->rec.container);
    }
    if (session_is_registered(s)) {
        (void)hashmap_remove(s->m->by_id, s->rec.id);
        TAILQ_REMOVE(&s->m->sessions, s, link);
    }
    store_session_rec_done(&s->rec);
    free(s);
}

/* The audit line, then the object goes; returns its slot (NULL for none), which the caller
 * releases. */
static struct pool_slot *
session_unlink(struct session *s)
{
    struct pool_slot *slot = s->slot;

    manager_audit(s->m, &(struct session_audit){
                            .kind = SESSION_AUDIT_ENDED,
                            .actor = s->end_actor[0] ? s->end_actor : "daemon",
                            .tenant = s->rec.tenant,
                            .session = s->rec.id,
                            .why = s->end_why[0] ? s->end_why : "ended",
                            .detail = s->end_detail,
                        });
    s->slot = NULL;
    s->kernel = NULL;
    session_destroy(s);
    return slot;
}

void
session_drop(struct session *s)
{
    struct pool_slot *slot = session_unlink(s);

    if (slot != NULL) {
        pool_slot_release(slot);
    }
}

/* ---- ending ---------------------------------------------------------------------------------- */

/* A failed end: a client's end goes back to where it was (a paused one by what the engine last
 * confirmed; a session that was neither READY nor paused to DETACHED: the next container list
 * looks at it again). */
static void
end_failed(struct session *s)
{
    enum session_state back = s->end_from == SESSION_READY ? SESSION_READY : SESSION_DETACHED;

    if (s->end_from == SESSION_PAUSING || s->end_from == SESSION_PAUSED ||
        s->end_from == SESSION_RESUMING) {
        back = s->frozen ? SESSION_PAUSED : SESSION_READY;
    }
    /* A hibernation under way was forgotten when the end began: it stays live. A wake under
     * way was too: its new container goes, and the session is hibernated as before. */
    if (s->end_from == SESSION_HIBERNATING) {
        back = SESSION_READY;
    }
    if (s->end_from == SESSION_HIBERNATED || s->end_from == SESSION_WAKING) {
        hibernate_drop_container(s);
        session_set_state(s, SESSION_HIBERNATED);
        waiters_answer(s, WAIT_LIVE, -ENOTCONN, "redis is unavailable; retry shortly");
        return;
    }

    session_set_state(s, back);
    if (back == SESSION_DETACHED) {
        s->detached_ms = time_now_ms();
        s->m->want_list = true;
    }
}

static void
on_end_marked(int r, void *userdata)
{
    struct sop *op = userdata;
    struct session_manager *m = op->m;
    struct session *s = m != NULL ? hashmap_get(m->by_id, op->id) : NULL;
    struct err e = {0};
    bool mark_failed = false;

    if (m == NULL) {
        sop_free(op);
        return;
    }
    if (r < 0 && s != NULL && s->end_claimed) {
        r = 0; /* the reaper's claim made it ours to end: it ends, and its record goes after it */
        mark_failed = true;
    }
    if (r < 0) {
        (void)err_set(&e, r, "could not mark the session ending: %s", strerror(-r));
    }
    if (r < 0 && op->end_cb != NULL) {
        if (s != NULL && s->state == SESSION_ENDING) {
            end_failed(s);
        }
    } else {
        /* Ours to finish (on a failure too, for an end of the daemon's own: its record stays
         * active and ends at the next start, its container gone). */
        if (r == 0) {
            m->stats.ended_total++;
        }
        if (r == 0 && !mark_failed) {
            log_debug("session=%s marked ending: its container goes, then its record", op->id);
        }
        struct pool_slot *slot = s != NULL ? session_unlink(s) : NULL;

        if (r == 0) {
            manager_release_then_delete(m, slot, op->id); /* the record goes after it */
        } else if (slot != NULL) {
            pool_slot_release(slot);
        }
    }
    if (op->end_cb != NULL) {
        op->end_cb(r, r < 0 ? &e : NULL, op->userdata);
    }
    sop_free(op);
}

/* Marks the record ending; on_end_marked() finishes. -ENOTCONN when Redis is down (nothing
 * changed). */
static int
end_begin(struct session *s, session_end_cb *cb, void *userdata)
{
    struct sop *op = sop_new(s->m, SOP_END, s->rec.id);

    op->end_cb = cb;
    op->userdata = userdata;
    if (store_sessions_mark_ending(s->m->store, s->rec.id, on_end_marked, op) < 0) {
        sop_free(op);
        return -ENOTCONN;
    }
    s->end_from = s->state;
    if (s->snap_job || s->wake_wait != NULL) {
        hibernate_forget(s); /* a hibernation or a wake under way stops here */
    }
    session_set_state(s, SESSION_ENDING);
    if (s->exec != NULL && s->kernel != NULL) {
        (void)kernel_interrupt(s->kernel, s->exec->id);
    }
    return 0;
}

int
session_end(struct session *s, session_end_cb *cb, void *userdata, struct err *reterr)
{
    if (s->state == SESSION_ENDING) {
        return err_set(reterr, -EALREADY, "the session is already ending");
    }
    if (s->end_why[0] == '\0') {
        session_set_end_cause(s, NULL, "deleted");
    }
    if (end_begin(s, cb, userdata) < 0) {
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    return 0;
}

void
session_set_end_cause(struct session *s, const char *actor, const char *why)
{
    if (actor == NULL) {
        (void)tenant_actor(s->rec.tenant, s->end_actor, sizeof(s->end_actor));
    } else {
        (void)snprintf(s->end_actor, sizeof(s->end_actor), "%s", actor);
    }
    (void)snprintf(s->end_why, sizeof(s->end_why), "%s", why);
}

void
session_lost(struct session *s, const char *why)
{
    if (s->state == SESSION_WAKING) {
        hibernate_wake_failed(s, -ENOTCONN, why); /* its snapshot is still there */
        return;
    }
    if (s->state == SESSION_CREATING) {
        session_set_state(s, SESSION_CREATE_LOST); /* on_created fails the create */
        return;
    }
    if (s->state == SESSION_CREATE_LOST) {
        return;
    }
    if (s->state != SESSION_ENDING) {
        session_set_end_cause(s, "daemon", "lost");
        (void)snprintf(s->end_detail, sizeof(s->end_detail), "%s", why);
    }
    manager_notify(s->m, "ended", &s->rec, why);
    if (s->slot != NULL) {
        (void)evtimer_del(s->settle_timer);
        (void)evtimer_del(s->oom_wait_timer);
    }
    if (s->exec != NULL) {
        execution_end(s->exec, result_lost_status(session_died_of_oom(s)), "SandboxLost", why);
    }
    if (s->state == SESSION_ENDING) {
        return; /* an end is already on its way; it drops the session */
    }
    if (end_begin(s, NULL, NULL) < 0) {
        /* Redis is down: the record stays; at the next start it has no container and ends. */
        session_drop(s);
    }
}

void
session_reaped(struct session *s)
{
    if (s->rec.expires_at > time_wall_ms()) {
        if (hibernate_on_idle(s)) {
            hibernate_idle(s);
            return;
        }
        if (s->state == SESSION_HIBERNATING) {
            s->idle_hibernation = true; /* its deadline comes back with it (or on a failure) */
            return;
        }
    }
    manager_notify(s->m, "ended", &s->rec, "idle or past its lifetime");
    session_set_end_cause(s, "daemon", s->rec.expires_at <= time_wall_ms() ? "lifetime" : "idle");
    if (end_begin(s, NULL, NULL) < 0) {
        session_drop(s); /* the record goes at the next start (no container) */
    }
}

/* ---- kernel events --------------------------------------------------------------------------- */

static void
on_kernel_output(struct kernel *k, const char *exec_id, bool to_stderr, const char *text,
                 size_t len, void *userdata)
{
    execution_on_output(userdata, exec_id, to_stderr, text, len);
}

static void
on_kernel_done(struct kernel *k, const struct kernel_msg *m, void *userdata)
{
    execution_on_done(userdata, m);
}

static void
on_kernel_artifact(struct kernel *k, const struct kernel_msg *m, void *userdata)
{
    execution_on_artifact(userdata, m);
}

static void
on_kernel_restarted(struct kernel *k, const struct kernel_msg *m, void *userdata)
{
    struct session *s = userdata;

    if (result_epoch_moves(s->rec.gen, m->gen)) {
        session_epoch_bump(s, m->gen, m->text ? m->text : "the interpreter restarted");
    }
    if (result_restart_is_ours(m->text)) {
        restarts_answer(s, 0, NULL);
    }
}

/* A reconnection's attach broke before the hello: the next list tries again, up to
 * RECONNECT_TRIES. */
static void
reconnect_failed(struct session *s, const char *why)
{
    char msg[256];

    if (++s->reconnect_failures >= RECONNECT_TRIES) {
        (void)snprintf(msg, sizeof(msg),
                       "the sandbox was lost: its container runs but its kernel did not "
                       "answer %u reconnections: %s",
                       RECONNECT_TRIES, why);
        session_lost(s, msg);
        return;
    }
    session_set_state(s, SESSION_DETACHED);
    s->m->want_list = true;
}

static void
on_kernel_closed(struct kernel *k, int r, const char *why, void *userdata)
{
    struct session *s = userdata;
    char msg[256];

    if (s->state == SESSION_RECONNECTING) {
        reconnect_failed(s, why);
        return;
    }
    if (!session_is_registered(s) || s->state == SESSION_ENDING) {
        (void)snprintf(msg, sizeof(msg), "the sandbox was lost: %s", why);
        session_lost(s, msg);
        return;
    }
    if (s->state == SESSION_WAKING) {
        hibernate_wake_failed(s, -ENOTCONN, why);
        return;
    }
    if (s->state == SESSION_READY || pause_is_paused(s) || s->state == SESSION_HIBERNATING) {
        session_set_state(s, SESSION_DETACHED);
        s->detached_ms = time_now_ms();
        s->m->want_list = true;
        pause_waiters_answer(s, -ENOTCONN, "the connection to the sandbox broke; retry shortly");
    }
    (void)snprintf(msg, sizeof(msg),
                   "the connection to its sandbox broke (%s); checking its container", why);
    manager_notify(s->m, "detached", &s->rec, msg);
    if (s->exec != NULL && !cfg_runtime_is_default(s->profile)) {
        struct timeval tv;

        time_tv_from_ms(&tv, SETTLE_MS);
        (void)evtimer_add(s->settle_timer, &tv);
    } else if (s->exec != NULL) {
        execution_disconnected(s->exec);
    }
    restarts_answer(s, -ENOTCONN, "the connection to the sandbox broke");
}

/* A hello comes only after a reconnection (sessions get their first through adoption or the
 * pool). The kernel must still claim this session; what happened meanwhile is handled as at
 * re-adoption. */
static void
on_kernel_hello(struct kernel *k, const struct kernel_msg *m, void *userdata)
{
    struct session *s = userdata;

    if (s->state != SESSION_RECONNECTING) {
        return;
    }
    if (m->session == NULL || strcmp(m->session, s->rec.id) != 0) {
        session_lost(s, "the sandbox was lost: its kernel no longer claims this session");
        return;
    }
    session_set_state(s, SESSION_READY);
    s->reconnect_failures = 0;
    s->m->stats.reconnected_total++;
    manager_notify(s->m, "reconnected", &s->rec, "its container still runs: attached again");
    if (result_epoch_moves(s->rec.gen, m->gen)) {
        session_epoch_bump(s, m->gen, "the interpreter restarted while the connection was broken");
    }
    if (m->busy != NULL && m->busy[0] != '\0') {
        execution_orphan(s, m->busy);
    }
}

const struct kernel_handlers session_kernel_handlers = {
    .on_hello = on_kernel_hello,
    .on_output = on_kernel_output,
    .on_done = on_kernel_done,
    .on_artifact = on_kernel_artifact,
    .on_restarted = on_kernel_restarted,
    .on_closed = on_kernel_closed,
};

/* ---- lookups and accessors ------------------------------------------------------------------- */

struct session *
session_find(struct session_manager *m, const char *tenant, const char *id)
{
    struct session *s = hashmap_get(m->by_id, id);

    /* Another tenant's session is exactly as absent as an unknown one. */
    if (s == NULL || (tenant != NULL && strcmp(s->rec.tenant, tenant) != 0) ||
        s->state == SESSION_ENDING) {
        return NULL;
    }
    return s;
}

void
session_foreach(struct session_manager *m, const char *tenant,
                void (*fn)(struct session *s, void *userdata), void *userdata)
{
    struct session *s, *next;

    for (s = TAILQ_FIRST(&m->sessions); s != NULL; s = next) {
        next = TAILQ_NEXT(s, link);
        if ((tenant == NULL || strcmp(s->rec.tenant, tenant) == 0) && s->state != SESSION_ENDING) {
            fn(s, userdata);
        }
    }
}

const char *
session_tenant(const struct session *s)
{
    return s->rec.tenant;
}

const char *
session_id(const struct session *s)
{
    return s->rec.id;
}

const struct cfg_profile *
session_profile(const struct session *s)
{
    return s->profile;
}

const char *
session_container(const struct session *s)
{
    return s->state != SESSION_ENDING && s->slot != NULL ? pool_slot_container(s->slot) : NULL;
}

const char *
session_user(const struct session *s)
{
    return s->slot != NULL ? pool_slot_user(s->slot) : NULL;
}
