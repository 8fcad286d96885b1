/* Sessions: a tenant's binding to one container and its kernel, and the executions run in it.
 *
 * A session is created by taking a warm container from its profile's pool (no engine call) or,
 * when none is ready and the profile is under max, one made on demand; its record is written to
 * Redis before the session is announced. Its kernel's namespace survives between executions;
 * `kernel_epoch` increases exactly when that namespace is lost (the kernel's worker restarted:
 * timeout past the grace period, memory exhaustion, crash, explicit restart).
 *
 * Activity (every API call on the session, and a running execution) pushes the idle deadline in
 * Redis; an open connection alone does not. The reaper claims expired sessions atomically in
 * Redis and ends them. Ending a session marks its record `ending`, releases its container (which
 * the pool removes in the background until the engine confirms), and deletes the record once
 * the container is gone; a record still `ending` at the next start is finished then.
 *
 * Crash-only: sessions live in Redis and in their containers (whose kernel remembers the session
 * it serves). After a restart, session_manager_adopt() receives every container whose kernel
 * says it serves a session, and session_manager_reconcile() ends records whose container is gone.
 *
 * This module knows nothing about HTTP and writes no audit line (it reports them: struct
 * session_audit). Loop context only. Callbacks never fire from inside the
 * call that starts the operation. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "kernel/proto.h"
#include "metrics/metrics.h"
#include "util/buf.h"
#include "util/err.h"

struct event_base;
struct docker_container_list;
struct kernel_exec_opts;
struct kernel_msg;
struct pool;
struct pool_slot;
struct store_redis;
struct session_manager;
struct session;
struct execution;

typedef struct json_t json_t;

#define SESSION_ID_MAX  64   /* a session id's characters (the store's STORE_ID_MAX) */
#define SESSION_EXT_MAX 1024 /* session_ext()'s bytes (the store's STORE_EXT_MAX) */

/* The API status of an ended execution, as counted in the stats. */
enum session_exec_status {
    SESSION_EXEC_OK,
    SESSION_EXEC_ERROR,
    SESSION_EXEC_TIMEOUT,
    SESSION_EXEC_INTERRUPTED,
    SESSION_EXEC_OOM,
    SESSION_EXEC__COUNT,
    SESSION_EXEC__INVALID = -22,
};

/* Its name in the API ("ok", ...), for views and metric labels; NULL out of range. */
const char *session_exec_status_to_string(enum session_exec_status s);

struct session_manager_stats {
    size_t sessions, busy;
    size_t hibernated; /* now (hibernating and waking included) */
    uint64_t hibernated_total, woken_total, hibernate_failures, wake_failures;
    uint64_t wake_refused; /* over the tenant's share: it stayed hibernated */
    uint64_t created_total, ended_total, reaped_total, adopted_total;
    uint64_t executions_total; /* started by this daemon */
    uint64_t reconnected_total;
    size_t paused;                        /* now (pausing and resuming included) */
    uint64_t paused_total, resumed_total; /* freezes and thaws the engine confirmed */
    uint64_t pause_failures, resume_failures;
    /* Executions started by this daemon that ended, by status. */
    uint64_t executions_ended[SESSION_EXEC__COUNT];
    uint64_t output_bytes[2]; /* sandbox output received: [0] stdout, [1] stderr */
};

/* Latencies of one profile (the pools' order given to session_manager_new()). */
struct session_profile_stats {
    /* Create request to ready (record written), of successful creates: [0] a warm container
     * was taken, [1] one had to be made (cold). */
    struct metrics_hist acquire[2];
    /* Start to end of executions started by this daemon. */
    struct metrics_hist execution;
    /* A resume: the first call on a paused session to its container thawed. */
    struct metrics_hist resume;
    /* A hibernation (its start to its container's release) and a wake (the first call on a
     * hibernated session to its snapshot restored). */
    struct metrics_hist hibernate, wake;
};

/* Reports what the edge should log: event is "ended" (reaped or lost), "epoch" (the namespace
 * was lost), "adopted", "detached" or "reconnected" (its kernel connection broke, and was made
 * again), "execution" (one whose client was lost ended); detail says why. All strings borrowed for
 * the call. */
