/* SSE writer; see sse.h. Every event gets an increasing `id:` so a client can tell what it
 * missed. JSON is compact, so a data line never holds a raw newline. */
#include "sse.h"

#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "stream/out.h"
#include "util/macro.h"

struct stream_sse {
    struct stream_out *out;
    uint64_t next_id;
};

struct stream_sse *
stream_sse_start(struct evhttp_request *req, stream_sse_drained_cb *drained, void *userdata)
{
    struct stream_sse *s = xcalloc(1, sizeof(*s));
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);

    s->next_id = 1;
    (void)evhttp_add_header(h, "Content-Type", "text/event-stream; charset=utf-8");
    (void)evhttp_add_header(h, "Cache-Control", "no-store");
    (void)evhttp_add_header(h, "X-Accel-Buffering", "no"); /* proxies must not hold events */
    s->out = stream_out_start(req, 200, "OK", drained, userdata);
    return s;
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
    over = stream_out_send(s->out, b);
    evbuffer_free(b);
    return over;
}

void
stream_sse_end(struct stream_sse *s)
{
    stream_out_end(s->out, false);
    free(s);
}

void
stream_sse_abandon(struct stream_sse *s)
{
    stream_out_abandon(s->out);
    free(s);
}
