/* Warm pool, the supply side: creating containers up to the warm target plus the cold waiters,
 * within max, the shared engine budget and the failure back-off; and the waiters themselves.
 * See pool.h for the guarantees and pool.c for the invariants.
 *
 * A creation is CREATING (create call) -> STARTING (start call) -> CONNECTING (kernel hello,
 * pool.c) -> READY, when pool_slot_ready() hands it to the first waiter or leaves it warm. A
 * failure on the way counts in failures_total, removes what was created and delays the next
 * attempt by 250 ms doubled per consecutive failure, up to 30 s; a container that became ready
 * resets the count, and so does the engine coming back (pool_engine_back()). pool_tick() is
 * cheap and idempotent: every path that may leave the pool short kicks it from the loop. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "docker/api.h"
#include "docker/json.h"
#include "docker/policy.h"
#include "pool/pool-internal.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/time.h"

void
pool_record_failure(struct pool *p, const char *what, int r, const char *msg)
{
    unsigned shift = MIN(p->consecutive_failures, 7u);

    p->failures_total++;
    p->consecutive_failures++;
    p->next_attempt_ms = time_now_ms() + MIN(BACKOFF_MIN_MS << shift, BACKOFF_MAX_MS);
    /* %.170s: the message is cut, not the failure's kind before it. */
    (void)snprintf(p->last_failure, sizeof(p->last_failure), "%.16s: %.170s", what,
                   msg ? msg : strerror(-r));
    pool_notify(p, what, r, p->last_failure);
}

/* ---- waiters (cold acquire) ------------------------------------------------------------------ */

void
pool_waiter_free(struct pool_waiter *w)
{
    TAILQ_REMOVE(&w->pool->waiters, w, link);
    w->pool->n_waiters--;
    event_free(w->timer);
    free(w);
}

static void
on_waiter_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct pool_waiter *w = arg;
    pool_acquire_cb *cb = w->cb;
    void *ud = w->userdata;
    struct err e;
    int r = w->pool->refused[0] ? -ECONNREFUSED : -ETIMEDOUT;

    if (r == -ECONNREFUSED) {
        (void)err_set(&e, r, "%s", w->pool->refused);
    } else {
        (void)err_set(&e, r, "no container of profile '%s' became ready in time",
                      w->pool->profile->name);
    }
    pool_waiter_free(w);
    cb(r, NULL, &e, ud);
}

/* Hands a READY slot to the first waiter, if any. Returns true when it did. */
static bool
serve_waiter(struct pool_slot *slot)
{
    struct pool *p = slot->pool;
    struct pool_waiter *w = TAILQ_FIRST(&p->waiters);
    pool_acquire_cb *cb;
    void *ud;

    if (w == NULL) {
        return false;
    }
    cb = w->cb;
    ud = w->userdata;
    pool_waiter_free(w);
    pool_slot_set_state(slot, POOL_SLOT_BOUND);
    cb(0, slot, NULL, ud);
    return true;
}

int
pool_wait(struct pool *p, unsigned timeout_ms, pool_acquire_cb *cb, void *userdata,
          struct pool_waiter **ret)
{
    struct pool_waiter *w;
    struct timeval tv;

    if (p->refused[0]) {
        return -ECONNREFUSED;
    }
    /* Every container on its way is promised to an earlier waiter or the warm target; one more
     * is only possible below max. */
    if (pool_count_live(p) >= p->profile->max && pool_count_coming(p) <= p->n_waiters) {
        return -EUSERS;
    }
    w = xcalloc(1, sizeof(*w));
    w->pool = p;
    w->cb = cb;
    w->userdata = userdata;
    w->timer = OOM_CHECK(evtimer_new(p->base, on_waiter_timeout, w));
    time_tv_from_ms(&tv, timeout_ms);
    (void)evtimer_add(w->timer, &tv);
    TAILQ_INSERT_TAIL(&p->waiters, w, link);
    p->n_waiters++;
    pool_kick(p);
    *ret = w;
    return 0;
}

void
pool_wait_cancel(struct pool_waiter *w)
{
    if (w != NULL) {
        pool_waiter_free(w);
    }
}

/* ---- creation -------------------------------------------------------------------------------- */

void
pool_slot_ready(struct pool_slot *slot)
{
    struct pool *p = slot->pool;

    pool_slot_set_state(slot, POOL_SLOT_READY);
    p->consecutive_failures = 0;
    if (!slot->adopted) {
        uint64_t sec = slot->since_ms / 1000u;

        p->created_total++;
        if (p->refills[sec % REFILL_WINDOW_S].sec != sec) {
            p->refills[sec % REFILL_WINDOW_S].sec = sec;
            p->refills[sec % REFILL_WINDOW_S].n = 0;
        }
        p->refills[sec % REFILL_WINDOW_S].n++;
    }
    if (serve_waiter(slot)) {
        return;
    }
    pool_check_warm(p);
}

