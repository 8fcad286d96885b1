/* Sessions and executions; see session.h for the contract.
 *
 * Objects and who frees them:
 *  - struct session: owned by the manager (map + list); freed only by session_destroy(), after
 *    its record is gone from Redis (end, reap, lost) or at manager shutdown.
 *  - struct execution: owned by its session (s->exec); freed right after on_done returns.
 *  - struct sop: one per Redis operation in flight, on the manager's list. Its callback finds
 *    the session again by id (the session may have ended meanwhile); at manager shutdown every
 *    sop is detached (m = NULL) and then only frees itself when Redis answers or is freed.
 *  - pool slots: a session holds one BOUND slot and borrows its kernel connection; ending the
 *    session releases the slot (the pool removes the container).
 *
 * Execution phases: RUNNING -> (deadline) INTERRUPTED: KeyboardInterrupt sent; the namespace
 * survives if the code stops -> (grace, 2 s) RESTARTING: the kernel kills its worker; the
 * namespace is lost -> (engine.timeout_ms) the sandbox is declared lost and the session ends.
 * The kernel's "done" ends every phase; its status and the phase give the API status and
 * whether state was preserved.
 *
 * Connection breaks: when the attach stream to a kernel ends (its container stopped, or the
 * engine restarted: with live-restore the container outlives it) the session is "detached": a
 * running execution is answered (its output is incomplete), new ones get ENOTCONN, and the
 * next container list decides: container running -> attach again, and the kernel's hello must
 * claim this session (its generation and busy execution are handled as at re-adoption);
 * container gone or stopped, or RECONNECT_TRIES attempts without a hello -> the session ends.
 *
 * Epochs: s->rec.gen is the kernel worker generation the current epoch belongs to, and the
 * epoch moves exactly when a generation the kernel reports differs from it: in "restarted" (a
 * new worker) or in a hello (after a reconnection or a re-adoption). Nothing else moves it,
 * whatever it says (proto.c reads a generation from those two messages only): the kernel sends
 * "restarted" before the "done" of an execution the restart ended, and an execution preserved
 * its state exactly when the epoch did not move while it ran (x->epoch0). */
#include "session.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>
#include <jansson.h>

#include "audit/audit.h"
#include "kernel/kernel.h"
#include "pool/pool.h"
#include "store/redis.h"
#include "store/sessions.h"
#include "util/buf.h"
#include "util/hashmap.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/time.h"
#include "util/utf8.h"

#define MAX_ARTIFACTS       64u /* per execution; the kernel saves at most 33 */
#define MAX_RESTART_WAITERS 16u
#define RESTART_REASON      "restart requested by the client"
#define REAP_BATCH          64u
#define TOUCH_MAX_MS        5000u
#define TOUCH_MIN_MS        250u
#define COLD_WAIT_FACTOR    4u /* a cold create may take this many engine deadlines */
#define RECONNECT_TRIES     3u
#define SETTLE_MS           1000u /* see struct session's settle_timer */
#define OOM_DEATH_MS        2000u /* see struct session's oom_ms */
#define OOM_WAIT_MS         2000u /* see struct session's oom_wait_timer */
#define CODE_HEAD_CHARS     200u  /* characters of code kept in the execution history */

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

struct execution {
    struct session *s;
    char id[33];
    char code_sha256[65]; /* hex, of the code or the command line */
    char actor[80];       /* who asked for it (audit log) */
    bool is_cmd;
    bool collect;
    struct exec_observer obs;
    void *userdata;
    bool detached;
    bool orphan; /* left running by a previous daemon or a broken connection */
    struct buf out, err;
    uint64_t out_extra, err_extra; /* bytes dropped here, beyond what the kernel reported */
    uint64_t started_us;
    struct event *deadline, *grace;
    enum exec_phase phase;
    enum exec_cause cause;
    uint64_t restart_ms; /* when PH_RESTARTING began (monotonic) */
    unsigned timeout_s;
    json_t *artifacts; /* array, filled as the kernel announces files */
    /* result, valid in on_done */
    const char *status;
    json_t *result, *error, *truncated, *resources;
    int exit_code; /* -1: none */
    uint64_t duration_ms;
    uint64_t epoch0; /* the session's epoch when it started */
    /* what ran, for the history and the audit log (never the code itself in the audit) */
    uint64_t started_wall_ms;
    char *code_head; /* the first CODE_HEAD_CHARS characters */
    size_t code_bytes;
    bool state_preserved;
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
    /* Restarts asked for and not yet confirmed by the kernel; one restart request is in flight
     * while this is not empty (later requests join it). */
    TAILQ_HEAD(, session_restart) restarts;
    struct event *restart_timer;
    /* A runtime other than runc (gVisor): memory exhaustion kills the whole sandbox, kernel
     * included. When its connection breaks during an execution, the answer waits up to
     * SETTLE_MS for the engine's oom/die events, so that it can say what happened. */
    struct event *settle_timer;
    /* When the engine last reported an OOM kill in its container (monotonic ms, 0: never).
     * Under runc that is usually the worker alone (the session goes on); the container dying
     * within OOM_DEATH_MS of it was killed by it. */
    uint64_t oom_ms;
    /* Under such a runtime the engine's "oom" may also come after the container's "die": a
     * session whose container died during an execution waits up to OOM_WAIT_MS for it before
     * it ends, so that the answer can say "oom" (0: not waiting, 1: waiting, 2: waited). */
    struct event *oom_wait_timer;
    int oom_wait;
    bool oom_wait_die; /* the event waited on was "die" (else a removal) */
    enum session_state state;
    uint64_t last_touch_ms; /* monotonic */
    bool registered;        /* in the map and list (its record was written) */
    bool lost;              /* its kernel went away before it was registered */
    bool detached;          /* its kernel connection broke; see "Connection breaks" */
    bool reconnecting;      /* attached again, waiting for the hello */
    unsigned reconnect_failures;
    uint64_t detached_ms;       /* monotonic */
    uint64_t create_started_us; /* monotonic: when its create request came */
    bool cold;                  /* its container was made for it */
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
    SOP_LOST,
    SOP_CLAIM,
    SOP_LOAD,
    SOP_HISTORY,
};

/* A Redis operation in flight. */
struct sop {
    TAILQ_ENTRY(sop) link;
    struct session_manager *m; /* NULL once the manager is gone */
    enum sop_kind kind;
    char id[STORE_ID_MAX + 1];
    /* SOP_CREATE */
    struct session *pending; /* not in the map yet */
    session_create_cb *create_cb;
    /* SOP_END */
    session_end_cb *end_cb;
    void *userdata;
};

/* A create waiting for a container made on demand. */
struct cold {
    TAILQ_ENTRY(cold) link;
    struct session_manager *m;
    struct pool_waiter *waiter;
    struct session_create_req req;
    char tenant[65], profile[49];
    char *metadata;
    session_create_cb *cb;
    void *userdata;
    uint64_t started_us;
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
    struct hashmap *by_id;
    TAILQ_HEAD(, session) sessions;
    TAILQ_HEAD(, sop) sops;
    TAILQ_HEAD(, cold) colds;
    TAILQ_HEAD(, held) held;
    /* Records loaded at start-up and not yet matched with a container. */
    struct store_session_rec *unmatched;
    size_t n_unmatched;
    bool loaded, loading, claiming;
    bool want_list; /* a detached session waits for a container list */
    bool freeing;   /* session_manager_free(): nothing is recorded any more */
    struct session_manager_stats stats;
    struct session_profile_stats *pstats; /* n_pools */
    struct hashmap *takes;                /* "tenant/profile" -> struct take_rate */
    struct hashmap *askers;               /* profile -> struct askers */
    session_notify_cb *notify;
    void *notify_userdata;
};

static void
notify(struct session_manager *m, const char *event, const struct store_session_rec *rec,
       const char *detail)
{
    if (m->notify != NULL) {
        m->notify(event, rec->id, rec->tenant, detail, m->notify_userdata);
    }
}

void
session_manager_set_notify(struct session_manager *m, session_notify_cb *cb, void *userdata)
{
    m->notify = cb;
    m->notify_userdata = userdata;
}

static const char *const exec_status_names[SESSION_EXEC__COUNT] = {
    [SESSION_EXEC_OK] = "ok",           [SESSION_EXEC_ERROR] = "error",
    [SESSION_EXEC_TIMEOUT] = "timeout", [SESSION_EXEC_INTERRUPTED] = "interrupted",
    [SESSION_EXEC_OOM] = "oom",
};

const char *
session_exec_status_to_string(enum session_exec_status st)
{
    return st >= 0 && st < SESSION_EXEC__COUNT ? exec_status_names[st] : NULL;
}

static enum session_exec_status
exec_status_from_string(const char *name)
{
    for (int i = 0; i < SESSION_EXEC__COUNT; i++) {
        if (strcmp(name, exec_status_names[i]) == 0) {
            return (enum session_exec_status)i;
        }
    }
    return SESSION_EXEC_ERROR; /* our own aborts (SessionEnded, SandboxLost) are errors */
}

/* "tenant:<id>", the audit log's actor for what a tenant asked for. */
static const char *
tenant_actor(const char *tenant, char *out, size_t n)
{
    (void)snprintf(out, n, "tenant:%s", tenant);
    return out;
}

static const char *const state_names[SESSION__COUNT] = {
    [SESSION_READY] = "ready",
    [SESSION_BUSY] = "busy",
    [SESSION_ENDING] = "ending",
};

const char *
session_state_to_string(enum session_state s)
{
    return s >= 0 && s < SESSION__COUNT ? state_names[s] : NULL;
}

static void execution_finish(struct execution *x);
static void execution_free(struct execution *x);
static void execution_orphan(struct session *s, const char *id);
static unsigned tenant_running(const struct session_manager *m, const char *tenant);
static void restarts_answer(struct session *s, int r, const char *why);
static void on_restart_timeout(evutil_socket_t fd, short what, void *arg);
static void on_settle_timeout(evutil_socket_t fd, short what, void *arg);
static void on_oom_wait_timeout(evutil_socket_t fd, short what, void *arg);
static void delete_record(struct session_manager *m, const char *id);
static json_t *time_json(uint64_t wall_ms);
static size_t profile_index(const struct session_manager *m, const char *profile);
static const struct kernel_handlers session_kernel_handlers;

/* ---- Redis operations ------------------------------------------------------------------------ */

static struct sop *
sop_new(struct session_manager *m, enum sop_kind kind, const char *id)
{
    struct sop *op = xcalloc(1, sizeof(*op));

    op->m = m;
    op->kind = kind;
    if (id != NULL) {
        (void)snprintf(op->id, sizeof(op->id), "%s", id);
    }
    TAILQ_INSERT_TAIL(&m->sops, op, link);
    return op;
}

