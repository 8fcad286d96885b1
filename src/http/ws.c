/* WebSocket streams (ws.h): the loop half. wslay frames the messages (RFC 6455: masking, control
 * frames, fragments, close codes); this file moves bytes between it and the socket, and keeps the
 * stream's bounds, keepalive and end.
 *
 * The connection. The body filter held back every byte after the upgrade request's head
 * (CONN_UPGRADED, body-conn.h), and evhttp, which dispatched the request, reads nothing more while
 * its handler owns it (it disabled reading, which suspends the socket's bufferevent). So, as for a
 * held body (held.c), the stream reads the socket itself with an event of its own: first what the
 * socket's bufferevent had buffered already (frames a client sent right behind its head), then
 * the descriptor. It writes the descriptor itself too: the 101 answer, then wslay's frames.
 * evhttp writes nothing meanwhile, as the request has no reply. The connection keeps its slot
 * among the listener's connections (busy and authenticated: conns.c never closes it for another).
 *
 * The end. Whatever ends a stream (the closing handshake done, the client gone, a protocol error
 * wslay answered with its close frame, the client silent past its ping, the core stopping), the
 * state becomes WS_ENDED and closed() is called from an event of the stream's own; then the
 * stream frees its request and connection (evhttp_connection_free(), which releases the slot).
 * When evhttp frees the connection first (http_free() after http_ws_stop_all()), the pending
 * request's close callback does the same at once.
 *
 * Bounds. A message from the client is at most max_message bytes (wslay closes with 1009 past
 * it: it never buffers more); bytes queued for the client at most max_queued (http_ws_send()
 * refuses past it, and the producer hears drained() once half of it went out); at most
 * WS_READ_ROUND bytes are read per loop iteration, so that one busy stream never starves the
 * others. A client that neither sends nor answers a ping for two ping periods is gone (1001): a
 * half-open TCP connection would otherwise keep its slot forever. Loop context only. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <wslay/wslay.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#define LOG_MODULE "api"
#include "http/body-conn.h"
#include "http/handler.h"
#include "http/http-internal.h"
#include "log/log.h"
#include "util/macro.h"
#include "util/utf8.h"

#define WS_READ_ROUND ((size_t)256 * 1024)

/* A stream's life. Written by ws_set() alone, which asserts the transition:
 *
 *   HANDSHAKE --the 101 written--> OPEN --a close frame sent or received--> CLOSING
 *   HANDSHAKE --http_ws_close() before the 101 was out-------------------> CLOSING
 *   HANDSHAKE, OPEN, CLOSING --the end (handshake done, the client gone, a failure)--> ENDED
 *
 * ENDED is final: closed() is due (from end_ev) and the stream is freed after it. */
enum ws_state {
    WS_HANDSHAKE,
    WS_OPEN,
    WS_CLOSING,
    WS_ENDED,
    WS__COUNT,
};

struct http_ws {
    struct http *a;
    struct http_pending pending; /* the upgraded request and its connection */
    struct http_conn *conn;      /* the body filter's state of the connection */
    int fd;
    wslay_event_context_ptr ctx;
    struct evbuffer *head; /* the 101 answer, while it is being written */
    struct event *rev, *wev, *timer, *end_ev;
    enum ws_state state; /* ws_set() alone writes it */
    struct http_ws_callbacks cb;
    void *arg;
    size_t max_queued;
    struct timeval ping;
    char protocol[64];
    unsigned code;               /* what closed() reports */
    size_t round;                /* bytes read in this loop iteration */
    bool paused;                 /* http_ws_pause() */
    bool heard;                  /* a frame came since the last ping tick */
    bool pinged;                 /* a ping went out and nothing came since */
    bool over;                   /* http_ws_send() refused a message: drained() is due at half */
    bool eof;                    /* the client's side of the connection ended, or failed */
    bool close_wait;             /* the wait for the client's close frame runs (on the timer) */
    struct http_ws *prev, *next; /* a->websockets */
};

static const bool transitions[WS__COUNT][WS__COUNT] = {
    [WS_HANDSHAKE] = {[WS_OPEN] = true, [WS_CLOSING] = true, [WS_ENDED] = true},
    [WS_OPEN] = {[WS_CLOSING] = true, [WS_ENDED] = true},
    [WS_CLOSING] = {[WS_ENDED] = true},
};

