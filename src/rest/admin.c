/* Admin endpoints of the HTTP API v1 (admin token only; a tenant's token gets 403):
 *
 *   GET    /v1/admin/pools               every profile's pool: targets, counts, failures, refill
 *   PUT    /v1/admin/pools/{profile}     {"warm": n}: resize the warm target live
 *   GET    /v1/admin/sessions            every tenant's sessions (?tenant=, ?profile= filter)
 *   GET    /v1/admin/sessions/{id}       one, with tenant, node and container
 *   DELETE /v1/admin/sessions/{id}       end it (204)
 *   POST   /v1/admin/drain               no new sessions on this node (readyz 503)
 *   POST   /v1/admin/undrain             take new sessions again
 *   GET    /v1/admin/policy              re-inspect every container; drifted ones are ended
 *   GET    /v1/admin/nodes               the node registry as this node last read it
 *   GET    /v1/admin/snapshots, DELETE /v1/admin/snapshots/{id}: in snapshots.c
 *
 * Every action that changes something is written to the audit log with actor "admin". */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#define LOG_MODULE "api"
#include "audit/audit.h"
#include "cluster/registry.h"
#include "log/log.h"
#include "pool/pool.h"
#include "rest/rest-internal.h"
#include "session/session.h"
#include "util/macro.h"
#include "util/parse.h"

/* A profile's sessions without CPU (paused) or without a container (hibernated). */
struct idle_counts {
    const char *profile;
    json_int_t paused, hibernated;
};

static void
count_idle(struct session *s, void *userdata)
{
    struct idle_counts *c = userdata;

    if (strcmp(session_profile(s)->name, c->profile) == 0) {
        c->paused += session_is_paused(s);
        c->hibernated += session_is_hibernated(s);
    }
}

static json_t *
pool_to_json(struct http *a, struct pool *p)
{
    struct idle_counts idle = {.profile = pool_name(p)};
    struct pool_stats st;
    json_t *o;

    pool_get_stats(p, &st);
    session_foreach(a->backend->sessions, NULL, count_idle, &idle);
    o = OOM_CHECK(json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:f}", "profile", pool_name(p),
        "warm_target", (json_int_t)st.warm_target, "ready", (json_int_t)st.ready, "starting",
        (json_int_t)(st.creating + st.starting), "bound", (json_int_t)st.bound, "removing",
        (json_int_t)st.removing, "max", (json_int_t)st.max, "waiters", (json_int_t)st.waiters,
        "created_total", (json_int_t)st.created_total, "failures_total",
        (json_int_t)st.failures_total, "last_failure",
        st.last_failure[0] ? OOM_CHECK(json_string(st.last_failure)) : json_null(),
        "refill_per_min", (double)st.refilled_last_window * 60.0 / POOL_REFILL_WINDOW_S));
    (void)json_object_set_new(o, "paused", OOM_CHECK(json_integer(idle.paused)));
    (void)json_object_set_new(o, "hibernated", OOM_CHECK(json_integer(idle.hibernated)));
    return o;
}

static struct pool *
find_pool(struct http *a, const char *name)
{
    for (size_t i = 0; i < a->backend->n_pools; i++) {
        if (strcmp(pool_name(a->backend->pools[i]), name) == 0) {
            return a->backend->pools[i];
        }
    }
    return NULL;
}

void
rest_admin_pools(struct http *a, struct evhttp_request *req, const char *const *params)
{
    json_t *list;

    if (!http_require_admin(a, req)) {
        return;
    }
    list = OOM_CHECK(json_array());
    for (size_t i = 0; i < a->backend->n_pools; i++) {
        (void)json_array_append_new(list, pool_to_json(a, a->backend->pools[i]));
    }
    http_reply_json_new(req, 200, OOM_CHECK(json_pack("{s:o}", "pools", list)));
}

void
rest_admin_pool_put(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct pool *p;
    struct pool_stats st;
    struct err e = {0};
    json_t *body = NULL, *warm;
    unsigned reserved;

    if (!http_require_admin(a, req)) {
        return;
    }
    if (a->backend->drain_state(a->backend->userdata) >= HTTP_LEAVING) {
        http_reply_error(req, -ESHUTDOWN, "this daemon is shutting down");
        return;
    }
    p = find_pool(a, params[0]);
    if (p == NULL) {
        http_reply_error(req, -ENOENT, "no profile '%.48s'", params[0]);
        return;
    }
    if (http_body_json(req, false, &body, &e) < 0) {
        http_reply_error(req, e.code, "%s", e.msg);
        return;
    }
    pool_get_stats(p, &st);
    warm = json_object_get(body, "warm");
    if (json_object_size(body) != 1 || !json_is_integer(warm) || json_integer_value(warm) < 0 ||
        json_integer_value(warm) > (json_int_t)st.max) {
        http_reply_error(req, -EINVAL,
                         "the body must be {\"warm\": n} with n from 0 to the profile's max (%u)",
                         st.max);
        json_decref(body);
        return;
    }
    reserved = cfg_reserved_for_others(a->cfg, NULL, pool_name(p));
    if (json_integer_value(warm) < (json_int_t)reserved) {
        /* Below the tenants' reservations every other tenant would always start cold. */
        http_reply_error(req, -EINVAL,
                         "tenants reserve %u warm containers of profile '%s': 'warm' must be at "
                         "least that",
                         reserved, pool_name(p));
        json_decref(body);
        return;
    }
    log_info("pool '%s': warm target %u -> %lld by the admin", pool_name(p), st.warm_target,
             (long long)json_integer_value(warm));
    audit_log("admin.pool_resize", "admin",
              OOM_CHECK(json_pack("{s:s, s:I, s:I}", "profile", pool_name(p), "from",
                                  (json_int_t)st.warm_target, "to", json_integer_value(warm))));
    pool_set_warm(p, (unsigned)json_integer_value(warm));
    json_decref(body);
    http_reply_json_new(req, 200, pool_to_json(a, p));
}

