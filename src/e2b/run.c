/* Executions of E2B sandboxes (docs/e2b.md):
 *
 *   envd (49983)   POST /process.Process/Start       a command, as a Connect server stream:
 *                                                    start, data (base64, as printed),
 *                                                    keepalive while silent, end, then the
 *                                                    end-of-stream message
 *                  POST /process.Process/SendSignal  stops the command started with that pid
 *   code (49999)   POST /execute                     Python, as NDJSON lines, each flushed:
 *                                                    stdout, stderr, results, the error,
 *                                                    end_of_execution
 *                  GET, POST /contexts, DELETE /contexts/ID, POST /contexts/ID/restart
 *
 * Each is one execution of the sandbox's session (the kernel's cmd or exec): code and commands
 * of one sandbox run one at a time, so a run that finds the sandbox busy waits, retrying every
 * RETRY_MS, for as long as it could run. A client that hangs up interrupts its run (the
 * variables stay). Contexts are namespaces of the sandbox's interpreter (the kernel's ctx),
 * listed in the sandbox's record. */
#include <assert.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#define LOG_MODULE "e2b"
#include "e2b/e2b-internal.h"
#include "e2b/wire.h"
#include "files/files.h"
#include "kernel/proto.h"
#include "log/log.h"
#include "session/session.h"
#include "stream/out.h"
#include "util/macro.h"
#include "util/parse.h"
#include "util/random.h"
#include "util/time.h"

#define RETRY_MS          25u
#define KEEPALIVE_DEFAULT 90u /* envd's, when the client names none */
#define START_MSG_MAX     (1u << 20)

static void run_try(struct e2b_run *r);
static void wake_next(const struct http *a, const char *session);

static void
run_set(struct e2b_run *r, enum e2b_run_state to)
{
    /* WAITING (for a busy sandbox, retried) -> RUNNING -> OVER; a run freed while it waits goes
     * straight to OVER; nothing leaves OVER. */
    static const unsigned next[] = {
        [RUN_WAITING] = 1u << RUN_WAITING | 1u << RUN_RUNNING | 1u << RUN_OVER,
        [RUN_RUNNING] = 1u << RUN_OVER,
        [RUN_OVER] = 0,
    };

    assert(r->state <= RUN_OVER && to <= RUN_OVER && (next[r->state] & (1u << to)));
    r->state = to;
    if (to != RUN_WAITING) {
        http_waiting_leave(r->a->waiting, &r->wait); /* it waits no more */
    }
}

struct session *
e2b_run_session(const struct e2b_run *r)
{
    return session_find(r->a->backend->sessions, r->tenant, r->session);
}

static void
run_free(struct e2b_run *r)
{
    run_set(r, RUN_OVER);
    TAILQ_REMOVE(&e2b_room(r->a)->runs, r, link);
    http_pending_end(&r->pending);
    if (r->timer != NULL) {
        event_free(r->timer);
    }
    free(r->code);
    json_decref(r->argv);
    json_decref(r->env);
    free(r);
}

/* The client went away: its run is interrupted (when it still runs) and forgotten. */
static void
on_gone(struct http_pending *p)
{
    struct e2b_run *r = container_of(p, struct e2b_run, pending);
    struct session *s = e2b_run_session(r);

    if (r->out != NULL) {
        stream_out_abandon(r->out);
        r->out = NULL;
    }
    if (r->x != NULL) {
        const char *running = NULL;

        if (s != NULL && r->kind != RUN_DROP &&
            session_interrupt(s, &running, &(struct err){0}) == 0) {
            log_info("e2b run interrupted session=%s: its client went away", r->session);
        }
        execution_detach(r->x);
        r->x = NULL;
    }
    run_free(r);
}

struct e2b_run *
e2b_run_new(struct http *a, struct evhttp_request *req, struct e2b_target *t,
            enum e2b_run_kind kind)
{
    struct e2b_run *r = xcalloc(1, sizeof(*r));

    r->a = a;
    r->kind = kind;
    (void)snprintf(r->tenant, sizeof(r->tenant), "%s", session_tenant(t->s));
    (void)snprintf(r->session, sizeof(r->session), "%s", session_id(t->s));
    r->timeout_s = session_profile(t->s)->exec_timeout_s;
    /* What it will hold while it waits: at most its request's body (parsed into code, argv, env;
     * the body itself is let go), and 1 KiB for the rest. */
    r->bytes = 1024u + evbuffer_get_length(evhttp_request_get_input_buffer(req));
    TAILQ_INSERT_TAIL(&e2b_room(a)->runs, r, link);
    http_pending_start(&r->pending, req, on_gone);
    return r;
}

