/* MCP calls that need the sandbox: tools/call, resources/list, resources/read (docs/mcp.md,
 * "tools/call streams" and "Tools"): the queue, the stream, the end of a call, and cancel.
 *
 * Calls of one MCP session run one at a time, in order, behind a queue of at most
 * mcp.queue_max (clients send several at once). A tools/call answers as SSE: keepalive comments
 * every MCP_KEEPALIVE_MS while nothing else is sent, progress notifications (exec.c), then
 * the result; the stream starts with the first of them, so a fast call leaves in one write. A
 * call's one state is enum mcp_call_state, written by mcp_call_set() only.
 *
 * A cancel (notifications/cancelled, or the client's connection closing) ends the stream without
 * a result at once and stops the work: an execution is interrupted as POST .../interrupt does (its
 * variables stay) and the call stays at the head of the queue until the execution ended, so the
 * next call never finds the sandbox busy; a waiting call is simply dropped. Executions are
 * exec.c's, file work files.c's (through the files API's gate). */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>

#define LOG_MODULE "mcp"
#include "audit/audit.h"
#include "log/log.h"
#include "mcp/calls.h"
#include "session/session.h"
#include "stream/out.h"
#include "util/macro.h"
#include "util/time.h"
#include "util/utf8.h"

static const char *const state_names[MCP_CALL__COUNT] = {
    [MCP_CALL_QUEUED] = "queued",   [MCP_CALL_SANDBOX] = "sandbox", [MCP_CALL_BUSY] = "busy",
    [MCP_CALL_RUNNING] = "running", [MCP_CALL_GATE] = "gate",       [MCP_CALL_FILES] = "files",
    [MCP_CALL_DONE] = "done",
};

/* ---- replies (mcp.c's too) ------------------------------------------------------------------- */

void
mcp_reply(struct evhttp_request *req, int status, json_t *msg)
{
    http_reply_json_new(req, status, msg);
}

void
mcp_sse_headers(struct evhttp_request *req)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);

    (void)evhttp_add_header(h, "Content-Type", "text/event-stream");
    (void)evhttp_add_header(h, "Cache-Control", "no-cache");
    (void)evhttp_add_header(h, "X-Accel-Buffering", "no");
}

struct evbuffer *
mcp_sse_event(json_t *msg)
{
    struct evbuffer *b = OOM_CHECK(evbuffer_new());
    char *data = OOM_CHECK(json_dumps(msg, JSON_COMPACT)); /* one line: no raw newline */

    json_decref(msg);
    if (evbuffer_add_printf(b, "event: message\ndata: %s\n\n", data) < 0) {
        oom();
    }
    free(data);
    return b;
}

static void
on_drained_nothing(void *userdata)
{}

void
mcp_reply_sse(struct evhttp_request *req, json_t *msg)
{
    struct stream_out *out;
    struct evbuffer *b;

    mcp_sse_headers(req);
    out = stream_out_start(req, 200, "OK", on_drained_nothing, NULL);
    b = mcp_sse_event(msg);
    (void)stream_out_send(out, b);
    evbuffer_free(b);
    stream_out_end(out, false);
}

