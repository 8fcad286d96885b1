/* Redis connection with deadlines and reconnection; see redis.h.
 *
 * Lifetime rules from hiredis 0.14 (async.c, README):
 *  - every command callback is called exactly once: with the reply, or with NULL when the
 *    context is freed or disconnected; so each command's `struct pending` is freed only there;
 *  - after a failed connect or any disconnect the library frees the context itself, right after
 *    our connect/disconnect callback; we only forget the pointer;
 *  - redisAsyncFree from inside a hiredis callback is deferred by hiredis (REDIS_IN_CALLBACK).
 * A pending command whose deadline passes is answered -ETIMEDOUT at once and marked `done`;
 * hiredis' later callback for it (reply or NULL) then only frees it. The connection is dropped on
 * the first timeout: a wedged connection would stall every command queued behind it.
 * Disconnecting from a timer is outside hiredis' callbacks, so it takes effect immediately. */
#include "redis.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "util/macro.h"
#include "util/time.h"

#define RETRY_MIN_MS 100u
#define RETRY_MAX_MS 5000u
#define MAX_ARGS     64

enum link_state {
    LINK_DOWN,
    LINK_CONNECTING,
    LINK_UP,
};

struct pending {
    struct store_redis *store;
    struct event *deadline;
    store_redis_reply_cb *cb;
    void *userdata;
    bool done; /* the caller has been answered */
};

struct store_redis {
    struct event_base *base; /* borrowed */
    struct cfg_redis_addr addr;
    unsigned timeout_ms;
    redisAsyncContext *ac; /* owned by hiredis once attached; NULL while down */
    enum link_state state;
    unsigned backoff_ms;
    struct event *retry;
    unsigned pending;
    uint64_t commands, timeouts, reconnects;
    uint64_t errors; /* sent commands answered with an error reply, a timeout or a lost link */
    struct event *connect_timer;
    struct evdns_base *dns; /* created on first use, for redis://NAME:PORT */
    struct evdns_getaddrinfo_request *dns_req;
    bool freeing;
    char why[192];
    store_redis_state_cb *on_state;
    void *userdata;
};

static void connect_now(struct store_redis *s);

static void
answer(struct pending *p, int r, redisReply *reply)
{
    if (p->done) {
        return;
    }
    p->done = true;
    (void)event_del(p->deadline);
    if ((r < 0 && r != -ECANCELED) || (r == 0 && reply->type == REDIS_REPLY_ERROR)) {
        p->store->errors++;
    }
    if (p->cb != NULL) {
        p->cb(r, reply, p->userdata);
    }
}

static void
on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct pending *p = privdata;
    struct store_redis *s = p->store;

    answer(p, reply ? 0 : (s->freeing ? -ECANCELED : -ENOTCONN), reply);
    s->pending--;
    event_free(p->deadline);
    free(p);
}

static void
set_down(struct store_redis *s, const char *why)
{
    struct timeval tv;
    bool was_up = s->state == LINK_UP;

    (void)event_del(s->connect_timer);
    s->state = LINK_DOWN;
    s->ac = NULL;
    (void)snprintf(s->why, sizeof(s->why), "%s", why);
    if (s->freeing) {
        return;
    }
    s->backoff_ms = MIN(MAX(s->backoff_ms * 2, RETRY_MIN_MS), RETRY_MAX_MS);
    time_tv_from_ms(&tv, s->backoff_ms);
    (void)evtimer_add(s->retry, &tv);
    if (was_up && s->on_state != NULL) {
        s->on_state(false, s->why, s->userdata);
    }
}

static void
set_up(struct store_redis *s)
{
    (void)event_del(s->connect_timer);
    s->state = LINK_UP;
    s->backoff_ms = 0;
    s->why[0] = '\0';
    if (s->on_state != NULL) {
        s->on_state(true, "", s->userdata);
    }
}

