/* Session endpoints of the HTTP API v1:
 *
 *   POST   /v1/sessions                  create (201 + Session)
 *   GET    /v1/sessions                  list the tenant's sessions
 *   GET    /v1/sessions/{id}             one Session
 *   DELETE /v1/sessions/{id}             end it (204)
 *   POST   /v1/sessions/{id}/execute     run code or a command: one JSON Execution, or SSE
 *   POST   /v1/sessions/{id}/interrupt   interrupt the running execution (202)
 *   POST   /v1/sessions/{id}/restart     restart the kernel: variables lost, new kernel_epoch
 *   POST   /v1/sessions/{id}/pause       freeze its container (200 + Session, once frozen)
 *   POST   /v1/sessions/{id}/hibernate   snapshot it and release its container (200 + Session)
 *   POST   /v1/sessions/{id}/wake        wake a hibernated session (200 + Session, once live)
 *   GET    /v1/sessions/{id}/executions  the last executions, newest first (from Redis)
 *
 * Every request on a session counts as activity; execute and restart resume a paused session, or
 * wake a hibernated one, first (live.c). Another tenant's session answers 404 exactly
 * like an unknown one.
 *
 * Asynchronous handlers keep a `struct call`: the evhttp request belongs to libevent and dies
 * with its connection, so the call watches the connection's close callback and, once the client
 * is gone, finishes its work without replying. Exactly one reply per live request. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#define LOG_MODULE "api"
#include "audit/audit.h"
#include "log/log.h"
#include "rest/rest-internal.h"
#include "session/session.h"
#include "stream/sse.h"
#include "util/macro.h"
#include "util/utf8.h"

struct call {
    struct http *a;
    struct http_pending pending; /* its req: NULL once the client went away */
    char tenant[65];
    struct execution *x;
    struct session_restart *restart;
    struct session_waiter *pause;
    char session[65];
    char snapshot[65]; /* create: restore this snapshot into the new session */
    struct stream_sse *sse;
    bool done; /* the operation completed */
};

static void
on_gone(struct http_pending *p)
{
    struct call *c = container_of(p, struct call, pending);

    if (c->sse != NULL) {
        stream_sse_abandon(c->sse);
        c->sse = NULL;
    }
    if (c->x != NULL) {
        execution_detach(c->x); /* it runs on; its end frees nothing of ours */
        c->x = NULL;
        c->done = true;
    }
    if (c->restart != NULL) {
        session_restart_cancel(c->restart); /* the restart itself goes on */
        c->restart = NULL;
        c->done = true;
    }
    if (c->pause != NULL) {
        session_waiter_cancel(c->pause); /* so does the pause */
        c->pause = NULL;
        c->done = true;
    }
    if (c->done) {
        free(c);
    }
}

static struct call *
call_new(struct http *a, struct evhttp_request *req, const char *tenant)
{
    struct call *c = xcalloc(1, sizeof(*c));

    c->a = a;
    (void)snprintf(c->tenant, sizeof(c->tenant), "%s", tenant);
    http_pending_start(&c->pending, req, on_gone);
    return c;
}

/* The operation is over: stop watching the connection and free the call. Reply first. */
static void
call_end(struct call *c)
{
    http_pending_end(&c->pending);
    free(c);
}

/* ---- create, list, get, delete --------------------------------------------------------------- */

