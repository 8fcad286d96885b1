/* A request answered later (handler.h): the one place that watches a client's connection for an
 * asynchronous handler, and that frees a request evhttp left to its handler.
 *
 * evhttp 2.1 calls a connection's close callback when the client goes (or the connection fails)
 * while a handler still owns the request. If the request was already being answered
 * (evhttp_connection_incoming_fail on a request the handler started replying to, a stream), evhttp
 * detached it from the connection and leaves it to the handler to free: the request's connection
 * is then NULL. Otherwise evhttp frees it with the connection. Either way the handler must never
 * touch it again, so req is cleared before the owner hears of it. */
#include <stdio.h>

#include <event2/http.h>

#include "http/handler.h"
#include "log/log.h"

_Static_assert(sizeof(((struct http_pending *)0)->request) == LOG_REQUEST_ID_MAX + 1,
               "a request id fits");

static void
on_close(struct evhttp_connection *conn, void *arg)
{
    struct http_pending *p = arg;

    if (p->req != NULL && evhttp_request_get_connection(p->req) == NULL) {
        evhttp_request_free(p->req); /* detached by evhttp and left to us */
    }
    p->req = NULL;
    p->conn = NULL;
    p->gone(p); /* last: it may free p's owner */
}

void
http_pending_start(struct http_pending *p, struct evhttp_request *req, http_pending_gone_fn *gone)
{
    p->req = req;
    p->conn = evhttp_request_get_connection(req);
    p->gone = gone;
    (void)snprintf(p->request, sizeof(p->request), "%s", log_request() ? log_request() : "");
    evhttp_connection_set_closecb(p->conn, on_close, p);
}

void
http_pending_end(struct http_pending *p)
{
    if (p->conn != NULL) {
        evhttp_connection_set_closecb(p->conn, NULL, NULL);
        p->conn = NULL;
    }
    p->req = NULL;
}

void
http_pending_handoff(struct http_pending *p)
{
    p->conn = NULL;
    p->req = NULL;
}

void
http_pending_log(const struct http_pending *p)
{
    log_set_request(p->request);
}