void
mcp_call_set(struct mcp_call *c, enum mcp_call_state to)
{
#define B(s) (1u << (s))
    /* Where a call may go from each state (calls.h): forward only, DONE from anywhere but
     * itself; a BUSY retry, a FILES or GATE step (the next image) may repeat. */
    static const unsigned next[MCP_CALL__COUNT] = {
        [MCP_CALL_QUEUED] = B(MCP_CALL_QUEUED) | B(MCP_CALL_SANDBOX) | B(MCP_CALL_BUSY) |
                            B(MCP_CALL_RUNNING) | B(MCP_CALL_GATE) | B(MCP_CALL_FILES) |
                            B(MCP_CALL_DONE),
        [MCP_CALL_SANDBOX] = B(MCP_CALL_BUSY) | B(MCP_CALL_RUNNING) | B(MCP_CALL_GATE) |
                             B(MCP_CALL_FILES) | B(MCP_CALL_DONE),
        [MCP_CALL_BUSY] = B(MCP_CALL_BUSY) | B(MCP_CALL_RUNNING) | B(MCP_CALL_DONE),
        [MCP_CALL_RUNNING] = B(MCP_CALL_GATE) | B(MCP_CALL_FILES) | B(MCP_CALL_DONE),
        [MCP_CALL_GATE] = B(MCP_CALL_GATE) | B(MCP_CALL_FILES) | B(MCP_CALL_DONE),
        [MCP_CALL_FILES] = B(MCP_CALL_GATE) | B(MCP_CALL_FILES) | B(MCP_CALL_DONE),
        [MCP_CALL_DONE] = 0,
    };
#undef B

    assert(c->state >= 0 && c->state < MCP_CALL__COUNT && to >= 0 && to < MCP_CALL__COUNT);
    assert(next[c->state] & (1u << to));
    log_debug("mcp call %s -> %s mcp_session=%s", state_names[c->state], state_names[to],
              c->ms->id);
    c->state = to;
    if (to == MCP_CALL_RUNNING || to == MCP_CALL_FILES || to == MCP_CALL_DONE) {
        http_waiting_leave(c->a->waiting, &c->wait); /* it waits no more */
    }
}

static void call_next(struct mcp_session *ms);

/* ---- the stream ------------------------------------------------------------------------------ */

static void
on_drained(void *userdata)
{
    struct mcp_call *c = userdata;

    if (c->x != NULL) {
        execution_pause(c->x, false);
    }
}

/* A tools/call's SSE reply starts with the first thing sent (a progress, a keepalive or the
 * result), so that a fast call's head, event and end leave in one write. NULL once the client
 * left or the reply ended. */
static struct stream_out *
stream_of(struct mcp_call *c)
{
    if (c->out == NULL && c->pending.req != NULL && c->kind == MCP_CALL_TOOL) {
        mcp_sse_headers(c->pending.req);
        c->out = stream_out_start(c->pending.req, 200, "OK", on_drained, c);
    }
    return c->out;
}

void
mcp_call_send(struct mcp_call *c, json_t *msg)
{
    struct evbuffer *b;

    if (stream_of(c) == NULL) {
        json_decref(msg);
        return;
    }
    b = mcp_sse_event(msg);
    if (stream_out_send(c->out, b) && c->x != NULL) {
        execution_pause(c->x, true); /* the client reads slower than the code prints */
    }
    evbuffer_free(b);
    if (c->keepalive != NULL) {
        struct timeval tv;

        time_tv_from_ms(&tv, MCP_KEEPALIVE_MS);
        (void)evtimer_add(c->keepalive, &tv); /* the next comment is due 15 s after this */
    }
}

static void
on_keepalive(evutil_socket_t fd, short what, void *arg)
{
    struct mcp_call *c = arg;
    struct evbuffer *b;
    struct timeval tv;

    if (stream_of(c) == NULL) {
        return;
    }
    b = OOM_CHECK(evbuffer_new());
    if (evbuffer_add(b, ": keepalive\n\n", 13) < 0) {
        oom();
    }
    (void)stream_out_send(c->out, b);
    evbuffer_free(b);
    time_tv_from_ms(&tv, MCP_KEEPALIVE_MS);
    (void)evtimer_add(c->keepalive, &tv);
}

static void
on_gone(struct http_pending *p)
{
    struct mcp_call *c = container_of(p, struct mcp_call, pending);

    if (c->out != NULL) {
        stream_out_abandon(c->out);
        c->out = NULL;
    }
    mcp_call_cancel(c, "the client closed the connection");
}

/* Ends the reply (a result or nothing) and stops watching the connection. */
static void
reply_end(struct mcp_call *c, json_t *msg)
{
    struct evhttp_request *req = c->pending.req;

    if (c->keepalive != NULL) {
        event_free(c->keepalive);
        c->keepalive = NULL;
    }
    if (req == NULL) {
        json_decref(msg);
        return;
    }
    if (c->tc.progress_token != NULL || msg == NULL) {
        /* With a progressToken a tools/call always streams; a cancelled one ends its stream
         * empty. Without a token a result that came before the first keepalive (15 s) is
         * answered as JSON: the clients parse it faster than a stream of one event. */
        (void)stream_of(c);
    }
    http_pending_end(&c->pending); /* first: the end may free the connection at once */
    if (c->out != NULL) {
        struct stream_out *out = c->out;

        c->out = NULL;
        if (msg != NULL) {
            struct evbuffer *b = mcp_sse_event(msg);

            (void)stream_out_send(out, b);
            evbuffer_free(b);
        }
        stream_out_end(out, false);
    } else if (msg != NULL) {
        mcp_reply(req, 200, msg);
    } else {
        evhttp_send_reply(req, 204, "No Content", NULL); /* a cancelled resources call */
    }
}

