/* Streamed request bodies: uploads that never sit whole in daemon memory.
 *
 * evhttp (libevent 2.1) reads a request body completely before it calls the handler, and has no
 * hook between the headers and the body on the server side. So every connection gets a
 * bufferevent filter between the socket and evhttp (evhttp_set_bevcb). The filter follows the
 * request framing and passes every byte on unchanged, except for one kind of request: one with a
 * Content-Length whose route says its handler streams the body (HTTP_ROUTE_STREAMED_BODY in
 * http.c's table: PUT /v1/sessions/{id}/files/{path}). Its head goes to evhttp with
 * "Content-Length: 0" and a marker header naming it (X-Sandpool-Held: N, the connection's Nth
 * held body), and its body is held back in the socket: evhttp dispatches the request at once,
 * and the handler reads the body itself, at the pace the sandbox takes it (http_body_read()).
 * Heads are passed on as they complete, so evhttp may still be answering earlier requests of
 * the connection when a held head goes by: the marker ties the held body to its request.
 *
 * The handler reads a held body through held.c (http_body_read()); once the body is consumed the
 * filter goes back to reading request heads. A connection that closes with a held body unread (the
 * request was refused before its body was wanted) may drain it for a while first, so that the
 * client, still sending, reads the answer instead of a reset: conns.c decides (authenticated
 * connections only, a bounded number at once).
 *
 * The filter is deliberately a follower, not a parser: it holds a body back only when it
 * understands the head completely by the same rules evhttp applies (head.c, the pure scanner,
 * says which), in a head of at most HEAD_MAX bytes. On anything else it stops looking for the rest
 * of the connection and passes bytes blindly: evhttp then sees exactly what the client sent and
 * judges and frames it itself, so the two never disagree about where a request ends. Such an upload
 * is read by evhttp like any body, within http.max_body_bytes.
 *
 * What the filter does with a connection's next bytes is its state (enum conn_state: heads, a
 * body followed or held, blind, broken; body-conn.h draws the diagram), written by
 * http_conn_set_state() alone, which asserts every transition.
 *
 * Output goes from the filter straight to the descriptor, asynchronously, on an event of the
 * filter's own (filter_out()); see there for why.
 *
 * Head deadline (http.header_timeout_s, slowloris): a connection must complete its first head
 * within the deadline from its accept, and each later head within it from that head's first
 * byte. A blind connection cannot see where its heads end: its deadline runs until evhttp
 * dispatches the request (http_conn_dispatched()), which then answers it with "Connection:
 * close", so that no head on it goes untimed.
 *
 * Hang-ups: while a handler holds a request without answering (a call waiting for a busy sandbox,
 * a session waking up), evhttp reads nothing from the connection (libevent 2.1 disables reading
 * once it dispatched a request) and would learn that the client went only when the answer is
 * written, so the wait, and the work it was for, would go on for nobody. The filter watches the
 * socket for the client's hang-up (EV_CLOSED: a FIN or a reset) from the dispatch until the first
 * byte of the answer is queued, and tells evhttp (an EOF event on the filter), which fails the
 * request the way it fails one whose client goes mid-stream: the handler's close callback runs
 * (http_pending's gone). Not for an upgrade (its stream reads the socket itself) nor a held body
 * (its reader sees the end). A client that half-closes its side after its request and then waits
 * for the answer is taken for gone too, as evhttp already takes it once an answer streams.
 *
 * NUL bytes: evhttp keeps header values as C strings, so "Authorization: Bearer <token>\0junk"
 * would reach the token check as "Bearer <token>". HEAD_MAX is above the largest head evhttp
 * accepts (HTTP_MAX_HEADERS_BYTES of line content plus line ends), so the filter sees every head
 * evhttp dispatches whole; one holding a NUL goes blind and its request is refused with 400. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "http/body-conn.h"
#include "http/http-internal.h"
#include "util/buf.h"
#include "util/macro.h"

/* A longer head goes blind, and evhttp refuses it (see "NUL bytes" above). */
#define HEAD_MAX (2u * HTTP_MAX_HEADERS_BYTES + 16u)

static void
add(struct evbuffer *b, const void *data, size_t n)
{
    if (evbuffer_add(b, data, n) < 0) {
        oom();
    }
}

/* ---- the connection's state ------------------------------------------------------------------ */

