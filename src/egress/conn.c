/* One connection through an egress gate: its head, its name checked, resolved and dialled, then
 * its bytes piped (proxy.h). One state machine: enum egress_conn_state, written by conn_set()
 * only. */
#define LOG_MODULE "egress"
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>

#include "egress/proxy-internal.h"
#include "log/log.h"
#include "util/macro.h"
#include "util/time.h"

static const char *const state_names[EGRESS_CONN__COUNT] = {
    [EGRESS_CONN_FIRST] = "first",         [EGRESS_CONN_HEAD] = "head",
    [EGRESS_CONN_RESOLVING] = "resolving", [EGRESS_CONN_CONNECTING] = "connecting",
    [EGRESS_CONN_PIPING] = "piping",       [EGRESS_CONN_CLOSING] = "closing",
};

static void
conn_set(struct egress_conn *c, enum egress_conn_state to)
{
    log_debug("egress conn %s -> %s host=%s", state_names[c->state], state_names[to], c->head.host);
    c->state = to;
}

static void
arm(struct egress_conn *c, unsigned ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (suseconds_t)(ms % 1000) * 1000};

    (void)event_add(c->timer, &tv);
}

/* A resolution under way is given up: its callback sees EVUTIL_EAI_CANCEL, and returns. */
static void
cancel_dns(struct egress_conn *c)
{
    struct evdns_getaddrinfo_request *r = c->dns;

    if (r != NULL) {
        c->dns = NULL;
        evdns_getaddrinfo_cancel(r);
    }
}

void
egress_conn_end(struct egress_conn *c, enum egress_end end, const char *why)
{
    struct egress_gate *g = c->g;
    struct egress_proxy *p = g->p;
    struct egress_event ev = {
        .tenant = g->tenant,
        .session = g->session,
        .host = c->head.host,
        .port = c->head.port,
        .address = c->address,
        .bytes_up = c->up_bytes,
        .bytes_down = c->down_bytes,
        .duration_ms = time_now_ms() - c->started_ms,
        .end = end,
        .why = why,
    };

    LIST_REMOVE(c, link);
    g->n_conns--;
    p->stats.open--;
    p->stats.ends[end]++;
    cancel_dns(c);
    event_free(c->timer);
    egress_flow_free(&c->flow[0]); /* before the bufferevents close their sockets */
    egress_flow_free(&c->flow[1]);
    if (c->up != NULL) {
        bufferevent_free(c->up);
    }
    if (c->first != NULL) {
        event_free(c->first);
    }
    if (c->gate_fd >= 0) {
        (void)close(c->gate_fd);
    }
    if (c->down != NULL) {
        bufferevent_free(c->down);
    }
    if (p->cb != NULL) {
        p->cb(&ev, p->userdata);
    }
    free(c->head_bytes);
    free(c);
}

/* ---- refusals: an answer to the sandbox, then the end ---------------------------------------- */

/* A refusal is written, then the sandbox's side shut for writing; what it still sends is read
 * and dropped until it closes (or CLOSING's 5 s pass): a client that sends its request after
 * the answer came gets the answer, not a reset. */
static void
on_flushed(struct bufferevent *bev, void *arg)
{
    if (evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
        (void)shutdown(bufferevent_getfd(bev), SHUT_WR);
    }
}

static void
on_discard(struct bufferevent *bev, void *arg)
{
    struct evbuffer *in = bufferevent_get_input(bev);

    (void)evbuffer_drain(in, evbuffer_get_length(in));
}

static void
on_closing_event(struct bufferevent *bev, short what, void *arg)
{
    struct egress_conn *c = arg;

    egress_conn_end(c, c->end, c->why);
}

/* Answers status with why as text, and ends c (end) once it is written (or in 5 s). */
static void refuse(struct egress_conn *c, enum egress_end end, int status, const char *fmt, ...)
    PRINTF_LIKE(4, 5);

