/* Warm pool, the counts: every number the pool reports or decides on is derived from the slot
 * list when asked for, never kept alongside it (pool.c, the invariants), so a count cannot drift
 * from the slots it counts. O(slots) each; pools hold at most a profile's max. */
#include <string.h>

#include "kernel/kernel.h"
#include "pool/pool-internal.h"
#include "util/macro.h"
#include "util/time.h"

unsigned
pool_count_state(const struct pool *p, enum pool_slot_state s)
{
    const struct pool_slot *slot;
    unsigned n = 0;

    TAILQ_FOREACH (slot, &p->slots, link) {
        n += slot->state == s;
    }
    return n;
}

unsigned
pool_count_live(const struct pool *p)
{
    const struct pool_slot *slot;
    unsigned n = 0;

    TAILQ_FOREACH (slot, &p->slots, link) {
        n += slot->state != POOL_SLOT_REMOVING;
    }
    return n;
}

unsigned
pool_count_coming(const struct pool *p)
{
    return pool_count_state(p, POOL_SLOT_CREATING) + pool_count_state(p, POOL_SLOT_STARTING) +
           pool_count_state(p, POOL_SLOT_CONNECTING) + pool_count_state(p, POOL_SLOT_ADOPTING);
}

unsigned
pool_count_takeable(const struct pool *p)
{
    const struct pool_slot *slot;
    unsigned n = 0;

    TAILQ_FOREACH (slot, &p->slots, link) {
        n += slot->state == POOL_SLOT_READY && kernel_is_open(slot->kernel);
    }
    return n;
}

void
pool_check_warm(struct pool *p)
{
    unsigned bound = pool_count_state(p, POOL_SLOT_BOUND);
    unsigned room = p->profile->max > bound ? p->profile->max - bound : 0;

    if (pool_count_state(p, POOL_SLOT_READY) >= MIN(p->warm, room)) {
        p->warm_reached = true;
    }
}

void
pool_get_stats(const struct pool *p, struct pool_stats *ret)
{
    uint64_t now_s = time_now_ms() / 1000u;
    struct pool_stats s = {0};

    s.warm_target = p->warm;
    s.max = p->profile->max;
    s.creating = pool_count_state(p, POOL_SLOT_CREATING);
    s.starting = pool_count_state(p, POOL_SLOT_STARTING) + pool_count_state(p, POOL_SLOT_ADOPTING) +
                 pool_count_state(p, POOL_SLOT_CONNECTING);
    s.ready = pool_count_state(p, POOL_SLOT_READY);
    s.bound = pool_count_state(p, POOL_SLOT_BOUND);
    s.removing = pool_count_state(p, POOL_SLOT_REMOVING);
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
