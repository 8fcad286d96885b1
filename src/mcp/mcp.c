/* MCP over Streamable HTTP: the transport (docs/mcp.md, "The transport").
 *
 *   POST/DELETE /mcp[?profile=&idle_timeout_s=]   an MCP session with a sandbox of its own
 *   POST/DELETE /v1/sessions/{id}/mcp             one bound to the REST session {id}
 *
 * GET has no route here, so the router answers 405 with "Allow: POST, DELETE" (sandpool sends
 * nothing unasked). A POST is checked in the contract's order and the first check that fails
 * answers; methods that need no sandbox are answered here at once, the others go to the
 * session's queue (calls.c). A POST that waits for Redis (initialize, or the first request
 * of a session after a restart) keeps a struct mcp_post that outlives its client: the answer it
 * waits for always comes (Redis commands have a deadline). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#define LOG_MODULE "mcp"
#include "audit/audit.h"
#include "cluster/route.h"
#include "log/log.h"
#include "mcp/mcp-internal.h"
#include "sandpool/api.h"
#include "session/session.h"
#include "util/macro.h"
#include "util/parse.h"

#define MCP_HEADER_SESSION "Mcp-Session-Id"
#define MCP_HEADER_VERSION "MCP-Protocol-Version"

/* A POST or DELETE waiting for its MCP session. */
struct mcp_post {
    struct http *a;
    struct http_pending pending; /* its req: NULL once the client went away */
    struct mcp_msg msg;          /* POST */
    bool is_delete;
    bool bound;
    char bound_id[65];
    char tenant[65];
};

/* A transport error: a JSON-RPC error without an id (or with the request's) and an HTTP status. */
static void
refuse(struct http *a, struct evhttp_request *req, int status, json_t *id, int code,
       const char *msg)
{
    mcp_server_stats(mcp_of(a))->requests_refused++;
    if (status == 503) {
        (void)evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
    }
    mcp_reply(req, status, mcp_error(id, code, "%s", msg));
}

static void
reply_accepted(struct evhttp_request *req)
{
    evhttp_send_reply(req, 202, "Accepted", NULL);
}

/* ---- the header checks ----------------------------------------------------------------------- */

static const char *
header(struct evhttp_request *req, const char *name)
{
    return evhttp_find_header(evhttp_request_get_input_headers(req), name);
}

/* An Origin browsers send: allowed when it is one of mcp.allowed_origins (comma-separated). */
static bool
origin_allowed(const struct cfg *cfg, const char *origin)
{
    const char *p = cfg->mcp_allowed_origins;
    size_t n = strlen(origin);

    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        const char *s = p;
        size_t m = len;

        while (m > 0 && (*s == ' ' || *s == '\t')) {
            s++;
            m--;
        }
        while (m > 0 && (s[m - 1] == ' ' || s[m - 1] == '\t')) {
            m--;
        }
        if (m == n && strncasecmp(s, origin, n) == 0) {
            return true;
        }
        p += len + (p[len] == ',');
    }
    return false;
}

/* Accept names a media type (or a wildcard that covers it). */
static bool
accepts(const char *accept, const char *type)
{
    char major[32];
    size_t slash = strcspn(type, "/");

    (void)snprintf(major, sizeof(major), "%.*s/*", (int)slash, type);
    return accept != NULL && (strcasestr(accept, type) != NULL || strstr(accept, "*/*") != NULL ||
                              strcasestr(accept, major) != NULL);
}

