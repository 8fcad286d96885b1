/* Snapshot endpoints of the HTTP API v1 (docs/hibernate.md):
 *
 *   POST   /v1/sessions/{id}/snapshots   a snapshot of the session, which goes on (201 + Snapshot)
 *   GET    /v1/snapshots                 the tenant's snapshots, newest first
 *   GET    /v1/snapshots/{id}            one Snapshot
 *   DELETE /v1/snapshots/{id}            delete it (204)
 *   POST   /v1/sessions {"snapshot": id} a new session restored from one (sessions.c hands the
 *                                        created session over: rest_snapshots_restore_reply())
 *   GET    /v1/admin/snapshots           every tenant's (?tenant= one's), with their byte counts
 *   DELETE /v1/admin/snapshots/{id}      any tenant's snapshot (204; 409 a hibernated session's)
 *
 * Another tenant's snapshot is a 404 exactly like an unknown one. Without snapshots.store they
 * answer 501. The calls follow sessions.c's rule: the request belongs to libevent, so a call
 * watches its connection and, once the client left, only frees itself when its work ends (and
 * touches nothing of the API then: it may be gone). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#define LOG_MODULE "api"
#include "log/log.h"
#include "rest/rest-internal.h"
#include "session/session.h"
#include "snapshot/snapshot.h"
#include "util/macro.h"
#include "util/parse.h"

struct scall {
    struct http *a;
    struct http_pending pending; /* req NULL once the client left */
    char tenant[65], session[65], actor[80];
    int status; /* of the answer: 201 a take, 200 a get or a list */
};

static void
on_gone(struct http_pending *p)
{
    /* The work goes on; its end frees the call. */
}

static struct scall *
scall_new(struct http *a, struct evhttp_request *req, const char *tenant, const char *actor)
{
    struct scall *c = xcalloc(1, sizeof(*c));

    c->a = a;
    c->status = 200;
    (void)snprintf(c->tenant, sizeof(c->tenant), "%s", tenant);
    (void)snprintf(c->actor, sizeof(c->actor), "%s", actor);
    http_pending_start(&c->pending, req, on_gone);
    return c;
}

/* The work ended: the request when the client still waits (reply, then scall_free()); NULL, with
 * the call freed, when it left. */
static struct evhttp_request *
scall_waiting(struct scall *c)
{
    struct evhttp_request *req = c->pending.req;

    if (req == NULL) {
        free(c);
        return NULL;
    }
    http_pending_end(&c->pending);
    http_pending_log(&c->pending);
    return req;
}

static void
scall_free(struct scall *c)
{
    log_set_request(NULL);
    free(c);
}

static bool
enabled(struct http *a, struct evhttp_request *req)
{
    if (a->backend->snapshots == NULL) {
        http_reply_error(req, -ENOSYS, "snapshots are off on this node (snapshots.store)");
        return false;
    }
    return true;
}

static void
reply_failure(struct evhttp_request *req, int r, const struct err *e)
{
    http_reply_error(req, r, "%s", e != NULL && e->msg[0] ? e->msg : strerror(-r));
}

/* ---- take ------------------------------------------------------------------------------------ */

/* A Snapshot (or the list) answered with c->status, or the error. */
static void
on_json(int r, json_t *doc, const struct err *e, void *userdata)
{
    struct scall *c = userdata;
    struct evhttp_request *req = scall_waiting(c);

    if (req == NULL) {
        return;
    }
    if (r < 0) {
        reply_failure(req, r, e);
    } else {
        http_reply_json_new(req, c->status, json_incref(doc));
    }
    scall_free(c);
}

void
rest_snapshots_take(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct http_actor who;
    struct session *s;
    struct err e = {0};
    struct scall *c;

    if (!enabled(a, req) ||
        (s = http_session_live(a, req, params, rest_snapshots_take, &who)) == NULL) {
        return;
    }
    session_touch(s);
    if (!who.admin && http_engine_op(a, session_tenant(s), "snapshots", &e) < 0) {
        reply_failure(req, e.code, &e);
        return;
    }
    c = scall_new(a, req, session_tenant(s), who.name);
    c->status = 201;
    if (snapshots_take(a->backend->snapshots, s, who.name, on_json, c, &e) < 0) {
        http_pending_end(&c->pending);
        reply_failure(req, e.code, &e);
        free(c);
    }
}

/* ---- get, list, delete ----------------------------------------------------------------------- */

static void
on_deleted(int r, const struct err *e, void *userdata)
{
    struct scall *c = userdata;
    struct evhttp_request *req = scall_waiting(c);

    if (req == NULL) {
        return;
    }
    if (r < 0) {
        reply_failure(req, r, e);
    } else {
        evhttp_send_reply(req, 204, "No Content", NULL);
    }
    scall_free(c);
}

/* The tenant's call on its snapshots (params[0]: the id, or NULL for the list). */
static void
records_call(struct http *a, struct evhttp_request *req, const char *id,
             enum evhttp_cmd_type method)
{
    const struct cfg_tenant *t = http_require_tenant(a, req);
    struct err e = {0};
    struct scall *c;
    char actor[80];
    int r;

