/* Reading a held body (body.c holds it back from evhttp): the handler of a streamed route takes
 * it through api_body_read(), at the pace it can pass it on.
 *
 * While a handler runs, evhttp has disabled reading on the connection (which suspends the
 * socket's bufferevent), so the held body is read straight from the socket with an event of its
 * own: first what the socket's bufferevent had already buffered, then the descriptor, never past
 * the body's last byte. Once the body is consumed the filter goes back to reading request heads,
 * and any pipelined request already buffered is pushed through it for evhttp, which looks at it
 * once the current reply is out. A body that fails half-way leaves the connection broken: where
 * its next request starts is unknown. Callbacks never fire from inside the call that asked for
 * them. Loop context only. */
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "api/api-internal.h"
#include "api/body-conn.h"
#include "util/macro.h"
#include "util/parse.h"

#define READ_CHUNK 65536u

/* A held body that makes no progress this long fails, like evhttp's own read timeout. */
static const struct timeval read_timeout = {.tv_sec = API_CONN_TIMEOUT_S};

/* ---- held bodies ----------------------------------------------------------------------------- */

/* The handle names the body the filter holds now (not one already read, nor the next one). */
static bool
current(const struct api_body *b)
{
    return b->conn != NULL && b->conn->state == CONN_HELD && b->conn->seq == b->seq;
}

bool
api_body_held(struct api_conns *reg, struct evhttp_request *req, struct api_body *ret)
{
    const char *marker = evhttp_find_header(evhttp_request_get_input_headers(req), API_HELD_HEADER);

    *ret = (struct api_body){0};
    if (marker == NULL) {
        return false;
    }
    ret->conn = api_conn_of(reg, req);
    if (ret->conn == NULL || parse_u64(marker, &ret->seq) < 0 || !current(ret)) {
        *ret = (struct api_body){0};
        return false;
    }
    return true;
}

uint64_t
api_body_length(const struct api_body *b)
{
    return b->conn->length;
}

bool
api_body_unread(const struct api_body *b)
{
    return b->conn->consumed_seq != b->seq;
}

bool
api_body_awaits_continue(const struct api_body *b)
{
    const struct api_conn *c = b->conn;

    return current(b) && c->expect_continue && c->left == c->length;
}

/* ---- reading a held body --------------------------------------------------------------------- */

/* "100 Continue" if the client waits for it before sending the body. */
static void
send_continue(struct api_conn *c)
{
    static const char line[] = "HTTP/1.1 100 Continue\r\n\r\n";
    int fd = bufferevent_getfd(c->sock);

    if (!c->expect_continue || c->left != c->length) {
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
reader_stop(struct api_conn *c)
{
    if (c->readable != NULL) {
        (void)event_del(c->readable);
    }
}

static void
reader_end(struct api_conn *c, int r)
{
    api_body_end_cb *cb = c->on_end;

    reader_stop(c);
    c->reading = false;
    c->on_data = NULL;
    c->on_end = NULL;
    if (r == 0) {
        /* Back to heads; a pipelined request already in the socket's buffer goes to evhttp,
         * which looks at it once this request's reply is out. */
        c->consumed_seq = c->seq;
        c->state = CONN_HEAD;
        (void)bufferevent_flush(c->bev, EV_READ, BEV_FLUSH);
    } else {
        c->state = CONN_BROKEN; /* where the next request starts is unknown */
    }
    if (cb != NULL) {
        cb(r, c->userdata);
    }
}

/* Moves body bytes to the reader until it pauses, the socket runs dry or the body ends. */
static void
pump(struct api_conn *c)
{
    struct evbuffer *buffered = bufferevent_get_input(c->sock);
    char chunk[READ_CHUNK];

    if (c->in_pump) {
        return; /* resumed from inside on_data: the loop below goes on */
    }
    c->in_pump = true;
    while (c->reading && !c->paused && c->left > 0) {
        size_t want = (size_t)MIN(c->left, (uint64_t)sizeof(chunk));
        ssize_t n;

        if (evbuffer_get_length(buffered) > 0) {
            n = evbuffer_remove(buffered, chunk, want);
        } else {
            n = read(bufferevent_getfd(c->sock), chunk, want);
        }
        if (n > 0) {
            c->left -= (uint64_t)n;
            if (c->on_data != NULL) {
                c->on_data(chunk, (size_t)n, c->userdata);
            }
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            (void)event_add(c->readable, &read_timeout);
            c->in_pump = false;
            return;
        }
        c->in_pump = false;
        reader_end(c, n == 0 ? -ECONNRESET : -errno);
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
    struct api_conn *c = arg;

    if (what & EV_TIMEOUT) {
        reader_end(c, -ETIMEDOUT); /* a client that stopped sending */
        return;
    }
    pump(c);
}

void
api_body_read(const struct api_body *b, api_body_data_cb *on_data, api_body_end_cb *on_end,
              void *userdata)
{
    struct api_conn *c = b->conn;

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
api_body_pause(const struct api_body *b, bool pause)
{
    struct api_conn *c = b->conn;

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
api_body_cancel(const struct api_body *b)
{
    struct api_conn *c = b->conn;

    if (!current(b)) {
        return;
    }
    reader_stop(c);
    c->reading = false;
    c->on_data = NULL;
    c->on_end = NULL;
}
