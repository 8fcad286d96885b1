/* HTTP front end; see api.h.
 *
 * Routing is one static table of {method, path pattern, handler}; a pattern segment "*" matches
 * one path segment. A path that matches no pattern answers 404, a path that matches with another
 * method answers 405 with Allow. Replies are always JSON with Cache-Control: no-store.
 *
 * Limits set on evhttp: header block size, body size (cfg http.max_body_bytes, so a huge body is
 * refused with 413 before it is read in full) and a read/write timeout per connection. */
#include "api.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "api-internal.h"

#define LOG_MODULE "api"
#include "log/log.h"
#include "pool/pool.h"
#include "sandpool/api.h"
#include "util/macro.h"
#include "util/parse.h"
#include "util/random.h"
#include "util/utf8.h"

struct route {
    enum evhttp_cmd_type method;
    const char *pattern;
    api_handler_fn *handler;
};

/* ---- errno -> HTTP --------------------------------------------------------------------------- */

static const struct {
    int err;
    struct api_status st;
} status_table[] = {
    {-EINVAL, {400, "invalid_argument", "Bad Request", false}},
    {-EACCES, {401, "unauthenticated", "Unauthorized", false}},
    {-EPERM, {403, "forbidden", "Forbidden", false}},
    {-ENOENT, {404, "not_found", "Not Found", false}},
    {-EOPNOTSUPP, {405, "method_not_allowed", "Method Not Allowed", false}},
    {-EBUSY, {409, "session_busy", "Conflict", false}},
    {-EEXIST, {409, "session_busy", "Conflict", false}},
    {-ESRCH, {409, "not_running", "Conflict", false}},
    {-EMSGSIZE, {413, "payload_too_large", "Payload Too Large", false}},
    {-EDQUOT, {429, "quota_exceeded", "Too Many Requests", true}},
    {-EUSERS, {503, "capacity_exhausted", "Service Unavailable", true}},
    {-EAGAIN, {503, "capacity_exhausted", "Service Unavailable", true}},
    {-ECONNREFUSED, {503, "unavailable", "Service Unavailable", true}},
    {-ENOTCONN, {503, "unavailable", "Service Unavailable", true}},
    {-ESHUTDOWN, {503, "unavailable", "Service Unavailable", true}},
    {-ETIMEDOUT, {503, "unavailable", "Service Unavailable", true}},
    {-EPIPE, {503, "unavailable", "Service Unavailable", true}},
};

static const struct api_status internal_status = {500, "internal", "Internal Server Error", false};

const struct api_status *
api_status_from_errno(int r)
{
    for (size_t i = 0; i < ELEMENTSOF(status_table); i++) {
        if (status_table[i].err == r) {
            return &status_table[i].st;
        }
    }
    return &internal_status;
}

/* ---- replies --------------------------------------------------------------------------------- */

static void
reply_raw(struct evhttp_request *req, int status, const char *reason, const char *body, size_t len)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    struct evbuffer *out = OOM_CHECK(evbuffer_new());

    (void)evhttp_add_header(h, "Content-Type", "application/json");
    (void)evhttp_add_header(h, "Cache-Control", "no-store");
    if (evbuffer_add(out, body, len) < 0 || evbuffer_add(out, "\n", 1) < 0) {
        oom();
    }
    evhttp_send_reply(req, status, reason, out);
    evbuffer_free(out);
}

void
api_reply_json_new(struct evhttp_request *req, int status, json_t *body)
{
    char *text = OOM_CHECK(json_dumps(body, JSON_COMPACT));

    reply_raw(req, status, status < 300 ? "OK" : "Error", text, strlen(text));
    free(text);
    json_decref(body);
}

void
api_reply_error(struct evhttp_request *req, int r, const char *fmt, ...)
{
    const struct api_status *st = api_status_from_errno(r);
    char msg[512];
    struct buf clean = BUF_INIT(3 * sizeof(msg)); /* each bad byte may become U+FFFD's 3 */
    json_t *body;
    char *text;
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap); /* long messages are cut */
    va_end(ap);
    /* A message may quote client text cut at a byte count ("%.64s", or the cut above) in the
     * middle of a character: json_pack() refuses ill-formed UTF-8, and its NULL must not pass
     * for out of memory (which aborts). */
    (void)utf8_append_sanitized(&clean, msg, strlen(msg));
    if (st->retry_after) {
        (void)evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
    }
    body = OOM_CHECK(
        json_pack("{s:{s:s, s:s%}}", "error", "code", st->code, "message", clean.buf, clean.len));
    text = OOM_CHECK(json_dumps(body, JSON_COMPACT));
    reply_raw(req, st->status, st->reason, text, strlen(text));
    free(text);
    json_decref(body);
    buf_done(&clean);
}

