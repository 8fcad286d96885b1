/* Hijacked engine streams; see hijack.h for the contract.
 *
 * States (one enum, written by hijack_set() alone, which asserts the transition): CONNECTING ->
 * HEADERS (request sent, waiting for the status line) -> STREAM (frames in, stdin out) -> CLOSED;
 * or HEADERS -> ERRBODY (a 4xx/5xx with a JSON body) -> CLOSED; any state but CLOSED may close.
 * CONNECTING (0, from xcalloc) is the first: no transition.
 *
 * Lifetime: the user owns the handle. `depth` counts user callbacks on the stack; a free requested
 * inside one only marks `free_pending`, and the outermost frame frees once the callback returns
 * (hiredis ENTERED/DELETED). Every path that calls out re-checks `closed`/`free_pending` before
 * touching the stream again. The bufferevent is freed as soon as the stream closes, so a closed
 * handle holds no file descriptor while the user decides when to free it. */
#include "hijack.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "docker/api.h"
#include "docker/client.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/parse.h"
#include "util/time.h"

#define MAX_HEADER_BYTES  (16u << 10)
#define MAX_ERRBODY_BYTES (64u << 10)
#define DEFAULT_MAX_QUEUE (4u << 20)
#define READ_CHUNK        (64u << 10)

enum hijack_state {
    ST_CONNECTING,
    ST_HEADERS,
    ST_STREAM,
    ST_ERRBODY,
    ST_CLOSED,
    ST__COUNT,
};

/* transitions[from][to]: whether from may go to to. */
static const bool transitions[ST__COUNT][ST__COUNT] = {
    [ST_CONNECTING] = {[ST_HEADERS] = true, [ST_CLOSED] = true},
    [ST_HEADERS] = {[ST_STREAM] = true, [ST_ERRBODY] = true, [ST_CLOSED] = true},
    [ST_STREAM] = {[ST_CLOSED] = true},
    [ST_ERRBODY] = {[ST_CLOSED] = true},
};

struct docker_hijack {
    struct event_base *base; /* borrowed */
    struct bufferevent *bev;
    struct event *kick;       /* re-runs the reader after a resume */
    struct evbuffer *pending; /* stdin written before OPEN */
    enum hijack_state state;
    struct docker_frames frames;
    long status;
    size_t errbody_len;     /* Content-Length of an error answer, or the cap when it has none */
    struct event *deadline; /* the handshake deadline: one timer, not a per-byte timeout */
    struct buf errbody;
    size_t max_queued;
    unsigned timeout_ms;
    bool shutdown_wanted, shutdown_done, paused, want_drained;
    int depth;
    bool free_pending;
    docker_hijack_data_cb *on_data;
    docker_hijack_event_cb *on_event;
    void *userdata;
};

static void hijack_destroy(struct docker_hijack *h);

static void
hijack_set(struct docker_hijack *h, enum hijack_state to)
{
    assert(transitions[h->state][to]);
    h->state = to;
}

/* Calls the event callback; returns false when the handle must not be touched any more. */
static bool
emit(struct docker_hijack *h, enum docker_hijack_event ev, int r, const struct err *e)
{
    h->depth++;
    h->on_event(h, ev, r, e, h->userdata);
    h->depth--;
    if (h->free_pending && h->depth == 0) {
        hijack_destroy(h);
        return false;
    }
    return !h->free_pending;
}

/* Ends the stream once: drops the connection, then reports CLOSED. */
static void
hijack_close(struct docker_hijack *h, int r, const struct err *e)
{
    if (h->state == ST_CLOSED) {
        return;
    }
    hijack_set(h, ST_CLOSED);
    if (h->bev != NULL) {
        bufferevent_free(h->bev); /* safe inside its own callbacks: libevent refcounts it */
        h->bev = NULL;
    }
    (void)event_del(h->kick);
    (void)event_del(h->deadline);
    (void)emit(h, DOCKER_HIJACK_CLOSED, r, e);
}

