/* A streamed reply body on an evhttp request, with backpressure: chunked, or raw when the caller
 * set Content-Length before starting.
 *
 * The writer never buffers without bound: stream_out_send() reports when the connection's output
 * backlog passes the high-water mark, the caller stops its source, and the drained callback fires
 * once the backlog is written out. Loop context only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct evbuffer;
struct evhttp_request;
struct stream_out;

#define STREAM_OUT_HIGH_WATER (1u << 20)

/* Called when a backlog that passed the high-water mark has been written. */
typedef void stream_out_drained_cb(void *userdata);

/* Sends the status line and the headers set so far. req is borrowed and must be alive. */
struct stream_out *stream_out_start(struct evhttp_request *req, int status, const char *reason,
                                    stream_out_drained_cb *drained, void *userdata);
/* Sends the bytes of b (drained from it). Returns true when the backlog is now above the
 * high-water mark: stop producing until the drained callback. */
bool stream_out_send(struct stream_out *s, struct evbuffer *b);
/* Ends the reply and frees s. broken, for a reply with Content-Length whose body came short: the
 * connection closes once what was sent is out, so the client sees the loss instead of taking a
 * short body for the whole. When everything was written already, evhttp completes the reply
 * inside this call and may free the connection (running its close callback): detach from the
 * request and the connection before, and touch neither after. */
void stream_out_end(struct stream_out *s, bool broken);
/* The client went away: frees s without touching the request (which is dead). */
void stream_out_abandon(struct stream_out *s);
