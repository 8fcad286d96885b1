/* Server-sent events on an evhttp request: a chunked text/event-stream reply, one event per
 * chunk (`id:`, `event:`, `data:` with compact JSON, blank line), with backpressure.
 *
 * The writer never buffers without bound: stream_sse_send() reports when the connection's
 * output backlog passes the high-water mark, the caller stops its source, and the drained
 * callback fires once the backlog is written out. Loop context only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct evhttp_request;
struct stream_sse;

typedef struct json_t json_t;

/* Called when a backlog that passed the high-water mark has been written. */
typedef void stream_sse_drained_cb(void *userdata);

/* Sends the 200 status and headers. req is borrowed and must be alive. */
struct stream_sse *stream_sse_start(struct evhttp_request *req, stream_sse_drained_cb *drained,
                                    void *userdata);
/* Sends one event whose data is obj (stolen). Returns true when the backlog is now above the
 * high-water mark: stop producing until the drained callback. */
bool stream_sse_send(struct stream_sse *s, const char *event, json_t *obj);
/* Ends the reply and frees s. */
void stream_sse_end(struct stream_sse *s);
/* The client went away: frees s without touching the request (which is dead). */
void stream_sse_abandon(struct stream_sse *s);