typedef void session_notify_cb(const char *event, const char *session_id, const char *tenant,
                               const char *detail, void *userdata);

/* What the audit log records of sessions (README.md, "Audit log"): the edge writes the line
 * (nothing in this module does). Strings borrowed for the call. */
enum session_audit_kind {
    SESSION_AUDIT_CREATED,       /* "session.created": profile, container, cold */
    SESSION_AUDIT_ENDED,         /* "session.ended": why, detail */
    SESSION_AUDIT_EXEC_STARTED,  /* "execution.started": execution, is_cmd, code_*, timeout_s */
    SESSION_AUDIT_EXEC_FINISHED, /* "execution.finished": execution, status, epoch, and for one
                                  * this daemon started (not orphan) code_*, duration_ms */
    SESSION_AUDIT_PAUSED,        /* "session.paused": why "idle" (an explicit pause's line is
                                  * the edge's) */
    SESSION_AUDIT_RESUMED,       /* "session.resumed": duration_ms (of the thaw) */
    SESSION_AUDIT_HIBERNATED,    /* "session.hibernated": why ("idle" or "requested"), snapshot,
                                  * bytes, duration_ms */
    SESSION_AUDIT_WOKEN,         /* "session.woken": snapshot, container, cold, epoch,
                                  * duration_ms */
};

struct session_audit {
    enum session_audit_kind kind;
    const char *actor; /* "tenant:<id>", "admin" or "daemon" */
    const char *tenant, *session;
    const char *profile, *container;
    bool cold;
    const char *why, *detail;
    const char *execution;
    bool is_cmd;
    const char *code_sha256;
    uint64_t code_bytes;
    unsigned timeout_s;
    enum session_exec_status status;
    uint64_t duration_ms, epoch;
    const char *snapshot;
    uint64_t bytes;
    bool orphan; /* started by a previous daemon or before a reconnection: its code unknown */
};

typedef void session_audit_cb(const struct session_audit *a, void *userdata);

/* cfg, pools (n of them), redis: borrowed, must outlive the manager. */
struct session_manager *session_manager_new(struct event_base *base, const struct cfg *cfg,
                                            struct pool **pools, size_t n_pools,
                                            struct store_redis *redis);
/* Frees every session object (records and containers stay for the next start). A running
 * execution's observer is answered first (on_done, error "SessionEnded"), so that a streaming
 * client gets its last event before the connection goes. */
struct session_manager *session_manager_free(struct session_manager *m);
void session_manager_set_notify(struct session_manager *m, session_notify_cb *cb, void *userdata);
/* Where the audit events go (none until set). */
void session_manager_set_audit(struct session_manager *m, session_audit_cb *cb, void *userdata);
/* Periodic work (cron): touch busy sessions, reap expired ones, load records after Redis came
 * (back) up. Bounded work per call. */
void session_manager_tick(struct session_manager *m);
/* Redis came up (again): (re)load this node's records when they have not been loaded yet. */
void session_manager_redis_up(struct session_manager *m);
/* This node claimed a lost node (cluster/registry.h): its hibernated sessions are in this node's
 * set now; they are read and registered (retried at the next tick when Redis fails). */
void session_manager_load_adopted(struct session_manager *m);
/* A container whose kernel serves a session (pool found_session): adopt it or release it. */
void session_manager_adopt(struct session_manager *m, struct pool_slot *slot,
                           const struct kernel_msg *hello);
/* A full list of this node's containers asked for at listed_at_ms: records whose container is
 * not in it are ended (their state is gone). */
void session_manager_reconcile(struct session_manager *m, const struct docker_container_list *list,
                               uint64_t listed_at_ms);
/* True when a session whose kernel connection broke waits for a container list (the caller
 * then lists soon and calls session_manager_reconcile()). */
bool session_manager_want_list(const struct session_manager *m);
/* True once this node's records are loaded from Redis (containers are judged from then on);
 * tests/unit/test-session.c waits for it as the server's cron does for its lists. */