struct admin_list {
    json_t *list;
    const char *profile; /* filter, or NULL */
};

static void
append_admin_session(struct session *s, void *userdata)
{
    struct admin_list *l = userdata;

    if (l->profile == NULL || strcmp(session_profile(s)->name, l->profile) == 0) {
        (void)json_array_append_new(l->list, session_to_admin_json(s));
    }
}

void
rest_admin_sessions(struct http *a, struct evhttp_request *req, const char *const *params)
{
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    struct evkeyvalq q = {0};
    struct admin_list l = {0};
    const char *tenant;

    if (!http_require_admin(a, req)) {
        return;
    }
    if (query != NULL && evhttp_parse_query_str(query, &q) < 0) {
        http_reply_error(req, -EINVAL, "malformed query string");
        return;
    }
    tenant = evhttp_find_header(&q, "tenant");
    l.profile = evhttp_find_header(&q, "profile");
    if ((tenant != NULL && !str_is_name(tenant, 64)) ||
        (l.profile != NULL && !str_is_name(l.profile, 48))) {
        http_reply_error(req, -EINVAL, "'tenant' and 'profile' must be names ([A-Za-z0-9._-])");
        evhttp_clear_headers(&q);
        return;
    }
    l.list = OOM_CHECK(json_array());
    session_foreach(a->backend->sessions, tenant, append_admin_session, &l);
    evhttp_clear_headers(&q);
    /* The other nodes' sessions too (docs/cluster.md#lists). */
    if (!http_gather(a, req, &http_gather_sessions, "(admin)", l.list, false)) {
        http_reply_json_new(req, 200, OOM_CHECK(json_pack("{s:o}", "sessions", l.list)));
    }
}

void
rest_admin_session_get(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct http_actor who;
    struct session *s = http_admin_session_for(a, req, params[0], &who);

    if (s != NULL) {
        http_reply_json_new(req, 200, session_to_admin_json(s));
    }
}

void
rest_admin_session_delete(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct http_actor who;
    struct session *s = http_admin_session_for(a, req, params[0], &who);

    if (s != NULL) {
        rest_session_delete(a, req, s, &who);
    }
}

static size_t
count_sessions(struct http *a)
{
    struct session_manager_stats st;

    session_manager_get_stats(a->backend->sessions, &st);
    return st.sessions;
}

static void
set_drained(struct http *a, struct evhttp_request *req, bool drained)
{
    const struct http_backend *b = a->backend;

    if (!http_require_admin(a, req)) {
        return;
    }
    if (b->drain_state(b->userdata) >= HTTP_LEAVING) {
        http_reply_error(req, -ESHUTDOWN, "this daemon is shutting down");
        return;
    }
    b->set_drained(b->userdata, drained);
    audit_log(drained ? "admin.drain" : "admin.undrain", "admin", NULL);
    http_reply_json_new(req, 200,
                        OOM_CHECK(json_pack("{s:b, s:I}", "draining", drained, "sessions",
                                            (json_int_t)count_sessions(a))));
}

void
rest_admin_drain(struct http *a, struct evhttp_request *req, const char *const *params)
{
    set_drained(a, req, true);
}

void
rest_admin_undrain(struct http *a, struct evhttp_request *req, const char *const *params)
{
    set_drained(a, req, false);
}

/* ---- nodes ----------------------------------------------------------------------------------- */

void
rest_admin_nodes(struct http *a, struct evhttp_request *req, const char *const *params)
{
    if (http_require_admin(a, req)) {
        http_reply_json_new(req, 200, registry_to_json(a->backend->registry));
    }
}

/* ---- policy ---------------------------------------------------------------------------------- */

/* A GET /v1/admin/policy waiting for the check; the request dies with its connection. */
struct policy_call {
    struct http *a;
    struct http_pending pending;
    struct http_policy_wait *wait;
};

static void
on_policy_gone(struct http_pending *p)
{
    struct policy_call *c = container_of(p, struct policy_call, pending);

    c->a->backend->policy_cancel(c->a->backend->userdata, c->wait);
    free(c);
}

static void
on_policy_report(json_t *report, void *arg)
{
    struct policy_call *c = arg;
    struct evhttp_request *req = c->pending.req;

    http_pending_end(&c->pending);
    audit_log(
        "admin.policy_check", "admin",
        OOM_CHECK(json_pack("{s:O, s:I}", "checked", json_object_get(report, "checked"), "drifted",
                            (json_int_t)json_array_size(json_object_get(report, "drifted")))));
    http_reply_json_new(req, 200, json_incref(report));
    free(c);
}

void
rest_admin_policy(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct policy_call *c;

    if (!http_require_admin(a, req)) {
        return;
    }
    c = xcalloc(1, sizeof(*c));
    c->a = a;
    http_pending_start(&c->pending, req, on_policy_gone);
    c->wait = a->backend->policy_check(a->backend->userdata, on_policy_report, c);
}
