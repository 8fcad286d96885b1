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
};

#define BIT(st) (1u << (st))

/* transitions[from]: the states it may go to. */
static const unsigned transitions[SESSION__COUNT] = {
    [SESSION_CREATING] = BIT(SESSION_READY) | BIT(SESSION_CREATE_LOST),
    [SESSION_CREATE_LOST] = 0,
    [SESSION_READY] =
        BIT(SESSION_DETACHED) | BIT(SESSION_DYING) | BIT(SESSION_ENDING) | BIT(SESSION_PAUSING),
    [SESSION_DETACHED] = BIT(SESSION_RECONNECTING) | BIT(SESSION_DYING) | BIT(SESSION_ENDING),
    [SESSION_RECONNECTING] = BIT(SESSION_READY) | BIT(SESSION_DETACHED) | BIT(SESSION_ENDING),
    [SESSION_DYING] = BIT(SESSION_ENDING),
    /* A failed end goes back (see end_failed()). */
    [SESSION_ENDING] = BIT(SESSION_READY) | BIT(SESSION_DETACHED) | BIT(SESSION_PAUSED),
    [SESSION_PAUSING] =
        BIT(SESSION_PAUSED) | BIT(SESSION_READY) | BIT(SESSION_DETACHED) | BIT(SESSION_ENDING),
    [SESSION_PAUSED] = BIT(SESSION_RESUMING) | BIT(SESSION_DETACHED) | BIT(SESSION_ENDING),
    [SESSION_RESUMING] =
        BIT(SESSION_READY) | BIT(SESSION_PAUSED) | BIT(SESSION_DETACHED) | BIT(SESSION_ENDING),
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

struct session *
session_alloc(struct session_manager *m, struct pool_slot *slot, const struct cfg_profile *p,
              const struct store_session_rec *rec)
{
    struct session *s = xcalloc(1, sizeof(*s));

    s->m = m;
    s->profile = p;
    s->slot = slot;
    s->kernel = pool_slot_kernel(slot);
    /* s->state is SESSION_CREATING (0, from xcalloc): the initial state, no transition. */
    s->rec = *rec;
    s->last_touch_ms = s->last_use_ms = time_now_ms();
    TAILQ_INIT(&s->restarts);
    TAILQ_INIT(&s->waiters);
    s->restart_timer = OOM_CHECK(evtimer_new(m->base, session_on_restart_timeout, s));
    s->settle_timer = OOM_CHECK(evtimer_new(m->base, on_settle_timeout, s));
    s->oom_wait_timer = OOM_CHECK(evtimer_new(m->base, recovery_on_oom_wait_timeout, s));
    kernel_set_handlers(s->kernel, &session_kernel_handlers, s);
    hashmap_put(m->by_container, s->rec.container, s);
    return s;
}

void
session_register(struct session *s)
{
    hashmap_put(s->m->by_id, s->rec.id, s);
    TAILQ_INSERT_TAIL(&s->m->sessions, s, link);
    session_set_state(s, SESSION_READY);
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
    pause_waiters_answer(s, -ENOENT, "the session ended");
    json_decref(s->restored);
    event_free(s->restart_timer);
    event_free(s->settle_timer);
    event_free(s->oom_wait_timer);
    if (hashmap_get(s->m->by_container, s->rec.container) == s) {
        (void)hashmap_remove(s->m->by_container, s->rec.container);
    }
    if (session_is_registered(s)) {
        (void)hashmap_remove(s->m->by_id, s->rec.id);
        TAILQ_REMOVE(&s->m->sessions, s, link);
    }
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

/* ---- epoch ----------------------------------------------------------------------------------- */

static void
on_epoch_saved(int r, void *userdata)
{
    sop_free(userdata); /* best effort: the next change or a re-adoption writes it again */
}

void
session_epoch_bump(struct session *s, int64_t new_gen, const char *why)
{
    struct sop *op;
    char detail[160];

    s->rec.epoch++;
    (void)snprintf(detail, sizeof(detail), "kernel_epoch is now %llu: %s",
                   (unsigned long long)s->rec.epoch, why);
    manager_notify(s->m, "epoch", &s->rec, detail);
    s->rec.gen = new_gen;
    op = sop_new(s->m, SOP_EPOCH, s->rec.id);
    if (store_sessions_set_epoch(s->m->store, s->rec.id, s->rec.epoch, s->rec.gen, on_epoch_saved,
                                 op) < 0) {
        sop_free(op);
    }
}

/* ---- touch ----------------------------------------------------------------------------------- */

static void
on_touched(int r, void *userdata)
{
    /* -ENOENT: the reaper claimed it in the meantime; its ending is on the way. */
    sop_free(userdata);
}

void
session_touch(struct session *s)
{
    struct sop *op;
    uint64_t now = time_wall_ms(), mono = time_now_ms();

    s->rec.last_active_at = now;
    /* A deadline is pushed at most every TOUCH_MIN_MS (or a tenth of the idle timeout, when
     * shorter): a busy session then costs Redis a few scripts a second, not one per call, and
     * its deadline is never more than that early. */
    if (mono - s->last_touch_ms < MIN((uint64_t)TOUCH_MIN_MS, s->rec.idle_timeout_s * 100ull)) {
        return;
    }
    s->last_touch_ms = mono;
    op = sop_new(s->m, SOP_TOUCH, s->rec.id);
    if (store_sessions_touch(s->m->store, s->rec.id, now, on_touched, op) < 0) {
        sop_free(op);
    }
}

static void
on_expiry_set(int r, void *userdata)
{
    struct sop *op = userdata;
    struct session *s = op->m != NULL ? hashmap_get(op->m->by_id, op->id) : NULL;

    if (op->m == NULL && r == 0) {
        r = -ECANCELED;
    }
    if (r == 0 && s != NULL) {
        s->rec.expires_at = op->expires_at;
    }
    op->expiry_cb(r, op->expires_at, op->userdata);
    sop_free(op);
}

int
session_set_expiry(struct session *s, uint64_t at, session_expiry_cb *cb, void *userdata,
                   struct err *reterr)
{
    uint64_t cap = s->rec.created_at + (uint64_t)s->profile->max_lifetime_s * 1000u;
    struct sop *op;

    if (s->state == SESSION_ENDING || s->state == SESSION_DYING) {
        return err_set(reterr, -ENOENT, "the session is ending");
    }
    op = sop_new(s->m, SOP_EXPIRY, s->rec.id);
    op->expiry_cb = cb;
    op->userdata = userdata;
    op->expires_at = MIN(at, cap);
    if (store_sessions_set_expiry(s->m->store, s->rec.id, op->expires_at, on_expiry_set, op) < 0) {
        sop_free(op);
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    return 0;
}

static void
on_ext_set(int r, void *userdata)
{
    struct sop *op = userdata;

    op->ext_cb(op->m == NULL && r == 0 ? -ECANCELED : r, op->userdata);
    sop_free(op);
}

int
session_set_ext(struct session *s, const char *ext, session_ext_cb *cb, void *userdata,
                struct err *reterr)
{
    struct sop *op;

    if (strlen(ext) > STORE_EXT_MAX) {
        return err_set(reterr, -EINVAL, "the session's extension record is too long");
    }
    if (s->state == SESSION_ENDING || s->state == SESSION_DYING) {
        return err_set(reterr, -ENOENT, "the session is ending");
    }
    op = sop_new(s->m, SOP_EXT, s->rec.id);
    op->ext_cb = cb;
    op->userdata = userdata;
    if (store_sessions_set_ext(s->m->store, s->rec.id, ext, on_ext_set, op) < 0) {
        sop_free(op);
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    (void)snprintf(s->rec.ext, sizeof(s->rec.ext), "%s", ext);
    return 0;
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
    (void)evtimer_del(s->settle_timer);
    (void)evtimer_del(s->oom_wait_timer);
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
    if (s->state == SESSION_READY || pause_is_paused(s)) {
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