/* transitions[from][to]: the diagram of enum conn_state (body-conn.h). */
static const bool transitions[CONN__COUNT][CONN__COUNT] = {
    [CONN_HEAD] = {[CONN_HEAD] = true,
                   [CONN_BODY] = true,
                   [CONN_CHUNKED] = true,
                   [CONN_HELD] = true,
                   [CONN_BLIND] = true,
                   [CONN_UPGRADED] = true},
    [CONN_BODY] = {[CONN_HEAD] = true},
    [CONN_CHUNKED] = {[CONN_HEAD] = true, [CONN_BLIND] = true},
    [CONN_HELD] = {[CONN_HEAD] = true, [CONN_BROKEN] = true},
};

bool
http_conn_state_allowed(enum conn_state from, enum conn_state to)
{
    return from >= 0 && from < CONN__COUNT && to >= 0 && to < CONN__COUNT && transitions[from][to];
}

void
http_conn_set_state(struct http_conn *c, enum conn_state to)
{
    assert(http_conn_state_allowed(c->state, to));
    c->state = to;
}

/* ---- heads ----------------------------------------------------------------------------------- */

/* A complete head (ending in its empty line) is in c->head: pass it on, maybe rewritten (head.c
 * judges it). */
static void
emit_head(struct http_conn *c, struct evbuffer *dst)
{
    struct http_head h;

    c->heads++;
    http_head_parse(http_conns_limits(c->reg)->routes, c->head.buf, c->head.len, &h);
    if (h.nul) {
        c->nul_head = c->heads;
    }
    if (!h.understood) {
        http_conn_set_state(c, CONN_BLIND);
        add(dst, c->head.buf, c->head.len);
        return;
    }
    if (h.upgrade) {
        /* Passed on as it is (a GET without a body); what follows is held in the socket. */
        add(dst, c->head.buf, c->head.len);
        c->upgrade_head = c->heads;
        http_conn_set_state(c, CONN_UPGRADED);
        return;
    }
    if (h.held) {
        /* Everything but Content-Length, which becomes 0 for evhttp, and the marker. */
        struct buf rewritten = BUF_INIT(2 * HEAD_MAX + 64);

        c->seq++;
        if (http_head_rewrite(c->head.buf, c->head.len, c->seq, &rewritten) < 0) {
            oom(); /* within the bound http_head_rewrite() names */
        }
        add(dst, rewritten.buf, rewritten.len);
        buf_done(&rewritten);
        http_conn_set_state(c, CONN_HELD);
        c->left = c->length = h.length;
        c->chunked = h.chunked;
        c->body_started = false;
        chunked_init(&c->chunk, HTTP_CHUNKED_RULES);
        c->expect_continue = h.expect_continue;
        return;
    }
    add(dst, c->head.buf, c->head.len);
    c->left = h.length;
    http_conn_set_state(c, h.chunked ? CONN_CHUNKED : h.length > 0 ? CONN_BODY : CONN_HEAD);
    chunked_init(&c->chunk, HTTP_CHUNKED_RULES);
}

/* CONN_CHUNKED: passes on what src holds of the chunked body, following its framing to its end
 * (then heads again). Framing outside HTTP_CHUNKED_RULES makes the connection blind from that
 * byte on: evhttp frames the rest itself. */
static void
pass_chunked(struct http_conn *c, struct evbuffer *src, struct evbuffer *dst)
{
    char tmp[4096];
    size_t avail = evbuffer_get_length(src), got, off = 0;
    int r = 0;

    if (c->chunk.state == CHUNKED_DATA) { /* data is not looked at */
        size_t n = (size_t)MIN((uint64_t)avail, c->chunk.left);

        chunked_skip(&c->chunk, n);
        (void)evbuffer_remove_buffer(src, dst, n);
        return;
    }
    got = (size_t)evbuffer_copyout(src, tmp, sizeof(tmp));
    while (off < got && r == 0 && c->chunk.state != CHUNKED_DATA) {
        size_t used, doff, dlen;

        r = chunked_feed(&c->chunk, tmp + off, got - off, &used, &doff, &dlen, NULL);
        off += used;
    }
    (void)evbuffer_remove_buffer(src, dst, off);
    if (r == 1) {
        http_conn_set_state(c, CONN_HEAD);
    } else if (r < 0) {
        http_conn_set_state(c, CONN_BLIND);
    }
}

/* Starts the head deadline unless it runs already (from the accept, for the first head). */
static void
head_deadline(struct http_conn *c)
{
    if (c->head_timeout.tv_sec > 0 && !evtimer_pending(c->head_timer, NULL)) {
        (void)event_add(c->head_timer, &c->head_timeout);
    }
}