static void
on_select(int r, redisReply *reply, void *userdata)
{
    struct store_redis *s = userdata;

    if (r == 0 && reply->type != REDIS_REPLY_ERROR) {
        set_up(s);
        return;
    }
    /* Stay out of UP: no user command may run in the wrong database. */
    if (r == 0 && s->ac != NULL) {
        (void)snprintf(s->why, sizeof(s->why), "redis refused SELECT %u: %.120s", s->addr.db,
                       reply->str ? reply->str : "error");
        redisAsyncDisconnect(s->ac);
    }
}

static int command_argv(struct store_redis *s, store_redis_reply_cb *cb, void *userdata, int argc,
                        const char **argv, const size_t *argvlen);

static void
on_connect(const redisAsyncContext *ac, int status)
{
    struct store_redis *s = ac->data;
    char why[192];

    if (status != REDIS_OK) {
        (void)snprintf(why, sizeof(why), "cannot connect to redis: %s", ac->errstr);
        set_down(s, why); /* hiredis frees ac after this callback */
        return;
    }
    if (s->addr.db == 0) {
        set_up(s);
        return;
    }
    /* Still CONNECTING: user commands are refused until the database is selected. */
    char db[16];
    const char *argv[] = {"SELECT", db};
    size_t lens[2] = {6, 0};

    (void)snprintf(db, sizeof(db), "%u", s->addr.db);
    lens[1] = strlen(db);
    if (command_argv(s, on_select, s, 2, argv, lens) < 0 && s->ac != NULL) {
        redisAsyncDisconnect(s->ac);
    }
}

static void
on_disconnect(const redisAsyncContext *ac, int status)
{
    struct store_redis *s = ac->data;
    char why[192];

    if (s->state == LINK_CONNECTING && s->why[0] != '\0') {
        (void)snprintf(why, sizeof(why), "%s", s->why); /* e.g. the SELECT refusal */
    } else {
        (void)snprintf(why, sizeof(why), "redis connection lost: %s",
                       status == REDIS_OK ? "closed" : ac->errstr);
    }
    s->reconnects++;
    set_down(s, why);
}

/* Connects to a unix path or a numeric address: neither resolves names, so nothing blocks. */
static void
connect_to(struct store_redis *s, const char *ip)
{
    redisAsyncContext *ac;
    char why[192];

    ac = ip == NULL ? redisAsyncConnectUnix(s->addr.path) : redisAsyncConnect(ip, s->addr.port);
    if (ac == NULL) {
        oom();
    }
    if (ac->err) {
        (void)snprintf(why, sizeof(why), "cannot connect to redis: %s", ac->errstr);
        redisAsyncFree(ac);
        set_down(s, why);
        return;
    }
    ac->data = s;
    if (redisLibeventAttach(ac, s->base) != REDIS_OK) {
        redisAsyncFree(ac);
        set_down(s, "cannot attach redis to the event loop");
        return;
    }
    (void)redisAsyncSetConnectCallback(ac, on_connect);
    (void)redisAsyncSetDisconnectCallback(ac, on_disconnect);
    s->ac = ac;
}

static void
on_resolved(int result, struct evutil_addrinfo *res, void *arg)
{
    struct store_redis *s = arg;
    char ip[INET6_ADDRSTRLEN] = "";
    char why[192];

    s->dns_req = NULL;
    if (s->freeing || s->state != LINK_CONNECTING || s->ac != NULL) {
        if (res != NULL) {
            evutil_freeaddrinfo(res);
        }
        return; /* cancelled, or the connect deadline passed */
    }
    if (result != 0 || res == NULL) {
        (void)snprintf(why, sizeof(why), "cannot resolve redis host '%.100s': %s", s->addr.host,
                       evutil_gai_strerror(result));
        set_down(s, why);
        return;
    }
    if (res->ai_family == AF_INET) {
        (void)evutil_inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, ip,
                               sizeof(ip));
    } else {
        (void)evutil_inet_ntop(AF_INET6, &((struct sockaddr_in6 *)res->ai_addr)->sin6_addr, ip,
                               sizeof(ip));
    }
    evutil_freeaddrinfo(res);
    connect_to(s, ip);
}