static void
refuse(struct egress_conn *c, enum egress_end end, int status, const char *fmt, ...)
{
    const char *reason = status == 403   ? "Forbidden"
                         : status == 429 ? "Too Many Requests"
                         : status == 400 ? "Bad Request"
                         : status == 504 ? "Gateway Timeout"
                                         : "Bad Gateway";
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(c->why, sizeof(c->why), fmt, ap);
    va_end(ap);
    c->end = end;
    cancel_dns(c);
    if (c->up != NULL) {
        bufferevent_free(c->up);
        c->up = NULL;
    }
    conn_set(c, EGRESS_CONN_CLOSING);
    (void)evbuffer_add_printf(bufferevent_get_output(c->down),
                              "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                              "Content-Length: %zu\r\nConnection: close\r\n\r\nsandpool egress: "
                              "%s\n",
                              status, reason, strlen(c->why) + 18, c->why);
    (void)evbuffer_drain(bufferevent_get_input(c->down),
                         evbuffer_get_length(bufferevent_get_input(c->down)));
    bufferevent_setwatermark(c->down, EV_WRITE, 0, 0);
    bufferevent_setwatermark(c->down, EV_READ, 0, 0);
    bufferevent_setcb(c->down, on_discard, on_flushed, on_closing_event, c);
    bufferevent_enable(c->down, EV_READ | EV_WRITE);
    arm(c, 5000);
}

/* ---- piping: two flows (flow.c) ------------------------------------------------------------- */

bool
egress_conn_moved(struct egress_conn *c, bool from_down, size_t n)
{
    struct egress_gate *g = c->g;
    const struct egress_proxy_config *cfg = &g->p->cfg;

    *(from_down ? &c->up_bytes : &c->down_bytes) += n;
    *(from_down ? &g->p->stats.bytes_up : &g->p->stats.bytes_down) += n;
    g->bytes += n;
    g->exec_bytes += n;
    if (g->bytes > cfg->max_bytes || g->exec_bytes > cfg->max_exec_bytes) {
        egress_conn_end(c, EGRESS_END_LIMIT,
                        g->bytes > cfg->max_bytes
                            ? "the session's egress bytes are used up (egress.max_bytes)"
                            : "this execution's egress bytes are used up "
                              "(egress.max_exec_bytes)");
        return false;
    }
    return true;
}

void
egress_conn_flow_done(struct egress_conn *c)
{
    if (c->flow[0].done && c->flow[1].done) {
        egress_conn_end(c, EGRESS_END_DONE,
                        c->flow[0].bound.dropped > 0
                            ? "ended; what the sandbox sent after its request was dropped (one "
                              "request per connection)"
                            : "ended");
    }
}

/* An absolute-form request's bound on its flow up (flow.c): only its body goes on. Of early
 * (what the sandbox sent after the head), the body's bytes go to to_up and the rest is dropped.
 * -EINVAL (reterr) when they break the chunked grammar. */
static int
request_bound(const struct egress_head *h, struct evbuffer *early, struct evbuffer *to_up,
              struct egress_bound *ret, struct err *reterr)
{
    struct egress_bound b = {.on = true};
    size_t n = evbuffer_get_length(early), take = 0;

    if (h->body == EGRESS_BODY_CHUNKED) {
        int r = 0;

        chunked_init(&b.scan, EGRESS_CHUNKED_RULES);
        if (n > 0) { /* at most EGRESS_HEAD_MAX: the head's read watermark */
            r = chunked_scan(&b.scan, (const char *)evbuffer_pullup(early, -1), n, &take, reterr);
        }
        if (r < 0) {
            return r;
        }
        b.last = r == 1;
    } else {
        uint64_t len = h->body == EGRESS_BODY_LENGTH ? h->body_len : 0;

        take = (size_t)MIN((uint64_t)n, len);
        b.allowed = len - take;
        b.last = true;
    }
    (void)evbuffer_remove_buffer(early, to_up, take);
    b.dropped = evbuffer_get_length(early);
    (void)evbuffer_drain(early, b.dropped);
    *ret = b;
    return 0;
}