static void
close_errno(struct docker_hijack *h, int r, const char *what)
{
    struct err e;

    (void)err_set(&e, r, "%s: %s", what, strerror(-r));
    hijack_close(h, r, &e);
}

static void
maybe_shutdown(struct docker_hijack *h)
{
    if (h->state == ST_STREAM && h->shutdown_wanted && !h->shutdown_done &&
        evbuffer_get_length(bufferevent_get_output(h->bev)) == 0) {
        h->shutdown_done = true;
        (void)shutdown(bufferevent_getfd(h->bev), SHUT_WR);
    }
}

static int
on_frame_data(enum docker_stream stream, const char *data, size_t n, void *userdata)
{
    struct docker_hijack *h = userdata;
    int r;

    h->depth++;
    r = h->on_data(h, stream, data, n, h->userdata);
    h->depth--;
    if (h->free_pending || h->state == ST_CLOSED) {
        return -ECANCELED; /* unwinds the parser; the caller notices free_pending */
    }
    return r;
}

/* Feeds buffered input to the frame parser until it is empty, paused, closed or freed. */
static void
read_stream(struct docker_hijack *h)
{
    struct evbuffer *in = bufferevent_get_input(h->bev);
    char chunk[READ_CHUNK];

    while (!h->paused && evbuffer_get_length(in) > 0) {
        int n = evbuffer_remove(in, chunk, sizeof(chunk));
        int r;

        if (n <= 0) {
            break;
        }
        r = docker_frames_feed(&h->frames, chunk, (size_t)n, on_frame_data, h);
        if (h->free_pending) {
            if (h->depth == 0) {
                hijack_destroy(h);
            }
            return;
        }
        if (h->state == ST_CLOSED) {
            return;
        }
        if (r < 0) {
            struct err e;

            (void)err_set(&e, r, "%s",
                          r == -EPROTO ? "engine stream is not multiplexed framing"
                                       : "stream consumer stopped");
            hijack_close(h, r, &e);
            return;
        }
        in = bufferevent_get_input(h->bev);
    }
}

/* Parses the status line and the Content-Length of a complete header block. */
static void
parse_headers(struct docker_hijack *h, const char *hdr, size_t n)
{
    uint64_t v;
    const char *line, *end = hdr + n;

    h->status = 0;
    if (n > 12 && memcmp(hdr, "HTTP/1.", 7) == 0 && parse_u64n(hdr + 9, 3, &v) == 0) {
        h->status = (long)v;
    }
    /* Without Content-Length the body runs to EOF: read up to the cap. */
    h->errbody_len = MAX_ERRBODY_BYTES;
    for (line = hdr; line < end;) {
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        size_t len = eol ? (size_t)(eol - line) : (size_t)(end - line);
        const char *colon = memchr(line, ':', len);

        if (colon != NULL && strn_case_eq(line, (size_t)(colon - line), "Content-Length")) {
            const char *val = colon + 1;
            size_t vlen = len - (size_t)(val - line);

            while (vlen > 0 && *val == ' ') {
                val++;
                vlen--;
            }
            while (vlen > 0 && (val[vlen - 1] == '\r' || val[vlen - 1] == ' ')) {
                vlen--;
            }
            if (parse_u64n(val, vlen, &v) == 0) {
                h->errbody_len = (size_t)MIN(v, (uint64_t)MAX_ERRBODY_BYTES);
            }
        }
        line += len + 1;
    }
}

static void
finish_errbody(struct docker_hijack *h)
{
    struct err e = {0};
    int r = docker_status_to_errno(h->status, h->errbody.buf, h->errbody.len, &e);

    if (r == 0) {
        r = err_set(&e, -EPROTO, "engine answered %ld instead of upgrading", h->status);
    }
    hijack_close(h, r, &e);
}

