/* The session module's own declarations, shared by its files (style.md §2): the objects, the
 * session state machine and the functions one file calls in another. Nothing outside
 * src/session/ includes it.
 *
 * Files:
 *  - manager.c: the registry (by_id, by_container, the list), Redis operations in flight (sop),
 *    the cron tick and the reaper, stats and tenant counts.
 *  - session.c: one session's state machine (session_set_state() is the only writer of
 *    s->state), ending, kernel events, lookups and accessors.
 *  - record.c: the record's fields that change while it lives: epoch, touch, expiry, ext.
 *  - create.c: create, quotas, fair shares of the warm pools, binding a slot, cold waits.
 *  - execution.c: executions, deadline, grace, interrupt, restart.
 *  - result.c: pure: the kernel's done and the execution's phase to the API status.
 *  - recovery.c: adoption, loading records, reconciling with the engine's list, reconnection,
 *    container events (gone, oom, quarantine).
 *  - history.c: the execution history in Redis.
 *  - pause.c: pausing (the cgroup freezer), resuming, the calls that wait for it, uses.
 *  - hibernate.c: hibernating (a snapshot, then no container) and waking (a container, the
 *    snapshot restored into it), idle actions.
 *  - views.c: the API's JSON views of sessions and executions. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "kernel/proto.h"
#include "session.h"
#include "store/schema.h"
#include "util/buf.h"

struct event;
struct kernel;
struct hashmap;
struct store_sessions;

#define MAX_ARTIFACTS       64u /* per execution; the kernel saves at most 33 */
#define MAX_RESTART_WAITERS 16u
#define RESTART_REASON      "restart requested by the client"
#define REAP_BATCH          64u
#define TOUCH_MAX_MS        5000u
#define TOUCH_MIN_MS        250u
#define COLD_WAIT_FACTOR    4u /* a cold create may take this many engine deadlines */
#define RECONNECT_TRIES     3u
#define SETTLE_MS           1000u  /* see struct session's settle_timer */
#define OOM_DEATH_MS        2000u  /* see struct session's oom_ms */
#define OOM_WAIT_MS         2000u  /* see SESSION_DYING */
#define CODE_HEAD_CHARS     200u   /* characters of code kept in the execution history */
#define MAX_LIVE_WAITERS    64u    /* calls waiting for one session to resume or wake */
#define HIBERNATE_RETRY_MS  60000u /* an idle hibernation that failed for now is tried again */

/* ---- the session state machine ---------------------------------------------------------------
 *
 *   CREATING --> READY <--> DETACHED <--> RECONNECTING
 *      |           |   \       |   \          |
 *      v           |    `-> DYING <-'          |
 *   CREATE_LOST    |          |                |
 *                  `---> ENDING <--------------'
 *
 *   READY --> PAUSING --> PAUSED --> RESUMING --> READY   (pause.c; a failed freeze goes back to
 *               `-----> READY          ^   `----> PAUSED   READY, a failed thaw to PAUSED)
 *
 *   READY --> HIBERNATING --> HIBERNATED --> WAKING --> READY   (hibernate.c; a failed or
 *                 `-----> READY    ^            `-----> HIBERNATED   cancelled hibernation goes
 *   CREATING ---------------------'  (a hibernated record loaded)    back to READY, a failed
 *                                                                     wake to HIBERNATED)
 *
 * (every registered state may go to ENDING; a failed end goes back: see session_end()). Whether
 * an execution runs is s->exec, not a state: one may run in READY (the API's "busy"), and still
 * be answered in DETACHED (a runtime that waits SETTLE_MS) and DYING. */
enum session_state {
    SESSION_CREATING,     /* its record is being written; not registered yet */
    SESSION_CREATE_LOST,  /* its container went meanwhile: the create fails when Redis answers */
    SESSION_READY,        /* registered, its kernel attached */
    SESSION_DETACHED,     /* its kernel connection broke: the next container list decides */
    SESSION_RECONNECTING, /* attached again, waiting for its kernel's hello */
    SESSION_DYING,        /* its container died during an execution under a runtime other than
                           * runc: it waits up to OOM_WAIT_MS for a late "oom", so that the
                           * answer can say "oom", then ends */
    SESSION_ENDING,       /* its end is under way: its record is being marked ending */
    SESSION_PAUSING,      /* its container is being frozen (the engine's pause in flight) */
    SESSION_PAUSED,       /* frozen: no CPU; a call that needs it resumes it first */
    SESSION_RESUMING,     /* being thawed; the calls that need it wait (s->waiters) */
    SESSION_HIBERNATING,  /* its snapshot is being taken; then its container goes */
    SESSION_HIBERNATED,   /* no container (s->slot NULL): its state is in rec.snapshot */
    SESSION_WAKING,       /* a container was or is being claimed for it and its snapshot is being
                           * restored into it; the calls that need it wait (s->waiters) */
    SESSION__COUNT,
};