/* ---- sending --------------------------------------------------------------------------------- */

static void
on_drained(void *userdata)
{
    struct e2b_run *r = userdata;

    if (r->paused && r->x != NULL) {
        r->paused = false;
        execution_pause(r->x, false);
    }
}

static void
send_buffer(struct e2b_run *r, struct evbuffer *b)
{
    if (r->out != NULL && stream_out_send(r->out, b) && r->x != NULL && !r->paused) {
        r->paused = true;
        execution_pause(r->x, true);
    }
    evbuffer_free(b);
}

/* One Connect envelope of msg (stolen) with flags. */
static void
send_envelope(struct e2b_run *r, uint8_t flags, json_t *msg)
{
    char *text = OOM_CHECK(json_dumps(msg, JSON_COMPACT));
    struct buf out = BUF_INIT(strlen(text) + E2B_ENVELOPE_HEAD + 1);
    struct evbuffer *b = OOM_CHECK(evbuffer_new());

    if (e2b_envelope_write(&out, flags, text, strlen(text)) < 0 ||
        evbuffer_add(b, out.buf, out.len) < 0) {
        oom();
    }
    send_buffer(r, b);
    buf_done(&out);
    free(text);
    json_decref(msg);
}

/* One NDJSON line of msg (stolen). */
void
e2b_send_line(struct e2b_run *r, json_t *msg)
{
    char *text = OOM_CHECK(json_dumps(msg, JSON_COMPACT));
    struct evbuffer *b = OOM_CHECK(evbuffer_new());

    if (evbuffer_add(b, text, strlen(text)) < 0 || evbuffer_add(b, "\n", 1) < 0) {
        oom();
    }
    send_buffer(r, b);
    free(text);
    json_decref(msg);
}

/* The end of a streamed reply; r is freed. */
static void
run_end(struct e2b_run *r)
{
    struct stream_out *out = r->out;

    r->out = NULL;
    http_pending_end(&r->pending);
    run_free(r); /* first: the end may free the connection at once (stream/out.h) */
    if (out != NULL) {
        stream_out_end(out, false);
    }
}

static json_t *
now_json(void)
{
    char t[40];

    return OOM_CHECK(json_string(time_rfc3339(time_wall_ms(), t, sizeof(t))));
}

/* ---- the observer ---------------------------------------------------------------------------- */

static void
on_output(struct execution *x, bool to_stderr, const char *text, size_t len, void *userdata)
{
    struct e2b_run *r = userdata;

    r->spoke = true;
    if (r->kind == RUN_PROCESS) {
        size_t n = 4 * ((len + 2) / 3) + 1;
        char *b64 = xmalloc(n);

        (void)EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)text, (int)len);
        send_envelope(r, 0,
                      OOM_CHECK(json_pack("{s:{s:{s:s}}}", "event", "data",
                                          to_stderr ? "stderr" : "stdout", b64)));
        free(b64);
    } else if (r->kind == RUN_CODE) {
        e2b_send_line(
            r, OOM_CHECK(json_pack("{s:s, s:s%, s:o}", "type", to_stderr ? "stderr" : "stdout",
                                   "text", text, len, "timestamp", now_json())));
    }
}

static void
on_artifact(struct execution *x, json_t *entry, void *userdata)
{
    struct e2b_run *r = userdata;
    json_t *data = json_object_get(entry, "data");

    if (r->kind != RUN_CODE) {
        return;
    }
    if (data == NULL) { /* too large to come inline: named, as a file to download */
        e2b_send_line(r, OOM_CHECK(json_pack("{s:s, s:s+, s:b}", "type", "result", "text",
                                             "<image too large to show inline: /workspace/",
                                             json_string_value(json_object_get(entry, "path")), ">",
                                             "is_main_result", false)));
        return;
    }
    e2b_send_line(r, OOM_CHECK(json_pack("{s:s, s:O, s:s, s:b}", "type", "result", "png", data,
                                         "text", "<Figure>", "is_main_result", false)));
}

