/* SSE writer; see sse.h. Every event gets an increasing `id:` so a client can tell what it
 * missed. JSON is compact, so a data line never holds a raw newline. */
#include "sse.h"

#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "util/macro.h"

struct stream_sse {
    struct evhttp_request *req; /* borrowed; dead after abandon */
    uint64_t next_id;
    bool waiting; /* a drain callback is pending */
    bool ended;
    stream_sse_drained_cb *drained;
    void *userdata;
};

static size_t
backlog(struct stream_sse *s)
{
    struct evhttp_connection *c = evhttp_request_get_connection(s->req);
    struct bufferevent *bev = c != NULL ? evhttp_connection_get_bufferevent(c) : NULL;

    return bev != NULL ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

struct stream_sse *
stream_sse_start(struct evhttp_request *req, stream_sse_drained_cb *drained, void *userdata)
{
    struct stream_sse *s = xcalloc(1, sizeof(*s));
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);

    s->req = req;
    s->next_id = 1;
    s->drained = drained;
    s->userdata = userdata;
    (void)evhttp_add_header(h, "Content-Type", "text/event-stream; charset=utf-8");
    (void)evhttp_add_header(h, "Cache-Control", "no-store");
    (void)evhttp_add_header(h, "X-Accel-Buffering", "no"); /* proxies must not hold events */
    evhttp_send_reply_start(req, 200, "OK");
    return s;
}

static void
on_chunk_written(struct evhttp_connection *c, void *arg)
{
    struct stream_sse *s = arg;

    if (s->waiting && !s->ended) {
        s->waiting = false;
        s->drained(s->userdata);
    }
}

bool
stream_sse_send(struct stream_sse *s, const char *event, json_t *obj)
{
    struct evbuffer *b = OOM_CHECK(evbuffer_new());
    char *data = OOM_CHECK(json_dumps(obj, JSON_COMPACT));
    bool over;

    json_decref(obj);
    if (evbuffer_add_printf(b, "id: %llu\nevent: %s\ndata: ", (unsigned long long)s->next_id++,
                            event) < 0 ||
        evbuffer_add(b, data, strlen(data)) < 0 || evbuffer_add(b, "\n\n", 2) < 0) {
        oom();
    }
    free(data);
    over = backlog(s) + evbuffer_get_length(b) > STREAM_SSE_HIGH_WATER;
    if (over || s->waiting) {
        /* A plain send would clear the connection's write callback (evhttp keeps one): while
         * waiting, every chunk carries it, so the drain is always reported. */
        s->waiting = true;
        evhttp_send_reply_chunk_with_cb(s->req, b, on_chunk_written, s);
    } else {
        evhttp_send_reply_chunk(s->req, b);
    }
    evbuffer_free(b);
    return over;
}

void
stream_sse_end(struct stream_sse *s)
{
    s->ended = true;
    evhttp_send_reply_end(s->req);
    free(s);
}

void
stream_sse_abandon(struct stream_sse *s)
{
    free(s);
}