static void
on_session_created(int r, struct session *s, const struct err *e, void *userdata)
{
    struct call *c = userdata;

    http_pending_log(&c->pending);
    c->done = true;
    if (r == 0 && c->pending.req != NULL && c->snapshot[0] != '\0') {
        struct evhttp_request *req = c->pending.req;
        struct http *a = c->a;
        char snapshot[sizeof(c->snapshot)];

        memcpy(snapshot, c->snapshot, sizeof(snapshot));
        log_info("session created session=%s tenant='%s' profile='%s': restoring snapshot %s",
                 session_id(s), c->tenant, session_profile(s)->name, c->snapshot);
        call_end(c); /* snapshots.c answers */
        rest_snapshots_restore_reply(a, req, s, snapshot);
        log_set_request(NULL);
        return;
    }
    if (c->pending.req != NULL) {
        if (r < 0) {
            http_reply_error(c->pending.req, r, "%s", e ? e->msg : strerror(-r));
        } else {
            char loc[128];

            (void)snprintf(loc, sizeof(loc), "/v1/sessions/%s", session_id(s));
            (void)evhttp_add_header(evhttp_request_get_output_headers(c->pending.req), "Location",
                                    loc);
            http_reply_json_new(c->pending.req, 201, session_to_json(s));
        }
    }
    if (r == 0) {
        log_info("session created session=%s tenant='%s' profile='%s'", session_id(s), c->tenant,
                 session_profile(s)->name);
    }
    if (r == 0 && c->pending.req == NULL) {
        /* Nobody got its id: end it rather than keep it until its idle timeout. */
        log_info("session ending session=%s: its client went away before the answer",
                 session_id(s));
        session_set_end_cause(s, NULL, "abandoned");
        (void)session_end(s, NULL, NULL, NULL);
    }
    call_end(c);
    log_set_request(NULL);
}

void
rest_sessions_create(struct http *a, struct evhttp_request *req, const char *const *params)
{
    const struct cfg_tenant *t = http_require_tenant(a, req);
    struct session_create_req cr = {0};
    struct http_create_body cb;
    struct err e = {0};
    json_t *body = NULL;
    enum http_drain drain;
    struct call *c;
    int r;

    if (t == NULL) {
        return;
    }
    if (http_body_json(req, true, &body, &e) < 0 || http_request_create(body, &cb, &e) < 0) {
        http_reply_error(req, e.code, "%s", e.msg);
        json_decref(body);
        return;
    }
    drain = a->backend->drain_state(a->backend->userdata);
    /* Placement (docs/cluster.md#placement): no warm container here, or drained or leaving:
     * another node may take it. Stopping: this node forwards nothing new either. */
    if (drain != HTTP_STOPPING && http_place(a, req, cb.profile, drain != HTTP_SERVING)) {
        http_create_body_done(&cb);
        json_decref(body);
        return;
    }
    if (drain != HTTP_SERVING) {
        http_reply_error(req, -ESHUTDOWN, "%s",
                         drain == HTTP_DRAINED ? "this node is drained: it takes no new sessions; "
                                                 "create the session on another node"
                                               : "this daemon is shutting down; retry on another");
        http_create_body_done(&cb);
        json_decref(body);
        return;
    }
    cr.tenant = t->id;
    cr.profile = cb.profile;
    cr.idle_timeout_s = cb.idle_timeout_s;
    cr.pause_after_s = cb.pause_after_s;
    cr.metadata_json = cb.metadata_json;
    cr.egress_json = cb.egress_json;
    cr.idle_action = cb.idle_action;
    if (cb.snapshot != NULL && a->backend->snapshots == NULL) {
        http_reply_error(req, -ENOSYS, "snapshots are off on this node (snapshots.store)");
        http_create_body_done(&cb);
        json_decref(body);
        return;
    }
    c = call_new(a, req, t->id);
    (void)snprintf(c->snapshot, sizeof(c->snapshot), "%s", cb.snapshot ? cb.snapshot : "");
    r = session_create(a->backend->sessions, &cr, on_session_created, c, &e);
    if (r < 0) {
        http_reply_error(req, r == -ENOENT ? -EINVAL : r, "%s", e.msg);
        call_end(c);
    }
    json_decref(body);
    http_create_body_done(&cb);
}

static void
append_session(struct session *s, void *userdata)
{
    (void)json_array_append_new(userdata, session_to_json(s));
}

void
rest_sessions_list(struct http *a, struct evhttp_request *req, const char *const *params)
{
    const struct cfg_tenant *t = http_require_tenant(a, req);
    json_t *list;

    if (t == NULL) {
        return;
    }
    list = OOM_CHECK(json_array());
    session_foreach(a->backend->sessions, t->id, append_session, list);
    /* The other nodes' sessions too (docs/cluster.md#lists). */
    if (!http_gather(a, req, &http_gather_sessions, t->id, list, false)) {
        http_reply_json_new(req, 200, OOM_CHECK(json_pack("{s:o}", "sessions", list)));
    }
}