/* Unlinks op from its manager (if any) and frees it. */
static void
sop_free(struct sop *op)
{
    if (op->m != NULL) {
        TAILQ_REMOVE(&op->m->sops, op, link);
    }
    free(op);
}

/* ---- session objects ------------------------------------------------------------------------- */

static const struct cfg_profile *
profile_find(const struct session_manager *m, const char *name)
{
    if (name == NULL) {
        return m->n_pools > 0 ? pool_profile(m->pools[0]) : NULL;
    }
    return cfg_profile_find(m->cfg, name);
}

/* The index of the profile's pool (and stats), or n_pools. */
static size_t
profile_index(const struct session_manager *m, const char *profile)
{
    size_t i = 0;

    while (i < m->n_pools && strcmp(pool_name(m->pools[i]), profile) != 0) {
        i++;
    }
    return i;
}

static struct pool *
pool_for(const struct session_manager *m, const char *profile)
{
    for (size_t i = 0; i < m->n_pools; i++) {
        if (strcmp(pool_name(m->pools[i]), profile) == 0) {
            return m->pools[i];
        }
    }
    return NULL;
}

static struct session *
session_alloc(struct session_manager *m, struct pool_slot *slot, const struct cfg_profile *p)
{
    struct session *s = xcalloc(1, sizeof(*s));

    s->m = m;
    s->profile = p;
    s->slot = slot;
    s->kernel = pool_slot_kernel(slot);
    s->state = SESSION_READY;
    s->last_touch_ms = time_now_ms();
    TAILQ_INIT(&s->restarts);
    s->restart_timer = OOM_CHECK(evtimer_new(m->base, on_restart_timeout, s));
    s->settle_timer = OOM_CHECK(evtimer_new(m->base, on_settle_timeout, s));
    s->oom_wait_timer = OOM_CHECK(evtimer_new(m->base, on_oom_wait_timeout, s));
    kernel_set_handlers(s->kernel, &session_kernel_handlers, s);
    return s;
}

static void
session_register(struct session *s)
{
    hashmap_put(s->m->by_id, s->rec.id, s);
    TAILQ_INSERT_TAIL(&s->m->sessions, s, link);
    s->registered = true;
}

/* Ends a running execution with an error of our own: its observer is answered (once). */
static bool
died_of_oom(const struct session *s)
{
    return s->oom_ms != 0 && time_now_ms() - s->oom_ms <= OOM_DEATH_MS;
}

/* Answers x with status (a static string) and an error name and value. */
static void
execution_end(struct execution *x, const char *status, const char *name, const char *why)
{
    x->status = status;
    x->state_preserved = false;
    json_decref(x->error);
    x->error = OOM_CHECK(json_pack("{s:s, s:s, s:[]}", "name", name, "value", why, "traceback"));
    execution_finish(x);
}

static void
execution_abort(struct execution *x, const char *name, const char *why)
{
    execution_end(x, "error", name, why);
}

static void
execution_disconnected(struct execution *x)
{
    execution_abort(x, "SandboxDisconnected",
                    "the connection to the sandbox broke while this ran (its container "
                    "stopped, or the engine restarted); the output is incomplete. The session "
                    "goes on if its container still runs, and ends otherwise");
}

/* The engine said nothing about the container within SETTLE_MS of the break. */
static void
on_settle_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;

    /* Not while its container's death waits for an "oom": that ends the session and answers. */
    if (s->exec != NULL && s->detached && s->oom_wait != 1) {
        execution_disconnected(s->exec);
    }
}

/* Frees the session object; the caller has dealt with its record and container. A running
 * execution is answered first: no request is left without a reply. */
static void
session_destroy(struct session *s)
{
    if (s->exec != NULL) {
        execution_abort(s->exec, "SessionEnded", "the session ended while this was running");
    }
    restarts_answer(s, -ENOENT, "the session ended before its kernel restarted");
    event_free(s->restart_timer);
    event_free(s->settle_timer);
    event_free(s->oom_wait_timer);
    if (s->registered) {
        (void)hashmap_remove(s->m->by_id, s->rec.id);
        TAILQ_REMOVE(&s->m->sessions, s, link);
    }
    free(s);
}

/* Releases the container and forgets the session (its record is already gone or going). */
static void
session_drop(struct session *s)
{
    struct pool_slot *slot = s->slot;

    audit_log(
        "session.ended", s->end_actor[0] ? s->end_actor : "daemon",
        OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s}", "tenant", s->rec.tenant, "session", s->rec.id,
                            "why", s->end_why[0] ? s->end_why : "ended", "detail", s->end_detail)));
    s->slot = NULL;
    s->kernel = NULL;
    session_destroy(s);
    if (slot != NULL) {
        pool_slot_release(slot);
    }
}

/* ---- epoch ----------------------------------------------------------------------------------- */

static void
on_epoch_saved(int r, void *userdata)
{
    sop_free(userdata); /* best effort: the next change or a re-adoption writes it again */
}

static void
epoch_bump(struct session *s, int64_t new_gen, const char *why)
{
    struct sop *op;
    char detail[160];

    s->rec.epoch++;
    (void)snprintf(detail, sizeof(detail), "kernel_epoch is now %llu: %s",
                   (unsigned long long)s->rec.epoch, why);
    notify(s->m, "epoch", &s->rec, detail);
    s->rec.gen = new_gen;
    op = sop_new(s->m, SOP_EPOCH, s->rec.id);
    if (store_sessions_set_epoch(s->m->store, s->rec.id, s->rec.epoch, s->rec.gen, on_epoch_saved,
                                 op) < 0) {
        sop_free(op);
    }
}

/* ---- touch ----------------------------------------------------------------------------------- */

static void
on_touched(int r, void *userdata)
{
    struct sop *op = userdata;

    /* -ENOENT: the reaper claimed it in the meantime; its ending is on the way. */
    sop_free(op);
}

void
session_touch(struct session *s)
{
    struct sop *op;
    uint64_t now = time_wall_ms(), mono = time_now_ms();

    s->rec.last_active_at = now;
    /* A deadline is pushed at most every TOUCH_MIN_MS (or a tenth of the idle timeout, when
     * shorter): a busy session then costs Redis a few scripts a second, not one per call, and
     * its deadline is never more than that early. */
    if (mono - s->last_touch_ms < MIN((uint64_t)TOUCH_MIN_MS, s->rec.idle_timeout_s * 100ull)) {
        return;
    }
    s->last_touch_ms = mono;
    op = sop_new(s->m, SOP_TOUCH, s->rec.id);
    if (store_sessions_touch(s->m->store, s->rec.id, now, on_touched, op) < 0) {
        sop_free(op);
    }
}

/* ---- ending ---------------------------------------------------------------------------------- */

static void
on_end_deleted(int r, void *userdata)
{
    struct sop *op = userdata;
    struct session_manager *m = op->m;
    struct session *s = m != NULL ? hashmap_get(m->by_id, op->id) : NULL;
    struct err e = {0};

    if (m == NULL) {
        sop_free(op);
        return;
    }
    if (r < 0) {
        (void)err_set(&e, r, "could not delete the session record: %s", strerror(-r));
        if (s != NULL && s->state == SESSION_ENDING) {
            s->state = s->exec != NULL ? SESSION_BUSY : SESSION_READY;
        }
    } else if (s != NULL) {
        m->stats.ended_total++;
        session_drop(s);
    }
    if (op->end_cb != NULL) {
        op->end_cb(r, r < 0 ? &e : NULL, op->userdata);
    }
    sop_free(op);
}

int
session_end(struct session *s, session_end_cb *cb, void *userdata, struct err *reterr)
{
    struct sop *op;
    int r;

    if (s->state == SESSION_ENDING) {
        return err_set(reterr, -EALREADY, "the session is already ending");
    }
    if (s->end_why[0] == '\0') {
        session_set_end_cause(s, NULL, "deleted");
    }
    op = sop_new(s->m, SOP_END, s->rec.id);
    op->end_cb = cb;
    op->userdata = userdata;
    r = store_sessions_delete(s->m->store, s->rec.id, on_end_deleted, op);
    if (r < 0) {
        sop_free(op);
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    s->state = SESSION_ENDING;
    if (s->exec != NULL) {
        (void)kernel_interrupt(s->kernel, s->exec->id);
    }
    return 0;
}

void
session_set_end_cause(struct session *s, const char *actor, const char *why)
{
    if (actor == NULL) {
        (void)tenant_actor(s->rec.tenant, s->end_actor, sizeof(s->end_actor));
    } else {
        (void)snprintf(s->end_actor, sizeof(s->end_actor), "%s", actor);
    }
    (void)snprintf(s->end_why, sizeof(s->end_why), "%s", why);
}

/* The container or its kernel connection is gone: the session's state is lost, end it. */
static void
session_lost(struct session *s, const char *why)
{
    struct sop *op;

    if (!s->registered) {
        s->lost = true; /* a create in flight: on_created fails it */
        return;
    }
    if (s->state != SESSION_ENDING) {
        session_set_end_cause(s, "daemon", "lost");
        (void)snprintf(s->end_detail, sizeof(s->end_detail), "%s", why);
    }
    notify(s->m, "ended", &s->rec, why);
    (void)evtimer_del(s->settle_timer);
    (void)evtimer_del(s->oom_wait_timer);
    if (s->exec != NULL) {
        execution_end(s->exec, died_of_oom(s) ? "oom" : "error", "SandboxLost", why);
    }
    if (s->state == SESSION_ENDING) {
        return; /* a delete is already on its way; it drops the session */
    }
    s->state = SESSION_ENDING;
    op = sop_new(s->m, SOP_END, s->rec.id);
    if (store_sessions_delete(s->m->store, s->rec.id, on_end_deleted, op) < 0) {
        /* Redis is down: the record stays; at the next start it has no container and ends. */
        sop_free(op);
        session_drop(s);
    }
}

/* ---- kernel events --------------------------------------------------------------------------- */

static void
on_kernel_output(struct kernel *k, const char *exec_id, bool to_stderr, const char *text,
                 size_t len, void *userdata)
{
    struct session *s = userdata;
    struct execution *x = s->exec;

    if (x == NULL || strcmp(exec_id, x->id) != 0) {
        return; /* late output of an execution already reported */
    }
    s->m->stats.output_bytes[to_stderr ? 1 : 0] += len;
    if (x->collect) {
        struct buf *b = to_stderr ? &x->err : &x->out;
        uint64_t *extra = to_stderr ? &x->err_extra : &x->out_extra;

        if (buf_append(b, text, len) < 0) {
            *extra += len; /* the kernel sent more than its own cap allows */
        }
    }
    if (!x->detached && x->obs.on_output != NULL) {
        x->obs.on_output(x, to_stderr, text, len, x->userdata);
    }
}

static json_t *
truncation_json(json_t *t, const struct execution *x)
{
    json_t *out = OOM_CHECK(json_object());
    bool any = false;
    static const char *const keys[2] = {"o", "e"};
    static const char *const names[2] = {"stdout", "stderr"};

    for (int i = 0; i < 2; i++) {
        json_t *pair = json_object_get(t, keys[i]);
        json_int_t total = json_integer_value(json_array_get(pair, 0));
        json_int_t dropped = json_integer_value(json_array_get(pair, 1));
        uint64_t extra = i == 0 ? x->out_extra : x->err_extra;

        if (total < 0 || dropped < 0) {
            total = dropped = 0;
        }
        dropped += (json_int_t)extra;
        if (dropped > 0) {
            any = true;
        }
        (void)json_object_set_new(
            out, names[i],
            OOM_CHECK(json_pack("{s:I, s:I}", "bytes_total", total, "bytes_dropped", dropped)));
    }
    if (!any) {
        json_decref(out);
        return json_null();
    }
    return out;
}

/* The kernel's resource record, checked member by member (it comes from inside the sandbox). */
static json_t *
resources_json(json_t *r)
{
    static const char *const keys[] = {"cpu_ms", "peak_memory_bytes"};
    json_t *out;

    if (!json_is_object(r)) {
        return NULL;
    }
    out = OOM_CHECK(json_object());
    for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
        json_t *v = json_object_get(r, keys[i]);

        (void)json_object_set_new(out, keys[i],
                                  json_is_integer(v) && json_integer_value(v) >= 0
                                      ? json_integer(json_integer_value(v))
                                      : json_null());
    }
    return out;
}