static void
done_process(struct e2b_run *r, const struct execution_result *res)
{
    int code = res->exit_code;
    char text[64];

    if (res->status == SESSION_EXEC_TIMEOUT) {
        send_envelope(
            r, E2B_ENVELOPE_END,
            OOM_CHECK(json_pack("{s:{s:s, s:s}}", "error", "code", "deadline_exceeded", "message",
                                "the command ran past its timeout and was "
                                "killed")));
        return;
    }
    if (code < 0) { /* it never ran */
        send_envelope(
            r, E2B_ENVELOPE_END,
            OOM_CHECK(json_pack("{s:{s:s, s:s}}", "error", "code", "internal", "message",
                                res->has_error ? res->error.value : "the command did not run")));
        return;
    }
    if (res->status == SESSION_EXEC_INTERRUPTED && code >= 128) {
        (void)snprintf(text, sizeof(text), "signal: killed");
        send_envelope(r, 0,
                      OOM_CHECK(json_pack("{s:{s:{s:i, s:b, s:s}}}", "event", "end", "exitCode", -1,
                                          "exited", false, "status", text)));
    } else {
        (void)snprintf(text, sizeof(text), "exit status %d", code);
        send_envelope(r, 0,
                      OOM_CHECK(json_pack("{s:{s:{s:i, s:b, s:s}}}", "event", "end", "exitCode",
                                          code, "exited", true, "status", text)));
    }
    send_envelope(r, E2B_ENVELOPE_END, OOM_CHECK(json_object()));
}

static void
on_done(struct execution *x, void *userdata)
{
    struct e2b_run *r = userdata;
    struct execution_result *res = execution_result_new(x);
    struct http *a = r->a;
    char session[SESSION_ID_MAX + 1];

    r->x = NULL;
    memcpy(session, r->session, sizeof(session));
    http_pending_log(&r->pending);
    if (r->kind == RUN_PROCESS) {
        done_process(r, res);
    } else if (r->kind == RUN_CODE) {
        e2b_code_done(r, res);
    } else if (r->pending.req != NULL) {
        e2b_code_dropped(r, res);
    }
    execution_result_free(res);
    run_end(r);
    wake_next(a, session); /* the execution is over: the next one may start */
    log_set_request(NULL);
}

static const struct exec_observer observer = {
    .on_output = on_output,
    .on_artifact = on_artifact,
    .on_done = on_done,
};

/* ---- starting -------------------------------------------------------------------------------- */

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct e2b_run *r = arg;
    struct timeval tv;

    if (r->state == RUN_WAITING) {
        run_try(r);
        return;
    }
    if (!r->spoke) {
        send_envelope(r, 0, OOM_CHECK(json_pack("{s:{s:{}}}", "event", "keepalive")));
    }
    r->spoke = false;
    time_tv_from_ms(&tv, (uint64_t)r->keepalive_s * 1000u);
    (void)evtimer_add(r->timer, &tv);
}

/* A streaming call's error before its stream began: Connect answers it with 200 and an
 * end-of-stream message holding the error (the SDK reads only that: a non-200 answer to a
 * stream loses the code and the message). */
static void
stream_error(struct evhttp_request *req, const char *code, const char *msg)
{
    json_t *end = OOM_CHECK(json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg));
    char *text = OOM_CHECK(json_dumps(end, JSON_COMPACT));
    struct buf out = BUF_INIT(strlen(text) + E2B_ENVELOPE_HEAD + 1);
    struct evbuffer *b = OOM_CHECK(evbuffer_new());

    if (e2b_envelope_write(&out, E2B_ENVELOPE_END, text, strlen(text)) < 0 ||
        evbuffer_add(b, out.buf, out.len) < 0) {
        oom();
    }
    (void)evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                            "application/connect+json");
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
    buf_done(&out);
    free(text);
    json_decref(end);
}

/* A run that could not start answers its error (a stream not begun yet). */
static void
run_refused(struct e2b_run *r, int err, const char *msg)
{
    if (r->pending.req != NULL && r->kind == RUN_PROCESS) {
        stream_error(r->pending.req, e2b_connect_code(err), msg);
    } else if (r->pending.req != NULL) {
        e2b_reply_error(r->pending.req, err == -ENOENT ? 502 : e2b_status_of(err), "%s", msg);
    }
    run_free(r);
}

/* The run is in: its reply starts. */
static void
run_started(struct e2b_run *r)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(r->pending.req);
    struct timeval tv;

    run_set(r, RUN_RUNNING);
    if (r->kind == RUN_DROP) {
        return;
    }
    (void)evhttp_add_header(h, "Content-Type",
                            r->kind == RUN_PROCESS ? "application/connect+json"
                                                   : "application/x-ndjson");
    (void)evhttp_add_header(h, "Cache-Control", "no-store");
    r->out = stream_out_start(r->pending.req, 200, "OK", on_drained, r);
    if (r->kind == RUN_PROCESS) {
        send_envelope(r, 0,
                      OOM_CHECK(json_pack("{s:{s:{s:i}}}", "event", "start", "pid", (int)r->pid)));
        time_tv_from_ms(&tv, (uint64_t)r->keepalive_s * 1000u);
        (void)evtimer_add(r->timer, &tv);
    }
}

