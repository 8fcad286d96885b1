/* Warm pool of locked-down containers for one profile.
 *
 * The pool keeps `warm` containers created, started and with their kernel answering, ahead of
 * demand; never more than `max` containers in all (bound ones included); container creations,
 * starts and removals across all pools bounded by a shared budget. Containers are single-use: a
 * bound container is never returned to the pool, only removed.
 *
 * Slot states:
 *   CREATING -> STARTING -> CONNECTING (kernel attach + hello) -> READY -> BOUND -> REMOVING
 *   ADOPTING (inspect of a container found on the engine) -> CONNECTING -> BOUND (its kernel
 *   says it serves a session), else REMOVING; any state -> REMOVING
 * A failure while creating, starting or connecting counts in failures_total, removes what was
 * created, and delays the next attempt with exponential backoff (250 ms .. 30 s). A READY
 * container that dies or whose kernel connection closes is removed and replaced.
 *
 * A BOUND slot belongs to whoever took it (a session) until pool_slot_release(): the pool never
 * frees it on its own, even if its container dies (the kernel connection's on_closed tells the
 * owner). The slot owns its kernel connection; the owner borrows it and installs its handlers.
 *
 * Everything is asynchronous and runs on the loop; nothing here is on a request path except
 * pool_take(), which is O(slots) and makes no engine call. The pool never logs: it reports
 * through pool_stats and the notify callback. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"
#include "util/err.h"

struct event_base;
struct docker_client;
struct docker_container_list;
struct docker_container_summary;
struct egress_gate;
struct egress_proxy;
struct kernel;
struct kernel_handlers;
struct kernel_msg;
struct pool;
struct pool_slot;
struct pool_waiter;

enum pool_slot_state {
    POOL_SLOT_CREATING,
    POOL_SLOT_STARTING,
    POOL_SLOT_ADOPTING,
    POOL_SLOT_CONNECTING,
    POOL_SLOT_READY,
    POOL_SLOT_BOUND,
    POOL_SLOT_REMOVING,
    POOL_SLOT__COUNT,
    POOL_SLOT__INVALID = -22,
};

/* The node's sandbox uids (uids.c): a pair per container, user code's and its relay's. Shared by
 * every pool, owned by the server. Pure. */
struct pool_uids;
/* count uids from first (both even, validated by the config). */
struct pool_uids *pool_uids_new(uint32_t first, uint32_t count);
struct pool_uids *pool_uids_free(struct pool_uids *u);
/* A free pair: 0 with user code's uid in *ret_uid (the relay's is + 1), or -ENOSPC. */
int pool_uids_take(struct pool_uids *u, uint32_t *ret_uid);
/* Marks the pair of uid used (a container found on the engine): -ERANGE when uid is not a user
 * code uid of the range, -EEXIST when the pair is in use. */
int pool_uids_claim(struct pool_uids *u, uint64_t uid);
/* Frees the pair of uid (its container is gone); anything else is ignored. */
void pool_uids_release(struct pool_uids *u, uint64_t uid);
bool pool_uids_valid(const struct pool_uids *u, uint64_t uid);
uint32_t pool_uids_used(const struct pool_uids *u);

/* Engine operations in flight across every pool (create, start, remove), owned by the server. */
struct pool_budget {
    unsigned inflight;
    unsigned max;
};

#define POOL_REFILL_WINDOW_S 60
#define POOL_REFUSED_LEN     256

struct pool_stats {
    unsigned warm_target, max;
    unsigned creating, starting, ready, bound, removing, waiters;
    uint64_t created_total, failures_total, removed_total;
    bool warm_reached; /* ready reached warm_target at least once */
    /* Containers created and made ready in the last POOL_REFILL_WINDOW_S seconds. */
    unsigned refilled_last_window;
    char last_failure[192];
    char refused[POOL_REFUSED_LEN]; /* why the engine cannot run the profile, or "" */
};