static void
ws_set(struct http_ws *ws, enum ws_state to)
{
    assert(transitions[ws->state][to]);
    ws->state = to;
}

static void ws_pump(struct http_ws *ws);

/* ---- the end --------------------------------------------------------------------------------- */

/* The code closed() reports: the client's close frame's, else the one sent, else `fallback`. */
static unsigned
end_code(const struct http_ws *ws, unsigned fallback)
{
    if (ws->ctx != NULL && wslay_event_get_close_received(ws->ctx)) {
        uint16_t c = wslay_event_get_status_code_received(ws->ctx);

        return c != 0 ? c : 1005u; /* a close frame without a code (RFC 6455 §7.1.5) */
    }
    if (ws->ctx != NULL && wslay_event_get_close_sent(ws->ctx)) {
        return wslay_event_get_status_code_sent(ws->ctx);
    }
    return fallback;
}

static void
ws_end(struct http_ws *ws, unsigned fallback)
{
    if (ws->state == WS_ENDED) {
        return;
    }
    ws->code = end_code(ws, fallback);
    ws_set(ws, WS_ENDED);
    (void)event_del(ws->rev);
    (void)event_del(ws->wev);
    (void)event_del(ws->timer);
    event_active(ws->end_ev, EV_TIMEOUT, 0);
}

/* Frees what the stream holds but its request and connection. */
static void
ws_free(struct http_ws *ws)
{
    struct http *a = ws->a;

    if (ws->prev != NULL) {
        ws->prev->next = ws->next;
    } else {
        a->websockets = ws->next;
    }
    if (ws->next != NULL) {
        ws->next->prev = ws->prev;
    }
    a->stats.websockets--;
    event_free(ws->rev);
    event_free(ws->wev);
    event_free(ws->timer);
    event_free(ws->end_ev);
    if (ws->ctx != NULL) {
        wslay_event_context_free(ws->ctx);
    }
    evbuffer_free(ws->head);
    free(ws);
}

/* end_ev: closed(), then the request and its connection go (the slot with them). */
static void
on_end(evutil_socket_t fd, short what, void *arg)
{
    struct http_ws *ws = arg;
    struct evhttp_connection *conn = ws->pending.conn;

    http_pending_log(&ws->pending);
    ws->cb.closed(ws, ws->code, ws->arg);
    http_pending_end(&ws->pending); /* the connection's close callback is not ours any more */
    ws_free(ws);
    if (conn != NULL) {
        evhttp_connection_free(conn); /* frees the request; the filter's finalizer the slot */
    }
}

/* evhttp frees the connection under a stream (http_free()): the end, at once. */
static void
on_gone(struct http_pending *p)
{
    struct http_ws *ws = container_of(p, struct http_ws, pending);

    ws_end(ws, HTTP_WS_GOING_AWAY);
    (void)event_del(ws->end_ev);
    ws->cb.closed(ws, ws->code, ws->arg);
    ws_free(ws);
}

/* ---- wslay's callbacks ----------------------------------------------------------------------- */

static ssize_t
ws_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
    struct http_ws *ws = user;
    struct evbuffer *in = bufferevent_get_input(ws->conn->sock);
    ssize_t n;

    if (ws->paused || ws->round >= WS_READ_ROUND) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    len = MIN(len, WS_READ_ROUND - ws->round);
    if (evbuffer_get_length(in) > 0) {
        n = evbuffer_remove(in, buf, len); /* what came right behind the head */
    } else {
        n = recv(ws->fd, buf, len, 0);
    }
    if (n > 0) {
        ws->round += (size_t)n;
        ws->heard = true;
        ws->pinged = false;
        return n;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    ws->eof = true; /* the client closed its side, or the connection failed */
    wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
    return -1;
}

static ssize_t
ws_send_cb(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags, void *user)
{
    struct http_ws *ws = user;
    ssize_t n = send(ws->fd, data, len, MSG_NOSIGNAL | (flags & WSLAY_MSG_MORE ? MSG_MORE : 0));

    if (n >= 0) {
        return n;
    }
    if (errno == EAGAIN || errno == EINTR) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
    } else {
        ws->eof = true;
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
    }
    return -1;
}

