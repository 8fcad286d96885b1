/* The E2B front end's replies and sandbox routing (docs/e2b.md); the control plane is
 * sandboxes.c:
 *
 *   /e2b/api/...   E2B_API_URL: sandboxes created, listed, read, given a timeout, connected to
 *                  and killed, with a tenant's E2B key in X-API-KEY;
 *   /e2b/sbx/...   E2B_SANDBOX_URL: everything sent to a sandbox, routed by E2b-Sandbox-Id and
 *                  E2b-Sandbox-Port and let in by that port's credential (X-Access-Token for
 *                  envd's 49983, E2B-Traffic-Access-Token for the interpreter's 49999), both
 *                  random per sandbox and kept in its session's record.
 *
 * A sandbox is a session of the key's tenant (quotas, profiles, audit and isolation apply
 * unchanged), its E2B lease the session's expires_at (the reaper ends it), its id the session's.
 * Asynchronous handlers keep a struct wait that watches the connection, as sessions.c's calls
 * do: a reply only to a live request. */
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#define LOG_MODULE "e2b"
#include "audit/audit.h"
#include "cluster/route.h"
#include "e2b/e2b-internal.h"
#include "log/log.h"
#include "session/session.h"
#include "util/macro.h"
#include "util/parse.h"
#include "util/random.h"
#include "util/time.h"
#include "util/utf8.h"

/* ---- replies --------------------------------------------------------------------------------- */

static void
reply_text_json(struct evhttp_request *req, int status, json_t *body)
{
    if (status == 429 || status == 503) {
        (void)evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
    }
    http_reply_json_new(req, status, body);
}

