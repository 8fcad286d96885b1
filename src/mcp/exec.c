/* MCP executions: execute_python and run_command of a call (calls.c queues it), the
 * progress notifications of their output, and the rendering of their result (docs/mcp.md,
 * "tools/call streams").
 *
 * Progress goes out only when the request carried a progressToken: output is gathered and sent
 * as one notification per MCP_PROGRESS_MS or MCP_PROGRESS_BYTES, whichever comes first, never
 * cutting a character; the result's text is rendered from the collected output all the same.
 * A bound session's REST execution makes session_execute() answer -EBUSY: the call waits for it
 * by retrying every MCP_BUSY_RETRY_MS, so session_busy never reaches an MCP client. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#define LOG_MODULE "mcp"
#include "mcp/calls.h"
#include "session/session.h"
#include "util/macro.h"
#include "util/time.h"

/* ---- progress -------------------------------------------------------------------------------- */

void
mcp_call_flush(struct mcp_call *c)
{
    if (c->flush != NULL) {
        (void)evtimer_del(c->flush);
    }
    if (c->progress.len == 0) {
        return;
    }
    mcp_call_send(
        c, mcp_progress(c->tc.progress_token, ++c->progress_n, c->progress.buf, c->progress.len));
    buf_reset(&c->progress);
}

static void
on_flush(evutil_socket_t fd, short what, void *arg)
{
    mcp_call_flush(arg);
}

/* Appends output to the progress not sent yet, sending it whenever MCP_PROGRESS_BYTES are
 * there (a character is never cut: the bytes that complete it go along). */
static void
progress_add(struct mcp_call *c, const char *p, size_t n)
{
    while (n > 0) {
        size_t k = MCP_PROGRESS_BYTES - MIN(c->progress.len, MCP_PROGRESS_BYTES);

        if (k == 0) {
            mcp_call_flush(c);
            continue;
        }
        k = MIN(k, n);
        /* At most 3 more: a character's last bytes (ill-formed input gets no further). */
        for (size_t lim = k + 3; k < n && k < lim && ((unsigned char)p[k] & 0xC0) == 0x80;) {
            k++;
        }
        if (buf_append(&c->progress, p, k) < 0) {
            oom(); /* the cap leaves room for a character's last bytes */
        }
        p += k;
        n -= k;
    }
}

static void
on_output(struct execution *x, bool to_stderr, const char *text, size_t len, void *userdata)
{
    struct mcp_call *c = userdata;

    if (c->tc.progress_token == NULL || c->pending.req == NULL) {
        return; /* the output is collected for the result all the same */
    }
    if (to_stderr) {
        progress_add(c, "[stderr] ", 9);
    }
    progress_add(c, text, len);
    if (c->progress.len >= MCP_PROGRESS_BYTES) {
        mcp_call_flush(c);
    } else if (c->progress.len > 0 && !evtimer_pending(c->flush, NULL)) {
        struct timeval tv;

        time_tv_from_ms(&tv, MCP_PROGRESS_MS);
        (void)evtimer_add(c->flush, &tv);
    }
}

/* ---- executions ------------------------------------------------------------------------------ */

static void
on_done(struct execution *x, void *userdata)
{
    struct mcp_call *c = userdata;

    c->x = NULL;
    c->result = execution_result_new(x);
    if (c->cancelled) {
        mcp_call_finish(c, NULL);
        return;
    }
    mcp_files_images(c); /* then mcp_call_render() */
}

static const struct exec_observer observer = {
    .on_output = on_output,
    .on_done = on_done,
};

void
mcp_call_render(struct mcp_call *c)
{
    const struct cfg *cfg = c->a->cfg;
    struct mcp_render in = {
        .result = c->result,
        .is_cmd = c->tc.tool == MCP_TOOL_COMMAND,
        .last_epoch = c->ms->rec.epoch,
        .max_output = cfg->mcp_max_output_bytes,
        .images = c->images,
        .image_note = c->image_note[0] ? c->image_note : NULL,
    };
    json_t *result = mcp_render_execution(&in);
    uint64_t epoch = c->result->epoch;

    if (epoch > 0 && epoch != c->ms->rec.epoch) {
        c->ms->rec.epoch = epoch;
        mcp_session_save(c->ms);
    }
    mcp_call_finish(c, result);
}

static void
on_retry(evutil_socket_t fd, short what, void *arg)
{
    mcp_exec_start(arg);
}

void
mcp_exec_start(struct mcp_call *c)
{
    struct session *s = mcp_call_sandbox(c);
    const struct cfg_profile *p = s ? session_profile(s) : NULL;
    struct exec_req er = {0};
    char cwd[FILES_PATH_MAX + 16];
    struct err e = {0};
    json_t *argv = NULL;
    int r;

    if (s == NULL) {
        mcp_call_fail(c, MCP_ERR_INTERNAL, "the sandbox of this MCP session ended");
        return;
    }
    if (c->a->backend->drain_state(c->a->backend->userdata) == HTTP_STOPPING) {
        mcp_call_fail(c, MCP_ERR_INTERNAL, "this daemon is shutting down; retry shortly");
        return;
    }
    er.timeout_s =
        MIN(c->tc.timeout_s ? c->tc.timeout_s : MCP_TIMEOUT_DEFAULT_S, p->exec_timeout_s);
    if (c->tc.tool == MCP_TOOL_PYTHON) {
        er.code = c->tc.code;
        er.code_len = c->tc.code_len;
    } else {
        /* The cwd travels as an argument, never inside the script: no quoting to get wrong. */
        (void)snprintf(cwd, sizeof(cwd), "/workspace%s%s", c->tc.path[0] ? "/" : "", c->tc.path);
        argv = OOM_CHECK(json_pack("[s, s, s, s, s]", "sh", "-c", "cd -- \"$0\" && eval \"$1\"",
                                   cwd, c->tc.command));
        er.argv = argv;
    }
    r = session_execute(s, &er, &observer, c, true, &c->x, &e);
    json_decref(argv);
    if (r == -EBUSY) { /* a REST execution of a bound session: wait for it */
        struct timeval tv;

        mcp_call_set(c, MCP_CALL_BUSY);
        time_tv_from_ms(&tv, MCP_BUSY_RETRY_MS);
        (void)evtimer_add(c->retry, &tv);
        return;
    }
    if (r < 0) {
        mcp_call_fail(c, MCP_ERR_INTERNAL, e.msg);
        return;
    }
    session_touch(s);
    mcp_call_set(c, MCP_CALL_RUNNING);
}

void
mcp_exec_init(struct mcp_call *c)
{
    c->flush = OOM_CHECK(evtimer_new(c->a->base, on_flush, c));
    c->retry = OOM_CHECK(evtimer_new(c->a->base, on_retry, c));
}
