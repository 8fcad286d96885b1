/* Client connections: who gets a slot, who loses one, and the descriptors they hold.
 *
 * Threat: anyone who reaches the port can open connections, without a token. A single global
 * cap that only pauses accepting (the design this replaces) lets 1,100 idle keep-alive sockets
 * take every slot and lock every tenant out, /healthz included. The rules here:
 *
 *  1. Every connection has one standing (enum http_conn_standing), written only by
 *     http_conns_table_write() (conns-table.c):
 *       ANON_IDLE / ANON_BUSY   no request on it carried a valid token yet
 *       AUTH_IDLE / AUTH_BUSY   one did (tenant or admin); a connection never loses it
 *       CLOSING                 evicted or refused: its socket is shut down, evhttp frees it
 *       LINGERING               evhttp freed it with a refused upload's body still coming: a
 *                               duplicate of its socket drains the body (see linger_start)
 *     Busy: evhttp dispatched a request and its reply is not complete. Idle: anything else
 *     (between requests, or a head still arriving). An idle connection whose bytes came but
 *     were not read yet (a burst of new connections, each with its request) is spared as a
 *     victim while it is so; bytes evhttp already holds (a head trickling in) spare nothing.
 *  2. At most `max` slots: every connection but the CLOSING ones, lingering closes included.
 *     A connection accepted past the cap is looked at first (rule 3 may close one of its own
 *     address's), then the connections past the cap close victims: anonymous ones idle
 *     longest, then anonymous ones whose reply went untaken for lim.anon_busy_ms, and an
 *     authenticated one only when no anonymous connection holds a slot at all
 *     (http_conns_table_victim() has the exact order). Other busy connections are never closed
 *     for another. With no victim yet the cap stays passed, by PAST_CAP_MAX at most: accepting
 *     pauses, and the first connection to become a victim is closed (update_listener()). With
 *     nothing idle (every slot has a request in progress) accepting pauses too, and the
 *     kernel's listen backlog holds what comes. An anonymous connection gets one answer and is
 *     closed (body.c); the first valid token keeps it open.
 *  3. Per peer (an IPv4 address, an IPv6 /64; unix-socket peers are exempt, the socket's
 *     permissions are their boundary) at most `per_peer` anonymous connections: one more closes
 *     that peer's anonymous connection idle longest, or, with none idle, is answered 503 and
 *     closed. A connection that authenticates leaves its peer's count, so a gateway carrying
 *     many clients' authenticated traffic from one address is bound only by rule 2.
 *  4. Lingering closes: only for authenticated connections, at most `linger_max` at once
 *     (each holds a slot, rule 2); otherwise the socket closes at once.
 *
 * So unauthenticated clients can take at most the slots nobody authenticated is using, and lose
 * them first; descriptors held for clients stay within max + PAST_CAP_MAX + CLOSING_MAX. The
 * table (conns-table.c) is pure bookkeeping, unit-tested in tests/unit/test-conns.c; this file
 * adds the I/O: shutting sockets down, the listener, admission, lingering. Loop context only. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#define LOG_MODULE "api"
#include "http/conns-table.h"
#include "http/http-internal.h"
#include "log/log.h"
#include "sandpool/api.h"
#include "util/hashmap.h"
#include "util/macro.h"
#include "util/time.h"

#define LINGER_TOTAL_S 10 /* a lingering close drains at most this long, */
#define LINGER_IDLE_S  5  /* and this long without a byte */
#define LINGER_READS   16 /* reads of 16 KiB per readable event */
#define WARN_EVERY_MS  10000u

static const struct timeval linger_idle = {.tv_sec = LINGER_IDLE_S};

/* Registries with a listener. libevent calls a listener's error callback with evhttp's own
 * argument, so the registry is found by its listener (there are at most two). */
static LIST_HEAD(, http_conns) listening = LIST_HEAD_INITIALIZER(listening);

/* ---- listener ------------------------------------------------------------------------------- */

static void close_entry(struct http_conns *reg, struct http_conn_entry *e);

static void on_recheck(evutil_socket_t fd, short what, void *arg);