static void
connect_now(struct store_redis *s)
{
    struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct in6_addr a6;
    struct in_addr a4;
    struct timeval tv;

    s->state = LINK_CONNECTING;
    s->why[0] = '\0';
    time_tv_from_ms(&tv, MAX(s->timeout_ms, 1000u));
    (void)evtimer_add(s->connect_timer, &tv);
    if (s->addr.path[0] != '\0') {
        connect_to(s, NULL);
    } else if (evutil_inet_pton(AF_INET, s->addr.host, &a4) == 1 ||
               evutil_inet_pton(AF_INET6, s->addr.host, &a6) == 1) {
        connect_to(s, s->addr.host);
    } else {
        /* hiredis 0.14 would call getaddrinfo() on the loop: resolve asynchronously first. The
         * callback may run before evdns_getaddrinfo() returns. */
        struct evdns_getaddrinfo_request *req;

        if (s->dns == NULL) {
            s->dns = OOM_CHECK(evdns_base_new(s->base, EVDNS_BASE_INITIALIZE_NAMESERVERS));
        }
        req = evdns_getaddrinfo(s->dns, s->addr.host, NULL, &hints, on_resolved, s);
        if (s->state == LINK_CONNECTING && s->ac == NULL) {
            s->dns_req = req;
        }
    }
}

/* Connecting (resolving, TCP handshake or SELECT) took too long. */
static void
on_connect_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct store_redis *s = arg;
    char why[192];

    if (s->state != LINK_CONNECTING) {
        return;
    }
    (void)snprintf(why, sizeof(why), "connecting to redis timed out after %u ms",
                   MAX(s->timeout_ms, 1000u));
    if (s->dns_req != NULL) {
        struct evdns_getaddrinfo_request *req = s->dns_req;

        s->dns_req = NULL;
        evdns_getaddrinfo_cancel(req); /* its callback sees the state and does nothing */
    }
    if (s->ac != NULL) {
        redisAsyncContext *ac = s->ac;

        s->ac = NULL;
        redisAsyncFree(ac); /* outside hiredis callbacks: immediate; pending get NULL */
    }
    if (s->state != LINK_DOWN) {
        set_down(s, why);
    }
}

static void
on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct store_redis *s = arg;

    if (s->state == LINK_DOWN && !s->freeing) {
        connect_now(s);
    }
}

static void
on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct pending *p = arg;
    struct store_redis *s = p->store;

    s->timeouts++;
    answer(p, -ETIMEDOUT, NULL);
    /* Drop the wedged connection. redisAsyncDisconnect would wait for the pending replies, so
     * free it instead: we are outside hiredis' callbacks, so every pending command (this one
     * included) gets its NULL callback now, which frees it; on_disconnect runs only if the link
     * was up, hence the explicit set_down. */
    if (s->ac != NULL) {
        redisAsyncContext *ac = s->ac;
        char why[192];

        (void)snprintf(why, sizeof(why), "redis command timed out after %u ms", s->timeout_ms);
        s->ac = NULL;
        redisAsyncFree(ac);
        if (s->state != LINK_DOWN) {
            set_down(s, why);
        } else {
            (void)snprintf(s->why, sizeof(s->why), "%s", why);
        }
    }
}

/* Sends a command on the current connection, whatever its state (SELECT during CONNECTING). */
static int
command_argv(struct store_redis *s, store_redis_reply_cb *cb, void *userdata, int argc,
             const char **argv, const size_t *argvlen)
{
    struct pending *p;
    struct timeval tv;

    if (s->ac == NULL || s->freeing) {
        return -ENOTCONN;
    }
    p = xcalloc(1, sizeof(*p));
    p->store = s;
    p->cb = cb;
    p->userdata = userdata;
    p->deadline = OOM_CHECK(evtimer_new(s->base, on_deadline, p));
    if (redisAsyncCommandArgv(s->ac, on_reply, p, argc, argv, argvlen) != REDIS_OK) {
        event_free(p->deadline);
        free(p);
        return -ENOTCONN;
    }
    s->commands++;
    s->pending++;
    time_tv_from_ms(&tv, s->timeout_ms);
    (void)evtimer_add(p->deadline, &tv);
    return 0;
}

