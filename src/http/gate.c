/* The gate of the files API: engine operations in flight per session, per tenant and in all.
 *
 * Every file operation is one `docker exec` (files/files.h), and the engine is shared by every
 * tenant: 400 concurrent listings of one tenant took another's listing from 109 to 657 ms and
 * made engine calls miss their deadlines. So an operation enters only while its session, its
 * tenant and the node are each under their bound; otherwise it waits, first come first served
 * among those that could enter, for at most HTTP_GATE_WAIT_MS, and a tenant has at most
 * per_tenant_queue waiting. Past either, it is refused: 429 quota_exceeded with Retry-After.
 * Leaving the gate lets the first waiter in that now fits (on the next loop turn, never from
 * inside http_gate_leave()): a tenant at its bound never holds up another tenant's waiter.
 *
 * Counts are by the ids of tenants and sessions (a hashmap of both, keys prefixed), so an ended
 * session needs no notice. Loop context only. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "http/http-internal.h"
#include "util/hashmap.h"
#include "util/macro.h"
#include "util/time.h"

struct gate_count {
    unsigned inflight, queued;
    char key[72];
};

struct http_gate_waiter {
    TAILQ_ENTRY(http_gate_waiter) link;
    struct http_gate *g;
    struct event *timer;
    http_gate_cb *cb;
    void *arg;
    char tenant[65], session[65];
};

/* An operation whose client left while the engine still worked on it: its slot is given back
 * HTTP_GATE_LEFT_HOLD_MS later (the engine finishes the exec it was sent, the helper sees its
 * stream end), so clients that hang up at once cannot have more in flight than the bounds. */
struct gate_leaver {
    TAILQ_ENTRY(gate_leaver) link;
    struct http_gate *g;
    struct event *timer;
    char tenant[65], session[65];
};

struct http_gate {
    struct http_gate_limits lim;
    TAILQ_HEAD(, gate_leaver) leavers;
    struct event *kick; /* lets waiters in, outside the leave that made room */
    struct hashmap *counts;
    TAILQ_HEAD(, http_gate_waiter) waiters;
    unsigned inflight;
    struct http_gate_stats stats;
};

static struct gate_count *
count_of(struct http_gate *g, char kind, const char *id, bool create)
{
    char key[72];
    struct gate_count *c;

    (void)snprintf(key, sizeof(key), "%c:%s", kind, id);
    c = hashmap_get(g->counts, key);
    if (c == NULL && create) {
        c = xcalloc(1, sizeof(*c));
        memcpy(c->key, key, sizeof(key));
        hashmap_put(g->counts, c->key, c);
    }
    return c;
}

static void
count_drop(struct http_gate *g, struct gate_count *c)
{
    if (c != NULL && c->inflight == 0 && c->queued == 0) {
        (void)hashmap_remove(g->counts, c->key);
        free(c);
    }
}

static bool
fits(struct http_gate *g, const char *tenant, const char *session)
{
    struct gate_count *t = count_of(g, 't', tenant, false);
    struct gate_count *s = count_of(g, 's', session, false);

    return g->inflight < g->lim.max && (t == NULL || t->inflight < g->lim.per_tenant) &&
           (s == NULL || s->inflight < g->lim.per_session);
}

static void
enter(struct http_gate *g, const char *tenant, const char *session)
{
    g->inflight++;
    count_of(g, 't', tenant, true)->inflight++;
    count_of(g, 's', session, true)->inflight++;
}

static void
waiter_free(struct http_gate_waiter *w)
{
    struct http_gate *g = w->g;
    struct gate_count *t = count_of(g, 't', w->tenant, false);

    TAILQ_REMOVE(&g->waiters, w, link);
    if (t != NULL) {
        t->queued--;
        count_drop(g, t);
    }
    event_free(w->timer);
    free(w);
}

static void
on_wait_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct http_gate_waiter *w = arg;
    http_gate_cb *cb = w->cb;
    void *cb_arg = w->arg;

    w->g->stats.refused_total++;
    waiter_free(w);
    cb(-EDQUOT, cb_arg);
}

/* Lets in every waiter that fits now, in the order they came. */
static void
on_kick(evutil_socket_t fd, short what, void *arg)
{
    struct http_gate *g = arg;
    struct http_gate_waiter *w, *next;

    for (w = TAILQ_FIRST(&g->waiters); w != NULL && g->inflight < g->lim.max; w = next) {
        next = TAILQ_NEXT(w, link);
        if (fits(g, w->tenant, w->session)) {
            http_gate_cb *cb = w->cb;
            void *cb_arg = w->arg;

            enter(g, w->tenant, w->session);
            waiter_free(w);
            cb(0, cb_arg);
            /* The callback may have left the gate again (its session ended): go on from the
             * start, as the list may have changed under us. */
            next = TAILQ_FIRST(&g->waiters);
        }
    }
}

