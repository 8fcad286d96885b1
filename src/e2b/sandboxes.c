/* The E2B control plane (E2B_API_URL, docs/e2b.md): sandboxes created (POST /v2/sandboxes,
 * /sandboxes), listed (GET, with paging and a metadata filter), read, given a timeout, connected
 * to, paused (a hibernation: docs/hibernate.md; a connect or any envd call resumes it) and killed,
 * with a tenant's E2B key in X-API-KEY (its SHA-256 in the tenant's
 * e2b_keys_sha256). A sandbox is a session of the key's tenant whose ext is an E2B record; its
 * lease is the session's expires_at. Asynchronous handlers keep a struct e2b_wait that watches the
 * connection, as sessions.c's calls do: a reply only to a live request. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#define LOG_MODULE "e2b"
#include "audit/audit.h"
#include "cluster/route.h"
#include "e2b/e2b-internal.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/time.h"

/* ---- the control plane ----------------------------------------------------------------------- */

/* The tenant of the request's X-API-KEY, or NULL after replying 401. */
static const struct cfg_tenant *
require_key(struct http *a, struct evhttp_request *req)
{
    const char *key = evhttp_find_header(evhttp_request_get_input_headers(req), "X-API-KEY");
    const struct cfg_tenant *t = key != NULL ? http_auth_e2b_key(a->cfg, key, strlen(key)) : NULL;

    if (t == NULL) {
        e2b_room(a)->stats.refused_key++;
        if (key != NULL) {
            audit_log_limited("e2b.refused", "anonymous", NULL,
                              OOM_CHECK(json_pack("{s:s, s:s}", "plane", "control", "why",
                                                  "the API key is not valid here")));
        }
        http_reply_close(req);
        e2b_reply_error(req, 401, "%s", key ? "the API key is not valid here" : "no X-API-KEY");
        return NULL;
    }
    http_conn_authenticated(a->conns, req);
    return t;
}

/* The tenant's E2B sandbox with this id, with its record; NULL (and *ret untouched) for an
 * unknown id, another tenant's and a session that is no E2B sandbox. */
static struct session *
tenant_sandbox(struct http *a, const struct cfg_tenant *t, const char *id, struct e2b_ext *ret)
{
    struct session *s = session_find(a->backend->sessions, t->id, id);

    if (s == NULL || e2b_ext_decode(session_ext(s), ret) < 0) {
        return NULL;
    }
    return s;
}

/* The Sandbox object of create and connect. */
static json_t *
sandbox_json(struct http *a, struct session *s, const struct e2b_ext *x)
{
    return OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:n}", "templateID",
                               x->template_id, "alias", x->template_id, "sandboxID", session_id(s),
                               "clientID", a->cfg->node_id, "envdVersion", E2B_ENVD_VERSION,
                               "envdAccessToken", x->envd_token, "trafficAccessToken",
                               x->traffic_token, "domain"));
}

static json_t *
time_json(uint64_t wall_ms)
{
    char t[40];

    return OOM_CHECK(json_string(time_rfc3339(wall_ms, t, sizeof(t))));
}

/* E2B's "paused": hibernated here (or frozen, or on the way to or from either). */
static bool
is_paused(const struct session *s)
{
    return session_is_hibernated(s) || session_is_paused(s);
}

/* SandboxDetail (getInfo) and ListedSandbox (list): the same members here. */
static json_t *
detail_json(struct http *a, struct session *s, const struct e2b_ext *x)
{
    const struct cfg_profile *p = session_profile(s);
    json_t *view = session_to_json(s);
    json_t *o = OOM_CHECK(
        json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:i, s:i, s:i, s:s, s:s, s:O}", "templateID",
                  x->template_id, "alias", x->template_id, "sandboxID", session_id(s), "clientID",
                  a->cfg->node_id, "startedAt", time_json(session_created_at(s)), "endAt",
                  time_json(session_expires_at(s)), "cpuCount", (int)MAX(1.0, p->cpus + 0.5),
                  "memoryMB", (int)p->memory_mb, "diskSizeMB", (int)p->workspace_mb, "state",
                  is_paused(s) ? "paused" : "running", "envdVersion", E2B_ENVD_VERSION, "metadata",
                  json_object_get(view, "metadata")));

    json_decref(view);
    return o;
}