bool session_manager_loaded(const struct session_manager *m);
/* The engine reported an OOM kill in container_id (its "oom" event, before "die"): the session
 * that holds it ends with its running execution answered "oom" when the container dies. */
void session_manager_container_oom(struct session_manager *m, const char *container_id);
/* The engine says a container died (died: its process exited) or went (removed): the session
 * it served, if any, ends. */
void session_manager_container_gone(struct session_manager *m, const char *container_id, bool died);
/* Ends the session served by container_id (its limits drifted from the profile), saying why, and
 * writes its id to ret_session. False when no session has that container. */
bool session_manager_quarantine(struct session_manager *m, const char *container_id,
                                const char *why, char *ret_session, size_t n);
/* Drain: true while any execution runs; session_manager_cut() interrupts them all. */
bool session_manager_busy(const struct session_manager *m);
void session_manager_cut(struct session_manager *m);
void session_manager_get_stats(const struct session_manager *m, struct session_manager_stats *ret);
/* The stats of pools[i]; i < n_pools. Borrowed; valid until the manager is freed. */
const struct session_profile_stats *session_manager_profile_stats(const struct session_manager *m,
                                                                  size_t i);
/* For each of tenants[n]: its sessions (those being created included, as max_sessions counts
 * them) and its running executions, into ret_sessions[n] and ret_running[n]. One pass. */
void session_manager_tenant_counts(const struct session_manager *m, const char *const *tenants,
                                   size_t n, unsigned *ret_sessions, unsigned *ret_running);

/* ---- sessions -------------------------------------------------------------------------------- */

struct session_create_req {
    const char *tenant;
    const char *profile;       /* NULL: the first profile */
    unsigned idle_timeout_s;   /* 0: the profile's */
    const char *metadata_json; /* a JSON object's text (validated by the caller), or NULL */
    unsigned lifetime_s;       /* it ends this long after its creation; 0: max_lifetime_s */
    unsigned pause_after_s;    /* frozen after this long idle (at most idle_timeout_s); 0: the
                                * profile's pause_after_s */
    const char *ext;           /* an edge's own data kept with the record (at most
                                * STORE_EXT_MAX bytes), or NULL: session_ext() */
    const char *idle_action;   /* "end", "hibernate", or NULL: the profile's */
    /* The session's narrowing of its profile's egress list (rules.h: struct egress_narrowing), a
     * JSON object's text, or NULL; checked by session_create() (-EINVAL: the profile has no
     * list, or the text is no narrowing). */
    const char *egress_json;
};

/* r == 0 with the new session, or: -ENOENT unknown profile, -EINVAL idle timeout or lifetime
 * above the profile's (or ext too long), -EUSERS profile at max, -ETIMEDOUT no container in time,
 * -ENOTCONN Redis down. */
typedef void session_create_cb(int r, struct session *s, const struct err *e, void *userdata);
int session_create(struct session_manager *m, const struct session_create_req *req,
                   session_create_cb *cb, void *userdata, struct err *reterr);

/* The tenant's session with this id, or NULL (also for another tenant's session); tenant NULL
 * finds any tenant's (the admin). */
struct session *session_find(struct session_manager *m, const char *tenant, const char *id);
/* Calls fn for every session of tenant. */
void session_foreach(struct session_manager *m, const char *tenant,
                     void (*fn)(struct session *s, void *userdata), void *userdata);
/* Records API activity (pushes the idle deadline; fire and forget). */
void session_touch(struct session *s);
/* Ends the session: its record is marked `ending` in Redis first (so the end survives a crash:
 * the next start finishes an ending record), then its container is released, and its record
 * is deleted once the engine confirmed the removal. cb(r) exactly once, when the mark is written (r
 * == 0) or failed (the session goes on); -ENOTCONN when Redis is down (nothing changed). */
typedef void session_end_cb(int r, const struct err *e, void *userdata);
int session_end(struct session *s, session_end_cb *cb, void *userdata, struct err *reterr);
/* Says who ends the session and why, for the audit log's "session.ended", before
 * session_end(): actor "admin", "daemon" or NULL (its tenant); why a short word ("deleted",
 * "abandoned", ...). Without it session_end() records the tenant and "deleted". */
