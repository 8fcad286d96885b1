/* Warm pool, the engine's side of the story: containers found on the engine (adoption), the
 * periodic full list (reconciliation), and container deaths reported by events. See pool.h for
 * the guarantees and pool.c for the invariants.
 *
 * Events are hints and the list is the truth (docs/internals/engine.md §3): a READY or
 * CONNECTING slot whose container a list no longer shows running is removed and replaced, but
 * only when the slot was already in its state when the list was asked for. A container found on
 * the engine is ADOPTING while it is inspected: one that runs and matches its profile's policy
 * is attached to (CONNECTING), and only one whose kernel says it serves a session is kept (pool.c,
 * on_pool_hello); anything else is removed. A failure to look at a container never removes it:
 * the adoption is forgotten (its uid held, see the invariants) and the next list offers it again.
 *
 * The pool reads the engine's list only as typed summaries (docker/list.h), never as JSON. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "docker/api.h"
#include "docker/json.h"
#include "docker/list.h"
#include "docker/policy.h"
#include "pool/pool-internal.h"
#include "util/macro.h"

struct pool_slot *
pool_slot_find(const struct pool *p, const char *container_id)
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
    return pool_slot_find(p, container_id) != NULL;
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

enum pool_slot_state
pool_container_state(const struct pool *p, const char *container_id)
{
    const struct pool_slot *slot = pool_slot_find(p, container_id);

    return slot != NULL ? slot->state : POOL_SLOT__INVALID;
}

bool
pool_container_gone(struct pool *p, const char *container_id)
{
    struct pool_slot *slot = pool_slot_find(p, container_id);

    if (slot == NULL) {
        return false;
    }
    switch (slot->state) {
    case POOL_SLOT_READY:
    case POOL_SLOT_CONNECTING:
        pool_slot_remove(slot);
        pool_kick(p);
        break;
    case POOL_SLOT_STARTING: /* the start answer fails it (refill.c, on_started) */
        slot->gone = true;
        break;
    case POOL_SLOT_BOUND:    /* the owner learns it from the kernel connection */
    case POOL_SLOT_CREATING: /* the call in flight reports the failure itself */
    case POOL_SLOT_ADOPTING:
    case POOL_SLOT_REMOVING:
    case POOL_SLOT__COUNT:
    case POOL_SLOT__INVALID:
        break;
    }
    return true;
}

/* ---- held uids of forgotten adoptions -------------------------------------------------------- */

void
pool_slot_forget(struct pool_slot *slot)
{
    struct pool *p = slot->pool;

    if (slot->uid != 0) {
        p->held = xrealloc(p->held, (p->n_held + 1) * sizeof(*p->held));
        (void)snprintf(p->held[p->n_held].container_id, sizeof(p->held->container_id), "%s",
                       slot->container_id);
        p->held[p->n_held++].uid = slot->uid;
        slot->uid = 0;
    }
    pool_slot_free(slot);
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

/* ---- reconciliation -------------------------------------------------------------------------- */

void
pool_reconcile(struct pool *p, const struct docker_container_list *list, uint64_t listed_at_ms)
{
    struct pool_slot *slot, *next;

    for (slot = TAILQ_FIRST(&p->slots); slot != NULL; slot = next) {
        next = TAILQ_NEXT(slot, link);
        /* Only slots already in their state when the list was asked for can be judged by it. */
        if ((slot->state == POOL_SLOT_READY || slot->state == POOL_SLOT_CONNECTING) &&
            slot->since_ms < listed_at_ms &&
            !docker_container_list_running(list, slot->container_id)) {
            pool_slot_remove(slot);
        }
    }
    /* A forgotten adoption's container that is not even listed any more is gone. */
    for (size_t i = 0; i < p->n_held;) {
        if (docker_container_list_find(list, p->held[i].container_id) == NULL) {
            pool_uids_release(p->uids, p->held[i].uid);
            p->held[i] = p->held[--p->n_held];
        } else {
            i++;
        }
    }
    pool_tick(p);
}

/* ---- adoption -------------------------------------------------------------------------------- */

/* An engine call about an adopted container failed: gone (-ENOENT) or a transient failure
 * (deadline, engine busy). A container is never removed on a failure to look at it: forget it;
 * the next reconcile offers it again. */
static void
adopt_unseen(struct pool_slot *slot, int r, const struct err *e)
{
    if (r == -ENOENT) {
        slot->container_gone = true;
        pool_slot_free(slot);
        return;
    }
    pool_notify(slot->pool, "adopt", r, e ? err_msg(e) : strerror(-r));
    pool_slot_forget(slot);
}

static void
on_adopt_inspect(int r, json_t *result, const struct err *e, void *userdata)
{
    struct pool_slot *slot = userdata;
    struct pool *p = slot->pool;
    struct docker_state st;
    struct err e2 = {0};

    pool_call_done(slot);
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
        pool_notify(p, "adopt", r, e ? err_msg(e) : strerror(-r));
        pool_slot_remove(slot);
        return;
    }
    if (r < 0) {
        adopt_unseen(slot, r, e);
        return;
    }
    if (pool_wants_gate(p)) {
        /* Its gate again: a new socket where its mount finds it, and the forwarder. */
        if (pool_slot_gate_open(slot, &e2) < 0) {
            pool_notify(p, "egress", e2.code, e2.msg); /* it keeps its session, not its way out */
        } else {
            pool_slot_forwarder(slot);
            return;
        }
    }
    pool_slot_connect(slot);
}