/* Reports notable pool events to the edge (the server logs them). msg is borrowed. */
typedef void pool_notify_cb(struct pool *p, const char *what, int r, const char *msg,
                            void *userdata);
/* An adopted container turned out to serve a session (its kernel says so): the slot is BOUND
 * and handed over; the callee takes it (and later releases it) or releases it at once. hello is
 * the kernel's hello message, borrowed for the call. */
typedef void pool_found_session_cb(struct pool *p, struct pool_slot *slot,
                                   const struct kernel_msg *hello, void *userdata);
/* Completion of pool_wait(): r == 0 with a BOUND slot, or -ETIMEDOUT, -EUSERS (at max), or the
 * failure that made the container unusable. */
typedef void pool_acquire_cb(int r, struct pool_slot *slot, const struct err *e, void *userdata);

struct pool_callbacks {
    pool_notify_cb *notify;
    pool_found_session_cb *found_session;
    void *userdata;
};

/* Creates the pool for profile (borrowed; must outlive the pool). Starts nothing until
 * pool_tick(). node_id is copied; docker, budget, uids and cb are borrowed. */
struct pool *pool_new(struct event_base *base, struct docker_client *docker,
                      const struct cfg_profile *profile, const char *node_id,
                      struct pool_budget *budget, struct pool_uids *uids,
                      const struct pool_callbacks *cb);
/* Cancels engine work in flight, closes kernel connections and frees the pool and its slots.
 * Containers stay on the engine (labelled) for the next start to re-adopt or remove. Waiters are
 * not called. BOUND slots must have been released or abandoned by their owners first. */
struct pool *pool_free(struct pool *p);

/* The egress proxy (borrowed; must outlive the pool) the slots of a profile with an egress list
 * get their gates from (docs/egress.md); without one such a profile's containers cannot be
 * created (their mount source is missing). */
void pool_set_egress(struct pool *p, struct egress_proxy *proxy);
/* A BOUND slot's gate (the session binds it), or NULL when its profile has no egress list. */
struct egress_gate *pool_slot_gate(const struct pool_slot *slot);

const char *pool_name(const struct pool *p);
const struct cfg_profile *pool_profile(const struct pool *p);
void pool_set_warm(struct pool *p, unsigned warm);
/* The engine cannot enforce this profile (why: a message naming the profile, the limit and the
 * reason; copied): until called again with NULL, the pool makes no container, pool_take()
 * answers -EAGAIN, pool_wait() -ECONNREFUSED, waiting creates fail with -ECONNREFUSED and why
 * (from the loop, not from this call), and READY containers are removed. BOUND slots stay with
 * their owners. NULL or "" lifts it (readiness then waits for the warm target again). */
void pool_refuse(struct pool *p, const char *why);
bool pool_refused(const struct pool *p);
/* Shutdown: stops refilling and removes every container not bound to a session (a restarted
 * daemon never reuses an unbound container, see pool_adopt()). */
void pool_shutdown(struct pool *p);
/* True while removals are in flight. */
bool pool_removing(const struct pool *p);
/* Starts creations the pool is short of (bounded by max, backoff and the budget). Cheap. */
void pool_tick(struct pool *p);
void pool_get_stats(const struct pool *p, struct pool_stats *ret);

/* Hot path: takes a READY container now, provided more than keep are ready (the others' reserved
 * share). Returns 0 with a BOUND slot, or -EAGAIN when none is left to take. Makes no engine
 * call. */
int pool_take(struct pool *p, unsigned keep, struct pool_slot **ret);
/* Calls fn for every READY or BOUND container, with the uid it was given (fn must not free the
 * pool; it may end slots). */
typedef void pool_container_fn(struct pool *p, const char *container_id, enum pool_slot_state state,
                               uint32_t uid, void *userdata);
void pool_foreach_container(struct pool *p, pool_container_fn *fn, void *userdata);
/* Cold path: waits up to timeout_ms for a container created on demand. -EUSERS at once when the
 * profile is at max with nothing on its way. The callback fires exactly once, never from inside
 * this call, unless pool_wait_cancel() comes first. */
