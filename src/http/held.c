/* Reading a held body (body.c holds it back from evhttp): the handler of a streamed route takes
 * it through http_body_read(), at the pace it can pass it on.
 *
 * While a handler runs, evhttp has disabled reading on the connection (which suspends the
 * socket's bufferevent), so the held body is read straight from the socket with an event of its
 * own: first what the socket's bufferevent had already buffered, then the descriptor, never past
 * the body's last byte. Once the body is consumed the filter goes back to reading request heads
 * (CONN_HELD -> CONN_HEAD, through http_conn_set_state()), and any pipelined request already
 * buffered is pushed through it for evhttp, which looks at it once the current reply is out. A
 * body that fails half-way leaves the connection broken (CONN_BROKEN): where its next request
 * starts is unknown. Callbacks never fire from inside the call that asked for them. Loop context
 * only. */
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "http/body-conn.h"
#include "http/http-internal.h"
#include "util/macro.h"
#include "util/parse.h"

#define READ_CHUNK 65536u

/* A held body that makes no progress this long fails, like evhttp's own read timeout. */
static const struct timeval read_timeout = {.tv_sec = HTTP_CONN_TIMEOUT_S};

/* ---- held bodies ----------------------------------------------------------------------------- */

/* The handle names the body the filter holds now (not one already read, nor the next one). */
static bool
current(const struct http_body *b)
{
    return b->conn != NULL && b->conn->state == CONN_HELD && b->conn->seq == b->seq;
}

bool
http_body_held(struct http_conns *reg, struct evhttp_request *req, struct http_body *ret)
{
    const char *marker =
        evhttp_find_header(evhttp_request_get_input_headers(req), HTTP_HELD_HEADER);

    *ret = (struct http_body){0};
    if (marker == NULL) {
        return false;
    }
    ret->conn = http_conn_of(reg, req);
    if (ret->conn == NULL || parse_u64(marker, &ret->seq) < 0 || !current(ret)) {
        *ret = (struct http_body){0};
        return false;
    }
    return true;
}

uint64_t
http_body_length(const struct http_body *b)
{
    const struct http_conn *c = b->conn;

    if (c->consumed_seq == b->seq) {
        return c->consumed_length; /* read to its end: the next body may be the current one */
    }
    return c->chunked ? c->chunk.total : c->length;
}

bool
http_body_chunked(const struct http_body *b)
{
    return b->conn->seq == b->seq && b->conn->chunked;
}

bool
http_body_unread(const struct http_body *b)
{
    return b->conn->consumed_seq != b->seq;
}

bool
http_body_awaits_continue(const struct http_body *b)
{
    const struct http_conn *c = b->conn;

    return current(b) && c->expect_continue && !c->body_started;
}

/* ---- reading a held body --------------------------------------------------------------------- */

/* "100 Continue" if the client waits for it before sending the body. */
static void
send_continue(struct http_conn *c)
{
    static const char line[] = "HTTP/1.1 100 Continue\r\n\r\n";
    int fd = bufferevent_getfd(c->sock);

    if (!c->expect_continue || c->body_started) {
        return;
    }
    c->expect_continue = false;
    /* Nothing else is queued while a handler runs (the last reply was written out, see
     * filter_out()): an idle socket takes these few bytes at once, or it is broken and the body
     * read then sees the end. */
    if (send(fd, line, sizeof(line) - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof(line) - 1)) {
        (void)shutdown(fd, SHUT_RDWR);
    }
}

static void
reader_stop(struct http_conn *c)
{
    if (c->readable != NULL) {
        (void)event_del(c->readable);
    }
}

static void
reader_end(struct http_conn *c, int r)
{
    http_body_end_cb *cb = c->on_end;

    reader_stop(c);
    c->reading = false;
    c->on_data = NULL;
    c->on_end = NULL;
    if (r == 0) {
        /* Back to heads; a pipelined request already in the socket's buffer goes to evhttp,
         * which looks at it once this request's reply is out. */
        c->consumed_seq = c->seq;
        c->consumed_length = c->chunked ? c->chunk.total : c->length;
        http_conn_set_state(c, CONN_HEAD);
        (void)bufferevent_flush(c->bev, EV_READ, BEV_FLUSH);
    } else {
        http_conn_set_state(c, CONN_BROKEN); /* where the next request starts is unknown */
    }
    if (cb != NULL) {
        cb(r, c->userdata);
    }
}

/* Reads up to n bytes of the connection: what the socket's bufferevent buffered first, then the
 * descriptor. */