/* Newcomers are accepted past the cap and looked at first (their own address's share may close
 * one of that address's connections, http_conns_admit()); once every one of them was, the
 * connections past the cap are closed, victims in http_conns_table_victim()'s order, as soon as
 * there are any. Accepting pauses while the cap is passed by PAST_CAP_MAX, while it is reached with
 * no connection idle (nothing to close for a newcomer), and while CLOSING_MAX closed connections
 * wait for evhttp to free them (a burst of newcomers each closing one would otherwise hold a
 * descriptor per connection in the backlog). While paused it looks again every 100 ms (a
 * connection's unread bytes get read, an anonymous reply goes untaken: no standing changes),
 * and it resumes as soon as none of that holds. */
static void
update_listener(struct http_conns *reg)
{
    static const struct timeval recheck_every = {.tv_usec = 100000};
    unsigned max = reg->lim.max;
    bool full;

    if (reg->http_gone) {
        return;
    }
    while (max > 0 && reg->unadmitted == 0 && http_conns_live(reg) > max) {
        struct http_conn_entry *victim = http_conns_table_victim(reg, NULL);

        if (victim == NULL) {
            break;
        }
        reg->stats.evicted_total++;
        close_entry(reg, victim);
    }
    full = max > 0 && (http_conns_live(reg) >= max + PAST_CAP_MAX ||
                       reg->n[HTTP_CONN_CLOSING] >= CLOSING_MAX ||
                       (http_conns_live(reg) >= max &&
                        reg->n[HTTP_CONN_ANON_IDLE] + reg->n[HTTP_CONN_AUTH_IDLE] == 0));
    if (reg->listener == NULL) {
        return;
    }
    if (full) {
        if (reg->recheck == NULL) {
            reg->recheck =
                OOM_CHECK(evtimer_new(evconnlistener_get_base(reg->listener), on_recheck, reg));
        }
        if (!evtimer_pending(reg->recheck, NULL)) {
            (void)evtimer_add(reg->recheck, &recheck_every);
        }
    }
    if (reg->backoff != NULL && evtimer_pending(reg->backoff, NULL)) {
        full = true;
    }
    if (!reg->paused && full) {
        uint64_t now = time_now_ms();

        (void)evconnlistener_disable(reg->listener);
        reg->paused = true;
        if (http_conns_live(reg) >= max && now - reg->warned_cap_ms >= WARN_EVERY_MS) {
            reg->warned_cap_ms = now;
            log_warn("%u client connections, none of them to close for a new one "
                     "(http.max_connections): new ones wait",
                     http_conns_live(reg));
        }
    } else if (reg->paused && !full) {
        (void)evconnlistener_enable(reg->listener);
        reg->paused = false;
    }
}

static void
on_recheck(evutil_socket_t fd, short what, void *arg)
{
    update_listener(arg);
}

static void
on_backoff(evutil_socket_t fd, short what, void *arg)
{
    update_listener(arg);
}

/* accept() failed. Out of descriptors (the process's or the system's), the connection waiting
 * in the backlog would make the listener fire again at once, forever: accepting pauses for
 * 100 ms instead. The descriptor budget (sandpoold's main) keeps this from happening. */
static void
on_accept_error(struct evconnlistener *listener, void *arg)
{
    struct http_conns *reg;
    int e = EVUTIL_SOCKET_ERROR();
    uint64_t now = time_now_ms();

    LIST_FOREACH (reg, &listening, listening) {
        if (reg->listener == listener) {
            break;
        }
    }
    if (reg == NULL || (e != EMFILE && e != ENFILE && e != ENOBUFS && e != ENOMEM)) {
        return;
    }
    if (now - reg->warned_accept_ms >= WARN_EVERY_MS) {
        reg->warned_accept_ms = now;
        log_warn("accepting a connection failed: %s; accepting pauses for 100 ms", strerror(e));
    }
    if (reg->backoff == NULL) {
        reg->backoff = OOM_CHECK(evtimer_new(evconnlistener_get_base(listener), on_backoff, reg));
    }
    (void)evtimer_add(reg->backoff, &(struct timeval){.tv_usec = 100000});
    update_listener(reg);
}

