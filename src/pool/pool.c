/* Warm pool; see pool.h for the state machine and guarantees.
 *
 * Invariants:
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

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>
#include <jansson.h>

#include "docker/api.h"
#include "docker/json.h"
#include "docker/policy.h"
#include "docker/quirks.h"
#include "kernel/kernel.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/time.h"

#define BACKOFF_MIN_MS 250u
#define BACKOFF_MAX_MS 30000u
/* A take refills after this delay: the engine's work for the replacement (create, start, the
 * interpreter's start-up: about 150 ms of CPU) then does not compete with the request that took
 * the container, nor with the first calls of its session, on small machines. */
#define REFILL_DELAY_MS 50u
#define REFILL_WINDOW_S POOL_REFILL_WINDOW_S

struct pool_slot {
    TAILQ_ENTRY(pool_slot) link;
    struct pool *pool;
    enum pool_slot_state state;
    bool remove_failed; /* REMOVING with no call: retry on the next tick */
    bool adopted;       /* found on the engine rather than created by us */
    bool gone;          /* the engine said it died while a call was in flight */
    uint64_t since_ms;  /* when the slot entered its current state */
    char slot_id[33];
    char key[65];           /* the kernel's relay key (DOCKER_LABEL_KEY), "" if it has none */
    bool attached;          /* its kernel was reached once: stdin may be gone (quirks.h) */
    char container_id[129]; /* "" until create answered */
    uint32_t uid;           /* of user code (uids.c); 0: none held */
    char user[24];          /* "uid:uid" */
    struct docker_call *call;
    bool budgeted; /* `call` holds a unit of the budget */
    struct kernel *kernel;
};

struct pool_waiter {
    TAILQ_ENTRY(pool_waiter) link;
    struct pool *pool;
    struct event *timer;
    pool_acquire_cb *cb;
    void *userdata;
};

TAILQ_HEAD(slot_list, pool_slot);
TAILQ_HEAD(waiter_list, pool_waiter);

struct pool {
    struct event_base *base;           /* borrowed */
    struct docker_client *docker;      /* borrowed */
    const struct cfg_profile *profile; /* borrowed */
    struct pool_budget *budget;        /* borrowed */
    struct pool_uids *uids;            /* borrowed */
    /* Forgotten adoptions' uids (see the invariants), until their container is seen again. */
    struct held_uid {
        char container_id[129];
        uint32_t uid;
    } * held;
    size_t n_held;
    struct pool_callbacks cb;
    char *node_id;
    unsigned warm;
    struct slot_list slots;
    struct waiter_list waiters;
    unsigned n_waiters;
    unsigned consecutive_failures;
    uint64_t next_attempt_ms;
    uint64_t created_total, failures_total, removed_total;
    bool warm_reached;
    struct event *kick;   /* runs pool_tick() outside the current callback */
    struct event *refill; /* runs pool_tick() a little after a take */
    char last_failure[192];
    /* Why the engine cannot run this profile ("" while it can): no container is made, none is
     * taken, waiters fail at once. Set by the server from the engine's /info. */
    char refused[POOL_REFUSED_LEN];
    /* Containers made ready per second over the last REFILL_WINDOW_S seconds: a ring indexed by
     * the second (monotonic) they became ready in. */
    struct {
        uint64_t sec;
        unsigned n;
    } refills[REFILL_WINDOW_S];
};

static const char *const slot_state_names[POOL_SLOT__COUNT] = {
    [POOL_SLOT_CREATING] = "creating", [POOL_SLOT_STARTING] = "starting",
    [POOL_SLOT_ADOPTING] = "adopting", [POOL_SLOT_CONNECTING] = "connecting",
    [POOL_SLOT_READY] = "ready",       [POOL_SLOT_BOUND] = "bound",
    [POOL_SLOT_REMOVING] = "removing",
};

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

const char *
pool_slot_state_to_string(enum pool_slot_state s)
{
    return s >= 0 && s < POOL_SLOT__COUNT ? slot_state_names[s] : NULL;
}

static unsigned
count_state(const struct pool *p, enum pool_slot_state s)
{
    const struct pool_slot *slot;
    unsigned n = 0;

    TAILQ_FOREACH (slot, &p->slots, link) {
        n += slot->state == s;
    }
    return n;
}

