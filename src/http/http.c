/* HTTP front end; see api.h.
 *
 * Errors are answered from the project's one errno -> HTTP status -> code table (util/errcode.c,
 * shared with the client library).
 *
 * Routing is one static table of {method, flags, path pattern, handler}; a pattern segment "*"
 * matches one path segment. A path that matches no pattern answers 404, a path that matches with
 * another method answers 405 with Allow. Replies are always JSON with Cache-Control: no-store.
 *
 * Limits set on evhttp: header block size, body size (cfg http.max_body_bytes, so a huge body is
 * refused with 413 before it is read in full) and a read/write timeout per connection. Who gets
 * a connection slot is conns.c's business; an optional second listener (http.health_listen)
 * serves the probes and metrics only, with slots of its own. */
#include "http/http.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "http/http-internal.h"

#define LOG_MODULE "api"
#include "cluster/registry.h"
#include "log/log.h"
#include "pool/pool.h"
#include "sandpool/api.h"
#include "util/errcode.h"
#include "util/macro.h"
#include "util/parse.h"
#include "util/random.h"
#include "util/utf8.h"

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
http_reply_close(struct evhttp_request *req)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    const char *v = evhttp_find_header(h, "Connection");

    if (v == NULL || strcasecmp(v, "close") != 0) {
        (void)evhttp_remove_header(h, "Connection");
        (void)evhttp_add_header(h, "Connection", "close");
    }
}

void
http_reply_json_new(struct evhttp_request *req, int status, json_t *body)
{
    char *text = OOM_CHECK(json_dumps(body, JSON_COMPACT));

    reply_raw(req, status, status < 300 ? "OK" : "Error", text, strlen(text));
    free(text);
    json_decref(body);
}

void
http_reply_error(struct evhttp_request *req, int r, const char *fmt, ...)
{
    const struct errcode *st = errcode_from_errno(r);
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

int
http_body_json(struct evhttp_request *req, bool allow_empty, json_t **ret, struct err *reterr)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);

    /* An empty buffer pulls up NULL. */
    return http_request_json((const char *)evbuffer_pullup(in, -1), n, allow_empty, ret, reterr);
}

#define MAX_PARAMS 4
#define MAX_PARAM  128

/* Matches a path (len bytes) against a pattern where "*" stands for one non-empty segment and a
 * final "**" for the non-empty rest of the path, slashes included. The segments are copied into
 * params (NULL: not copied): at most MAX_PARAMS, each "*" of at most MAX_PARAM bytes; "**" is
 * left in the path and its offset stored in *rest. */