static ssize_t
read_some(struct http_conn *c, char *out, size_t n)
{
    struct evbuffer *buffered = bufferevent_get_input(c->sock);

    if (evbuffer_get_length(buffered) > 0) {
        return evbuffer_remove(buffered, out, n);
    }
    return read(bufferevent_getfd(c->sock), out, n);
}

/* A read that gave nothing: wait for more (true), or the body failed (the reader is told). */
static bool
read_wait(struct http_conn *c, ssize_t n)
{
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        (void)event_add(c->readable, &read_timeout);
        return true;
    }
    reader_end(c, n == 0 ? -ECONNRESET : -errno);
    return false;
}

/* A chunked body (util/chunked.c frames it): its data goes to the reader; bytes read past its end
 * (the next request's) or past a pause go back in front of the socket's buffer. */
static void
pump_chunked(struct http_conn *c)
{
    struct evbuffer *buffered = bufferevent_get_input(c->sock);
    char chunk[READ_CHUNK];

    while (c->reading && !c->paused) {
        ssize_t n = read_some(c, chunk, sizeof(chunk));
        size_t off = 0;
        int r = 0;

        if (n <= 0) {
            (void)read_wait(c, n);
            return;
        }
        c->body_started = true;
        while (off < (size_t)n && r == 0 && c->reading && !c->paused) {
            size_t used, doff, dlen;

            r = chunked_feed(&c->chunk, chunk + off, (size_t)n - off, &used, &doff, &dlen, NULL);
            if (dlen > 0 && c->on_data != NULL) {
                c->on_data(chunk + off + doff, dlen, c->userdata);
            }
            off += used;
        }
        if (off < (size_t)n && evbuffer_prepend(buffered, chunk + off, (size_t)n - off) < 0) {
            oom();
        }
        if (r != 0) {
            reader_end(c, r == 1 ? 0 : -EPROTO);
            return;
        }
    }
    if (c->paused) {
        reader_stop(c);
    }
}

/* Moves body bytes to the reader until it pauses, the socket runs dry or the body ends. */
static void
pump(struct http_conn *c)
{
    char chunk[READ_CHUNK];

    if (c->in_pump) {
        return; /* resumed from inside on_data: the loop below goes on */
    }
    c->in_pump = true;
    if (c->chunked) {
        pump_chunked(c);
        c->in_pump = false;
        return;
    }
    while (c->reading && !c->paused && c->left > 0) {
        size_t want = (size_t)MIN(c->left, (uint64_t)sizeof(chunk));
        ssize_t n = read_some(c, chunk, want);

        if (n > 0) {
            c->body_started = true;
            c->left -= (uint64_t)n;
            if (c->on_data != NULL) {
                c->on_data(chunk, (size_t)n, c->userdata);
            }
            continue;
        }
        c->in_pump = false;
        (void)read_wait(c, n);
        return;
    }
    c->in_pump = false;
    if (c->reading && c->left == 0) {
        reader_end(c, 0);
    } else if (c->paused) {
        reader_stop(c);
    }
}

static void
on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;

    if (what & EV_TIMEOUT) {
        reader_end(c, -ETIMEDOUT); /* a client that stopped sending */
        return;
    }
    pump(c);
}

void
http_body_read(const struct http_body *b, http_body_data_cb *on_data, http_body_end_cb *on_end,
               void *userdata)
{
    struct http_conn *c = b->conn;

    if (!current(b)) {
        return;
    }
    c->on_data = on_data;
    c->on_end = on_end;
    c->userdata = userdata;
    c->reading = true;
    c->paused = false;
    send_continue(c);
    if (c->readable == NULL) {
        c->readable = OOM_CHECK(event_new(bufferevent_get_base(c->sock), bufferevent_getfd(c->sock),
                                          EV_READ, on_readable, c));
    }
    (void)event_active(c->readable, EV_READ, 0); /* never from inside this call */
}

void
http_body_pause(const struct http_body *b, bool pause)
{
    struct http_conn *c = b->conn;

    if (!current(b) || !c->reading || c->paused == pause) {
        return;
    }
    c->paused = pause;
    if (pause) {
        reader_stop(c);
    } else {
        (void)event_active(c->readable, EV_READ, 0);
    }
}

void
http_body_cancel(const struct http_body *b)
{
    struct http_conn *c = b->conn;

    if (!current(b)) {
        return;
    }
    reader_stop(c);
    c->reading = false;
    c->on_data = NULL;
    c->on_end = NULL;
}