/* Containers that count against max: everything not on its way out. */
static unsigned
count_live(const struct pool *p)
{
    const struct pool_slot *slot;
    unsigned n = 0;

    TAILQ_FOREACH (slot, &p->slots, link) {
        n += slot->state != POOL_SLOT_REMOVING;
    }
    return n;
}

/* Containers that will become READY without anything else happening. */
static unsigned
count_coming(const struct pool *p)
{
    return count_state(p, POOL_SLOT_CREATING) + count_state(p, POOL_SLOT_STARTING) +
           count_state(p, POOL_SLOT_CONNECTING) + count_state(p, POOL_SLOT_ADOPTING);
}

/* Ready reached the warm target, or as much of it as max leaves once bound containers are
 * counted: a pool full of sessions is as warm as it can be. */
/* READY slots whose kernel still answers: what pool_take() can hand out. */
static unsigned
count_takeable(const struct pool *p)
{
    const struct pool_slot *slot;
    unsigned n = 0;

    TAILQ_FOREACH (slot, &p->slots, link) {
        n += slot->state == POOL_SLOT_READY && kernel_is_open(slot->kernel);
    }
    return n;
}

static void
check_warm(struct pool *p)
{
    unsigned bound = count_state(p, POOL_SLOT_BOUND);
    unsigned room = p->profile->max > bound ? p->profile->max - bound : 0;

    if (count_state(p, POOL_SLOT_READY) >= MIN(p->warm, room)) {
        p->warm_reached = true;
    }
}

static void
kick(struct pool *p)
{
    event_active(p->kick, EV_TIMEOUT, 0);
}

static void
slot_drop_kernel(struct pool_slot *slot)
{
    slot->kernel = kernel_free(slot->kernel);
}

static void
slot_free(struct pool_slot *slot)
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
    if (slot->uid != 0) {
        pool_uids_release(p->uids, slot->uid);
    }
    TAILQ_REMOVE(&p->slots, slot, link);
    free(slot);
}

static void
slot_set_uid(struct pool_slot *slot, uint32_t uid)
{
    slot->uid = uid;
    (void)snprintf(slot->user, sizeof(slot->user), "%u:%u", uid, uid);
}

/* An adoption is given up without removing the container (it may live on): its uid stays in
 * use, held for it. */
static void
slot_forget(struct pool_slot *slot)
{
    struct pool *p = slot->pool;

    if (slot->uid != 0) {
        p->held = xrealloc(p->held, (p->n_held + 1) * sizeof(*p->held));
        (void)snprintf(p->held[p->n_held].container_id, sizeof(p->held->container_id), "%s",
                       slot->container_id);
        p->held[p->n_held++].uid = slot->uid;
        slot->uid = 0;
    }
    slot_free(slot);
}

/* The held uid of container_id, taken out of held; 0 when none. */
static uint32_t
held_take(struct pool *p, const char *container_id)
{
    for (size_t i = 0; i < p->n_held; i++) {
        if (strcmp(p->held[i].container_id, container_id) == 0) {
            uint32_t uid = p->held[i].uid;

            p->held[i] = p->held[--p->n_held];
            return uid;
        }
    }
    return 0;
}

/* A completion of `slot->call`: forget the call and return its budget unit. */
static void
call_done(struct pool_slot *slot)
{
    slot->call = NULL;
    if (slot->budgeted) {
        slot->budgeted = false;
        slot->pool->budget->inflight--;
    }
}

static bool
budget_take(struct pool *p)
{
    if (p->budget->inflight >= p->budget->max) {
        return false;
    }
    p->budget->inflight++;
    return true;
}

static void
notify(struct pool *p, const char *what, int r, const char *msg)
{
    if (p->cb.notify != NULL) {
        p->cb.notify(p, what, r, msg, p->cb.userdata);
    }
}

static void
record_failure(struct pool *p, const char *what, int r, const char *msg)
{
    unsigned shift = MIN(p->consecutive_failures, 7u);

    p->failures_total++;
    p->consecutive_failures++;
    p->next_attempt_ms = time_now_ms() + MIN(BACKOFF_MIN_MS << shift, BACKOFF_MAX_MS);
    /* %.170s: the message is cut, not the failure's kind before it. */
    (void)snprintf(p->last_failure, sizeof(p->last_failure), "%.16s: %.170s", what,
                   msg ? msg : strerror(-r));
    notify(p, what, r, p->last_failure);
}