int
store_redis_command(struct store_redis *s, store_redis_reply_cb *cb, void *userdata, int argc,
                    const char **argv, const size_t *argvlen)
{
    if (s->state != LINK_UP) {
        return -ENOTCONN;
    }
    return command_argv(s, cb, userdata, argc, argv, argvlen);
}

int
store_redis_commandv(struct store_redis *s, store_redis_reply_cb *cb, void *userdata, ...)
{
    const char *argv[MAX_ARGS];
    size_t lens[MAX_ARGS];
    int argc = 0;
    const char *a;
    va_list ap;

    va_start(ap, userdata);
    while ((a = va_arg(ap, const char *)) != NULL) {
        if (argc == MAX_ARGS) {
            va_end(ap);
            return -E2BIG;
        }
        argv[argc] = a;
        lens[argc++] = strlen(a);
    }
    va_end(ap);
    return store_redis_command(s, cb, userdata, argc, argv, lens);
}

struct store_redis *
store_redis_new(struct event_base *base, const struct cfg_redis_addr *addr, unsigned timeout_ms,
                store_redis_state_cb *on_state, void *userdata)
{
    struct store_redis *s = xcalloc(1, sizeof(*s));

    s->base = base;
    s->addr = *addr;
    s->timeout_ms = timeout_ms;
    s->on_state = on_state;
    s->userdata = userdata;
    s->retry = OOM_CHECK(evtimer_new(base, on_retry, s));
    s->connect_timer = OOM_CHECK(evtimer_new(base, on_connect_timeout, s));
    connect_now(s);
    return s;
}

struct store_redis *
store_redis_free(struct store_redis *s)
{
    if (s == NULL) {
        return NULL;
    }
    s->freeing = true;
    if (s->ac != NULL) {
        redisAsyncContext *ac = s->ac;

        s->ac = NULL;
        redisAsyncFree(ac); /* pending callbacks run now, with NULL: -ECANCELED */
    }
    if (s->dns_req != NULL) {
        evdns_getaddrinfo_cancel(s->dns_req);
        s->dns_req = NULL;
    }
    if (s->dns != NULL) {
        evdns_base_free(s->dns, 1);
    }
    event_free(s->retry);
    event_free(s->connect_timer);
    free(s);
    return NULL;
}

bool
store_redis_is_up(const struct store_redis *s)
{
    return s->state == LINK_UP;
}

const char *
store_redis_why(const struct store_redis *s)
{
    return s->why;
}

void
store_redis_set_timeout(struct store_redis *s, unsigned timeout_ms)
{
    s->timeout_ms = timeout_ms;
}

void
store_redis_get_stats(const struct store_redis *s, struct store_redis_stats *ret)
{
    ret->commands = s->commands;
    ret->timeouts = s->timeouts;
    ret->reconnects = s->reconnects;
    ret->errors = s->errors;
    ret->pending = s->pending;
}

int
store_redis_hash(const redisReply *h, store_redis_hash_parse *parse, void *rec)
{
    const char **kv;
    size_t *lens;
    int r;

    if (h->type != REDIS_REPLY_ARRAY) {
        return -EPROTO;
    }
    if (h->elements == 0) {
        return -ENOENT;
    }
    kv = xcalloc(h->elements, sizeof(*kv));
    lens = xcalloc(h->elements, sizeof(*lens));
    for (size_t k = 0; k < h->elements; k++) {
        kv[k] = h->element[k]->str ? h->element[k]->str : "";
        lens[k] = h->element[k]->str ? h->element[k]->len : 0;
    }
    r = parse(kv, lens, h->elements, rec);
    free(kv);
    free(lens);
    return r;
}