static void
on_created(int r, struct session *s, const struct err *e, void *userdata)
{
    struct e2b_wait *w = userdata;
    struct e2b_ext x;

    http_pending_log(&w->pending);
    if (w->pending.req != NULL && r < 0) {
        e2b_reply_error(w->pending.req, e2b_status_of(r), "%s", e ? e->msg : strerror(-r));
    } else if (w->pending.req != NULL) {
        (void)e2b_ext_decode(session_ext(s), &x);
        http_reply_json_new(w->pending.req, 201, sandbox_json(w->a, s, &x));
    }
    if (r == 0) {
        char until[40];

        e2b_room(w->a)->stats.created++;
        (void)e2b_ext_decode(session_ext(s), &x);
        log_info("e2b sandbox created session=%s tenant='%s' profile='%s'", session_id(s),
                 w->tenant, session_profile(s)->name);
        audit_log("e2b.sandbox.created", w->actor,
                  OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s, s:s}", "tenant", w->tenant, "session",
                                      session_id(s), "template", x.template_id, "profile",
                                      session_profile(s)->name, "lease_until",
                                      time_rfc3339(session_expires_at(s), until, sizeof(until)))));
    }
    if (r == 0 && w->pending.req == NULL) {
        session_set_end_cause(s, NULL, "abandoned");
        (void)session_end(s, NULL, NULL, NULL);
    }
    e2b_wait_end(w);
    log_set_request(NULL);
}

/* templateID -> the profile, or NULL after replying 400 naming the known ones. */
static const char *
template_profile(struct http *a, struct evhttp_request *req, const struct cfg_tenant *t,
                 const char *template_id, char *out, size_t n)
{
    struct cfg_e2b_template known[CFG_E2B_TEMPLATES_MAX];
    size_t k = cfg_e2b_templates(a->cfg, t, known, ELEMENTSOF(known));
    char names[1024] = "";

    for (size_t i = 0; i < k; i++) {
        if (strcmp(known[i].name, template_id) == 0) {
            (void)snprintf(out, n, "%s", known[i].profile);
            return out;
        }
        (void)snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s'%s'",
                       i ? ", " : "", known[i].name);
    }
    e2b_reply_error(req, 400, "unknown template '%.64s'; the known ones: %s", template_id, names);
    return NULL;
}

static bool
may_create(struct http *a, struct evhttp_request *req)
{
    switch (a->backend->drain_state(a->backend->userdata)) {
    case HTTP_SERVING:
        return true;
    case HTTP_DRAINED:
        e2b_reply_error(req, 503, "this node is drained: it takes no new sandboxes");
        return false;
    default:
        e2b_reply_error(req, 503, "this daemon is shutting down; retry on another");
        return false;
    }
}

