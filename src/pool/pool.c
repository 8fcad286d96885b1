/* Warm pool: slots, their state machine and the pool's lifecycle; see pool.h for the states and
 * guarantees. Creation and back-off are in refill.c, adoption and reconciliation with the
 * engine's list in reconcile.c, the counts in stats.c.
 *
 * Invariants:
 *  - a slot's state is written only by pool_slot_set_state(), which asserts the transition
 *    (pool_slot_transition_ok(): the diagram of pool.h, plus any state to REMOVING);
 *  - a slot has at most one engine call in flight (`call`); create, start and remove calls hold
 *    one unit of the shared budget (`budgeted`), returned in the call's completion or when it is
 *    cancelled; read-only inspects of adopted containers hold none, so adopting a large pool at
 *    start-up is never throttled into removing healthy containers;
 *  - a slot in CONNECTING, READY or BOUND owns a kernel connection (`kernel`); it is freed when
 *    the slot leaves those states;
 *  - counts in pool_stats are derived from the slot list, never kept separately;
 *  - every container we create carries our labels and a name derived from its slot id, so a
 *    create that timed out can still be found and removed by name;
 *  - every slot holds the uid pair of its container (uids.c) until the engine confirmed the
 *    removal; an adoption forgotten on a transient failure (the container may live on) keeps its
 *    pair in `held` until the container is re-adopted or missing from a full list.
 * Completions clear `slot->call` before anything else, and no slot is freed while one of its own
 * callbacks (engine call or kernel handler) is on the stack: kernel handlers only change state
 * and schedule work; the removal that frees the slot completes in a later engine callback. */
#include "pool.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "docker/api.h"
#include "docker/client.h"
#include "docker/quirks.h"
#include "kernel/kernel.h"
#include "pool/pool-internal.h"
#include "util/macro.h"
#include "util/time.h"

/* ---- the state machine ----------------------------------------------------------------------- */

bool
pool_slot_transition_ok(enum pool_slot_state from, enum pool_slot_state to)
{
    switch (to) {
    case POOL_SLOT_CREATING:
    case POOL_SLOT_ADOPTING:
        return from == POOL_SLOT__INVALID;
    case POOL_SLOT_STARTING:
        return from == POOL_SLOT_CREATING;
    case POOL_SLOT_CONNECTING:
        return from == POOL_SLOT_STARTING || from == POOL_SLOT_ADOPTING;
    case POOL_SLOT_READY:
        return from == POOL_SLOT_CONNECTING;
    case POOL_SLOT_BOUND: /* taken, or an adopted container that serves a session */
        return from == POOL_SLOT_READY || from == POOL_SLOT_CONNECTING;
    case POOL_SLOT_REMOVING: /* from anywhere; again when a removal is retried */
        return from != POOL_SLOT__INVALID;
    case POOL_SLOT__COUNT:
    case POOL_SLOT__INVALID:
        break;
    }
    return false;
}

void
pool_slot_set_state(struct pool_slot *slot, enum pool_slot_state to)
{
    assert(pool_slot_transition_ok(slot->state, to));
    slot->state = to;
    slot->since_ms = time_now_ms();
}

/* ---- slots ----------------------------------------------------------------------------------- */

void
pool_kick(struct pool *p)
{
    event_active(p->kick, EV_TIMEOUT, 0);
}

void
pool_notify(struct pool *p, const char *what, int r, const char *msg)
{
    if (p->cb.notify != NULL) {
        p->cb.notify(p, what, r, msg, p->cb.userdata);
    }
}

bool
pool_budget_take(struct pool *p)
{
    if (p->budget->inflight >= p->budget->max) {
        return false;
    }
    p->budget->inflight++;
    return true;
}

void
pool_call_done(struct pool_slot *slot)
{
    slot->call = NULL;
    if (slot->budgeted) {
        slot->budgeted = false;
        slot->pool->budget->inflight--;
    }
}

struct pool_slot *
pool_slot_new(struct pool *p, enum pool_slot_state state)
{
    struct pool_slot *slot = xcalloc(1, sizeof(*slot));

    *slot = (struct pool_slot){.pool = p, .state = POOL_SLOT__INVALID};
    pool_slot_set_state(slot, state);
    TAILQ_INSERT_TAIL(&p->slots, slot, link);
    return slot;
}

static void
slot_drop_kernel(struct pool_slot *slot)
{
    slot->kernel = kernel_free(slot->kernel);
}