/* Maps the kernel's "done" and our phase to the API status. */
static void
classify(struct execution *x, const struct kernel_msg *m)
{
    struct session *s = x->s;
    const char *st = m->status;
    bool died = strcmp(st, "died") == 0;
    bool oom_killed = json_is_true(json_object_get(m->obj, "oom"));
    /* The epoch moved while it ran (the kernel's "restarted" came first), or the kernel says
     * its interpreter died: either way the namespace is not the one the execution began in. */
    bool preserved = !died && s->rec.epoch == x->epoch0;

    x->state_preserved = preserved;
    if (x->phase != PH_RUNNING && (died || strcmp(st, "interrupted") == 0)) {
        x->status = x->cause == CAUSE_TIMEOUT ? "timeout" : "interrupted";
        x->state_preserved = x->phase != PH_RESTARTING && preserved;
    } else if (died && oom_killed) {
        x->status = "oom";
    } else if (died) {
        const char *why = json_string_value(json_object_get(m->obj, "reason"));

        x->status = "error";
        json_decref(x->error);
        x->error = OOM_CHECK(json_pack("{s:s, s:s, s:[]}", "name", "KernelDied", "value",
                                       why ? why : "the interpreter exited", "traceback"));
    } else if (strcmp(st, "ok") == 0) {
        x->status = "ok";
    } else if (strcmp(st, "interrupted") == 0) {
        x->status = "interrupted";
    } else {
        x->status = "error";
    }
}

static void
on_kernel_done(struct kernel *k, const struct kernel_msg *m, void *userdata)
{
    struct session *s = userdata;
    struct execution *x = s->exec;
    json_t *v;

    if (x == NULL || strcmp(m->id, x->id) != 0) {
        return;
    }
    if (s->state == SESSION_ENDING) {
        /* Interrupted because the session is ending: say so, whatever the kernel saw. */
        execution_abort(x, "SessionEnded", "the session ended while this was running");
        return;
    }
    classify(x, m);
    v = json_object_get(m->obj, "result");
    if (json_is_string(v)) {
        x->result = json_incref(v);
    }
    v = json_object_get(m->obj, "error");
    if (json_is_object(v) && x->error == NULL) {
        x->error = json_incref(v);
    }
    v = json_object_get(m->obj, "exit_code");
    if (json_is_integer(v)) {
        x->exit_code = (int)json_integer_value(v);
    }
    x->truncated = truncation_json(json_object_get(m->obj, "truncated"), x);
    x->resources = resources_json(json_object_get(m->obj, "resources"));
    if (strcmp(m->status, "rejected") == 0) {
        json_decref(x->error);
        x->error = OOM_CHECK(json_pack("{s:s, s:s, s:[]}", "name", "Rejected", "value",
                                       json_string_value(json_object_get(m->obj, "reason"))
                                           ?: "the kernel refused the request",
                                       "traceback"));
    }
    execution_finish(x);
    session_touch(s);
}

static void
on_kernel_restarted(struct kernel *k, const struct kernel_msg *m, void *userdata)
{
    struct session *s = userdata;

    if (m->gen != s->rec.gen) {
        epoch_bump(s, m->gen, m->text ? m->text : "the interpreter restarted");
    }
    if (m->text != NULL && strcmp(m->text, RESTART_REASON) == 0) {
        restarts_answer(s, 0, NULL);
    }
}

static void
on_kernel_artifact(struct kernel *k, const struct kernel_msg *m, void *userdata)
{
    struct session *s = userdata;
    struct execution *x = s->exec;
    json_t *entry;

    if (x == NULL || strcmp(m->id, x->id) != 0 || json_array_size(x->artifacts) >= MAX_ARTIFACTS) {
        return;
    }
    entry = OOM_CHECK(json_pack("{s:s, s:s, s:I, s:s}", "path", m->path, "mime", m->mime, "size",
                                (json_int_t)m->size, "sha256", m->sha256));
    (void)json_array_append(x->artifacts, entry);
    if (!x->detached && x->obs.on_artifact != NULL) {
        x->obs.on_artifact(x, entry, x->userdata);
    }
    json_decref(entry);
}

static void
on_kernel_closed(struct kernel *k, int r, const char *why, void *userdata)
{
    struct session *s = userdata;
    char msg[256];

    if (s->reconnecting) {
        s->reconnecting = false;
        if (++s->reconnect_failures >= RECONNECT_TRIES) {
            (void)snprintf(msg, sizeof(msg),
                           "the sandbox was lost: its container runs but its kernel did not "
                           "answer %u reconnections: %s",
                           RECONNECT_TRIES, why);
            session_lost(s, msg);
            return;
        }
        s->m->want_list = true;
        return;
    }
    if (!s->registered || s->state == SESSION_ENDING) {
        (void)snprintf(msg, sizeof(msg), "the sandbox was lost: %s", why);
        session_lost(s, msg);
        return;
    }
    s->detached = true;
    s->detached_ms = time_now_ms();
    s->m->want_list = true;
    (void)snprintf(msg, sizeof(msg),
                   "the connection to its sandbox broke (%s); checking its container", why);
    notify(s->m, "detached", &s->rec, msg);
    if (s->exec != NULL && strcmp(s->profile->runtime, "runc") != 0) {
        struct timeval tv;

        time_tv_from_ms(&tv, SETTLE_MS);
        (void)evtimer_add(s->settle_timer, &tv);
    } else if (s->exec != NULL) {
        execution_disconnected(s->exec);
    }
    restarts_answer(s, -ENOTCONN, "the connection to the sandbox broke");
}

/* A hello comes only after a reconnection (sessions get their first through adoption or the
 * pool). The kernel must still claim this session; what happened meanwhile is handled as at
 * re-adoption. */
static void
on_kernel_hello(struct kernel *k, const struct kernel_msg *m, void *userdata)
{
    struct session *s = userdata;

    if (!s->reconnecting) {
        return;
    }
    s->reconnecting = false;
    if (m->session == NULL || strcmp(m->session, s->rec.id) != 0) {
        session_lost(s, "the sandbox was lost: its kernel no longer claims this session");
        return;
    }
    s->detached = false;
    s->reconnect_failures = 0;
    s->m->stats.reconnected_total++;
    notify(s->m, "reconnected", &s->rec, "its container still runs: attached again");
    if (m->gen != s->rec.gen) {
        epoch_bump(s, m->gen, "the interpreter restarted while the connection was broken");
    }
    if (m->busy != NULL && m->busy[0] != '\0') {
        execution_orphan(s, m->busy);
    }
}

static const struct kernel_handlers session_kernel_handlers = {
    .on_hello = on_kernel_hello,
    .on_output = on_kernel_output,
    .on_done = on_kernel_done,
    .on_artifact = on_kernel_artifact,
    .on_restarted = on_kernel_restarted,
    .on_closed = on_kernel_closed,
};

/* ---- executions ------------------------------------------------------------------------------ */

/* x's kernel is being restarted (by the grace timer, or by a client's restart taking the
 * execution over): its done is due within engine.timeout_ms, the grace timer's last bound. */
static void
execution_restarting(struct execution *x)
{
    struct timeval tv;

    x->phase = PH_RESTARTING;
    x->restart_ms = time_now_ms();
    if (x->s->kernel != NULL) {
        kernel_pause(x->s->kernel, false);
    }
    time_tv_from_ms(&tv, x->s->m->cfg->engine_timeout_ms);
    (void)evtimer_add(x->grace, &tv); /* replaces whatever the interrupt armed */
}

/* The last resort: a kernel that answers neither the interrupt nor the restart (a frozen
 * container, an engine that stopped relaying its stream) ends its session, so that no execution
 * outlives timeout_s + interrupt_grace_ms + engine.timeout_ms. */
static void
on_grace(evutil_socket_t fd, short what, void *arg)
{
    struct execution *x = arg;
    char why[160];

    if (x->phase == PH_RESTARTING) {
        (void)snprintf(why, sizeof(why),
                       "the sandbox stopped answering: no reply %llu ms after its restart",
                       (unsigned long long)(time_now_ms() - x->restart_ms));
        session_lost(x->s, why);
        return;
    }
    if (x->is_cmd) {
        (void)snprintf(why, sizeof(why),
                       "the sandbox stopped answering: no reply %u ms after the %s",
                       x->s->profile->interrupt_grace_ms + x->s->m->cfg->engine_timeout_ms,
                       x->cause == CAUSE_TIMEOUT ? "timeout" : "interrupt");
        session_lost(x->s, why);
        return;
    }
    /* Still running after the interrupt: C code or a swallowed KeyboardInterrupt. */
    if (kernel_restart(x->s->kernel, x->cause == CAUSE_TIMEOUT
                                         ? "execution did not stop after its timeout"
                                         : "execution did not stop after an interrupt") < 0) {
        session_lost(x->s, "the kernel connection broke during an interrupt");
        return;
    }
    execution_restarting(x);
}

/* KeyboardInterrupt now, a kernel restart after the grace period if the code goes on. A command's
 * process group is killed outright: its done follows. */