void session_set_end_cause(struct session *s, const char *actor, const char *why);
/* Moves the session's end of life (expires_at) to wall-clock ms at (capped by its creation +
 * the profile's max_lifetime_s; a time already past ends it at the reaper's next look); written
 * to Redis before cb(0, expires_at). -ENOENT when it is no longer active; -ENOTCONN when Redis
 * is down (nothing changed, no callback). cb may run after the session ended. */
typedef void session_expiry_cb(int r, uint64_t expires_at, void *userdata);
int session_set_expiry(struct session *s, uint64_t at, session_expiry_cb *cb, void *userdata,
                       struct err *reterr);
uint64_t session_expires_at(const struct session *s);
uint64_t session_created_at(const struct session *s);
/* What the edge that created it keeps with the record ("" when nothing). */
const char *session_ext(const struct session *s);
/* Replaces it (at most STORE_EXT_MAX bytes): in memory at once, in Redis before cb(0). -EINVAL
 * too long, -ENOENT ending, -ENOTCONN Redis down (nothing changed, no callback). cb may run
 * after the session ended. */
typedef void session_ext_cb(int r, void *userdata);
int session_set_ext(struct session *s, const char *ext, session_ext_cb *cb, void *userdata,
                    struct err *reterr);
/* Replaces its own narrowing of its profile's egress list (text: an "egress" object as at its
 * creation, "" for none: the profile's list), in Redis first, then in memory, its gate bound
 * again (its connections cut: they were let through by the list it had). -EINVAL no egress list
 * or a narrowing that does not parse, -ENOENT ending, -ENOTCONN Redis down (nothing changed, no
 * callback). cb may run after the session ended. */
int session_set_egress(struct session *s, const char *text, session_ext_cb *cb, void *userdata,
                       struct err *reterr);
/* Whether its profile has an egress list (a way out to narrow). */
bool session_has_egress(const struct session *s);
/* ---- pause (the cgroup freezer; docs/hibernate.md) ------------------------------------------- */

/* A call that needs the session's container waits for it: r == 0 when it is live (the call goes
 * on: look the session up again), or -ENOENT (it ended meanwhile), -ENOTCONN (the engine did not
 * thaw it; it stays paused). */
typedef void session_live_cb(int r, const struct err *e, void *userdata);
struct session_waiter;
/* Makes sure the session's container runs: 0 when it does (no callback; go on at once), 1 when
 * it is paused or being paused or resumed (resumed now; cb follows, *ret is the wait), or -ENOENT
 * (ending), -EBUSY (too many calls wait). A resume is activity (the call touches anyway). */
int session_ensure_live(struct session *s, session_live_cb *cb, void *userdata,
                        struct session_waiter **ret, struct err *reterr);
/* The waiting call went away: no callback (the resume goes on). */
void session_waiter_cancel(struct session_waiter *w);
/* Freezes the session's container now (an explicit pause: the caller writes its audit line). 0 when
 * it is paused already (no callback), 1 when cb(0) follows once frozen (or cb(r < 0) when the
 * engine refused: it stays ready), or -EBUSY (an execution, restart or file transfer runs),
 * -ENOTCONN (its kernel connection is broken), -ENOENT (ending). */
int session_pause(struct session *s, session_live_cb *cb, void *userdata,
                  struct session_waiter **ret, struct err *reterr);
/* File transfers and other uses of the container that are not executions: no pause while one
 * runs. session_unuse() takes the id (the session may be gone by then). */
void session_use(struct session *s);
void session_unuse(struct session_manager *m, const char *id);
/* "paused" (pausing and resuming included) for the API's state. */
bool session_is_paused(const struct session *s);

/* ---- hibernation (a snapshot, then no container; docs/hibernate.md) ------------------------- */

/* The snapshot service, as the session module uses it (the server wires snapshot.h in): take a
 * hibernation snapshot of s (cb(0, {"id", "size", ...})), restore one into s (cb(0, the restored
 * object)), forget a session's jobs (no callback after it). Contracts as snapshots_hibernate(),
 * snapshots_wake() and snapshots_forget(). */