void
pool_slot_free(struct pool_slot *slot)
{
    struct pool *p = slot->pool;

    if (slot->call != NULL) {
        docker_call_cancel(slot->call);
        slot->call = NULL;
        if (slot->budgeted) {
            p->budget->inflight--;
        }
    }
    slot_drop_kernel(slot);
    pool_slot_gate_free(slot);
    if (slot->uid != 0) {
        pool_uids_release(p->uids, slot->uid);
    }
    if (slot->removed_cb != NULL) {
        slot->removed_cb(-ECANCELED, slot->removed_userdata);
    }
    TAILQ_REMOVE(&p->slots, slot, link);
    free(slot);
}

void
pool_slot_set_uid(struct pool_slot *slot, uint32_t uid)
{
    slot->uid = uid;
    (void)snprintf(slot->user, sizeof(slot->user), "%u:%u", uid, uid);
}

static void on_removed(int r, json_t *result, const struct err *e, void *userdata);

/* The slot is out of the pool's counts from here on. */
void
pool_slot_remove(struct pool_slot *slot)
{
    struct pool *p = slot->pool;
    char name[80];

    pool_slot_set_state(slot, POOL_SLOT_REMOVING);
    slot->remove_failed = false;
    slot_drop_kernel(slot);
    pool_slot_gate_close(slot); /* its session's connections end now */
    if (slot->call != NULL) {
        docker_call_cancel(slot->call);
        pool_call_done(slot);
    }
    if (!pool_budget_take(p)) {
        slot->remove_failed = true; /* the next tick retries */
        return;
    }
    slot->budgeted = true;
    if (slot->container_id[0] == '\0') {
        (void)snprintf(name, sizeof(name), "sandpool-%s", slot->slot_id);
        slot->call = docker_container_remove(p->docker, name, on_removed, slot);
    } else {
        slot->call = docker_container_remove(p->docker, slot->container_id, on_removed, slot);
    }
}

static void
on_removed(int r, json_t *result, const struct err *e, void *userdata)
{
    struct pool_slot *slot = userdata;
    struct pool *p = slot->pool;

    pool_call_done(slot);
    if (r < 0) {
        slot->remove_failed = true;
        pool_record_failure(p, "remove", r, e ? e->msg : NULL);
        return;
    }
    p->removed_total++;
    slot->container_gone = true;
    if (slot->removed_cb != NULL) {
        pool_removed_cb *cb = slot->removed_cb;

        slot->removed_cb = NULL;
        cb(0, slot->removed_userdata);
    }
    pool_slot_free(slot);
    pool_kick(p);
}

/* ---- kernel connection of pool slots --------------------------------------------------------- */

static struct pool_slot *
slot_of_kernel(struct pool *p, struct kernel *k)
{
    struct pool_slot *slot;

    TAILQ_FOREACH (slot, &p->slots, link) {
        if (slot->kernel == k) {
            return slot;
        }
    }
    return NULL;
}

static void
on_pool_hello(struct kernel *k, const struct kernel_msg *m, void *userdata)
{
    struct pool_slot *slot = slot_of_kernel(userdata, k);
    struct pool *p = userdata;
    char why[192];

    if (slot == NULL || slot->state != POOL_SLOT_CONNECTING) {
        return; /* a second hello: nothing to do */
    }
    if (m->session != NULL && slot->adopted) {
        pool_slot_set_state(slot, POOL_SLOT_BOUND);
        if (p->cb.found_session != NULL) {
            p->cb.found_session(p, slot, m, p->cb.userdata);
        } else {
            pool_slot_release(slot);
        }
        return;
    }
    if (slot->adopted || m->used || m->session != NULL || m->busy != NULL) {
        /* A container found on the engine is never handed to anybody: what its kernel says
         * could be forged by code that ran in it before. Only a container we created and that
         * nobody used is warm. */
        (void)snprintf(why, sizeof(why), "container %.12s %s: removing it", slot->container_id,
                       slot->adopted ? "serves no session" : "was used before");
        pool_notify(p, "adopt", -EBUSY, why);
        pool_slot_remove(slot);
        pool_kick(p);
        return;
    }
    pool_slot_ready(slot);
}

static void
on_pool_closed(struct kernel *k, int r, const char *why, void *userdata)
{
    struct pool *p = userdata;
    struct pool_slot *slot = slot_of_kernel(p, k);
    char msg[192];

    if (slot == NULL) {
        return;
    }
    (void)snprintf(msg, sizeof(msg), "kernel of %.12s: %s", slot->container_id, why);
    if (slot->state == POOL_SLOT_CONNECTING && slot->adopted) {
        /* It may serve a session: do not remove what we could not look at. Forget it; the next
         * reconcile tries again (a container whose kernel died has exited and is removed). */
        pool_notify(p, "adopt", r, msg);
        pool_slot_free(slot); /* the kernel handle's free is deferred: we are in its callback */
        pool_kick(p);
        return;
    }
    if (slot->state == POOL_SLOT_CONNECTING) {
        pool_record_failure(p, "connect", r, msg);
    } else {
        pool_notify(p, "kernel", r, msg);
    }
    /* The kernel handle is freed by pool_slot_remove(): kernel_free() from inside its own
     * callback is deferred by the kernel module. */
    pool_slot_remove(slot);
    pool_kick(p);
}