static bool
path_matches(const char *pattern, const char *path, size_t len, char params[MAX_PARAMS][MAX_PARAM],
             size_t *rest)
{
    const char *start = path, *end = path + len;
    int np = 0;

    while (*pattern != '\0' && path < end) {
        if (pattern[0] == '*' && pattern[1] == '*') {
            *rest = (size_t)(path - start);
            return true;
        }
        if (*pattern == '*') {
            const char *slash = memchr(path, '/', (size_t)(end - path));
            size_t seg = slash ? (size_t)(slash - path) : (size_t)(end - path);

            if (seg == 0 || seg >= MAX_PARAM || np == MAX_PARAMS) {
                return false;
            }
            if (params != NULL) {
                memcpy(params[np], path, seg);
                params[np][seg] = '\0';
            }
            np++;
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
    return *pattern == '\0' && path == end;
}

struct http_routes {
    size_t n;
    struct http_route rows[];
};

struct http_routes *
http_routes_new(const struct http_protocol *const *protocols, size_t n)
{
    size_t total = http_n_ops_routes, at = 0;
    struct http_routes *rt;

    for (size_t i = 0; i < n; i++) {
        total += protocols[i]->n_routes;
    }
    rt = xmalloc(sizeof(*rt) + total * sizeof(rt->rows[0]));
    rt->n = total;
    memcpy(rt->rows, http_ops_routes, http_n_ops_routes * sizeof(rt->rows[0]));
    at = http_n_ops_routes;
    for (size_t i = 0; i < n; i++) {
        memcpy(rt->rows + at, protocols[i]->routes, protocols[i]->n_routes * sizeof(rt->rows[0]));
        at += protocols[i]->n_routes;
    }
    return rt;
}

void
http_routes_free(struct http_routes *rt)
{
    free(rt);
}

unsigned
http_route_flags(const struct http_routes *rt, enum evhttp_cmd_type method, const char *path,
                 size_t len)
{
    if (rt == NULL) { /* a registry made without routes (a test's): no body is held */
        return 0;
    }
    for (size_t i = 0; i < rt->n; i++) {
        const struct http_route *r = &rt->rows[i];
        size_t rest = 0;

        if (r->method == (int)method && path_matches(r->pattern, path, len, NULL, &rest)) {
            return r->flags;
        }
    }
    return 0;
}

/* The Allow header's names for a route's method (HEAD goes wherever GET does). */
static const char *
allow_names(int method)
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

/* Routes req, which came on a connection of reg, through the first n_routes rows of a->routes. */
static void
route_request(struct http *a, struct http_conns *reg, size_t n_routes, struct evhttp_request *req)
{
    const char *uri = evhttp_request_get_uri(req);
    struct evhttp_uri *parsed = evhttp_uri_parse_with_flags(uri, 0);
    const char *path = parsed ? evhttp_uri_get_path(parsed) : NULL;
    enum evhttp_cmd_type method = evhttp_request_get_command(req);
    struct http_body held;
    bool path_known = false;
    char allow[64] = "";

    if (!http_conn_dispatched(reg, req)) {
        http_reply_close(req);
        http_reply_error(req, -EINVAL, "the request head holds a NUL byte");
        if (parsed != NULL) {
            evhttp_uri_free(parsed);
        }
        return;
    }
    if (http_body_held(reg, req, &held)) {
        /* A held body (body.c) not consumed by its handler (or refused before one: a
         * malformed target) closes the connection after the reply: its bytes must never be
         * read as the next request. */
        http_reply_close(req);
    }
    if (path == NULL || path[0] != '/') {
        http_reply_error(req, -EINVAL, "malformed request target");
        if (parsed != NULL) {
            evhttp_uri_free(parsed); /* libevent 2.1's does not take NULL */
        }
        return;
    }
    for (size_t i = 0; i < n_routes; i++) {
        const struct http_route *r = &a->routes->rows[i];
        char params[MAX_PARAMS][MAX_PARAM];
        const char *p[MAX_PARAMS + 1] = {params[0], params[1], params[2], params[3], NULL};
        size_t rest = 0;

        if (!path_matches(r->pattern, path, strlen(path), params, &rest)) {
            continue;
        }
        if (rest > 0) {
            p[1] = path + rest; /* routes with "**" have one "*" before it */
        }
        path_known = true;
        if (r->method == (int)method ||
            (method == EVHTTP_REQ_HEAD && r->method == EVHTTP_REQ_GET)) {
            r->handler(a, req, p);
            evhttp_uri_free(parsed);
            return;
        }
        if (allow_names(r->method) != NULL) {
            size_t used = strlen(allow);

            (void)snprintf(allow + used, sizeof(allow) - used, "%s%s", used > 0 ? ", " : "",
                           allow_names(r->method));
        }
    }
    if (path_known) {
        /* RFC 9110 15.5.6: a 405 names the methods the resource has. */
        (void)evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
        http_reply_error(req, -EOPNOTSUPP, "method not allowed on this path");
    } else {
        http_reply_error(req, -ENOENT, "no such endpoint");
    }
    evhttp_uri_free(parsed);
}

/* Every request gets an id: the client's X-Request-Id when it is a plain name of at most
 * LOG_REQUEST_ID_MAX characters, else a random one. It is sent back in X-Request-Id and named
 * by every log line written while the handler runs (asynchronous completions set it again). */
static void
handle_request(struct http *a, struct http_conns *reg, size_t n, struct evhttp_request *req)
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
    route_request(a, reg, n, req);
    log_set_request(NULL);
}

static void
on_request(struct evhttp_request *req, void *arg)
{
    struct http *a = arg;

    handle_request(a, a->conns, a->routes->n, req);
}

static void
on_health_request(struct evhttp_request *req, void *arg)
{
    struct http *a = arg;

    handle_request(a, a->health_conns, http_n_ops_routes, req);
}

/* ---- listening ------------------------------------------------------------------------------- */

/* Listens on the unix socket path for http; *ret_bound, and the path in owned (unlinked by
 * http_free()). */
static int
listen_unix(struct evhttp *http, const char *path, struct evhttp_bound_socket **ret_bound,
            char owned[108], struct err *reterr)
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
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, HTTP_LISTEN_BACKLOG) < 0) {
        int e = errno;

        (void)close(fd);
        return err_set(reterr, -e, "cannot listen on 'unix:%s': %s", path, strerror(e));
    }
    (void)chmod(path, 0660);
    *ret_bound = evhttp_accept_socket_with_handle(http, fd);
    if (*ret_bound == NULL) {
        (void)close(fd);
        return err_set(reterr, -EIO, "cannot serve 'unix:%s'", path);
    }
    memcpy(owned, path, strlen(path) + 1);
    return 0;
}