/* ---- the end of a call ----------------------------------------------------------------------- */

static void
call_free(struct mcp_call *c)
{
    http_pending_end(&c->pending); /* it ended already: the reply's end, or the client's */
    if (c->live != NULL) {
        session_waiter_cancel(c->live);
    }
    mcp_files_release(c);
    if (c->flush != NULL) {
        event_free(c->flush);
    }
    if (c->retry != NULL) {
        event_free(c->retry);
    }
    if (c->keepalive != NULL) {
        event_free(c->keepalive);
    }
    buf_done(&c->progress);
    execution_result_free(c->result);
    mcp_msg_done(&c->msg);
    http_waiting_leave(c->a->waiting, &c->wait);
    mcp_session_unref(c->ms);
    free(c);
}

/* The call left the queue: the next one starts. */
static void
call_done(struct mcp_call *c)
{
    struct mcp_session *ms = c->ms;
    bool was_head = TAILQ_FIRST(&ms->calls) == c;

    mcp_call_set(c, MCP_CALL_DONE);
    TAILQ_REMOVE(&ms->calls, c, link);
    ms->n_calls--;
    mcp_session_ref(ms);
    call_free(c);
    if (was_head && !ms->gone) {
        call_next(ms);
    }
    mcp_session_unref(ms);
}

static void
audit_call(struct mcp_call *c, const char *outcome)
{
    char actor[80];
    json_t *f = OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s, s:s, s:I}", "tenant", c->ms->rec.tenant,
                                    "mcp_session", c->ms->id, "session", c->ms->rec.sandbox,
                                    "method", c->msg.method, "outcome", outcome, "duration_ms",
                                    (json_int_t)((time_now_us() - c->started_us) / 1000u)));

    if (c->kind == MCP_CALL_TOOL) {
        (void)json_object_set_new(f, "tool",
                                  OOM_CHECK(json_string(mcp_tool_to_string(c->tc.tool))));
    }
    if (c->result != NULL) {
        (void)json_object_set_new(f, "execution", OOM_CHECK(json_string(c->result->id)));
    }
    if (c->tc.path[0] != '\0' || c->tc.tool >= MCP_TOOL_WRITE) {
        (void)json_object_set_new(f, "path", OOM_CHECK(json_string(c->tc.path)));
    }
    (void)snprintf(actor, sizeof(actor), "tenant:%s", c->ms->rec.tenant);
    audit_log("mcp.tool_call", actor, f);
}

void
mcp_call_finish(struct mcp_call *c, json_t *result)
{
    struct mcp_stats *st = mcp_server_stats(c->ms->srv);
    bool is_error = json_is_true(json_object_get(result, "isError"));

    http_pending_log(&c->pending);
    mcp_call_flush(c);
    mcp_session_used(c->ms); /* a long call must not let its record expire under it */
    if (c->cancelled) {
        json_decref(result);
        st->cancelled++;
        audit_call(c, "cancelled");
    } else {
        if (is_error) {
            st->results_error++;
        } else {
            st->results_ok++;
        }
        audit_call(c, is_error ? "error" : "ok");
        reply_end(c, mcp_response(c->msg.id, result));
    }
    call_done(c);
    log_set_request(NULL);
}

void
mcp_call_fail(struct mcp_call *c, int code, const char *msg)
{
    if (c->kind == MCP_CALL_TOOL) {
        mcp_call_finish(c, mcp_tool_error("%s", msg));
        return;
    }
    http_pending_log(&c->pending);
    mcp_server_stats(c->ms->srv)->results_error++;
    if (!c->cancelled) {
        audit_call(c, "error");
        reply_end(c, mcp_error(c->msg.id, code, "%s", msg));
    }
    call_done(c);
    log_set_request(NULL);
}

