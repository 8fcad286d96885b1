/* HTTP calls to other nodes; see peer.h. */
#define LOG_MODULE "cluster"
#include "cluster/peer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <curl/curl.h>
#include <event2/event.h>

#include "log/log.h"
#include "util/curl-loop.h"
#include "util/macro.h"

#define IDLE_MAX_AGE_S 30 /* a kept connection idle longer is not reused (peers close at 60) */
#define CONNS_KEPT     64 /* connections the multi handle keeps open for reuse */

struct peer_client {
    struct curl_loop *loop;
    struct event *start_ev; /* calls that failed to start end from here */
    struct event *after_ev; /* after an unpause: what finished ends from here */
    TAILQ_HEAD(, peer_call) calls;
    struct peer_client_stats stats;
};

struct peer_call {
    TAILQ_ENTRY(peer_call) link;
    struct peer_client *c;
    CURL *easy;
    struct curl_slist *headers;
    struct peer_call_ops ops;
    void *userdata;
    int start_error; /* < 0: never added to the multi handle; ends from start_ev */
    bool added;      /* on the multi handle */
    bool recv_paused, send_paused, headed;
};

static void
call_free(struct peer_call *pc)
{
    struct peer_client *c = pc->c;

    TAILQ_REMOVE(&c->calls, pc, link);
    c->stats.in_flight--;
    if (pc->added) {
        (void)curl_multi_remove_handle(curl_loop_multi(c->loop), pc->easy);
    }
    curl_easy_cleanup(pc->easy);
    curl_slist_free_all(pc->headers);
    free(pc);
}

static int
errno_of(CURLcode rc)
{
    switch (rc) {
    case CURLE_OK:
        return 0;
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_RESOLVE_HOST:
        return -EHOSTUNREACH;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
        return -EPIPE;
    default:
        return -EIO;
    }
}

static void
end(struct peer_call *pc, int r)
{
    struct peer_client *c = pc->c;

    if (r < 0) {
        c->stats.failures++;
    }
    if (pc->added) {
        (void)curl_multi_remove_handle(curl_loop_multi(c->loop), pc->easy);
        pc->added = false;
    }
    pc->ops.on_done(r, pc->userdata);
    call_free(pc);
}

/* After every action: the finished calls end, outside libcurl. */
static void
after(void *userdata)
{
    struct peer_client *c = userdata;
    CURLMsg *m;
    int left;

    while ((m = curl_multi_info_read(curl_loop_multi(c->loop), &left)) != NULL) {
        struct peer_call *pc = NULL;

        if (m->msg != CURLMSG_DONE) {
            continue;
        }
        (void)curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&pc);
        end(pc, errno_of(m->data.result));
    }
}

static void
on_start_failed(evutil_socket_t fd, short what, void *arg)
{
    struct peer_client *c = arg;
    struct peer_call *pc, *next;

    for (pc = TAILQ_FIRST(&c->calls); pc != NULL; pc = next) {
        next = TAILQ_NEXT(pc, link);
        if (!pc->added && pc->start_error < 0) {
            end(pc, pc->start_error);
        }
    }
}

/* ---- libcurl's callbacks --------------------------------------------------------------------- */

static size_t
on_header(char *data, size_t size, size_t nmemb, void *userp)
{
    struct peer_call *pc = userp;
    size_t n = size * nmemb;
    long status = 0;

    if (!(n == 2 && data[0] == '\r' && data[1] == '\n') && !(n == 1 && data[0] == '\n')) {
        return n; /* curl keeps the header lines: peer_call_headers() reads them */
    }
    (void)curl_easy_getinfo(pc->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 200 && !pc->headed) {
        pc->headed = true;
        pc->ops.on_head(status, pc->userdata);
    }
    return n;
}

static size_t
on_write(char *data, size_t size, size_t nmemb, void *userp)
{
    struct peer_call *pc = userp;
    size_t n = size * nmemb;

    if (pc->recv_paused) {
        return CURL_WRITEFUNC_PAUSE; /* curl keeps these bytes until the resume */
    }
    if (!pc->ops.on_data(data, n, pc->userdata)) {
        pc->recv_paused = true;
    }
    return n;
}

static size_t
on_read(char *buf, size_t size, size_t nitems, void *userp)
{
    struct peer_call *pc = userp;
    size_t n = pc->ops.read_body(buf, size * nitems, pc->userdata);

    if (n == PEER_BODY_WAIT) {
        pc->send_paused = true;
        return CURL_READFUNC_PAUSE;
    }
    return n;
}

/* ---- calls ----------------------------------------------------------------------------------- */

static void
setup(struct peer_call *pc, const struct peer_request *rq)
{
    CURL *e = pc->easy;
    char line[8192];

    for (size_t i = 0; i < rq->n_headers; i++) {
        int k = snprintf(line, sizeof(line), "%s: %s", rq->headers[i].name, rq->headers[i].value);

        if (k > 0 && (size_t)k < sizeof(line)) {
            pc->headers = OOM_CHECK(curl_slist_append(pc->headers, line));
        }
    }
    /* What curl would add of its own: none of it was the client's. */
    pc->headers = OOM_CHECK(curl_slist_append(pc->headers, "Expect:"));
    (void)curl_easy_setopt(e, CURLOPT_PRIVATE, pc);
    (void)curl_easy_setopt(e, CURLOPT_URL, rq->url);
    (void)curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, rq->method);
    (void)curl_easy_setopt(e, CURLOPT_NOBODY, strcmp(rq->method, "HEAD") == 0 ? 1L : 0L);
    (void)curl_easy_setopt(e, CURLOPT_HTTPHEADER, pc->headers);
    (void)curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    (void)curl_easy_setopt(e, CURLOPT_PROXY, ""); /* never the environment's */
