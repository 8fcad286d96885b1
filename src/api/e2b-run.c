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
#include "api/e2b-internal.h"
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
#define DEFAULT_CONTEXT   "default"

enum run_kind {
    RUN_PROCESS, /* process.Process/Start */
    RUN_CODE,    /* /execute */
    RUN_DROP,    /* a context deleted or restarted: its namespace forgotten */
};

/* A run's life: waiting for the sandbox (busy), running, over (freed). */
enum run_state {
    RUN_WAITING,
    RUN_RUNNING,
    RUN_OVER,
};

struct e2b_run {
    TAILQ_ENTRY(e2b_run) link; /* the api's runs */
    struct api *a;
    struct evhttp_request *req; /* NULL once the client went away */
    struct evhttp_connection *conn;
    enum run_kind kind;
    enum run_state state; /* set by run_set() only */
    char tenant[65], session[SESSION_ID_MAX + 1];
    char request[LOG_REQUEST_ID_MAX + 1];
    struct execution *x;
    struct stream_out *out;
    struct event *timer; /* the busy retry, then the keepalive */
    uint64_t give_up_ms; /* monotonic: a busy wait ends here */
    unsigned timeout_s, keepalive_s;
    bool spoke; /* data went out since the last keepalive */
    bool paused;
    unsigned pid;
    bool delete_ctx; /* RUN_DROP: the context goes from the record too */
    /* the request */
    char *code;
    size_t code_len;
    json_t *argv, *env;
    char cwd[FILES_PATH_MAX + 1];
    char ctx[E2B_CONTEXT_ID_LEN + 1]; /* "" the default context */
};

static void run_try(struct e2b_run *r);

static void
run_set(struct e2b_run *r, enum run_state to)
{
    r->state = to;
}

static struct session *
run_session(const struct e2b_run *r)
{
    return session_find(r->a->backend->sessions, r->tenant, r->session);
}