static void
on_started(int r, json_t *result, const struct err *e, void *userdata)
{
    struct pool_slot *slot = userdata;
    struct pool *p = slot->pool;

    pool_call_done(slot);
    if (r == 0 && slot->gone) {
        r = -ESRCH; /* a die event overtook the start answer */
    }
    if (r < 0) {
        pool_record_failure(p, "start", r, e ? e->msg : "the container died while starting");
        pool_slot_remove(slot);
        return;
    }
    if (slot->gate != NULL) {
        pool_slot_forwarder(slot); /* then connects */
        return;
    }
    pool_slot_connect(slot);
}

static void
on_created(int r, json_t *result, const struct err *e, void *userdata)
{
    struct pool_slot *slot = userdata;
    struct pool *p = slot->pool;
    const char *id;

    pool_call_done(slot);
    if (r < 0) {
        pool_record_failure(p, "create", r, e ? e->msg : NULL);
        /* A create that timed out may still have happened: remove by name. -EOPNOTSUPP means the
         * API layer already removed it. */
        if (r == -EOPNOTSUPP) {
            slot->container_gone = true;
            pool_slot_free(slot);
            pool_kick(p);
        } else {
            pool_slot_remove(slot);
        }
        return;
    }
    /* docker/api.c checked the answer's Id (docker_valid_id): a string of at most 128. */
    id = docker_answer_id(result);
    (void)snprintf(slot->container_id, sizeof(slot->container_id), "%s", id);
    pool_slot_set_state(slot, POOL_SLOT_STARTING);
    if (!pool_budget_take(p)) {
        /* Cannot happen: we just returned a unit. Stay safe anyway. */
        pool_slot_remove(slot);
        return;
    }
    slot->budgeted = true;
    slot->call = docker_container_start(p->docker, slot->container_id, on_started, slot);
}

/* Creates a container; false, with nothing done, when no sandbox uid is free or its gate cannot
 * be made. */
static bool
spawn(struct pool *p)
{
    struct pool_slot *slot;
    char name[80];
    json_t *body;
    struct err e = {0};
    uint32_t uid;

    if (pool_uids_take(p->uids, &uid) < 0) {
        pool_record_failure(p, "create", -ENOSPC,
                            "every sandbox uid of the node is in use (sandbox.uid_count)");
        return false;
    }
    slot = pool_slot_new(p, POOL_SLOT_CREATING);
    pool_slot_set_uid(slot, uid);
    random_hex(slot->slot_id, 16);
    random_hex(slot->key, 16);
    if (pool_wants_gate(p) && pool_slot_gate_open(slot, &e) < 0) {
        pool_record_failure(p, "egress", e.code, e.msg);
        slot->container_gone = true; /* none was made: its directory goes */
        pool_slot_free(slot);
        return false;
    }
    (void)snprintf(name, sizeof(name), "sandpool-%s", slot->slot_id);
    body = docker_policy_create_body(p->profile, p->node_id, slot->slot_id, uid);
    (void)json_object_set_new(json_object_get(body, "Labels"), DOCKER_LABEL_KEY,
                              OOM_CHECK(json_string(slot->key)));
    slot->budgeted = true; /* taken by the caller */
    slot->call = docker_container_create(p->docker, name, body, on_created, slot);
    json_decref(body);
    return true;
}

void
pool_tick(struct pool *p)
{
    struct pool_slot *slot, *next;
    unsigned want, have, live;

    /* Retry removals that failed (engine down, budget exhausted). */
    for (slot = TAILQ_FIRST(&p->slots); slot != NULL; slot = next) {
        next = TAILQ_NEXT(slot, link);
        if (slot->state == POOL_SLOT_REMOVING && slot->call == NULL && slot->remove_failed &&
            time_now_ms() >= p->next_attempt_ms) {
            pool_slot_remove(slot);
        }
    }
    /* Shrink: a lowered warm target gives back ready containers; a refused profile all. */
    for (slot = TAILQ_FIRST(&p->slots); slot != NULL; slot = next) {
        next = TAILQ_NEXT(slot, link);
        if (pool_count_state(p, POOL_SLOT_READY) <= p->warm && !p->refused[0]) {
            break;
        }
        if (slot->state == POOL_SLOT_READY) {
            pool_slot_remove(slot);
        }
    }
    if (time_now_ms() < p->next_attempt_ms || p->refused[0]) {
        return;
    }
    pool_check_warm(p);
    want = p->warm + p->n_waiters;
    have = pool_count_coming(p) + pool_count_state(p, POOL_SLOT_READY);
    live = pool_count_live(p);
    while (have < want && live < p->profile->max && pool_budget_take(p)) {
        if (!spawn(p)) {
            p->budget->inflight--;
            break;
        }
        have++;
        live++;
    }
}

void
pool_engine_back(struct pool *p)
{
    p->consecutive_failures = 0;
    p->next_attempt_ms = 0;
    p->warm_reached = p->warm == 0;
    pool_kick(p);
}

void
pool_on_kick(evutil_socket_t fd, short what, void *arg)
{
    pool_tick(arg);
}