/* msg as valid UTF-8 (a message may quote client text cut at a byte count). */
static json_t *message_json(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

static json_t *
message_json(const char *fmt, va_list ap)
{
    struct buf clean = BUF_INIT(2048);
    char msg[512];
    json_t *s;

    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    (void)utf8_append_sanitized(&clean, msg, strlen(msg));
    s = OOM_CHECK(json_stringn(clean.buf, clean.len));
    buf_done(&clean);
    return s;
}

void
e2b_reply_error(struct evhttp_request *req, int status, const char *fmt, ...)
{
    json_t *msg;
    va_list ap;

    va_start(ap, fmt);
    msg = message_json(fmt, ap);
    va_end(ap);
    reply_text_json(req, status,
                    OOM_CHECK(json_pack("{s:i, s:o}", "code", status, "message", msg)));
}

int
e2b_status_of(int r)
{
    switch (r) {
    case -EINVAL:
    case -EMSGSIZE:
        return r == -EINVAL ? 400 : 413;
    case -EPERM:
        return 403;
    case -ENOENT:
        return 404;
    case -EBUSY:
        return 409;
    case -EBADMSG: /* its snapshot was lost at its resume: it ended */
        return 410;
    case -ENOSYS:
        return 501;
    case -EDQUOT:
    case -EUSERS:
    case -ETIMEDOUT:
        return 429;
    case -ENOTCONN:
    case -ESHUTDOWN:
    case -ECONNREFUSED:
    case -EPIPE:
        return 503;
    default:
        return 500;
    }
}

/* Connect's codes and their statuses (connectrpc protocol.md, "Error Codes"). */
static const struct {
    const char *code;
    int status;
} connect_codes[] = {
    {"invalid_argument", 400},   {"unauthenticated", 401},   {"permission_denied", 403},
    {"not_found", 404},          {"already_exists", 409},    {"failed_precondition", 412},
    {"resource_exhausted", 429}, {"internal", 500},          {"unimplemented", 501},
    {"unavailable", 503},        {"deadline_exceeded", 504},
};

const char *
e2b_connect_code(int r)
{
    switch (e2b_status_of(r)) {
    case 400:
    case 413:
        return "invalid_argument";
    case 403:
        return "permission_denied";
    case 404:
        return "not_found";
    case 409:
        return r == -EBUSY ? "failed_precondition" : "already_exists";
    case 410:
        return "not_found";
    case 429:
        return "resource_exhausted";
    case 501:
        return "unimplemented";
    case 503:
        return "unavailable";
    default:
        return "internal";
    }
}

void
e2b_reply_connect_error(struct evhttp_request *req, const char *code, const char *fmt, ...)
{
    int status = 500;
    json_t *msg;
    va_list ap;

    for (size_t i = 0; i < ELEMENTSOF(connect_codes); i++) {
        if (strcmp(connect_codes[i].code, code) == 0) {
            status = connect_codes[i].status;
        }
    }
    va_start(ap, fmt);
    msg = message_json(fmt, ap);
    va_end(ap);
    reply_text_json(req, status, OOM_CHECK(json_pack("{s:s, s:o}", "code", code, "message", msg)));
}

static void
on_wait_gone(struct http_pending *p)
{
    /* The work goes on; its end frees the wait (e2b_wait_end()). */
}

struct e2b_wait *
e2b_wait_new(struct http *a, struct evhttp_request *req, const struct cfg_tenant *t, const char *id)
{
    struct e2b_wait *w = xcalloc(1, sizeof(*w));

    w->a = a;
    (void)snprintf(w->tenant, sizeof(w->tenant), "%s", t->id);
    (void)snprintf(w->id, sizeof(w->id), "%s", id ? id : "");
    (void)snprintf(w->actor, sizeof(w->actor), "tenant:%s", t->id);
    http_pending_start(&w->pending, req, on_wait_gone);
    return w;
}

void
e2b_wait_end(struct e2b_wait *w)
{
    http_pending_end(&w->pending);
    free(w);
}

json_t *
e2b_body_json(struct evhttp_request *req)
{
    struct err e = {0};
    json_t *body = NULL;

    if (http_body_json(req, true, &body, &e) < 0) {
        e2b_reply_error(req, 400, "%s", e.msg);
        return NULL;
    }
    return body;
}

static void
on_ext_saved(int r, void *userdata)
{
    if (r < 0 && r != -ENOENT) {
        log_warn("session=%s: its E2B record could not be written (%s)", (const char *)userdata,
                 strerror(-r));
    }
    free(userdata);
}

json_t *
e2b_sandbox_env(const struct e2b_ext *x)
{
    return x->env[0] != '\0' ? json_loads(x->env, 0, NULL) : NULL;
}

int
e2b_ext_save(struct session *s, const struct e2b_ext *x, session_ext_cb *cb, void *arg,
             struct err *reterr)
{
    char text[SESSION_EXT_MAX + 1];
    int r;

    if (e2b_ext_encode(x, text, sizeof(text)) < 0) {
        return err_set(reterr, -EMSGSIZE, "the sandbox's record is full");
    }
    if (cb == NULL) {
        cb = on_ext_saved;
        arg = xstrdup(session_id(s));
    }
    r = session_set_ext(s, text, cb, arg, reterr);
    if (r < 0 && cb == on_ext_saved) {
        free(arg);
    }
    return r;
}

/* ---- sandbox traffic ------------------------------------------------------------------------- */

static bool
token_ok(const char *given, const char *want)
{
    return given != NULL && strlen(given) == E2B_TOKEN_LEN &&
           CRYPTO_memcmp(given, want, E2B_TOKEN_LEN) == 0;
}

static void
refused(struct http *a, struct evhttp_request *req, const char *sandbox, unsigned port,
        const char *why)
{
    e2b_room(a)->stats.refused_token++;
    audit_log_limited(
        "e2b.refused", "anonymous", NULL,
        OOM_CHECK(json_pack("{s:s, s:i, s:s}", "sandbox", sandbox, "port", (int)port, "why", why)));
    http_reply_close(req);
    e2b_reply_error(req, 401, "%s", why);
}

/* ---- sandboxes on other nodes (docs/cluster.md#routing) -------------------------------------- */

/* Whether s is n lowercase hex digits: a sandbox id, an access token. Only a request whose id and
 * token could be real is routed (it is anonymous until the owner checks the token). */
static bool
hex_of(const char *s, size_t n)
{
    return strlen(s) == n && strspn(s, "0123456789abcdef") == n;
}

void
e2b_refuse_routed(struct http *a, struct evhttp_request *req, int err, const char *msg)
{
    e2b_reply_error(req, err == -EINVAL ? 400 : 503, "%s", msg); /* a 503 with Retry-After */
}

/* A sandbox no node runs: 502, as the SDK's proxy answers for a sandbox that is gone. */
static void
sandbox_not_running(struct http *a, struct evhttp_request *req, const struct route_answer *ans)
{
    const char *id = evhttp_find_header(evhttp_request_get_input_headers(req), "E2b-Sandbox-Id");

    e2b_reply_error(req, 502, "sandbox %.64s is not running%s", id ? id : "",
                    ans->node_lost ? ": its node was lost" : "");
}

static const struct http_route_style sandbox_style = {
    .here = sandbox_not_running,
    .refuse = e2b_refuse_routed,
};

void
e2b_route_upload(struct http *a, struct evhttp_request *req, const char *const *params)
{
    const char *p[] = {NULL, "files", NULL};

    e2b_route_sandbox(a, req, p);
}

/* rest: the path after "/e2b/sbx/". */
void
e2b_route_sandbox(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *id = evhttp_find_header(h, "E2b-Sandbox-Id");
    const char *port = evhttp_find_header(h, "E2b-Sandbox-Port");
    char path[SESSION_ID_MAX + 512];
    struct e2b_target t = {.path = path};
    const char *given;

    (void)snprintf(path, sizeof(path), "/%s", params[1]);
    t.port = port == NULL                 ? 0
             : strcmp(port, "49983") == 0 ? E2B_ENVD_PORT
             : strcmp(port, "49999") == 0 ? E2B_CODE_PORT
                                          : 0;
    given = evhttp_find_header(h, t.port == E2B_CODE_PORT ? "E2B-Traffic-Access-Token"
                                                          : "X-Access-Token");
    if (id == NULL || t.port == 0) {
        e2b_reply_error(req, 502,
                        "no sandbox on this port: E2b-Sandbox-Id and E2b-Sandbox-Port "
                        "(49983 or 49999) route a request");
        return;
    }
    if (given == NULL) {
        refused(a, req, "", t.port, "this port's access token is missing");
        return;
    }
    t.s = session_find(a->backend->sessions, NULL, id);
    if (t.s == NULL && hex_of(id, 32) && hex_of(given, E2B_TOKEN_LEN)) {
        /* Another node's, perhaps: its owner checks the token (this node cannot: the sandbox's
         * record is there), as it would had the request gone there directly. */
        http_forward_session(a, req, id, NULL, &sandbox_style);
        return;
    }
    /* A sandbox of a tenant the configuration no longer has is not served (SIGHUP removed it:
     * its credentials go with it). */
    if (t.s == NULL || e2b_ext_decode(session_ext(t.s), &t.ext) < 0 ||
        cfg_tenant_find(a->cfg, session_tenant(t.s)) == NULL) {
        e2b_reply_error(req, 502, "sandbox %.64s is not running", id);
        return;
    }
    if (!token_ok(given, t.port == E2B_CODE_PORT ? t.ext.traffic_token : t.ext.envd_token)) {
        refused(a, req, session_id(t.s), t.port, "the access token is not this sandbox's");
        return;
    }
    http_conn_authenticated(a->conns, req);
    {
        struct err e = {0};
        int r = http_live_wait(a, req, t.s, params, e2b_route_sandbox, &e);

        if (r != 0) { /* a paused sandbox: this runs again once it is resumed */
            if (r < 0) {
                e2b_reply_error(req, e2b_status_of(e.code), "%s", e.msg);
            }
            return;
        }
    }
    session_touch(t.s);
    e2b_room(a)->stats.requests[t.port == E2B_ENVD_PORT ? E2B_PLANE_ENVD : E2B_PLANE_CODE]++;
    if (t.port == E2B_ENVD_PORT) {
        e2b_envd(a, req, &t);
    } else {
        e2b_code(a, req, &t);
    }
}

/* ---- the protocol ---------------------------------------------------------------------------- */

void
e2b_get_stats(const struct http *h, struct e2b_stats *ret)
{
    *ret = e2b_room(h)->stats;
    e2b_runs_count(h, &ret->running, &ret->waiting);
}

static void *
e2b_start(struct http *h)
{
    struct e2b_room *room = xcalloc(1, sizeof(*room));

    TAILQ_INIT(&room->runs);
    return room;
}

/* After evhttp_free(): every run went with its connection. */
static void
e2b_free(void *state)
{
    free(state);
}

static const struct http_route routes[] = {
    {EVHTTP_REQ_POST, 0, "/e2b/api/**", e2b_route_control},
    {EVHTTP_REQ_GET, 0, "/e2b/api/**", e2b_route_control},
    {EVHTTP_REQ_DELETE, 0, "/e2b/api/**", e2b_route_control},
    {EVHTTP_REQ_PUT, 0, "/e2b/api/**", e2b_route_control},
    /* before the catch-all below: the first route a path matches gives its flags */
    {EVHTTP_REQ_POST, HTTP_ROUTE_STREAMED_BODY | HTTP_ROUTE_STREAMED_CHUNKED, "/e2b/sbx/files",
     e2b_route_upload},
    {EVHTTP_REQ_POST, 0, "/e2b/sbx/**", e2b_route_sandbox},
    {EVHTTP_REQ_GET, 0, "/e2b/sbx/**", e2b_route_sandbox},
    {EVHTTP_REQ_DELETE, 0, "/e2b/sbx/**", e2b_route_sandbox},
};

const struct http_protocol e2b_protocol = {
    .name = "e2b",
    .routes = routes,
    .n_routes = ELEMENTSOF(routes),
    .start = e2b_start,
    .free = e2b_free,
};