/* ---- handlers -------------------------------------------------------------------------------- */

static void
handle_healthz(struct api *a, struct evhttp_request *req, const char *const *params)
{
    api_reply_json_new(req, 200, OOM_CHECK(json_pack("{s:s}", "status", "ok")));
}

static void
handle_readyz(struct api *a, struct evhttp_request *req, const char *const *params)
{
    const struct api_backend *b = a->backend;
    json_t *checks = OOM_CHECK(json_object());
    bool ready = true;
    char why[512];

    why[0] = '\0';
    if (!b->engine_ok(b->userdata, why, sizeof(why))) {
        ready = false;
    }
    (void)json_object_set_new(checks, "engine", OOM_CHECK(json_string(why[0] ? why : "ok")));
    why[0] = '\0';
    if (b->redis_ok != NULL && !b->redis_ok(b->userdata, why, sizeof(why))) {
        ready = false;
    }
    if (b->redis_ok != NULL) {
        (void)json_object_set_new(checks, "redis", OOM_CHECK(json_string(why[0] ? why : "ok")));
    }
    if (b->drain_state(b->userdata) != API_SERVING) {
        ready = false;
        (void)json_object_set_new(
            checks, "drain",
            OOM_CHECK(json_string(b->drain_state(b->userdata) >= API_LEAVING
                                      ? "shutting down"
                                      : "drained by the admin: no new sessions")));
    }
    for (size_t i = 0; i < b->n_pools; i++) {
        struct pool_stats st;
        char key[96];

        pool_get_stats(b->pools[i], &st);
        (void)snprintf(key, sizeof(key), "pool:%s", pool_name(b->pools[i]));
        if (st.refused[0]) {
            ready = false;
            (void)snprintf(why, sizeof(why), "refused: %s", st.refused);
        } else if (!st.warm_reached) {
            ready = false;
            (void)snprintf(why, sizeof(why), "warming: %u of %u ready%s%s", st.ready,
                           st.warm_target, st.last_failure[0] ? "; last failure: " : "",
                           st.last_failure);
        } else {
            (void)snprintf(why, sizeof(why), "ok");
        }
        (void)json_object_set_new(checks, key, OOM_CHECK(json_string(why)));
    }
    api_reply_json_new(req, ready ? 200 : 503,
                       OOM_CHECK(json_pack("{s:s, s:o}", "status", ready ? "ready" : "not_ready",
                                           "checks", checks)));
}

static void
handle_metrics(struct api *a, struct evhttp_request *req, const char *const *params)
{
    struct buf text = BUF_INIT(8u << 20);
    struct evbuffer *out = OOM_CHECK(evbuffer_new());

    a->backend->metrics(a->backend->userdata, &text);
    (void)evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                            "text/plain; version=0.0.4");
    if (evbuffer_add(out, text.buf, text.len) < 0) {
        oom();
    }
    evhttp_send_reply(req, 200, "OK", out);
    evbuffer_free(out);
    buf_done(&text);
}

static const struct route routes[] = {
    {EVHTTP_REQ_GET, "/healthz", handle_healthz},
    {EVHTTP_REQ_GET, "/metrics", handle_metrics},
    {EVHTTP_REQ_GET, "/readyz", handle_readyz},
    {EVHTTP_REQ_POST, "/v1/sessions", api_sessions_create},
    {EVHTTP_REQ_GET, "/v1/sessions", api_sessions_list},
    {EVHTTP_REQ_GET, "/v1/sessions/*", api_sessions_get},
    {EVHTTP_REQ_DELETE, "/v1/sessions/*", api_sessions_delete},
    {EVHTTP_REQ_POST, "/v1/sessions/*/execute", api_sessions_execute},
    {EVHTTP_REQ_POST, "/v1/sessions/*/interrupt", api_sessions_interrupt},
    {EVHTTP_REQ_POST, "/v1/sessions/*/restart", api_sessions_restart},
    {EVHTTP_REQ_GET, "/v1/sessions/*/executions", api_sessions_executions},
    {EVHTTP_REQ_GET, "/v1/sessions/*/files", api_files_list},
    {EVHTTP_REQ_GET, "/v1/admin/pools", api_admin_pools},
    {EVHTTP_REQ_PUT, "/v1/admin/pools/*", api_admin_pool_put},
    {EVHTTP_REQ_GET, "/v1/admin/sessions", api_admin_sessions},
    {EVHTTP_REQ_GET, "/v1/admin/sessions/*", api_admin_session_get},
    {EVHTTP_REQ_DELETE, "/v1/admin/sessions/*", api_admin_session_delete},
    {EVHTTP_REQ_POST, "/v1/admin/drain", api_admin_drain},
    {EVHTTP_REQ_POST, "/v1/admin/undrain", api_admin_undrain},
    {EVHTTP_REQ_GET, "/v1/admin/policy", api_admin_policy},
    {EVHTTP_REQ_GET, "/v1/sessions/*/files/**", api_files_get},
    {EVHTTP_REQ_PUT, "/v1/sessions/*/files/**", api_files_put},
    {EVHTTP_REQ_DELETE, "/v1/sessions/*/files/**", api_files_delete},
};

