/* Streamed request bodies: uploads that never sit whole in daemon memory.
 *
 * evhttp (libevent 2.1) reads a request body completely before it calls the handler, and has no
 * hook between the headers and the body on the server side. So every connection gets a
 * bufferevent filter between the socket and evhttp (evhttp_set_bevcb). The filter follows the
 * request framing and passes every byte on unchanged, except for one kind of request: a PUT to
 * /v1/sessions/{id}/files/{path} with a Content-Length. Its head goes to evhttp with
 * "Content-Length: 0", and its body is held back in the socket: evhttp dispatches the request at
 * once, and the handler reads the body itself, at the pace the sandbox takes it
 * (api_body_read()).
 *
 * While a handler runs, evhttp has disabled reading on the connection (which suspends the
 * socket's bufferevent), so the held body is read straight from the socket with an event of its
 * own: first what the socket's bufferevent had already buffered, then the descriptor, never past
 * the body's last byte. Once the body is consumed the filter goes back to reading request heads,
 * and any pipelined request already buffered is pushed through it for evhttp.
 *
 * The filter is deliberately a follower, not a parser: it holds a body back only when it
 * understands the head completely (a known method, HTTP/1.0 or 1.1, exactly one Content-Length
 * of plain digits, no Transfer-Encoding, no folded or malformed header line) by the same rules
 * evhttp applies (lines end in LF or CRLF; GET, POST, PUT, DELETE, PATCH and OPTIONS may carry
 * a body, HEAD does not). On anything else it stops looking for the rest of the connection and
 * passes bytes blindly: evhttp then sees exactly what the client sent and frames it itself, so
 * the two can never disagree about where a request ends. Such an upload is read by evhttp like
 * any body, within http.max_body_bytes. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "api/api-internal.h"
#include "util/buf.h"
#include "util/hashmap.h"
#include "util/macro.h"

#define HEAD_MAX   (API_MAX_HEADERS_BYTES + 4096u) /* a longer head: blind */
#define READ_CHUNK 65536u

/* A held body that makes no progress this long fails, like evhttp's own read timeout. */
static const struct timeval read_timeout = {.tv_sec = API_CONN_TIMEOUT_S};

enum conn_state {
    CONN_HEAD,  /* reading a request head */
    CONN_BODY,  /* passing on `left` body bytes */
    CONN_HELD,  /* a held body of `left` bytes waits in the socket for its handler */
    CONN_BLIND, /* passing everything on */
};

struct api_conn {
    struct api *a;
    struct bufferevent *bev;  /* the filter evhttp uses */
    struct bufferevent *sock; /* the socket under it */
    enum conn_state state;
    struct buf head;
    size_t line_start; /* where the incomplete line of head starts */
    uint64_t left, length;
    bool expect_continue;
    struct event *kick;     /* see on_output_added() */
    struct event *writable; /* the socket takes output again (filter_out()) */
    bool write_failed;
    /* the reader of a held body */
    struct event *readable;
    api_body_data_cb *on_data; /* NULL: discard */
    api_body_end_cb *on_end;
    void *userdata;
    bool reading, paused, in_pump;
    char key[32];
};

static void
add(struct evbuffer *b, const void *data, size_t n)
{
    if (evbuffer_add(b, data, n) < 0) {
        oom();
    }
}

/* ---- heads ----------------------------------------------------------------------------------- */

struct line {
    const char *p;
    size_t n;
};

/* The next line of [*pos, end): without its LF and an optional CR before it. */
static bool
next_line(const char **pos, const char *end, struct line *ret)
{
    const char *nl = memchr(*pos, '\n', (size_t)(end - *pos));

    if (nl == NULL) {
        return false;
    }
    ret->p = *pos;
    ret->n = (size_t)(nl - *pos);
    if (ret->n > 0 && ret->p[ret->n - 1] == '\r') {
        ret->n--;
    }
    *pos = nl + 1;
    return true;
}

static bool
line_is(const struct line *l, size_t off, size_t n, const char *word)
{
    return n == strlen(word) && strncasecmp(l->p + off, word, n) == 0;
}

/* evhttp's value trimming: leading blanks, trailing whitespace. */
static struct line
header_value(const struct line *l, size_t colon)
{
    struct line v = {l->p + colon + 1, l->n - colon - 1};

    while (v.n > 0 && (v.p[0] == ' ' || v.p[0] == '\t')) {
        v.p++;
        v.n--;
    }
    while (v.n > 0 && (v.p[v.n - 1] == ' ' || v.p[v.n - 1] == '\t' || v.p[v.n - 1] == '\r')) {
        v.n--;
    }
    return v;
}