static void
on_pool_restarted(struct kernel *k, const struct kernel_msg *m, void *userdata)
{
    /* Nothing runs in a pool container; a restart means something is wrong with it. */
    struct pool_slot *slot = slot_of_kernel(userdata, k);

    if (slot != NULL && slot->state != POOL_SLOT_BOUND) {
        pool_slot_remove(slot);
        pool_kick(userdata);
    }
}

static const struct kernel_handlers pool_kernel_handlers = {
    .on_hello = on_pool_hello,
    .on_restarted = on_pool_restarted,
    .on_closed = on_pool_closed,
};

/* Reaches the slot's kernel: by attaching to the container's stdio, or through a relay where
 * the engine closed that stdin when an earlier attach ended (an adopted container, a reconnect). */
static int
slot_open(struct pool_slot *slot, const struct kernel_handlers *h, void *userdata,
          struct err *reterr)
{
    struct pool *p = slot->pool;
    char relay_user[48];
    struct kernel_target t = {
        .container_id = slot->container_id,
        .key = slot->key,
        .relay = !docker_client_quirks(p->docker)->stdin_survives_detach &&
                 (slot->adopted || slot->attached),
        .relay_user = relay_user,
    };
    /* The second uid of the sandbox's pair (uids.c): no process of user code has it. */
    (void)snprintf(relay_user, sizeof(relay_user), "%u:%u", slot->uid + 1, slot->uid + 1);

    slot->attached = true;
    return kernel_open(p->docker, &t, docker_client_timeout_ms(p->docker), h, userdata,
                       &slot->kernel, reterr);
}

void
pool_slot_connect(struct pool_slot *slot)
{
    struct pool *p = slot->pool;
    struct err e = {0};
    int r;

    pool_slot_set_state(slot, POOL_SLOT_CONNECTING);
    r = slot_open(slot, &pool_kernel_handlers, p, &e);
    if (r < 0 && slot->adopted) {
        /* Unreachable (no relay key on an engine that closed its stdin): what it held is lost,
         * and it is not a failure of this pool to create containers. */
        pool_notify(p, "adopt", r, e.msg);
        pool_slot_remove(slot);
    } else if (r < 0) {
        pool_record_failure(p, "connect", r, e.msg);
        pool_slot_remove(slot);
    }
}

/* ---- taking and releasing -------------------------------------------------------------------- */

int
pool_take(struct pool *p, unsigned keep, struct pool_slot **ret)
{
    struct pool_slot *slot;

    if (pool_count_takeable(p) <= keep || p->refused[0]) {
        return -EAGAIN;
    }
    TAILQ_FOREACH (slot, &p->slots, link) {
        if (slot->state == POOL_SLOT_READY && kernel_is_open(slot->kernel)) {
            struct timeval tv;

            pool_slot_set_state(slot, POOL_SLOT_BOUND);
            if (!evtimer_pending(p->refill, NULL)) { /* refill off the request path */
                time_tv_from_ms(&tv, REFILL_DELAY_MS);
                (void)evtimer_add(p->refill, &tv);
            }
            *ret = slot;
            return 0;
        }
    }
    return -EAGAIN;
}

void
pool_foreach_container(struct pool *p, pool_container_fn *fn, void *userdata)
{
    struct pool_slot *slot, *next;

    for (slot = TAILQ_FIRST(&p->slots); slot != NULL; slot = next) {
        next = TAILQ_NEXT(slot, link);
        if ((slot->state == POOL_SLOT_READY || slot->state == POOL_SLOT_BOUND) &&
            slot->container_id[0] != '\0') {
            fn(p, slot->container_id, slot->state, slot->uid, userdata);
        }
    }
}

struct kernel *
pool_slot_kernel(struct pool_slot *slot)
{
    return slot->kernel;
}

const char *
pool_slot_container(const struct pool_slot *slot)
{
    return slot->container_id;
}

const char *
pool_slot_user(const struct pool_slot *slot)
{
    return slot->user;
}

static void
on_frozen(int r, json_t *result, const struct err *e, void *userdata)
{
    struct pool_slot *slot = userdata;

    pool_call_done(slot);
    slot->freeze_cb(r, e, slot->freeze_userdata);
}