static void
sandbox_create(struct http *a, struct evhttp_request *req, const struct cfg_tenant *t)
{
    struct session_create_req cr = {.tenant = t->id};
    char *metadata = NULL, *egress = NULL; /* compact text, checked */
    struct e2b_create c;
    struct e2b_ext x = {0};
    char profile[49], ext[SESSION_EXT_MAX + 1];
    const struct cfg_profile *p;
    struct err e = {0};
    json_t *body, *net = NULL;
    enum http_drain drain;
    struct e2b_wait *w;
    int r;

    if ((body = e2b_body_json(req)) == NULL) {
        return;
    }
    if (e2b_create_parse(body, &c, &e) < 0) {
        e2b_reply_error(req, 400, "%s", e.msg);
        json_decref(body);
        return;
    }
    if (template_profile(a, req, t, c.template_id, profile, sizeof(profile)) == NULL) {
        json_decref(body);
        return;
    }
    if ((p = cfg_profile_find(a->cfg, profile)) == NULL) { /* cfg_validate() makes it one */
        e2b_reply_error(req, 500, "template '%.64s' names no profile", c.template_id);
        json_decref(body);
        return;
    }
    drain = a->backend->drain_state(a->backend->userdata);
    /* Placement, as for REST's creates (docs/cluster.md#placement); a drained node or one that is
     * leaving makes none itself. */
    if ((drain != HTTP_STOPPING && http_place(a, req, profile, drain != HTTP_SERVING)) ||
        !may_create(a, req)) {
        json_decref(body);
        return;
    }
    if (e2b_network_parse(body, &net, &e) < 0) {
        e2b_reply_error(req, 400, "%s", e.msg);
        json_decref(body);
        return;
    }
    /* The SDK's network options narrow the profile's list, if it has one (else there is no way
     * out to narrow). */
    r = http_request_metadata(c.metadata, &metadata, &e);
    if (r == 0 && p->egress != NULL && net != NULL) {
        r = http_request_egress(net, &egress, &e);
    }
    json_decref(net);
    if (r < 0) {
        e2b_reply_error(req, e2b_status_of(r), "%s", e.msg);
        free(metadata);
        json_decref(body);
        return;
    }
    (void)snprintf(x.template_id, sizeof(x.template_id), "%s", c.template_id);
    if (c.env_vars != NULL) {
        (void)e2b_env_text(c.env_vars, x.env, sizeof(x.env)); /* checked by e2b_create_parse() */
    }
    random_hex(x.envd_token, E2B_TOKEN_LEN / 2);
    random_hex(x.traffic_token, E2B_TOKEN_LEN / 2);
    (void)e2b_ext_encode(&x, ext, sizeof(ext));
    cr.profile = profile;
    cr.metadata_json = metadata;
    cr.egress_json = egress;
    cr.lifetime_s =
        MIN(c.timeout_s ? c.timeout_s : a->cfg->e2b_default_timeout_s, p->max_lifetime_s);
    cr.ext = ext;
    w = e2b_wait_new(a, req, t, NULL);
    r = session_create(a->backend->sessions, &cr, on_created, w, &e);
    if (r < 0) {
        e2b_reply_error(req, r == -ENOENT ? 400 : e2b_status_of(r), "%s", e.msg);
        e2b_wait_end(w);
    }
    free(metadata);
    free(egress);
    json_decref(body);
}

/* The list: the tenant's sandboxes in id order, a page after l->after. */
struct listed {
    struct session *s;
};

struct listing {
    const struct e2b_list *l;
    struct listed *found;
    size_t n, cap;
};

static void
collect(struct session *s, void *userdata)
{
    struct listing *ls = userdata;
    struct e2b_ext x;

    if (e2b_ext_decode(session_ext(s), &x) < 0 || strcmp(session_id(s), ls->l->after) <= 0 ||
        !(is_paused(s) ? ls->l->paused : ls->l->running)) {
        return;
    }
    if (ls->n == ls->cap) {
        ls->cap = ls->cap ? 2 * ls->cap : 64;
        ls->found = xrealloc(ls->found, ls->cap * sizeof(*ls->found));
    }
    ls->found[ls->n++].s = s;
}

static int
by_id(const void *x, const void *y)
{
    return strcmp(session_id(((const struct listed *)x)->s),
                  session_id(((const struct listed *)y)->s));
}

/* A page of all nodes' sandboxes (each node's own page, in id order): the first l.limit of them
 * in id order, and a next token when there are more. */
static int
by_sandbox_id(const void *x, const void *y)
{
    return strcmp(json_string_value(json_object_get(*(json_t *const *)x, "sandboxID")),
                  json_string_value(json_object_get(*(json_t *const *)y, "sandboxID")));
}

static void
merge_pages(struct http *a, struct evhttp_request *req, json_t *list, bool more)
{
    struct e2b_list l = {0};
    struct err e = {0};
    size_t n = 0, keep;
    json_t **items = xcalloc(json_array_size(list) + 1, sizeof(json_t *));

    if (e2b_list_parse(evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req)), &l, &e) < 0) {
        l.limit = (unsigned)json_array_size(list); /* parsed once already: cannot fail here */
    }
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *d = json_array_get(list, i);

        if (json_is_string(json_object_get(d, "sandboxID"))) { /* else no sandbox of ours */
            items[n++] = json_incref(d);
        }
    }
    if (n > 1) {
        qsort(items, n, sizeof(json_t *), by_sandbox_id);
    }
    keep = MIN(n, (size_t)l.limit);
    (void)json_array_clear(list);
    for (size_t i = 0; i < n; i++) {
        if (i < keep) {
            (void)json_array_append(list, items[i]);
        }
        json_decref(items[i]);
    }
    if (keep > 0 && (more || n > keep)) {
        (void)evhttp_add_header(
            evhttp_request_get_output_headers(req), "X-Next-Token",
            json_string_value(json_object_get(json_array_get(list, keep - 1), "sandboxID")));
    }
    free(items);
    e2b_list_done(&l);
}

