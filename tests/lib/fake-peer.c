/* Fake peer node; see fake-peer.h.
 *
 * A request is answered at once, unless a fault holds it: then it is a struct held, its
 * connection watched with a close callback as the daemon's pending requests are
 * (src/http/pending.c: evhttp 2.1 frees a held request with its connection, or detaches it and
 * leaves it to us), and answered, dropped or left by a timer of its own. The heartbeat is the
 * registry's (src/cluster/registry.c) cut down: one at a time, when Redis is up, every
 * heartbeat_ms. */
#include "fake-peer.h"

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "config/config.h"
#include "lib/http.h"
#include "lib/loop.h"
#include "store/nodes.h"
#include "store/redis.h"
#include "store/sessions.h"
#include "util/macro.h"
#include "util/time.h"

#define PEER_WAIT_MS 5000u

struct held {
    TAILQ_ENTRY(held) link;
    struct fake_peer *fp;
    struct evhttp_request *req;
    struct evhttp_connection *conn;
    struct event *timer; /* LATE: the answer; DROP: the close; HANG: none */
    enum fake_peer_fault fault;
};

struct fake_peer {
    struct event_base *base;
    struct evhttp *http;
    char url[64];
    char id[65];
    unsigned heartbeat_ms;
    uint64_t started_at;
    struct store_redis *redis;
    struct store_nodes *nodes;
    struct store_sessions *sessions;
    struct event *beat;
    bool beating, beat_in_flight, left;
    unsigned heartbeats;
    /* the script */
    int status;
    char *ctype, *body;
    enum fake_peer_fault fault;
    unsigned fault_n, fault_ms;
    /* what came */
    struct fake_peer_request *reqs;
    unsigned n_reqs;
    char header[1024];
    TAILQ_HEAD(, held) held;
    unsigned n_held, gone;
};

/* ---- answering ------------------------------------------------------------------------------ */

static void
reply(struct fake_peer *fp, struct evhttp_request *req, int status, const char *ctype,
      const char *body)
{
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    const char *rid = evhttp_find_header(evhttp_request_get_input_headers(req), "X-Request-Id");
    struct evbuffer *b = evbuffer_new();

    if (b == NULL || evbuffer_add(b, body, strlen(body)) < 0) {
        abort();
    }
    (void)evhttp_add_header(out, "Content-Type", ctype);
    (void)evhttp_add_header(out, "X-Fake-Peer", fp->id); /* an end-to-end header of its own */
    if (rid != NULL) {
        (void)evhttp_add_header(out, "X-Request-Id", rid); /* as a daemon does */
    }
    evhttp_send_reply(req, status, NULL, b);
    evbuffer_free(b);
}

static void
held_free(struct held *h)
{
    TAILQ_REMOVE(&h->fp->held, h, link);
    h->fp->n_held--;
    if (h->timer != NULL) {
        event_free(h->timer);
    }
    free(h);
}

/* The caller went while the request was held (pending.c's rule for what evhttp leaves us). */
static void
on_conn_close(struct evhttp_connection *conn, void *arg)
{
    struct held *h = arg;

    if (evhttp_request_get_connection(h->req) == NULL) {
        evhttp_request_free(h->req);
    }
    h->fp->gone++;
    held_free(h);
}

static void
on_held_timer(evutil_socket_t fd, short what, void *arg)
{
    struct held *h = arg;
    struct fake_peer *fp = h->fp;
    struct evhttp_request *req = h->req;
    struct evhttp_connection *conn = h->conn;
    enum fake_peer_fault fault = h->fault;

    evhttp_connection_set_closecb(conn, NULL, NULL);
    held_free(h);
    if (fault == FAKE_PEER_DROP) {
        evhttp_connection_free(conn); /* frees req with it: the caller sees the close */
    } else {
        reply(fp, req, fp->status, fp->ctype, fp->body);
    }
}

