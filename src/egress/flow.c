/* One direction of a piping connection: the bytes one socket sends, moved to the other with
 * splice(2) through a pipe, never copied into the daemon (proxy-internal.h, docs/egress.md).
 *
 * A pipe is borrowed from the proxy's idle ones only while bytes wait in it: a flow whose
 * destination took everything gives its pipe back before it waits to read again, so idle
 * connections (a client's kept-alive ones) hold no pipe, and the few busy ones share a handful.
 * A flow whose destination is full keeps its pipe (at most EGRESS_PIPE_SIZE bytes) and stops
 * reading its source until the destination took them: the kernel's socket buffers and that
 * pipe are all a connection holds.
 *
 * An absolute-form request's flow up is bounded (struct egress_bound): only the request's body
 * goes on, a Content-Length's bytes or a chunked body to its last chunk (its framing peeked at
 * with MSG_PEEK and judged by chunked_scan(), its data spliced unread); what the sandbox
 * sends after the body (a second request, in whatever host's name) is read and dropped. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "egress/proxy-internal.h"
#include "util/macro.h"

#define SPLICE_FLAGS (SPLICE_F_NONBLOCK | SPLICE_F_MOVE)
#define PEEK_MAX     8192 /* bytes of a chunked body's framing looked at per call */

/* What a bounded flow may do with src (bound_next()). */
enum {
    BOUND_ENDED = -1, /* the connection ended */
    BOUND_WAIT,       /* nothing to read now */
    BOUND_GO,         /* bound.allowed bytes may go on */
    BOUND_EOF,        /* src ended */
};

static bool
would_block(void)
{
    return errno == EAGAIN || errno == EINTR; /* EWOULDBLOCK is EAGAIN here */
}

static void
close_pipe(struct egress_proxy *p, const struct egress_pipe *e)
{
    (void)close(e->r);
    (void)close(e->w);
    if (e->large) {
        p->n_large_pipes--;
    }
}

/* f gets a pipe: an idle one, else a new one (EGRESS_PIPE_SIZE if the kernel lets us and fewer
 * than EGRESS_PIPES_LARGE are). Returns false when no descriptor is left. */
static bool
pipe_borrow(struct egress_flow *f)
{
    struct egress_proxy *p = f->c->g->p;
    int fds[2];

    if (f->pipe.r >= 0) {
        return true;
    }
    if (p->n_idle_pipes > 0) {
        f->pipe = p->idle_pipes[--p->n_idle_pipes];
    } else {
        if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0) {
            return false;
        }
        f->pipe = (struct egress_pipe){.r = fds[0], .w = fds[1]};
        /* Past the user's pipe pages (fs.pipe-user-pages-soft) it stays small: slower, not
         * wrong. */
        if (p->n_large_pipes < EGRESS_PIPES_LARGE &&
            fcntl(fds[1], F_SETPIPE_SZ, EGRESS_PIPE_SIZE) >= EGRESS_PIPE_SIZE) {
            f->pipe.large = true;
            p->n_large_pipes++;
        }
    }
    p->stats.pipes++;
    return true;
}

/* f's pipe back to the idle ones when it is empty, else closed (its bytes dropped with it). */
static void
pipe_release(struct egress_flow *f)
{
    struct egress_proxy *p = f->c->g->p;

    if (f->pipe.r < 0) {
        return;
    }
    p->stats.pipes--;
    if (f->in_pipe == 0 && p->n_idle_pipes < EGRESS_PIPES_IDLE) {
        p->idle_pipes[p->n_idle_pipes++] = f->pipe;
    } else {
        close_pipe(p, &f->pipe);
    }
    f->pipe = (struct egress_pipe){.r = -1, .w = -1};
    f->in_pipe = 0;
}

