/* Pausing a session: its container frozen with the cgroup freezer (the engine's pause), so that
 * an idle session holds its memory but no CPU (docs/hibernate.md, "Pause").
 *
 *   READY -> PAUSING -> PAUSED -> RESUMING -> READY
 *
 * A session pauses when its container has been idle (no call that needs it: no execution, no
 * restart, no file transfer, s->uses; a GET is no use) for its pause_after_s, or when asked
 * (session_pause()). A call that needs
 * the container asks session_ensure_live() first: a paused session is resumed and the call waits
 * in s->waiters (bounded) until the engine thawed it; then it goes on as if nothing happened. The
 * state, the epoch and the idle deadline do not change: a pause is no activity, the call is.
 *
 * Only a paused session costs engine calls on its path (a warm one never does). A kill -9 leaves
 * its container frozen; the next start thaws it when it adopts it (pool/reconcile.c) and the
 * session pauses again once idle. While a freeze or a thaw is in flight, an end may come: the
 * callback then only records what the engine did (s->frozen), which a failed end goes back by. */
#define LOG_MODULE "session"
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "log/log.h"
#include "pool/pool.h"
#include "session-internal.h"
#include "util/hashmap.h"
#include "util/macro.h"
#include "util/time.h"

static void freeze(struct session *s, bool on);

bool
pause_is_paused(const struct session *s)
{
    return s->state == SESSION_PAUSING || s->state == SESSION_PAUSED ||
           s->state == SESSION_RESUMING;
}

bool
session_is_paused(const struct session *s)
{
    return pause_is_paused(s);
}

void
waiters_answer(struct session *s, enum waiter_kind kind, int r, const char *msg)
{
    struct session_waiter *w, *next;
    struct err e = {0};

    if (r < 0) {
        (void)err_set(&e, r, "%s", msg);
    }
    for (w = TAILQ_FIRST(&s->waiters); w != NULL; w = next) {
        next = TAILQ_NEXT(w, link);
        if (w->kind == kind) {
            TAILQ_REMOVE(&s->waiters, w, link);
            w->cb(r, r < 0 ? &e : NULL, w->userdata);
            free(w);
        }
    }
}

void
pause_waiters_answer(struct session *s, int r, const char *msg)
{
    waiters_answer(s, WAIT_LIVE, r, msg);
    waiters_answer(s, WAIT_PAUSE, r, msg);
    waiters_answer(s, WAIT_HIBERNATE, r, msg);
}

static void
audit(struct session *s, enum session_audit_kind kind, const char *actor, const char *why,
      uint64_t duration_ms)
{
    manager_audit(s->m, &(struct session_audit){
                            .kind = kind,
                            .actor = actor,
                            .tenant = s->rec.tenant,
                            .session = s->rec.id,
                            .why = why,
                            .duration_ms = duration_ms,
                        });
}

static struct session_profile_stats *
profile_stats(struct session *s)
{
    size_t i = manager_profile_index(s->m, s->rec.profile);

    return i < s->m->n_pools ? &s->m->pstats[i] : NULL;
}

static void
on_frozen(int r, const struct err *e, void *userdata)
{
    struct session *s = userdata;
    struct session_profile_stats *ps;
    bool asked = s->freezing;

    if (r == -EBUSY) {
        r = 0; /* already in the state asked for (a thaw of a container someone else thawed) */
    }
    if (r == 0) {
        s->frozen = asked;
    }
    if (s->state == SESSION_PAUSING) {
        if (r < 0) {
            log_warn("session=%s could not be paused: %s", s->rec.id, e ? err_msg(e) : "");
            s->m->stats.pause_failures++;
            session_set_state(s, SESSION_READY);
            waiters_answer(s, WAIT_PAUSE, -ENOTCONN, "the engine did not freeze the sandbox");
            waiters_answer(s, WAIT_LIVE, 0, NULL);
            return;
        }
        s->m->stats.paused_total++;
        if (waiters_count(s, WAIT_PAUSE) == 0) { /* an explicit pause is the edge's to audit */
            audit(s, SESSION_AUDIT_PAUSED, "daemon", "idle", 0);
        }
        session_set_state(s, SESSION_PAUSED);
        waiters_answer(s, WAIT_PAUSE, 0, NULL);
        if (waiters_count(s, WAIT_LIVE) > 0) {
            freeze(s, false); /* a call came meanwhile */
        }
    } else if (s->state == SESSION_RESUMING) {
        if (r < 0) {
            log_warn("session=%s could not be resumed: %s", s->rec.id, e ? err_msg(e) : "");
            s->m->stats.resume_failures++;
            session_set_state(s, SESSION_PAUSED);
            waiters_answer(s, WAIT_LIVE, -ENOTCONN,
                           "the sandbox is paused and the engine did not resume it; retry shortly");
            return;
        }
        s->m->stats.resumed_total++;
        ps = profile_stats(s);
        if (ps != NULL) {
            metrics_hist_observe(&ps->resume, time_now_us() - s->resume_started_us);
        }
        audit(s, SESSION_AUDIT_RESUMED, "daemon", "call",
              (time_now_us() - s->resume_started_us) / 1000u);
        session_set_state(s, SESSION_READY);
        waiters_answer(s, WAIT_LIVE, 0, NULL);
    } else if (s->state == SESSION_READY && r == 0 && asked) {
        /* A freeze that landed after a failed end took the session back to READY (end_failed()
         * goes by what was confirmed then): it is paused now, and the next call resumes it. */
        session_set_state(s, SESSION_PAUSING);
        session_set_state(s, SESSION_PAUSED);
    }
    /* Any other state (ENDING, DETACHED): only s->frozen mattered. */
}