/* An evhttp on addr with the project's limits, whose connections are reg's; requests go to cb. */
static int
serve(struct http *a, const char *addr, struct http_conns *reg,
      void (*cb)(struct evhttp_request *, void *), struct evhttp **ret_http,
      struct evhttp_bound_socket **ret_bound, char unix_path[108], struct err *reterr)
{
    struct evhttp *http = OOM_CHECK(evhttp_new(a->base));
    char host[256];
    uint16_t port;

    *ret_http = http;
    evhttp_set_bevcb(http, http_conn_bev_new, reg); /* slots (conns.c), uploads (body.c) */
    evhttp_set_max_headers_size(http, HTTP_MAX_HEADERS_BYTES);
    evhttp_set_max_body_size(http, a->cfg->http_max_body_bytes);
    evhttp_set_timeout(http, HTTP_CONN_TIMEOUT_S);
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                         EVHTTP_REQ_DELETE | EVHTTP_REQ_HEAD);
    evhttp_set_gencb(http, cb, a);
    if (parse_listen(addr, host, sizeof(host), &port) < 0) {
        return err_set(reterr, -EINVAL, "bad listen address '%s'", addr);
    }
    if (port == 0) {
        if (listen_unix(http, host, ret_bound, unix_path, reterr) < 0) {
            return reterr != NULL ? reterr->code : -EIO;
        }
    } else {
        *ret_bound = evhttp_bind_socket_with_handle(http, host, port);
        if (*ret_bound == NULL) {
            return err_set(reterr, -EADDRINUSE, "cannot listen on '%s': %s", addr,
                           strerror(errno ? errno : EADDRINUSE));
        }
    }
    http_conns_set_listener(reg, evhttp_bound_socket_get_listener(*ret_bound));
    return 0;
}

/* The protocols' state, once the core is set up: what their routes will see. */
static void
protocols_start(struct http *a, const struct http_protocol *const *protocols, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        a->protocols[i].protocol = protocols[i];
        a->protocols[i].state = protocols[i]->start != NULL ? protocols[i]->start(a) : NULL;
    }
    a->n_protocols = n;
}

int
http_new(struct event_base *base, const struct cfg *cfg, const struct http_backend *backend,
         const struct http_protocol *const *protocols, size_t n, struct http **ret,
         struct err *reterr)
{
    struct http *a = xcalloc(1, sizeof(*a));
    struct http_conns_limits lim = {
        .max = cfg->http_max_connections,
        .per_peer = MIN(cfg->http_max_connections_per_peer, cfg->http_max_connections),
        .linger_max = HTTP_LINGER_MAX(cfg->http_max_connections),
        .head_timeout_s = cfg->http_header_timeout_s,
        .anon_busy_ms = HTTP_ANON_BUSY_MS,
    };
    struct http_conns_limits health = {
        .max = HTTP_HEALTH_MAX_CONNECTIONS,
        .head_timeout_s = cfg->http_header_timeout_s,
        .anon_busy_ms = HTTP_ANON_BUSY_MS,
    };
    int r;