static const struct http_gather_spec list_spec = {.merge = merge_pages,
                                                  .refuse = e2b_refuse_routed};

static void
sandbox_list(struct http *a, struct evhttp_request *req, const struct cfg_tenant *t)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    struct listing ls = {0};
    struct e2b_list l;
    struct err e = {0};
    json_t *out = OOM_CHECK(json_array());
    size_t shown = 0, i;
    bool more;

    if (e2b_list_parse(evhttp_uri_get_query(uri), &l, &e) < 0) {
        e2b_reply_error(req, 400, "%s", e.msg);
        json_decref(out);
        return;
    }
    ls.l = &l;
    session_foreach(a->backend->sessions, t->id, collect, &ls);
    if (ls.n > 1) {
        qsort(ls.found, ls.n, sizeof(*ls.found), by_id);
    }
    for (i = 0; i < ls.n && shown < l.limit; i++) {
        struct e2b_ext x;
        json_t *d;

        (void)e2b_ext_decode(session_ext(ls.found[i].s), &x);
        d = detail_json(a, ls.found[i].s, &x);
        if (e2b_list_matches(&l, json_object_get(d, "metadata"))) {
            (void)json_array_append_new(out, d);
            shown++;
        } else {
            json_decref(d);
        }
    }
    more = shown == l.limit && i < ls.n;
    free(ls.found);
    e2b_list_done(&l);
    /* The other nodes' sandboxes too (docs/cluster.md#lists): their pages, merged. */
    if (http_gather(a, req, &list_spec, t->id, out, more)) {
        return;
    }
    if (more) {
        (void)evhttp_add_header(evhttp_request_get_output_headers(req), "X-Next-Token",
                                json_string_value(json_object_get(
                                    json_array_get(out, json_array_size(out) - 1), "sandboxID")));
    }
    http_reply_json_new(req, 200, out);
}

/* The end of a wait whose answer has no body: 204, or the error; then the wait goes. */
static void
wait_end_empty(struct e2b_wait *w, int r, const struct err *e)
{
    if (w->pending.req != NULL && r < 0) {
        e2b_reply_error(w->pending.req, e2b_status_of(r), "%s", e ? e->msg : strerror(-r));
    } else if (w->pending.req != NULL) {
        evhttp_send_reply(w->pending.req, 204, "No Content", NULL);
    }
    e2b_wait_end(w);
    log_set_request(NULL);
}

static void
on_killed(int r, const struct err *e, void *userdata)
{
    struct e2b_wait *w = userdata;

    http_pending_log(&w->pending);
    if (r == 0) {
        e2b_room(w->a)->stats.killed++;
    }
    wait_end_empty(w, r, e);
}

static void
sandbox_kill(struct http *a, struct evhttp_request *req, const struct cfg_tenant *t,
             struct session *s)
{
    struct e2b_wait *w = e2b_wait_new(a, req, t, session_id(s));
    struct err e = {0};
    int r;

    session_set_end_cause(s, NULL, "killed");
    r = session_end(s, on_killed, w, &e);
    if (r < 0) {
        e2b_reply_error(req, e2b_status_of(r), "%s", e.msg);
        e2b_wait_end(w);
    }
}