/* ---- closing -------------------------------------------------------------------------------- */

/* Ends e's connection: shutting its socket down makes the read evhttp waits on see the end, and
 * evhttp frees the connection on its next turn (http_conns_release). One whose descriptor is not
 * set yet is shut down at its admission. */
static void
close_entry(struct http_conns *reg, struct http_conn_entry *e)
{
    int fd = e->sock != NULL ? bufferevent_getfd(e->sock) : -1;

    http_conns_table_write(reg, e, HTTP_CONN_CLOSING);
    if (fd >= 0) {
        (void)shutdown(fd, SHUT_RDWR);
    }
}

/* Over the per-peer share with nothing of that peer idle: a short answer, then the end. */
static void
refuse(struct http_conns *reg, struct http_conn_entry *e, int fd)
{
    static const char body[] = "{\"error\":{\"code\":\"" SANDPOOL_ERR_UNAVAILABLE
                               "\",\"message\":\"too many connections from this address\"}}\n";
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     "Cache-Control: no-store\r\nRetry-After: 1\r\nConnection: close\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     sizeof(body) - 1, body);

    /* A new socket takes these few bytes at once, or the client is gone anyway. */
    if (n > 0 && (size_t)n < sizeof(head)) {
        (void)send(fd, head, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    close_entry(reg, e);
}

/* The key of a connection's peer: "" for unix sockets (exempt), else its address, IPv6
 * addresses cut to their /64 (one host has a whole /64 to pick from). */
static void
peer_key(int fd, char *key, size_t n)
{
    struct sockaddr_storage ss = {0}; /* zeroed: the analyzer cannot see getpeername() fill it */
    socklen_t len = sizeof(ss);
    char text[INET6_ADDRSTRLEN];

    key[0] = '\0';
    if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0) {
        return;
    }
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;

        if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != NULL) {
            (void)snprintf(key, n, "%s", text);
        }
    } else if (ss.ss_family == AF_INET6) {
        struct in6_addr a = ((const struct sockaddr_in6 *)&ss)->sin6_addr;

        if (IN6_IS_ADDR_V4MAPPED(&a)) {
            if (inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof(text)) != NULL) {
                (void)snprintf(key, n, "%s", text);
            }
            return;
        }
        memset(&a.s6_addr[8], 0, 8);
        if (inet_ntop(AF_INET6, &a, text, sizeof(text)) != NULL) {
            (void)snprintf(key, n, "%s/64", text);
        }
    }
}