static void
hold(struct fake_peer *fp, struct evhttp_request *req, enum fake_peer_fault fault, unsigned ms)
{
    struct held *h = xcalloc(1, sizeof(*h));
    struct timeval tv;

    h->fp = fp;
    h->req = req;
    h->conn = evhttp_request_get_connection(req);
    h->fault = fault;
    TAILQ_INSERT_TAIL(&fp->held, h, link);
    fp->n_held++;
    evhttp_connection_set_closecb(h->conn, on_conn_close, h);
    /* evhttp stops reading a connection whose request is being handled: read on, so that the
     * caller's close is seen (EOF fails the connection, which calls on_conn_close). */
    (void)bufferevent_enable(evhttp_connection_get_bufferevent(h->conn), EV_READ);
    if (fault == FAKE_PEER_HANG) {
        return;
    }
    h->timer = evtimer_new(fp->base, on_held_timer, h);
    if (h->timer == NULL) {
        abort();
    }
    time_tv_from_ms(&tv, fault == FAKE_PEER_LATE ? ms : 0);
    (void)evtimer_add(h->timer, &tv);
}

static void
record(struct fake_peer *fp, struct evhttp_request *req)
{
    struct fake_peer_request *r;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    struct evbuffer *hb = evbuffer_new();
    const struct evkeyval *kv;
    size_t n;

    fp->reqs = realloc(fp->reqs, (fp->n_reqs + 1) * sizeof(*fp->reqs));
    if (fp->reqs == NULL || hb == NULL) {
        abort();
    }
    r = &fp->reqs[fp->n_reqs++];
    memset(r, 0, sizeof(*r));
    (void)snprintf(r->method, sizeof(r->method), "%s",
                   test_http_method_name(evhttp_request_get_command(req)));
    r->uri = xstrdup(evhttp_request_get_uri(req));
    TAILQ_FOREACH (kv, evhttp_request_get_input_headers(req), next) {
        (void)evbuffer_add_printf(hb, "%s: %s\n", kv->key, kv->value);
    }
    n = evbuffer_get_length(hb);
    r->headers = xcalloc(1, n + 1);
    (void)evbuffer_remove(hb, r->headers, n);
    evbuffer_free(hb);
    r->body_len = evbuffer_get_length(in);
    r->body = xcalloc(1, r->body_len + 1);
    (void)evbuffer_copyout(in, r->body, r->body_len);
}

static void
on_request(struct evhttp_request *req, void *arg)
{
    struct fake_peer *fp = arg;
    enum fake_peer_fault fault = FAKE_PEER__COUNT;
    char err[96];

    record(fp, req);
    if (fp->fault_n > 0) {
        fp->fault_n--;
        fault = fp->fault;
    }
    switch (fault) {
    case FAKE_PEER_FAIL:
        (void)snprintf(err, sizeof(err),
                       "{\"error\": {\"code\": \"internal\", \"message\": \"fake peer %u\"}}",
                       fp->fault_ms);
        reply(fp, req, (int)fp->fault_ms, "application/json", err);
        break;
    case FAKE_PEER_FREEZE:
        fp->beating = false;
        hold(fp, req, FAKE_PEER_HANG, 0);
        break;
    case FAKE_PEER_LATE:
    case FAKE_PEER_DROP:
    case FAKE_PEER_HANG:
        hold(fp, req, fault, fp->fault_ms);
        break;
    case FAKE_PEER__COUNT:
        reply(fp, req, fp->status, fp->ctype, fp->body);
        break;
    }
}

/* ---- the registry --------------------------------------------------------------------------- */

static void
on_beaten(int r, const char *lost_by, void *userdata)
{
    struct fake_peer *fp = userdata;

    fp->beat_in_flight = false;
    if (r == 0) {
        fp->heartbeats++;
    }
}

static int
heartbeat(struct fake_peer *fp, bool stopped, store_nodes_beat_cb *cb)
{
    struct store_node_rec rec = {
        .draining = stopped,
        .stopped = stopped,
        .started_at = fp->started_at,
        .heartbeat_at = time_wall_ms(),
        .ttl_ms = 3 * fp->heartbeat_ms,
        .capacity = (char *)"{}",
    };
    int r;

    (void)snprintf(rec.id, sizeof(rec.id), "%s", fp->id);
    (void)snprintf(rec.url, sizeof(rec.url), "%s", fp->url);
    (void)snprintf(rec.version, sizeof(rec.version), "fake-peer");
    r = store_nodes_heartbeat(fp->nodes, &rec, cb, fp);
    if (r == 0) {
        fp->beat_in_flight = true;
    }
    return r;
}