static void on_removed(int r, json_t *result, const struct err *e, void *userdata);

/* Starts (or retries) removal of a slot's container. The slot is out of the pool's counts from
 * here on, and is freed once the engine confirms. */
static void
slot_remove(struct pool_slot *slot)
{
    struct pool *p = slot->pool;
    char name[64];

    slot->state = POOL_SLOT_REMOVING;
    slot->remove_failed = false;
    slot_drop_kernel(slot);
    if (slot->call != NULL) {
        docker_call_cancel(slot->call);
        call_done(slot);
    }
    if (!budget_take(p)) {
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

    call_done(slot);
    if (r < 0) {
        slot->remove_failed = true;
        record_failure(p, "remove", r, e ? e->msg : NULL);
        return;
    }
    p->removed_total++;
    slot_free(slot);
    kick(p);
}

/* ---- waiters (cold acquire) ------------------------------------------------------------------ */

static void
waiter_free(struct pool_waiter *w)
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
    waiter_free(w);
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
    waiter_free(w);
    slot->state = POOL_SLOT_BOUND;
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
    if (count_live(p) >= p->profile->max && count_coming(p) <= p->n_waiters) {
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
    kick(p);
    *ret = w;
    return 0;
}

void
pool_wait_cancel(struct pool_waiter *w)
{
    if (w != NULL) {
        waiter_free(w);
    }
}

/* ---- kernel connection of pool slots --------------------------------------------------------- */

static void
slot_ready(struct pool_slot *slot)
{
    struct pool *p = slot->pool;

    slot->state = POOL_SLOT_READY;
    slot->since_ms = time_now_ms();
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
    check_warm(p);
}

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
        slot->state = POOL_SLOT_BOUND;
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
        notify(p, "adopt", -EBUSY, why);
        slot_remove(slot);
        kick(p);
        return;
    }
    slot_ready(slot);
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
        notify(p, "adopt", r, msg);
        slot_free(slot); /* the kernel handle's free is deferred: we are in its callback */
        kick(p);
        return;
    }
    if (slot->state == POOL_SLOT_CONNECTING) {
        record_failure(p, "connect", r, msg);
    } else {
        notify(p, "kernel", r, msg);
    }
    /* The kernel handle is freed by slot_remove(): kernel_free() from inside its own callback
     * is deferred by the kernel module. */
    slot_remove(slot);
    kick(p);
}