static void
ws_on_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *m, void *user)
{
    struct http_ws *ws = user;

    switch (m->opcode) {
    case WSLAY_TEXT_FRAME:
    case WSLAY_BINARY_FRAME:
        if (m->opcode == WSLAY_TEXT_FRAME && !utf8_valid((const char *)m->msg, m->msg_length)) {
            http_ws_close(ws, HTTP_WS_BAD_DATA, "a text message must be UTF-8");
        } else if (ws->state == WS_OPEN) { /* after our close frame, nothing is listened to */
            ws->cb.message(ws, m->opcode == WSLAY_BINARY_FRAME, m->msg, m->msg_length, ws->arg);
        }
        return;
    case WSLAY_CONNECTION_CLOSE:
        if (ws->state == WS_OPEN) {
            ws_set(ws, WS_CLOSING); /* wslay queued its answer */
        }
        return;
    default: /* a ping (wslay queued its pong) or a pong: heard, nothing else */
        return;
    }
}

/* ---- the socket ------------------------------------------------------------------------------ */

static void
on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct http_ws *ws = arg;

    ws->round = 0;
    if (wslay_event_recv(ws->ctx) < 0) {
        ws_end(ws, HTTP_WS_ABNORMAL);
        return;
    }
    if (ws->round >= WS_READ_ROUND && !ws->paused) {
        event_active(ws->rev, EV_READ, 0); /* the rest next iteration, after the others */
    }
    ws_pump(ws);
}

static void
on_writable(evutil_socket_t fd, short what, void *arg)
{
    struct http_ws *ws = arg;

    ws_pump(ws);
    if (ws->state != WS_ENDED && ws->over && http_ws_queued(ws) <= ws->max_queued / 2) {
        ws->over = false;
        if (ws->cb.drained != NULL) {
            ws->cb.drained(ws, ws->arg);
        }
    }
}

/* Writes what is due (the 101 answer, then wslay's frames), and arms the events the stream waits
 * on; ends it when nothing more can be read or written. */
static void
ws_pump(struct http_ws *ws)
{
    if (ws->state == WS_ENDED) {
        return;
    }
    if (evbuffer_get_length(ws->head) > 0) {
        if (evbuffer_write(ws->head, ws->fd) < 0 && errno != EAGAIN && errno != EINTR) {
            ws_end(ws, HTTP_WS_ABNORMAL);
            return;
        }
        if (evbuffer_get_length(ws->head) > 0) {
            (void)event_add(ws->wev, NULL);
            return;
        }
        if (ws->state == WS_HANDSHAKE) {
            ws_set(ws, WS_OPEN);
        }
    }
    if (wslay_event_want_write(ws->ctx) && wslay_event_send(ws->ctx) < 0) {
        ws_end(ws, HTTP_WS_ABNORMAL);
        return;
    }
    if (ws->eof || (!wslay_event_want_read(ws->ctx) && !wslay_event_want_write(ws->ctx))) {
        ws_end(ws, HTTP_WS_ABNORMAL);
        return;
    }
    if (wslay_event_want_write(ws->ctx)) {
        (void)event_add(ws->wev, NULL);
    }
    if (wslay_event_want_read(ws->ctx) && !ws->paused) {
        (void)event_add(ws->rev, NULL);
    } else {
        (void)event_del(ws->rev);
    }
    if (ws->state == WS_CLOSING && !ws->close_wait) {
        /* Once: the client has HTTP_WS_CLOSE_WAIT_S to answer (the timer then ends it). */
        ws->close_wait = true;
        (void)event_add(ws->timer, &(struct timeval){.tv_sec = HTTP_WS_CLOSE_WAIT_S});
    }
}

/* The ping tick while open; the end of the wait for the client's close frame while closing. */
static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct http_ws *ws = arg;

    if (ws->state == WS_CLOSING) {
        ws_end(ws, HTTP_WS_GOING_AWAY);
        return;
    }
    if (ws->heard) {
        ws->heard = false;
    } else if (!ws->pinged) {
        ws->pinged = true;
        (void)wslay_event_queue_msg(ws->ctx, &(struct wslay_event_msg){WSLAY_PING, NULL, 0});
    } else {
        http_ws_close(ws, HTTP_WS_GOING_AWAY, "no answer to a ping"); /* and the close wait */
        return;
    }
    (void)event_add(ws->timer, &ws->ping);
    ws_pump(ws);
}