/* The first run of this sandbox that waits, in the order they came; NULL when none does. */
static struct e2b_run *
first_waiting(const struct http *a, const char *session, unsigned *ret_count)
{
    struct e2b_run *r, *first = NULL;
    unsigned n = 0;

    TAILQ_FOREACH (r, &e2b_room(a)->runs, link) {
        if (r->state == RUN_WAITING && strcmp(r->session, session) == 0) {
            first = first != NULL ? first : r;
            n++;
        }
    }
    if (ret_count != NULL) {
        *ret_count = n;
    }
    return first;
}

/* A run of the sandbox ended: the first that waits tries now rather than at its next retry. */
static void
wake_next(const struct http *a, const char *session)
{
    struct e2b_run *next = first_waiting(a, session, NULL);

    if (next != NULL && next->timer != NULL) {
        event_active(next->timer, EV_TIMEOUT, 0);
    }
}

static void
retry_later(struct e2b_run *r)
{
    struct timeval tv;

    run_set(r, RUN_WAITING);
    time_tv_from_ms(&tv, RETRY_MS);
    (void)evtimer_add(r->timer, &tv);
}

static void
run_try(struct e2b_run *r)
{
    struct session *s = e2b_run_session(r);
    struct e2b_run *first = first_waiting(r->a, r->session, NULL);
    struct kernel_exec_opts o = {0};
    struct exec_req er = {.timeout_s = r->timeout_s, .opts = &o};
    struct err e = {0};
    int rc;

    if (s == NULL) {
        run_refused(r, -ENOENT, "the sandbox is not running");
        return;
    }
    if (first != NULL && first != r) { /* one that came earlier goes first */
        if (time_now_ms() >= r->give_up_ms) {
            run_refused(r, -EBUSY, "the sandbox ran other executions for as long as this may run");
            return;
        }
        retry_later(r);
        return;
    }
    if (r->kind == RUN_PROCESS) {
        er.argv = r->argv;
        o.cwd = r->cwd[0] ? r->cwd : NULL;
        o.env = r->env;
    } else {
        er.code = r->code ? r->code : "";
        er.code_len = r->code_len;
        o.env = r->env;
        o.ctx = r->ctx[0] ? r->ctx : NULL;
        o.drop = r->kind == RUN_DROP;
        o.rich = r->kind == RUN_CODE;
    }
    rc = session_execute(s, &er, &observer, r, false, &r->x, &e);
    if (rc == -EBUSY && time_now_ms() < r->give_up_ms) {
        retry_later(r);
        return;
    }
    if (rc < 0) {
        run_refused(r, rc, e.msg);
        return;
    }
    run_started(r);
}

/* Starts r: now, or once the sandbox's running execution ends. */
void
e2b_run_go(struct e2b_run *r)
{
    unsigned waiting;
    struct err e = {0};

    r->timer = OOM_CHECK(evtimer_new(r->a->base, on_timer, r));
    r->give_up_ms = time_now_ms() + (uint64_t)r->timeout_s * 1000u;
    (void)first_waiting(r->a, r->session, &waiting); /* r itself waits until it runs */
    if (waiting > E2B_WAITING_MAX) {
        run_refused(r, -EDQUOT, "too many executions of this sandbox wait already; retry later");
        return;
    }
    if (http_waiting_enter(r->a->waiting, &r->wait, r->tenant, r->session, r->bytes, 0, &e) < 0) {
        run_refused(r, -EDQUOT, e.msg);
        return;
    }
    run_try(r);
}

void
e2b_runs_count(const struct http *a, unsigned *ret_running, unsigned *ret_waiting)
{
    const struct e2b_run *r;

    *ret_running = *ret_waiting = 0;
    TAILQ_FOREACH (r, &e2b_room(a)->runs, link) {
        *ret_running += r->state == RUN_RUNNING;
        *ret_waiting += r->state == RUN_WAITING;
    }
}

/* ---- process.Process ------------------------------------------------------------------------- */

static unsigned
header_uint(struct evhttp_request *req, const char *name, unsigned fallback)
{
    const char *v = evhttp_find_header(evhttp_request_get_input_headers(req), name);
    uint64_t n;

    return v != NULL && parse_u64(v, &n) == 0 && n <= UINT32_MAX ? (unsigned)n : fallback;
}

