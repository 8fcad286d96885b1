/* Warm pool; see pool.h for the state machine and guarantees.
 *
 * Invariants:
 *  - a slot has at most one engine call in flight (`call`); create, start and remove calls hold
 *    one unit of the shared budget (`budgeted`), returned in the call's completion or when it is
 *    cancelled; read-only inspects of adopted containers hold none, so adopting a large pool at
 *    start-up is never throttled into removing healthy containers;
 *  - counts in pool_stats are derived from the slot list, never kept separately, so they cannot
 *    drift from the truth;
 *  - every container we create carries our labels and a name derived from its slot id, so a
 *    create that timed out can still be found and removed by name.
 * Never frees a slot from inside a call's completion while that call is still referenced: the
 * completion clears `slot->call` first. */
#include "pool.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>
#include <jansson.h>

#include "docker/api.h"
#include "docker/json.h"
#include "docker/policy.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/time.h"

#define BACKOFF_MIN_MS 250u
#define BACKOFF_MAX_MS 30000u

struct pool_slot {
    TAILQ_ENTRY(pool_slot) link;
    struct pool *pool;
    enum pool_slot_state state;
    bool adopting;      /* STARTING means "inspecting an adopted container" */
    bool remove_failed; /* REMOVING with no call: retry on the next tick */
    char slot_id[33];
    char container_id[129]; /* "" until create answered */
    struct docker_call *call;
    bool budgeted; /* `call` holds a unit of the budget */
};

TAILQ_HEAD(slot_list, pool_slot);

struct pool {
    struct event_base *base;           /* borrowed */
    struct docker_client *docker;      /* borrowed */
    const struct cfg_profile *profile; /* borrowed */
    struct pool_budget *budget;        /* borrowed */
    char *node_id;
    unsigned warm;
    struct slot_list slots;
    unsigned consecutive_failures;
    uint64_t next_attempt_ms;
    uint64_t created_total, failures_total, removed_total;
    bool warm_reached;
    char last_failure[192];
    pool_notify_cb *notify;
    void *userdata;
};

static const char *const slot_state_names[POOL_SLOT__COUNT] = {
    [POOL_SLOT_CREATING] = "creating", [POOL_SLOT_STARTING] = "starting",
    [POOL_SLOT_READY] = "ready",       [POOL_SLOT_BOUND] = "bound",
    [POOL_SLOT_REMOVING] = "removing",
};

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
    TAILQ_REMOVE(&p->slots, slot, link);
    free(slot);
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
record_failure(struct pool *p, const char *what, int r, const struct err *e)
{
    unsigned shift = MIN(p->consecutive_failures, 7u);

    p->failures_total++;
    p->consecutive_failures++;
    p->next_attempt_ms = time_now_ms() + MIN(BACKOFF_MIN_MS << shift, BACKOFF_MAX_MS);
    (void)snprintf(p->last_failure, sizeof(p->last_failure), "%s: %s", what,
                   e ? err_msg(e) : strerror(-r));
    if (p->notify != NULL) {
        p->notify(p, what, r, p->last_failure, p->userdata);
    }
}

static void on_removed(int r, json_t *result, const struct err *e, void *userdata);

/* Starts (or retries) removal of a slot's container; frees the slot if there is nothing to
 * remove. The slot is out of the pool's counts from here on. */
static void
slot_remove(struct pool_slot *slot)
{
    struct pool *p = slot->pool;
    char name[64];

    slot->state = POOL_SLOT_REMOVING;
    slot->remove_failed = false;
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
        record_failure(p, "remove", r, e);
        return;
    }
    p->removed_total++;
    slot_free(slot);
    pool_tick(p);
}

static void
slot_ready(struct pool_slot *slot)
{
    struct pool *p = slot->pool;

    slot->state = POOL_SLOT_READY;
    slot->adopting = false;
    p->consecutive_failures = 0;
    if (count_state(p, POOL_SLOT_READY) >= p->warm) {
        p->warm_reached = true;
    }
}

