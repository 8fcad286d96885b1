/* Port 49999 of an E2B sandbox, the code interpreter (docs/e2b.md): POST /execute, answered as
 * NDJSON lines (stdout, stderr, results with their MIME bundles, the error, end_of_execution),
 * and the contexts (GET, POST /contexts, DELETE /contexts/ID, POST /contexts/ID/restart). Each
 * execution is a run of run.c; a context is a namespace of the sandbox's interpreter (the
 * kernel's ctx), listed in the sandbox's record. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <jansson.h>

#define LOG_MODULE "e2b"
#include "e2b/e2b-internal.h"
#include "session/session.h"
#include "util/macro.h"
#include "util/random.h"

#define DEFAULT_CONTEXT "default"

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
result_line(const struct execution_result *res)
{
    json_t *o = OOM_CHECK(json_pack("{s:s, s:b}", "type", "result", "is_main_result", true));
    const char *text = res->value, *key;
    size_t n = res->value_len;
    json_t *v;

    if (text != NULL) {
        if (n >= 2 && (text[0] == '\'' || text[0] == '"') && text[n - 1] == text[0]) {
            text++;
            n -= 2;
        }
        (void)json_object_set_new(o, "text", OOM_CHECK(json_stringn(text, n)));
    }
    json_object_foreach (res->mime, key, v) {
        (void)json_object_set(o, e2b_result_key(key), v);
    }
    return o;
}

void
e2b_code_done(struct e2b_run *r, const struct execution_result *res)
{
    if (res->value != NULL || json_object_size(res->mime) > 0) {
        e2b_send_line(r, result_line(res));
    }
    if (res->has_error) {
        e2b_send_line(r, OOM_CHECK(json_pack("{s:s, s:s, s:s, s:o}", "type", "error", "name",
                                             res->error.name, "value", res->error.value,
                                             "traceback", traceback_text(res->error.traceback))));
    }
    e2b_send_line(r, OOM_CHECK(json_pack("{s:s}", "type", "end_of_execution")));
}

static json_t *context_json(const char *id);

/* A context made or deleted: answered once Redis has the sandbox's record (after a kill -9 the
 * answer still holds); a write that fails puts the record back as it was and answers 503. */
struct ctx_wait {
    struct http_pending pending; /* req NULL once the client went away */
    struct session_manager *sessions;
    char session[SESSION_ID_MAX + 1], tenant[65];
    char made[E2B_CONTEXT_ID_LEN + 1]; /* the context made; "" for a delete */
    char before[SESSION_EXT_MAX + 1];
};

static void
on_ctx_gone(struct http_pending *p)
{
    /* The write goes on; its end frees the wait. */
}

static void
on_before_restored(int r, void *arg)
{
    (void)r; /* Redis failed already; the record in memory is what it was */
}

static void
on_ctx_saved(int r, void *arg)
{
    struct ctx_wait *w = arg;

    if (r == -ECANCELED) { /* the daemon is stopping: nobody waits any more */
        http_pending_end(&w->pending);
        free(w);
        return;
    }
    if (r < 0) {
        struct session *s = session_find(w->sessions, w->tenant, w->session);

        if (s != NULL) {
            (void)session_set_ext(s, w->before, on_before_restored, NULL, &(struct err){0});
        }
    }
    if (w->pending.req != NULL) {
        struct evhttp_request *req = w->pending.req;

        http_pending_end(&w->pending);
        if (r < 0) {
            e2b_reply_error(req, 503, "the sandbox's record could not be written; retry");
        } else if (w->made[0] != '\0') {
            http_reply_json_new(req, 200, context_json(w->made));
        } else {
            evhttp_send_reply(req, 204, "No Content", NULL);
        }
    }
    free(w);
}

static void
ctx_save(struct http *a, struct evhttp_request *req, struct session *s, const struct e2b_ext *x,
         const char *made)
{
    struct ctx_wait *w = xcalloc(1, sizeof(*w));
    struct err e = {0};

    (void)snprintf(w->session, sizeof(w->session), "%s", session_id(s));
    (void)snprintf(w->tenant, sizeof(w->tenant), "%s", session_tenant(s));
    (void)snprintf(w->made, sizeof(w->made), "%s", made ? made : "");
    (void)snprintf(w->before, sizeof(w->before), "%s", session_ext(s));
    w->sessions = a->backend->sessions;
    if (e2b_ext_save(s, x, on_ctx_saved, w, &e) < 0) {
        e2b_reply_error(req, e2b_status_of(e.code), "%s", e.msg);
        free(w);
        return;
    }
    http_pending_start(&w->pending, req, on_ctx_gone);
}