static void
on_beat(evutil_socket_t fd, short what, void *arg)
{
    struct fake_peer *fp = arg;

    if (fp->beating && !fp->left && !fp->beat_in_flight && store_redis_is_up(fp->redis)) {
        (void)heartbeat(fp, false, on_beaten);
    }
}

static void
on_redis_state(bool up, const char *why, void *userdata)
{
    struct fake_peer *fp = userdata;

    if (up && fp->beat != NULL) {
        event_active(fp->beat, 0, 0);
    }
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

struct fake_peer *
fake_peer_new(struct event_base *base, const char *redis_url, const char *prefix,
              const char *node_id, unsigned heartbeat_ms)
{
    struct fake_peer *fp = xcalloc(1, sizeof(*fp));
    struct evhttp_bound_socket *bound;
    struct sockaddr_in sa = {0};
    socklen_t len = sizeof(sa);
    struct cfg_redis_addr addr;
    struct timeval tv;
    char body[128];

    (void)signal(SIGPIPE, SIG_IGN);
    fp->base = base;
    fp->heartbeat_ms = heartbeat_ms;
    fp->started_at = time_wall_ms();
    fp->beating = true;
    (void)snprintf(fp->id, sizeof(fp->id), "%s", node_id);
    TAILQ_INIT(&fp->held);
    (void)snprintf(body, sizeof(body), "{\"peer\": \"%s\"}", fp->id);
    fake_peer_answer(fp, 200, "application/json", body);
    fp->http = evhttp_new(base);
    if (fp->http == NULL) {
        abort();
    }
    evhttp_set_allowed_methods(fp->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                             EVHTTP_REQ_DELETE | EVHTTP_REQ_HEAD);
    evhttp_set_gencb(fp->http, on_request, fp);
    bound = evhttp_bind_socket_with_handle(fp->http, "127.0.0.1", 0);
    if (bound == NULL ||
        getsockname(evhttp_bound_socket_get_fd(bound), (struct sockaddr *)&sa, &len) < 0) {
        abort();
    }
    (void)snprintf(fp->url, sizeof(fp->url), "http://127.0.0.1:%u", ntohs(sa.sin_port));
    if (cfg_parse_redis_url(redis_url, &addr) < 0) {
        abort();
    }
    fp->redis = store_redis_new(base, &addr, 1000, on_redis_state, fp);
    fp->nodes = store_nodes_new(fp->redis, prefix);
    fp->sessions = store_sessions_new(fp->redis, prefix, node_id);
    fp->beat = event_new(base, -1, EV_PERSIST, on_beat, fp);
    if (fp->beat == NULL) {
        abort();
    }
    time_tv_from_ms(&tv, heartbeat_ms);
    (void)event_add(fp->beat, &tv);
    return fp;
}

struct fake_peer *
fake_peer_free(struct fake_peer *fp)
{
    if (fp == NULL) {
        return NULL;
    }
    while (!TAILQ_EMPTY(&fp->held)) {
        struct held *h = TAILQ_FIRST(&fp->held);

        evhttp_connection_set_closecb(h->conn, NULL, NULL);
        held_free(h); /* the request goes with its connection in evhttp_free() */
    }
    evhttp_free(fp->http);
    event_free(fp->beat);
    store_redis_free(fp->redis); /* answers what is in flight with -ECANCELED */
    store_sessions_free(fp->sessions);
    store_nodes_free(fp->nodes);
    for (unsigned i = 0; i < fp->n_reqs; i++) {
        free(fp->reqs[i].uri);
        free(fp->reqs[i].headers);
        free(fp->reqs[i].body);
    }
    free(fp->reqs);
    free(fp->ctype);
    free(fp->body);
    free(fp);
    return NULL;
}

const char *
fake_peer_url(const struct fake_peer *fp)
{
    return fp->url;
}

unsigned
fake_peer_heartbeats(const struct fake_peer *fp)
{
    return fp->heartbeats;
}

struct waited {
    bool fired;
    int r;
};

static void
on_written(int r, void *userdata)
{
    struct waited *w = userdata;

    w->fired = true;
    w->r = r;
}

int
fake_peer_own_session(struct fake_peer *fp, const char *id, const char *tenant, const char *profile)
{
    uint64_t now = time_wall_ms();
    struct store_session_rec rec = {
        .created_at = now,
        .last_active_at = now,
        .expires_at = now + 3600000,
        .idle_timeout_s = 600,
        .state = STORE_SESSION_ACTIVE,
        .metadata = (char *)"{}",
        .ext = (char *)"",
        .egress = (char *)"",
    };
    struct waited w = {0};
    bool up = false;

    (void)snprintf(rec.id, sizeof(rec.id), "%s", id);
    (void)snprintf(rec.tenant, sizeof(rec.tenant), "%s", tenant);
    (void)snprintf(rec.profile, sizeof(rec.profile), "%s", profile);
    (void)snprintf(rec.container, sizeof(rec.container), "fake-peer-%s", id);
    (void)snprintf(rec.node, sizeof(rec.node), "%s", fp->id);
    for (uint64_t end = time_now_ms() + PEER_WAIT_MS; !up && time_now_ms() < end;) {
        up = store_redis_is_up(fp->redis);
        if (!up) {
            loop_for(fp->base, 5);
        }
    }
    if (!up) {
        return -ENOTCONN;
    }
    if (store_sessions_create(fp->sessions, &rec, on_written, &w) < 0) {
        return -EIO;
    }
    return loop_until(fp->base, &w.fired, PEER_WAIT_MS) ? w.r : -ETIMEDOUT;
}

void
fake_peer_answer(struct fake_peer *fp, int status, const char *content_type, const char *body)
{
    free(fp->ctype);
    free(fp->body);
    fp->status = status;
    fp->ctype = xstrdup(content_type);
    fp->body = xstrdup(body);
}

void
fake_peer_fault(struct fake_peer *fp, enum fake_peer_fault fault, unsigned n, unsigned ms)
{
    fp->fault = fault;
    fp->fault_n = n;
    fp->fault_ms = ms;
}

void
fake_peer_set_beating(struct fake_peer *fp, bool beating)
{
    fp->beating = beating;
}

static void
on_left(int r, const char *lost_by, void *userdata)
{
    struct fake_peer *fp = userdata;

    fp->beat_in_flight = false;
    fp->left = true;
}

int
fake_peer_leave(struct fake_peer *fp)
{
    int r;

    for (uint64_t end = time_now_ms() + PEER_WAIT_MS; fp->beat_in_flight;) {
        if (time_now_ms() >= end) {
            return -ETIMEDOUT;
        }
        loop_for(fp->base, 5);
    }
    fp->beating = false;
    r = heartbeat(fp, true, on_left);
    if (r < 0) {
        return r;
    }
    return loop_until(fp->base, &fp->left, PEER_WAIT_MS) ? 0 : -ETIMEDOUT;
}

unsigned
fake_peer_requests(const struct fake_peer *fp)
{
    return fp->n_reqs;
}

const struct fake_peer_request *
fake_peer_request(const struct fake_peer *fp, unsigned i)
{
    return i < fp->n_reqs ? &fp->reqs[i] : NULL;
}

const char *
fake_peer_header(struct fake_peer *fp, unsigned i, const char *name)
{
    const char *p;
    size_t n = strlen(name);

    if (i >= fp->n_reqs) {
        return NULL;
    }
    for (p = fp->reqs[i].headers; *p != '\0';) {
        const char *eol = strchr(p, '\n');

        if (strncasecmp(p, name, n) == 0 && p[n] == ':' && p[n + 1] == ' ') {
            (void)snprintf(fp->header, sizeof(fp->header), "%.*s", (int)(eol - p - n - 2),
                           p + n + 2);
            return fp->header;
        }
        p = eol + 1;
    }
    return NULL;
}

unsigned
fake_peer_held(const struct fake_peer *fp)
{
    return fp->n_held;
}

unsigned
fake_peer_gone(const struct fake_peer *fp)
{
    return fp->gone;
}