int pool_wait(struct pool *p, unsigned timeout_ms, pool_acquire_cb *cb, void *userdata,
              struct pool_waiter **ret);
void pool_wait_cancel(struct pool_waiter *w);

/* A BOUND slot's kernel connection (owned by the slot) and container id. */
struct kernel *pool_slot_kernel(struct pool_slot *slot);
const char *pool_slot_container(const struct pool_slot *slot);
/* "uid:gid" of the slot's sandbox user (user code's, and its workspace's owner). */
const char *pool_slot_user(const struct pool_slot *slot);
/* Attaches to a BOUND slot's container again after its kernel connection broke: the old handle
 * is freed (callers holding it must take pool_slot_kernel() again) and a new connection opened
 * with the owner's handlers; its on_hello or on_closed follows. Immediate failures: -errno. */
int pool_slot_reconnect(struct pool_slot *slot, const struct kernel_handlers *h, void *userdata,
                        struct err *reterr);
/* Freezes (freeze true) or thaws a BOUND slot's container with the cgroup freezer (the engine's
 * pause and unpause). cb(r) once, never from inside this call, unless the slot is released first
 * (then never). -EBUSY: another engine call of the slot is in flight (no callback). */
typedef void pool_freeze_cb(int r, const struct err *e, void *userdata);
int pool_slot_freeze(struct pool_slot *slot, bool freeze, pool_freeze_cb *cb, void *userdata);
/* Ends a BOUND slot: closes its kernel connection and removes the container in the background
 * (retried until the engine confirms). The slot must not be used afterwards. */
void pool_slot_release(struct pool_slot *slot);
/* As pool_slot_release(), and cb is called once: with 0 when the engine confirmed the removal
 * (after retries, however long they take), or with -ECANCELED when the pool is freed first. The
 * session module keeps an ended session's record until then, so that a crash before the
 * container is gone finishes the end at the next start. */
typedef void pool_removed_cb(int r, void *userdata);
void pool_slot_release_then(struct pool_slot *slot, pool_removed_cb *cb, void *userdata);

/* Offers a container found on the engine (an entry of a decoded list, docker/list.h; borrowed
 * for the call). A running container whose inspect matches the profile's policy and whose
 * kernel says it serves a session goes to found_session (which checks the claim against the
 * session's record); anything else is removed: a container found on the engine never joins the
 * warm pool, since code that ran in it could forge its kernel's answers. Returns 0 when taken on,
 * -EEXIST when the pool already tracks it, -EINVAL for an id that is not a container id. */
int pool_adopt(struct pool *p, const struct docker_container_summary *c);
/* Tells the pool that a container died or vanished (events, reconcile). READY and earlier
 * slots are removed and replaced; BOUND slots are left to their owner. Returns true when the
 * container belonged to this pool. */
bool pool_container_gone(struct pool *p, const char *container_id);
/* The state of container_id's slot, or POOL_SLOT__INVALID when the pool has none. */
enum pool_slot_state pool_container_state(const struct pool *p, const char *container_id);
/* True when container_id belongs to this pool (in any state). */
bool pool_owns(const struct pool *p, const char *container_id);
/* True when a slot with this slot id exists (covers creations whose answer is still due). */
bool pool_knows_slot(const struct pool *p, const char *slot_id);
/* Reconciles with a full list of this node's containers (decoded, docker/list.h; borrowed for
 * the call) that was asked for at listed_at_ms (time_now_ms()): READY and CONNECTING slots that
 * were already so then and whose container is missing or no longer running are removed and
 * replaced; a forgotten adoption whose container is not listed gives its uid back. */
void pool_reconcile(struct pool *p, const struct docker_container_list *list,
                    uint64_t listed_at_ms);
/* The engine link came back after an outage: the failures seen meanwhile were the engine's, not
 * the profile's, so the backoff restarts from zero; and readiness waits until the pool is warm
 * again (what it held may have died with the engine). */
void pool_engine_back(struct pool *p);