static void
on_started(int r, json_t *result, const struct err *e, void *userdata)
{
    struct pool_slot *slot = userdata;
    struct pool *p = slot->pool;

    call_done(slot);
    if (r < 0) {
        record_failure(p, "start", r, e);
        slot_remove(slot);
        return;
    }
    p->created_total++;
    slot_ready(slot);
    pool_tick(p);
}

static void
on_created(int r, json_t *result, const struct err *e, void *userdata)
{
    struct pool_slot *slot = userdata;
    struct pool *p = slot->pool;
    const char *id;

    call_done(slot);
    if (r < 0) {
        record_failure(p, "create", r, e);
        /* A create that timed out may still have happened: remove by name. -EOPNOTSUPP means the
         * API layer already removed it. */
        if (r == -EOPNOTSUPP) {
            slot_free(slot);
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
    TAILQ_INSERT_TAIL(&p->slots, slot, link);
    return slot;
}

static void
spawn(struct pool *p)
{
    struct pool_slot *slot = slot_new(p, POOL_SLOT_CREATING);
    char name[64];
    json_t *body;

    random_hex(slot->slot_id, 16);
    (void)snprintf(name, sizeof(name), "sandpool-%s", slot->slot_id);
    body = docker_policy_create_body(p->profile, p->node_id, slot->slot_id);
    slot->budgeted = true; /* taken by the caller */
    slot->call = docker_container_create(p->docker, name, body, on_created, slot);
    json_decref(body);
}

void
pool_tick(struct pool *p)
{
    struct pool_slot *slot, *next;
    unsigned pending, live;

    /* Retry removals that failed (engine down, budget exhausted). */
    for (slot = TAILQ_FIRST(&p->slots); slot != NULL; slot = next) {
        next = TAILQ_NEXT(slot, link);
        if (slot->state == POOL_SLOT_REMOVING && slot->call == NULL && slot->remove_failed &&
            time_now_ms() >= p->next_attempt_ms) {
            slot_remove(slot);
        }
    }
    /* Shrink: a lowered warm target gives back ready containers. */
    TAILQ_FOREACH (slot, &p->slots, link) {
        if (count_state(p, POOL_SLOT_READY) <= p->warm) {
            break;
        }
        if (slot->state == POOL_SLOT_READY) {
            slot_remove(slot);
        }
    }
    if (time_now_ms() < p->next_attempt_ms) {
        return;
    }
    pending = count_state(p, POOL_SLOT_CREATING) + count_state(p, POOL_SLOT_STARTING) +
              count_state(p, POOL_SLOT_READY);
    live = count_live(p);
    while (pending < p->warm && live < p->profile->max && budget_take(p)) {
        spawn(p);
        pending++;
        live++;
    }
}

/* ---- adoption and external events -------------------------------------------------------- */

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

/* True when the list holds container id in the running state. */
static bool
list_has_running(json_t *list, const char *id)
{
    size_t i;
    json_t *c;

    json_array_foreach (list, i, c) {
        const char *cid = json_string_value(json_object_get(c, "Id"));
        const char *state = json_string_value(json_object_get(c, "State"));

        if (cid != NULL && strcmp(cid, id) == 0) {
            return state != NULL && strcmp(state, "running") == 0;
        }
    }
    return false;
}

void
pool_reconcile(struct pool *p, json_t *list)
{
    struct pool_slot *slot, *next;

    for (slot = TAILQ_FIRST(&p->slots); slot != NULL; slot = next) {
        next = TAILQ_NEXT(slot, link);
        if ((slot->state == POOL_SLOT_READY || slot->state == POOL_SLOT_BOUND) &&
            !list_has_running(list, slot->container_id)) {
            slot_remove(slot);
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
    struct err e2;

    call_done(slot);
    if (r == 0 && (docker_parse_state(result, &st) < 0 || !st.running)) {
        r = err_set(&e2, -ESRCH, "adopted container %.12s is not running", slot->container_id);
        e = &e2;
    }
    if (r == 0) {
        r = docker_policy_verify(result, p->profile, &e2);
        e = &e2;
    }
    if (r < 0) {
        /* Not ours to keep: stale profile, dead, or drifted from the policy. */
        if (p->notify != NULL) {
            p->notify(p, "adopt", r, e ? err_msg(e) : strerror(-r), p->userdata);
        }
        slot_remove(slot);
        return;
    }
    slot_ready(slot);
    pool_tick(p);
}

int
pool_adopt(struct pool *p, json_t *summary)
{
    const char *id = json_string_value(json_object_get(summary, "Id"));
    const char *state = json_string_value(json_object_get(summary, "State"));
    const char *slot_id = docker_label(summary, DOCKER_LABEL_SLOT);
    struct pool_slot *slot;

    if (id == NULL || !docker_valid_id(id) || strlen(id) >= sizeof(slot->container_id)) {
        return -EINVAL;
    }
    if (slot_find(p, id) != NULL) {
        return -EEXIST;
    }
    slot = slot_new(p, POOL_SLOT_STARTING);
    slot->adopting = true;
    (void)snprintf(slot->container_id, sizeof(slot->container_id), "%s", id);
    (void)snprintf(slot->slot_id, sizeof(slot->slot_id), "%s", slot_id ? slot_id : "");
    if (state == NULL || strcmp(state, "running") != 0) {
        slot_remove(slot);
        return 0;
    }
    slot->call = docker_container_inspect(p->docker, id, on_adopt_inspect, slot);
    return 0;
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
    case POOL_SLOT_BOUND:
        slot_remove(slot);
        pool_tick(p);
        break;
    case POOL_SLOT_CREATING:
    case POOL_SLOT_STARTING:
    case POOL_SLOT_REMOVING:
    case POOL_SLOT__COUNT:
    case POOL_SLOT__INVALID:
        break; /* the call in flight reports the failure itself */
    }
    return true;
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

struct pool *
pool_new(struct event_base *base, struct docker_client *docker, const struct cfg_profile *profile,
         const char *node_id, struct pool_budget *budget, pool_notify_cb *notify, void *userdata)
{
    struct pool *p = xcalloc(1, sizeof(*p));

    p->base = base;
    p->docker = docker;
    p->profile = profile;
    p->budget = budget;
    p->node_id = xstrdup(node_id);
    p->warm = profile->warm;
    p->warm_reached = profile->warm == 0;
    p->notify = notify;
    p->userdata = userdata;
    TAILQ_INIT(&p->slots);
    return p;
}

struct pool *
pool_free(struct pool *p)
{
    struct pool_slot *slot;

    if (p == NULL) {
        return NULL;
    }
    while ((slot = TAILQ_FIRST(&p->slots)) != NULL) {
        slot_free(slot);
    }
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
pool_set_warm(struct pool *p, unsigned warm)
{
    p->warm = MIN(warm, p->profile->max);
    if (count_state(p, POOL_SLOT_READY) >= p->warm) {
        p->warm_reached = true;
    }
}

void
pool_get_stats(const struct pool *p, struct pool_stats *ret)
{
    struct pool_stats s = {0};

    s.warm_target = p->warm;
    s.max = p->profile->max;
    s.creating = count_state(p, POOL_SLOT_CREATING);
    s.starting = count_state(p, POOL_SLOT_STARTING);
    s.ready = count_state(p, POOL_SLOT_READY);
    s.bound = count_state(p, POOL_SLOT_BOUND);
    s.removing = count_state(p, POOL_SLOT_REMOVING);
    s.created_total = p->created_total;
    s.failures_total = p->failures_total;
    s.removed_total = p->removed_total;
    s.warm_reached = p->warm_reached;
    memcpy(s.last_failure, p->last_failure, sizeof(s.last_failure));
    *ret = s;
}