#define MAX_PARAMS 4
#define MAX_PARAM  128

/* Matches a path against a pattern where "*" stands for one non-empty segment and a final "**"
 * for the non-empty rest of the path, slashes included. The segments are copied into params:
 * at most MAX_PARAMS, each "*" of at most MAX_PARAM bytes; "**" is left in the path and its
 * offset stored in *rest. */
static bool
path_matches(const char *pattern, const char *path, char params[MAX_PARAMS][MAX_PARAM],
             size_t *rest)
{
    const char *start = path;
    int np = 0;

    while (*pattern != '\0' && *path != '\0') {
        if (pattern[0] == '*' && pattern[1] == '*') {
            *rest = (size_t)(path - start);
            return true;
        }
        if (*pattern == '*') {
            const char *slash = strchr(path, '/');
            size_t seg = slash ? (size_t)(slash - path) : strlen(path);

            if (seg == 0 || seg >= MAX_PARAM || np == MAX_PARAMS) {
                return false;
            }
            memcpy(params[np], path, seg);
            params[np++][seg] = '\0';
            path += seg;
            pattern++;
            continue;
        }
        if (*pattern != *path) {
            return false;
        }
        pattern++;
        path++;
    }
    return *pattern == '\0' && *path == '\0';
}

/* The Allow header's names for a route's method (HEAD goes wherever GET does). */
static const char *
allow_names(enum evhttp_cmd_type method)
{
    switch (method) {
    case EVHTTP_REQ_GET:
        return "GET, HEAD";
    case EVHTTP_REQ_POST:
        return "POST";
    case EVHTTP_REQ_PUT:
        return "PUT";
    case EVHTTP_REQ_DELETE:
        return "DELETE";
    default:
        return NULL;
    }
}

static void
route_request(struct evhttp_request *req, void *arg)
{
    struct api *a = arg;
    const char *uri = evhttp_request_get_uri(req);
    struct evhttp_uri *parsed = evhttp_uri_parse_with_flags(uri, 0);
    const char *path = parsed ? evhttp_uri_get_path(parsed) : NULL;
    enum evhttp_cmd_type method = evhttp_request_get_command(req);
    struct api_body held;
    bool path_known = false;
    char allow[64] = "";

    api_conn_dispatched(a, req);
    if (path == NULL || path[0] != '/') {
        api_reply_error(req, -EINVAL, "malformed request target");
        if (parsed != NULL) {
            evhttp_uri_free(parsed); /* libevent 2.1's does not take NULL */
        }
        return;
    }
    if (api_body_held(a, req, &held)) {
        /* A held body (body.c) not consumed by its handler closes the connection after the
         * reply: its bytes must never be read as the next request. */
        (void)evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
    }
    for (size_t i = 0; i < ELEMENTSOF(routes); i++) {
        char params[MAX_PARAMS][MAX_PARAM];
        const char *p[MAX_PARAMS + 1] = {params[0], params[1], params[2], params[3], NULL};
        size_t rest = 0;

        if (!path_matches(routes[i].pattern, path, params, &rest)) {
            continue;
        }
        if (rest > 0) {
            p[1] = path + rest; /* routes with "**" have one "*" before it */
        }
        path_known = true;
        if (routes[i].method == method ||
            (method == EVHTTP_REQ_HEAD && routes[i].method == EVHTTP_REQ_GET)) {
            routes[i].handler(a, req, p);
            evhttp_uri_free(parsed);
            return;
        }
        if (allow_names(routes[i].method) != NULL) {
            size_t n = strlen(allow);

            (void)snprintf(allow + n, sizeof(allow) - n, "%s%s", n > 0 ? ", " : "",
                           allow_names(routes[i].method));
        }
    }
    if (path_known) {
        /* RFC 9110 15.5.6: a 405 names the methods the resource has. */
        (void)evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
        api_reply_error(req, -EOPNOTSUPP, "method not allowed on this path");
    } else {
        api_reply_error(req, -ENOENT, "no such endpoint");
    }
    evhttp_uri_free(parsed);
}