/* Takes head bytes from src; returns true when a head was completed and passed on. */
static bool
scan_head(struct http_conn *c, struct evbuffer *src, struct evbuffer *dst)
{
    size_t room = HEAD_MAX - c->head.len;
    size_t take = MIN(evbuffer_get_length(src), room);
    size_t before = c->head.len, head_len = 0;

    if (before == 0 && take > 0) {
        head_deadline(c);
    }
    if (take == 0) {
        http_conn_set_state(
            c, CONN_BLIND); /* a long head: evhttp decides what it is; the deadline runs */
        add(dst, c->head.buf, c->head.len);
        c->head.len = 0;
        return true;
    }
    if (buf_append(&c->head, evbuffer_pullup(src, (ev_ssize_t)take), take) < 0) {
        oom(); /* take fits in the room left */
    }
    switch (http_head_find_end(c->head.buf, c->head.len, &c->line_start, &head_len)) {
    case HTTP_HEAD_EMPTY_FIRST:
        /* An empty line before the request line: evhttp's business. The deadline runs on for
         * the head that follows. */
        http_conn_set_state(c, CONN_BLIND);
        (void)evbuffer_drain(src, take);
        add(dst, c->head.buf, c->head.len);
        c->head.len = 0;
        return true;
    case HTTP_HEAD_COMPLETE:
        (void)event_del(c->head_timer);
        c->head.len = head_len;
        (void)evbuffer_drain(src, c->head.len - before);
        emit_head(c, dst);
        c->head.len = 0;
        c->line_start = 0;
        return true;
    case HTTP_HEAD_MORE:
        break;
    }
    (void)evbuffer_drain(src, take);
    return false;
}

static enum bufferevent_filter_result
filter_in(struct evbuffer *src, struct evbuffer *dst, ev_ssize_t limit,
          enum bufferevent_flush_mode mode, void *ctx)
{
    struct http_conn *c = ctx;
    bool moved = false;

    /* A connection refused or closed for another passes nothing on: its socket is shut down
     * and evhttp frees it next, whatever it already sent. */
    if (!http_conns_admit(c->entry) || http_conns_closing(c->entry)) {
        (void)evbuffer_drain(src, evbuffer_get_length(src));
        return BEV_NEED_MORE;
    }
    for (;;) {
        size_t avail = evbuffer_get_length(src), n;

        switch (c->state) {
        case CONN_BLIND:
            if (avail > 0) {
                (void)evbuffer_remove_buffer(src, dst, avail);
                moved = true;
            }
            return moved ? BEV_OK : BEV_NEED_MORE;
        case CONN_BROKEN:
            (void)evbuffer_drain(src, avail); /* the rest of a body nobody reads */
            return moved ? BEV_OK : BEV_NEED_MORE;
        case CONN_HELD:
        case CONN_UPGRADED:
            return moved ? BEV_OK : BEV_NEED_MORE;
        case CONN_BODY:
            n = (size_t)MIN((uint64_t)avail, c->left);
            if (n == 0) {
                return moved ? BEV_OK : BEV_NEED_MORE;
            }
            (void)evbuffer_remove_buffer(src, dst, n);
            c->left -= n;
            moved = true;
            if (c->left == 0) {
                http_conn_set_state(c, CONN_HEAD);
            }
            break;
        case CONN_CHUNKED:
            if (avail == 0) {
                return moved ? BEV_OK : BEV_NEED_MORE;
            }
            pass_chunked(c, src, dst);
            moved = true;
            break;
        case CONN_HEAD:
            if (avail == 0) {
                return moved ? BEV_OK : BEV_NEED_MORE;
            }
            if (scan_head(c, src, dst)) {
                moved = true;
            }
            break;
        case CONN__COUNT: /* never a state: http_conn_set_state() asserts */
            abort();
        }
    }
}

/* ---- output ---------------------------------------------------------------------------------- */

static void on_writable(evutil_socket_t fd, short what, void *arg);

/* Replies go from the filter straight to the descriptor, never into the socket bufferevent's
 * output, and only from the filter's own events (c->flushing), never from inside the call that
 * queued them:
 * - evhttp learns that a reply is written when the filter's output runs empty, and may then close
 *   the connection at once (Connection: close, HTTP/1.0): bytes still queued in the socket
 *   bufferevent at that moment would be lost. Written here, they are in the kernel by then.
 * - evhttp queues bytes first and sets the callback that expects their completion after (reply
 *   chunks, "100 Continue"), as a socket bufferevent never completes a write synchronously.
 * The filter's output is also the one backlog stream writers measure (stream/out.c). */