/* Whether from -> to is a transition of the machine above (pure; unit-tested). */
bool session_state_allowed(enum session_state from, enum session_state to);
const char *session_state_name(enum session_state st);

/* Execution phases: RUNNING -> (deadline) INTERRUPTED: KeyboardInterrupt sent; the namespace
 * survives if the code stops -> (grace) RESTARTING: the kernel kills its worker; the namespace
 * is lost -> (engine.timeout_ms) the sandbox is declared lost and the session ends. */
enum exec_phase {
    PH_RUNNING,
    PH_INTERRUPTED,
    PH_RESTARTING,
};

/* Why an execution left PH_RUNNING. */
enum exec_cause {
    CAUSE_NONE,
    CAUSE_TIMEOUT,
    CAUSE_CLIENT, /* interrupt or restart asked for over the API */
};

/* ---- result.c: pure ---------------------------------------------------------------------------
 */

/* What replaces the kernel's error in the answer. */
enum result_error {
    RESULT_ERROR_KERNEL,   /* the kernel's own (if it sent one) */
    RESULT_ERROR_DIED,     /* KernelDied: the interpreter exited */
    RESULT_ERROR_REJECTED, /* Rejected: the kernel refused the request */
};

struct result {
    enum session_exec_status status;
    bool state_preserved;
    enum result_error error;
    const char *error_value; /* DIED, REJECTED: the reason (borrowed from done, or static) */
};

/* Maps the kernel's done, the execution's phase and cause, and the session's epoch when it
 * started (epoch0) and now to the API's answer. The epoch moved while it ran (the kernel's
 * "restarted" came first), or the kernel says its interpreter died: either way the namespace
 * is not the one the execution began in. */
void result_classify(const struct kernel_done *done, enum exec_phase phase, enum exec_cause cause,
                     uint64_t epoch0, uint64_t epoch, struct result *ret);
/* An execution we end ourselves because its sandbox was lost: "oom" when the engine reported
 * an OOM kill just before, else "error". */
enum session_exec_status result_lost_status(bool died_of_oom);
/* The epoch contract: a generation the kernel reports (hello, restarted) moves the epoch
 * exactly when it differs from the one the current epoch belongs to. */
bool result_epoch_moves(int64_t epoch_gen, int64_t reported_gen);
/* Whether a "restarted" answers the restart a client asked for (its reason is ours). */
bool result_restart_is_ours(const char *reason);

/* ---- objects -------------------------------------------------------------------------------- */

struct execution {
    struct session *s;
    struct exec_observer obs;
    void *userdata;
    struct buf out, err;
    uint64_t out_extra, err_extra; /* bytes dropped here, beyond what the kernel reported */
    uint64_t started_us;
    struct event *deadline, *grace;
    uint64_t restart_ms; /* when PH_RESTARTING began (monotonic) */
    json_t *artifacts;   /* array, filled as the kernel announces files */
    /* result, valid in on_done */
    json_t *result, *error;
    json_t *mime;     /* a rich execution's other representations, or NULL */
    json_t *snapshot; /* a save's or restore's manifest (done), or NULL */
    json_t *restored; /* the first execution after a restore: the session's restored */
    struct kernel_output_count truncated[2]; /* the kernel's counts ([0] stdout, [1] stderr) */
    int64_t cpu_ms, peak_memory_bytes;       /* -1: not reported */
    uint64_t duration_ms;
    uint64_t epoch0; /* the session's epoch when it started */
    /* what ran, for the history and the audit log (never the code itself in the audit) */
    uint64_t started_wall_ms;
    char *code_head; /* the first CODE_HEAD_CHARS characters */
    size_t code_bytes;
    enum exec_phase phase;
    enum exec_cause cause;
    unsigned timeout_s;
    enum session_exec_status status;
    int exit_code; /* -1: none */
    bool is_cmd;
    bool internal; /* exec_req's */
    bool collect;
    bool detached;
    bool orphan;      /* left running by a previous daemon or a broken connection */
    bool ended;       /* status is set */
    bool kernel_done; /* the answer is the kernel's done (not one of our own aborts) */
    bool has_resources;
    bool state_preserved;
    char id[33];
    char code_sha256[65]; /* hex, of the code or the command line */
    char actor[80];       /* who asked for it (audit log) */
};