typedef void session_snap_cb(int r, json_t *result, const struct err *e, void *userdata);
struct session_snapshot_ops {
    int (*take)(void *ops, struct session *s, session_snap_cb *cb, void *userdata,
                struct err *reterr);
    int (*restore)(void *ops, struct session *s, const char *snapshot, session_snap_cb *cb,
                   void *userdata, struct err *reterr);
    void (*forget)(void *ops, const char *session_id);
};
/* NULL: no hibernation (sessions hibernated in Redis still load, and wait for a store). ops and
 * userdata are borrowed; set NULL before the snapshot service goes. */
void session_manager_set_snapshots(struct session_manager *m,
                                   const struct session_snapshot_ops *ops, void *userdata);
/* Hibernates the session: its snapshot is taken, then its record names it and its container goes
 * (the session keeps its id and record). 0 when it is hibernated already (no callback), 1 when
 * cb(0) follows once it is (or cb(r < 0): it stays live; -ECANCELED when a call needed it
 * meanwhile), or -EBUSY (an execution, restart or file transfer runs, or it is paused: resume it
 * first), -EPERM (its profile never hibernates), -ENOSYS (no snapshot store), -ENOTCONN (its
 * kernel connection is broken, or Redis is down), -ENOENT (ending). actor: the audit line's. A
 * call that needs it later wakes it (session_ensure_live()). */
int session_hibernate(struct session *s, const char *actor, session_live_cb *cb, void *userdata,
                      struct session_waiter **ret, struct err *reterr);
/* The session is hibernated (its state: "hibernated"), or being hibernated or woken. */
bool session_is_hibernated(const struct session *s);

/* What a restore brought back into it ({"from", "variables", "skipped"}, referenced): shown by
 * the session from now on and by its next execution. */
void session_set_restored(struct session *s, json_t *restored);

/* The API view of the session: a new JSON object. */
json_t *session_to_json(const struct session *s);
/* The admin's view: session_to_json() with tenant, node, container, detached and execution. */
json_t *session_to_admin_json(const struct session *s);
const char *session_id(const struct session *s);
const char *session_tenant(const struct session *s);
const struct cfg_profile *session_profile(const struct session *s);
/* The id of the container serving the session, or NULL while it is being ended. */
const char *session_container(const struct session *s);
/* "uid:gid" of its sandbox's user code (what helpers exec'd in its container run as); NULL
 * without a container. */
const char *session_user(const struct session *s);

/* ---- executions ------------------------------------------------------------------------------ */

struct exec_req {
    const char *code; /* Python code, or NULL for a command */
    size_t code_len;
    json_t *argv; /* borrowed array of strings, for a command */
    unsigned timeout_s;
    /* The kernel request's other members (context, rich output, cwd, env), or NULL. */
    const struct kernel_exec_opts *opts;
    const char *actor; /* who asked, for the audit log ("admin"); NULL: the session's tenant */
    bool internal;     /* the daemon's own (a snapshot's save or restore): not in the history */
};

struct exec_observer {
    /* Output as it arrives (UTF-8, len bytes, may hold NUL). Optional. */
    void (*on_output)(struct execution *x, bool to_stderr, const char *text, size_t len,
                      void *userdata);
    /* A file the execution produced, complete in the workspace: the artifact entry of the API
     * (borrowed; a rich execution's also has "data", the bytes in base64, up to 512 KiB).
     * Optional. */
    void (*on_artifact)(struct execution *x, json_t *entry, void *userdata);
    /* The end, exactly once (unless detached first); the result is read with
     * execution_result_new() during the call. The execution is freed after it returns. */
    void (*on_done)(struct execution *x, void *userdata);
};

/* Starts an execution. collect: keep stdout/stderr for the result (not needed when they are
 * streamed). Errors: -EBUSY (one already runs), -EINVAL (timeout above the profile's),
 * -ENOTCONN (Redis down), -EPIPE (the kernel connection is gone). */
int session_execute(struct session *s, const struct exec_req *req, const struct exec_observer *obs,
                    void *userdata, bool collect, struct execution **ret, struct err *reterr);
