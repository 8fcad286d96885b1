/* Streamed reply bodies; see out.h. */
#include "out.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "util/macro.h"

struct stream_out {
    struct evhttp_request *req; /* borrowed; dead after abandon */
    bool waiting;               /* a drain callback is pending */
    stream_out_drained_cb *drained;
    void *userdata;
};

static size_t
backlog(struct stream_out *s)
{
    struct evhttp_connection *c = evhttp_request_get_connection(s->req);
    struct bufferevent *bev = c != NULL ? evhttp_connection_get_bufferevent(c) : NULL;

    return bev != NULL ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

struct stream_out *
stream_out_start(struct evhttp_request *req, int status, const char *reason,
                 stream_out_drained_cb *drained, void *userdata)
{
    struct stream_out *s = xcalloc(1, sizeof(*s));

    s->req = req;
    s->drained = drained;
    s->userdata = userdata;
    evhttp_send_reply_start(req, status, reason);
    return s;
}

static void
on_chunk_written(struct evhttp_connection *c, void *arg)
{
    struct stream_out *s = arg;

    if (s->waiting) {
        s->waiting = false;
        s->drained(s->userdata);
    }
}

bool
stream_out_send(struct stream_out *s, struct evbuffer *b)
{
    bool over = backlog(s) + evbuffer_get_length(b) > STREAM_OUT_HIGH_WATER;

    if (over || s->waiting) {
        /* A plain send would clear the connection's write callback (evhttp keeps one): while
         * waiting, every chunk carries it, so the drain is always reported. */
        s->waiting = true;
        evhttp_send_reply_chunk_with_cb(s->req, b, on_chunk_written, s);
    } else {
        evhttp_send_reply_chunk(s->req, b);
    }
    return over;
}

void
stream_out_end(struct stream_out *s, bool broken)
{
    if (broken) {
        /* evhttp decides to close when the reply is done, from the headers as they are then. */
        (void)evhttp_add_header(evhttp_request_get_output_headers(s->req), "Connection", "close");
    }
    evhttp_send_reply_end(s->req);
    free(s);
}

void
stream_out_abandon(struct stream_out *s)
{
    free(s);
}