/* What a waiting call waits for. */
enum waiter_kind {
    WAIT_LIVE,      /* READY: a call that needs the container (a resume, a wake) */
    WAIT_PAUSE,     /* PAUSED: an explicit pause */
    WAIT_HIBERNATE, /* HIBERNATED: an explicit hibernation */
};

/* A call waiting for its session to be paused, hibernated, or live again. */
struct session_waiter {
    TAILQ_ENTRY(session_waiter) link;
    struct session *s;
    enum waiter_kind kind;
    session_live_cb *cb;
    void *userdata;
};

/* A client waiting for the restart it asked for. */
struct session_restart {
    TAILQ_ENTRY(session_restart) link;
    struct session *s;
    session_restart_cb *cb;
    void *userdata;
};

struct session {
    TAILQ_ENTRY(session) link;
    struct session_manager *m;
    struct store_session_rec rec;
    const struct cfg_profile *profile;
    struct pool_slot *slot;
    struct kernel *kernel; /* borrowed from slot */
    struct execution *exec;
    /* Its egress bytes through the gates of the containers it gave up (hibernation): the next
     * gate counts on from there (session_bind_gate(), session_keep_egress_bytes()). */
    uint64_t egress_bytes;
    /* Written only by session_set_state(). */
    enum session_state state;
    /* Where a failed end goes back to (see session_end()). */
    enum session_state end_from;
    /* The reaper claimed the session while it was ENDING: its deadline is gone from Redis, so
     * a failed end must not go back (nothing would reap it again); it finishes instead. */
    bool end_claimed;
    /* Restarts asked for and not yet confirmed by the kernel; one restart request is in flight
     * while this is not empty (later requests join it). */
    TAILQ_HEAD(, session_restart) restarts;
    struct event *restart_timer; /* this and the other timers: NULL without a container */
    /* Calls waiting for a pause or a resume (pause.c), at most MAX_LIVE_WAITERS. */
    TAILQ_HEAD(, session_waiter) waiters;
    /* Operations on its container that are not executions (file transfers): no pause while
     * any runs. */
    unsigned uses;
    /* The engine's freezer state as last confirmed, and what the call in flight asks for: the
     * facts a failed end goes back by (end_failed()), not states. */
    bool frozen, freezing;
    /* Hibernation (hibernate.c): a snapshot job (take or restore) of the session is in flight,
     * which session_destroy() forgets; a hibernation the reaper asked for (idle: a failure ends
     * it or retries, never answers). */
    bool snap_job;
    bool idle_hibernation;
    bool hibernate_by_admin; /* the explicit hibernation under way is the admin's (audit actor) */
    uint64_t resume_started_us; /* monotonic: the resume's latency histogram */
    uint64_t last_use_ms;       /* monotonic: the last call that needed its container */
    /* The container made on demand a wake waits for (hibernate.c). */
    struct pool_waiter *wake_wait;
    uint64_t hibernate_started_us; /* monotonic: of the hibernation or wake under way */
    /* What a restore brought back ({"from", "variables", "skipped"}), shown by the session and
     * by its first execution after it (restored_told then); NULL: made fresh. */
    json_t *restored;
    /* A runtime other than runc (gVisor): memory exhaustion kills the whole sandbox, kernel
     * included. When its connection breaks during an execution, the answer waits up to
     * SETTLE_MS for the engine's oom/die events, so that it can say what happened. */
    struct event *settle_timer;
    /* When the engine last reported an OOM kill in its container (monotonic ms, 0: never).
     * Under runc that is usually the worker alone (the session goes on); the container dying
     * within OOM_DEATH_MS of it was killed by it. */
    uint64_t oom_ms;
    /* SESSION_DYING's timer, and which event put it there: "die" (true) or a removal. A
     * detail of that state, not a state. */
    struct event *oom_wait_timer;
    bool oom_wait_die;
    /* What kind of container it got (the acquire histogram, the audit line): not a state. */
    bool cold;
    bool restored_told;     /* see restored */
    uint64_t last_touch_ms; /* monotonic */
    unsigned reconnect_failures;
    uint64_t detached_ms;       /* monotonic */
    uint64_t create_started_us; /* monotonic: when its create request came */
    /* Who ends it and why ("session.ended" in the audit log); "" until known. */
    char end_actor[80];
    char end_why[24];
    char end_detail[192];
};

