/* Executions: starting one, the kernel's output, artifacts and done, the deadline, the grace
 * period, interrupts and restarts.
 *
 * Phases: RUNNING -> (deadline) INTERRUPTED: KeyboardInterrupt sent; the namespace survives if
 * the code stops -> (grace, the profile's interrupt_grace_ms) RESTARTING: the kernel kills its
 * worker; the namespace is lost -> (engine.timeout_ms) the sandbox is declared lost and the
 * session ends. The kernel's "done" ends every phase; result_classify() turns its status and the
 * phase into the API status and whether state was preserved.
 *
 * An execution is answered exactly once (execution_finish(), idempotent through s->exec) and
 * freed right after its observer's on_done returns. Nothing here writes the audit log: the
 * "execution.started" and "execution.finished" events go to the manager's audit callback. */
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "egress/proxy.h"
#include "kernel/kernel.h"
#include "pool/pool.h"
#include "session-internal.h"
#include "store/redis.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/time.h"
#include "util/utf8.h"

static void execution_finish(struct execution *x);
static void execution_free(struct execution *x);

static json_t *
error_json(const char *name, const char *value, size_t value_len)
{
    return OOM_CHECK(
        json_pack("{s:s, s:s%, s:[]}", "name", name, "value", value, value_len, "traceback"));
}

void
execution_end(struct execution *x, enum session_exec_status status, const char *name,
              const char *why)
{
    x->status = status;
    x->ended = true;
    x->state_preserved = false;
    json_decref(x->error);
    x->error = error_json(name, why, strlen(why));
    execution_finish(x);
}

void
execution_abort(struct execution *x, const char *name, const char *why)
{
    execution_end(x, SESSION_EXEC_ERROR, name, why);
}

void
execution_disconnected(struct execution *x)
{
    execution_abort(x, "SandboxDisconnected",
                    "the connection to the sandbox broke while this ran (its container "
                    "stopped, or the engine restarted); the output is incomplete. The session "
                    "goes on if its container still runs, and ends otherwise");
}

/* ---- kernel events --------------------------------------------------------------------------- */