static enum bufferevent_filter_result
filter_out(struct evbuffer *src, struct evbuffer *dst, ev_ssize_t limit,
           enum bufferevent_flush_mode mode, void *ctx)
{
    struct http_conn *c = ctx;
    int fd = bufferevent_getfd(c->sock);
    bool wrote = false;

    if (c->write_failed) {
        (void)evbuffer_drain(src, evbuffer_get_length(src));
        return BEV_ERROR;
    }
    if (!c->flushing) {
        (void)event_active(c->kick, EV_WRITE, 0);
        return BEV_NEED_MORE;
    }
    while (evbuffer_get_length(src) > 0) {
        int n = evbuffer_write(src, fd);

        if (n > 0) {
            wrote = true;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (c->writable == NULL) {
                c->writable = OOM_CHECK(
                    event_new(bufferevent_get_base(c->sock), fd, EV_WRITE, on_writable, c));
            }
            (void)event_add(c->writable, NULL); /* evhttp's write timeout bounds the wait */
            break;
        }
        c->write_failed = true;
        (void)evbuffer_drain(src, evbuffer_get_length(src));
        /* evhttp reads while it writes, to notice a close: make that read see the end. */
        (void)shutdown(fd, SHUT_RDWR);
        return BEV_ERROR;
    }
    return wrote ? BEV_OK : BEV_NEED_MORE;
}

/* The kick and the writable event. A filter passes output on only while writing is enabled on
 * it, and enabling does not pass on what is already there (libevent 2.1); evhttp enables writing
 * right after it queues a reply, so by the next loop iteration it is. */
static void
on_writable(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    bufferevent_data_cb filter_readcb = NULL;

    /* evhttp may have freed the filter since this was scheduled (c lives until the deferred
     * finalizer): freeing it unhooked the socket bufferevent. */
    bufferevent_getcb(c->sock, &filter_readcb, NULL, NULL, NULL);
    if (filter_readcb == NULL) {
        return;
    }
    /* The flush holds a reference: evhttp may free the connection inside it (reply done,
     * Connection: close), and c stays valid until the finalizer. */
    c->flushing = true;
    (void)bufferevent_flush(c->bev, EV_WRITE, BEV_NORMAL);
    c->flushing = false;
}

static void
on_output_added(struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg)
{
    struct http_conn *c = arg;

    if (info->n_added > 0) {
        (void)event_active(c->kick, EV_WRITE, 0);
        if (c->waiting) {
            c->waiting = false; /* the answer began: evhttp watches the connection from now on */
            (void)event_del(c->hangup);
        }
    }
}

/* The client hung up while its request waited (see "Hang-ups"): evhttp hears an EOF, fails the
 * request and frees the connection. */
static void
on_hangup(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;

    if (c->waiting) {
        c->waiting = false;
        bufferevent_trigger_event(c->bev, BEV_EVENT_READING | BEV_EVENT_EOF, 0);
    }
}

/* ---- connections ----------------------------------------------------------------------------- */

/* A client that trickles a request head (slowloris), or sends none at all: the connection ends.
 * Shutting the socket down makes the read evhttp waits on see the end, and evhttp frees the
 * connection. The timer only runs while a head is due (see "Head deadline"). */
static void
on_head_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;

    if (c->state == CONN_HEAD || c->state == CONN_BLIND) {
        (void)shutdown(bufferevent_getfd(c->sock), SHUT_RDWR);
    }
}

bool
http_conn_upgrading(const struct http_conn *c)
{
    return c->state == CONN_UPGRADED && c->dispatched == c->upgrade_head;
}

struct http_conn *
http_conn_of(struct http_conns *reg, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;

    return bev != NULL ? http_conns_find(reg, bev) : NULL;
}

/* The reply of a request was sent whole: its connection is idle again (it may be freed right
 * after, for "Connection: close", which releases its slot). */
static void
on_request_complete(struct evhttp_request *req, void *arg)
{
    struct http_conn *c = arg;
    enum http_conn_standing st = http_conn_standing(c->entry);

    http_conns_set(c->entry, st == HTTP_CONN_AUTH_BUSY ? HTTP_CONN_AUTH_IDLE : HTTP_CONN_ANON_IDLE);
    if (c->waiting) {
        c->waiting = false;
        (void)event_del(c->hangup);
    }
}