struct session *
mcp_call_sandbox(const struct mcp_call *c)
{
    return c->ms->rec.sandbox[0]
               ? session_find(c->a->backend->sessions, c->ms->rec.tenant, c->ms->rec.sandbox)
               : NULL;
}

/* ---- the queue ------------------------------------------------------------------------------- */

static void call_work(struct mcp_call *c);

static void
on_live(int r, const struct err *e, void *userdata)
{
    struct mcp_call *c = userdata;

    c->live = NULL;
    http_pending_log(&c->pending);
    if (r < 0) {
        mcp_call_fail(c, MCP_ERR_INTERNAL, e ? e->msg : "the sandbox could not be resumed");
    } else if (c->cancelled || c->ms->gone) {
        mcp_call_finish(c, NULL);
    } else {
        call_work(c);
    }
    log_set_request(NULL);
}

/* The call's work, once its sandbox exists (and runs: a paused one is resumed first). */
static void
call_work(struct mcp_call *c)
{
    struct session *s = mcp_call_sandbox(c);
    struct err e = {0};
    int r = s != NULL ? session_ensure_live(s, on_live, c, &c->live, &e) : 0;

    if (r < 0) {
        mcp_call_fail(c, MCP_ERR_INTERNAL, e.msg);
        return;
    }
    if (r == 1) {
        return;
    }
    if (c->kind == MCP_CALL_TOOL &&
        (c->tc.tool == MCP_TOOL_PYTHON || c->tc.tool == MCP_TOOL_COMMAND)) {
        mcp_exec_start(c);
    } else {
        mcp_files_start(c);
    }
}

static void
on_sandbox(int r, struct session *s, const struct err *e, void *userdata)
{
    struct mcp_call *c = userdata;
    struct mcp_session *ms = c->ms;

    http_pending_log(&c->pending);
    if (r == 0 && ms->gone) {
        /* Its MCP session was deleted meanwhile: nobody will use this sandbox. */
        session_set_end_cause(s, NULL, "mcp_deleted");
        (void)session_end(s, NULL, NULL, NULL);
    } else if (r == 0) {
        (void)snprintf(ms->rec.sandbox, sizeof(ms->rec.sandbox), "%s", session_id(s));
        /* Where its sandbox is: a session taken over from a node that is gone is ours now. */
        (void)snprintf(ms->rec.node, sizeof(ms->rec.node), "%s", c->a->cfg->node_id);
        mcp_session_save(ms); /* the record's time to live is the sandbox's from now on */
        log_info("mcp session has its sandbox mcp_session=%s session=%s", ms->id, session_id(s));
    }
    if (r < 0) {
        mcp_call_fail(c, MCP_ERR_INTERNAL, e ? e->msg : "no sandbox could be made");
    } else if (c->cancelled || ms->gone) {
        mcp_call_finish(c, NULL);
    } else {
        call_work(c);
    }
    log_set_request(NULL);
}

static void
call_run(struct mcp_call *c)
{
    struct mcp_session *ms = c->ms;
    struct session_create_req cr = {0};
    struct err e = {0};

    if (ms->rec.sandbox[0] != '\0' || ms->rec.bound) {
        call_work(c);
        return;
    }
    if (c->a->backend->drain_state(c->a->backend->userdata) != HTTP_SERVING) {
        mcp_call_fail(c, MCP_ERR_INTERNAL,
                      "this node takes no new sandboxes (drained or shutting down); start a new "
                      "MCP session on another node");
        return;
    }
    cr.tenant = ms->rec.tenant;
    cr.profile = ms->rec.profile[0] ? ms->rec.profile : NULL;
    cr.idle_timeout_s = ms->rec.idle_timeout_s;
    mcp_call_set(c, MCP_CALL_SANDBOX);
    if (session_create(c->a->backend->sessions, &cr, on_sandbox, c, &e) < 0) {
        mcp_call_fail(c, MCP_ERR_INTERNAL, e.msg);
    }
}

static void
call_next(struct mcp_session *ms)
{
    struct mcp_call *c = TAILQ_FIRST(&ms->calls);

    if (c != NULL && c->state == MCP_CALL_QUEUED) {
        http_pending_log(&c->pending);
        call_run(c);
        log_set_request(NULL);
    }
}

