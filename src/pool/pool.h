/* Warm pool of locked-down containers for one profile.
 *
 * The pool keeps `warm` containers created and started ahead of demand, never more than `max`
 * containers in all (bound ones included), with container creations and removals across all
 * pools bounded by a shared budget. Containers are single-use: a bound container is never
 * returned to the pool, only removed.
 *
 * Slot states: CREATING -> STARTING -> READY -> (BOUND) -> REMOVING -> freed. A failure while
 * creating or starting counts in failures_total, removes what was created, and delays the next
 * attempt with exponential backoff (250 ms .. 30 s). A READY container that dies is removed and
 * replaced. All engine work is asynchronous; nothing here blocks or runs on a request path.
 *
 * Loop context only. The pool never logs; it reports through pool_stats and a callback. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"
#include "util/err.h"

struct event_base;
struct docker_client;
struct pool;

typedef struct json_t json_t;

enum pool_slot_state {
    POOL_SLOT_CREATING,
    POOL_SLOT_STARTING,
    POOL_SLOT_READY,
    POOL_SLOT_BOUND,
    POOL_SLOT_REMOVING,
    POOL_SLOT__COUNT,
    POOL_SLOT__INVALID = -22,
};

const char *pool_slot_state_to_string(enum pool_slot_state s);

/* Engine operations in flight across every pool (create, start, remove), owned by the server. */
struct pool_budget {
    unsigned inflight;
    unsigned max;
};

struct pool_stats {
    unsigned warm_target, max;
    unsigned creating, starting, ready, bound, removing;
    uint64_t created_total, failures_total, removed_total;
    bool warm_reached; /* ready reached warm_target at least once */
    char last_failure[192];
};

/* Reports notable pool events to the edge (the server logs them). msg is borrowed. */
typedef void pool_notify_cb(struct pool *p, const char *what, int r, const char *msg,
                            void *userdata);

/* Creates the pool for profile (borrowed; must outlive the pool). Starts nothing until
 * pool_tick(). node_id is copied. */
struct pool *pool_new(struct event_base *base, struct docker_client *docker,
                      const struct cfg_profile *profile, const char *node_id,
                      struct pool_budget *budget, pool_notify_cb *notify, void *userdata);
/* Cancels engine work in flight and frees the pool. Containers stay on the engine (labelled) for
 * the next start to re-adopt or remove. Accepts NULL. */
struct pool *pool_free(struct pool *p);

const char *pool_name(const struct pool *p);
const struct cfg_profile *pool_profile(const struct pool *p);
void pool_set_warm(struct pool *p, unsigned warm);
/* Starts creations the pool is short of (bounded by max, backoff and the budget). Cheap. */
void pool_tick(struct pool *p);
void pool_get_stats(const struct pool *p, struct pool_stats *ret);

/* Offers a container found on the engine at start-up (list answer object, borrowed). A running
 * container whose inspect matches the profile's policy becomes READY; anything else is removed.
 * Returns 0 when taken on (adopt or remove), -EEXIST when the pool already tracks it. */
int pool_adopt(struct pool *p, json_t *summary);
/* Tells the pool that a container died or vanished (events, reconcile). Returns true when the
 * container belonged to this pool. */
bool pool_container_gone(struct pool *p, const char *container_id);
/* True when container_id belongs to this pool (in any state). */
bool pool_owns(const struct pool *p, const char *container_id);
/* True when a slot with this slot id exists (covers creations whose answer is still due). */
bool pool_knows_slot(const struct pool *p, const char *slot_id);
/* Reconciles with a full list of this node's containers (list answer, borrowed): READY and
 * BOUND slots whose container is missing or no longer running are treated as gone. */
void pool_reconcile(struct pool *p, json_t *list);