    if (t == NULL || !enabled(a, req)) {
        return;
    }
    (void)snprintf(actor, sizeof(actor), "tenant:%s", t->id);
    c = scall_new(a, req, t->id, actor);
    if (id == NULL) {
        r = snapshots_list(a->backend->snapshots, t->id, on_json, c, &e);
    } else if (method == EVHTTP_REQ_DELETE) {
        r = snapshots_delete(a->backend->snapshots, t->id, id, actor, on_deleted, c, &e);
    } else {
        r = snapshots_get(a->backend->snapshots, t->id, id, on_json, c, &e);
    }
    if (r < 0) {
        http_pending_end(&c->pending);
        reply_failure(req, e.code, &e);
        free(c);
    }
}

void
rest_snapshots_list(struct http *a, struct evhttp_request *req, const char *const *params)
{
    records_call(a, req, NULL, EVHTTP_REQ_GET);
}

void
rest_snapshots_get(struct http *a, struct evhttp_request *req, const char *const *params)
{
    records_call(a, req, params[0], EVHTTP_REQ_GET);
}

void
rest_snapshots_delete(struct http *a, struct evhttp_request *req, const char *const *params)
{
    records_call(a, req, params[0], EVHTTP_REQ_DELETE);
}

/* ---- the admin's ---------------------------------------------------------------------------- */

void
rest_admin_snapshots(struct http *a, struct evhttp_request *req, const char *const *params)
{
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    struct evkeyvalq q = {0};
    const char **names;
    const char *tenant;
    struct err e = {0};
    struct scall *c;
    size_t n = 0;

    if (!http_require_admin(a, req) || !enabled(a, req)) {
        return;
    }
    if (query != NULL && evhttp_parse_query_str(query, &q) < 0) {
        http_reply_error(req, -EINVAL, "malformed query string");
        return;
    }
    tenant = evhttp_find_header(&q, "tenant");
    if (tenant != NULL && !str_is_name(tenant, 64)) {
        http_reply_error(req, -EINVAL, "'tenant' must be a name ([A-Za-z0-9._-], 1-64 bytes)");
        evhttp_clear_headers(&q);
        return;
    }
    names = xcalloc(a->cfg->n_tenants + 1, sizeof(*names));
    if (tenant != NULL) { /* also one no longer in the configuration: its snapshots stay */
        names[n++] = tenant;
    } else {
        for (size_t i = 0; i < a->cfg->n_tenants; i++) {
            names[n++] = a->cfg->tenants[i].id;
        }
    }
    if (n == 0) {
        http_reply_json_new(
            req, 200,
            OOM_CHECK(json_pack("{s:[], s:[], s:b}", "snapshots", "tenants", "truncated", false)));
    } else {
        c = scall_new(a, req, "", "admin");
        if (snapshots_admin_list(a->backend->snapshots, names, n, on_json, c, &e) < 0) {
            http_pending_end(&c->pending);
            reply_failure(req, e.code, &e);
            free(c);
        }
    }
    free(names);
    evhttp_clear_headers(&q);
}

void
rest_admin_snapshot_delete(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct err e = {0};
    struct scall *c;

    if (!http_require_admin(a, req) || !enabled(a, req)) {
        return;
    }
    c = scall_new(a, req, "", "admin");
    if (snapshots_delete(a->backend->snapshots, NULL, params[0], "admin", on_deleted, c, &e) < 0) {
        http_pending_end(&c->pending);
        reply_failure(req, e.code, &e);
        free(c);
    }
}

/* ---- a session from a snapshot --------------------------------------------------------------- */

static void
on_restored(int r, json_t *restored, const struct err *e, void *userdata)
{
    struct scall *c = userdata;
    struct evhttp_request *req = scall_waiting(c);
    struct session *s;

    if (req == NULL) {
        return; /* the client left: the session is theirs no more, its idle timeout ends it */
    }
    s = session_find(c->a->backend->sessions, c->tenant, c->session);
    if (r == 0 && s != NULL) {
        char loc[128];

        session_set_restored(s, restored);
        (void)snprintf(loc, sizeof(loc), "/v1/sessions/%s", session_id(s));
        (void)evhttp_add_header(evhttp_request_get_output_headers(req), "Location", loc);
        http_reply_json_new(req, 201, session_to_json(s));
        log_info("session created session=%s tenant='%s' from snapshot %s", session_id(s),
                 c->tenant, json_string_value(json_object_get(restored, "from")));
    } else {
        if (s != NULL) { /* never a half-restored sandbox presented as whole */
            session_set_end_cause(s, "daemon", r == -EBADMSG ? "snapshot_lost" : "restore_failed");
            (void)session_end(s, NULL, NULL, NULL);
        }
        reply_failure(req, r < 0 ? r : -EPIPE, e);
    }
    scall_free(c);
}

void
rest_snapshots_restore_reply(struct http *a, struct evhttp_request *req, struct session *s,
                             const char *snapshot)
{
    struct err e = {0};
    char actor[80];
    struct scall *c;

    (void)snprintf(actor, sizeof(actor), "tenant:%s", session_tenant(s));
    c = scall_new(a, req, session_tenant(s), actor);
    (void)snprintf(c->session, sizeof(c->session), "%s", session_id(s));
    if (snapshots_restore(a->backend->snapshots, s, snapshot, on_restored, c, &e) < 0) {
        on_restored(e.code, NULL, &e, c);
    }
}