/* Interrupts the running execution: KeyboardInterrupt now (its namespace survives), a kernel
 * restart after the profile's interrupt_grace_ms if the code goes on; a command is killed with
 * its process group. *ret_exec_id names it (valid until it ends). -ESRCH when nothing runs;
 * interrupting an execution already interrupted changes nothing. */
int session_interrupt(struct session *s, const char **ret_exec_id, struct err *reterr);

/* Restarts the kernel on purpose: the namespace is lost and kernel_epoch increases. A running
 * execution ends as interrupted with state_preserved false. cb(r, epoch) once the kernel confirms
 * (r == 0, epoch is the new one) or fails: -ETIMEDOUT, -ENOENT (the session ended). Requests
 * made while one restart is in flight join it. -EBUSY when too many wait. */
struct session_restart;
typedef void session_restart_cb(int r, uint64_t epoch, const struct err *e, void *userdata);
int session_restart(struct session *s, session_restart_cb *cb, void *userdata,
                    struct session_restart **ret, struct err *reterr);
/* The waiting client went away: no callback. */
void session_restart_cancel(struct session_restart *w);

/* The observer goes away (client disconnected): no more callbacks; the execution runs on. */
void execution_detach(struct execution *x);
/* Backpressure from a slow stream reader: stop or resume reading the kernel's output. */
void execution_pause(struct execution *x, bool pause);
const char *execution_id(const struct execution *x);

/* An execution's result, typed: what each protocol renders in its own shape (REST's Execution
 * object, E2B's stream lines, MCP's tool result) and the snapshot job reads. No protocol learns a
 * result from another's JSON. Strings are UTF-8 (the kernel's, checked by the decoder), value
 * and error strings NUL-terminated; the jansson members are containers of checked shape. */
struct execution_error {
    char *name, *value;
    json_t *traceback;    /* array of strings (lines, each ending in a newline or not) */
    int64_t line, column; /* where a SyntaxError points; -1: not said */
};
struct execution_result {
    uint64_t epoch; /* the session's kernel_epoch after it */
    char *value;    /* the last expression's repr (value_len bytes), or NULL */
    size_t value_len;
    json_t *mime; /* object: MIME type -> string, the value's other representations; or NULL */
    uint64_t duration_ms;
    int64_t cpu_ms, peak_memory_bytes; /* -1: not reported (has_resources) */
    json_t *artifacts;                 /* array of artifact entries (docs/api.md) */
    json_t *restored; /* the first execution after a restore: what was restored; or NULL */
    json_t
        *snapshot; /* a save's or restore's manifest (unchecked: the sandbox wrote it), or NULL */
    struct buf out, err; /* collected stdout and stderr (empty when they were streamed) */
    /* What was cut of each stream ([0] stdout, [1] stderr): the kernel's counts, with what the
     * daemon dropped on top in dropped; known only once the kernel's done came. */
    struct kernel_output_count truncated[2];
    struct execution_error error; /* has_error */
    enum session_exec_status status;
    int exit_code;        /* a command's; -1: none (code, or a command that never ran) */
    bool is_cmd;          /* a command (exit_code), not code */
    bool state_preserved; /* the namespace survived */
    bool has_error;
    bool truncation_known;
    bool has_resources;
    char id[33];
};
/* x's result, during on_done only (owned: execution_result_free()). */
struct execution_result *execution_result_new(const struct execution *x);
void execution_result_free(struct execution_result *r);

/* The session's execution history, newest first, at most STORE_HISTORY_MAX (kept in Redis with
 * the record, deleted with it): cb(0, array of {"id", "started_at", "duration_ms", "status",
 * "code_sha256", "code_head", "code_bytes", "epoch"} borrowed for the call) or cb(r < 0, NULL)
 * when Redis failed (-ETIMEDOUT, -ENOTCONN, -ECANCELED). cb runs exactly once, never from inside
 * this call, and may run after the session ended. Returns -ENOTCONN (Redis down; no callback). */
typedef void session_history_cb(int r, json_t *executions, void *userdata);
int session_history(struct session *s, session_history_cb *cb, void *userdata, struct err *reterr);