/* The upstream is there: the bufferevents stop reading and writing (their sockets are the
 * flows' now). What goes first: to the upstream the request's head (an absolute-form request,
 * sent on in origin form) and what the sandbox sent after it (of an absolute-form request, what
 * is its body), to the sandbox the 200 of a CONNECT. */
static void
pipe_start(struct egress_conn *c)
{
    struct evbuffer *to_up = OOM_CHECK(evbuffer_new());
    struct evbuffer *to_down = OOM_CHECK(evbuffer_new());
    struct evbuffer *early = bufferevent_get_input(c->down);
    struct egress_bound bound = {0};
    struct err e = {0};
    size_t n_up;

    event_del(c->timer); /* a tunnel lasts as long as its ends want */
    conn_set(c, EGRESS_CONN_PIPING);
    bufferevent_disable(c->down, EV_READ | EV_WRITE);
    bufferevent_disable(c->up, EV_READ | EV_WRITE);
    bufferevent_setcb(c->down, NULL, NULL, NULL, NULL);
    bufferevent_setcb(c->up, NULL, NULL, NULL, NULL);
    if (c->head.kind == EGRESS_HEAD_CONNECT) {
        (void)evbuffer_add_printf(to_down, "HTTP/1.1 200 Connection established\r\n\r\n");
    } else {
        struct buf req = BUF_INIT((size_t)2 * EGRESS_HEAD_MAX);
        int r = egress_head_upstream(&c->head, c->head_bytes, &req);

        if (r == 0) {
            (void)evbuffer_add(to_up, req.buf, req.len);
            r = request_bound(&c->head, early, to_up, &bound, &e);
        }
        buf_done(&req);
        if (r < 0) {
            evbuffer_free(to_up);
            evbuffer_free(to_down);
            refuse(c, EGRESS_END_MALFORMED, 400, "%s",
                   e.msg[0] != '\0' ? e.msg : "the request head is too long to send on");
            return;
        }
    }
    (void)evbuffer_remove_buffer(early, to_up, evbuffer_get_length(early));
    egress_flow_start(&c->flow[0], c, true, bufferevent_getfd(c->down), bufferevent_getfd(c->up),
                      to_up, bound.on ? &bound : NULL);
    egress_flow_start(&c->flow[1], c, false, bufferevent_getfd(c->up), bufferevent_getfd(c->down),
                      to_down, NULL);
    n_up = evbuffer_get_length(to_up);
    if (n_up > 0) {
        (void)egress_conn_moved(c, true, n_up); /* may end c: nothing follows */
    }
}

/* ---- dialling -------------------------------------------------------------------------------- */

static void dial_next(struct egress_conn *c);

static void
on_dial_event(struct bufferevent *bev, short what, void *arg)
{
    struct egress_conn *c = arg;

    if (what & BEV_EVENT_CONNECTED) {
        pipe_start(c);
        return;
    }
    bufferevent_free(c->up);
    c->up = NULL;
    dial_next(c);
}

static void
dial_next(struct egress_conn *c)
{
    struct sockaddr_storage ss = {0};
    const struct egress_addr *a;
    socklen_t len;

    if (c->next_addr == c->n_addrs) {
        refuse(c, EGRESS_END_UPSTREAM, 502, "%s:%u: no address of it took the connection",
               c->head.host, c->head.port);
        return;
    }
    a = &c->addrs[c->next_addr++];

    if (a->family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&ss;

        sin->sin_family = AF_INET;
        sin->sin_port = htons(c->head.port);
        memcpy(&sin->sin_addr, a->bytes, 4);
        len = sizeof(*sin);
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(c->head.port);
        memcpy(&sin6->sin6_addr, a->bytes, 16);
        len = sizeof(*sin6);
    }
    egress_addr_format(a, c->address, sizeof(c->address));
    c->up = OOM_CHECK(
        bufferevent_socket_new(c->g->p->base, -1, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS));
    bufferevent_setcb(c->up, NULL, NULL, on_dial_event, c);
    if (bufferevent_socket_connect(c->up, (struct sockaddr *)&ss, (int)len) < 0) {
        bufferevent_free(c->up); /* the callback never runs for this one */
        c->up = NULL;
        dial_next(c);
    }
}