static bool
admit(struct http_conn_entry *e)
{
    struct http_conns *reg = e->reg;
    struct http_conn_entry *victim;
    int fd = e->sock != NULL ? bufferevent_getfd(e->sock) : -1;
    char key[PEER_KEY_MAX];

    if (e->admitted) {
        return e->standing != HTTP_CONN_CLOSING;
    }
    if (fd < 0) {
        return true; /* not connected yet: the deferred admission comes back */
    }
    if (e->standing == HTTP_CONN_CLOSING) {
        /* Closed before evhttp set its descriptor: nothing was shut down then. */
        http_conns_table_admitted(reg, e);
        (void)event_del(e->admit_ev);
        (void)shutdown(fd, SHUT_RDWR);
        update_listener(reg);
        return false;
    }
    peer_key(fd, key, sizeof(key));
    if (key[0] != '\0') {
        /* Streamed replies (SSE) write small chunks after the head: with Nagle's algorithm each
         * waits for the client's delayed ACK, 40 ms (an MCP tools/call took 42 ms at p50
         * against 4.7 ms for the same print(1) over REST). */
        int one = 1;

        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    if (http_conns_table_admit(reg, e, key, &victim) < 0) {
        uint64_t now = time_now_ms();

        reg->stats.refused_total++;
        if (now - reg->warned_peer_ms >= WARN_EVERY_MS) {
            reg->warned_peer_ms = now;
            log_warn("refused a connection from '%s': %u anonymous connections of it are busy "
                     "(http.max_connections_per_peer)",
                     key, reg->lim.per_peer);
        }
        refuse(reg, e, fd);
        update_listener(reg);
        return false;
    }
    if (victim != NULL) {
        reg->stats.evicted_peer_total++;
        close_entry(reg, victim);
    }
    (void)event_del(e->admit_ev);
    update_listener(reg); /* the last newcomer looked at: trims what passes the cap */
    return true;
}

bool
http_conns_admit(struct http_conn_entry *e)
{
    e->heard = true;
    return admit(e);
}

static void
on_admit(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn_entry *e = arg;

    if (e->sock != NULL && bufferevent_getfd(e->sock) < 0) {
        /* evhttp sets the descriptor before this turn; should it not have, the connection
         * counts as exempt rather than hold the trimming of the cap back (update_listener). */
        http_conns_table_admitted(e->reg, e);
        update_listener(e->reg);
        return;
    }
    (void)admit(e);
}

static void
bev_key(char *key, size_t n, const struct bufferevent *bev)
{
    (void)snprintf(key, n, "%p", (const void *)bev);
}

struct http_conn_entry *
http_conns_add(struct http_conns *reg, struct bufferevent *sock, struct bufferevent *filter,
               void *owner)
{
    struct http_conn_entry *e = http_conns_table_add(reg);

    e->sock = sock;
    e->filter = filter;
    e->owner = owner;
    bev_key(e->key, sizeof(e->key), filter);
    hashmap_put(reg->by_bev, e->key, e);
    /* The descriptor is set right after evhttp's bufferevent callback returns: the peer is
     * looked at on the next turn, or at its first bytes if they come first. */
    e->admit_ev = OOM_CHECK(event_new(bufferevent_get_base(sock), -1, 0, on_admit, e));
    event_active(e->admit_ev, EV_READ, 0);
    update_listener(reg); /* past the cap: paused until it is admitted, then trimmed */
    return e;
}

void
http_conns_set(struct http_conn_entry *e, enum http_conn_standing to)
{
    http_conns_table_set(e->reg, e, to);
    update_listener(e->reg);
}

bool
http_conns_closing(const struct http_conn_entry *e)
{
    return e->standing == HTTP_CONN_CLOSING;
}

void *
http_conns_find(const struct http_conns *reg, const struct bufferevent *filter)
{
    struct http_conn_entry *e;
    char key[32];

    bev_key(key, sizeof(key), filter);
    e = hashmap_get(reg->by_bev, key);
    return e != NULL ? e->owner : NULL;
}

const struct http_conns_limits *
http_conns_limits(const struct http_conns *reg)
{
    return &reg->lim;
}

/* ---- lingering close ------------------------------------------------------------------------ */

static void
reg_unref(struct http_conns *reg)
{
    if (--reg->refs == 0) {
        hashmap_free(reg->peers);
        hashmap_free(reg->by_bev);
        free(reg);
    }
}

static void
entry_free(struct http_conn_entry *e)
{
    struct http_conns *reg = e->reg;

    if (e->linger_ev != NULL) {
        event_free(e->linger_ev);
    }
    if (e->linger_fd >= 0) {
        (void)close(e->linger_fd);
    }
    if (e->admit_ev != NULL) {
        event_free(e->admit_ev);
    }
    http_conns_table_remove(reg, e);
    free(e);
    update_listener(reg);
    reg_unref(reg);
}

static void
on_linger(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn_entry *e = arg;
    char sink[16384];

    if (what & EV_TIMEOUT) {
        entry_free(e);
        return;
    }
    for (int reads = 0;; reads++) {
        ssize_t n = reads < LINGER_READS ? read(fd, sink, sizeof(sink)) : -1;

        if (n > 0) {
            continue;
        }
        if (reads == LINGER_READS) {
            errno = EAGAIN; /* a client faster than the reads: the loop serves others first */
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR) && time_now_ms() < e->linger_until_ms) {
            (void)event_add(e->linger_ev, &linger_idle);
            return;
        }
        entry_free(e); /* the client is done, gone, or took too long */
        return;
    }
}

/* The connection closes with a held body unread: evhttp has written the answer and shut down
 * the sending side. Closing now, with the client's bytes unread, would make the kernel reset the
 * connection, and the client could lose the answer; so a duplicate of the descriptor drains what
 * comes until the client closes, for LINGER_TOTAL_S at most. */