bool
http_conn_dispatched(struct http_conns *reg, struct evhttp_request *req)
{
    struct http_conn *c = http_conn_of(reg, req);
    enum http_conn_standing st;

    if (c == NULL) {
        return true;
    }
    (void)event_del(c->head_timer);
    st = http_conn_standing(c->entry);
    http_conns_set(c->entry, st == HTTP_CONN_AUTH_IDLE ? HTTP_CONN_AUTH_BUSY : HTTP_CONN_ANON_BUSY);
    evhttp_request_set_on_complete_cb(req, on_request_complete, c);
    c->dispatched++;
    if (c->state != CONN_HELD && !http_conn_upgrading(c)) {
        struct event_base *base = bufferevent_get_base(c->sock);

        if (c->hangup == NULL && (event_base_get_features(base) & EV_FEATURE_EARLY_CLOSE)) {
            c->hangup =
                OOM_CHECK(event_new(base, bufferevent_getfd(c->sock), EV_CLOSED, on_hangup, c));
        }
        if (c->hangup != NULL) {
            c->waiting = true;
            (void)event_add(c->hangup, NULL);
        }
    }
    /* A blind connection's heads are untimed after this one; an anonymous connection gets one
     * answer (http_conn_authenticated() keeps it open): a client that pipelines requests and
     * reads no reply holds its slot for one small reply at most (conns.c, HTTP_ANON_BUSY_MS); an
     * upgrade request that gets a reply, not a stream, ends its connection (what follows its head
     * is no HTTP). */
    if (c->state == CONN_BLIND || st == HTTP_CONN_ANON_IDLE || http_conn_upgrading(c)) {
        http_reply_close(req);
    }
    return c->nul_head == 0 || c->dispatched != c->nul_head;
}

void
http_conn_authenticated(struct http_conns *reg, struct evhttp_request *req)
{
    struct http_conn *c = http_conn_of(reg, req);

    if (c != NULL) {
        enum http_conn_standing st = http_conn_standing(c->entry);

        if (st == HTTP_CONN_ANON_BUSY || st == HTTP_CONN_ANON_IDLE) {
            http_conns_set(c->entry,
                           st == HTTP_CONN_ANON_BUSY ? HTTP_CONN_AUTH_BUSY : HTTP_CONN_AUTH_IDLE);
            /* The close http_conn_dispatched() set for an anonymous connection, unless another
             * reason for it holds: a blind connection (a NUL head made it one), a held body
             * (http.c). */
            if (c->state != CONN_BLIND && !http_conn_upgrading(c) &&
                evhttp_find_header(evhttp_request_get_input_headers(req), HTTP_HELD_HEADER) ==
                    NULL) {
                (void)evhttp_remove_header(evhttp_request_get_output_headers(req), "Connection");
            }
        }
    }
}

/* The filter's context destructor: the connection is gone (libevent's deferred finalizer). */
static void
conn_free(void *ctx)
{
    struct http_conn *c = ctx;

    http_conns_release(c->entry, c->state == CONN_HELD && (c->chunked || c->left > 0));
    event_free(c->head_timer);
    event_free(c->kick);
    if (c->hangup != NULL) {
        event_free(c->hangup);
    }
    if (c->writable != NULL) {
        event_free(c->writable);
    }
    if (c->readable != NULL) {
        event_free(c->readable);
    }
    buf_done(&c->head);
    free(c);
}

struct bufferevent *
http_conn_bev_new(struct event_base *base, void *arg)
{
    struct http_conns *reg = arg;
    struct http_conn *c = xcalloc(1, sizeof(*c));

    c->reg = reg;
    c->head_timeout.tv_sec = (time_t)http_conns_limits(reg)->head_timeout_s;
    buf_init(&c->head, HEAD_MAX);
    c->sock = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (c->sock == NULL) {
        oom();
    }
    c->bev =
        bufferevent_filter_new(c->sock, filter_in, filter_out, BEV_OPT_CLOSE_ON_FREE, conn_free, c);
    if (c->bev == NULL) {
        oom();
    }
    /* Nothing is ever written through the socket bufferevent: its write events would only run
     * the filter's write path without a reference held. */
    (void)bufferevent_disable(c->sock, EV_WRITE);
    c->head_timer = OOM_CHECK(evtimer_new(base, on_head_timeout, c));
    head_deadline(c); /* the first head is due from the accept */
    c->kick = OOM_CHECK(event_new(base, -1, 0, on_writable, c));
    if (evbuffer_add_cb(bufferevent_get_output(c->bev), on_output_added, c) == NULL) {
        oom();
    }
    c->entry = http_conns_add(reg, c->sock, c->bev, c);
    return c->bev;
}