static void
on_pool_restarted(struct kernel *k, const struct kernel_msg *m, void *userdata)
{
    /* Nothing runs in a pool container; a restart means something is wrong with it. */
    struct pool_slot *slot = slot_of_kernel(userdata, k);

    if (slot != NULL && slot->state != POOL_SLOT_BOUND) {
        slot_remove(slot);
        kick(userdata);
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

static void
slot_connect(struct pool_slot *slot)
{
    struct pool *p = slot->pool;
    struct err e = {0};
    int r;

    slot->state = POOL_SLOT_CONNECTING;
    slot->since_ms = time_now_ms();
    r = slot_open(slot, &pool_kernel_handlers, p, &e);
    if (r < 0 && slot->adopted) {
        /* Unreachable (no relay key on an engine that closed its stdin): what it held is lost,
         * and it is not a failure of this pool to create containers. */
        notify(p, "adopt", r, e.msg);
        slot_remove(slot);
    } else if (r < 0) {
        record_failure(p, "connect", r, e.msg);
        slot_remove(slot);
    }
}

/* ---- creation -------------------------------------------------------------------------------- */

static void
on_started(int r, json_t *result, const struct err *e, void *userdata)
{
    struct pool_slot *slot = userdata;
    struct pool *p = slot->pool;

    call_done(slot);
    if (r == 0 && slot->gone) {
        r = -ESRCH; /* a die event overtook the start answer */
    }
    if (r < 0) {
        record_failure(p, "start", r, e ? e->msg : "the container died while starting");
        slot_remove(slot);
        return;
    }
    slot_connect(slot);
}

static void
on_created(int r, json_t *result, const struct err *e, void *userdata)
{
    struct pool_slot *slot = userdata;
    struct pool *p = slot->pool;
    const char *id;

    call_done(slot);
    if (r < 0) {
        record_failure(p, "create", r, e ? e->msg : NULL);
        /* A create that timed out may still have happened: remove by name. -EOPNOTSUPP means the
         * API layer already removed it. */
        if (r == -EOPNOTSUPP) {
            slot_free(slot);
            kick(p);
        } else {
            slot_remove(slot);
        }
        return;
    }
    id = json_string_value(json_object_get(result, "Id"));
    (void)snprintf(slot->container_id, sizeof(slot->container_id), "%s", id);
    slot->state = POOL_SLOT_STARTING;
    if (!budget_take(p)) {
        /* Cannot happen: we just returned a unit. Stay safe anyway. */
        slot_remove(slot);
        return;
    }
    slot->budgeted = true;
    slot->call = docker_container_start(p->docker, slot->container_id, on_started, slot);
}

static struct pool_slot *
slot_new(struct pool *p, enum pool_slot_state state)
{
    struct pool_slot *slot = xcalloc(1, sizeof(*slot));

    slot->pool = p;
    slot->state = state;
    slot->since_ms = time_now_ms();
    TAILQ_INSERT_TAIL(&p->slots, slot, link);
    return slot;
}

/* Creates a container; false, with nothing done, when no sandbox uid is free. */
static bool
spawn(struct pool *p)
{
    struct pool_slot *slot;
    char name[64];
    json_t *body;
    uint32_t uid;

    if (pool_uids_take(p->uids, &uid) < 0) {
        record_failure(p, "create", -ENOSPC,
                       "every sandbox uid of the node is in use (sandbox.uid_count)");
        return false;
    }
    slot = slot_new(p, POOL_SLOT_CREATING);
    slot_set_uid(slot, uid);
    random_hex(slot->slot_id, 16);
    random_hex(slot->key, 16);
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
            slot_remove(slot);
        }
    }
    /* Shrink: a lowered warm target gives back ready containers; a refused profile all. */
    for (slot = TAILQ_FIRST(&p->slots); slot != NULL; slot = next) {
        next = TAILQ_NEXT(slot, link);
        if (count_state(p, POOL_SLOT_READY) <= p->warm && !p->refused[0]) {
            break;
        }
        if (slot->state == POOL_SLOT_READY) {
            slot_remove(slot);
        }
    }
    if (time_now_ms() < p->next_attempt_ms || p->refused[0]) {
        return;
    }
    check_warm(p);
    want = p->warm + p->n_waiters;
    have = count_coming(p) + count_state(p, POOL_SLOT_READY);
    live = count_live(p);
    while (have < want && live < p->profile->max && budget_take(p)) {
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
    kick(p);
}

static void
on_kick(evutil_socket_t fd, short what, void *arg)
{
    pool_tick(arg);
}

/* ---- taking and releasing -------------------------------------------------------------------- */

int
pool_take(struct pool *p, unsigned keep, struct pool_slot **ret)
{
    struct pool_slot *slot;

    if (count_takeable(p) <= keep || p->refused[0]) {
        return -EAGAIN;
    }
    TAILQ_FOREACH (slot, &p->slots, link) {
        if (slot->state == POOL_SLOT_READY && kernel_is_open(slot->kernel)) {
            struct timeval tv;

            slot->state = POOL_SLOT_BOUND;
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

struct pool *
pool_slot_pool(const struct pool_slot *slot)
{
    return slot->pool;
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

    slot_remove(slot);
    kick(p);
}

/* ---- adoption and external events ------------------------------------------------------------ */

static struct pool_slot *
slot_find(const struct pool *p, const char *container_id)
{
    struct pool_slot *slot;
    size_t n = strlen(container_id);

    if (n == 0) {
        return NULL;
    }
    TAILQ_FOREACH (slot, &p->slots, link) {
        /* Engine ids may be given in full or as a unique prefix of at least 12 characters. */
        if (strcmp(slot->container_id, container_id) == 0 ||
            (n >= 12 && strncmp(slot->container_id, container_id, n) == 0)) {
            return slot;
        }
    }
    return NULL;
}

bool
pool_owns(const struct pool *p, const char *container_id)
{
    return slot_find(p, container_id) != NULL;
}

bool
pool_knows_slot(const struct pool *p, const char *slot_id)
{
    const struct pool_slot *slot;

    TAILQ_FOREACH (slot, &p->slots, link) {
        if (slot_id[0] != '\0' && strcmp(slot->slot_id, slot_id) == 0) {
            return true;
        }
    }
    return false;
}

/* The list's entry of container id, or NULL. */
static json_t *
list_find(json_t *list, const char *id)
{
    size_t i;
    json_t *c;

    json_array_foreach (list, i, c) {
        const char *cid = json_string_value(json_object_get(c, "Id"));

        if (cid != NULL && strcmp(cid, id) == 0) {
            return c;
        }
    }
    return NULL;
}

static bool
list_has(json_t *list, const char *id)
{
    return list_find(list, id) != NULL;
}

/* True when the list holds container id in the running state. */
static bool
list_has_running(json_t *list, const char *id)
{
    const char *state = json_string_value(json_object_get(list_find(list, id), "State"));

    return state != NULL && strcmp(state, "running") == 0;
}

void
pool_reconcile(struct pool *p, json_t *list, uint64_t listed_at_ms)
{
    struct pool_slot *slot, *next;

    for (slot = TAILQ_FIRST(&p->slots); slot != NULL; slot = next) {
        next = TAILQ_NEXT(slot, link);
        /* Only slots already in their state when the list was asked for can be judged by it. */
        if ((slot->state == POOL_SLOT_READY || slot->state == POOL_SLOT_CONNECTING) &&
            slot->since_ms < listed_at_ms && !list_has_running(list, slot->container_id)) {
            slot_remove(slot);
        }
    }
    /* A forgotten adoption's container that is not even listed any more is gone. */
    for (size_t i = 0; i < p->n_held;) {
        if (!list_has(list, p->held[i].container_id)) {
            pool_uids_release(p->uids, p->held[i].uid);
            p->held[i] = p->held[--p->n_held];
        } else {
            i++;
        }
    }
    pool_tick(p);
}

static void
on_adopt_inspect(int r, json_t *result, const struct err *e, void *userdata)
{
    struct pool_slot *slot = userdata;
    struct pool *p = slot->pool;
    struct docker_state st;
    struct err e2 = {0};

    call_done(slot);
    if (r == 0 && (docker_parse_state(result, &st) < 0 || !st.running)) {
        r = err_set(&e2, -ESRCH, "adopted container %.12s is not running", slot->container_id);
        e = &e2;
    }
    if (r == 0) {
        r = docker_policy_verify(result, p->profile, slot->uid, &e2);
        e = &e2;
    }
    if (r == -ESRCH || r == -EPERM) {
        /* Not ours to keep: dead, or drifted from the policy (a changed profile, tampering). */
        notify(p, "adopt", r, e ? err_msg(e) : strerror(-r));
        slot_remove(slot);
        return;
    }
    if (r < 0) {
        /* Gone (-ENOENT) or a transient failure (deadline, engine busy): never remove a
         * container on a failure to look at it. Forget it; the next reconcile offers it again. */
        if (r != -ENOENT) {
            notify(p, "adopt", r, e ? err_msg(e) : strerror(-r));
        }
        if (r == -ENOENT) {
            slot_free(slot);
        } else {
            slot_forget(slot);
        }
        return;
    }
    slot_connect(slot);
}

int
pool_adopt(struct pool *p, json_t *summary)
{
    const char *id = json_string_value(json_object_get(summary, "Id"));
    const char *state = json_string_value(json_object_get(summary, "State"));
    const char *slot_id = docker_label(summary, DOCKER_LABEL_SLOT);
    const char *key = docker_label(summary, DOCKER_LABEL_KEY);
    int64_t uid = docker_policy_uid(summary);
    struct pool_slot *slot;
    uint32_t held;
    int r;

    if (id == NULL || !docker_valid_id(id) || strlen(id) >= sizeof(slot->container_id)) {
        return -EINVAL;
    }
    if (slot_find(p, id) != NULL) {
        return -EEXIST;
    }
    slot = slot_new(p, POOL_SLOT_ADOPTING);
    slot->adopted = true;
    (void)snprintf(slot->container_id, sizeof(slot->container_id), "%s", id);
    (void)snprintf(slot->slot_id, sizeof(slot->slot_id), "%s", slot_id ? slot_id : "");
    (void)snprintf(slot->key, sizeof(slot->key), "%s", key ? key : "");
    held = held_take(p, id);
    r = held != 0 ? 0 : uid < 0 ? -ERANGE : pool_uids_claim(p->uids, (uint64_t)uid);
    if (r == 0) {
        slot_set_uid(slot, held != 0 ? held : (uint32_t)uid);
    } else {
        /* Made by an older sandpoold (every sandbox one uid), outside this node's range, or
         * sharing its uid with a container that has it already: it cannot be a sandbox of its
         * own here, whatever it held. */
        char why[160];

        (void)snprintf(why, sizeof(why),
                       "container %.12s has %s sandbox uid: removing it, whatever it held", id,
                       r == -EEXIST ? "another container's" : "no valid");
        notify(p, "adopt", -EPERM, why);
        slot_remove(slot);
        return 0;
    }
    if (state == NULL || strcmp(state, "running") != 0) {
        slot_remove(slot);
        return 0;
    }
    slot->call = docker_container_inspect(p->docker, id, on_adopt_inspect, slot);
    return 0;
}

enum pool_slot_state
pool_container_state(const struct pool *p, const char *container_id)
{
    const struct pool_slot *slot = slot_find(p, container_id);

    return slot != NULL ? slot->state : POOL_SLOT__INVALID;
}

bool
pool_container_gone(struct pool *p, const char *container_id)
{
    struct pool_slot *slot = slot_find(p, container_id);

    if (slot == NULL) {
        return false;
    }
    switch (slot->state) {
    case POOL_SLOT_READY:
    case POOL_SLOT_CONNECTING:
        slot_remove(slot);
        kick(p);
        break;
    case POOL_SLOT_BOUND:    /* the owner learns it from the kernel connection */
    case POOL_SLOT_CREATING: /* the call in flight reports the failure itself */
    case POOL_SLOT_STARTING:
    case POOL_SLOT_ADOPTING:
    case POOL_SLOT_REMOVING:
    case POOL_SLOT__COUNT:
    case POOL_SLOT__INVALID:
        break;
    }
    return true;
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
    p->kick = OOM_CHECK(event_new(base, -1, 0, on_kick, p));
    p->refill = OOM_CHECK(evtimer_new(base, on_kick, p));
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
        waiter_free(w);
    }
    while ((slot = TAILQ_FIRST(&p->slots)) != NULL) {
        slot_free(slot);
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
            slot_remove(slot);
        }
    }
}

bool
pool_removing(const struct pool *p)
{
    return count_state(p, POOL_SLOT_REMOVING) > 0;
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
            kick(p);
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
            slot_remove(slot);
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
    check_warm(p);
    kick(p);
}

void
pool_get_stats(const struct pool *p, struct pool_stats *ret)
{
    uint64_t now_s = time_now_ms() / 1000u;
    struct pool_stats s = {0};

    s.warm_target = p->warm;
    s.max = p->profile->max;
    s.creating = count_state(p, POOL_SLOT_CREATING);
    s.starting = count_state(p, POOL_SLOT_STARTING) + count_state(p, POOL_SLOT_ADOPTING) +
                 count_state(p, POOL_SLOT_CONNECTING);
    s.ready = count_state(p, POOL_SLOT_READY);
    s.bound = count_state(p, POOL_SLOT_BOUND);
    s.removing = count_state(p, POOL_SLOT_REMOVING);
    s.waiters = p->n_waiters;
    s.created_total = p->created_total;
    s.failures_total = p->failures_total;
    s.removed_total = p->removed_total;
    s.warm_reached = p->warm_reached;
    /* The current second is still filling: the window is the REFILL_WINDOW_S seconds before. */
    for (size_t i = 0; i < REFILL_WINDOW_S; i++) {
        if (p->refills[i].sec < now_s && p->refills[i].sec + REFILL_WINDOW_S >= now_s) {
            s.refilled_last_window += p->refills[i].n;
        }
    }
    memcpy(s.last_failure, p->last_failure, sizeof(s.last_failure));
    memcpy(s.refused, p->refused, sizeof(s.refused));
    *ret = s;
}