/* Every request gets an id: the client's X-Request-Id when it is a plain name of at most
 * LOG_REQUEST_ID_MAX characters, else a random one. It is sent back in X-Request-Id and named
 * by every log line written while the handler runs (asynchronous completions set it again). */
static void
on_request(struct evhttp_request *req, void *arg)
{
    const char *theirs = evhttp_find_header(evhttp_request_get_input_headers(req), "X-Request-Id");
    char id[LOG_REQUEST_ID_MAX + 1];

    if (theirs != NULL && str_is_name(theirs, LOG_REQUEST_ID_MAX)) {
        (void)snprintf(id, sizeof(id), "%s", theirs);
    } else {
        random_hex(id, 8);
    }
    (void)evhttp_add_header(evhttp_request_get_output_headers(req), "X-Request-Id", id);
    log_set_request(id);
    route_request(req, arg);
    log_set_request(NULL);
}

/* ---- listening ------------------------------------------------------------------------------- */

static int
listen_unix(struct api *a, const char *path, struct err *reterr)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct stat st;
    int fd;

    memcpy(sa.sun_path, path, strlen(path) + 1);
    /* Replace a stale socket from a previous run, never any other kind of file. */
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
        (void)unlink(path);
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        return err_set(reterr, -errno, "socket: %s", strerror(errno));
    }
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 511) < 0) {
        int e = errno;

        (void)close(fd);
        return err_set(reterr, -e, "cannot listen on 'unix:%s': %s", path, strerror(e));
    }
    (void)chmod(path, 0660);
    a->bound = evhttp_accept_socket_with_handle(a->http, fd);
    if (a->bound == NULL) {
        (void)close(fd);
        return err_set(reterr, -EIO, "cannot serve 'unix:%s'", path);
    }
    memcpy(a->unix_path, path, strlen(path) + 1);
    return 0;
}

int
api_new(struct event_base *base, const struct cfg *cfg, const struct api_backend *backend,
        struct api **ret, struct err *reterr)
{
    struct api *a = xcalloc(1, sizeof(*a));
    char host[256];
    uint16_t port;
    int r;

    a->base = base;
    a->cfg = cfg;
    a->backend = backend;
    a->http = OOM_CHECK(evhttp_new(base));
    a->conns = api_conns_new(cfg->http_max_connections, cfg->http_header_timeout_s);
    evhttp_set_bevcb(a->http, api_conn_bev_new, a); /* streamed uploads: body.c */
    evhttp_set_max_headers_size(a->http, API_MAX_HEADERS_BYTES);
    evhttp_set_max_body_size(a->http, cfg->http_max_body_bytes);
    evhttp_set_timeout(a->http, API_CONN_TIMEOUT_S);
    evhttp_set_allowed_methods(a->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_DELETE | EVHTTP_REQ_HEAD);
    evhttp_set_gencb(a->http, on_request, a);

    r = parse_listen(cfg->listen, host, sizeof(host), &port);
    if (r < 0) {
        api_free(a);
        return err_set(reterr, -EINVAL, "bad listen address '%s'", cfg->listen);
    }
    if (port == 0) {
        r = listen_unix(a, host, reterr);
    } else {
        a->bound = evhttp_bind_socket_with_handle(a->http, host, port);
        r = a->bound ? 0
                     : err_set(reterr, -EADDRINUSE, "cannot listen on '%s': %s", cfg->listen,
                               strerror(errno ? errno : EADDRINUSE));
    }
    if (r < 0) {
        api_free(a);
        return r;
    }
    api_conns_set_listener(a->conns, evhttp_bound_socket_get_listener(a->bound));
    *ret = a;
    return 0;
}

void
api_get_stats(const struct api *a, struct api_stats *ret)
{
    *ret = a->stats;
}

void
api_stop_listening(struct api *a)
{
    if (a->bound != NULL) {
        api_conns_set_listener(a->conns, NULL);
        evhttp_del_accept_socket(a->http, a->bound);
        a->bound = NULL;
    }
}

struct api *
api_free(struct api *a)
{
    if (a == NULL) {
        return NULL;
    }
    evhttp_free(a->http);
    api_conns_free(a->conns);
    if (a->unix_path[0] != '\0') {
        (void)unlink(a->unix_path);
    }
    free(a);
    return NULL;
}