static void
flow_wait(struct egress_flow *f, enum egress_flow_wait w)
{
    if (f->wait == w) {
        return;
    }
    if (f->wait == EGRESS_FLOW_WAIT_READ) {
        (void)event_del(f->rd);
    } else if (f->wait == EGRESS_FLOW_WAIT_WRITE) {
        (void)event_del(f->wr);
    }
    f->wait = w;
    if (w == EGRESS_FLOW_WAIT_READ) {
        (void)event_add(f->rd, NULL);
    } else if (w == EGRESS_FLOW_WAIT_WRITE) {
        (void)event_add(f->wr, NULL);
    }
}

/* A read from src (or, writing, a write to dst) failed: that side went away. */
static void
broke(struct egress_flow *f, bool writing)
{
    egress_conn_end(f->c, EGRESS_END_DONE,
                    f->from_down != writing ? "the sandbox's side broke off"
                                            : "the upstream broke off");
}

/* What waits for dst (the bytes before the piped ones, then the pipe's) written. Returns 1 when
 * all of it was, 0 when dst is full, -1 when f's connection ended. */
static int
flush(struct egress_flow *f)
{
    while (evbuffer_get_length(f->first) > 0) {
        if (evbuffer_write(f->first, f->dst) < 0) {
            if (would_block()) {
                return 0;
            }
            broke(f, true);
            return -1;
        }
    }
    while (f->in_pipe > 0) {
        ssize_t n = splice(f->pipe.r, NULL, f->dst, NULL, f->in_pipe, SPLICE_FLAGS);

        if (n < 0 && would_block()) {
            return 0;
        }
        if (n <= 0) {
            broke(f, true);
            return -1;
        }
        f->in_pipe -= (size_t)n;
    }
    return 1;
}

/* What a recv of src that got no byte (n < 1) means for a bounded flow. */
static int
recv_ended(struct egress_flow *f, ssize_t n)
{
    if (n < 0 && would_block()) {
        return BOUND_WAIT;
    }
    if (n < 0) {
        broke(f, false);
        return BOUND_ENDED;
    }
    return BOUND_EOF;
}

/* Past the request's body: what src sends is read and dropped, never sent on, until it ends. */
static int
drop(struct egress_flow *f)
{
    char sink[PEEK_MAX];

    for (int i = 0; i < EGRESS_FLOW_ROUNDS; i++) {
        ssize_t n = recv(f->src, sink, sizeof(sink), MSG_DONTWAIT);

        if (n < 1) {
            return recv_ended(f, n);
        }
        f->bound.dropped += (size_t)n;
    }
    return BOUND_WAIT; /* more next turn: the other connections' turn comes between */
}

/* Before a bounded flow reads src: how many of its next bytes are the body's (bound.allowed). A
 * chunk's data is let through unread; its framing is peeked at and scanned. */
static int
bound_next(struct egress_flow *f)
{
    struct egress_bound *b = &f->bound;
    char peek[PEEK_MAX];
    struct err e = {0};
    size_t used;
    ssize_t n;
    int r;

    if (b->allowed > 0) {
        return BOUND_GO;
    }
    if (b->last) {
        return drop(f);
    }
    b->allowed = chunked_data_left(&b->scan);
    if (b->allowed > 0) {
        chunked_skip(&b->scan, b->allowed);
        return BOUND_GO;
    }
    /* Nothing scanned is left unsent (allowed is 0): a peek starts at the first unscanned byte. */
    n = recv(f->src, peek, sizeof(peek), MSG_PEEK | MSG_DONTWAIT);
    if (n < 1) {
        return recv_ended(f, n);
    }
    r = chunked_scan(&b->scan, peek, (size_t)n, &used, &e);
    if (r < 0) {
        egress_conn_end(f->c, EGRESS_END_MALFORMED, e.msg);
        return BOUND_ENDED;
    }
    b->allowed = used;
    b->last = r == 1;
    return BOUND_GO;
}

/* Moves what f can now, EGRESS_FLOW_ROUNDS pipefuls at most (the other connections' turn comes
 * between); waits for whatever it lacks. May end f's connection (a byte limit, a side gone). */