void
execution_on_output(struct session *s, const char *exec_id, bool to_stderr, const char *text,
                    size_t len)
{
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

/* The kernel's error object again, from its checked parts. */
static json_t *
kernel_error_json(const struct kernel_done_error *e)
{
    json_t *o = OOM_CHECK(json_pack("{s:s%, s:s%, s:O}", "name", e->name, e->name_len, "value",
                                    e->value, e->value_len, "traceback", e->traceback));

    if (e->line >= 0) {
        (void)json_object_set_new(o, "line", OOM_CHECK(json_integer(e->line)));
    }
    if (e->column >= 0) {
        (void)json_object_set_new(o, "column", OOM_CHECK(json_integer(e->column)));
    }
    return o;
}

/* Takes the typed done's members into x. */
static void
execution_take_done(struct execution *x, const struct kernel_done *d)
{
    struct result res;

    result_classify(d, x->phase, x->cause, x->epoch0, x->s->rec.epoch, &res);
    x->status = res.status;
    x->ended = true;
    x->state_preserved = res.state_preserved;
    json_decref(x->error);
    x->error = NULL;
    if (res.error == RESULT_ERROR_DIED) {
        x->error = error_json("KernelDied", res.error_value, strlen(res.error_value));
    } else if (res.error == RESULT_ERROR_REJECTED) {
        x->error = error_json("Rejected", res.error_value, strlen(res.error_value));
    } else if (d->has_error) {
        x->error = kernel_error_json(&d->error);
    }
    if (d->result != NULL) {
        x->result = OOM_CHECK(json_stringn(d->result, d->result_len));
    }
    json_decref(x->mime);
    x->mime = json_incref(d->mime);
    if (d->has_exit_code) {
        x->exit_code = d->exit_code;
    }
    x->kernel_done = true;
    x->truncated[0] = d->truncated[0];
    x->truncated[1] = d->truncated[1];
    x->has_resources = d->has_resources;
    x->cpu_ms = d->cpu_ms;
    x->peak_memory_bytes = d->peak_memory_bytes;
}

void
execution_on_done(struct session *s, const struct kernel_msg *m)
{
    struct execution *x = s->exec;

    if (x == NULL || strcmp(m->id, x->id) != 0) {
        return;
    }
    if (s->state == SESSION_ENDING) {
        /* Interrupted because the session is ending: say so, whatever the kernel saw. */
        execution_abort(x, "SessionEnded", "the session ended while this was running");
        return;
    }
    execution_take_done(x, &m->done);
    if (json_is_object(json_object_get(m->obj, "snapshot"))) {
        x->snapshot = json_incref(json_object_get(m->obj, "snapshot"));
    }
    execution_finish(x);
    session_touch(s);
}

void
execution_on_artifact(struct session *s, const struct kernel_msg *m)
{
    struct execution *x = s->exec;
    json_t *entry;

    if (x == NULL || strcmp(m->id, x->id) != 0 || json_array_size(x->artifacts) >= MAX_ARTIFACTS) {
        return;
    }
    entry = OOM_CHECK(json_pack("{s:s, s:s, s:I, s:s}", "path", m->path, "mime", m->mime, "size",
                                (json_int_t)m->size, "sha256", m->sha256));
    (void)json_array_append(x->artifacts, entry);
    if (!x->detached && x->obs.on_artifact != NULL) {
        json_t *shown = entry;

        if (m->data != NULL) { /* for the observer only: the execution keeps no bytes */
            shown = OOM_CHECK(json_copy(entry));
            (void)json_object_set_new(shown, "data", OOM_CHECK(json_string(m->data)));
            json_decref(entry);
        }
        x->obs.on_artifact(x, shown, x->userdata);
        entry = shown;
    }
    json_decref(entry);
}

/* ---- deadline, grace, interrupt -------------------------------------------------------------- */

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

/* ---- the end --------------------------------------------------------------------------------- */

/* Counts, records and audits an ended execution (status and duration are set). */
static void
execution_record(struct execution *x)
{
    struct session *s = x->s;
    struct session_manager *m = s->m;
    struct session_audit a = {
        .kind = SESSION_AUDIT_EXEC_FINISHED,
        .actor = x->orphan ? "daemon" : x->actor,
        .tenant = s->rec.tenant,
        .session = s->rec.id,
        .execution = x->id,
        .code_sha256 = x->code_sha256,
        .code_bytes = x->code_bytes,
        .status = x->status,
        .duration_ms = x->duration_ms,
        .epoch = s->rec.epoch,
        .orphan = x->orphan,
    };
    size_t i;

    if (m->freeing) {
        /* The daemon exits with the execution still running: it is not over, and the next
         * start reports it (as an orphan). */
        return;
    }
    if (!x->orphan) {
        /* (An orphan was started by a previous daemon, or before a reconnection: its code is
         * not known here, and it is not counted.) */
        m->stats.executions_ended[x->status]++;
        i = manager_profile_index(m, s->profile->name);
        if (i < m->n_pools) {
            metrics_hist_observe(&m->pstats[i].execution, time_now_us() - x->started_us);
        }
        if (!x->internal) {
            history_push(x);
        }
    }
    manager_audit(m, &a);
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
    if (!x->ended) {
        x->status = SESSION_EXEC_ERROR;
    }
    s->exec = NULL;
    if (s->kernel != NULL) {
        kernel_pause(s->kernel, false); /* a paused stream must not outlive its execution */
    }
    if (x->orphan) {
        /* Nobody waits for its answer: the log is where it is reported. */
        char msg[160];

        (void)snprintf(msg, sizeof(msg), "execution %s, whose client was lost, ended: %s%s", x->id,
                       session_exec_status_to_string(x->status),
                       x->state_preserved ? ", variables kept" : ", the namespace restarted");
        manager_notify(s->m, "execution", &s->rec, msg);
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
    json_decref(x->mime);
    json_decref(x->snapshot);
    json_decref(x->restored);
    json_decref(x->error);
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
    x->cpu_ms = x->peak_memory_bytes = -1;
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
void
execution_orphan(struct session *s, const char *id)
{
    struct execution *x = execution_alloc(s);

    (void)snprintf(x->id, sizeof(x->id), "%s", id);
    x->detached = true;
    x->orphan = true;
    s->exec = x;
    (void)execution_interrupt(x, CAUSE_CLIENT);
}

/* ---- starting -------------------------------------------------------------------------------- */

static int
execute_check(struct session *s, const struct exec_req *req, struct err *reterr)
{
    const struct cfg_tenant *t;

    if (s->state == SESSION_ENDING) {
        return err_set(reterr, -ENOENT, "the session is ending");
    }
    if (s->exec != NULL) {
        return err_set(reterr, -EBUSY, "an execution is already running in this session");
    }
    /* A hibernation's save and a wake's restore run in those states (no client's call does). */
    if (s->state != SESSION_READY &&
        !(req->internal && (s->state == SESSION_HIBERNATING || s->state == SESSION_WAKING))) {
        return err_set(reterr, -ENOTCONN,
                       "the connection to the sandbox broke (engine restart?); retry shortly");
    }
    t = cfg_tenant_find(s->m->cfg, s->rec.tenant);
    if (t != NULL && t->max_running > 0 && manager_tenant_running(s->m, t->id) >= t->max_running) {
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
    return 0;
}

int
session_execute(struct session *s, const struct exec_req *req, const struct exec_observer *obs,
                void *userdata, bool collect, struct execution **ret, struct err *reterr)
{
    struct execution *x;
    struct timeval tv;
    int r = execute_check(s, req, reterr);

    if (r < 0) {
        return r;
    }
    x = execution_alloc(s);
    random_hex(x->id, 16);
    x->is_cmd = req->code == NULL;
    x->internal = req->internal;
    if (!req->internal && s->restored != NULL && !s->restored_told) {
        x->restored = json_incref(s->restored);
        s->restored_told = true;
    }
    x->collect = collect;
    x->obs = *obs;
    x->userdata = userdata;
    x->timeout_s = req->timeout_s ? req->timeout_s : s->profile->exec_timeout_s;
    r = x->is_cmd ? kernel_cmd(s->kernel, x->id, req->argv, s->profile->max_output_bytes, req->opts)
                  : kernel_exec(s->kernel, x->id, req->code, req->code_len,
                                s->profile->max_output_bytes, req->opts);
    if (r < 0) {
        execution_free(x);
        return err_set(reterr, r == -ENOBUFS ? -EMSGSIZE : -EPIPE,
                       r == -ENOBUFS ? "the code is too large for the sandbox's input queue"
                                     : "the sandbox is not reachable");
    }
    x->started_us = time_now_us();
    x->started_wall_ms = time_wall_ms();
    if (pool_slot_gate(s->slot) != NULL && !req->internal) {
        egress_gate_execution(pool_slot_gate(s->slot)); /* its byte budget starts again */
    }
    execution_set_code(x, req);
    if (req->actor != NULL) {
        (void)snprintf(x->actor, sizeof(x->actor), "%s", req->actor);
    } else {
        (void)tenant_actor(s->rec.tenant, x->actor, sizeof(x->actor));
    }
    time_tv_from_ms(&tv, (uint64_t)x->timeout_s * 1000u);
    (void)evtimer_add(x->deadline, &tv);
    s->exec = x;
    s->m->stats.executions_total++;
    session_touch(s);
    manager_audit(s->m, &(struct session_audit){
                            .kind = SESSION_AUDIT_EXEC_STARTED,
                            .actor = x->actor,
                            .tenant = s->rec.tenant,
                            .session = s->rec.id,
                            .execution = x->id,
                            .is_cmd = x->is_cmd,
                            .code_sha256 = x->code_sha256,
                            .code_bytes = x->code_bytes,
                            .timeout_s = x->timeout_s,
                        });
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

const char *
execution_id(const struct execution *x)
{
    return x->id;
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

void
restarts_answer(struct session *s, int r, const char *why)
{
    struct session_restart *w;
    struct err e = {0};

    if (s->restart_timer != NULL) {
        (void)event_del(s->restart_timer);
    }
    if (r < 0) {
        (void)err_set(&e, r, "%s", why);
    }
    while ((w = TAILQ_FIRST(&s->restarts)) != NULL) {
        TAILQ_REMOVE(&s->restarts, w, link);
        w->cb(r, s->rec.epoch, r < 0 ? &e : NULL, w->userdata);
        free(w);
    }
}

void
session_on_restart_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;

    restarts_answer(s, -ETIMEDOUT, "the kernel did not confirm the restart in time");
    if (s->exec != NULL && s->exec->phase == PH_RESTARTING) {
        /* The execution the restart was to end cannot be bounded otherwise. */
        session_lost(s, "the sandbox stopped answering: no reply to a restart");
    }
}

/* Sends the restart (the first waiter's): a running execution ends as interrupted, its
 * namespace gone; the grace timer an interrupt armed gives way to the restart's bound. */
static int
restart_send(struct session *s)
{
    struct timeval tv;

    if (kernel_restart(s->kernel, RESTART_REASON) < 0) {
        return -EPIPE;
    }
    if (s->exec != NULL && s->exec->phase != PH_RESTARTING) {
        s->exec->cause = CAUSE_CLIENT;
        execution_restarting(s->exec);
    }
    time_tv_from_ms(&tv, s->m->cfg->engine_timeout_ms);
    (void)evtimer_add(s->restart_timer, &tv);
    return 0;
}

int
session_restart(struct session *s, session_restart_cb *cb, void *userdata,
                struct session_restart **ret, struct err *reterr)
{
    struct session_restart *w;
    size_t n = 0;

    if (s->state == SESSION_ENDING) {
        return err_set(reterr, -ENOENT, "the session is ending");
    }
    if (s->state != SESSION_READY) {
        return err_set(reterr, -ENOTCONN,
                       "the connection to the sandbox broke (engine restart?); retry shortly");
    }
    TAILQ_FOREACH (w, &s->restarts, link) {
        n++;
    }
    if (n >= MAX_RESTART_WAITERS) {
        return err_set(reterr, -EBUSY, "too many restarts of this session are pending");
    }
    if (n == 0 && restart_send(s) < 0) {
        return err_set(reterr, -EPIPE, "the sandbox is not reachable");
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