enum sop_kind {
    SOP_CREATE,
    SOP_TOUCH,
    SOP_EPOCH,
    SOP_END,
    SOP_DELETE,
    SOP_CLAIM,
    SOP_LOAD,
    SOP_HISTORY,
    SOP_EXPIRY,
    SOP_EXT,
    SOP_EGRESS,
    SOP_HIBERNATE,
    SOP_ADMIT,
};

/* A Redis operation in flight. */
struct sop {
    TAILQ_ENTRY(sop) link;
    struct session_manager *m; /* NULL once the manager is gone */
    enum sop_kind kind;
    char id[STORE_ID_MAX + 1];
    /* SOP_CREATE */
    struct session *pending; /* not registered yet */
    session_create_cb *create_cb;
    bool admitted; /* its id was admitted across the cluster (admit.c) */
    /* SOP_ADMIT */
    struct cold *cold; /* freed with the manager (then m is NULL) */
    /* SOP_END */
    session_end_cb *end_cb;
    /* SOP_EXPIRY, SOP_EXT, SOP_EGRESS */
    session_expiry_cb *expiry_cb;
    session_ext_cb *ext_cb;
    char *egress; /* SOP_EGRESS: the narrowing's text, applied once Redis has it (owned) */
    uint64_t expires_at;
    void *userdata;
};

/* A create waiting for its admission across the cluster (admit.c) or for a container made on
 * demand. */
struct cold {
    TAILQ_ENTRY(cold) link;
    struct session_manager *m;
    struct pool_waiter *waiter;
    struct session_create_req req;
    char tenant[65], profile[49];
    char idle_action[16];
    char *metadata;
    char *ext;
    char *egress;
    session_create_cb *cb;
    void *userdata;
    uint64_t started_us;
    char id[STORE_ID_MAX + 1]; /* admitted: the session's id; "" none asked */
};

/* A container that serves a session, found before this node's records were loaded. */
struct held {
    TAILQ_ENTRY(held) link;
    struct pool_slot *slot;
    char session[STORE_ID_MAX + 1];
    int64_t gen;
    char busy[KERNEL_MAX_ID + 1];
};

struct session_manager {
    struct event_base *base; /* borrowed */
    const struct cfg *cfg;   /* borrowed */
    struct pool **pools;     /* borrowed */
    size_t n_pools;
    struct store_redis *redis; /* borrowed */
    struct store_sessions *store;
    struct hashmap *by_id;        /* registered sessions */
    struct hashmap *by_container; /* container id -> session, those being created included */
    TAILQ_HEAD(, session) sessions;
    TAILQ_HEAD(, sop) sops;
    TAILQ_HEAD(, cold) colds;
    TAILQ_HEAD(, held) held;
    /* Records loaded at start-up and not yet matched with a container. */
    struct store_session_rec *unmatched;
    size_t n_unmatched;
    bool loaded, loading, claiming;
    bool want_adopt; /* a lost node's hibernated sessions are ours: read them (again) */
    bool want_list;  /* a detached session waits for a container list */
    bool freeing;    /* session_manager_free(): nothing is recorded any more */
    struct session_manager_stats stats;
    struct session_profile_stats *pstats; /* n_pools */
    struct hashmap *takes;                /* "tenant/profile" -> struct take_rate */
    struct hashmap *askers;               /* profile -> struct askers */
    session_notify_cb *notify;
    void *notify_userdata;
    session_audit_cb *audit;
    void *audit_userdata;
    const struct session_snapshot_ops *snap; /* NULL: no snapshot store, no hibernation */
    void *snap_userdata;
};

/* ---- manager.c ------------------------------------------------------------------------------- */

struct sop *sop_new(struct session_manager *m, enum sop_kind kind, const char *id);
/* Unlinks op from its manager (if any) and frees it. */
void sop_free(struct sop *op);
void manager_notify(struct session_manager *m, const char *event,
                    const struct store_session_rec *rec, const char *detail);
