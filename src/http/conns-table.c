/* The connection table: who holds which slot, pure bookkeeping under conns.c, whose opening
 * comment has the rules (1 to 3). One setter writes a connection's standing,
 * http_conns_table_write(), and keeps the idle lists, the per-peer counts and the totals in step
 * with it; the rest picks victims and admits newcomers by peer. Nothing here closes, reads or
 * writes a socket (spared() only asks one whether bytes wait). Unit-tested in
 * tests/unit/test-conns.c. */
#include "http/conns-table.h"

#include <errno.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "http/http-internal.h"
#include "util/hashmap.h"
#include "util/macro.h"
#include "util/time.h"

static bool
standing_idle(enum http_conn_standing s)
{
    return s == HTTP_CONN_ANON_IDLE || s == HTTP_CONN_AUTH_IDLE;
}

static bool
standing_anon(enum http_conn_standing s)
{
    return s == HTTP_CONN_ANON_IDLE || s == HTTP_CONN_ANON_BUSY;
}

static void
peer_unref(struct http_conns *reg, struct conn_peer *p)
{
    if (p->anon == 0) {
        (void)hashmap_remove(reg->peers, p->key);
        free(p);
    }
}

void
http_conns_table_write(struct http_conns *reg, struct http_conn_entry *e,
                       enum http_conn_standing to)
{
    enum http_conn_standing from = e->standing;

    if (standing_idle(from)) {
        TAILQ_REMOVE(&reg->idle[from == HTTP_CONN_AUTH_IDLE], e, idle_link);
    } else if (from == HTTP_CONN_LINGERING) {
        TAILQ_REMOVE(&reg->lingers, e, idle_link);
    } else if (from == HTTP_CONN_ANON_BUSY) {
        TAILQ_REMOVE(&reg->anon_busy, e, idle_link);
    }
    if (e->peer != NULL && standing_anon(from)) {
        if (from == HTTP_CONN_ANON_IDLE) {
            TAILQ_REMOVE(&e->peer->idle, e, peer_link);
        }
        e->peer->anon--;
    }
    reg->n[from]--;
    e->standing = to;
    reg->n[to]++;
    if (e->peer != NULL && standing_anon(to)) {
        e->peer->anon++;
        if (to == HTTP_CONN_ANON_IDLE) {
            TAILQ_INSERT_TAIL(&e->peer->idle, e, peer_link);
        }
    }
    if (standing_idle(to)) {
        TAILQ_INSERT_TAIL(&reg->idle[to == HTTP_CONN_AUTH_IDLE], e, idle_link);
    } else if (to == HTTP_CONN_LINGERING) {
        TAILQ_INSERT_TAIL(&reg->lingers, e, idle_link);
    } else if (to == HTTP_CONN_ANON_BUSY) {
        e->busy_since_ms = time_now_ms();
        TAILQ_INSERT_TAIL(&reg->anon_busy, e, idle_link);
    }
    if (e->peer != NULL && !standing_anon(to)) {
        struct conn_peer *p = e->peer;

        e->peer = NULL; /* authenticated or leaving: no longer its peer's */
        peer_unref(reg, p);
    }
}

enum http_conn_standing
http_conn_standing(const struct http_conn_entry *e)
{
    return e->standing;
}

struct http_conn_entry *
http_conns_table_add(struct http_conns *reg)
{
    struct http_conn_entry *e = xcalloc(1, sizeof(*e));

    e->reg = reg;
    e->linger_fd = -1;
    e->standing = HTTP_CONN_ANON_IDLE;
    e->added_ms = time_now_ms();
    reg->n[HTTP_CONN_ANON_IDLE]++;
    reg->total++;
    reg->unadmitted++;
    reg->refs++;
    TAILQ_INSERT_TAIL(&reg->idle[0], e, idle_link);
    return e;
}

void
http_conns_table_set(struct http_conns *reg, struct http_conn_entry *e, enum http_conn_standing to)
{
    if (e->standing != to && e->standing != HTTP_CONN_CLOSING &&
        e->standing != HTTP_CONN_LINGERING) {
        http_conns_table_write(reg, e, to);
    }
}

unsigned
http_conns_live(const struct http_conns *reg)
{
    return reg->total - reg->n[HTTP_CONN_CLOSING];
}

/* An idle connection whose bytes came and were not read yet is no victim: they are in its socket
 * or, with a filter, in its socket bufferevent (read on this loop turn: a burst of new
 * connections, each with its request). Bytes evhttp already took are no such thing: a head or
 * body arriving slowly is idle like any other (a client trickling a head keeps no slot that
 * way). Nor is a connection just accepted, whose descriptor is not set yet. (Pure entries of the
 * unit tests have no socket.) */