static void
on_lease_set(int r, uint64_t expires_at, void *userdata)
{
    struct e2b_wait *w = userdata;
    struct session *s;
    struct e2b_ext x;

    if (r == -ECANCELED) { /* the daemon is stopping: the api (and its clients) may be gone */
        e2b_wait_end(w);
        return;
    }
    s = session_find(w->a->backend->sessions, w->tenant, w->id);
    http_pending_log(&w->pending);
    if (r == 0) {
        char until[40];

        e2b_room(w->a)->stats.leases_set++;
        audit_log("e2b.sandbox.lease", w->actor,
                  OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s}", "tenant", w->tenant, "session", w->id,
                                      "by", w->connect ? "connect" : "timeout", "lease_until",
                                      time_rfc3339(expires_at, until, sizeof(until)))));
    }
    if (w->pending.req != NULL && (r < 0 || s == NULL || e2b_ext_decode(session_ext(s), &x) < 0)) {
        e2b_reply_error(w->pending.req, r < 0 ? e2b_status_of(r) : 404, "sandbox %s %s", w->id,
                        r == -ENOTCONN ? "could not be changed (redis is down); retry"
                                       : "is not running");
    } else if (w->pending.req != NULL && w->connect) {
        http_reply_json_new(w->pending.req, 200, sandbox_json(w->a, s, &x));
    } else if (w->pending.req != NULL) {
        evhttp_send_reply(w->pending.req, 204, "No Content", NULL);
    }
    e2b_wait_end(w);
    log_set_request(NULL);
}

static void
on_paused(int r, const struct err *e, void *userdata)
{
    struct e2b_wait *w = userdata;

    http_pending_log(&w->pending);
    if (r == 0) {
        e2b_room(w->a)->stats.paused++;
        audit_log_limited(
            "e2b.sandbox.paused", w->actor, w->tenant,
            OOM_CHECK(json_pack("{s:s, s:s}", "tenant", w->tenant, "session", w->id)));
    }
    wait_end_empty(w, r, e);
}

/* POST .../pause: the sandbox hibernates (its workspace and variables kept in a snapshot, its
 * container released); 409 when it is paused already (the SDK's false). */
static void
sandbox_pause(struct http *a, struct evhttp_request *req, const struct cfg_tenant *t,
              struct session *s)
{
    struct session_waiter *waiter = NULL;
    struct e2b_wait *w;
    struct err e = {0};
    int r;

    if (is_paused(s) && !session_is_paused(s)) {
        e2b_reply_error(req, 409, "sandbox %s is already paused", session_id(s));
        return;
    }
    if (http_engine_op(a, t->id, "pauses", &e) < 0) {
        e2b_reply_error(req, e2b_status_of(e.code), "%s", e.msg);
        return;
    }
    w = e2b_wait_new(a, req, t, session_id(s));
    r = session_hibernate(s, w->actor, on_paused, w, &waiter, &e);
    if (r <= 0) {
        if (r == 0) {
            e2b_reply_error(req, 409, "sandbox %s is already paused", session_id(s));
        } else {
            e2b_reply_error(req, e2b_status_of(r), "%s", e.msg);
        }
        e2b_wait_end(w);
    }
}

/* POST .../timeout (the lease becomes now + timeout) and .../connect (extended, never
 * shortened: a connect that would shorten it changes nothing). */
static void
sandbox_lease(struct http *a, struct evhttp_request *req, const struct cfg_tenant *t,
              struct session *s, bool connect)
{
    uint64_t now = time_wall_ms(), at;
    struct e2b_ext x;
    struct err e = {0};
    unsigned timeout_s;
    json_t *body = e2b_body_json(req);
    struct e2b_wait *w;
    int r;

    if (body == NULL) {
        return;
    }
    r = e2b_timeout_parse(body, !connect, &timeout_s, &e);
    json_decref(body);
    if (r < 0) {
        e2b_reply_error(req, 400, "%s", e.msg);
        return;
    }
    at = now + (uint64_t)timeout_s * 1000u;
    if (connect && (timeout_s == 0 || at <= session_expires_at(s))) {
        (void)e2b_ext_decode(session_ext(s), &x);
        http_reply_json_new(req, 200, sandbox_json(a, s, &x));
        return;
    }
    w = e2b_wait_new(a, req, t, session_id(s));
    w->connect = connect;
    r = session_set_expiry(s, at, on_lease_set, w, &e);
    if (r < 0) {
        e2b_reply_error(req, e2b_status_of(r), "%s", e.msg);
        e2b_wait_end(w);
    }
}