static int
execution_interrupt(struct execution *x, enum exec_cause cause)
{
    struct timeval tv;

    if (x->phase != PH_RUNNING) {
        return 0; /* already on its way out */
    }
    x->phase = PH_INTERRUPTED;
    x->cause = cause;
    /* From now on the kernel must be heard whatever the reader's pace: its answer to the
     * interrupt would otherwise wait behind output nobody reads. */
    kernel_pause(x->s->kernel, false);
    if (kernel_interrupt(x->s->kernel, x->id) < 0) {
        return -EPIPE;
    }
    /* Code gets its grace, then a restart; a command's done is due at once, so its timer is
     * only the last resort. */
    time_tv_from_ms(&tv, x->s->profile->interrupt_grace_ms +
                             (x->is_cmd ? x->s->m->cfg->engine_timeout_ms : 0));
    (void)evtimer_add(x->grace, &tv);
    return 0;
}

static void
on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct execution *x = arg;

    if (execution_interrupt(x, CAUSE_TIMEOUT) < 0) {
        session_lost(x->s, "the kernel connection broke during a timeout");
    }
}

static void
on_history_saved(int r, void *userdata)
{
    sop_free(userdata); /* best effort: the history is a record, not the session's state */
}

/* Appends the ended execution to its session's history in Redis (never waited for: the reply
 * does not depend on it; a later read is behind it on the same connection). */
static void
history_push(struct execution *x)
{
    struct session *s = x->s;
    json_t *head = json_string(x->code_head ? x->code_head : "");
    json_t *entry;
    struct sop *op;
    char *text;

    entry = OOM_CHECK(json_pack(
        "{s:s, s:o, s:I, s:s, s:s, s:o, s:I, s:I}", "id", x->id, "started_at",
        time_json(x->started_wall_ms), "duration_ms", (json_int_t)x->duration_ms, "status",
        x->status, "code_sha256", x->code_sha256, "code_head", head ? head : json_null(),
        "code_bytes", (json_int_t)x->code_bytes, "epoch", (json_int_t)s->rec.epoch));
    text = OOM_CHECK(json_dumps(entry, JSON_COMPACT));
    json_decref(entry);
    op = sop_new(s->m, SOP_HISTORY, s->rec.id);
    if (store_sessions_history_push(s->m->store, s->rec.id, text, strlen(text), on_history_saved,
                                    op) < 0) {
        sop_free(op); /* Redis is down: this entry is lost, the next ones are not */
    }
    free(text);
}

/* Counts, records and audits an ended execution (status and duration are set). */
static void
execution_record(struct execution *x)
{
    struct session *s = x->s;
    struct session_manager *m = s->m;
    size_t i;

    if (m->freeing) {
        /* The daemon exits with the execution still running: it is not over, and the next
         * start reports it (as an orphan). */
        return;
    }
    if (x->orphan) {
        /* Started by a previous daemon (or before a reconnection): its code is not known here. */
        audit_log("execution.finished", "daemon",
                  OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s, s:I, s:b}", "tenant", s->rec.tenant,
                                      "session", s->rec.id, "execution", x->id, "status", x->status,
                                      "epoch", (json_int_t)s->rec.epoch, "orphan", 1)));
        return;
    }
    m->stats.executions_ended[exec_status_from_string(x->status)]++;
    i = profile_index(m, s->profile->name);
    if (i < m->n_pools) {
        metrics_hist_observe(&m->pstats[i].execution, time_now_us() - x->started_us);
    }
    history_push(x);
    audit_log("execution.finished", x->actor,
              OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:I, s:I}", "tenant",
                                  s->rec.tenant, "session", s->rec.id, "execution", x->id,
                                  "code_sha256", x->code_sha256, "code_bytes",
                                  (json_int_t)x->code_bytes, "status", x->status, "duration_ms",
                                  (json_int_t)x->duration_ms, "epoch", (json_int_t)s->rec.epoch)));
}

/* Reports the end and frees the execution. Idempotent through s->exec. */
static void
execution_finish(struct execution *x)
{
    struct session *s = x->s;

    if (s->exec != x) {
        return;
    }
    x->duration_ms = (time_now_us() - x->started_us) / 1000;
    if (x->status == NULL) {
        x->status = "error";
    }
    if (x->truncated == NULL) {
        x->truncated = json_null();
    }
    s->exec = NULL;
    if (s->kernel != NULL) {
        kernel_pause(s->kernel, false); /* a paused stream must not outlive its execution */
    }
    if (x->orphan) {
        /* Nobody waits for its answer: the log is where it is reported. */
        char msg[160];

        (void)snprintf(msg, sizeof(msg), "execution %s, whose client was lost, ended: %s%s", x->id,
                       x->status,
                       x->state_preserved ? ", variables kept" : ", the namespace restarted");
        notify(s->m, "execution", &s->rec, msg);
    }
    if (s->state == SESSION_BUSY) {
        s->state = SESSION_READY;
    }
    execution_record(x);
    if (!x->detached && x->obs.on_done != NULL) {
        x->obs.on_done(x, x->userdata);
    }
    execution_free(x);
}

static void
execution_free(struct execution *x)
{
    event_free(x->deadline);
    event_free(x->grace);
    buf_done(&x->out);
    buf_done(&x->err);
    json_decref(x->result);
    json_decref(x->error);
    json_decref(x->truncated);
    json_decref(x->resources);
    json_decref(x->artifacts);
    free(x->code_head);
    free(x);
}

static struct execution *
execution_alloc(struct session *s)
{
    uint64_t cap = s->profile->max_output_bytes * 3 + 4096; /* U+FFFD triples bad bytes */
    struct execution *x = xcalloc(1, sizeof(*x));

    x->s = s;
    x->exit_code = -1;
    buf_init(&x->out, cap);
    buf_init(&x->err, cap);
    x->deadline = OOM_CHECK(evtimer_new(s->m->base, on_deadline, x));
    x->grace = OOM_CHECK(evtimer_new(s->m->base, on_grace, x));
    x->artifacts = OOM_CHECK(json_array());
    x->started_us = time_now_us();
    x->started_wall_ms = time_wall_ms();
    x->epoch0 = s->rec.epoch;
    return x;
}

/* What the execution runs, for the history and the audit log: the SHA-256 of the code (a
 * command's argv joined with single spaces), its size and its first CODE_HEAD_CHARS characters
 * (the text is UTF-8: jansson checked the request). */
static void
execution_set_code(struct execution *x, const struct exec_req *req)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned md_len = 0;
    struct buf joined = BUF_INIT(SIZE_MAX);
    const char *code = req->code;
    size_t len = req->code_len, i;
    json_t *v;

    if (code == NULL) {
        json_array_foreach (req->argv, i, v) {
            if ((i > 0 && buf_putc(&joined, ' ') < 0) ||
                buf_append(&joined, json_string_value(v), json_string_length(v)) < 0) {
                oom();
            }
        }
        code = joined.buf;
        len = joined.len;
    }
    if (EVP_Digest(code, len, md, &md_len, EVP_sha256(), NULL) != 1) {
        oom();
    }
    for (i = 0; i < md_len && 2 * i + 2 < sizeof(x->code_sha256); i++) {
        (void)snprintf(x->code_sha256 + 2 * i, 3, "%02x", md[i]);
    }
    x->code_bytes = len;
    x->code_head = OOM_CHECK(strndup(code, utf8_prefix_chars(code, len, CODE_HEAD_CHARS)));
    buf_done(&joined);
}

/* An execution the previous daemon started, found running at re-adoption: nobody can receive its
 * result, so it is interrupted, and restarted after the grace period if it does not stop (like a
 * timeout), so the session never stays wedged behind it. */
static void
execution_orphan(struct session *s, const char *id)
{
    struct execution *x = execution_alloc(s);

    (void)snprintf(x->id, sizeof(x->id), "%s", id);
    x->detached = true;
    x->orphan = true;
    s->exec = x;
    s->state = SESSION_BUSY;
    (void)execution_interrupt(x, CAUSE_CLIENT);
}

int
session_execute(struct session *s, const struct exec_req *req, const struct exec_observer *obs,
                void *userdata, bool collect, struct execution **ret, struct err *reterr)
{
    const struct cfg_tenant *t;
    struct execution *x;
    struct timeval tv;
    int r;

    if (s->state == SESSION_ENDING) {
        return err_set(reterr, -ENOENT, "the session is ending");
    }
    if (s->exec != NULL) {
        return err_set(reterr, -EBUSY, "an execution is already running in this session");
    }
    if (s->detached) {
        return err_set(reterr, -ENOTCONN,
                       "the connection to the sandbox broke (engine restart?); retry shortly");
    }
    t = cfg_tenant_find(s->m->cfg, s->rec.tenant);
    if (t != NULL && t->max_running > 0 && tenant_running(s->m, t->id) >= t->max_running) {
        return err_set(reterr, -EDQUOT,
                       "tenant '%s' has max_running %u executions running; retry when one ends",
                       t->id, t->max_running);
    }
    if (req->timeout_s > s->profile->exec_timeout_s) {
        return err_set(reterr, -EINVAL, "'timeout_s' must be at most %u for profile '%s'",
                       s->profile->exec_timeout_s, s->profile->name);
    }
    if (!store_redis_is_up(s->m->redis)) {
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    x = execution_alloc(s);
    random_hex(x->id, 16);
    x->is_cmd = req->code == NULL;
    x->collect = collect;
    x->obs = *obs;
    x->userdata = userdata;
    x->timeout_s = req->timeout_s ? req->timeout_s : s->profile->exec_timeout_s;
    r = x->is_cmd
            ? kernel_cmd(s->kernel, x->id, req->argv, s->profile->max_output_bytes)
            : kernel_exec(s->kernel, x->id, req->code, req->code_len, s->profile->max_output_bytes);
    if (r < 0) {
        execution_free(x);
        return err_set(reterr, r == -ENOBUFS ? -EMSGSIZE : -EPIPE,
                       r == -ENOBUFS ? "the code is too large for the sandbox's input queue"
                                     : "the sandbox is not reachable");
    }
    x->started_us = time_now_us();
    x->started_wall_ms = time_wall_ms();
    execution_set_code(x, req);
    if (req->actor != NULL) {
        (void)snprintf(x->actor, sizeof(x->actor), "%s", req->actor);
    } else {
        (void)tenant_actor(s->rec.tenant, x->actor, sizeof(x->actor));
    }
    time_tv_from_ms(&tv, (uint64_t)x->timeout_s * 1000u);
    (void)evtimer_add(x->deadline, &tv);
    s->exec = x;
    s->state = SESSION_BUSY;
    s->m->stats.executions_total++;
    session_touch(s);
    audit_log("execution.started", x->actor,
              OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I}", "tenant", s->rec.tenant,
                                  "session", s->rec.id, "execution", x->id, "kind",
                                  x->is_cmd ? "command" : "code", "code_sha256", x->code_sha256,
                                  "code_bytes", (json_int_t)x->code_bytes, "timeout_s",
                                  (json_int_t)x->timeout_s)));
    *ret = x;
    return 0;
}