/* The addresses found for the name: those of refused ranges dropped (unless allowed), then
 * dialled. */
static void
resolved(struct egress_conn *c)
{
    const struct egress_proxy *p = c->g->p;
    const char *range = NULL;
    size_t kept = 0;

    for (size_t i = 0; i < c->n_addrs; i++) {
        const char *r = egress_addr_refused_range(&c->addrs[i]);

        if (r != NULL && !egress_cidrs_contain(p->cidrs, p->cfg.n_cidrs, &c->addrs[i])) {
            range = r;
            continue;
        }
        c->addrs[kept++] = c->addrs[i];
    }
    c->n_addrs = kept;
    if (kept == 0 && range != NULL) {
        refuse(c, EGRESS_END_REFUSED_ADDRESS, 403,
               "refused address: %s resolves to a %s address, which no sandbox reaches",
               c->head.host, range);
        return;
    }
    if (kept == 0) {
        refuse(c, EGRESS_END_UNRESOLVED, 502, "%s: no address found", c->head.host);
        return;
    }
    conn_set(c, EGRESS_CONN_CONNECTING);
    dial_next(c);
}

static void
on_resolved(int result, struct evutil_addrinfo *res, void *arg)
{
    struct egress_conn *c = arg;

    if (result == EVUTIL_EAI_CANCEL) {
        return; /* egress_conn_end() is freeing c */
    }
    c->dns = NULL;
    for (struct evutil_addrinfo *ai = res; ai != NULL && c->n_addrs < EGRESS_ADDRS_MAX;
         ai = ai->ai_next) {
        if (egress_addr_from_sockaddr(ai->ai_addr, &c->addrs[c->n_addrs]) == 0) {
            c->n_addrs++;
        }
    }
    if (res != NULL) {
        evutil_freeaddrinfo(res);
    }
    /* Never from inside evdns_getaddrinfo() (it may answer at once): the next loop turn goes on. */
    event_active(c->timer, EV_WRITE, 0);
}

static void
resolve(struct egress_conn *c)
{
    const struct egress_proxy *p = c->g->p;
    struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};

    conn_set(c, EGRESS_CONN_RESOLVING);
    if (c->head.host_is_addr) {
        c->addrs[c->n_addrs++] = c->head.addr;
        resolved(c);
        return;
    }
    for (size_t i = 0; i < p->cfg.n_hosts && c->n_addrs < EGRESS_ADDRS_MAX; i++) {
        if (strcmp(p->hosts[i].name, c->head.host) == 0) {
            c->addrs[c->n_addrs++] = p->hosts[i].addr;
        }
    }
    if (c->n_addrs > 0) {
        resolved(c); /* pinned by the operator: no DNS */
        return;
    }
    if (evdns_base_count_nameservers(p->dns) == 0) {
        resolved(c); /* no nameserver (egress.resolv_conf ""): pinned names only */
        return;
    }
    c->dns = evdns_getaddrinfo(p->dns, c->head.host, NULL, &hints, on_resolved, c);
}

/* ---- the head -------------------------------------------------------------------------------- */

static void
checked(struct egress_conn *c)
{
    struct egress_gate *g = c->g;
    const char *by;
    enum egress_verdict v = egress_narrowed_check(&g->rules, g->narrowed ? &g->narrowing : NULL,
                                                  c->head.host, c->head.port, &by);

    if (v == EGRESS_DENIED) {
        refuse(c, EGRESS_END_DENIED, 403, "denied by name: %s:%u is denied by the %s", c->head.host,
               c->head.port, by);
    } else if (v == EGRESS_NOT_ALLOWED) {
        refuse(c, EGRESS_END_NOT_ALLOWED, 403,
               "denied by name: %s:%u is not in the %s's egress list", c->head.host, c->head.port,
               by);
    } else {
        arm(c, g->p->cfg.connect_timeout_ms);
        resolve(c);
    }
}