static void
read_errbody(struct docker_hijack *h)
{
    struct evbuffer *in = bufferevent_get_input(h->bev);
    size_t want = h->errbody_len > h->errbody.len ? h->errbody_len - h->errbody.len : 0;
    size_t n = MIN(want, evbuffer_get_length(in));
    char *p;

    if (n > 0) {
        p = (char *)evbuffer_pullup(in, (ssize_t)n);
        if (buf_append(&h->errbody, p, n) < 0) {
            n = 0; /* cannot happen: errbody_len is capped at the buffer max */
        }
        (void)evbuffer_drain(in, n);
    }
    if (h->errbody.len >= h->errbody_len) {
        finish_errbody(h);
    }
}

/* Moves stdin held back before OPEN into the connection. */
static void
flush_pending(struct docker_hijack *h)
{
    if (evbuffer_get_length(h->pending) > 0) {
        h->want_drained = true;
        (void)bufferevent_write_buffer(h->bev, h->pending);
    }
    maybe_shutdown(h);
}

static void
read_headers(struct docker_hijack *h)
{
    struct evbuffer *in = bufferevent_get_input(h->bev);
    struct evbuffer_ptr at = evbuffer_search(in, "\r\n\r\n", 4, NULL);
    char hdr[MAX_HEADER_BYTES];
    size_t n;

    if (at.pos < 0) {
        if (evbuffer_get_length(in) > MAX_HEADER_BYTES) {
            close_errno(h, -EPROTO, "engine sent an over-long header block");
        }
        return;
    }
    n = (size_t)at.pos + 4;
    if (n > sizeof(hdr)) {
        close_errno(h, -EPROTO, "engine sent an over-long header block");
        return;
    }
    (void)evbuffer_remove(in, hdr, n);
    parse_headers(h, hdr, n);
    if (h->status == 101 || h->status == 200) {
        hijack_set(h, ST_STREAM);
        (void)event_del(h->deadline);
        flush_pending(h);
        if (!emit(h, DOCKER_HIJACK_OPEN, 0, NULL) || h->state != ST_STREAM) {
            return;
        }
        read_stream(h); /* bytes that came with the headers are stream data */
        return;
    }
    hijack_set(h, ST_ERRBODY);
    read_errbody(h);
}

static void
on_read(struct bufferevent *bev, void *arg)
{
    struct docker_hijack *h = arg;

    if (h->state == ST_CONNECTING) {
        hijack_set(h, ST_HEADERS); /* data can be reported before BEV_EVENT_CONNECTED */
    }
    switch (h->state) {
    case ST_HEADERS:
        read_headers(h);
        break;
    case ST_STREAM:
        read_stream(h);
        break;
    case ST_ERRBODY:
        read_errbody(h);
        break;
    case ST_CONNECTING:
    case ST_CLOSED:
    case ST__COUNT:
        break;
    }
}

static void
on_write(struct bufferevent *bev, void *arg)
{
    struct docker_hijack *h = arg;

    if (h->state != ST_STREAM) {
        return;
    }
    maybe_shutdown(h);
    if (h->want_drained) {
        h->want_drained = false;
        (void)emit(h, DOCKER_HIJACK_DRAINED, 0, NULL);
    }
}

static void
on_bev_event(struct bufferevent *bev, short what, void *arg)
{
    struct docker_hijack *h = arg;

    if (what & BEV_EVENT_CONNECTED) {
        if (h->state == ST_CONNECTING) { /* not when on_read saw the answer first */
            hijack_set(h, ST_HEADERS);
        }
        return;
    }
    if (what & BEV_EVENT_EOF) {
        if ((h->state == ST_CONNECTING || h->state == ST_HEADERS) &&
            evbuffer_get_length(bufferevent_get_input(bev)) > 0) {
            on_read(bev, h); /* an answer that arrived together with the EOF */
            if (h->free_pending || h->state == ST_CLOSED) {
                return;
            }
        }
        if (h->state == ST_STREAM) {
            read_stream(h);
            if (h->free_pending || h->state == ST_CLOSED) {
                return;
            }
            int r = docker_frames_finish(&h->frames);

            if (r < 0) {
                close_errno(h, r, "engine stream ended inside a frame");
            } else {
                hijack_close(h, 0, NULL);
            }
        } else if (h->state == ST_ERRBODY) {
            finish_errbody(h);
        } else {
            close_errno(h, -ECONNRESET, "engine closed the connection before answering");
        }
        return;
    }
    if (what & BEV_EVENT_ERROR) {
        int e = EVUTIL_SOCKET_ERROR();

        close_errno(h, e > 0 ? -e : -ECONNRESET,
                    h->state == ST_CONNECTING ? "cannot connect to the engine socket"
                                              : "engine stream failed");
    }
}