/* ---- the handshake --------------------------------------------------------------------------- */

/* The values of header name (NULL: absent), joined with ", " when it is given on several lines,
 * in joined; *lines counts the lines. Every value of a head fits: the head is at most
 * HTTP_MAX_HEADERS_BYTES. */
static const char *
header_joined(struct evkeyvalq *hs, const char *name, struct buf *joined, unsigned *lines)
{
    struct evkeyval *kv;

    *lines = 0;
    TAILQ_FOREACH (kv, hs, next) {
        if (strcasecmp(kv->key, name) == 0 &&
            buf_printf(joined, "%s%s", ++*lines > 1 ? ", " : "", kv->value) < 0) {
            return NULL; /* past the bound no head reaches: refused as absent */
        }
    }
    return *lines > 0 ? joined->buf : NULL;
}

/* Judges req's handshake (http_ws_judge()). */
static int
ws_judge(struct evhttp_request *req, const struct http_ws_options *o, struct http_ws_answer *ret,
         struct err *reterr)
{
    struct evkeyvalq *hs = evhttp_request_get_input_headers(req);
    struct buf v[5];
    unsigned lines;
    struct http_ws_head h = {0};
    int r;

    for (size_t i = 0; i < ELEMENTSOF(v); i++) {
        buf_init(&v[i], (size_t)2 * HTTP_MAX_HEADERS_BYTES);
    }
    h.upgrade = header_joined(hs, "Upgrade", &v[0], &lines);
    h.connection = header_joined(hs, "Connection", &v[1], &lines);
    h.protocols = header_joined(hs, "Sec-WebSocket-Protocol", &v[2], &lines);
    h.key = header_joined(hs, "Sec-WebSocket-Key", &v[3], &h.key_lines);
    h.version = header_joined(hs, "Sec-WebSocket-Version", &v[4], &lines);
    h.origin = evhttp_find_header(hs, "Origin");
    h.host = evhttp_find_header(hs, "Host");
    r = http_ws_judge(&h, o->protocols, o->origins, ret, reterr);
    for (size_t i = 0; i < ELEMENTSOF(v); i++) {
        buf_done(&v[i]);
    }
    return r;
}

/* ---- the stream ------------------------------------------------------------------------------ */

struct http_ws *
http_ws_accept(struct http *a, struct evhttp_request *req, const struct http_ws_options *o,
               const struct http_ws_callbacks *cb, void *arg)
{
    static const struct wslay_event_callbacks wcb = {
        .recv_callback = ws_recv, .send_callback = ws_send_cb, .on_msg_recv_callback = ws_on_msg};
    struct http_conn *c = http_conn_of(a->conns, req);
    struct http_ws_answer ans;
    struct err e = {0};
    struct http_ws *ws;

    if (c == NULL || !http_conn_upgrading(c)) {
        http_reply_error(req, -EINVAL,
                         "this route takes a WebSocket handshake: a GET in HTTP/1.1 with "
                         "\"Upgrade: websocket\" and \"Connection: Upgrade\"");
        return NULL;
    }
    if (ws_judge(req, o, &ans, &e) < 0) {
        if (e.code == -EPROTONOSUPPORT) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "Sec-WebSocket-Version",
                              "13");
        }
        http_reply_error(req, e.code, "%s", e.msg);
        return NULL;
    }
    ws = xcalloc(1, sizeof(*ws));
    ws->a = a;
    ws->conn = c;
    ws->fd = bufferevent_getfd(c->sock);
    ws->cb = *cb;
    ws->arg = arg;
    ws->max_queued = o->max_queued;
    ws->ping.tv_sec = o->ping_s > 0 ? o->ping_s : HTTP_WS_PING_S;
    memcpy(ws->protocol, ans.protocol, sizeof(ws->protocol));
    if (wslay_event_context_server_init(&ws->ctx, &wcb, ws) != 0) {
        oom(); /* its one failure */
    }
    wslay_event_config_set_max_recv_msg_length(ws->ctx, o->max_message);
    ws->head = OOM_CHECK(evbuffer_new());
    if (evbuffer_add_printf(ws->head,
                            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                            "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n%s%s%s\r\n",
                            ans.accept, ans.protocol[0] ? "Sec-WebSocket-Protocol: " : "",
                            ans.protocol, ans.protocol[0] ? "\r\n" : "") < 0) {
        oom();
    }
    ws->rev = OOM_CHECK(event_new(a->base, ws->fd, EV_READ | EV_PERSIST, on_readable, ws));
    ws->wev = OOM_CHECK(event_new(a->base, ws->fd, EV_WRITE, on_writable, ws));
    ws->timer = OOM_CHECK(evtimer_new(a->base, on_timer, ws));
    ws->end_ev = OOM_CHECK(event_new(a->base, -1, 0, on_end, ws));
    ws->next = a->websockets;
    if (ws->next != NULL) {
        ws->next->prev = ws;
    }
    a->websockets = ws;
    a->stats.websockets++;
    http_pending_start(&ws->pending, req, on_gone);
    /* The socket is the stream's: its bufferevent reads nothing more (evhttp suspended it too). */
    (void)bufferevent_disable(c->sock, EV_READ);
    (void)event_add(ws->timer, &ws->ping);
    ws_pump(ws); /* the 101 answer, and frames a client sent right behind its head */
    if (ws->state != WS_ENDED) {
        event_active(ws->rev, EV_READ, 0);
    }
    return ws;
}