void
execution_detach(struct execution *x)
{
    x->detached = true;
    if (x->s->kernel != NULL) {
        kernel_pause(x->s->kernel, false); /* never leave a kernel paused for a gone reader */
    }
}

void
execution_pause(struct execution *x, bool pause)
{
    /* Past the deadline, output is bounded by the kernel's own cap: stop applying backpressure
     * so that the interrupt and the restart are not stuck behind it. */
    if (x->s->kernel != NULL && (!pause || x->phase == PH_RUNNING)) {
        kernel_pause(x->s->kernel, pause);
    }
}

/* ---- interrupt and restart ------------------------------------------------------------------- */

int
session_interrupt(struct session *s, const char **ret_exec_id, struct err *reterr)
{
    struct execution *x = s->exec;

    if (s->state == SESSION_ENDING) {
        return err_set(reterr, -ENOENT, "the session is ending");
    }
    if (x == NULL) {
        return err_set(reterr, -ESRCH, "no execution is running in this session");
    }
    if (execution_interrupt(x, CAUSE_CLIENT) < 0) {
        return err_set(reterr, -EPIPE, "the sandbox is not reachable");
    }
    *ret_exec_id = x->id;
    return 0;
}

/* Answers every waiting client (r == 0: the restart happened and the epoch is current). */
static void
restarts_answer(struct session *s, int r, const char *why)
{
    struct session_restart *w;
    struct err e = {0};

    (void)event_del(s->restart_timer);
    if (r < 0) {
        (void)err_set(&e, r, "%s", why);
    }
    while ((w = TAILQ_FIRST(&s->restarts)) != NULL) {
        TAILQ_REMOVE(&s->restarts, w, link);
        w->cb(r, s->rec.epoch, r < 0 ? &e : NULL, w->userdata);
        free(w);
    }
}

static void
on_restart_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;

    restarts_answer(s, -ETIMEDOUT, "the kernel did not confirm the restart in time");
    if (s->exec != NULL && s->exec->phase == PH_RESTARTING) {
        /* The execution the restart was to end cannot be bounded otherwise. */
        session_lost(s, "the sandbox stopped answering: no reply to a restart");
    }
}

int
session_restart(struct session *s, session_restart_cb *cb, void *userdata,
                struct session_restart **ret, struct err *reterr)
{
    struct session_restart *w;
    struct timeval tv;
    size_t n = 0;

    if (s->state == SESSION_ENDING) {
        return err_set(reterr, -ENOENT, "the session is ending");
    }
    if (s->detached) {
        return err_set(reterr, -ENOTCONN,
                       "the connection to the sandbox broke (engine restart?); retry shortly");
    }
    TAILQ_FOREACH (w, &s->restarts, link) {
        n++;
    }
    if (n >= MAX_RESTART_WAITERS) {
        return err_set(reterr, -EBUSY, "too many restarts of this session are pending");
    }
    if (n == 0) {
        if (kernel_restart(s->kernel, RESTART_REASON) < 0) {
            return err_set(reterr, -EPIPE, "the sandbox is not reachable");
        }
        if (s->exec != NULL && s->exec->phase != PH_RESTARTING) {
            /* The running execution ends as interrupted, its namespace gone; the grace timer
             * an interrupt armed gives way to the restart's bound. */
            s->exec->cause = CAUSE_CLIENT;
            execution_restarting(s->exec);
        }
        time_tv_from_ms(&tv, s->m->cfg->engine_timeout_ms);
        (void)evtimer_add(s->restart_timer, &tv);
    }
    w = xcalloc(1, sizeof(*w));
    w->s = s;
    w->cb = cb;
    w->userdata = userdata;
    TAILQ_INSERT_TAIL(&s->restarts, w, link);
    *ret = w;
    return 0;
}

void
session_restart_cancel(struct session_restart *w)
{
    TAILQ_REMOVE(&w->s->restarts, w, link);
    free(w);
}

const char *
execution_id(const struct execution *x)
{
    return x->id;
}

/* The bytes of a buffer as a JSON string (kernel output is valid UTF-8 already; jansson checks
 * again and we repair anything that is not). */
static json_t *
text_json(const struct buf *b)
{
    json_t *v = json_stringn(b->buf, b->len);

    if (v == NULL) {
        struct buf fixed = BUF_INIT(b->len * 3 + 1);

        (void)utf8_append_sanitized(&fixed, b->buf, b->len);
        v = OOM_CHECK(json_stringn(fixed.buf, fixed.len));
        buf_done(&fixed);
    }
    return v;
}

json_t *
execution_to_json(const struct execution *x, bool with_output)
{
    json_t *o = OOM_CHECK(
        json_pack("{s:s, s:s, s:O, s:O, s:I, s:O, s:I, s:b}", "id", x->id, "status", x->status,
                  "result", x->result ? x->result : json_null(), "error",
                  x->error ? x->error : json_null(), "duration_ms", (json_int_t)x->duration_ms,
                  "truncated", x->truncated ? x->truncated : json_null(), "kernel_epoch",
                  (json_int_t)x->s->rec.epoch, "state_preserved", x->state_preserved));

    (void)json_object_set_new(
        o, "exit_code", x->is_cmd && x->exit_code >= 0 ? json_integer(x->exit_code) : json_null());
    (void)json_object_set(o, "artifacts", x->artifacts);
    (void)json_object_set(o, "resources", x->resources ? x->resources : json_null());
    if (with_output) {
        (void)json_object_set_new(o, "stdout", text_json(&x->out));
        (void)json_object_set_new(o, "stderr", text_json(&x->err));
    }
    return o;
}

/* ---- creating -------------------------------------------------------------------------------- */

/* A session is ready: its acquire latency and the audit line. */
static void
session_created(struct session *s)
{
    size_t i = profile_index(s->m, s->profile->name);
    char actor[80];

    if (i < s->m->n_pools) {
        metrics_hist_observe(&s->m->pstats[i].acquire[s->cold ? 1 : 0],
                             time_now_us() - s->create_started_us);
    }
    audit_log("session.created", tenant_actor(s->rec.tenant, actor, sizeof(actor)),
              OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s, s:s}", "tenant", s->rec.tenant, "session",
                                  s->rec.id, "profile", s->rec.profile, "container",
                                  s->rec.container, "source", s->cold ? "cold" : "warm")));
}

static void
on_created(int r, void *userdata)
{
    struct sop *op = userdata;
    struct session_manager *m = op->m;
    struct session *s = op->pending;
    struct err e = {0};

    if (m == NULL) {
        /* The manager is gone; the record (if written) and the container are found again at
         * the next start. */
        free(s);
        sop_free(op);
        return;
    }
    if (r == 0 && s->lost) {
        /* The container went away while its record was written: undo the record. */
        delete_record(m, s->rec.id);
        r = -EPIPE;
    }
    if (r < 0) {
        struct pool_slot *slot = s->slot;

        if (r == -EPIPE) {
            (void)err_set(&e, -EPIPE, "the sandbox was lost while the session was created");
        } else {
            (void)err_set(&e, r == -ENOTCONN || r == -ETIMEDOUT || r == -ECANCELED ? -ENOTCONN : r,
                          "could not record the session in redis: %s", strerror(-r));
        }
        session_destroy(s);
        pool_slot_release(slot); /* bound once: never goes back to the pool */
        op->create_cb(e.code, NULL, &e, op->userdata);
        sop_free(op);
        return;
    }
    session_register(s);
    m->stats.created_total++;
    session_created(s);
    op->create_cb(0, s, NULL, op->userdata);
    sop_free(op);
}

/* Turns a BOUND slot into a session and writes its record. */
static int
bind_slot(struct session_manager *m, struct pool_slot *slot, const struct session_create_req *req,
          const struct cfg_profile *p, session_create_cb *cb, void *userdata, uint64_t started_us,
          bool cold)
{
    struct session *s = session_alloc(m, slot, p);
    struct store_session_rec *rec = &s->rec;
    uint64_t now = time_wall_ms();
    struct sop *op;
    int r;

    random_hex(rec->id, 16); /* 128 bits */
    s->create_started_us = started_us;
    s->cold = cold;
    (void)snprintf(rec->tenant, sizeof(rec->tenant), "%s", req->tenant);
    (void)snprintf(rec->profile, sizeof(rec->profile), "%s", p->name);
    (void)snprintf(rec->container, sizeof(rec->container), "%s", pool_slot_container(slot));
    (void)snprintf(rec->node, sizeof(rec->node), "%s", m->cfg->node_id);
    (void)snprintf(rec->metadata, sizeof(rec->metadata), "%s",
                   req->metadata_json ? req->metadata_json : "{}");
    rec->created_at = rec->last_active_at = now;
    rec->idle_timeout_s = req->idle_timeout_s ? req->idle_timeout_s : p->idle_timeout_s;
    rec->expires_at = now + (uint64_t)p->max_lifetime_s * 1000u;
    rec->epoch = 1;
    rec->gen = kernel_gen(s->kernel);
    rec->state = STORE_SESSION_ACTIVE;
    /* The container remembers whom it serves, even if Redis loses the record. */
    (void)kernel_bind(s->kernel, rec->id);
    op = sop_new(m, SOP_CREATE, rec->id);
    op->pending = s;
    op->create_cb = cb;
    op->userdata = userdata;
    r = store_sessions_create(m->store, rec, on_created, op);
    if (r < 0) {
        op->pending = NULL;
        sop_free(op);
        session_destroy(s);
        pool_slot_release(slot);
        return -ENOTCONN;
    }
    return 0;
}

static void
cold_free(struct cold *c)
{
    TAILQ_REMOVE(&c->m->colds, c, link);
    free(c->metadata);
    free(c);
}

static void
on_cold_slot(int r, struct pool_slot *slot, const struct err *e, void *userdata)
{
    struct cold *c = userdata;
    struct session_manager *m = c->m;
    session_create_cb *cb = c->cb;
    void *ud = c->userdata;
    struct err e2 = {0};

    c->waiter = NULL;
    if (r == 0) {
        r = bind_slot(m, slot, &c->req, profile_find(m, c->profile), cb, ud, c->started_us, true);
        if (r < 0) {
            (void)err_set(&e2, r, "redis is unavailable");
            e = &e2;
        }
    }
    cold_free(c);
    if (r < 0) {
        cb(r, NULL, e, ud);
    }
}

/* ---- tenant quotas -----------------------------------------------------------------------------
 */

static bool
is_of(const char *tenant, const char *profile, const char *want_tenant, const char *want_profile)
{
    return strcmp(tenant, want_tenant) == 0 &&
           (want_profile == NULL || strcmp(profile, want_profile) == 0);
}

/* The tenant's sessions (of profile, or of all for NULL), those still being created included (a
 * burst of creates must not pass a quota while the first ones wait for a container or for
 * Redis). */