static bool
spared(const struct http_conn_entry *e)
{
    int fd = e->sock != NULL ? bufferevent_getfd(e->sock) : -1;
    int pending = 0;

    if (e->sock == NULL) {
        return false;
    }
    if (fd < 0) {
        return true; /* just accepted: evhttp sets its descriptor after http_conns_add() */
    }
    return (e->filter != NULL && evbuffer_get_length(bufferevent_get_input(e->sock)) > 0) ||
           (ioctl(fd, FIONREAD, &pending) == 0 && pending > 0);
}

/* A connection accepted less than FRESH_MS ago from which nothing came yet: a client sends its
 * request right after it connects, and a newcomer must not be closed for itself before (with
 * nothing else anonymous to close, the newcomer past the cap would be the victim). It is no
 * victim, and holds no other connection back: silent newcomers at the cap close tenants' idle
 * keep-alive connections (which reconnect) rather than leave every newcomer waiting. */
static bool
fresh(const struct http_conn_entry *e)
{
    return e->sock != NULL && !e->heard && time_now_ms() - e->added_ms < FRESH_MS;
}

/* In this order: the anonymous connection idle longest with nothing unread (a fresh() one
 * aside); the anonymous one busy longest, once it has been busy lim.anon_busy_ms (every
 * anonymous request is answered at once, so its client is not reading the reply). With none,
 * but anonymous ones busy for less or with their request unread: nobody; they turn idle or
 * closable within moments, and the cap stays passed till then (update_listener() pauses
 * accepting and trims). Only with no other anonymous connection: the authenticated one idle
 * longest with nothing unread. So an anonymous newcomer closes an authenticated connection
 * only while every anonymous one is fresh and silent. */
struct http_conn_entry *
http_conns_table_victim(const struct http_conns *reg, const struct http_conn_entry *exclude)
{
    bool anon = false;
    struct http_conn_entry *e;

    TAILQ_FOREACH (e, &reg->idle[0], idle_link) {
        if (e == exclude) {
            continue;
        }
        if (spared(e)) {
            anon = true;
        } else if (!fresh(e)) {
            return e;
        }
    }
    e = TAILQ_FIRST(&reg->anon_busy);
    if (e != NULL && e == exclude) {
        e = TAILQ_NEXT(e, idle_link);
    }
    if (e != NULL && reg->lim.anon_busy_ms > 0 &&
        time_now_ms() - e->busy_since_ms >= reg->lim.anon_busy_ms) {
        return e;
    }
    if (anon || reg->n[HTTP_CONN_ANON_BUSY] > 0) {
        return NULL;
    }
    TAILQ_FOREACH (e, &reg->idle[1], idle_link) {
        if (e != exclude && !spared(e)) {
            return e;
        }
    }
    return NULL;
}

void
http_conns_table_admitted(struct http_conns *reg, struct http_conn_entry *e)
{
    if (!e->admitted) {
        e->admitted = true;
        reg->unadmitted--;
    }
}

int
http_conns_table_admit(struct http_conns *reg, struct http_conn_entry *e, const char *peer,
                       struct http_conn_entry **ret_victim)
{
    enum http_conn_standing s = e->standing;
    struct conn_peer *p;

    *ret_victim = NULL;
    if (e->admitted || e->standing == HTTP_CONN_CLOSING) {
        return 0;
    }
    http_conns_table_admitted(reg, e);
    if (peer == NULL || peer[0] == '\0' || reg->lim.per_peer == 0 || !standing_anon(e->standing)) {
        return 0; /* exempt, or authenticated before its admission came round */
    }
    p = hashmap_get(reg->peers, peer);
    if (p == NULL) {
        p = xcalloc(1, sizeof(*p));
        TAILQ_INIT(&p->idle);
        (void)snprintf(p->key, sizeof(p->key), "%s", peer);
        hashmap_put(reg->peers, p->key, p);
    }
    if (p->anon >= reg->lim.per_peer) {
        struct http_conn_entry *v;

        TAILQ_FOREACH (v, &p->idle, peer_link) {
            if (!spared(v)) { /* a fresh one too: the address competes with itself */
                break;
            }
        }
        *ret_victim = v;
        if (v == NULL) {
            peer_unref(reg, p);
            return -EUSERS;
        }
    }
    /* Counted from now on: leave and enter the standing again, with the peer. */
    http_conns_table_write(reg, e, HTTP_CONN_CLOSING);
    e->peer = p;
    http_conns_table_write(reg, e, s);
    return 0;
}

void
http_conns_table_remove(struct http_conns *reg, struct http_conn_entry *e)
{
    http_conns_table_write(reg, e, HTTP_CONN_CLOSING); /* leaves every list and the peer */
    http_conns_table_admitted(reg, e);
    reg->n[HTTP_CONN_CLOSING]--;
    reg->total--;
}