static bool
content_is_json(const char *ct)
{
    size_t n = strlen("application/json");

    return ct != NULL && strncasecmp(ct, "application/json", n) == 0 &&
           (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

/* The tenant of a request on an MCP mount, after the checks that come before the body: NULL
 * once answered. */
static const struct cfg_tenant *
begin(struct http *a, struct evhttp_request *req, bool is_post)
{
    const struct cfg_tenant *t;
    const char *origin;

    if (mcp_of(a) == NULL) {
        http_reply_error(req, -ENOENT, "no such endpoint (MCP is off: mcp.max_sessions is 0)");
        return NULL;
    }
    t = http_require_tenant(a, req); /* 401 with WWW-Authenticate, or 403 for the admin token */
    if (t == NULL) {
        mcp_server_stats(mcp_of(a))->requests_refused++;
        return NULL;
    }
    origin = header(req, "Origin");
    if (origin != NULL && !origin_allowed(a->cfg, origin)) {
        refuse(a, req, 403, NULL, MCP_ERR_BAD_REQUEST,
               "Forbidden: this Origin is not in mcp.allowed_origins");
        return NULL;
    }
    if (!is_post) {
        return t;
    }
    if (!accepts(header(req, "Accept"), "application/json") ||
        !accepts(header(req, "Accept"), "text/event-stream")) {
        refuse(a, req, 406, NULL, MCP_ERR_BAD_REQUEST,
               "Not Acceptable: Accept must list application/json and text/event-stream");
        return NULL;
    }
    if (!content_is_json(header(req, "Content-Type"))) {
        refuse(a, req, 415, NULL, MCP_ERR_BAD_REQUEST,
               "Unsupported Media Type: Content-Type must be application/json");
        return NULL;
    }
    return t;
}

/* ---- waiting for the session ----------------------------------------------------------------- */

/* The client went: the operation in flight finds p->pending.req NULL when it ends. */
static void
on_post_gone(struct http_pending *pending)
{}

static struct mcp_post *
post_new(struct http *a, struct evhttp_request *req, const char *tenant, const char *bound_id)
{
    struct mcp_post *p = xcalloc(1, sizeof(*p));

    p->a = a;
    (void)snprintf(p->tenant, sizeof(p->tenant), "%s", tenant);
    p->bound = bound_id != NULL;
    (void)snprintf(p->bound_id, sizeof(p->bound_id), "%s", bound_id ? bound_id : "");
    http_pending_start(&p->pending, req, on_post_gone);
    return p;
}

/* Stops watching the connection; the request, if alive, is the caller's again. */
static struct evhttp_request *
post_end(struct mcp_post *p)
{
    struct evhttp_request *req = p->pending.req;

    http_pending_end(&p->pending);
    mcp_msg_done(&p->msg);
    free(p);
    return req;
}

/* ---- initialize ------------------------------------------------------------------------------ */

static void
on_initialized(int r, struct mcp_session *ms, const char *why, void *userdata)
{
    struct mcp_post *p = userdata;
    struct http *a = p->a;
    json_t *id = json_incref(p->msg.id);
    struct evhttp_request *req;

    http_pending_log(&p->pending);
    req = post_end(p);
    if (r == 0 && req != NULL) {
        (void)evhttp_add_header(evhttp_request_get_output_headers(req), MCP_HEADER_SESSION, ms->id);
        mcp_reply(req, 200,
                  mcp_response(id, mcp_initialize_result(mcp_version_negotiate(ms->rec.version),
                                                         SANDPOOL_VERSION)));
    } else if (r != 0 && r != -ECANCELED && req != NULL) {
        refuse(a, req, r == -EDQUOT ? 429 : 503, id, MCP_ERR_BAD_REQUEST, why);
    }
    if (r == 0) {
        char actor[80];

        (void)snprintf(actor, sizeof(actor), "tenant:%s", ms->rec.tenant);
        audit_log("mcp.session.created", actor,
                  OOM_CHECK(json_pack(
                      "{s:s, s:s, s:s, s:s}", "tenant", ms->rec.tenant, "mcp_session", ms->id,
                      "mount", ms->rec.bound ? "bound" : "own", "session", ms->rec.sandbox)));
        mcp_session_unref(ms);
    }
    json_decref(id);
    log_set_request(NULL);
}

/* The query of /mcp: profile and idle_timeout_s, checked as POST /v1/sessions checks them. */
static int
own_settings(struct http *a, struct evhttp_request *req, const struct cfg_tenant *t,
             struct store_mcp_rec *rec, struct err *reterr)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
    struct evkeyvalq q;
    struct evkeyval *kv;
    const struct cfg_profile *p;
    int r = 0, secs;

    TAILQ_INIT(&q);
    if (query != NULL && evhttp_parse_query_str(query, &q) < 0) {
        return err_set(reterr, -EINVAL, "malformed query string");
    }
    TAILQ_FOREACH (kv, &q, next) {
        if (strcmp(kv->key, "profile") == 0 && str_is_name(kv->value, sizeof(rec->profile) - 1)) {
            (void)snprintf(rec->profile, sizeof(rec->profile), "%s", kv->value);
        } else if (strcmp(kv->key, "idle_timeout_s") == 0 &&
                   parse_int(kv->value, 1, 31536000, &secs) == 0) {
            rec->idle_timeout_s = (unsigned)secs;
        } else {
            r = err_set(reterr, -EINVAL,
                        "query parameter '%.32s': unknown or not valid (known: "
                        "profile, idle_timeout_s)",
                        kv->key);
            break;
        }
    }
    evhttp_clear_headers(&q);
    if (r < 0) {
        return r;
    }
    p = rec->profile[0]          ? cfg_profile_find(a->cfg, rec->profile)
        : a->cfg->n_profiles > 0 ? &a->cfg->profiles[0]
                                 : NULL;
    if (p == NULL || !cfg_tenant_allows(t, p->name)) {
        struct buf known = BUF_INIT(512);

        for (const struct cfg_profile *pr = a->cfg->profiles;
             pr != NULL && pr < a->cfg->profiles + a->cfg->n_profiles; pr++) {
            if (cfg_tenant_allows(t, pr->name) &&
                buf_printf(&known, "%s'%s'", known.len ? ", " : "", pr->name) < 0) {
                break; /* the message is cut anyway */
            }
        }
        r = err_set(reterr, -EINVAL, "no profile '%s' for this tenant; known: %s", rec->profile,
                    known.len ? known.buf : "none");
        buf_done(&known);
        return r;
    }
    (void)snprintf(rec->profile, sizeof(rec->profile), "%s", p->name);
    if (rec->idle_timeout_s > p->idle_timeout_s) {
        return err_set(reterr, -EINVAL, "idle_timeout_s must be at most %u for profile '%s'",
                       p->idle_timeout_s, p->name);
    }
    return 0;
}

static void
initialize(struct mcp_post *p, const struct cfg_tenant *t)
{
    struct http *a = p->a;
    struct store_mcp_rec rec = {0};
    const char *asked = json_string_value(json_object_get(p->msg.params, "protocolVersion"));
    enum http_drain drain = a->backend->drain_state(a->backend->userdata);
    struct err e = {0};
    int r = 0;

    (void)snprintf(rec.tenant, sizeof(rec.tenant), "%s", t->id);
    (void)snprintf(rec.node, sizeof(rec.node), "%s", a->cfg->node_id);
    (void)snprintf(rec.version, sizeof(rec.version), "%s",
                   mcp_version_to_string(mcp_version_negotiate(asked)));
    rec.bound = p->bound;
    if (!p->bound && drain != HTTP_STOPPING &&
        (r = own_settings(a, p->pending.req, t, &rec, &e)) == 0 &&
        http_place(a, p->pending.req, rec.profile, drain != HTTP_SERVING)) {
        /* Its sandbox is better made on another node (docs/cluster.md#placement): the session
         * is made there, and lives there. */
        http_pending_handoff(&p->pending); /* the forwarder's now */
        (void)post_end(p);
        return;
    }
    if (r < 0) {
        /* own_settings() said why */
    } else if (drain == HTTP_STOPPING || (!p->bound && drain != HTTP_SERVING)) {
        /* A session of its own could never get its sandbox here: the client goes elsewhere. */
        r = err_set(&e, -EAGAIN, "this node takes no new MCP sessions (%s); retry on another",
                    drain == HTTP_DRAINED ? "drained by the admin" : "shutting down");
    } else if (p->bound) {
        struct session *s;

        if (!session_manager_loaded(a->backend->sessions)) {
            r = err_set(&e, -EAGAIN, "sessions are being loaded after a restart; retry");
        } else if ((s = session_find(a->backend->sessions, t->id, p->bound_id)) == NULL) {
            r = err_set(&e, -ENOENT, "no such session");
        } else {
            (void)snprintf(rec.sandbox, sizeof(rec.sandbox), "%s", session_id(s));
            (void)snprintf(rec.profile, sizeof(rec.profile), "%s", session_profile(s)->name);
            session_touch(s);
        }
    }
    if (r < 0) {
        json_t *id = json_incref(p->msg.id);
        struct evhttp_request *req = post_end(p);

        if (r == -EINVAL) {
            mcp_reply(req, 200, mcp_error(id, MCP_ERR_INVALID_PARAMS, "%s", e.msg));
        } else {
            refuse(a, req, r == -ENOENT ? 404 : 503, id, MCP_ERR_BAD_REQUEST, e.msg);
        }
        json_decref(id);
        return;
    }
    mcp_session_create(mcp_of(a), &rec, on_initialized, p);
}

/* ---- requests on a session ------------------------------------------------------------------- */

static json_t *
templates_result(void)
{
    return OOM_CHECK(json_pack("{s:[{s:s, s:s, s:s}]}", "resourceTemplates", "uriTemplate",
                               "file:///workspace/{path}", "name", "workspace file", "description",
                               "A file in the sandbox's /workspace (text, image or base64 blob)"));
}

/* A message of ms (a valid session of this mount): answered, or queued. msg is taken over. */
static void
dispatch(struct http *a, struct evhttp_request *req, struct mcp_session *ms, struct mcp_msg *msg)
{
    const char *m = msg->method;
    json_t *result = NULL;

    if (msg->kind != MCP_MSG_REQUEST) {
        if (msg->kind == MCP_MSG_NOTIFICATION && strcmp(m, "notifications/cancelled") == 0) {
            mcp_call_cancel_id(ms, json_object_get(msg->params, "requestId"));
        }
        reply_accepted(req);
        mcp_msg_done(msg);
        return;
    }
    if (strcmp(m, "tools/call") == 0 || strcmp(m, "resources/list") == 0 ||
        strcmp(m, "resources/read") == 0) {
        mcp_call_start(a, ms, req, msg);
        return;
    }
    if (strcmp(m, "ping") == 0) {
        result = OOM_CHECK(json_object());
    } else if (strcmp(m, "tools/list") == 0) {
        result = mcp_tools_list();
    } else if (strcmp(m, "resources/templates/list") == 0) {
        result = templates_result();
    }
    if (result != NULL) {
        mcp_reply(req, 200, mcp_response(msg->id, result));
    } else if (strcmp(m, "initialize") == 0) {
        mcp_reply(req, 400,
                  mcp_error(msg->id, MCP_ERR_INVALID_REQUEST,
                            "initialize is sent without an Mcp-Session-Id header"));
    } else {
        mcp_reply(req, 200,
                  mcp_error(msg->id, MCP_ERR_METHOD_NOT_FOUND, "Method not found: '%.64s'", m));
    }
    mcp_msg_done(msg);
}

/* The checks after the session is known: NULL when ms may serve the request, with its sandbox
 * in *ret_sandbox (NULL while it has none), else why not, with the HTTP status and JSON-RPC code
 * in *status and *code. */
static const char *
session_unusable(struct mcp_post *p, struct mcp_session *ms, struct session **ret_sandbox,
                 int *status, int *code)
{
    struct session_manager *sm = p->a->backend->sessions;
    const char *v = header(p->pending.req, MCP_HEADER_VERSION);

    *status = 404;
    *code = MCP_ERR_NO_SESSION;
    if (ms->rec.bound != p->bound || (p->bound && strcmp(ms->rec.sandbox, p->bound_id) != 0)) {
        return "Session not found on this endpoint";
    }
    *status = 400;
    *code = MCP_ERR_BAD_REQUEST;
    if (!p->is_delete && v != NULL && mcp_version_from_string(v) < 0) {
        return "Bad Request: unsupported MCP-Protocol-Version (served: 2025-11-25, 2025-06-18, "
               "2025-03-26)";
    }
    *status = 503;
    if (!session_manager_loaded(sm)) {
        return "sessions are being loaded after a restart; retry";
    }
    *ret_sandbox =
        ms->rec.sandbox[0] != '\0' ? session_find(sm, ms->rec.tenant, ms->rec.sandbox) : NULL;
    if ((ms->rec.sandbox[0] == '\0' || *ret_sandbox == NULL) && http_forwarded(p->pending.req) &&
        strcmp(ms->rec.node, p->a->cfg->node_id) != 0) {
        /* Another node's (its sandbox is not here; or a record that names no node), sent here by
         * a node whose route is stale, or by a client with a forged marker: out of this node's
         * memory, its record untouched. The 503 makes the forwarder look again, and a session
         * whose sandbox ended is then answered by the node it reaches (docs/cluster.md). */
        mcp_session_forget(ms, "elsewhere");
        *code = MCP_ERR_BAD_REQUEST;
        return "this MCP session is served by another node; retry";
    }
    if (ms->rec.sandbox[0] != '\0' && *ret_sandbox == NULL) {
        mcp_session_forget(ms, "sandbox_ended");
        *status = 404;
        *code = MCP_ERR_NO_SESSION;
        return "Session not found: its sandbox ended (idle timeout or deleted); initialize again";
    }
    return NULL;
}

/* DELETE: the session is forgotten; an own sandbox (s, or NULL) ends with it. */
static void
delete_session(struct evhttp_request *req, struct mcp_session *ms, struct session *s)
{
    char actor[80];

    (void)snprintf(actor, sizeof(actor), "tenant:%s", ms->rec.tenant);
    audit_log("mcp.session.deleted", actor,
              OOM_CHECK(json_pack("{s:s, s:s, s:s}", "tenant", ms->rec.tenant, "mcp_session",
                                  ms->id, "session", ms->rec.sandbox)));
    mcp_session_forget(ms, "deleted");
    if (s != NULL && !ms->rec.bound) {
        session_set_end_cause(s, NULL, "mcp_deleted");
        (void)session_end(s, NULL, NULL, NULL);
    }
    evhttp_send_reply(req, 204, "No Content", NULL);
}

/* The session's request: checked, then answered or queued. */
static void
serve(struct mcp_post *p, struct mcp_session *ms)
{
    struct http *a = p->a;
    bool is_delete = p->is_delete;
    struct mcp_msg msg = p->msg;
    struct session *s = NULL;
    int status, code;
    const char *why = session_unusable(p, ms, &s, &status, &code);
    struct evhttp_request *req;

    p->msg = (struct mcp_msg){0};
    req = post_end(p);
    if (why != NULL) {
        refuse(a, req, status, NULL, code, why);
        mcp_msg_done(&msg);
        return;
    }
    mcp_session_used(ms);
    if (s != NULL) {
        session_touch(s); /* a request of the MCP session is activity of its sandbox */
    }
    if (strcmp(ms->rec.node, a->cfg->node_id) != 0 && !is_delete) {
        /* Served here now (its sandbox is here, or its node is gone): the record says so, so
         * that the other nodes route it here (docs/cluster.md#routing). */
        (void)snprintf(ms->rec.node, sizeof(ms->rec.node), "%s", a->cfg->node_id);
        mcp_session_save(ms);
    }
    if (is_delete) {
        delete_session(req, ms, s);
    } else {
        dispatch(a, req, ms, &msg);
    }
}

static void
on_session(int r, struct mcp_session *ms, const char *why, void *userdata)
{
    struct mcp_post *p = userdata;
    struct http *a = p->a;

    http_pending_log(&p->pending);
    if (r == 0 && p->pending.req != NULL) {
        serve(p, ms);
    } else {
        struct evhttp_request *req = post_end(p);

        if (req != NULL && r == -ENOENT) {
            refuse(a, req, 404, NULL, MCP_ERR_NO_SESSION,
                   "Session not found (ended or expired); initialize again");
        } else if (req != NULL && r < 0 && r != -ECANCELED) {
            refuse(a, req, 503, NULL, MCP_ERR_BAD_REQUEST, why ? why : "retry");
        }
    }
    if (r == 0) {
        mcp_session_unref(ms);
    }
    log_set_request(NULL);
}

/* ---- sessions other nodes serve (docs/cluster.md#routing) ------------------------------------ */

/* Whether an /mcp request for session sid may be another node's: this node is one of several,
 * does not hold sid, and the request did not come from another node (it is never routed twice: a
 * forwarded one is served here, its session read from Redis, unless its record names another
 * node: session_unusable()). */
static bool
elsewhere(struct http *a, struct evhttp_request *req, const char *bound_id, const char *sid)
{
    return bound_id == NULL && http_clustered(a) && !http_forwarded(req) &&
           !mcp_session_held(mcp_of(a), sid);
}

static void post(struct http *a, struct evhttp_request *req, const char *bound_id, bool may_route);
static void delete (struct http *a, struct evhttp_request *req, const char *bound_id,
                    bool may_route);

/* The route says this node serves it (or nobody does: answered here as on a node alone). */
static void
served_here(struct http *a, struct evhttp_request *req, const struct route_answer *ans)
{
    if (evhttp_request_get_command(req) == EVHTTP_REQ_DELETE) {
        delete (a, req, NULL, false);
    } else {
        post(a, req, NULL, false);
    }
}

static void
refuse_routed(struct http *a, struct evhttp_request *req, int err, const char *msg)
{
    refuse(a, req, err == -EINVAL ? 400 : 503, NULL, MCP_ERR_BAD_REQUEST, msg);
}

static const struct http_route_style route_style = {
    .here = served_here,
    .refuse = refuse_routed,
};

/* ---- handlers -------------------------------------------------------------------------------- */

static void
post(struct http *a, struct evhttp_request *req, const char *bound_id, bool may_route)
{
    const struct cfg_tenant *t = begin(a, req, true);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    const char *sid;
    struct mcp_post *p;
    json_t *id = NULL;
    struct err e = {0};
    int r;

    if (t == NULL) {
        return;
    }
    p = post_new(a, req, t->id, bound_id);
    r = mcp_msg_parse(n ? (const char *)evbuffer_pullup(in, -1) : "", n, &p->msg, &id, &e);
    if (r != 0) {
        (void)post_end(p);
        refuse(a, req, 400, id, r, e.msg);
        json_decref(id);
        return;
    }
    if (p->msg.kind == MCP_MSG_REQUEST && strcmp(p->msg.method, "initialize") == 0) {
        initialize(p, t);
        return;
    }
    sid = header(req, MCP_HEADER_SESSION);
    if (sid == NULL) {
        (void)post_end(p);
        refuse(a, req, 400, NULL, MCP_ERR_BAD_REQUEST,
               "Bad Request: Mcp-Session-Id header is required (initialize first)");
        return;
    }
    if (may_route && elsewhere(a, req, bound_id, sid)) {
        http_forward_mcp(a, post_end(p), sid, t->id, &route_style);
        return;
    }
    mcp_session_lookup(mcp_of(a), t->id, sid, on_session, p);
}

static void delete (struct http *a, struct evhttp_request *req, const char *bound_id,
                    bool may_route)
{
    const struct cfg_tenant *t = begin(a, req, false);
    const char *sid;
    struct mcp_post *p;

    if (t == NULL) {
        return;
    }
    sid = header(req, MCP_HEADER_SESSION);
    if (sid == NULL) {
        refuse(a, req, 400, NULL, MCP_ERR_BAD_REQUEST,
               "Bad Request: Mcp-Session-Id header is required");
        return;
    }
    if (may_route && elsewhere(a, req, bound_id, sid)) {
        http_forward_mcp(a, req, sid, t->id, &route_style);
        return;
    }
    p = post_new(a, req, t->id, bound_id);
    p->is_delete = true;
    mcp_session_lookup(mcp_of(a), t->id, sid, on_session, p);
}

/* A bound route of a session another node holds goes there whole: initialize, calls, streams and
 * DELETE (docs/cluster.md#routing); the owner keeps the MCP session. A node alone answers
 * itself. Authenticated first: an anonymous request gets this node's 401. */
static bool
forwarded(struct http *a, struct evhttp_request *req, const char *bound_id)
{
    const struct cfg_tenant *t = NULL;

    if (!http_clustered(a) || !str_is_name(bound_id, 64) ||
        http_authenticate(a, req, &t) != AUTH_TENANT ||
        session_find(a->backend->sessions, t->id, bound_id) != NULL ||
        !session_manager_loaded(a->backend->sessions)) {
        return false;
    }
    http_forward_session(a, req, bound_id, t->id, NULL);
    return true;
}

void
mcp_route_post(struct http *a, struct evhttp_request *req, const char *const *params)
{
    post(a, req, NULL, true);
}

void
mcp_route_delete(struct http *a, struct evhttp_request *req, const char *const *params)
{
    delete (a, req, NULL, true);
}

void
mcp_route_bound_post(struct http *a, struct evhttp_request *req, const char *const *params)
{
    if (mcp_of(a) == NULL || !forwarded(a, req, params[0])) {
        post(a, req, params[0], false);
    }
}

void
mcp_route_bound_delete(struct http *a, struct evhttp_request *req, const char *const *params)
{
    if (mcp_of(a) == NULL || !forwarded(a, req, params[0])) {
        delete (a, req, params[0], false);
    }
}