void
rest_sessions_get(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct http_actor who;
    struct session *s = http_session_for(a, req, params[0], &who);

    if (s == NULL) {
        return;
    }
    session_touch(s);
    http_reply_json_new(req, 200, session_to_json(s));
}

static void
on_session_ended(int r, const struct err *e, void *userdata)
{
    struct call *c = userdata;

    c->done = true;
    if (c->pending.req != NULL) {
        if (r < 0) {
            http_reply_error(c->pending.req, -ENOTCONN, "%s", e ? e->msg : strerror(-r));
        } else {
            evhttp_send_reply(c->pending.req, 204, "No Content", NULL);
        }
    }
    call_end(c);
}

void
rest_sessions_delete(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct http_actor who;
    struct session *s = http_session_for(a, req, params[0], &who);

    if (s == NULL) {
        return;
    }
    rest_session_delete(a, req, s, &who);
}

void
rest_session_delete(struct http *a, struct evhttp_request *req, struct session *s,
                    const struct http_actor *who)
{
    struct err e = {0};
    struct call *c = call_new(a, req, session_tenant(s));

    session_set_end_cause(s, who->admin ? "admin" : NULL, "deleted");
    if (session_end(s, on_session_ended, c, &e) < 0) {
        http_reply_error(req, e.code == -EALREADY ? -ENOENT : e.code, "%s", e.msg);
        call_end(c);
        return;
    }
    log_info("session ending session=%s tenant='%s': deleted by %s", session_id(s),
             session_tenant(s), who->admin ? "the admin" : "the client");
}

/* ---- execute --------------------------------------------------------------------------------- */

static void
on_exec_output(struct execution *x, bool to_stderr, const char *text, size_t len, void *userdata)
{
    struct call *c = userdata;
    json_t *data;

    if (c->sse == NULL) {
        return;
    }
    data = json_stringn(text, len);
    if (data == NULL) { /* the kernel sends valid UTF-8; repair anything else */
        struct buf b = BUF_INIT(len * 3 + 1);

        (void)utf8_append_sanitized(&b, text, len);
        data = OOM_CHECK(json_stringn(b.buf, b.len));
        buf_done(&b);
    }
    if (stream_sse_send(c->sse, to_stderr ? "stderr" : "stdout",
                        OOM_CHECK(json_pack("{s:o}", "text", data)))) {
        execution_pause(x, true); /* the client reads slower than the code prints */
    }
}

static void
on_exec_artifact(struct execution *x, json_t *entry, void *userdata)
{
    struct call *c = userdata;

    if (c->sse != NULL && stream_sse_send(c->sse, "artifact", json_incref(entry))) {
        execution_pause(x, true);
    }
}

static void
on_sse_drained(void *userdata)
{
    struct call *c = userdata;

    if (c->x != NULL) {
        execution_pause(c->x, false);
    }
}

static void
on_exec_done(struct execution *x, void *userdata)
{
    struct call *c = userdata;

    struct execution_result *res = execution_result_new(x);

    c->x = NULL;
    c->done = true;
    if (c->sse != NULL) {
        struct stream_sse *sse = c->sse;

        c->sse = NULL;
        call_end(c); /* first: the end may free the connection at once (stream/out.h) */
        (void)stream_sse_send(sse, "done", rest_execution_json(res, false));
        stream_sse_end(sse);
    } else {
        if (c->pending.req != NULL) {
            http_reply_json_new(c->pending.req, 200, rest_execution_json(res, true));
        }
        call_end(c);
    }
    execution_result_free(res);
}

static const struct exec_observer exec_observer = {
    .on_output = on_exec_output,
    .on_artifact = on_exec_artifact,
    .on_done = on_exec_done,
};