struct head_info {
    bool understood; /* false: go blind */
    bool may_have_body, is_put, is_upload_path;
    int n_length;
    uint64_t length;
    bool expect_continue;
};

static void
parse_request_line(const struct line *l, struct head_info *h)
{
    static const char *const with_body[] = {"GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"};
    static const char prefix[] = "/v1/sessions/";
    const char *sp1 = memchr(l->p, ' ', l->n);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(l->p + l->n - sp1 - 1)) : NULL;
    size_t mlen, ulen;
    const char *uri;

    if (sp1 == NULL || sp2 == NULL) {
        return;
    }
    mlen = (size_t)(sp1 - l->p);
    uri = sp1 + 1;
    ulen = (size_t)(sp2 - uri);
    if (!line_is(l, (size_t)(sp2 + 1 - l->p), (size_t)(l->p + l->n - sp2 - 1), "HTTP/1.1") &&
        !line_is(l, (size_t)(sp2 + 1 - l->p), (size_t)(l->p + l->n - sp2 - 1), "HTTP/1.0")) {
        return;
    }
    for (size_t i = 0; i < ELEMENTSOF(with_body); i++) {
        if (mlen == strlen(with_body[i]) && memcmp(l->p, with_body[i], mlen) == 0) {
            h->may_have_body = true;
            h->is_put = i == 2;
        }
    }
    if (!h->may_have_body && !(mlen == 4 && memcmp(l->p, "HEAD", 4) == 0)) {
        return; /* a method evhttp may treat otherwise */
    }
    h->is_upload_path = ulen > sizeof(prefix) - 1 && memcmp(uri, prefix, sizeof(prefix) - 1) == 0 &&
                        memmem(uri, ulen, "/files/", 7) != NULL;
    h->understood = true;
}

static void
parse_header_line(const struct line *l, struct head_info *h)
{
    const char *colon = memchr(l->p, ':', l->n);
    size_t c = colon ? (size_t)(colon - l->p) : 0;
    struct line v;

    if (l->p[0] == ' ' || l->p[0] == '\t' || colon == NULL) {
        h->understood = false; /* folded or malformed */
        return;
    }
    v = header_value(l, c);
    if (line_is(l, 0, c, "Transfer-Encoding")) {
        h->understood = false;
    } else if (line_is(l, 0, c, "Content-Length")) {
        uint64_t n = 0;

        if (v.n == 0 || v.n > 18) {
            h->understood = false;
            return;
        }
        for (size_t i = 0; i < v.n; i++) {
            if (v.p[i] < '0' || v.p[i] > '9') {
                h->understood = false;
                return;
            }
            n = n * 10 + (uint64_t)(v.p[i] - '0');
        }
        h->n_length++;
        h->length = n;
    } else if (line_is(l, 0, c, "Expect")) {
        h->expect_continue = v.n == 12 && strncasecmp(v.p, "100-continue", 12) == 0;
    }
}

/* A complete head (ending in its empty line) is in c->head: pass it on, maybe rewritten. */
static void
emit_head(struct api_conn *c, struct evbuffer *dst)
{
    const char *pos = c->head.buf, *end = c->head.buf + c->head.len;
    struct head_info h = {0};
    struct line l;
    bool first = true;

    while (next_line(&pos, end, &l) && l.n > 0) {
        if (first) {
            parse_request_line(&l, &h);
            first = false;
        } else if (h.understood) {
            parse_header_line(&l, &h);
        }
    }
    if (!h.understood || h.n_length > 1) {
        c->state = CONN_BLIND;
        add(dst, c->head.buf, c->head.len);
        return;
    }
    if (!h.may_have_body) {
        h.length = 0;
    }
    if (h.is_put && h.is_upload_path && h.length > 0) {
        /* Everything but Content-Length, which becomes 0 for evhttp. */
        pos = c->head.buf;
        while (next_line(&pos, end, &l) && l.n > 0) {
            const char *colon = memchr(l.p, ':', l.n);

            if (colon != NULL && line_is(&l, 0, (size_t)(colon - l.p), "Content-Length")) {
                continue;
            }
            add(dst, l.p, l.n);
            add(dst, "\r\n", 2);
        }
        add(dst, "Content-Length: 0\r\n\r\n", 21);
        c->state = CONN_HELD;
        c->left = c->length = h.length;
        c->expect_continue = h.expect_continue;
        return;
    }
    add(dst, c->head.buf, c->head.len);
    c->left = h.length;
    c->state = h.length > 0 ? CONN_BODY : CONN_HEAD;
}