/* What a waiting call holds: what it runs or writes, and 1 KiB for the rest. */
static size_t
call_bytes(const struct mcp_call *c)
{
    return 1024u + c->tc.code_len + (c->tc.command ? strlen(c->tc.command) : 0) + c->tc.content_len;
}

/* A waiting call claims its bytes and its place in its sandbox's queue: the calls of every MCP
 * session bound to one sandbox share one bound (mcp.queue_max waiting and the running one), so
 * binding more sessions queues nothing more. An unbound session is its sandbox's only one. */
static int
call_claim(struct mcp_call *c, struct err *reterr)
{
    char sandbox[72];

    (void)snprintf(sandbox, sizeof(sandbox), "%s%s", c->ms->rec.bound ? "" : "mcp:",
                   c->ms->rec.bound ? c->ms->rec.sandbox : c->ms->id);
    return http_waiting_enter(c->a->waiting, &c->wait, c->ms->rec.tenant, sandbox, call_bytes(c),
                              c->a->cfg->mcp_queue_max + 1, reterr);
}

/* The answer to a call that cannot queue (bad params, queue full), or NULL. */
static json_t *
refusal(struct mcp_call *c, int r, const struct err *e)
{
    unsigned max = c->a->cfg->mcp_queue_max;
    struct err full = {0};

    if (r == -ENOENT) {
        return mcp_error(c->msg.id, MCP_ERR_INVALID_PARAMS, "%s", e->msg);
    }
    if (r < 0) {
        return mcp_response(c->msg.id, mcp_tool_error("%s", e->msg));
    }
    if (c->ms->n_calls >= max + 1) { /* the running one and queue_max waiting */
        (void)err_set(&full, -EDQUOT,
                      "this MCP session already has %u calls waiting (mcp.queue_max)", max);
    } else if (call_claim(c, &full) == 0) {
        return NULL;
    }
    mcp_server_stats(c->ms->srv)->queue_full++;
    if (c->kind == MCP_CALL_TOOL) {
        return mcp_response(c->msg.id, mcp_tool_error("%s: the queue is full; retry when one has "
                                                      "ended",
                                                      full.msg));
    }
    return mcp_error(c->msg.id, MCP_ERR_BAD_REQUEST, "%s", full.msg);
}

/* The call of a message: NULL after answering the request (bad params, queue full). */
static struct mcp_call *
call_new(struct http *a, struct mcp_session *ms, struct evhttp_request *req, struct mcp_msg *msg)
{
    struct mcp_call *c = xcalloc(1, sizeof(*c));
    struct err e = {0};
    json_t *no;
    int r = 0;

    c->a = a;
    c->ms = ms;
    c->msg = *msg;
    c->started_us = time_now_us();
    buf_init(&c->progress, (size_t)MCP_PROGRESS_BYTES * 2); /* flushed at MCP_PROGRESS_BYTES */
    *msg = (struct mcp_msg){0};
    if (strcmp(c->msg.method, "tools/call") == 0) {
        c->kind = MCP_CALL_TOOL;
        r = mcp_tool_parse(c->msg.params, &c->tc, &e);
    } else if (strcmp(c->msg.method, "resources/read") == 0) {
        c->kind = MCP_CALL_RES_READ;
        c->tc.tool = MCP_TOOL_READ;
        r = mcp_resource_path(json_string_value(json_object_get(c->msg.params, "uri")), c->tc.path,
                              sizeof(c->tc.path), &e);
        r = r < 0 ? -ENOENT : 0;
    } else {
        c->kind = MCP_CALL_RES_LIST;
        c->tc.tool = MCP_TOOL_LIST;
    }
    if (r == 0 && c->kind == MCP_CALL_TOOL) {
        mcp_server_stats(ms->srv)->tool_calls[c->tc.tool]++;
    }
    no = refusal(c, r, &e);
    if (no == NULL) {
        static const char *const keep_tool[] = {"name", "arguments", "_meta", NULL};
        static const char *const keep_read[] = {"uri", NULL};
        struct evbuffer *in = evhttp_request_get_input_buffer(req);

        /* While it waits it keeps what it runs, not the body nor the rest of its JSON. */
        (void)evbuffer_drain(in, evbuffer_get_length(in));
        mcp_msg_slim(&c->msg, c->kind == MCP_CALL_TOOL       ? keep_tool
                              : c->kind == MCP_CALL_RES_READ ? keep_read
                                                             : keep_read + 1);
        mcp_session_ref(ms);
        return c;
    }
    if (c->kind == MCP_CALL_TOOL && c->tc.progress_token != NULL) {
        mcp_reply_sse(req, no); /* it asked for progress: its answer is a stream */
    } else {
        mcp_reply(req, 200, no);
    }
    buf_done(&c->progress);
    mcp_msg_done(&c->msg);
    free(c);
    return NULL;
}