static unsigned
tenant_sessions(const struct session_manager *m, const char *tenant, const char *profile)
{
    const struct session *s;
    const struct cold *c;
    const struct sop *op;
    unsigned n = 0;

    TAILQ_FOREACH (s, &m->sessions, link) {
        n += s->state != SESSION_ENDING && is_of(s->rec.tenant, s->rec.profile, tenant, profile);
    }
    TAILQ_FOREACH (c, &m->colds, link) {
        n += is_of(c->tenant, c->profile, tenant, profile);
    }
    TAILQ_FOREACH (op, &m->sops, link) {
        n += op->kind == SOP_CREATE && op->pending != NULL &&
             is_of(op->pending->rec.tenant, op->pending->rec.profile, tenant, profile);
    }
    return n;
}

/* ---- fair shares of the warm pools --------------------------------------------------------------
 *
 * A tenant that takes warm containers faster than its pool refills them would leave every other
 * tenant the cold path (churning create+delete at 6/s took another tenant's creates from 2 ms to
 * over a second). Warm takes are counted per tenant and profile over TAKE_WINDOW_S: a tenant
 * that took more than the profile's warm target in that time is a heavy taker, and a heavy
 * taker leaves half the warm target ready for the others, as long as another tenant asked for
 * a session of the profile within TAKE_WINDOW_S (nobody else there, nothing is kept); past that,
 * its creates wait for a fresh container like a cold one. A tenant that takes less never
 * notices. */

#define TAKE_WINDOW_S 10u

struct take_rate {
    uint64_t sec[TAKE_WINDOW_S];
    unsigned n[TAKE_WINDOW_S];
    char key[160];
};

/* The two tenants that last asked for a session of a profile, and when (monotonic s). */
struct askers {
    char tenant[2][65];
    uint64_t at_s[2];
    char key[80];
};

static struct askers *
askers_of(struct session_manager *m, const char *profile)
{
    struct askers *a = hashmap_get(m->askers, profile);

    if (a == NULL) {
        a = xcalloc(1, sizeof(*a));
        (void)snprintf(a->key, sizeof(a->key), "%s", profile);
        hashmap_put(m->askers, a->key, a);
    }
    return a;
}

/* tenant asks for a session of profile now: it becomes the latest asker, the previous latest
 * (if another tenant) the one before. */
static void
asker_note(struct session_manager *m, const char *tenant, const char *profile, uint64_t now_s)
{
    struct askers *a = askers_of(m, profile);

    if (strcmp(a->tenant[0], tenant) != 0) {
        memcpy(a->tenant[1], a->tenant[0], sizeof(a->tenant[1]));
        a->at_s[1] = a->at_s[0];
        (void)snprintf(a->tenant[0], sizeof(a->tenant[0]), "%s", tenant);
    }
    a->at_s[0] = now_s;
}

/* Whether a tenant other than tenant asked for profile within TAKE_WINDOW_S. */
static bool
others_asked(struct session_manager *m, const char *tenant, const char *profile, uint64_t now_s)
{
    const struct askers *a = askers_of(m, profile);

    for (int i = 0; i < 2; i++) {
        if (a->tenant[i][0] != '\0' && strcmp(a->tenant[i], tenant) != 0 &&
            now_s - a->at_s[i] < TAKE_WINDOW_S) {
            return true;
        }
    }
    return false;
}

static struct take_rate *
take_rate(struct session_manager *m, const char *tenant, const char *profile)
{
    char key[160];
    struct take_rate *r;

    (void)snprintf(key, sizeof(key), "%s/%s", tenant, profile);
    r = hashmap_get(m->takes, key);
    if (r == NULL) {
        r = xcalloc(1, sizeof(*r));
        memcpy(r->key, key, sizeof(key));
        hashmap_put(m->takes, r->key, r);
    }
    return r;
}

static unsigned
takes_recent(const struct take_rate *r, uint64_t now_s)
{
    unsigned n = 0;

    for (unsigned i = 0; i < TAKE_WINDOW_S; i++) {
        n += now_s - r->sec[i] < TAKE_WINDOW_S ? r->n[i] : 0;
    }
    return n;
}

static void
take_note(struct take_rate *r, uint64_t now_s)
{
    unsigned i = (unsigned)(now_s % TAKE_WINDOW_S);

    if (r->sec[i] != now_s) {
        r->sec[i] = now_s;
        r->n[i] = 0;
    }
    r->n[i]++;
}

/* The ready containers a create of tenant must leave in p's pool: other tenants' reserved share,
 * and half the warm target from a heavy taker. */
static unsigned
warm_keep(struct session_manager *m, const char *tenant, const struct cfg_profile *p,
          uint64_t now_s)
{
    unsigned keep = cfg_reserved_for_others(m->cfg, tenant, p->name);
    const struct take_rate *r = take_rate(m, tenant, p->name);

    if (p->warm > 0 && takes_recent(r, now_s) > p->warm &&
        others_asked(m, tenant, p->name, now_s)) {
        keep = MAX(keep, (p->warm + 1) / 2);
    }
    return keep;
}

static unsigned
tenant_running(const struct session_manager *m, const char *tenant)
{
    const struct session *s;
    unsigned n = 0;

    TAILQ_FOREACH (s, &m->sessions, link) {
        n += s->exec != NULL && strcmp(s->rec.tenant, tenant) == 0;
    }
    return n;
}

/* A warm container was taken for req: counted for the tenant's rate, and bound. */
static int
take_warm(struct session_manager *m, struct pool_slot *slot, const struct session_create_req *req,
          const struct cfg_profile *p, session_create_cb *cb, void *userdata, uint64_t started_us,
          struct err *reterr)
{
    int r;

    take_note(take_rate(m, req->tenant, p->name), started_us / 1000000u);
    r = bind_slot(m, slot, req, p, cb, userdata, started_us, false);
    return r < 0 ? err_set(reterr, r, "redis is unavailable") : 0;
}