int
pool_slot_freeze(struct pool_slot *slot, bool freeze, pool_freeze_cb *cb, void *userdata)
{
    assert(slot->state == POOL_SLOT_BOUND);
    if (slot->call != NULL) {
        return -EBUSY;
    }
    slot->freeze_cb = cb;
    slot->freeze_userdata = userdata;
    slot->call =
        docker_container_freeze(slot->pool->docker, slot->container_id, freeze, on_frozen, slot);
    return 0;
}

int
pool_slot_reconnect(struct pool_slot *slot, const struct kernel_handlers *h, void *userdata,
                    struct err *reterr)
{
    slot->kernel = kernel_free(slot->kernel);
    return slot_open(slot, h, userdata, reterr);
}

void
pool_slot_release(struct pool_slot *slot)
{
    struct pool *p = slot->pool;

    pool_slot_remove(slot);
    pool_kick(p);
}

void
pool_slot_release_then(struct pool_slot *slot, pool_removed_cb *cb, void *userdata)
{
    slot->removed_cb = cb;
    slot->removed_userdata = userdata;
    pool_slot_release(slot);
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

struct pool *
pool_new(struct event_base *base, struct docker_client *docker, const struct cfg_profile *profile,
         const char *node_id, struct pool_budget *budget, struct pool_uids *uids,
         const struct pool_callbacks *cb)
{
    struct pool *p = xcalloc(1, sizeof(*p));

    p->base = base;
    p->docker = docker;
    p->profile = profile;
    p->budget = budget;
    p->uids = uids;
    p->cb = *cb;
    p->node_id = xstrdup(node_id);
    p->warm = profile->warm;
    p->warm_reached = profile->warm == 0;
    p->kick = OOM_CHECK(event_new(base, -1, 0, pool_on_kick, p));
    p->refill = OOM_CHECK(evtimer_new(base, pool_on_kick, p));
    TAILQ_INIT(&p->slots);
    TAILQ_INIT(&p->waiters);
    return p;
}

struct pool *
pool_free(struct pool *p)
{
    struct pool_slot *slot;
    struct pool_waiter *w;

    if (p == NULL) {
        return NULL;
    }
    while ((w = TAILQ_FIRST(&p->waiters)) != NULL) {
        pool_waiter_free(w);
    }
    while ((slot = TAILQ_FIRST(&p->slots)) != NULL) {
        pool_slot_free(slot);
    }
    event_free(p->kick);
    event_free(p->refill);
    free(p->held);
    free(p->node_id);
    free(p);
    return NULL;
}

const char *
pool_name(const struct pool *p)
{
    return p->profile->name;
}

const struct cfg_profile *
pool_profile(const struct pool *p)
{
    return p->profile;
}

void
pool_shutdown(struct pool *p)
{
    struct pool_slot *slot, *next;

    p->warm = 0;
    for (slot = TAILQ_FIRST(&p->slots); slot != NULL; slot = next) {
        next = TAILQ_NEXT(slot, link);
        if (slot->state != POOL_SLOT_BOUND && slot->state != POOL_SLOT_REMOVING) {
            pool_slot_remove(slot);
        }
    }
}

bool
pool_removing(const struct pool *p)
{
    return pool_count_state(p, POOL_SLOT_REMOVING) > 0;
}

void
pool_refuse(struct pool *p, const char *why)
{
    struct pool_slot *slot, *next;
    struct pool_waiter *w;

    if (why == NULL || why[0] == '\0') {
        if (p->refused[0]) {
            p->refused[0] = '\0';
            p->warm_reached = p->warm == 0;
            pool_kick(p);
        }
        return;
    }
    (void)snprintf(p->refused, sizeof(p->refused), "%s", why);
    p->warm_reached = false;
    /* Containers made before (another engine, another configuration) are not handed out;
     * sessions keep theirs. Creations on their way are removed once they are ready. */
    for (slot = TAILQ_FIRST(&p->slots); slot != NULL; slot = next) {
        next = TAILQ_NEXT(slot, link);
        if (slot->state == POOL_SLOT_READY) {
            pool_slot_remove(slot);
        }
    }
    /* Cold creates waiting for this profile fail now (from the loop, not from this call). */
    TAILQ_FOREACH (w, &p->waiters, link) {
        event_active(w->timer, EV_TIMEOUT, 0);
    }
}

bool
pool_refused(const struct pool *p)
{
    return p->refused[0] != '\0';
}

void
pool_set_warm(struct pool *p, unsigned warm)
{
    p->warm = MIN(warm, p->profile->max);
    pool_check_warm(p);
    pool_kick(p);
}