static void
run_free(struct e2b_run *r)
{
    run_set(r, RUN_OVER);
    TAILQ_REMOVE(&r->a->e2b_runs, r, link);
    if (r->req != NULL) {
        evhttp_connection_set_closecb(r->conn, NULL, NULL);
    }
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
on_close(struct evhttp_connection *conn, void *arg)
{
    struct e2b_run *r = arg;
    struct session *s = run_session(r);

    if (r->req != NULL && evhttp_request_get_connection(r->req) == NULL) {
        evhttp_request_free(r->req);
    }
    r->req = NULL;
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

static struct e2b_run *
run_new(struct api *a, struct evhttp_request *req, struct e2b_target *t, enum run_kind kind)
{
    struct e2b_run *r = xcalloc(1, sizeof(*r));

    r->a = a;
    r->req = req;
    r->conn = evhttp_request_get_connection(req);
    r->kind = kind;
    (void)snprintf(r->tenant, sizeof(r->tenant), "%s", session_tenant(t->s));
    (void)snprintf(r->session, sizeof(r->session), "%s", session_id(t->s));
    (void)snprintf(r->request, sizeof(r->request), "%s", log_request() ? log_request() : "");
    r->timeout_s = session_profile(t->s)->exec_timeout_s;
    TAILQ_INSERT_TAIL(&a->e2b_runs, r, link);
    evhttp_connection_set_closecb(r->conn, on_close, r);
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
static void
send_line(struct e2b_run *r, json_t *msg)
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
    if (r->req != NULL) {
        evhttp_connection_set_closecb(r->conn, NULL, NULL);
        r->req = NULL;
    }
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
        send_envelope(r, 0, OOM_CHECK(json_pack("{s:{s:{s:s}}}", "event", "data",
                                                to_stderr ? "stderr" : "stdout", b64)));
        free(b64);
    } else if (r->kind == RUN_CODE) {
        send_line(r, OOM_CHECK(json_pack("{s:s, s:s%, s:o}", "type",
                                         to_stderr ? "stderr" : "stdout", "text", text, len,
                                         "timestamp", now_json())));
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
        send_line(r, OOM_CHECK(json_pack("{s:s, s:s+, s:b}", "type", "result", "text",
                                         "<image too large to show inline: /workspace/",
                                         json_string_value(json_object_get(entry, "path")), ">",
                                         "is_main_result", false)));
        return;
    }
    send_line(r, OOM_CHECK(json_pack("{s:s, s:O, s:s, s:b}", "type", "result", "png", data,
                                     "text", "<Figure>", "is_main_result", false)));
}

/* E2B's traceback is one string. */
static json_t *
traceback_text(json_t *lines)
{
    struct buf b = BUF_INIT(1 << 20);
    json_t *v, *s;
    size_t i;

    json_array_foreach (lines, i, v) {
        const char *line = json_string_value(v);
        size_t n = json_string_length(v);

        /* Past the bound the rest is left out (the kernel cuts tracebacks far below it). */
        if (buf_append(&b, line, n) < 0 ||
            ((n == 0 || line[n - 1] != '\n') && buf_append(&b, "\n", 1) < 0)) {
            break;
        }
    }
    s = OOM_CHECK(json_stringn(b.buf ? b.buf : "", b.len));
    buf_done(&b);
    return s;
}

/* The main result: the value's repr (surrounding quotes stripped, as E2B does) and its rich
 * representations. */
static json_t *
result_line(json_t *result, json_t *mime)
{
    json_t *o = OOM_CHECK(json_pack("{s:s, s:b}", "type", "result", "is_main_result", true));
    const char *text = json_string_value(result), *key;
    size_t n = json_string_length(result);
    json_t *v;

    if (text != NULL) {
        if (n >= 2 && (text[0] == '\'' || text[0] == '"') && text[n - 1] == text[0]) {
            text++;
            n -= 2;
        }
        (void)json_object_set_new(o, "text", OOM_CHECK(json_stringn(text, n)));
    }
    json_object_foreach (mime, key, v) {
        (void)json_object_set(o, e2b_result_key(key), v);
    }
    return o;
}

static void
done_process(struct e2b_run *r, json_t *exec)
{
    const char *status = json_string_value(json_object_get(exec, "status"));
    json_int_t code = json_integer_value(json_object_get(exec, "exit_code"));
    char text[64];

    if (strcmp(status, "timeout") == 0) {
        send_envelope(r, E2B_ENVELOPE_END,
                      OOM_CHECK(json_pack("{s:{s:s, s:s}}", "error", "code", "deadline_exceeded",
                                          "message", "the command ran past its timeout and was "
                                                     "killed")));
        return;
    }
    if (json_is_null(json_object_get(exec, "exit_code"))) { /* it never ran */
        json_t *error = json_object_get(exec, "error");

        send_envelope(r, E2B_ENVELOPE_END,
                      OOM_CHECK(json_pack("{s:{s:s, s:s}}", "error", "code", "internal", "message",
                                          json_is_object(error)
                                              ? json_string_value(json_object_get(error, "value"))
                                              : "the command did not run")));
        return;
    }
    if (strcmp(status, "interrupted") == 0 && code >= 128) {
        (void)snprintf(text, sizeof(text), "signal: killed");
        send_envelope(r, 0, OOM_CHECK(json_pack("{s:{s:{s:i, s:b, s:s}}}", "event", "end",
                                                "exitCode", -1, "exited", false, "status", text)));
    } else {
        (void)snprintf(text, sizeof(text), "exit status %lld", (long long)code);
        send_envelope(r, 0, OOM_CHECK(json_pack("{s:{s:{s:I, s:b, s:s}}}", "event", "end",
                                                "exitCode", code, "exited", true, "status", text)));
    }
    send_envelope(r, E2B_ENVELOPE_END, OOM_CHECK(json_object()));
}

static void
done_code(struct e2b_run *r, struct execution *x, json_t *exec)
{
    json_t *result = json_object_get(exec, "result"), *error = json_object_get(exec, "error");
    json_t *mime = execution_mime(x);

    if (json_is_string(result) || json_object_size(mime) > 0) {
        send_line(r, result_line(result, mime));
    }
    if (json_is_object(error)) {
        send_line(r, OOM_CHECK(json_pack("{s:s, s:O, s:O, s:o}", "type", "error", "name",
                                         json_object_get(error, "name"), "value",
                                         json_object_get(error, "value"), "traceback",
                                         traceback_text(json_object_get(error, "traceback")))));
    }
    send_line(r, OOM_CHECK(json_pack("{s:s}", "type", "end_of_execution")));
}

static void
on_dropped(struct e2b_run *r, json_t *exec)
{
    struct session *s = run_session(r);
    struct e2b_ext x;
    struct err e = {0};
    int i;

    if (strcmp(json_string_value(json_object_get(exec, "status")), "ok") != 0) {
        e2b_reply_error(r->req, 500, "the context's namespace could not be cleared");
        return;
    }
    if (r->delete_ctx && s != NULL && e2b_ext_decode(session_ext(s), &x) == 0 &&
        (i = e2b_ext_context(&x, r->ctx)) >= 0) {
        memmove(x.contexts[i], x.contexts[i + 1],
                (x.n_contexts - (unsigned)i - 1) * sizeof(x.contexts[0]));
        x.n_contexts--;
        if (e2b_ext_save(s, &x, &e) < 0) {
            e2b_reply_error(r->req, e2b_status_of(e.code), "%s", e.msg);
            return;
        }
    }
    evhttp_send_reply(r->req, 204, "No Content", NULL);
}

static void
on_done(struct execution *x, void *userdata)
{
    struct e2b_run *r = userdata;
    json_t *exec = execution_to_json(x, false);

    r->x = NULL;
    log_set_request(r->request);
    if (r->kind == RUN_PROCESS) {
        done_process(r, exec);
    } else if (r->kind == RUN_CODE) {
        done_code(r, x, exec);
    } else if (r->req != NULL) {
        on_dropped(r, exec);
    }
    json_decref(exec);
    run_end(r);
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

/* A run that could not start answers its error (a stream not begun yet). */
static void
run_refused(struct e2b_run *r, int err, const char *msg)
{
    if (r->req != NULL && r->kind == RUN_PROCESS) {
        e2b_reply_connect_error(r->req, e2b_connect_code(err), "%s", msg);
    } else if (r->req != NULL) {
        e2b_reply_error(r->req, err == -ENOENT ? 502 : e2b_status_of(err), "%s", msg);
    }
    run_free(r);
}

/* The run is in: its reply starts. */
static void
run_started(struct e2b_run *r)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(r->req);
    struct timeval tv;

    run_set(r, RUN_RUNNING);
    if (r->kind == RUN_DROP) {
        return;
    }
    (void)evhttp_add_header(h, "Content-Type", r->kind == RUN_PROCESS ? "application/connect+json"
                                                                       : "application/x-ndjson");
    (void)evhttp_add_header(h, "Cache-Control", "no-store");
    r->out = stream_out_start(r->req, 200, "OK", on_drained, r);
    if (r->kind == RUN_PROCESS) {
        send_envelope(r, 0, OOM_CHECK(json_pack("{s:{s:{s:i}}}", "event", "start", "pid",
                                                (int)r->pid)));
        time_tv_from_ms(&tv, (uint64_t)r->keepalive_s * 1000u);
        (void)evtimer_add(r->timer, &tv);
    }
}

static void
run_try(struct e2b_run *r)
{
    struct session *s = run_session(r);
    struct kernel_exec_opts o = {0};
    struct exec_req er = {.timeout_s = r->timeout_s, .opts = &o};
    struct err e = {0};
    int rc;

    if (s == NULL) {
        run_refused(r, -ENOENT, "the sandbox is not running");
        return;
    }
    if (r->kind == RUN_PROCESS) {
        er.argv = r->argv;
        o.cwd = r->cwd[0] ? r->cwd : NULL;
        o.env = r->env;
    } else {
        er.code = r->code ? r->code : "";
        er.code_len = r->code_len;
        o.ctx = r->ctx[0] ? r->ctx : NULL;
        o.drop = r->kind == RUN_DROP;
        o.rich = r->kind == RUN_CODE;
    }
    rc = session_execute(s, &er, &observer, r, false, &r->x, &e);
    if (rc == -EBUSY && time_now_ms() < r->give_up_ms) {
        struct timeval tv;

        run_set(r, RUN_WAITING);
        time_tv_from_ms(&tv, RETRY_MS);
        (void)evtimer_add(r->timer, &tv);
        return;
    }
    if (rc < 0) {
        run_refused(r, rc, e.msg);
        return;
    }
    run_started(r);
}

/* Starts r: now, or once the sandbox's running execution ends. */
static void
run_go(struct e2b_run *r)
{
    r->timer = OOM_CHECK(evtimer_new(r->a->base, on_timer, r));
    r->give_up_ms = time_now_ms() + (uint64_t)r->timeout_s * 1000u;
    run_try(r);
}

void
e2b_runs_count(const struct api *a, unsigned *ret_running, unsigned *ret_waiting)
{
    const struct e2b_run *r;

    *ret_running = *ret_waiting = 0;
    TAILQ_FOREACH (r, &a->e2b_runs, link) {
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

static void
process_start(struct api *a, struct evhttp_request *req, struct e2b_target *t)
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

    if (e2b_envelope_parse((const char *)evbuffer_pullup(in, -1), len, START_MSG_MAX, &flags,
                           &msg, &msg_len, &e) < 0) {
        e2b_reply_connect_error(req, "invalid_argument", "%s", e.msg);
        return;
    }
    body = json_loadb(msg, msg_len, 0, NULL);
    if (e2b_start_parse(body, &st, &e) < 0 ||
        (st.cwd != NULL &&
         (e2b_path_map(st.cwd, mapped, sizeof(mapped), &e) < 0 ||
          api_request_file_path(mapped, strlen(mapped), true, mapped, sizeof(mapped), &e) < 0))) {
        e2b_reply_connect_error(req, "invalid_argument", "%s",
                                body == NULL ? "the message is not JSON" : e.msg);
        json_decref(st.argv);
        json_decref(body);
        return;
    }
    r = run_new(a, req, t, RUN_PROCESS);
    r->argv = st.argv;
    r->env = json_incref(st.envs);
    (void)snprintf(r->cwd, sizeof(r->cwd), "%s", st.cwd ? mapped : "");
    json_decref(body);
    ms = header_uint(req, "Connect-Timeout-Ms", 0);
    if (ms > 0) {
        r->timeout_s = MIN(r->timeout_s, MAX(1u, (ms + 999u) / 1000u));
    }
    r->keepalive_s = MAX(1u, header_uint(req, "Keepalive-Ping-Interval", KEEPALIVE_DEFAULT));
    r->pid = ++a->e2b_next_pid;
    a->e2b_stats.runs_process++;
    run_go(r);
}

static void
process_signal(struct api *a, struct evhttp_request *req, struct e2b_target *t)
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
    TAILQ_FOREACH (r, &a->e2b_runs, link) {
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
    api_reply_json_new(req, 200, OOM_CHECK(json_object()));
}

void
e2b_process(struct api *a, struct evhttp_request *req, struct e2b_target *t, const char *method)
{
    if (strcmp(method, "Start") == 0) {
        process_start(a, req, t);
    } else if (strcmp(method, "SendSignal") == 0) {
        process_signal(a, req, t);
    } else {
        e2b_reply_connect_error(req, "unimplemented",
                                "process.Process/%.64s is not supported here", method);
    }
}

/* ---- the code interpreter -------------------------------------------------------------------- */

static json_t *
context_json(const char *id)
{
    return OOM_CHECK(json_pack("{s:s, s:s, s:s}", "id", id, "language", "python", "cwd", E2B_HOME));
}

/* The context id of a request into out ("" the default); false after replying 404. */
static bool
context_of(struct evhttp_request *req, struct e2b_target *t, const char *id, char *out)
{
    if (id == NULL || strcmp(id, DEFAULT_CONTEXT) == 0) {
        out[0] = '\0';
        return true;
    }
    if (e2b_ext_context(&t->ext, id) < 0) {
        e2b_reply_error(req, 404, "context %.64s not found", id);
        return false;
    }
    memcpy(out, id, E2B_CONTEXT_ID_LEN + 1);
    return true;
}

static void
execute(struct api *a, struct evhttp_request *req, struct e2b_target *t)
{
    json_t *body = e2b_body_json(req);
    struct e2b_execute ex;
    char ctx[E2B_CONTEXT_ID_LEN + 1];
    struct err e = {0};
    struct e2b_run *r;

    if (body == NULL) {
        return;
    }
    if (e2b_execute_parse(body, &ex, &e) < 0) {
        e2b_reply_error(req, 400, "%s", e.msg);
        json_decref(body);
        return;
    }
    if (!context_of(req, t, ex.context_id, ctx)) {
        json_decref(body);
        return;
    }
    r = run_new(a, req, t, RUN_CODE);
    r->code = xmalloc(ex.code_len + 1);
    memcpy(r->code, ex.code, ex.code_len + 1);
    r->code_len = ex.code_len;
    memcpy(r->ctx, ctx, sizeof(ctx));
    json_decref(body);
    a->e2b_stats.runs_code++;
    run_go(r);
}

static void
context_create(struct api *a, struct evhttp_request *req, struct e2b_target *t)
{
    json_t *body = e2b_body_json(req), *lang;
    struct err e = {0};

    if (body == NULL) {
        return;
    }
    lang = json_object_get(body, "language");
    if (lang != NULL && !json_is_null(lang) &&
        (!json_is_string(lang) || strcmp(json_string_value(lang), "python") != 0)) {
        e2b_reply_error(req, 400, "only 'python' contexts are made here");
        json_decref(body);
        return;
    }
    json_decref(body);
    if (t->ext.n_contexts >= MIN(a->cfg->e2b_max_contexts, E2B_CONTEXTS_MAX)) {
        e2b_reply_error(req, 400, "this sandbox has %u contexts, the most it may (e2b.max_contexts)"
                        "; delete one", t->ext.n_contexts);
        return;
    }
    random_hex(t->ext.contexts[t->ext.n_contexts], E2B_CONTEXT_ID_LEN / 2);
    t->ext.n_contexts++;
    if (e2b_ext_save(t->s, &t->ext, &e) < 0) {
        e2b_reply_error(req, e2b_status_of(e.code), "%s", e.msg);
        return;
    }
    api_reply_json_new(req, 200, context_json(t->ext.contexts[t->ext.n_contexts - 1]));
}

static void
contexts_list(struct evhttp_request *req, struct e2b_target *t)
{
    json_t *out = OOM_CHECK(json_array());

    (void)json_array_append_new(out, context_json(DEFAULT_CONTEXT));
    for (unsigned i = 0; i < t->ext.n_contexts; i++) {
        (void)json_array_append_new(out, context_json(t->ext.contexts[i]));
    }
    api_reply_json_new(req, 200, out);
}

/* A restart of the default context: the interpreter's (every namespace, a new epoch). */
struct restart {
    struct evhttp_request *req;
    struct evhttp_connection *conn;
    struct session_restart *w;
};

static void
on_restart_close(struct evhttp_connection *conn, void *arg)
{
    struct restart *rs = arg;

    if (evhttp_request_get_connection(rs->req) == NULL) {
        evhttp_request_free(rs->req);
    }
    session_restart_cancel(rs->w); /* the restart goes on */
    free(rs);
}

static void
on_default_restarted(int rc, uint64_t epoch, const struct err *e, void *userdata)
{
    struct restart *rs = userdata;

    evhttp_connection_set_closecb(rs->conn, NULL, NULL);
    if (rc < 0) {
        e2b_reply_error(rs->req, e2b_status_of(rc), "%s", e ? e->msg : strerror(-rc));
    } else {
        evhttp_send_reply(rs->req, 204, "No Content", NULL);
    }
    free(rs);
}

static void
default_restart(struct evhttp_request *req, struct e2b_target *t)
{
    struct restart *rs = xcalloc(1, sizeof(*rs));
    struct err e = {0};
    int rc;

    rs->req = req;
    rs->conn = evhttp_request_get_connection(req);
    rc = session_restart(t->s, on_default_restarted, rs, &rs->w, &e);
    if (rc < 0) {
        e2b_reply_error(req, e2b_status_of(rc), "%s", e.msg);
        free(rs);
        return;
    }
    evhttp_connection_set_closecb(rs->conn, on_restart_close, rs);
}

/* DELETE /contexts/ID, POST /contexts/ID/restart. */
static void
context_drop(struct api *a, struct evhttp_request *req, struct e2b_target *t, const char *id,
             bool delete)
{
    char ctx[E2B_CONTEXT_ID_LEN + 1];
    struct e2b_run *r;

    if (!context_of(req, t, id, ctx)) {
        return;
    }
    if (ctx[0] == '\0' && delete) {
        e2b_reply_error(req, 400, "the default context cannot be deleted");
        return;
    }
    if (ctx[0] == '\0') {
        default_restart(req, t);
        return;
    }
    r = run_new(a, req, t, RUN_DROP);
    memcpy(r->ctx, ctx, sizeof(ctx));
    r->delete_ctx = delete;
    run_go(r);
}

void
e2b_code(struct api *a, struct evhttp_request *req, struct e2b_target *t)
{
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    const char *p = t->path;
    char id[E2B_CONTEXT_ID_LEN + 16] = "";
    size_t n;

    if (strcmp(p, "/execute") == 0 && m == EVHTTP_REQ_POST) {
        execute(a, req, t);
    } else if (strcmp(p, "/contexts") == 0 && m == EVHTTP_REQ_POST) {
        context_create(a, req, t);
    } else if (strcmp(p, "/contexts") == 0 && m == EVHTTP_REQ_GET) {
        contexts_list(req, t);
    } else if (strcmp(p, "/health") == 0 && m == EVHTTP_REQ_GET) {
        api_reply_json_new(req, 200, OOM_CHECK(json_pack("{s:s}", "status", "ok")));
    } else if (strncmp(p, "/contexts/", 10) == 0 &&
               (n = strcspn(p + 10, "/")) > 0 && n < sizeof(id)) {
        memcpy(id, p + 10, n);
        id[n] = '\0';
        if (p[10 + n] == '\0' && m == EVHTTP_REQ_DELETE) {
            context_drop(a, req, t, id, true);
        } else if (strcmp(p + 10 + n, "/restart") == 0 && m == EVHTTP_REQ_POST) {
            context_drop(a, req, t, id, false);
        } else {
            e2b_reply_error(req, 404, "%.128s is not an interpreter endpoint here", p);
        }
    } else {
        e2b_reply_error(req, 404, "%.128s is not an interpreter endpoint here", p);
    }
}