int
session_create(struct session_manager *m, const struct session_create_req *req,
               session_create_cb *cb, void *userdata, struct err *reterr)
{
    const struct cfg_profile *p = profile_find(m, req->profile);
    struct pool *pool = p != NULL ? pool_for(m, p->name) : NULL;
    const struct cfg_tenant *t = cfg_tenant_find(m->cfg, req->tenant);
    uint64_t started_us = time_now_us();
    struct pool_slot *slot;
    struct cold *c;
    unsigned share, keep;
    int r;

    if (pool == NULL) {
        return err_set(reterr, -ENOENT, "no profile '%.48s'", req->profile ? req->profile : "");
    }
    if (t != NULL && !cfg_tenant_allows(t, p->name)) {
        return err_set(reterr, -EPERM, "tenant '%s' may not use profile '%s'", t->id, p->name);
    }
    if (pool_refused(pool)) { /* the engine cannot enforce it: say why (503, see readyz) */
        struct pool_stats st;

        pool_get_stats(pool, &st);
        return err_set(reterr, -ECONNREFUSED, "%s", st.refused);
    }
    if (t != NULL && t->max_sessions > 0 && tenant_sessions(m, t->id, NULL) >= t->max_sessions) {
        return err_set(reterr, -EDQUOT,
                       "tenant '%s' has max_sessions %u sessions; end one, or retry later", t->id,
                       t->max_sessions);
    }
    /* A share of the whole profile bounds nothing the profile's max does not (that answer,
     * 503 capacity_exhausted, says more). */
    share = cfg_profile_tenant_share(m->cfg, p);
    if (share > 0 && share < p->max && tenant_sessions(m, req->tenant, p->name) >= share) {
        return err_set(reterr, -EDQUOT,
                       "tenant '%s' holds %u of profile '%s''s %u containers, its share "
                       "(max_per_tenant); end one, or retry later",
                       req->tenant, share, p->name, p->max);
    }
    if (req->idle_timeout_s > p->idle_timeout_s) {
        return err_set(reterr, -EINVAL, "'idle_timeout_s' must be at most %u for profile '%s'",
                       p->idle_timeout_s, p->name);
    }
    if (!store_redis_is_up(m->redis)) {
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    /* Other tenants' reserved share of the warm pool, and the fair share a heavy taker leaves,
     * stay for them: past it, this create waits for a fresh container like a cold one. */
    keep = warm_keep(m, req->tenant, p, started_us / 1000000u);
    asker_note(m, req->tenant, p->name, started_us / 1000000u);
    if (pool_take(pool, keep, &slot) == 0) {
        return take_warm(m, slot, req, p, cb, userdata, started_us, reterr);
    }
    c = xcalloc(1, sizeof(*c));
    c->m = m;
    c->cb = cb;
    c->userdata = userdata;
    c->started_us = started_us;
    (void)snprintf(c->tenant, sizeof(c->tenant), "%s", req->tenant);
    (void)snprintf(c->profile, sizeof(c->profile), "%s", p->name);
    c->metadata = req->metadata_json ? xstrdup(req->metadata_json) : NULL;
    c->req = *req;
    c->req.tenant = c->tenant;
    c->req.profile = c->profile;
    c->req.metadata_json = c->metadata;
    TAILQ_INSERT_TAIL(&m->colds, c, link);
    r = pool_wait(pool, COLD_WAIT_FACTOR * m->cfg->engine_timeout_ms, on_cold_slot, c, &c->waiter);
    if (r < 0) {
        unsigned reserved = cfg_reserved_for_others(m->cfg, req->tenant, p->name);

        cold_free(c);
        /* At max no fresh container comes: what a heavy taker left ready for the others is
         * better taken than refused (reservations stay theirs). */
        if (keep > reserved && pool_take(pool, reserved, &slot) == 0) {
            return take_warm(m, slot, req, p, cb, userdata, started_us, reterr);
        }
        return err_set(reterr, -EUSERS,
                       "profile '%s' is at its maximum of %u containers; retry later", p->name,
                       p->max);
    }
    return 0;
}

/* ---- lookups and views ----------------------------------------------------------------------- */

struct session *
session_find(struct session_manager *m, const char *tenant, const char *id)
{
    struct session *s = hashmap_get(m->by_id, id);

    /* Another tenant's session is exactly as absent as an unknown one. */
    if (s == NULL || (tenant != NULL && strcmp(s->rec.tenant, tenant) != 0) ||
        s->state == SESSION_ENDING) {
        return NULL;
    }
    return s;
}

void
session_foreach(struct session_manager *m, const char *tenant,
                void (*fn)(struct session *s, void *userdata), void *userdata)
{
    struct session *s, *next;

    for (s = TAILQ_FIRST(&m->sessions); s != NULL; s = next) {
        next = TAILQ_NEXT(s, link);
        if ((tenant == NULL || strcmp(s->rec.tenant, tenant) == 0) && s->state != SESSION_ENDING) {
            fn(s, userdata);
        }
    }
}

json_t *
session_to_admin_json(const struct session *s)
{
    json_t *o = session_to_json(s);

    (void)json_object_set_new(o, "tenant", OOM_CHECK(json_string(s->rec.tenant)));
    (void)json_object_set_new(o, "node", OOM_CHECK(json_string(s->rec.node)));
    (void)json_object_set_new(o, "container",
                              s->slot != NULL ? OOM_CHECK(json_string(pool_slot_container(s->slot)))
                                              : json_null());
    (void)json_object_set_new(o, "detached", json_boolean(s->detached));
    (void)json_object_set_new(o, "execution",
                              s->exec != NULL ? OOM_CHECK(json_string(execution_id(s->exec)))
                                              : json_null());
    return o;
}

const char *
session_tenant(const struct session *s)
{
    return s->rec.tenant;
}

const char *
session_id(const struct session *s)
{
    return s->rec.id;
}

const struct cfg_profile *
session_profile(const struct session *s)
{
    return s->profile;
}

const char *
session_container(const struct session *s)
{
    return s->state != SESSION_ENDING && s->slot != NULL ? pool_slot_container(s->slot) : NULL;
}

const char *
session_user(const struct session *s)
{
    return s->slot != NULL ? pool_slot_user(s->slot) : NULL;
}

static json_t *
time_json(uint64_t wall_ms)
{
    char ts[40];

    return OOM_CHECK(json_string(time_rfc3339(wall_ms, ts, sizeof(ts))));
}

json_t *
session_to_json(const struct session *s)
{
    const struct store_session_rec *r = &s->rec;
    json_t *meta = json_loads(r->metadata, 0, NULL);

    if (!json_is_object(meta)) {
        json_decref(meta);
        meta = OOM_CHECK(json_object());
    }

    return OOM_CHECK(json_pack(
        "{s:s, s:s, s:s, s:o, s:o, s:I, s:o, s:o, s:I, s:o}", "id", r->id, "profile", r->profile,
        "state", state_names[s->state], "created_at", time_json(r->created_at), "last_active_at",
        time_json(r->last_active_at), "idle_timeout_s", (json_int_t)r->idle_timeout_s,
        "idle_expires_at", time_json(store_session_deadline(r, r->last_active_at)), "expires_at",
        time_json(r->expires_at), "kernel_epoch", (json_int_t)r->epoch, "metadata",
        json_is_object(meta) ? meta : (json_decref(meta), OOM_CHECK(json_object()))));
}

/* ---- recovery -------------------------------------------------------------------------------- */

/* Builds a session from a loaded record and an adopted container. */
static void
adopt(struct session_manager *m, struct pool_slot *slot, const struct store_session_rec *rec,
      int64_t gen, const char *busy)
{
    const struct cfg_profile *p = profile_find(m, rec->profile);
    struct session *s;

    if (p == NULL) {
        pool_slot_release(slot);
        return;
    }
    s = session_alloc(m, slot, p);
    s->rec = *rec;
    session_register(s);
    m->stats.adopted_total++;
    notify(m, "adopted", rec, "re-adopted after a restart");
    if (gen != rec->gen) {
        /* The worker restarted while we were away: the namespace is gone. */
        epoch_bump(s, gen, "the interpreter restarted while the daemon was down");
    }
    if (busy != NULL && busy[0] != '\0') {
        execution_orphan(s, busy);
    }
}

static ssize_t
unmatched_find(struct session_manager *m, const char *id)
{
    for (size_t i = 0; i < m->n_unmatched; i++) {
        if (strcmp(m->unmatched[i].id, id) == 0) {
            return (ssize_t)i;
        }
    }
    return -1;
}

static void
unmatched_take(struct session_manager *m, size_t i)
{
    m->unmatched[i] = m->unmatched[--m->n_unmatched];
}

static void
on_lost_deleted(int r, void *userdata)
{
    sop_free(userdata); /* on failure the next start tries again */
}

static void
delete_record(struct session_manager *m, const char *id)
{
    struct sop *op = sop_new(m, SOP_LOST, id);

    if (store_sessions_delete(m->store, id, on_lost_deleted, op) < 0) {
        sop_free(op);
    }
}

/* Matches a container with its record once records are loaded. */
static void
adopt_or_release(struct session_manager *m, struct pool_slot *slot, const char *session,
                 int64_t gen, const char *busy)
{
    ssize_t i = unmatched_find(m, session);
    struct store_session_rec rec;

    if (i < 0 || hashmap_get(m->by_id, session) != NULL ||
        strcmp(m->unmatched[i].container, pool_slot_container(slot)) != 0) {
        pool_slot_release(slot); /* no record (ended, lost) or not this container */
        return;
    }
    rec = m->unmatched[i];
    unmatched_take(m, (size_t)i);
    if (rec.state == STORE_SESSION_ENDING) {
        pool_slot_release(slot); /* it was being ended when the daemon stopped */
        delete_record(m, rec.id);
        return;
    }
    adopt(m, slot, &rec, gen, busy);
}

void
session_manager_adopt(struct session_manager *m, struct pool_slot *slot,
                      const struct kernel_msg *hello)
{
    struct held *h;

    if (m->loaded) {
        adopt_or_release(m, slot, hello->session, hello->gen, hello->busy);
        return;
    }
    h = xcalloc(1, sizeof(*h));
    h->slot = slot;
    h->gen = hello->gen;
    (void)snprintf(h->session, sizeof(h->session), "%s", hello->session);
    (void)snprintf(h->busy, sizeof(h->busy), "%s", hello->busy ? hello->busy : "");
    TAILQ_INSERT_TAIL(&m->held, h, link);
}

static void
on_loaded(int r, const struct store_session_rec *recs, size_t n, size_t malformed, void *userdata)
{
    struct sop *op = userdata;
    struct session_manager *m = op->m;
    struct held *h;

    sop_free(op);
    if (m == NULL) {
        return;
    }
    m->loading = false;
    if (r < 0) {
        return; /* the next tick tries again */
    }
    free(m->unmatched);
    m->unmatched = xcalloc(n ? n : 1, sizeof(*m->unmatched));
    for (size_t i = 0; i < n; i++) {
        if (hashmap_get(m->by_id, recs[i].id) == NULL) {
            m->unmatched[m->n_unmatched++] = recs[i];
        }
    }
    m->loaded = true;
    while ((h = TAILQ_FIRST(&m->held)) != NULL) {
        TAILQ_REMOVE(&m->held, h, link);
        adopt_or_release(m, h->slot, h->session, h->gen, h->busy);
        free(h);
    }
}

static void
load_records(struct session_manager *m)
{
    struct sop *op;

    if (m->loaded || m->loading || !store_redis_is_up(m->redis)) {
        return;
    }
    op = sop_new(m, SOP_LOAD, NULL);
    if (store_sessions_load_all(m->store, on_loaded, op) < 0) {
        sop_free(op);
        return;
    }
    m->loading = true;
}

static void
on_restored(int r, void *userdata)
{
    sop_free(userdata);
}

void
session_manager_redis_up(struct session_manager *m)
{
    struct session *s;

    load_records(m);
    if (!m->loaded) {
        return;
    }
    /* Redis may have come back empty (restarted without persistence): what we hold in memory
     * is then the only copy; write back whatever it lost. */
    TAILQ_FOREACH (s, &m->sessions, link) {
        struct sop *op;

        if (s->state == SESSION_ENDING) {
            continue;
        }
        op = sop_new(m, SOP_EPOCH, s->rec.id);
        if (store_sessions_restore(m->store, &s->rec, on_restored, op) < 0) {
            sop_free(op);
        }
    }
}

bool
session_manager_loaded(const struct session_manager *m)
{
    return m->loaded;
}

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

/* A detached session and a container list asked for after the break: attach again if its
 * container runs, else end it. */
static void
reconnect_or_end(struct session *s, json_t *list)
{
    json_t *c = list_find(list, pool_slot_container(s->slot));
    const char *state = json_string_value(json_object_get(c, "State"));
    struct err e = {0};
    char msg[256];

    if (s->oom_wait == 1) {
        return; /* its container died: the end waits for a late "oom" (container_gone) */
    }
    if (c == NULL || state == NULL || strcmp(state, "running") != 0) {
        (void)snprintf(msg, sizeof(msg), "the sandbox was lost: its container %s",
                       c == NULL ? "is gone" : "stopped");
        session_lost(s, msg);
        return;
    }
    if (s->exec != NULL) { /* its container still runs: the break was not an OOM kill */
        (void)evtimer_del(s->settle_timer);
        execution_disconnected(s->exec);
    }
    if (pool_slot_reconnect(s->slot, &session_kernel_handlers, s, &e) < 0) {
        s->kernel = NULL;
        (void)snprintf(msg, sizeof(msg), "the sandbox was lost: attaching again failed: %s", e.msg);
        session_lost(s, msg);
        return;
    }
    s->kernel = pool_slot_kernel(s->slot);
    s->reconnecting = true;
}

/* The container of s died (die) or was removed: s ends, saying why. */
static void
container_gone(struct session *s, bool died)
{
    char msg[192];

    if (s->state == SESSION_ENDING || s->oom_wait == 1) {
        return;
    }
    if (died_of_oom(s)) {
        (void)snprintf(msg, sizeof(msg),
                       "the sandbox was lost: it ran out of memory (memory_mb %u); under "
                       "runtime %s the cap holds for the whole sandbox, which was killed",
                       s->profile->memory_mb, s->profile->runtime);
        session_lost(s, msg);
        return;
    }
    if (s->oom_wait == 0 && s->exec != NULL && strcmp(s->profile->runtime, "runc") != 0) {
        struct timeval tv;

        s->oom_wait = 1;
        s->oom_wait_die = died;
        time_tv_from_ms(&tv, OOM_WAIT_MS);
        (void)evtimer_add(s->oom_wait_timer, &tv);
        return;
    }
    (void)snprintf(msg, sizeof(msg), "the sandbox was lost: its container %s",
                   died ? "stopped" : "was removed");
    session_lost(s, msg);
}

static void
on_oom_wait_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;

    s->oom_wait = 2;
    container_gone(s, s->oom_wait_die);
}

void
session_manager_container_gone(struct session_manager *m, const char *container_id,
                               const char *action)
{
    struct session *s;

    TAILQ_FOREACH (s, &m->sessions, link) {
        if (s->slot != NULL && strcmp(pool_slot_container(s->slot), container_id) == 0) {
            container_gone(s, strcmp(action, "die") == 0);
            return;
        }
    }
}