const char *
http_ws_protocol(const struct http_ws *ws)
{
    return ws->protocol;
}

size_t
http_ws_queued(const struct http_ws *ws)
{
    return ws->ctx != NULL ? wslay_event_get_queued_msg_length(ws->ctx) : 0;
}

int
http_ws_send(struct http_ws *ws, bool binary, const void *data, size_t n)
{
    int r;

    if (ws->state != WS_OPEN && ws->state != WS_HANDSHAKE) {
        return -EPIPE;
    }
    if (http_ws_queued(ws) >= ws->max_queued) {
        ws->over = true;
        return -ENOBUFS;
    }
    r = wslay_event_queue_msg(
        ws->ctx, &(struct wslay_event_msg){binary ? WSLAY_BINARY_FRAME : WSLAY_TEXT_FRAME,
                                           (const uint8_t *)data, n});
    if (r == WSLAY_ERR_NOMEM) {
        oom();
    }
    if (r != 0) {
        return -EPIPE; /* wslay stopped writing: the stream is ending */
    }
    event_active(ws->wev, EV_WRITE, 0); /* sent with the others queued in this iteration */
    return 0;
}

void
http_ws_pause(struct http_ws *ws, bool pause)
{
    ws->paused = pause;
    if (ws->state == WS_ENDED) {
        return;
    }
    if (pause) {
        (void)event_del(ws->rev);
    } else {
        event_active(ws->rev, EV_READ, 0); /* what wslay or the socket holds already */
    }
}

void
http_ws_close(struct http_ws *ws, unsigned code, const char *reason)
{
    size_t n = reason != NULL ? strlen(reason) : 0;

    if (ws->state != WS_OPEN && ws->state != WS_HANDSHAKE) {
        return;
    }
    /* A close frame's body is 125 bytes: the code's 2 and the reason's 123 at most. */
    n = utf8_boundary(reason != NULL ? reason : "", MIN(n, 123u));
    if (wslay_event_queue_close(ws->ctx, (uint16_t)code, (const uint8_t *)reason, n) != 0) {
        (void)wslay_event_queue_close(ws->ctx, HTTP_WS_SERVER_ERROR, NULL, 0);
    }
    ws_set(ws, WS_CLOSING);
    event_active(ws->wev, EV_WRITE, 0);
}

void
http_ws_stop_all(struct http *a)
{
    for (struct http_ws *ws = a->websockets; ws != NULL; ws = ws->next) {
        http_ws_close(ws, HTTP_WS_GOING_AWAY, "the server is stopping");
        if (ws->state == WS_CLOSING && evbuffer_get_length(ws->head) == 0) {
            (void)wslay_event_send(ws->ctx); /* once, what the socket takes now */
        }
        ws_end(ws, HTTP_WS_GOING_AWAY); /* evhttp_free() frees them next (on_gone) */
    }
}