/* A sandbox that no node has (the id is the path's, after "sandboxes/"). */
static void
sandbox_not_found(struct http *a, struct evhttp_request *req, const struct route_answer *ans)
{
    char id[E2B_ID_MAX + 1] = "";
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    const char *rest = path != NULL ? strstr(path, "/sandboxes/") : NULL;

    if (rest != NULL) {
        (void)e2b_control_route(rest + 1, id);
    }
    e2b_reply_error(req, 404, "sandbox %s not found%s", id,
                    ans->node_lost ? ": its node was lost" : "");
}

static const struct http_route_style control_style = {
    .here = sandbox_not_found,
    .refuse = e2b_refuse_routed,
};

/* rest: the path after "/e2b/api/". */
void
e2b_route_control(struct http *a, struct evhttp_request *req, const char *const *params)
{
    const char *rest = params[1];
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    const struct cfg_tenant *t = require_key(a, req);
    char id[E2B_ID_MAX + 1] = "";
    enum e2b_route route;
    struct e2b_ext x;
    struct session *s;

    if (t == NULL) {
        return;
    }
    e2b_room(a)->stats.requests[E2B_PLANE_CONTROL]++;
    route = e2b_control_route(rest, id);
    if (route == E2B_ROUTE_SANDBOXES && m == EVHTTP_REQ_POST) {
        sandbox_create(a, req, t);
        return;
    }
    if (route == E2B_ROUTE_SANDBOXES && m == EVHTTP_REQ_GET) {
        sandbox_list(a, req, t);
        return;
    }
    if (route < 0 || route == E2B_ROUTE_SANDBOXES ||
        (route == E2B_ROUTE_SANDBOX && (m == EVHTTP_REQ_POST || m == EVHTTP_REQ_PUT)) ||
        (route == E2B_ROUTE_NETWORK) != (m == EVHTTP_REQ_PUT) ||
        (route > E2B_ROUTE_SANDBOX && route != E2B_ROUTE_NETWORK && m != EVHTTP_REQ_POST)) {
        e2b_reply_error(req, 404, "%s /%.100s is not supported here (docs/e2b.md lists what is)",
                        m == EVHTTP_REQ_GET    ? "GET"
                        : m == EVHTTP_REQ_POST ? "POST"
                        : m == EVHTTP_REQ_PUT  ? "PUT"
                                               : "DELETE",
                        rest);
        return;
    }
    s = tenant_sandbox(a, t, id, &x);
    if (s == NULL && session_find(a->backend->sessions, t->id, id) == NULL) {
        http_forward_session(a, req, id, t->id, &control_style); /* another node's, perhaps */
        return;
    }
    if (s == NULL) {
        e2b_reply_error(req, 404, "sandbox %s not found", id);
        return;
    }
    session_touch(s);
    /* A connect resumes a paused sandbox first (then extends its lease as for a running one),
     * as a pause of a frozen one thaws it first: the handler runs again once it is live. */
    if ((route == E2B_ROUTE_CONNECT && is_paused(s)) ||
        (route == E2B_ROUTE_PAUSE && session_is_paused(s))) {
        struct err e = {0};
        int r = http_live_wait(a, req, s, params, e2b_route_control, &e);

        if (r < 0) {
            e2b_reply_error(req, e2b_status_of(e.code), "%s", e.msg);
        }
        if (r != 0) {
            return;
        }
    }
    if (route == E2B_ROUTE_PAUSE) {
        sandbox_pause(a, req, t, s);
        return;
    }
    if (route == E2B_ROUTE_NETWORK) {
        e2b_sandbox_network(a, req, t, s);
        return;
    }
    if (route == E2B_ROUTE_SANDBOX && m == EVHTTP_REQ_GET) {
        http_reply_json_new(req, 200, detail_json(a, s, &x));
    } else if (route == E2B_ROUTE_SANDBOX) {
        sandbox_kill(a, req, t, s);
    } else {
        sandbox_lease(a, req, t, s, route == E2B_ROUTE_CONNECT);
    }
}
