/* Calls that need a session's container running: a paused session (session.h, "pause") is
 * resumed first and the handler runs again once it is live, so that the client gets the call's
 * own answer, not an error (docs/hibernate.md). While it waits the request is held: its
 * connection's close cancels the wait (the resume goes on for nobody). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/http.h>

#include "http/http-internal.h"
#include "log/log.h"
#include "session/session.h"
#include "util/macro.h"

struct live_wait {
    struct http_pending pending;
    struct http *a;
    http_handler_fn *handler;
    struct session_waiter *w;
    char *params[2]; /* the route's first two (NULL: none) */
};

static void
live_wait_free(struct live_wait *lw)
{
    free(lw->params[0]);
    free(lw->params[1]);
    free(lw);
}

static void
on_gone(struct http_pending *p)
{
    struct live_wait *lw = container_of(p, struct live_wait, pending);

    session_waiter_cancel(lw->w);
    live_wait_free(lw);
}

static void
on_live(int r, const struct err *e, void *userdata)
{
    struct live_wait *lw = userdata;
    struct evhttp_request *req = lw->pending.req;
    const char *params[3] = {lw->params[0], lw->params[1], NULL};

    http_pending_end(&lw->pending);
    http_pending_log(&lw->pending);
    if (r < 0) {
        http_reply_error(req, r, "%s", e != NULL ? err_msg(e) : strerror(-r));
    } else {
        lw->handler(lw->a, req, params); /* it finds the session live now */
    }
    log_set_request(NULL);
    live_wait_free(lw);
}

int
http_live_wait(struct http *a, struct evhttp_request *req, struct session *s,
               const char *const *params, http_handler_fn *self, struct err *reterr)
{
    struct live_wait *lw = xcalloc(1, sizeof(*lw));
    int r = session_ensure_live(s, on_live, lw, &lw->w, reterr);

    if (r <= 0) {
        free(lw);
        return r;
    }
    session_touch(s); /* the call is activity, whether it waits or not */
    lw->a = a;
    lw->handler = self;
    for (size_t i = 0; i < 2; i++) {
        lw->params[i] = params[i] != NULL ? xstrdup(params[i]) : NULL;
    }
    http_pending_start(&lw->pending, req, on_gone);
    return 1;
}

struct session *
http_session_live(struct http *a, struct evhttp_request *req, const char *const *params,
                  http_handler_fn *self, struct http_actor *ret)
{
    struct session *s = http_session_for(a, req, params[0], ret);
    const char *p[2] = {params[0], NULL};
    struct err e = {0};
    int r;

    if (s == NULL) {
        return NULL;
    }
    r = http_live_wait(a, req, s, p, self, &e);
    if (r < 0) {
        http_reply_error(req, e.code, "%s", e.msg);
    }
    return r == 0 ? s : NULL;
}
