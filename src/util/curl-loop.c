/* libcurl's multi handle on libevent; see curl-loop.h. */
#include "util/curl-loop.h"

#include <stdlib.h>

#include <event2/event.h>

#include "util/macro.h"

struct curl_loop {
    struct event_base *base; /* borrowed */
    CURLM *multi;
    struct event *timer;
    curl_loop_after_cb *after;
    void *userdata;
};

struct sock_ctx {
    struct event *ev;
};

static void
on_socket_event(evutil_socket_t fd, short what, void *arg)
{
    struct curl_loop *l = arg;
    int flags = (what & EV_READ ? CURL_CSELECT_IN : 0) | (what & EV_WRITE ? CURL_CSELECT_OUT : 0);
    int running;

    (void)curl_multi_socket_action(l->multi, fd, flags, &running);
    l->after(l->userdata);
}

static void
on_timer_event(evutil_socket_t fd, short what, void *arg)
{
    struct curl_loop *l = arg;
    int running;

    (void)curl_multi_socket_action(l->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    l->after(l->userdata);
}

/* CURLMOPT_SOCKETFUNCTION: watch or forget a socket. Never calls back into curl. */
static int
on_curl_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    struct curl_loop *l = userp;
    struct sock_ctx *sc = socketp;
    short kind;

    if (what == CURL_POLL_REMOVE) {
        if (sc != NULL) {
            event_free(sc->ev);
            free(sc);
            (void)curl_multi_assign(l->multi, s, NULL);
        }
        return 0;
    }
    kind = (short)((what & CURL_POLL_IN ? EV_READ : 0) | (what & CURL_POLL_OUT ? EV_WRITE : 0) |
                   EV_PERSIST);
    if (sc == NULL) {
        sc = xcalloc(1, sizeof(*sc));
        sc->ev = OOM_CHECK(event_new(l->base, s, kind, on_socket_event, l));
        (void)curl_multi_assign(l->multi, s, sc);
    } else {
        (void)event_del(sc->ev);
        (void)event_assign(sc->ev, l->base, s, kind, on_socket_event, l);
    }
    (void)event_add(sc->ev, NULL);
    return 0;
}

/* CURLMOPT_TIMERFUNCTION: (re)arm the one timer. Must not call curl_multi_socket_action. */
static int
on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    struct curl_loop *l = userp;
    struct timeval tv;

    if (timeout_ms < 0) {
        (void)evtimer_del(l->timer);
        return 0;
    }
    tv.tv_sec = timeout_ms / 1000;
    tv.tv_usec = (timeout_ms % 1000) * 1000;
    (void)evtimer_add(l->timer, &tv);
    return 0;
}

struct curl_loop *
curl_loop_new(struct event_base *base, curl_loop_after_cb *after, void *userdata)
{
    struct curl_loop *l = xcalloc(1, sizeof(*l));

    l->base = base;
    l->after = after;
    l->userdata = userdata;
    l->multi = OOM_CHECK(curl_multi_init());
    l->timer = OOM_CHECK(evtimer_new(base, on_timer_event, l));
    (void)curl_multi_setopt(l->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    (void)curl_multi_setopt(l->multi, CURLMOPT_SOCKETDATA, l);
    (void)curl_multi_setopt(l->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    (void)curl_multi_setopt(l->multi, CURLMOPT_TIMERDATA, l);
    return l;
}

struct curl_loop *
curl_loop_free(struct curl_loop *l)
{
    if (l == NULL) {
        return NULL;
    }
    /* curl_multi_cleanup may still call on_curl_socket for the sockets it closes. */
    (void)curl_multi_cleanup(l->multi);
    event_free(l->timer);
    free(l);
    return NULL;
}

CURLM *
curl_loop_multi(const struct curl_loop *l)
{
    return l->multi;
}