static void
on_adopt_thawed(int r, json_t *result, const struct err *e, void *userdata)
{
    struct pool_slot *slot = userdata;
    struct pool *p = slot->pool;

    pool_call_done(slot);
    /* -EBUSY: not paused any more (thawed meanwhile): look at it all the same. */
    if (r < 0 && r != -EBUSY) {
        adopt_unseen(slot, r, e);
        return;
    }
    slot->call = docker_container_inspect(p->docker, slot->container_id, on_adopt_inspect, slot);
}

int
pool_adopt(struct pool *p, const struct docker_container_summary *c)
{
    struct pool_slot *slot;
    uint32_t held;
    int r;

    if (!docker_valid_id(c->id) || strlen(c->id) >= sizeof(slot->container_id)) {
        return -EINVAL;
    }
    if (pool_slot_find(p, c->id) != NULL) {
        return -EEXIST;
    }
    slot = pool_slot_new(p, POOL_SLOT_ADOPTING);
    slot->adopted = true;
    (void)snprintf(slot->container_id, sizeof(slot->container_id), "%s", c->id);
    (void)snprintf(slot->slot_id, sizeof(slot->slot_id), "%s", c->slot);
    (void)snprintf(slot->key, sizeof(slot->key), "%s", c->key);
    held = held_take(p, c->id);
    r = held != 0 ? 0 : c->uid < 0 ? -ERANGE : pool_uids_claim(p->uids, (uint64_t)c->uid);
    if (r < 0) {
        /* Made by an older sandpoold (every sandbox one uid), outside this node's range, or
         * sharing its uid with a container that has it already: it cannot be a sandbox of its
         * own here, whatever it held. */
        char why[160];

        (void)snprintf(why, sizeof(why),
                       "container %.12s has %s sandbox uid: removing it, whatever it held", c->id,
                       r == -EEXIST ? "another container's" : "no valid");
        pool_notify(p, "adopt", -EPERM, why);
        pool_slot_remove(slot);
        return 0;
    }
    pool_slot_set_uid(slot, held != 0 ? held : (uint32_t)c->uid);
    if (c->state == DOCKER_CONTAINER_PAUSED) {
        /* Frozen by a daemon that died before it thawed it (a paused session): thawed first,
         * so that its kernel can answer; the session pauses again once idle. */
        slot->call = docker_container_freeze(p->docker, c->id, false, on_adopt_thawed, slot);
        return 0;
    }
    if (c->state != DOCKER_CONTAINER_RUNNING) {
        pool_slot_remove(slot);
        return 0;
    }
    slot->call = docker_container_inspect(p->docker, c->id, on_adopt_inspect, slot);
    return 0;
}