static bool
wants_sse(struct evhttp_request *req)
{
    const char *accept = evhttp_find_header(evhttp_request_get_input_headers(req), "Accept");

    return accept != NULL && strcasestr(accept, "text/event-stream") != NULL;
}

void
rest_sessions_execute(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct http_actor who;
    struct session *s = http_session_live(a, req, params, rest_sessions_execute, &who);
    struct exec_req er = {0};
    struct err e = {0};
    json_t *body = NULL;
    bool sse;
    struct call *c;

    if (s == NULL) {
        return;
    }
    if (a->backend->drain_state(a->backend->userdata) == HTTP_STOPPING) {
        http_reply_error(req, -ESHUTDOWN, "this daemon is shutting down; retry shortly");
        return;
    }
    session_touch(s);
    if (http_body_json(req, false, &body, &e) < 0 || http_request_exec(body, &er, &e) < 0) {
        http_reply_error(req, e.code, "%s", e.msg);
        json_decref(body);
        return;
    }
    er.actor = who.admin ? who.name : NULL;
    sse = wants_sse(req);
    c = call_new(a, req, session_tenant(s));
    if (session_execute(s, &er, &exec_observer, c, !sse, &c->x, &e) < 0) {
        http_reply_error(req, e.code, "%s", e.msg);
        call_end(c);
        json_decref(body);
        return;
    }
    if (sse) {
        c->sse = stream_sse_start(req, on_sse_drained, c);
    }
    json_decref(body);
}

/* ---- interrupt, restart ---------------------------------------------------------------------- */

void
rest_sessions_interrupt(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct http_actor who;
    struct session *s = http_session_for(a, req, params[0], &who);
    const char *exec_id = NULL;
    struct err e = {0};

    if (s == NULL) {
        return;
    }
    session_touch(s);
    if (session_interrupt(s, &exec_id, &e) < 0) {
        http_reply_error(req, e.code, "%s", e.msg);
        return;
    }
    audit_log("execution.interrupted", who.name,
              OOM_CHECK(json_pack("{s:s, s:s, s:s}", "tenant", session_tenant(s), "session",
                                  session_id(s), "execution", exec_id)));
    http_reply_json_new(req, 202, OOM_CHECK(json_pack("{s:s}", "execution_id", exec_id)));
}

static void
on_session_restarted(int r, uint64_t epoch, const struct err *e, void *userdata)
{
    struct call *c = userdata;

    c->restart = NULL;
    c->done = true;
    if (c->pending.req != NULL) {
        if (r < 0) {
            http_reply_error(c->pending.req, r, "%s", e->msg);
        } else {
            http_reply_json_new(c->pending.req, 200,
                                OOM_CHECK(json_pack("{s:I}", "kernel_epoch", (json_int_t)epoch)));
        }
    }
    call_end(c);
}

void
rest_sessions_restart(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct http_actor who;
    struct session *s = http_session_live(a, req, params, rest_sessions_restart, &who);
    struct err e = {0};
    struct call *c;

    if (s == NULL) {
        return;
    }
    session_touch(s);
    log_info("session restart session=%s tenant='%s': asked by %s", session_id(s),
             session_tenant(s), who.admin ? "the admin" : "the client");
    audit_log(
        "session.restarted", who.name,
        OOM_CHECK(json_pack("{s:s, s:s}", "tenant", session_tenant(s), "session", session_id(s))));
    c = call_new(a, req, session_tenant(s));
    if (session_restart(s, on_session_restarted, c, &c->restart, &e) < 0) {
        http_reply_error(req, e.code, "%s", e.msg);
        call_end(c);
    }
}

/* ---- pause ----------------------------------------------------------------------------------- */

static void
on_session_paused(int r, const struct err *e, void *userdata)
{
    struct call *c = userdata;
    struct session *s;

    c->pause = NULL;
    c->done = true;
    if (c->pending.req != NULL) {
        s = session_find(c->a->backend->sessions, c->tenant, c->session);
        if (r < 0 || s == NULL) {
            http_reply_error(c->pending.req, s == NULL ? -ENOENT : r, "%s",
                             s == NULL ? "no such session (it ended meanwhile)" : err_msg(e));
        } else {
            http_reply_json_new(c->pending.req, 200, session_to_json(s));
        }
    }
    call_end(c);
}