/* Starts the engine call; on an immediate failure the session stays where it was. */
static void
freeze(struct session *s, bool on)
{
    if (s->slot == NULL || pool_slot_freeze(s->slot, on, on_frozen, s) < 0) {
        log_debug("session=%s: its container is busy with another engine call; %s later", s->rec.id,
                  on ? "pausing" : "resuming");
        if (!on) {
            waiters_answer(s, WAIT_LIVE, -ENOTCONN, "the sandbox is paused; retry shortly");
        }
        return;
    }
    s->freezing = on;
    if (on) {
        session_set_state(s, SESSION_PAUSING);
    } else {
        s->resume_started_us = time_now_us();
        session_set_state(s, SESSION_RESUMING);
    }
}

static bool
pausable(const struct session *s)
{
    return s->state == SESSION_READY && s->exec == NULL && TAILQ_EMPTY(&s->restarts) &&
           s->uses == 0 && s->slot != NULL;
}

struct session_waiter *
waiter_add(struct session *s, enum waiter_kind kind, session_live_cb *cb, void *userdata)
{
    struct session_waiter *w = xcalloc(1, sizeof(*w));

    w->s = s;
    w->kind = kind;
    w->cb = cb;
    w->userdata = userdata;
    TAILQ_INSERT_TAIL(&s->waiters, w, link);
    return w;
}

unsigned
waiters_count(const struct session *s, enum waiter_kind kind)
{
    const struct session_waiter *w;
    unsigned n = 0;

    TAILQ_FOREACH (w, &s->waiters, link) {
        n += w->kind == kind;
    }
    return n;
}

static unsigned
waiters_total(const struct session *s)
{
    return waiters_count(s, WAIT_LIVE) + waiters_count(s, WAIT_PAUSE) +
           waiters_count(s, WAIT_HIBERNATE);
}

int
session_ensure_live(struct session *s, session_live_cb *cb, void *userdata,
                    struct session_waiter **ret, struct err *reterr)
{
    if (s->state == SESSION_ENDING) {
        return err_set(reterr, -ENOENT, "the session is ending");
    }
    s->last_use_ms = time_now_ms();
    if (!pause_is_paused(s) && s->state != SESSION_HIBERNATING && s->state != SESSION_HIBERNATED &&
        s->state != SESSION_WAKING) {
        return 0; /* the call goes on and meets whatever state it is in */
    }
    if (waiters_total(s) >= MAX_LIVE_WAITERS) {
        return err_set(reterr, -EBUSY, "too many calls wait for this session to resume");
    }
    if (s->state == SESSION_HIBERNATED) {
        int r = hibernate_wake_admit(s, reterr);

        if (r < 0) {
            s->m->stats.wake_refused++;
            return r; /* answered at once: it stays hibernated */
        }
    }
    *ret = waiter_add(s, WAIT_LIVE, cb, userdata);
    if (s->state == SESSION_PAUSED) {
        freeze(s, false);
    } else if (s->state == SESSION_HIBERNATED) {
        hibernate_wake(s); /* a hibernation under way is cancelled when it ends (hibernate.c) */
    }
    return 1;
}

void
session_waiter_cancel(struct session_waiter *w)
{
    TAILQ_REMOVE(&w->s->waiters, w, link);
    free(w);
}

int
session_pause(struct session *s, session_live_cb *cb, void *userdata, struct session_waiter **ret,
              struct err *reterr)
{
    if (s->state == SESSION_ENDING) {
        return err_set(reterr, -ENOENT, "the session is ending");
    }
    if (s->state == SESSION_PAUSED) {
        return 0;
    }
    if (s->state == SESSION_PAUSING) {
        *ret = waiter_add(s, WAIT_PAUSE, cb, userdata);
        return 1;
    }
    if (s->state == SESSION_RESUMING) {
        return err_set(reterr, -EBUSY, "the session is being resumed for a call");
    }
    if (s->state == SESSION_HIBERNATING || s->state == SESSION_HIBERNATED ||
        s->state == SESSION_WAKING) {
        return err_set(reterr, -EBUSY, "the session is %s", session_state_name(s->state));
    }
    if (s->state != SESSION_READY || s->slot == NULL) {
        return err_set(reterr, -ENOTCONN,
                       "the connection to the sandbox broke (engine restart?); retry shortly");
    }
    if (!pausable(s)) {
        return err_set(reterr, -EBUSY,
                       "an execution, a restart or a file transfer runs in this session");
    }
    *ret = waiter_add(s, WAIT_PAUSE, cb, userdata);
    freeze(s, true);
    if (s->state != SESSION_PAUSING) { /* the slot was busy */
        session_waiter_cancel(*ret);
        return err_set(reterr, -EBUSY, "the sandbox's container is busy; retry shortly");
    }
    return 1;
}

void
session_use(struct session *s)
{
    s->uses++;
    s->last_use_ms = time_now_ms();
}

void
session_unuse(struct session_manager *m, const char *id)
{
    struct session *s = hashmap_get(m->by_id, id);

    if (s != NULL && s->uses > 0) {
        s->uses--;
    }
}

void
pause_tick(struct session_manager *m)
{
    struct session *s;
    uint64_t now = time_now_ms();

    TAILQ_FOREACH (s, &m->sessions, link) {
        unsigned after = s->rec.pause_after_s ? s->rec.pause_after_s : s->profile->pause_after_s;

        if (s->exec != NULL || s->uses > 0 || !TAILQ_EMPTY(&s->restarts)) {
            s->last_use_ms = now; /* busy: its idle time starts when that ends */
        } else if (after > 0 && pausable(s) && now - s->last_use_ms >= (uint64_t)after * 1000u) {
            freeze(s, true);
        }
    }
}
