/* The warm pool's own files (pool.c, refill.c, reconcile.c, stats.c) share these; nothing
 * outside src/pool/ includes it but its unit test (tests/unit/test-pool-states.c). See pool.h
 * for the state machine and pool.c for the invariants. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include <event2/util.h>

#include "pool/pool.h"

struct event;
struct docker_call;
struct docker_exec_run;
struct egress_gate;
struct egress_proxy;

#define BACKOFF_MIN_MS 250u
#define BACKOFF_MAX_MS 30000u
/* A take refills after this delay: the engine's work for the replacement (create, start, the
 * interpreter's start-up: about 150 ms of CPU) then does not compete with the request that took
 * the container, nor with the first calls of its session, on small machines. */
#define REFILL_DELAY_MS 50u
#define REFILL_WINDOW_S POOL_REFILL_WINDOW_S
/* The egress forwarder in every sandpool image (images/python/sandbox/egress.py; gate.c). */
#define POOL_FORWARDER "/opt/sandpool/egress.py"

struct pool_slot {
    TAILQ_ENTRY(pool_slot) link;
    struct pool *pool;
    /* Written only by pool_slot_set_state() (pool.c), which checks the transition. */
    enum pool_slot_state state;
    bool remove_failed; /* REMOVING with no call: retry on the next tick */
    /* pool_slot_release_then(): told once when the engine confirmed the removal (0), or when
     * the slot goes without that confirmation (-ECANCELED: the pool is freed). */
    pool_removed_cb *removed_cb;
    void *removed_userdata;
    bool adopted;           /* found on the engine rather than created by us */
    bool gone;              /* the engine said it died while a call was in flight */
    uint64_t since_ms;      /* when the slot entered its current state */
    char slot_id[65];       /* ours: 32 hex digits; an adopted one: its label */
    char key[65];           /* the kernel's relay key (DOCKER_LABEL_KEY), "" if it has none */
    bool attached;          /* its kernel was reached once: stdin may be gone (quirks.h) */
    char container_id[129]; /* "" until create answered */
    uint32_t uid;           /* of user code (uids.c); 0: none held */
    char user[24];          /* "uid:uid" */
    struct docker_call *call;
    bool budgeted;             /* `call` holds a unit of the budget */
    pool_freeze_cb *freeze_cb; /* pool_slot_freeze()'s, while its call is in flight */
    void *freeze_userdata;
    struct kernel *kernel;
    /* Its egress gate (gate.c), for a profile with an egress list; NULL otherwise. */
    struct egress_gate *gate;
    struct docker_exec_run *forwarder; /* starting the forwarder in it */
    bool container_gone;               /* the engine confirmed its container removed */
};

struct pool_waiter {
    TAILQ_ENTRY(pool_waiter) link;
    struct pool *pool;
    struct event *timer;
    pool_acquire_cb *cb;
    void *userdata;
};

TAILQ_HEAD(pool_slot_list, pool_slot);
TAILQ_HEAD(pool_waiter_list, pool_waiter);

struct pool {
    struct event_base *base;           /* borrowed */
    struct docker_client *docker;      /* borrowed */
    const struct cfg_profile *profile; /* borrowed */
    struct pool_budget *budget;        /* borrowed */
    struct pool_uids *uids;            /* borrowed */
    struct egress_proxy *egress;       /* borrowed; NULL: none (pool_set_egress()) */
    /* Forgotten adoptions' uids (see the invariants), until their container is seen again. */
    struct pool_held_uid {
        char container_id[129];
        uint32_t uid;
    } * held;
    size_t n_held;
    struct pool_callbacks cb;
    char *node_id;
    unsigned warm;
    struct pool_slot_list slots;
    struct pool_waiter_list waiters;
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

/* ---- pool.c: slots and their state machine ---- */

/* Whether a slot may go from state `from` to `to` (POOL_SLOT__INVALID: a new slot). Pure. */
bool pool_slot_transition_ok(enum pool_slot_state from, enum pool_slot_state to);
/* The one writer of slot->state (asserts the transition); also stamps since_ms. */
void pool_slot_set_state(struct pool_slot *slot, enum pool_slot_state to);
/* A new slot in state (CREATING or ADOPTING), at the end of the pool's list. */
struct pool_slot *pool_slot_new(struct pool *p, enum pool_slot_state state);
/* Cancels its call (returning its budget unit), closes its kernel, releases its uid, frees it. */
void pool_slot_free(struct pool_slot *slot);
void pool_slot_set_uid(struct pool_slot *slot, uint32_t uid);
/* Starts (or retries) the removal of the slot's container; freed once the engine confirms. */
void pool_slot_remove(struct pool_slot *slot);
/* Attaches to the slot's kernel (CONNECTING); failures remove the slot. */
void pool_slot_connect(struct pool_slot *slot);
/* A completion of `slot->call`: forget the call and return its budget unit. */
void pool_call_done(struct pool_slot *slot);
/* Takes one unit of the shared budget: false when none is left. */
bool pool_budget_take(struct pool *p);
/* Runs pool_tick() from the loop, outside the current callback. */
void pool_kick(struct pool *p);
void pool_notify(struct pool *p, const char *what, int r, const char *msg);

/* ---- refill.c: creation, back-off, waiters ---- */

/* Counts a failure of `what` and backs the next creation off exponentially. */
void pool_record_failure(struct pool *p, const char *what, int r, const char *msg);
/* The slot's container answers (CONNECTING -> READY): counts the refill, serves a waiter. */
void pool_slot_ready(struct pool_slot *slot);
void pool_waiter_free(struct pool_waiter *w);
void pool_on_kick(evutil_socket_t fd, short what, void *arg);

/* ---- reconcile.c ---- */

/* The slot of container_id (a full id or a unique prefix of at least 12), or NULL. */
struct pool_slot *pool_slot_find(const struct pool *p, const char *container_id);
/* An adoption is given up without removing the container: its uid stays held for it. */
void pool_slot_forget(struct pool_slot *slot);

/* ---- gate.c: the way out of a profile with an egress list ---- */

/* The profile has an egress list and the pool a proxy: its slots get gates. */
bool pool_wants_gate(const struct pool *p);
/* Makes the slot's gate (again, for an adoption). -errno with reterr. */
int pool_slot_gate_open(struct pool_slot *slot, struct err *reterr);
/* Starts the forwarder in the slot's running container, then connects (pool_slot_connect()); a
 * forwarder that does not start fails a creation, and is only reported for an adoption. */
void pool_slot_forwarder(struct pool_slot *slot);
/* The slot is being removed: its gate is unbound, the forwarder's start cancelled. */
void pool_slot_gate_close(struct pool_slot *slot);
/* And freed (the directory removed when container_gone). */
void pool_slot_gate_free(struct pool_slot *slot);

/* ---- stats.c: counts derived from the slot list ---- */

unsigned pool_count_state(const struct pool *p, enum pool_slot_state s);
/* Containers that count against max: everything not on its way out. */
unsigned pool_count_live(const struct pool *p);
/* Containers that will become READY without anything else happening. */
unsigned pool_count_coming(const struct pool *p);
/* READY slots whose kernel still answers: what pool_take() can hand out. */
unsigned pool_count_takeable(const struct pool *p);
/* Ready reached the warm target, or as much of it as max leaves once bound containers are
 * counted: a pool full of sessions is as warm as it can be. */
void pool_check_warm(struct pool *p);