/* Takes head bytes from src; returns true when a head was completed and passed on. */
static bool
scan_head(struct api_conn *c, struct evbuffer *src, struct evbuffer *dst)
{
    size_t room = HEAD_MAX - c->head.len;
    size_t take = MIN(evbuffer_get_length(src), room);
    size_t before = c->head.len;
    const char *pos, *end;
    struct line l;

    if (take == 0) {
        c->state = CONN_BLIND; /* longer than any head evhttp accepts */
        add(dst, c->head.buf, c->head.len);
        c->head.len = 0;
        return true;
    }
    if (buf_append(&c->head, evbuffer_pullup(src, (ev_ssize_t)take), take) < 0) {
        oom(); /* take fits in the room left */
    }
    pos = c->head.buf + c->line_start;
    end = c->head.buf + c->head.len;
    while (next_line(&pos, end, &l)) {
        if (l.n == 0) {
            if (c->line_start == 0) {
                /* An empty line before the request line: evhttp's business. */
                c->state = CONN_BLIND;
                (void)evbuffer_drain(src, take);
                add(dst, c->head.buf, c->head.len);
                c->head.len = 0;
                return true;
            }
            c->head.len = (size_t)(pos - c->head.buf);
            (void)evbuffer_drain(src, c->head.len - before);
            emit_head(c, dst);
            c->head.len = 0;
            c->line_start = 0;
            return true;
        }
        c->line_start = (size_t)(pos - c->head.buf);
    }
    (void)evbuffer_drain(src, take);
    return false;
}

static enum bufferevent_filter_result
filter_in(struct evbuffer *src, struct evbuffer *dst, ev_ssize_t limit,
          enum bufferevent_flush_mode mode, void *ctx)
{
    struct api_conn *c = ctx;
    bool moved = false;

    for (;;) {
        size_t avail = evbuffer_get_length(src), n;

        switch (c->state) {
        case CONN_BLIND:
            if (avail > 0) {
                (void)evbuffer_remove_buffer(src, dst, avail);
                moved = true;
            }
            return moved ? BEV_OK : BEV_NEED_MORE;
        case CONN_HELD:
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
                c->state = CONN_HEAD;
            }
            break;
        case CONN_HEAD:
            if (avail == 0) {
                return moved ? BEV_OK : BEV_NEED_MORE;
            }
            if (scan_head(c, src, dst)) {
                moved = true;
            }
            break;
        }
    }
}

/* ---- connections ----------------------------------------------------------------------------- */

static void
conn_key(char *key, size_t n, const struct bufferevent *bev)
{
    (void)snprintf(key, n, "%p", (const void *)bev);
}

/* ---- output ---------------------------------------------------------------------------------- */

static void on_writable(evutil_socket_t fd, short what, void *arg);

/* Replies go from the filter straight to the descriptor, never into the socket bufferevent's
 * output. evhttp learns that a reply is written when the filter's output runs empty, and then
 * may close the connection at once (Connection: close, HTTP/1.0): bytes still queued in the
 * socket bufferevent at that moment would be lost. Written here, they are in the kernel by then.
 * The filter's output is also the one backlog that stream writers measure (stream/out.c). */
static void
write_failed(struct api_conn *c, struct evbuffer *src)
{
    int fd = bufferevent_getfd(c->sock);

    c->write_failed = true;
    (void)evbuffer_drain(src, evbuffer_get_length(src));
    /* evhttp reads while it writes, to notice a close: make that read see the end. */
    (void)shutdown(fd, SHUT_RDWR);
}

static enum bufferevent_filter_result
filter_out(struct evbuffer *src, struct evbuffer *dst, ev_ssize_t limit,
           enum bufferevent_flush_mode mode, void *ctx)
{
    struct api_conn *c = ctx;
    int fd = bufferevent_getfd(c->sock);
    bool wrote = false;

    if (c->write_failed) {
        (void)evbuffer_drain(src, evbuffer_get_length(src));
        return BEV_ERROR;
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
        write_failed(c, src);
        return BEV_ERROR;
    }
    return wrote ? BEV_OK : BEV_NEED_MORE;
}

/* Also the kick (below): a filter passes output on only while writing is enabled on it, and
 * enabling does not pass on what is already there (libevent 2.1). evhttp writes a reply first and
 * enables writing after, so without a kick the reply would wait for an unrelated event. The kick
 * runs on the next loop iteration, once evhttp has enabled writing. The flush may end in evhttp
 * freeing the connection (the reply done, Connection: close): nothing may touch c->bev after. */