#if LIBCURL_VERSION_NUM >= 0x075500
    (void)curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http");
#endif
    (void)curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    (void)curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)PEER_CONNECT_MS);
    (void)curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    (void)curl_easy_setopt(e, CURLOPT_MAXAGE_CONN, (long)IDLE_MAX_AGE_S);
    (void)curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    (void)curl_easy_setopt(e, CURLOPT_HEADERDATA, pc);
    (void)curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    (void)curl_easy_setopt(e, CURLOPT_WRITEDATA, pc);
    if (rq->body_len >= 0 || rq->body_len == PEER_BODY_CHUNKED) {
        /* PEER_BODY_CHUNKED: curl's unknown size (-1), sent chunked over HTTP/1.1. */
        (void)curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
        (void)curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE,
                               (curl_off_t)(rq->body_len >= 0 ? rq->body_len : -1));
        (void)curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
        (void)curl_easy_setopt(e, CURLOPT_READDATA, pc);
    }
}

struct peer_call *
peer_call_start(struct peer_client *c, const struct peer_request *rq,
                const struct peer_call_ops *ops, void *userdata)
{
    struct peer_call *pc = xcalloc(1, sizeof(*pc));

    pc->c = c;
    pc->ops = *ops;
    pc->userdata = userdata;
    TAILQ_INSERT_TAIL(&c->calls, pc, link);
    c->stats.calls++;
    c->stats.in_flight++;
    pc->easy = OOM_CHECK(curl_easy_init());
    setup(pc, rq);
    if (curl_multi_add_handle(curl_loop_multi(c->loop), pc->easy) != CURLM_OK) {
        pc->start_error = -EIO;
        event_active(c->start_ev, EV_TIMEOUT, 0);
    } else {
        pc->added = true;
    }
    return pc;
}

/* Unpauses what is not paused any more (curl may deliver held bytes from inside). */
static void
unpause(struct peer_call *pc)
{
    struct peer_client *c = pc->c;
    int mask = (pc->recv_paused ? CURLPAUSE_RECV : 0) | (pc->send_paused ? CURLPAUSE_SEND : 0);

    if (!pc->added) {
        return;
    }
    (void)curl_easy_pause(pc->easy, mask);
    /* The unpause may have finished the call: it ends on the next turn, never inside the
     * caller's own callback (a drained stream's, a body reader's). */
    event_active(c->after_ev, EV_TIMEOUT, 0);
}

void
peer_call_resume(struct peer_call *pc)
{
    if (pc->recv_paused) {
        pc->recv_paused = false;
        unpause(pc);
    }
}

void
peer_call_body_ready(struct peer_call *pc)
{
    if (pc->send_paused) {
        pc->send_paused = false;
        unpause(pc);
    }
}

void
peer_call_cancel(struct peer_call *pc)
{
    if (pc != NULL) {
        call_free(pc);
    }
}

void
peer_call_headers(struct peer_call *pc, void (*fn)(const char *, const char *, void *), void *arg)
{
    struct curl_header *h = NULL;

    while ((h = curl_easy_nextheader(pc->easy, CURLH_HEADER, -1, h)) != NULL) {
        fn(h->name, h->value, arg);
    }
}

const char *
peer_call_header(struct peer_call *pc, const char *name)
{
    struct curl_header *h = NULL;

    return curl_easy_header(pc->easy, name, 0, CURLH_HEADER, -1, &h) == CURLHE_OK ? h->value : NULL;
}

/* ---- the client ------------------------------------------------------------------------------ */

static void
after_action(void *userdata)
{
    after(userdata);
}

static void
on_after_event(evutil_socket_t fd, short what, void *arg)
{
    after(arg);
}

struct peer_client *
peer_client_new(struct event_base *base)
{
    struct peer_client *c = xcalloc(1, sizeof(*c));

    TAILQ_INIT(&c->calls);
    c->loop = curl_loop_new(base, after_action, c);
    (void)curl_multi_setopt(curl_loop_multi(c->loop), CURLMOPT_MAXCONNECTS, (long)CONNS_KEPT);
    c->start_ev = OOM_CHECK(event_new(base, -1, 0, on_start_failed, c));
    c->after_ev = OOM_CHECK(event_new(base, -1, 0, on_after_event, c));
    return c;
}

struct peer_client *
peer_client_free(struct peer_client *c)
{
    if (c == NULL) {
        return NULL;
    }
    while (!TAILQ_EMPTY(&c->calls)) {
        call_free(TAILQ_FIRST(&c->calls));
    }
    curl_loop_free(c->loop);
    event_free(c->start_ev);
    event_free(c->after_ev);
    free(c);
    return NULL;
}

void
peer_client_get_stats(const struct peer_client *c, struct peer_client_stats *ret)
{
    *ret = c->stats;
}
