/* HTTP calls to other nodes; see peer.h. Each call is one transfer of the peer client's libcurl
 * engine (util/transfer.h), which gives it its lifecycle (one on_done, never from the starting
 * call, never after a cancel; pauses both ways); what is the forwarder's own is here: the
 * request as given (method, headers, a body streamed or none), plain http without the
 * environment's proxy, kept connections, and its errors as peer.h names them. */
#define LOG_MODULE "cluster"
#include "cluster/peer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "util/macro.h"
#include "util/transfer.h"

#define IDLE_MAX_AGE_S 30 /* a kept connection idle longer is not reused (peers close at 60) */
#define CONNS_KEPT     64 /* connections the multi handle keeps open for reuse */

struct peer_client {
    struct transfer_engine *engine;
    struct peer_client_stats stats;
};

struct peer_call {
    struct peer_client *c;
    struct transfer *t;
    struct peer_call_ops ops;
    void *userdata;
};

/* ---- the transfer's callbacks ---------------------------------------------------------------- */

static void
on_head(struct transfer *t, long status, void *userdata)
{
    struct peer_call *pc = userdata;

    pc->ops.on_head(status, pc->userdata);
}

static enum transfer_data
on_data(struct transfer *t, const char *data, size_t n, void *userdata)
{
    struct peer_call *pc = userdata;

    return pc->ops.on_data(data, n, pc->userdata) ? TRANSFER_DATA_TAKEN : TRANSFER_DATA_FULL;
}

static size_t
read_body(struct transfer *t, char *buf, size_t n, void *userdata)
{
    struct peer_call *pc = userdata;
    size_t k = pc->ops.read_body(buf, n, pc->userdata);

    return k == PEER_BODY_WAIT ? TRANSFER_BODY_WAIT : k;
}

static void
on_done(struct transfer *t, int r, void *userdata)
{
    struct peer_call *pc = userdata;

    if (r == -ECONNRESET) {
        r = -EPIPE; /* peer.h's word for a connection that broke */
    }
    if (r < 0) {
        pc->c->stats.failures++;
    }
    pc->ops.on_done(r, pc->userdata);
}

static void
on_free(void *userdata)
{
    struct peer_call *pc = userdata;

    pc->c->stats.in_flight--;
    free(pc);
}

static const struct transfer_ops call_ops = {
    .on_head = on_head,
    .on_data = on_data,
    .read_body = read_body,
    .on_done = on_done,
    .on_free = on_free,
};

/* ---- calls ----------------------------------------------------------------------------------- */

static void
setup(struct peer_call *pc, const struct peer_request *rq)
{
    CURL *e = transfer_easy(pc->t);
    char line[8192];

    for (size_t i = 0; i < rq->n_headers; i++) {
        int k = snprintf(line, sizeof(line), "%s: %s", rq->headers[i].name, rq->headers[i].value);

        if (k > 0 && (size_t)k < sizeof(line)) {
            transfer_add_header(pc->t, line);
        }
    }
    /* What curl would add of its own: none of it was the client's. */
    transfer_add_header(pc->t, "Expect:");
    transfer_upload(pc->t, rq->method,
                    rq->body_len == PEER_BODY_CHUNKED ? TRANSFER_BODY_CHUNKED : rq->body_len);
    (void)curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    (void)curl_easy_setopt(e, CURLOPT_PROXY, ""); /* never the environment's */
#if LIBCURL_VERSION_NUM >= 0x075500
    (void)curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http");
#endif
    (void)curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    (void)curl_easy_setopt(e, CURLOPT_MAXAGE_CONN, (long)IDLE_MAX_AGE_S);
}

struct peer_call *
peer_call_start(struct peer_client *c, const struct peer_request *rq,
                const struct peer_call_ops *ops, void *userdata)
{
    struct peer_call *pc = xcalloc(1, sizeof(*pc));

    pc->c = c;
    pc->ops = *ops;
    pc->userdata = userdata;
    c->stats.calls++;
    c->stats.in_flight++;
    /* A connect deadline of its own (a host that is gone never refuses), none in total: an
     * execution's stream lasts as long as it lasts. */
    pc->t = transfer_new(c->engine, &(struct transfer_opts){
                                        .url = rq->url,
                                        .connect_ms = PEER_CONNECT_MS,
                                        .ops = &call_ops,
                                        .userdata = pc,
                                    });
    setup(pc, rq);
    transfer_start(pc->t);
    return pc;
}

void
peer_call_resume(struct peer_call *pc)
{
    transfer_resume(pc->t);
}

void
peer_call_body_ready(struct peer_call *pc)
{
    transfer_body_ready(pc->t);
}

void
peer_call_cancel(struct peer_call *pc)
{
    if (pc != NULL) {
        transfer_cancel(pc->t);
    }
}

void
peer_call_headers(struct peer_call *pc, void (*fn)(const char *, const char *, void *), void *arg)
{
    struct curl_header *h = NULL;

    while ((h = curl_easy_nextheader(transfer_easy(pc->t), CURLH_HEADER, -1, h)) != NULL) {
        fn(h->name, h->value, arg);
    }
}

const char *
peer_call_header(struct peer_call *pc, const char *name)
{
    struct curl_header *h = NULL;

    return curl_easy_header(transfer_easy(pc->t), name, 0, CURLH_HEADER, -1, &h) == CURLHE_OK
               ? h->value
               : NULL;
}

/* ---- the client ------------------------------------------------------------------------------ */

struct peer_client *
peer_client_new(struct event_base *base)
{
    struct peer_client *c = xcalloc(1, sizeof(*c));

    c->engine = transfer_engine_new(base, CONNS_KEPT);
    return c;
}

struct peer_client *
peer_client_free(struct peer_client *c)
{
    if (c == NULL) {
        return NULL;
    }
    transfer_engine_free(c->engine);
    free(c);
    return NULL;
}

void
peer_client_get_stats(const struct peer_client *c, struct peer_client_stats *ret)
{
    *ret = c->stats;
}