struct http_gate *
http_gate_new(struct event_base *base, const struct http_gate_limits *lim)
{
    struct http_gate *g = xcalloc(1, sizeof(*g));

    g->lim = *lim;
    g->kick = OOM_CHECK(event_new(base, -1, 0, on_kick, g));
    g->counts = hashmap_new();
    TAILQ_INIT(&g->waiters);
    TAILQ_INIT(&g->leavers);
    return g;
}

void
http_gate_free(struct http_gate *g)
{
    if (g == NULL) {
        return;
    }
    while (!TAILQ_EMPTY(&g->waiters)) {
        waiter_free(TAILQ_FIRST(&g->waiters)); /* their requests are being freed too */
    }
    while (!TAILQ_EMPTY(&g->leavers)) {
        struct gate_leaver *l = TAILQ_FIRST(&g->leavers);

        TAILQ_REMOVE(&g->leavers, l, link);
        event_free(l->timer);
        free(l);
    }
    event_free(g->kick);
    hashmap_free_with(g->counts, free); /* counts of operations in flight go with it */
    free(g);
}

int
http_gate_enter(struct http_gate *g, const char *tenant, const char *session, http_gate_cb *cb,
                void *arg, struct http_gate_waiter **ret)
{
    struct gate_count *t;
    struct http_gate_waiter *w;
    struct timeval tv;

    *ret = NULL;
    /* Nobody overtakes a waiter that fits as well: the queue goes first. */
    if (fits(g, tenant, session) && TAILQ_EMPTY(&g->waiters)) {
        enter(g, tenant, session);
        return 0;
    }
    t = count_of(g, 't', tenant, true);
    if (t->queued >= g->lim.per_tenant_queue) {
        g->stats.refused_total++;
        count_drop(g, t);
        return -EDQUOT;
    }
    t->queued++;
    w = xcalloc(1, sizeof(*w));
    w->g = g;
    w->cb = cb;
    w->arg = arg;
    (void)snprintf(w->tenant, sizeof(w->tenant), "%s", tenant);
    (void)snprintf(w->session, sizeof(w->session), "%s", session);
    w->timer = OOM_CHECK(evtimer_new(event_get_base(g->kick), on_wait_timeout, w));
    time_tv_from_ms(&tv, HTTP_GATE_WAIT_MS);
    (void)evtimer_add(w->timer, &tv);
    TAILQ_INSERT_TAIL(&g->waiters, w, link);
    g->stats.queued_total++;
    if (fits(g, tenant, session)) {
        event_active(g->kick, EV_READ, 0); /* queued behind waiters that may not fit */
    }
    *ret = w;
    return 1;
}

void
http_gate_cancel(struct http_gate_waiter *w)
{
    if (w != NULL) {
        waiter_free(w);
    }
}

void
http_gate_leave(struct http_gate *g, const char *tenant, const char *session)
{
    struct gate_count *t = count_of(g, 't', tenant, false);
    struct gate_count *s = count_of(g, 's', session, false);

    if (t == NULL || s == NULL || t->inflight == 0 || s->inflight == 0 || g->inflight == 0) {
        return; /* not in: nothing to give back */
    }
    g->inflight--;
    t->inflight--;
    s->inflight--;
    count_drop(g, t);
    count_drop(g, s);
    if (!TAILQ_EMPTY(&g->waiters)) {
        event_active(g->kick, EV_READ, 0);
    }
}

static void
on_left(evutil_socket_t fd, short what, void *arg)
{
    struct gate_leaver *l = arg;

    TAILQ_REMOVE(&l->g->leavers, l, link);
    http_gate_leave(l->g, l->tenant, l->session);
    event_free(l->timer);
    free(l);
}

void
http_gate_leave_later(struct http_gate *g, const char *tenant, const char *session)
{
    struct gate_leaver *l = xcalloc(1, sizeof(*l));
    struct timeval tv;

    l->g = g;
    (void)snprintf(l->tenant, sizeof(l->tenant), "%s", tenant);
    (void)snprintf(l->session, sizeof(l->session), "%s", session);
    l->timer = OOM_CHECK(evtimer_new(event_get_base(g->kick), on_left, l));
    time_tv_from_ms(&tv, HTTP_GATE_LEFT_HOLD_MS);
    (void)evtimer_add(l->timer, &tv);
    TAILQ_INSERT_TAIL(&g->leavers, l, link);
}

void
http_gate_get_stats(const struct http_gate *g, struct http_gate_stats *ret)
{
    const struct http_gate_waiter *w;

    *ret = g->stats;
    ret->inflight = g->inflight;
    ret->waiting = 0;
    TAILQ_FOREACH (w, &g->waiters, link) {
        ret->waiting++;
    }
}