/* The status line did not arrive in time (a peer that trickles bytes does not extend it). */
static void
on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct docker_hijack *h = arg;
    struct err e;

    (void)err_set(&e, -ETIMEDOUT, "engine did not answer the %s request within %u ms",
                  h->state == ST_CONNECTING ? "connect" : "stream", h->timeout_ms);
    hijack_close(h, -ETIMEDOUT, &e); /* may free h (a free requested by the callback) */
}

static void
on_kick(evutil_socket_t fd, short what, void *arg)
{
    struct docker_hijack *h = arg;

    if (h->state == ST_STREAM && !h->paused) {
        read_stream(h);
    }
}

static void
hijack_destroy(struct docker_hijack *h)
{
    if (h->bev != NULL) {
        bufferevent_free(h->bev);
    }
    event_free(h->kick);
    if (h->deadline != NULL) {
        event_free(h->deadline);
    }
    evbuffer_free(h->pending);
    buf_done(&h->errbody);
    free(h);
}

int
docker_hijack_new(struct event_base *base, const struct docker_hijack_opts *o,
                  struct docker_hijack **ret, struct err *reterr)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t body_len = o->body ? strlen(o->body) : 0;
    struct docker_hijack *h;
    struct timeval tv;

    if (strlen(o->socket_path) >= sizeof(sa.sun_path)) {
        return err_set(reterr, -ENAMETOOLONG, "engine socket path is too long");
    }
    memcpy(sa.sun_path, o->socket_path, strlen(o->socket_path) + 1);

    h = xcalloc(1, sizeof(*h));
    h->base = base;
    h->on_data = o->on_data;
    h->on_event = o->on_event;
    h->userdata = o->userdata;
    h->max_queued = o->max_queued ? o->max_queued : DEFAULT_MAX_QUEUE;
    h->timeout_ms = o->handshake_timeout_ms;
    docker_frames_init(&h->frames);
    buf_init(&h->errbody, MAX_ERRBODY_BYTES);
    h->pending = OOM_CHECK(evbuffer_new());
    h->kick = OOM_CHECK(event_new(base, -1, 0, on_kick, h));
    h->bev = OOM_CHECK(bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE));
    bufferevent_setcb(h->bev, on_read, on_write, on_bev_event, h);
    h->deadline = OOM_CHECK(evtimer_new(base, on_deadline, h));
    time_tv_from_ms(&tv, o->handshake_timeout_ms);
    (void)evtimer_add(h->deadline, &tv);
    if (bufferevent_enable(h->bev, EV_READ | EV_WRITE) < 0 ||
        bufferevent_socket_connect(h->bev, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno ? errno : ECONNREFUSED;

        hijack_destroy(h);
        return err_set(reterr, -e, "cannot connect to the engine socket '%s': %s", o->socket_path,
                       strerror(e));
    }
    (void)evutil_make_socket_closeonexec(bufferevent_getfd(h->bev));
    /* Host is mandatory for Go's HTTP/1.1 server; Connection+Upgrade for Podman
     * (docs/internals/engine.md §4). */
    if (evbuffer_add_printf(bufferevent_get_output(h->bev),
                            "POST %s HTTP/1.1\r\n"
                            "Host: docker\r\n"
                            "User-Agent: sandpool\r\n"
                            "Content-Type: application/json\r\n"
                            "Content-Length: %zu\r\n"
                            "Connection: Upgrade\r\n"
                            "Upgrade: tcp\r\n"
                            "\r\n",
                            o->path, body_len) < 0 ||
        (body_len > 0 && bufferevent_write(h->bev, o->body, body_len) < 0)) {
        oom();
    }
    *ret = h;
    return 0;
}

