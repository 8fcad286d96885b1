/* Requests for a session another node holds: routed (cluster/route.h) and forwarded to its owner,
 * the answer streamed back (docs/cluster.md#routing).
 *
 * The request goes out as the client sent it, its credentials included: the owner authenticates
 * it again (every node has the same tenants), so forwarding opens no new trust path. It is routed
 * only after this node authenticated it (auth.c), so an anonymous client costs no lookup; the E2B
 * sandbox routes excepted, whose credential is the sandbox's own token, which only its owner can
 * check (a token of the right form is routed, its lookups bounded as every other). A forwarded
 * request carries HTTP_FORWARDED_HEADER (this node's id); a node that gets a request so
 * marked never forwards it again, so a stale registry can bounce a request once at most. A client
 * that sends the marker itself only turns forwarding off for its request.
 *
 * Both bodies stream (cluster/peer.h): a held upload is read from the client at the pace the
 * owner takes it; the answer, when it is small (a Content-Length up to FORWARD_BUFFER_MAX), is
 * read whole and sent as one reply, and otherwise (SSE, a download, a chunked answer) is passed
 * on as it comes, the owner's connection no longer read while the client's backlog is above
 * stream_out's high-water mark. The client's hang-up cancels the call, which closes that
 * connection: the owner sees its client go, as it would directly (an execution's stream is
 * interrupted). An owner that does not answer is a 503 with Retry-After, never a 404; one whose
 * answer breaks off mid-stream breaks the client's connection off too; a call to an owner that
 * the registry comes to say is not live (killed, frozen, cut off) is given up within WATCH_MS
 * the same way. Loop context only. */
#define LOG_MODULE "api"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "cluster/peer.h"
#include "cluster/registry.h"
#include "cluster/route.h"
#include "http/http-internal.h"
#include "log/log.h"
#include "sandpool/api.h"
#include "session/session.h"
#include "stream/out.h"
#include "util/macro.h"
#include "util/parse.h"
#include "util/time.h"

#define FORWARD_BUFFER_MAX (256u << 10) /* an answer up to this is sent as one reply */
#define UPLOAD_HIGH_WATER  (1u << 20)   /* held body bytes waiting for the owner, at most */
#define HEADERS_MAX        128          /* request headers passed on (evhttp takes 8 KiB) */
#define HEADERS_OURS       2            /* ... and ours: the hop marker and the request id */
/* A forwarded call whose owner the registry says is no longer live (lost: killed, frozen, cut
 * off) ends with a 503 within this, instead of waiting for an answer that may never come. */
#define WATCH_MS 500

struct http_forwarder {
    struct http *a;
    struct peer_client *peers;
    TAILQ_HEAD(, fwd) calls; /* forwarded, their owner's answer not complete */
    struct event *watch;     /* WATCH_MS: are their owners still live? */
    struct http_forward_stats stats;
};

struct fwd {
    TAILQ_ENTRY(fwd) link; /* fw->calls, while call is set */
    struct http_forwarder *fw;
    struct http_pending client;           /* its req: NULL once answered or gone */
    struct route_op *rop;                 /* routing */
    struct peer_call *call;               /* forwarding */
    const struct http_route_style *style; /* NULL: REST's answers */
    bool mcp;                             /* id is an MCP session's (http_forward_mcp()) */
    bool must_close;                      /* the owner refused the credentials (401) */
    char id[OWNER_ID_MAX + 1];
    char node[OWNER_ID_MAX + 1];
    uint64_t started_us;
    bool listed; /* in fw->calls */
    /* the request's body */
    struct evbuffer *in; /* what the owner did not take yet */
    struct http_body held;
    bool is_held, held_reading, held_paused, held_done;
    /* the answer */
    long status;
    struct stream_out *out; /* streamed, through chunk */
    struct evbuffer *chunk;
    struct evbuffer *body; /* or read whole */
};

_Static_assert(ELEMENTSOF(((struct http_forward_stats *)0)->verdicts) == ROUTE__COUNT,
               "a count per route verdict");