static void
on_head_read(struct bufferevent *bev, void *arg)
{
    struct egress_conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t n = MIN(evbuffer_get_length(in), (size_t)EGRESS_HEAD_MAX);
    struct err e = {0};
    int r = egress_head_parse((const char *)evbuffer_pullup(in, (ev_ssize_t)n), n, &c->head, &e);

    if (r == -EAGAIN) {
        return;
    }
    if (r < 0) {
        c->head.host[0] = '\0';
        refuse(c, EGRESS_END_MALFORMED, 400, "%s", e.msg);
        return;
    }
    c->head_bytes = xmalloc(c->head.len);
    (void)evbuffer_remove(in, c->head_bytes, c->head.len);
    bufferevent_disable(bev, EV_READ); /* until the upstream is there */
    checked(c);
}

static void
on_head_event(struct bufferevent *bev, short what, void *arg)
{
    egress_conn_end(arg, EGRESS_END_MALFORMED, "the sandbox closed before its request's head");
}

/* ---- the first byte: a forwarder's handoff, or a head's start -------------------------------- */

/* The head is read from fd (the sandbox's TCP connection handed over, or the gate's connection),
 * after the n bytes already read from it. */
static void
head_start(struct egress_conn *c, int fd, const char *early, size_t n)
{
    c->down = OOM_CHECK(
        bufferevent_socket_new(c->g->p->base, fd, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS));
    if (n > 0) { /* before what the socket brings (the input's end is frozen: the socket's) */
        (void)evbuffer_prepend(bufferevent_get_input(c->down), early, n);
    }
    conn_set(c, EGRESS_CONN_HEAD);
    bufferevent_setwatermark(c->down, EV_READ, 0, EGRESS_HEAD_MAX);
    bufferevent_setcb(c->down, on_head_read, NULL, on_head_event, c);
    bufferevent_enable(c->down, EV_READ);
}

/* The one descriptor m carries (SCM_RIGHTS), or -1; any other is closed. */
static int
passed_fd(struct msghdr *m)
{
    int fd = -1, n_fds = 0;

    for (struct cmsghdr *h = CMSG_FIRSTHDR(m); h != NULL; h = CMSG_NXTHDR(m, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) {
            continue;
        }
        for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
            int one;

            memcpy(&one, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
            if (n_fds++ == 0) {
                fd = one;
            } else {
                (void)close(one);
            }
        }
    }
    if (n_fds > 1 || (m->msg_flags & MSG_CTRUNC)) {
        if (fd >= 0) {
            (void)close(fd);
        }
        return -1;
    }
    return fd;
}

/* Whether the handoff of tcp over gate connection fd is taken: fd's peer is the gate's relay
 * (the forwarder: user code has another uid, and could keep a copy of what it hands over, to
 * make the proxy's reads block), and tcp a TCP socket (what else would the proxy be asked to
 * read?). */
static bool
handoff_trusted(const struct egress_gate *g, int fd, int tcp)
{
    struct ucred cred;
    int domain, type, protocol;
    socklen_t len = sizeof(cred), ilen = sizeof(int);

    return g->relay != (uid_t)-1 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
           cred.uid == g->relay && getsockopt(tcp, SOL_SOCKET, SO_DOMAIN, &domain, &ilen) == 0 &&
           (domain == AF_INET || domain == AF_INET6) &&
           getsockopt(tcp, SOL_SOCKET, SO_TYPE, &type, &ilen) == 0 && type == SOCK_STREAM &&
           getsockopt(tcp, SOL_SOCKET, SO_PROTOCOL, &protocol, &ilen) == 0 &&
           protocol == IPPROTO_TCP;
}