/* Hands an audit event to the edge (nothing is written here). */
void manager_audit(struct session_manager *m, const struct session_audit *a);
/* Deletes a record, best effort (on failure the next start finishes it). */
void manager_delete_record(struct session_manager *m, const char *id);
/* An ending record's last step: its container (slot, NULL for none) is released, and the record
 * is deleted once the engine confirmed the removal; a crash before then leaves the record
 * `ending`, which the next start finishes (recovery.c). */
void manager_release_then_delete(struct session_manager *m, struct pool_slot *slot, const char *id);
const struct cfg_profile *manager_profile_find(const struct session_manager *m, const char *name);
/* The index of the profile's pool (and stats), or n_pools. */
size_t manager_profile_index(const struct session_manager *m, const char *profile);
unsigned manager_tenant_running(const struct session_manager *m, const char *tenant);
/* The session whose container this is (being created included), or NULL. */
struct session *manager_by_container(const struct session_manager *m, const char *container_id);
/* "tenant:<id>", the audit log's actor for what a tenant asked for. */
const char *tenant_actor(const char *tenant, char *out, size_t n);

/* ---- session.c, record.c
 * ------------------------------------------------------------------------------- */

extern const struct kernel_handlers session_kernel_handlers;

/* The one writer of s->state: asserts the transition is allowed and logs it (debug). */
void session_set_state(struct session *s, enum session_state to);
bool session_is_registered(const struct session *s);
/* Binds the egress gate of s's container (if its profile has an egress list) to s: its tenant,
 * its id, its profile's list and its own narrowing of it (the record's "egress"; one that does
 * not parse any more narrows to nothing) (docs/egress.md). */
void session_bind_gate(struct session *s);
/* Before s gives its container up (hibernation): what its gate counted is kept for the next. */
void session_keep_egress_bytes(struct session *s);
/* A narrowing's text for profile p (create.c): only of a profile with a list, one that parses,
 * at most STORE_EGRESS_MAX bytes. */
int session_check_egress(const struct cfg_profile *p, const char *text, struct err *reterr);
struct session *session_alloc(struct session_manager *m, struct pool_slot *slot,
                              const struct cfg_profile *p, const struct store_session_rec *rec);
/* The timers of a session with a container exist (on) or not (off: a hibernated session's, so
 * that it costs little more than its record). */
void session_timers(struct session *s, bool on);
/* Puts a CREATING (or adopted) session in the registry as READY (session_register()), or as st
 * (a loaded hibernated record: HIBERNATED). slot may be NULL in session_alloc() (no container). */
void session_register(struct session *s);
void session_register_as(struct session *s, enum session_state st);
/* Frees the session object; the caller has dealt with its record and container. A running
 * execution is answered first. */
void session_destroy(struct session *s);
/* Releases the container and forgets the session (its record is marked ending or gone). */
void session_drop(struct session *s);
void session_epoch_bump(struct session *s, int64_t new_gen, const char *why);

/* ---- pause.c --------------------------------------------------------------------------------- */

/* The manager's tick: pauses the sessions idle for their pause_after_s. */
void pause_tick(struct session_manager *m);
/* The session goes: every waiting call is answered with r. */
void pause_waiters_answer(struct session *s, int r, const char *msg);
/* Whether the session's container is, or is being, frozen. */
bool pause_is_paused(const struct session *s);
/* The container or its kernel connection is gone: the session's state is lost, end it. */
void session_lost(struct session *s, const char *why);
/* The reaper claimed it: it ends (daemon, "idle" or "lifetime"). */
void session_reaped(struct session *s);
bool session_died_of_oom(const struct session *s);

/* ---- hibernate.c ----------------------------------------------------------------------------- */

/* Whether the session hibernates at its idle deadline (its own idle_action, else its profile's,
 * and a snapshot store). */