static void
flow_run(struct egress_flow *f)
{
    for (int round = 0; round < EGRESS_FLOW_ROUNDS; round++) {
        int r = flush(f);
        size_t want = EGRESS_PIPE_SIZE;
        ssize_t n;

        if (r <= 0) {
            if (r == 0) {
                flow_wait(f, EGRESS_FLOW_WAIT_WRITE);
            }
            return;
        }
        if (f->eof) { /* all that src sent is written */
            pipe_release(f);
            flow_wait(f, EGRESS_FLOW_WAIT_NONE);
            (void)shutdown(f->dst, SHUT_WR);
            f->done = true;
            egress_conn_flow_done(f->c);
            return;
        }
        if (f->bound.on) {
            r = bound_next(f);
            if (r == BOUND_ENDED) {
                return;
            }
            if (r == BOUND_EOF) {
                f->eof = true;
                continue;
            }
            if (r == BOUND_WAIT) {
                pipe_release(f); /* empty */
                flow_wait(f, EGRESS_FLOW_WAIT_READ);
                return;
            }
            want = (size_t)MIN((uint64_t)want, f->bound.allowed);
        }
        if (!pipe_borrow(f)) {
            egress_conn_end(f->c, EGRESS_END_LIMIT,
                            "the daemon is out of descriptors (no pipe for the bytes)");
            return;
        }
        n = splice(f->src, NULL, f->pipe.w, NULL, want, SPLICE_FLAGS);
        if (n < 0 && would_block()) {
            pipe_release(f); /* empty: an idle connection holds none */
            flow_wait(f, EGRESS_FLOW_WAIT_READ);
            return;
        }
        if (n < 0) {
            broke(f, false);
            return;
        }
        if (n == 0) {
            f->eof = true;
            continue;
        }
        f->in_pipe = (size_t)n;
        if (f->bound.on) {
            f->bound.allowed -= (size_t)n;
        }
        if (!egress_conn_moved(f->c, f->from_down, (size_t)n)) {
            return;
        }
    }
    /* More may be there: the loop's next turn goes on (level-triggered). */
    flow_wait(f, f->in_pipe > 0 ? EGRESS_FLOW_WAIT_WRITE : EGRESS_FLOW_WAIT_READ);
}

static void
on_ready(evutil_socket_t fd, short what, void *arg)
{
    flow_run(arg);
}

void
egress_flow_start(struct egress_flow *f, struct egress_conn *c, bool from_down, int src, int dst,
                  struct evbuffer *first, const struct egress_bound *bound)
{
    struct event_base *base = c->g->p->base;

    *f = (struct egress_flow){
        .c = c,
        .from_down = from_down,
        .src = src,
        .dst = dst,
        .first = first,
        .pipe = {.r = -1, .w = -1},
        .wait = EGRESS_FLOW_WAIT_NONE,
    };
    if (bound != NULL) {
        f->bound = *bound;
    }
    f->rd = OOM_CHECK(event_new(base, src, EV_READ | EV_PERSIST, on_ready, f));
    f->wr = OOM_CHECK(event_new(base, dst, EV_WRITE | EV_PERSIST, on_ready, f));
    /* The bytes before the piped ones go first: wait for dst if there are any, else for src. */
    flow_wait(f, evbuffer_get_length(first) > 0 ? EGRESS_FLOW_WAIT_WRITE : EGRESS_FLOW_WAIT_READ);
}

void
egress_flow_free(struct egress_flow *f)
{
    if (f->rd == NULL) {
        return; /* never started */
    }
    pipe_release(f);
    event_free(f->rd);
    event_free(f->wr);
    evbuffer_free(f->first);
    f->rd = f->wr = NULL;
}

void
egress_proxy_close_pipes(struct egress_proxy *p)
{
    while (p->n_idle_pipes > 0) {
        close_pipe(p, &p->idle_pipes[--p->n_idle_pipes]);
    }
}