    assert(n <= HTTP_PROTOCOLS_MAX);
    a->base = base;
    a->cfg = cfg;
    a->backend = backend;
    a->routes = http_routes_new(protocols, n);
    lim.routes = health.routes = a->routes;
    a->conns = http_conns_new(&lim);
    a->files_gate = http_gate_new(
        base, &(struct http_gate_limits){.per_session = cfg->files_per_session,
                                         .per_tenant = cfg->files_per_tenant,
                                         .max = cfg->files_max_inflight,
                                         .per_tenant_queue = cfg->files_queue_per_tenant});
    a->waiting = http_waiting_new(cfg->queue_max_bytes, cfg->queue_max_bytes_per_tenant);
    a->engine_ops = http_buckets_new(cfg->engine_tenant_ops_per_s, cfg->engine_tenant_ops_burst);
    if (backend->route != NULL) {
        a->forwarder = http_forwarder_new(a);
    }
    protocols_start(a, protocols, n);
    r = serve(a, cfg->listen, a->conns, on_request, &a->http, &a->bound, a->unix_path, reterr);
    if (r == 0 && cfg->http_health_listen[0] != '\0') {
        a->health_conns = http_conns_new(&health);
        r = serve(a, cfg->http_health_listen, a->health_conns, on_health_request, &a->health_http,
                  &a->health_bound, a->health_unix_path, reterr);
    }
    if (r < 0) {
        http_free(a);
        return r;
    }
    *ret = a;
    return 0;
}

void *
http_protocol_state(const struct http *a, const struct http_protocol *p)
{
    for (size_t i = 0; i < a->n_protocols; i++) {
        if (a->protocols[i].protocol == p) {
            return a->protocols[i].state;
        }
    }
    return NULL;
}

void
http_get_stats(const struct http *a, struct http_stats *ret)
{
    struct http_conns_stats cs;
    struct http_gate_stats gs;
    struct http_waiting_stats ws;
    struct http_buckets_stats bs;

    *ret = a->stats;
    http_conns_get_stats(a->conns, &cs);
    ret->conns_idle = cs.idle;
    ret->conns_busy = cs.busy;
    ret->conns_anonymous = cs.anonymous;
    ret->conns_lingering = cs.lingering;
    ret->conns_closing = cs.closing;
    ret->conns_evicted_total = cs.evicted_total + cs.evicted_peer_total;
    ret->conns_refused_total = cs.refused_total;
    ret->conns_linger_skipped_total = cs.linger_skipped_total;
    http_gate_get_stats(a->files_gate, &gs);
    ret->files_inflight = gs.inflight;
    ret->files_waiting = gs.waiting;
    ret->files_queued_total = gs.queued_total;
    ret->files_refused_total = gs.refused_total;
    http_waiting_get_stats(a->waiting, &ws);
    ret->waiting_bytes = ws.bytes;
    ret->waiting_calls = ws.calls;
    ret->waiting_refused_total = ws.refused_total + ws.refused_sandbox;
    http_buckets_get_stats(a->engine_ops, &bs);
    ret->engine_ops_total = bs.taken_total;
    ret->engine_ops_refused_total = bs.refused_total;
}

void
http_stop_listening(struct http *a)
{
    if (a->bound != NULL) {
        http_conns_set_listener(a->conns, NULL);
        evhttp_del_accept_socket(a->http, a->bound);
        a->bound = NULL;
    }
    /* The health listener stays: the probes keep their answers (readyz 503) to the end. */
}

struct http *
http_free(struct http *a)
{
    if (a == NULL) {
        return NULL;
    }
    /* First the WebSocket streams end (1001), their protocols still there to hear it; then the
     * protocols' calls stop watching the connections evhttp frees next. */
    http_ws_stop_all(a);
    for (size_t i = 0; i < a->n_protocols; i++) {
        if (a->protocols[i].protocol->stop != NULL) {
            a->protocols[i].protocol->stop(a->protocols[i].state);
        }
    }
    if (a->health_http != NULL) {
        evhttp_free(a->health_http);
    }
    if (a->http != NULL) {
        evhttp_free(a->http);
    }
    for (size_t i = 0; i < a->n_protocols; i++) { /* after evhttp_free: their close callbacks ran */
        if (a->protocols[i].protocol->free != NULL) {
            a->protocols[i].protocol->free(a->protocols[i].state);
        }
    }
    http_forwarder_free(a->forwarder); /* after evhttp_free: its requests were cancelled */
    http_conns_free(a->conns);
    http_conns_free(a->health_conns);
    http_gate_free(a->files_gate); /* after evhttp_free: the requests that waited are gone */
    http_waiting_free(a->waiting);
    http_buckets_free(a->engine_ops);
    http_routes_free(a->routes); /* after the connections: their filters parse heads with it */
    if (a->unix_path[0] != '\0') {
        (void)unlink(a->unix_path);
    }
    if (a->health_unix_path[0] != '\0') {
        (void)unlink(a->health_unix_path);
    }
    free(a);
    return NULL;
}