void
mcp_call_start(struct http *a, struct mcp_session *ms, struct evhttp_request *req,
               struct mcp_msg *msg)
{
    struct mcp_call *c = call_new(a, ms, req, msg);
    struct timeval tv;

    if (c == NULL) {
        return;
    }
    mcp_exec_init(c);
    http_pending_start(&c->pending, req, on_gone);
    if (c->kind == MCP_CALL_TOOL) {
        c->keepalive = OOM_CHECK(evtimer_new(a->base, on_keepalive, c));
        time_tv_from_ms(&tv, MCP_KEEPALIVE_MS);
        (void)evtimer_add(c->keepalive, &tv);
    }
    mcp_call_set(c, MCP_CALL_QUEUED);
    TAILQ_INSERT_TAIL(&ms->calls, c, link);
    ms->n_calls++;
    if (TAILQ_FIRST(&ms->calls) == c) {
        call_run(c);
    }
}

/* ---- cancel ---------------------------------------------------------------------------------- */

void
mcp_call_cancel(struct mcp_call *c, const char *why)
{
    struct session *s;

    if (c->cancelled) {
        return;
    }
    c->cancelled = true;
    log_info("mcp call cancelled mcp_session=%s: %s", c->ms->id, why);
    reply_end(c, NULL); /* the stream ends without a result */
    switch (c->state) {
    case MCP_CALL_QUEUED:
    case MCP_CALL_BUSY:
        (void)evtimer_del(c->retry);
        mcp_call_finish(c, NULL);
        break;
    case MCP_CALL_RUNNING:
        /* Reading resumes (the stream it was paused for is gone): the end must come through. */
        if (c->x != NULL) {
            execution_pause(c->x, false);
        }
        s = mcp_call_sandbox(c);
        if (s != NULL) {
            const char *exec_id;
            struct err e = {0};

            (void)session_interrupt(s, &exec_id, &e); /* the end comes through on_done */
        }
        break;
    case MCP_CALL_GATE:
    case MCP_CALL_FILES:
        mcp_files_cancel(c);
        mcp_call_finish(c, NULL);
        break;
    case MCP_CALL_SANDBOX: /* the create goes on; on_sandbox ends the call */
    case MCP_CALL_DONE:
    case MCP_CALL__COUNT:
    case MCP_CALL__INVALID:
        break;
    }
}

void
mcp_call_cancel_id(struct mcp_session *ms, json_t *request_id)
{
    struct mcp_call *c;

    if (request_id == NULL) {
        return;
    }
    TAILQ_FOREACH (c, &ms->calls, link) {
        if (json_equal(c->msg.id, request_id)) {
            mcp_call_cancel(c, "notifications/cancelled");
            return;
        }
    }
}

void
mcp_calls_cancel_all(struct mcp_session *ms)
{
    struct mcp_call *c, *next;

    /* The head first: the others must not start when it leaves. */
    for (c = TAILQ_FIRST(&ms->calls); c != NULL; c = next) {
        next = TAILQ_NEXT(c, link);
        if (c->state == MCP_CALL_RUNNING && c->x != NULL) {
            mcp_call_cancel(c, "its MCP session ended");
            /* Nobody waits for the end: the execution runs on to its interrupt alone. */
            execution_detach(c->x);
            c->x = NULL;
            mcp_call_finish(c, NULL);
        } else {
            mcp_call_cancel(c, "its MCP session ended");
        }
    }
}