bool hibernate_on_idle(const struct session *s);
/* Whether its idle action is to hibernate (whatever its state now). */
bool hibernate_on_idle_action(const struct session *s);
/* The reaper claimed it and it hibernates rather than end (hibernate_on_idle()). */
void hibernate_idle(struct session *s);
/* A call needs the hibernated session: its wake starts (the caller added its waiter). */
void hibernate_wake(struct session *s);
/* Whether a wake of s may claim a container now (create_share_check()); 0 or -EDQUOT. */
int hibernate_wake_admit(const struct session *s, struct err *reterr);
/* The session goes: its snapshot job is forgotten, its container wait cancelled. */
void hibernate_forget(struct session *s);
/* A wake whose new container or kernel went: back to HIBERNATED, the waiters answered r. */
void hibernate_wake_failed(struct session *s, int r, const char *why);
/* Releases the container a wake claimed (if any): the session has none again. */
void hibernate_drop_container(struct session *s);
/* A loaded hibernated record: the session, registered as HIBERNATED. */
void hibernate_adopt_record(struct session_manager *m, const struct store_session_rec *rec);
/* pause.c's waiters, for hibernate.c. */
struct session_waiter *waiter_add(struct session *s, enum waiter_kind kind, session_live_cb *cb,
                                  void *userdata);
unsigned waiters_count(const struct session *s, enum waiter_kind kind);
void waiters_answer(struct session *s, enum waiter_kind kind, int r, const char *msg);

/* ---- execution.c ----------------------------------------------------------------------------- */

/* Answers x with status and an error name and value (its namespace counted as lost). */
void execution_end(struct execution *x, enum session_exec_status status, const char *name,
                   const char *why);
void execution_abort(struct execution *x, const char *name, const char *why);
void execution_disconnected(struct execution *x);
/* An execution the previous daemon started (or one running across a reconnection). */
void execution_orphan(struct session *s, const char *id);
void execution_on_done(struct session *s, const struct kernel_msg *m);
void execution_on_output(struct session *s, const char *exec_id, bool to_stderr, const char *text,
                         size_t len);
void execution_on_artifact(struct session *s, const struct kernel_msg *m);
/* Answers every waiting restart (r == 0: the restart happened and the epoch is current). */
void restarts_answer(struct session *s, int r, const char *why);
void session_on_restart_timeout(int fd, short what, void *arg);

/* ---- create.c -------------------------------------------------------------------------------- */

/* The tenant's sessions (of profile, or of all for NULL), those being created included. */
unsigned create_tenant_sessions(const struct session_manager *m, const char *tenant,
                                const char *profile);
/* The admission every claim on a container passes, a create's and a wake's: tenant's share of
 * p (max_per_tenant), counting what holds or is about to hold a container. -EDQUOT past it, with
 * a message that ends with advice. */
int create_share_check(const struct session_manager *m, const char *tenant,
                       const struct cfg_profile *p, const char *advice, struct err *reterr);
/* A warm container of pool for tenant, if the fair shares let it take one (other tenants'
 * reservations, what a heavy taker leaves): 0 with the slot, or -EAGAIN and the number of ready
 * containers the claim must leave (*ret_keep, for a wait for one made on demand). */
int create_take_warm(struct session_manager *m, struct pool *pool, const char *tenant,
                     const struct cfg_profile *p, uint64_t now_s, struct pool_slot **ret,
                     unsigned *ret_keep);
void create_cold_free(struct cold *c);
/* A copy of req waiting (in m->colds: the quotas count it). */
struct cold *create_cold_new(struct session_manager *m, const struct session_create_req *req,
                             const struct cfg_profile *p, session_create_cb *cb, void *userdata,
                             uint64_t started_us);
/* The create of c goes on: a warm container, else one made on demand; c is taken over. */
int create_claim(struct session_manager *m, struct cold *c, struct err *reterr);

/* ---- admit.c --------------------------------------------------------------------------------- */

/* Admits c across the cluster (its tenant's sessions on every node under max), then claims its
 * container; c is taken over. Over max: c's callback gets -EDQUOT. */
int create_admit(struct cold *c, unsigned max, struct err *reterr);
/* Gives back the admission of id, whose create failed (best effort). */
void create_unadmit(struct session_manager *m, const char *tenant, const char *id);

/* ---- recovery.c ------------------------------------------------------------------------------ */

void recovery_load_records(struct session_manager *m);
/* Frees the records still unmatched. */
void recovery_unmatched_free(struct session_manager *m);
/* The record id is gone (the reaper claimed it before its container said hello): a container
 * that says it serves it later is released, not adopted. */
void recovery_forget(struct session_manager *m, const char *id);
void recovery_on_oom_wait_timeout(int fd, short what, void *arg);

/* ---- history.c ------------------------------------------------------------------------------- */

/* Appends the ended execution to its session's history in Redis (never waited for). */
void history_push(struct execution *x);
json_t *history_time_json(uint64_t wall_ms);