static void
on_writable(evutil_socket_t fd, short what, void *arg)
{
    struct api_conn *c = arg;
    bufferevent_data_cb filter_readcb = NULL;

    /* evhttp may have freed the filter since this was scheduled (its memory lives until the
     * deferred finalizer frees c too): freeing it unhooked the socket bufferevent. */
    bufferevent_getcb(c->sock, &filter_readcb, NULL, NULL, NULL);
    if (filter_readcb != NULL) {
        (void)bufferevent_flush(c->bev, EV_WRITE, BEV_NORMAL);
    }
}

static void
on_output_added(struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg)
{
    struct api_conn *c = arg;

    if (info->n_added > 0 && !(bufferevent_get_enabled(c->bev) & EV_WRITE)) {
        event_active(c->kick, EV_WRITE, 0);
    }
}

static void
conn_free(void *ctx)
{
    struct api_conn *c = ctx;

    event_free(c->kick);
    if (c->writable != NULL) {
        event_free(c->writable);
    }
    if (c->readable != NULL) {
        event_free(c->readable);
    }
    (void)hashmap_remove(c->a->conns, c->key);
    buf_done(&c->head);
    free(c);
}

struct bufferevent *
api_conn_bev_new(struct event_base *base, void *arg)
{
    struct api *a = arg;
    struct api_conn *c = xcalloc(1, sizeof(*c));

    c->a = a;
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
    c->kick = OOM_CHECK(event_new(base, -1, 0, on_writable, c));
    if (evbuffer_add_cb(bufferevent_get_output(c->bev), on_output_added, c) == NULL) {
        oom();
    }
    conn_key(c->key, sizeof(c->key), c->bev);
    hashmap_put(a->conns, c->key, c);
    return c->bev;
}

struct api_conn *
api_body_held(struct api *a, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    struct api_conn *c;
    char key[32];

    if (bev == NULL) {
        return NULL;
    }
    conn_key(key, sizeof(key), bev);
    c = hashmap_get(a->conns, key);
    return c != NULL && c->state == CONN_HELD ? c : NULL;
}

uint64_t
api_body_length(const struct api_conn *c)
{
    return c->length;
}

bool
api_body_unread(const struct api_conn *c)
{
    return c->state == CONN_HELD;
}

uint64_t
api_body_left(const struct api_conn *c)
{
    return c->state == CONN_HELD ? c->left : 0;
}

bool
api_body_awaits_continue(const struct api_conn *c)
{
    return c->state == CONN_HELD && c->expect_continue && c->left == c->length;
}

void
api_body_continue(struct api_conn *c)
{
    if (c->expect_continue && c->left == c->length) {
        static const char line[] = "HTTP/1.1 100 Continue\r\n\r\n";
        int fd = bufferevent_getfd(c->sock);

        c->expect_continue = false;
        /* Nothing else is queued while a handler runs (the last reply was written out, see
         * filter_out()): an idle socket takes these few bytes at once, or it is broken and the
         * body read then sees the end. */
        if (send(fd, line, sizeof(line) - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof(line) - 1)) {
            (void)shutdown(fd, SHUT_RDWR);
        }
    }
}

/* ---- reading a held body --------------------------------------------------------------------- */

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
        c->state = CONN_HEAD;
        (void)bufferevent_flush(c->bev, EV_READ, BEV_FLUSH);
    } else {
        c->state = CONN_BLIND; /* the connection is done for */
    }
    if (cb != NULL) {
        cb(r, c->userdata);
    }
}

static void
deliver(struct api_conn *c, const char *data, size_t n)
{
    c->left -= n;
    if (c->on_data != NULL) {
        c->on_data(data, n, c->userdata);
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
            deliver(c, chunk, (size_t)n);
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
api_body_read(struct api_conn *c, api_body_data_cb *on_data, api_body_end_cb *on_end,
              void *userdata)
{
    c->on_data = on_data;
    c->on_end = on_end;
    c->userdata = userdata;
    c->reading = true;
    c->paused = false;
    api_body_continue(c);
    if (c->readable == NULL) {
        c->readable = OOM_CHECK(event_new(bufferevent_get_base(c->sock), bufferevent_getfd(c->sock),
                                          EV_READ, on_readable, c));
    }
    (void)event_active(c->readable, EV_READ, 0); /* never from inside this call */
}

void
api_body_pause(struct api_conn *c, bool pause)
{
    if (!c->reading || c->paused == pause) {
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
api_body_cancel(struct api_conn *c)
{
    reader_stop(c);
    c->reading = false;
    c->on_data = NULL;
    c->on_end = NULL;
}