void
e2b_code_dropped(struct e2b_run *r, const struct execution_result *res)
{
    struct session *s = e2b_run_session(r);
    struct e2b_ext x;
    int i;

    if (res->status != SESSION_EXEC_OK) {
        e2b_reply_error(r->pending.req, 500, "the context's namespace could not be cleared");
        return;
    }
    if (r->delete_ctx && s != NULL && e2b_ext_decode(session_ext(s), &x) == 0 &&
        (i = e2b_ext_context(&x, r->ctx)) >= 0) {
        struct evhttp_request *req = r->pending.req;

        memmove(x.contexts[i], x.contexts[i + 1],
                (x.n_contexts - (unsigned)i - 1) * sizeof(x.contexts[0]));
        x.n_contexts--;
        /* The answer is ctx_save()'s now, and so is the watch on the connection (the run's ends
         * first: one close callback per connection). */
        http_pending_end(&r->pending);
        ctx_save(r->a, req, s, &x, NULL);
        return;
    }
    evhttp_send_reply(r->pending.req, 204, "No Content", NULL);
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
execute(struct http *a, struct evhttp_request *req, struct e2b_target *t)
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
    r = e2b_run_new(a, req, t, RUN_CODE);
    r->env = e2b_sandbox_env(&t->ext);
    r->code = xmalloc(ex.code_len + 1);
    memcpy(r->code, ex.code, ex.code_len + 1);
    r->code_len = ex.code_len;
    memcpy(r->ctx, ctx, sizeof(ctx));
    json_decref(body);
    /* The code is copied: the request's body is not kept while the run waits. */
    (void)evbuffer_drain(evhttp_request_get_input_buffer(req),
                         evbuffer_get_length(evhttp_request_get_input_buffer(req)));
    e2b_room(a)->stats.runs_code++;
    e2b_run_go(r);
}

static void
context_create(struct http *a, struct evhttp_request *req, struct e2b_target *t)
{
    json_t *body = e2b_body_json(req), *lang;

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
        e2b_reply_error(req, 400,
                        "this sandbox has %u contexts, the most it may (e2b.max_contexts)"
                        "; delete one",
                        t->ext.n_contexts);
        return;
    }
    random_hex(t->ext.contexts[t->ext.n_contexts], E2B_CONTEXT_ID_LEN / 2);
    t->ext.n_contexts++;
    ctx_save(a, req, t->s, &t->ext, t->ext.contexts[t->ext.n_contexts - 1]);
}

static void
contexts_list(struct evhttp_request *req, struct e2b_target *t)
{
    json_t *out = OOM_CHECK(json_array());

    (void)json_array_append_new(out, context_json(DEFAULT_CONTEXT));
    for (unsigned i = 0; i < t->ext.n_contexts; i++) {
        (void)json_array_append_new(out, context_json(t->ext.contexts[i]));
    }
    http_reply_json_new(req, 200, out);
}

/* A restart of the default context: the interpreter's (every namespace, a new epoch). */
struct restart {
    struct http_pending pending;
    struct session_restart *w;
};

static void
on_restart_gone(struct http_pending *p)
{
    struct restart *rs = container_of(p, struct restart, pending);

    session_restart_cancel(rs->w); /* the restart goes on */
    free(rs);
}

static void
on_default_restarted(int rc, uint64_t epoch, const struct err *e, void *userdata)
{
    struct restart *rs = userdata;
    struct evhttp_request *req = rs->pending.req;

    http_pending_end(&rs->pending);
    if (rc < 0) {
        e2b_reply_error(req, e2b_status_of(rc), "%s", e ? e->msg : strerror(-rc));
    } else {
        evhttp_send_reply(req, 204, "No Content", NULL);
    }
    free(rs);
}

static void
default_restart(struct evhttp_request *req, struct e2b_target *t)
{
    struct restart *rs = xcalloc(1, sizeof(*rs));
    struct err e = {0};
    int rc;

    rc = session_restart(t->s, on_default_restarted, rs, &rs->w, &e);
    if (rc < 0) {
        e2b_reply_error(req, e2b_status_of(rc), "%s", e.msg);
        free(rs);
        return;
    }
    http_pending_start(&rs->pending, req, on_restart_gone);
}

/* DELETE /contexts/ID, POST /contexts/ID/restart. */
static void
context_drop(struct http *a, struct evhttp_request *req, struct e2b_target *t, const char *id,
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
    r = e2b_run_new(a, req, t, RUN_DROP);
    memcpy(r->ctx, ctx, sizeof(ctx));
    r->delete_ctx = delete;
    e2b_run_go(r);
}

void
e2b_code(struct http *a, struct evhttp_request *req, struct e2b_target *t)
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
        http_reply_json_new(req, 200, OOM_CHECK(json_pack("{s:s}", "status", "ok")));
    } else if (strncmp(p, "/contexts/", 10) == 0 && (n = strcspn(p + 10, "/")) > 0 &&
               n < sizeof(id)) {
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