static bool
answer(int fd, char byte)
{
    return send(fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1;
}

static void
on_first(evutil_socket_t fd, short what, void *arg)
{
    struct egress_conn *c = arg;
    struct egress_stats *st = &c->g->p->stats;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl)};
    ssize_t n = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    int tcp;

    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        (void)event_add(c->first, NULL);
        return;
    }
    if (n <= 0) {
        egress_conn_end(c, EGRESS_END_MALFORMED, "the sandbox closed before its request's head");
        return;
    }
    event_free(c->first);
    c->first = NULL;
    c->gate_fd = -1; /* the bufferevent's from here, or closed */
    tcp = passed_fd(&m);
    if (byte != EGRESS_HANDOFF) {
        if (tcp >= 0) {
            (void)close(tcp);
        }
        head_start(c, fd, &byte, 1);
        return;
    }
    if (tcp >= 0 && handoff_trusted(c->g, fd, tcp) && answer(fd, EGRESS_HANDOFF_TAKEN)) {
        st->handoffs++;
        (void)close(fd);
        (void)evutil_make_socket_nonblocking(tcp);
        head_start(c, tcp, NULL, 0);
        return;
    }
    if (tcp >= 0) {
        (void)close(tcp);
    }
    st->handoffs_refused++;
    if (!answer(fd, EGRESS_HANDOFF_RELAY)) {
        (void)close(fd);
        egress_conn_end(c, EGRESS_END_MALFORMED, "the forwarder went away during its handoff");
        return;
    }
    head_start(c, fd, NULL, 0);
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct egress_conn *c = arg;

    if (what & EV_WRITE) { /* on_resolved()'s next turn */
        if (c->state == EGRESS_CONN_RESOLVING) {
            resolved(c);
        }
        return;
    }
    switch (c->state) {
    case EGRESS_CONN_FIRST:
    case EGRESS_CONN_HEAD:
        egress_conn_end(c, EGRESS_END_LIMIT, "no request head within egress.head_timeout_ms");
        break;
    case EGRESS_CONN_RESOLVING:
    case EGRESS_CONN_CONNECTING:
        refuse(c, EGRESS_END_LIMIT, 504, "%s:%u: not reached within egress.connect_timeout_ms",
               c->head.host, c->head.port);
        break;
    default:
        egress_conn_end(c, c->end, c->why); /* the sandbox did not close within 5 s */
        break;
    }
}

void
egress_conn_accept(struct egress_gate *g, int fd)
{
    struct egress_proxy *p = g->p;
    struct egress_conn *c;

    /* Past twice its session's limit (the refusals linger a moment) or the proxy's own bound,
     * a connection is closed unanswered, before anything is allocated for it: a sandbox that
     * connects to its socket without end costs the daemon no descriptor and no memory. */
    if (g->n_conns >= 2 * p->cfg.max_connections || p->stats.open >= EGRESS_OPEN_MAX) {
        p->stats.ends[EGRESS_END_LIMIT]++;
        (void)close(fd);
        return;
    }
    c = xcalloc(1, sizeof(*c));
    c->g = g;
    c->gate_fd = -1;
    c->started_ms = time_now_ms();
    c->timer = OOM_CHECK(event_new(p->base, -1, 0, on_timer, c));
    LIST_INSERT_HEAD(&g->conns, c, link);
    g->n_conns++;
    p->stats.open++;
    if (!g->bound || g->n_conns > p->cfg.max_connections) {
        /* Answered on the gate's connection (a forwarder's handoff is dropped with the bytes
         * read after the answer: the forwarder relays the answer). */
        c->down = OOM_CHECK(
            bufferevent_socket_new(p->base, fd, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS));
        if (!g->bound) {
            refuse(c, EGRESS_END_NO_SESSION, 403, "this sandbox serves no session");
        } else {
            refuse(c, EGRESS_END_LIMIT, 429,
                   "the session has %u egress connections open (egress.max_connections)",
                   g->n_conns - 1);
        }
        return;
    }
    c->gate_fd = fd;
    c->first = OOM_CHECK(event_new(p->base, fd, EV_READ, on_first, c));
    (void)event_add(c->first, NULL);
    arm(c, p->cfg.head_timeout_ms);
}