void
rest_sessions_pause(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct http_actor who;
    struct session *s = http_session_for(a, req, params[0], &who);
    struct err e = {0};
    struct call *c;
    int r;

    if (s == NULL) {
        return;
    }
    /* The freeze, and the thaw the next call makes: bounded per tenant (the admin is not). */
    if (!who.admin && http_engine_op(a, session_tenant(s), "pauses", &e) < 0) {
        http_reply_error(req, e.code, "%s", e.msg);
        return;
    }
    c = call_new(a, req, session_tenant(s));
    (void)snprintf(c->session, sizeof(c->session), "%s", session_id(s));
    r = session_pause(s, on_session_paused, c, &c->pause, &e);
    if (r < 0) {
        http_reply_error(req, e.code, "%s", e.msg);
        call_end(c);
        return;
    }
    audit_log_limited("session.paused", who.name, session_tenant(s),
                      OOM_CHECK(json_pack("{s:s, s:s, s:s}", "tenant", session_tenant(s), "session",
                                          session_id(s), "why", "requested")));
    if (r == 0) {
        http_reply_json_new(req, 200, session_to_json(s));
        call_end(c);
    }
}

/* ---- hibernate and wake ---------------------------------------------------------------------- */

void
rest_sessions_hibernate(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct http_actor who;
    struct session *s = http_session_for(a, req, params[0], &who);
    const char *p[2] = {params[0], NULL};
    struct err e = {0};
    struct call *c;
    int r;

    if (s == NULL) {
        return;
    }
    if (session_is_paused(s)) { /* its kernel saves the globals: it runs again first */
        r = http_live_wait(a, req, s, p, rest_sessions_hibernate, &e);
        if (r < 0) {
            http_reply_error(req, e.code, "%s", e.msg);
        }
        return;
    }
    if (!who.admin && http_engine_op(a, session_tenant(s), "hibernations", &e) < 0) {
        http_reply_error(req, e.code, "%s", e.msg);
        return;
    }
    c = call_new(a, req, session_tenant(s));
    (void)snprintf(c->session, sizeof(c->session), "%s", session_id(s));
    r = session_hibernate(s, who.name, on_session_paused, c, &c->pause, &e);
    if (r < 0) {
        http_reply_error(req, e.code, "%s", e.msg);
        call_end(c);
        return;
    }
    if (r == 1) {
        log_info("session=%s hibernating, as %s asked", session_id(s), who.name);
    }
    if (r == 0) {
        http_reply_json_new(req, 200, session_to_json(s));
        call_end(c);
    }
}

void
rest_sessions_wake(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct http_actor who;
    struct session *s = http_session_live(a, req, params, rest_sessions_wake, &who);

    if (s != NULL) {
        http_reply_json_new(req, 200, session_to_json(s));
    }
}

/* ---- execution history ----------------------------------------------------------------------- */

static void
on_history(int r, json_t *executions, void *userdata)
{
    struct call *c = userdata;

    c->done = true;
    if (c->pending.req != NULL) {
        if (r < 0) {
            http_reply_error(c->pending.req, -ENOTCONN, "could not read the history from redis: %s",
                             strerror(-r));
        } else {
            http_reply_json_new(c->pending.req, 200,
                                OOM_CHECK(json_pack("{s:O}", "executions", executions)));
        }
    }
    call_end(c);
}

void
rest_sessions_executions(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct http_actor who;
    struct session *s = http_session_for(a, req, params[0], &who);
    struct err e = {0};
    struct call *c;

    if (s == NULL) {
        return;
    }
    session_touch(s);
    c = call_new(a, req, session_tenant(s));
    if (session_history(s, on_history, c, &e) < 0) {
        http_reply_error(req, e.code, "%s", e.msg);
        call_end(c);
    }
}