struct docker_hijack *
docker_hijack_free(struct docker_hijack *h)
{
    if (h == NULL) {
        return NULL;
    }
    if (h->depth > 0) {
        h->free_pending = true;
        if (h->bev != NULL) {
            bufferevent_disable(h->bev, EV_READ | EV_WRITE);
        }
        return NULL;
    }
    hijack_destroy(h);
    return NULL;
}

size_t
docker_hijack_queued(const struct docker_hijack *h)
{
    size_t n = evbuffer_get_length(h->pending);

    if (h->bev != NULL) {
        n += evbuffer_get_length(bufferevent_get_output(h->bev));
    }
    return n;
}

int
docker_hijack_write(struct docker_hijack *h, const void *data, size_t n)
{
    if (h->state == ST_CLOSED || h->state == ST_ERRBODY || h->shutdown_wanted || h->free_pending) {
        return -EPIPE;
    }
    if (n > h->max_queued || docker_hijack_queued(h) > h->max_queued - n) {
        return -ENOBUFS;
    }
    if (h->state == ST_STREAM) {
        h->want_drained = true;
        return bufferevent_write(h->bev, data, n) < 0 ? -ENOMEM : 0;
    }
    return evbuffer_add(h->pending, data, n) < 0 ? -ENOMEM : 0;
}

void
docker_hijack_shutdown_write(struct docker_hijack *h)
{
    if (h->state == ST_CLOSED || h->shutdown_wanted) {
        return;
    }
    h->shutdown_wanted = true;
    if (h->state == ST_STREAM) {
        maybe_shutdown(h);
    }
}

void
docker_hijack_pause_read(struct docker_hijack *h, bool pause)
{
    if (h->state == ST_CLOSED || h->paused == pause) {
        return;
    }
    h->paused = pause;
    if (pause) {
        bufferevent_disable(h->bev, EV_READ);
        return;
    }
    bufferevent_enable(h->bev, EV_READ);
    if (evbuffer_get_length(bufferevent_get_input(h->bev)) > 0) {
        event_active(h->kick, EV_TIMEOUT, 0); /* deliver what is already buffered */
    }
}

bool
docker_hijack_is_open(const struct docker_hijack *h)
{
    return h->state == ST_STREAM;
}

static int
hijack_via(struct docker_client *c, const char *what, const char *id, const char *suffix,
           const char *body, struct docker_hijack_opts *o, struct docker_hijack **ret,
           struct err *reterr)
{
    char path[256];

    if (!docker_valid_id(id) || snprintf(path, sizeof(path), "%s/%s/%s%s", docker_client_prefix(c),
                                         what, id, suffix) >= (int)sizeof(path)) {
        return err_set(reterr, -EINVAL, "invalid %s id", what);
    }
    o->socket_path = docker_client_socket(c);
    o->path = path; /* copied into the request by docker_hijack_new() */
    o->body = body;
    if (o->handshake_timeout_ms == 0) {
        o->handshake_timeout_ms = docker_client_timeout_ms(c);
    }
    docker_client_count_request(c);
    return docker_hijack_new(docker_client_base(c), o, ret, reterr);
}

int
docker_hijack_exec_start(struct docker_client *c, const char *exec_id, struct docker_hijack_opts *o,
                         struct docker_hijack **ret, struct err *reterr)
{
    return hijack_via(c, "exec", exec_id, "/start", "{\"Detach\":false,\"Tty\":false}", o, ret,
                      reterr);
}

int
docker_hijack_attach(struct docker_client *c, const char *id, struct docker_hijack_opts *o,
                     struct docker_hijack **ret, struct err *reterr)
{
    return hijack_via(c, "containers", id, "/attach?stream=1&stdin=1&stdout=1&stderr=1", NULL, o,
                      ret, reterr);
}