static const char *const outcome_names[HTTP_FWD__COUNT] = {
    [HTTP_FWD_OK] = "ok",
    [HTTP_FWD_UNREACHABLE] = "unreachable",
    [HTTP_FWD_BROKEN] = "broken",
    [HTTP_FWD_CLIENT_GONE] = "client_gone",
};

const char *
http_forward_outcome_name(enum http_forward_outcome o)
{
    return o < HTTP_FWD__COUNT ? outcome_names[o] : "?";
}

/* A refusal of req, in the shapes of the layer it came through (REST's: http_reply_error()). */
static void refuse(const struct fwd *f, struct evhttp_request *req, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void
refuse(const struct fwd *f, struct evhttp_request *req, int err, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (f->style != NULL && f->style->refuse != NULL) {
        f->style->refuse(f->fw->a, req, err, msg);
    } else {
        http_reply_error(req, err, "%s", msg);
    }
}

/* ---- the end --------------------------------------------------------------------------------- */

/* A forwarded request's end (outcome), or HTTP_FWD__COUNT for one never forwarded. */
static void
fwd_free(struct fwd *f, enum http_forward_outcome outcome)
{
    if (outcome < HTTP_FWD__COUNT) {
        f->fw->stats.outcomes[outcome]++;
    }
    if (f->listed) {
        TAILQ_REMOVE(&f->fw->calls, f, link);
    }
    f->fw->stats.in_flight--;
    if (f->is_held && f->held_reading && !f->held_done) {
        http_body_cancel(&f->held);
    }
    if (f->in != NULL) {
        evbuffer_free(f->in);
    }
    if (f->body != NULL) {
        evbuffer_free(f->body);
    }
    if (f->chunk != NULL) {
        evbuffer_free(f->chunk);
    }
    free(f);
}

/* The client is answered next: no close callback of ours on its connection from here on. */
static struct evhttp_request *
detach(struct fwd *f)
{
    struct evhttp_request *req = f->client.req;

    http_pending_end(&f->client);
    return req;
}

static void
on_client_gone(struct http_pending *p)
{
    struct fwd *f = container_of(p, struct fwd, client);

    if (f->out != NULL) {
        stream_out_abandon(f->out);
    }
    if (f->rop != NULL) {
        route_cancel(f->rop);
        fwd_free(f, HTTP_FWD__COUNT);
        return;
    }
    peer_call_cancel(f->call); /* closes the owner's connection: it sees its client go */
    fwd_free(f, HTTP_FWD_CLIENT_GONE);
}

/* ---- the call's callbacks -------------------------------------------------------------------- */

/* The owner's answer's headers, but the hop-by-hop ones and ours (the request id is set already,
 * and the owner used it). */
static void
copy_header(const char *name, const char *value, void *arg)
{
    static const char *const skip[] = {
        "Connection", "Keep-Alive",       "Transfer-Encoding", "Content-Length", "Trailer",
        "Upgrade",    "Proxy-Connection", HTTP_NODE_HEADER,    "X-Request-Id",
    };

    for (size_t i = 0; i < ELEMENTSOF(skip); i++) {
        if (strcasecmp(name, skip[i]) == 0) {
            return;
        }
    }
    if (evhttp_add_header(arg, name, value) < 0) {
        oom();
    }
}

static void
on_drained(void *userdata)
{
    struct fwd *f = userdata;

    peer_call_resume(f->call);
}

static void
on_head(long status, void *userdata)
{
    struct fwd *f = userdata;
    struct evkeyvalq *out = evhttp_request_get_output_headers(f->client.req);
    const char *ctype, *length;
    uint64_t n = 0;

    f->status = status;
    metrics_hist_observe(&f->fw->stats.latency, time_now_us() - f->started_us);
    if (f->id[0] != '\0' && (status == 404 || status == 503)) {
        /* Gone, or elsewhere (a stale route, answered by a node that never forwards twice). */
        (f->mcp ? route_forget_mcp : route_forget)(f->fw->a->backend->route, f->id);
    }
    if (status == 401) {
        http_reply_close(f->client.req); /* as the owner did: no slot kept for the next guess */
        f->must_close = true;
    } else if (status < 400) {
        /* The owner took the credentials (an E2B sandbox's token, which only it can check): the
         * connection is an authenticated client's here too (conns.c), as it is there. */
        http_conn_authenticated(f->fw->a->conns, f->client.req);
    }
    peer_call_headers(f->call, copy_header, out);
    (void)evhttp_add_header(out, HTTP_NODE_HEADER, f->node);
    ctype = evhttp_find_header(out, "Content-Type");
    length = peer_call_header(f->call, "Content-Length");
    if (length != NULL) {
        /* The owner's, whether the body is streamed or read whole (curl checks it came whole);
         * a HEAD's answer has none to count. */
        (void)evhttp_add_header(out, "Content-Length", length);
    }
    if ((ctype != NULL && strncasecmp(ctype, "text/event-stream", 17) == 0) || length == NULL ||
        parse_u64(length, &n) < 0 || n > FORWARD_BUFFER_MAX) {
        f->chunk = OOM_CHECK(evbuffer_new());
        f->out = stream_out_start(f->client.req, (int)status, NULL, on_drained, f);
    } else {
        f->body = OOM_CHECK(evbuffer_new());
    }
}

static bool
on_data(const char *data, size_t n, void *userdata)
{
    struct fwd *f = userdata;

    if (evbuffer_add(f->out != NULL ? f->chunk : f->body, data, n) < 0) {
        oom();
    }
    return f->out == NULL || !stream_out_send(f->out, f->chunk); /* it drains f->chunk */
}

static size_t
read_body(char *buf, size_t n, void *userdata)
{
    struct fwd *f = userdata;
    int got = evbuffer_remove(f->in, buf, n);

    if (got > 0) {
        if (f->held_paused && evbuffer_get_length(f->in) < UPLOAD_HIGH_WATER / 2) {
            f->held_paused = false;
            http_body_pause(&f->held, false);
        }
        return (size_t)got;
    }
    return !f->is_held || f->held_done ? 0 : PEER_BODY_WAIT;
}

static void
on_done(int r, void *userdata)
{
    struct fwd *f = userdata;
    struct evhttp_request *req = detach(f);

    f->call = NULL;
    http_pending_log(&f->client);
    if (f->out != NULL) {
        if (r < 0) {
            log_warn("session=%s: node '%s' broke its answer off: %s", f->id, f->node,
                     strerror(-r));
        }
        stream_out_end(f->out, r < 0);
        fwd_free(f, r < 0 ? HTTP_FWD_BROKEN : HTTP_FWD_OK);
    } else if (r < 0 || f->body == NULL) {
        log_warn("session=%s: node '%s' did not answer: %s", f->id, f->node,
                 r < 0 ? strerror(-r) : "no answer");
        refuse(f, req, -ENOTCONN, "the session's node did not answer (%s)",
               r < 0 ? strerror(-r) : "no answer");
        fwd_free(f, HTTP_FWD_UNREACHABLE);
    } else {
        if (f->is_held && !http_body_unread(&f->held) && !f->must_close) {
            (void)evhttp_remove_header(evhttp_request_get_output_headers(req), "Connection");
        }
        evhttp_send_reply(req, (int)f->status, NULL, f->body);
        fwd_free(f, HTTP_FWD_OK);
    }
    log_set_request(NULL);
}

static const struct peer_call_ops call_ops = {
    .on_head = on_head,
    .on_data = on_data,
    .read_body = read_body,
    .on_done = on_done,
};

/* ---- a held upload, read as the owner takes it ------------------------------------------------
 */

static void
on_held_data(const char *data, size_t n, void *userdata)
{
    struct fwd *f = userdata;

    if (evbuffer_add(f->in, data, n) < 0) {
        oom();
    }
    if (!f->held_paused && evbuffer_get_length(f->in) >= UPLOAD_HIGH_WATER) {
        f->held_paused = true;
        http_body_pause(&f->held, true);
    }
    peer_call_body_ready(f->call);
}

static void
on_held_end(int r, void *userdata)
{
    struct fwd *f = userdata;

    f->held_done = true;
    if (r < 0) {
        /* The client stopped sending: the owner sees the call's connection close mid-body and
         * drops the part file. The client's connection is done for; the answer says why. */
        struct evhttp_request *req = detach(f);

        peer_call_cancel(f->call);
        if (f->out != NULL) {
            stream_out_end(f->out, true);
        } else {
            refuse(f, req, -EINVAL, "the upload ended early: %s",
                   r == -ETIMEDOUT ? "the client stopped sending" : strerror(-r));
        }
        fwd_free(f, HTTP_FWD_CLIENT_GONE);
        return;
    }
    peer_call_body_ready(f->call);
}

/* ---- forwarding ------------------------------------------------------------------------------ */

/* The client's headers the owner does not get: hop-by-hop ones, the body filter's marker, and
 * ours (the request id goes as this node's: one id for the request in both nodes' logs). */
static const char *const request_skip[] = {
    "Connection",     "Keep-Alive",          "Proxy-Connection", "TE",     "Trailer",
    "Upgrade",        "Transfer-Encoding",   "Content-Length",   "Expect", "Host",
    HTTP_HELD_HEADER, HTTP_FORWARDED_HEADER, "X-Request-Id",
};

static bool
skipped(const char *name)
{
    for (size_t i = 0; i < ELEMENTSOF(request_skip); i++) {
        if (strcasecmp(name, request_skip[i]) == 0) {
            return true;
        }
    }
    return false;
}

static const char *
method_name(enum evhttp_cmd_type cmd)
{
    switch (cmd) {
    case EVHTTP_REQ_GET:
        return "GET";
    case EVHTTP_REQ_POST:
        return "POST";
    case EVHTTP_REQ_PUT:
        return "PUT";
    case EVHTTP_REQ_DELETE:
        return "DELETE";
    case EVHTTP_REQ_HEAD:
        return "HEAD";
    default:
        return NULL;
    }
}

static void
start(struct fwd *f, const char *owner_url)
{
    struct evhttp_request *req = f->client.req;
    struct peer_header h[HEADERS_MAX + HEADERS_OURS];
    struct peer_request rq = {.headers = h};
    const struct evkeyval *kv;
    const char *uri = evhttp_request_get_uri(req);
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    struct buf url = BUF_INIT(STORE_NODE_URL_MAX + 8192);

    rq.method = method_name(cmd);
    if (rq.method == NULL || uri == NULL || uri[0] != '/' ||
        buf_printf(&url, "%s%s", owner_url, uri) < 0) {
        buf_done(&url);
        detach(f);
        refuse(f, req, -EINVAL, "this request cannot be forwarded to the session's node");
        fwd_free(f, HTTP_FWD__COUNT);
        return;
    }
    rq.url = url.buf;
    TAILQ_FOREACH (kv, evhttp_request_get_input_headers(req), next) {
        if (!skipped(kv->key) && rq.n_headers < HEADERS_MAX) {
            h[rq.n_headers++] = (struct peer_header){kv->key, kv->value};
        }
    }
    h[rq.n_headers++] = (struct peer_header){HTTP_FORWARDED_HEADER, f->fw->a->cfg->node_id};
    if (f->client.request[0] != '\0') {
        h[rq.n_headers++] = (struct peer_header){"X-Request-Id", f->client.request};
    }
    f->in = OOM_CHECK(evbuffer_new());
    f->is_held = http_body_held(f->fw->a->conns, req, &f->held);
    if (f->is_held) {
        /* A chunked body's length is known only at its end: it goes on chunked. */
        rq.body_len =
            http_body_chunked(&f->held) ? PEER_BODY_CHUNKED : (int64_t)http_body_length(&f->held);
    } else {
        (void)evbuffer_add_buffer(f->in, evhttp_request_get_input_buffer(req));
        rq.body_len =
            cmd == EVHTTP_REQ_POST || cmd == EVHTTP_REQ_PUT || evbuffer_get_length(f->in) > 0
                ? (int64_t)evbuffer_get_length(f->in)
                : -1;
    }
    f->started_us = time_now_us();
    f->call = peer_call_start(f->fw->peers, &rq, &call_ops, f);
    TAILQ_INSERT_TAIL(&f->fw->calls, f, link);
    f->listed = true;
    buf_done(&url);
    if (f->is_held) {
        f->held_reading = true;
        http_body_read(&f->held, on_held_data, on_held_end, f);
    }
}

/* ---- routing --------------------------------------------------------------------------------- */

/* ROUTE_NONE and ROUTE_HERE: the layer's own answer, else REST's 404. */
static void
not_forwarded(struct http *a, const struct http_route_style *style, struct evhttp_request *req,
              const struct route_answer *ans)
{
    if (style != NULL && style->here != NULL) {
        style->here(a, req, ans);
    } else if (ans->node_lost) {
        /* The error's code is not_found, as for any session that ended; the reason says why
         * this one did (docs/cluster.md#node-loss). */
        http_reply_json_new(
            req, 404,
            OOM_CHECK(json_pack("{s:{s:s, s:s, s:s, s:s}}", "error", "code", SANDPOOL_ERR_NOT_FOUND,
                                "message", ans->why, "reason", "node_lost", "node", ans->node)));
    } else {
        http_reply_error(req, -ENOENT, "%s", ans->why);
    }
}

static void
routed(struct fwd *f, const struct route_answer *ans)
{
    struct http_forwarder *fw = f->fw;
    struct evhttp_request *req;

    (void)snprintf(f->node, sizeof(f->node), "%s", ans->node);
    fw->stats.verdicts[ans->verdict]++;
    if (ans->verdict == ROUTE_FORWARD && !http_forwarded(f->client.req)) {
        start(f, ans->url);
        return;
    }
    req = detach(f); /* the layer's answer may watch the connection again (style->here) */
    switch (ans->verdict) {
    case ROUTE_NONE:
    case ROUTE_HERE:
        not_forwarded(fw->a, f->style, req, ans);
        break;
    case ROUTE_FORWARD: /* forwarded here already, yet the record names another node */
        /* A stale route, or a client's forged marker: which node holds the session is none of
         * the client's business (it retries, and is forwarded there). */
        (f->mcp ? route_forget_mcp : route_forget)(fw->a->backend->route, f->id);
        log_info("session=%s: a request marked as forwarded, for a session of node '%s'", f->id,
                 ans->node);
        refuse(f, req, -ENOTCONN, "session %s is not on this node: retry", f->id);
        break;
    case ROUTE_DOWN:
    case ROUTE_UNAVAILABLE:
    case ROUTE__COUNT:
        log_debug("session=%s: node '%s': %s", f->id, ans->node, ans->why);
        refuse(f, req, -ENOTCONN, "%s", ans->why);
        break;
    }
    fwd_free(f, HTTP_FWD__COUNT);
}

static void
on_routed(const struct route_answer *ans, void *userdata)
{
    struct fwd *f = userdata;

    f->rop = NULL;
    http_pending_log(&f->client);
    routed(f, ans);
    log_set_request(NULL);
}

static struct fwd *
fwd_new(struct http *a, struct evhttp_request *req, const char *id)
{
    struct fwd *f = xcalloc(1, sizeof(*f));

    f->fw = a->forwarder;
    (void)snprintf(f->id, sizeof(f->id), "%s", id);
    f->fw->stats.in_flight++;
    http_pending_start(&f->client, req, on_client_gone);
    return f;
}

void
http_forward_session(struct http *a, struct evhttp_request *req, const char *id, const char *tenant,
                     const struct http_route_style *style)
{
    struct route_answer ans;
    struct fwd *f;

    if (a->forwarder == NULL || a->backend->route == NULL) {
        ans = (struct route_answer){.verdict = ROUTE_NONE};
        (void)snprintf(ans.why, sizeof(ans.why), "no such session");
        not_forwarded(a, style, req, &ans);
        return;
    }
    f = fwd_new(a, req, id);
    f->style = style;
    if (a->backend->sessions != NULL && !session_manager_loaded(a->backend->sessions)) {
        /* Its record may name this node: a session of its own not loaded yet is no 404. */
        ans = (struct route_answer){.verdict = ROUTE_UNAVAILABLE};
        (void)snprintf(ans.why, sizeof(ans.why),
                       "sessions are being loaded after a restart; retry");
        routed(f, &ans);
    } else if (route_find(a->backend->route, id, tenant, &ans, on_routed, f, &f->rop) == 1) {
        routed(f, &ans);
    }
}

void
http_forward_mcp(struct http *a, struct evhttp_request *req, const char *id, const char *tenant,
                 const struct http_route_style *style)
{
    struct route_answer ans;
    struct fwd *f = fwd_new(a, req, id);

    f->style = style;
    f->mcp = true;
    if (route_find_mcp(a->backend->route, id, tenant, &ans, on_routed, f, &f->rop) == 1) {
        routed(f, &ans);
    }
}

struct peer_client *
http_forwarder_peers(struct http *a)
{
    return a->forwarder->peers;
}

void
http_forward_to(struct http *a, struct evhttp_request *req, const char *node, const char *url)
{
    struct fwd *f = fwd_new(a, req, "");

    (void)snprintf(f->node, sizeof(f->node), "%s", node);
    a->forwarder->stats.placed++;
    start(f, url);
}

/* ---- owners that stop answering -------------------------------------------------------------- */

static void
on_watch(evutil_socket_t fd, short what, void *arg)
{
    struct http_forwarder *fw = arg;
    struct fwd *f, *next;
    uint64_t now = time_wall_ms();

    for (f = TAILQ_FIRST(&fw->calls); f != NULL; f = next) {
        const struct store_node_rec *n = registry_node(fw->a->backend->registry, f->node);
        struct evhttp_request *req;

        next = TAILQ_NEXT(f, link);
        if (n == NULL || store_node_live(n, now)) {
            continue; /* unknown to the last list (it failed?): not judged */
        }
        req = detach(f);
        peer_call_cancel(f->call);
        f->call = NULL;
        http_pending_log(&f->client);
        log_warn("session=%s: node '%s' stopped answering its heartbeats: its call is given up",
                 f->id, f->node);
        if (f->out != NULL) {
            stream_out_end(f->out, true);
            fwd_free(f, HTTP_FWD_BROKEN);
        } else {
            refuse(f, req, -ENOTCONN, "the session's node stopped answering");
            fwd_free(f, HTTP_FWD_UNREACHABLE);
        }
        log_set_request(NULL);
    }
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

struct http_forwarder *
http_forwarder_new(struct http *a)
{
    struct http_forwarder *fw = xcalloc(1, sizeof(*fw));
    struct timeval tv = {.tv_usec = (suseconds_t)WATCH_MS * 1000};

    fw->a = a;
    fw->peers = peer_client_new(a->base);
    TAILQ_INIT(&fw->calls);
    if (a->backend->registry != NULL) {
        fw->watch = OOM_CHECK(event_new(a->base, -1, EV_PERSIST, on_watch, fw));
        (void)event_add(fw->watch, &tv);
    }
    return fw;
}

void
http_forwarder_free(struct http_forwarder *fw)
{
    if (fw != NULL) {
        if (fw->watch != NULL) {
            event_free(fw->watch);
        }
        peer_client_free(fw->peers);
        free(fw);
    }
}

void
http_get_forward_stats(const struct http *a, struct http_forward_stats *ret)
{
    struct peer_client_stats ps;

    *ret = (struct http_forward_stats){0};
    if (a->forwarder != NULL) {
        *ret = a->forwarder->stats;
        peer_client_get_stats(a->forwarder->peers, &ps);
        ret->peer_failures = ps.failures;
    }
}