/* A command's working directory into out ("" the workspace): E2B's paths map onto the workspace;
 * any other absolute directory is taken as it is (a working directory confines nothing: the
 * command may cd anywhere its user can; one that does not exist fails the command). */
static bool
command_cwd(const char *cwd, char out[FILES_PATH_MAX + 1], struct err *reterr)
{
    char mapped[FILES_PATH_MAX + 1];

    out[0] = '\0';
    if (cwd == NULL || cwd[0] == '\0') {
        return true;
    }
    if (strlen(cwd) > FILES_PATH_MAX) {
        (void)err_set(reterr, -EINVAL, "'process.cwd' is too long");
        return false;
    }
    if (e2b_path_map(cwd, mapped, sizeof(mapped), reterr) < 0) {
        memcpy(out, cwd, strlen(cwd) + 1); /* absolute, outside the workspace */
        return true;
    }
    return http_request_file_path(mapped, strlen(mapped), true, out, FILES_PATH_MAX + 1, reterr) ==
           0;
}

/* The pid a process is told it has: random, so that one node-wide count tells no tenant how
 * many commands the others run (SendSignal finds the process by it and its sandbox). */
static unsigned
random_pid(void)
{
    return 1000u + random_u32() % 2000000000u;
}

static void
process_start(struct http *a, struct evhttp_request *req, struct e2b_target *t)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in), msg_len;
    const char *msg;
    char mapped[FILES_PATH_MAX + 1];
    struct e2b_start st = {0};
    struct err e = {0};
    struct e2b_run *r;
    uint8_t flags;
    unsigned ms;
    json_t *body;

    if (e2b_envelope_parse((const char *)evbuffer_pullup(in, -1), len, START_MSG_MAX, &flags, &msg,
                           &msg_len, &e) < 0) {
        stream_error(req, "invalid_argument", e.msg);
        return;
    }
    body = json_loadb(msg, msg_len, 0, NULL);
    if (e2b_start_parse(body, &st, &e) < 0 || !command_cwd(st.cwd, mapped, &e)) {
        stream_error(req, "invalid_argument", body == NULL ? "the message is not JSON" : e.msg);
        json_decref(st.argv);
        json_decref(body);
        return;
    }
    r = e2b_run_new(a, req, t, RUN_PROCESS);
    r->argv = st.argv;
    r->env = e2b_sandbox_env(&t->ext);
    if (st.envs != NULL) { /* the command's own variables win over the sandbox's */
        if (r->env == NULL) {
            r->env = OOM_CHECK(json_object());
        }
        (void)json_object_update(r->env, st.envs);
    }
    (void)snprintf(r->cwd, sizeof(r->cwd), "%s", mapped);
    json_decref(body);
    (void)evbuffer_drain(in, len); /* parsed: not kept while the run waits */
    ms = header_uint(req, "Connect-Timeout-Ms", 0);
    if (ms > 0) {
        r->timeout_s = MIN(r->timeout_s, MAX(1u, (ms + 999u) / 1000u));
    }
    r->keepalive_s = MAX(1u, header_uint(req, "Keepalive-Ping-Interval", KEEPALIVE_DEFAULT));
    r->pid = random_pid();
    e2b_room(a)->stats.runs_process++;
    e2b_run_go(r);
}

static void
process_signal(struct http *a, struct evhttp_request *req, struct e2b_target *t)
{
    json_t *msg = e2b_body_json(req);
    json_int_t pid;
    struct e2b_run *r;
    const char *id = NULL;

    if (msg == NULL) {
        return;
    }
    pid = json_integer_value(json_object_get(json_object_get(msg, "process"), "pid"));
    json_decref(msg);
    TAILQ_FOREACH (r, &e2b_room(a)->runs, link) {
        if (r->kind == RUN_PROCESS && r->x != NULL && (json_int_t)r->pid == pid &&
            strcmp(r->session, session_id(t->s)) == 0) {
            break;
        }
    }
    if (r == NULL || session_interrupt(t->s, &id, &(struct err){0}) < 0) {
        e2b_reply_connect_error(req, "not_found", "no process %lld runs in this sandbox",
                                (long long)pid);
        return;
    }
    http_reply_json_new(req, 200, OOM_CHECK(json_object()));
}

void
e2b_process(struct http *a, struct evhttp_request *req, struct e2b_target *t, const char *method)
{
    if (strcmp(method, "Start") == 0) {
        process_start(a, req, t);
    } else if (strcmp(method, "SendSignal") == 0) {
        process_signal(a, req, t);
    } else {
        e2b_reply_connect_error(req, "unimplemented", "process.Process/%.64s is not supported here",
                                method);
    }
}