void
session_manager_container_oom(struct session_manager *m, const char *container_id)
{
    struct session *s;

    TAILQ_FOREACH (s, &m->sessions, link) {
        if (s->slot != NULL && strcmp(pool_slot_container(s->slot), container_id) == 0) {
            s->oom_ms = time_now_ms();
            if (s->oom_wait == 1) { /* its "die" came first: end it now, as an OOM kill */
                (void)evtimer_del(s->oom_wait_timer);
                s->oom_wait = 2;
                container_gone(s, s->oom_wait_die);
            }
            return;
        }
    }
}

bool
session_manager_quarantine(struct session_manager *m, const char *container_id, const char *why,
                           char *ret_session, size_t n)
{
    struct session *s;

    const struct sop *op;

    TAILQ_FOREACH (s, &m->sessions, link) {
        if (s->slot != NULL && strcmp(pool_slot_container(s->slot), container_id) == 0) {
            (void)snprintf(ret_session, n, "%s", s->rec.id);
            if (s->state != SESSION_ENDING) {
                session_lost(s, why);
            }
            return true;
        }
    }
    /* A session being created on it: the create fails (session_lost() marks it). */
    TAILQ_FOREACH (op, &m->sops, link) {
        s = op->kind == SOP_CREATE ? op->pending : NULL;
        if (s != NULL && s->slot != NULL &&
            strcmp(pool_slot_container(s->slot), container_id) == 0) {
            (void)snprintf(ret_session, n, "%s", s->rec.id);
            session_lost(s, why);
            return true;
        }
    }
    return false;
}

bool
session_manager_want_list(const struct session_manager *m)
{
    return m->want_list;
}

void
session_manager_reconcile(struct session_manager *m, json_t *list, uint64_t listed_at_ms)
{
    struct session *s, *next;

    m->want_list = false;
    for (s = TAILQ_FIRST(&m->sessions); s != NULL; s = next) {
        next = TAILQ_NEXT(s, link);
        if (!s->detached || s->reconnecting || s->state == SESSION_ENDING) {
            continue;
        }
        if (listed_at_ms < s->detached_ms) {
            m->want_list = true; /* asked for before the break: it cannot tell */
            continue;
        }
        reconnect_or_end(s, list);
    }
    if (!m->loaded) {
        return; /* nothing can be judged before the records are in */
    }
    /* A record whose container is not on the engine lost its state: end it. A record whose
     * container is there but not adopted yet waits for its kernel's hello. */
    for (size_t i = 0; i < m->n_unmatched;) {
        if (!list_has(list, m->unmatched[i].container)) {
            notify(m, "ended", &m->unmatched[i], "its container is gone: its state was lost");
            audit_log("session.ended", "daemon",
                      OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s}", "tenant", m->unmatched[i].tenant,
                                          "session", m->unmatched[i].id, "why", "lost", "detail",
                                          "its container was gone at start")));
            delete_record(m, m->unmatched[i].id);
            unmatched_take(m, i);
            continue;
        }
        i++;
    }
    (void)listed_at_ms;
}

/* ---- periodic work --------------------------------------------------------------------------- */

static void
on_claimed(int r, const char *const *ids, size_t n, void *userdata)
{
    struct sop *op = userdata;
    struct session_manager *m = op->m;

    sop_free(op);
    if (m == NULL) {
        return;
    }
    m->claiming = false;
    for (size_t i = 0; r == 0 && i < n; i++) {
        struct session *s = hashmap_get(m->by_id, ids[i]);
        struct sop *del;

        m->stats.reaped_total++;
        if (s != NULL && s->state != SESSION_ENDING) {
            notify(m, "ended", &s->rec, "idle or past its lifetime");
            session_set_end_cause(s, "daemon",
                                  s->rec.expires_at <= time_wall_ms() ? "lifetime" : "idle");
            s->state = SESSION_ENDING;
            if (s->exec != NULL) {
                (void)kernel_interrupt(s->kernel, s->exec->id);
            }
        }
        /* The claim made this daemon the owner of the ending: delete, then drop. */
        del = sop_new(m, SOP_END, ids[i]);
        if (store_sessions_delete(m->store, ids[i], on_end_deleted, del) < 0) {
            sop_free(del);
            if (s != NULL) {
                session_drop(s); /* the record goes at the next start (no container) */
            }
        }
    }
}

static uint64_t
touch_interval_ms(const struct session *s)
{
    uint64_t third = (uint64_t)s->rec.idle_timeout_s * 1000u / 3;

    return MAX(MIN(third, (uint64_t)TOUCH_MAX_MS), (uint64_t)TOUCH_MIN_MS);
}

void
session_manager_tick(struct session_manager *m)
{
    struct session *s;
    struct sop *op;
    uint64_t now = time_now_ms();

    if (!store_redis_is_up(m->redis)) {
        return;
    }
    load_records(m);
    /* A running execution is activity: keep its session's deadline ahead. */
    TAILQ_FOREACH (s, &m->sessions, link) {
        if (s->exec != NULL && now - s->last_touch_ms >= touch_interval_ms(s)) {
            session_touch(s);
        }
    }
    if (!m->claiming) {
        op = sop_new(m, SOP_CLAIM, NULL);
        if (store_sessions_claim_expired(m->store, time_wall_ms(), REAP_BATCH, on_claimed, op) <
            0) {
            sop_free(op);
        } else {
            m->claiming = true;
        }
    }
}

bool
session_manager_busy(const struct session_manager *m)
{
    const struct session *s;

    TAILQ_FOREACH (s, &m->sessions, link) {
        if (s->exec != NULL) {
            return true;
        }
    }
    return false;
}

void
session_manager_cut(struct session_manager *m)
{
    struct session *s;

    TAILQ_FOREACH (s, &m->sessions, link) {
        if (s->exec != NULL) {
            (void)kernel_interrupt(s->kernel, s->exec->id);
        }
    }
}

void
session_manager_get_stats(const struct session_manager *m, struct session_manager_stats *ret)
{
    const struct session *s;

    *ret = m->stats;
    ret->sessions = 0;
    ret->busy = 0;
    TAILQ_FOREACH (s, &m->sessions, link) {
        ret->sessions++;
        ret->busy += s->exec != NULL;
    }
}

const struct session_profile_stats *
session_manager_profile_stats(const struct session_manager *m, size_t i)
{
    return &m->pstats[i];
}

/* Adds one to ret[index of tenant] when map knows it (the map holds index + 1). */
static void
count_tenant(const struct hashmap *map, const char *tenant, unsigned *ret)
{
    uintptr_t i = (uintptr_t)hashmap_get(map, tenant);

    if (i > 0) {
        ret[i - 1]++;
    }
}

void
session_manager_tenant_counts(const struct session_manager *m, const char *const *tenants, size_t n,
                              unsigned *ret_sessions, unsigned *ret_running)
{
    struct hashmap *map = hashmap_new();
    const struct session *s;
    const struct cold *c;
    const struct sop *op;

    /* One pass over everything, whatever the number of tenants: a scrape stays O(sessions). */
    for (size_t i = 0; i < n; i++) {
        hashmap_put(map, tenants[i], (void *)(uintptr_t)(i + 1));
        ret_sessions[i] = ret_running[i] = 0;
    }
    TAILQ_FOREACH (s, &m->sessions, link) {
        if (s->state != SESSION_ENDING) {
            count_tenant(map, s->rec.tenant, ret_sessions);
        }
        if (s->exec != NULL) {
            count_tenant(map, s->rec.tenant, ret_running);
        }
    }
    TAILQ_FOREACH (c, &m->colds, link) {
        count_tenant(map, c->tenant, ret_sessions);
    }
    TAILQ_FOREACH (op, &m->sops, link) {
        if (op->kind == SOP_CREATE && op->pending != NULL) {
            count_tenant(map, op->pending->rec.tenant, ret_sessions);
        }
    }
    hashmap_free(map);
}

/* ---- execution history ----------------------------------------------------------------------- */

struct history_req {
    session_history_cb *cb;
    void *userdata;
};

static void
on_history(int r, const char *const *items, const size_t *lens, size_t n, void *userdata)
{
    struct history_req *h = userdata;
    json_t *list = NULL;

    if (r == 0) {
        list = OOM_CHECK(json_array());
        for (size_t i = 0; i < n; i++) {
            /* Entries are our own JSON; one that does not parse (a foreign write) is skipped. */
            json_t *e = json_loadb(items[i], lens[i], JSON_REJECT_DUPLICATES, NULL);

            if (json_is_object(e)) {
                (void)json_array_append(list, e);
            }
            json_decref(e);
        }
    }
    h->cb(r, list, h->userdata);
    json_decref(list);
    free(h);
}

int
session_history(struct session *s, session_history_cb *cb, void *userdata, struct err *reterr)
{
    struct history_req *h = xcalloc(1, sizeof(*h));
    int r;

    h->cb = cb;
    h->userdata = userdata;
    r = store_sessions_history(s->m->store, s->rec.id, on_history, h);
    if (r < 0) {
        free(h);
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    return 0;
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

struct session_manager *
session_manager_new(struct event_base *base, const struct cfg *cfg, struct pool **pools,
                    size_t n_pools, struct store_redis *redis)
{
    struct session_manager *m = xcalloc(1, sizeof(*m));

    m->base = base;
    m->cfg = cfg;
    m->pools = pools;
    m->n_pools = n_pools;
    m->redis = redis;
    m->store = store_sessions_new(redis, cfg->redis_prefix, cfg->node_id);
    m->pstats = xcalloc(n_pools ? n_pools : 1, sizeof(*m->pstats));
    m->by_id = hashmap_new();
    m->takes = hashmap_new();
    m->askers = hashmap_new();
    TAILQ_INIT(&m->sessions);
    TAILQ_INIT(&m->sops);
    TAILQ_INIT(&m->colds);
    TAILQ_INIT(&m->held);
    return m;
}

struct session_manager *
session_manager_free(struct session_manager *m)
{
    struct session *s;
    struct sop *op;
    struct cold *c;
    struct held *h;

    if (m == NULL) {
        return NULL;
    }
    m->freeing = true;
    /* Redis answers (or its own shutdown) still reach these: they find m == NULL. */
    while ((op = TAILQ_FIRST(&m->sops)) != NULL) {
        TAILQ_REMOVE(&m->sops, op, link);
        op->m = NULL;
    }
    while ((c = TAILQ_FIRST(&m->colds)) != NULL) {
        pool_wait_cancel(c->waiter);
        cold_free(c);
    }
    while ((h = TAILQ_FIRST(&m->held)) != NULL) {
        TAILQ_REMOVE(&m->held, h, link);
        free(h);
    }
    /* Containers stay (the pools are freed next); only the objects go. */
    while ((s = TAILQ_FIRST(&m->sessions)) != NULL) {
        session_destroy(s);
    }
    hashmap_free(m->by_id);
    hashmap_free_with(m->takes, free);
    hashmap_free_with(m->askers, free);
    store_sessions_free(m->store);
    free(m->unmatched);
    free(m->pstats);
    free(m);
    return NULL;
}