static bool
linger_start(struct http_conn_entry *e, int fd)
{
    struct http_conns *reg = e->reg;
    bool auth = e->standing == HTTP_CONN_AUTH_IDLE || e->standing == HTTP_CONN_AUTH_BUSY;

    if (reg->http_gone || fd < 0 || !auth) {
        return false; /* an anonymous client gets no descriptor of ours kept for it */
    }
    if (reg->n[HTTP_CONN_LINGERING] >= reg->lim.linger_max) {
        reg->stats.linger_skipped_total++;
        return false;
    }
    e->linger_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (e->linger_fd < 0) {
        return false;
    }
    (void)shutdown(e->linger_fd, SHUT_WR);
    e->linger_until_ms = time_now_ms() + (uint64_t)LINGER_TOTAL_S * 1000;
    e->linger_ev =
        OOM_CHECK(event_new(bufferevent_get_base(e->sock), e->linger_fd, EV_READ, on_linger, e));
    http_conns_table_write(reg, e, HTTP_CONN_LINGERING);
    (void)event_add(e->linger_ev, &linger_idle);
    return true;
}

void
http_conns_release(struct http_conn_entry *e, bool linger)
{
    int fd = e->sock != NULL ? bufferevent_getfd(e->sock) : -1;

    if (e->admit_ev != NULL) {
        event_free(e->admit_ev);
        e->admit_ev = NULL;
    }
    (void)hashmap_remove(e->reg->by_bev, e->key);
    e->owner = NULL;
    e->filter = NULL;
    if (linger && linger_start(e, fd)) {
        e->sock = NULL;
        return;
    }
    e->sock = NULL;
    entry_free(e);
}

/* ---- registry ------------------------------------------------------------------------------- */

struct http_conns *
http_conns_new(const struct http_conns_limits *lim)
{
    struct http_conns *reg = xcalloc(1, sizeof(*reg));

    reg->lim = *lim;
    reg->peers = hashmap_new();
    reg->by_bev = hashmap_new();
    for (int i = 0; i < 2; i++) {
        TAILQ_INIT(&reg->idle[i]);
    }
    TAILQ_INIT(&reg->lingers);
    TAILQ_INIT(&reg->anon_busy);
    reg->refs = 1;
    return reg;
}

void
http_conns_set_listener(struct http_conns *reg, struct evconnlistener *listener)
{
    if (reg->listener != NULL) {
        LIST_REMOVE(reg, listening);
    }
    reg->listener = listener;
    reg->paused = false; /* a new listener accepts; a gone one is nothing to resume */
    if (listener != NULL) {
        LIST_INSERT_HEAD(&listening, reg, listening);
        evconnlistener_set_error_cb(listener, on_accept_error);
    }
    update_listener(reg);
}

void
http_conns_free(struct http_conns *reg)
{
    if (reg == NULL) {
        return;
    }
    reg->http_gone = true;
    http_conns_set_listener(reg, NULL);
    if (reg->backoff != NULL) {
        event_free(reg->backoff);
        reg->backoff = NULL;
    }
    if (reg->recheck != NULL) {
        event_free(reg->recheck);
        reg->recheck = NULL;
    }
    while (!TAILQ_EMPTY(&reg->lingers)) {
        entry_free(TAILQ_FIRST(&reg->lingers));
    }
    reg_unref(reg);
}

void
http_conns_get_stats(const struct http_conns *reg, struct http_conns_stats *ret)
{
    *ret = reg->stats;
    ret->idle = reg->n[HTTP_CONN_ANON_IDLE] + reg->n[HTTP_CONN_AUTH_IDLE];
    ret->busy = reg->n[HTTP_CONN_ANON_BUSY] + reg->n[HTTP_CONN_AUTH_BUSY];
    ret->anonymous = reg->n[HTTP_CONN_ANON_IDLE] + reg->n[HTTP_CONN_ANON_BUSY];
    ret->lingering = reg->n[HTTP_CONN_LINGERING];
    ret->closing = reg->n[HTTP_CONN_CLOSING];
}
