/* HTTP calls to other nodes of the cluster (the forwarder's, src/http/forward.c): libcurl on the
 * loop (util/curl-loop.h), every byte streamed both ways with backpressure, connections kept per
 * peer and reused, a connect deadline of its own (a host that is gone never refuses), no total
 * deadline (an execution's stream lasts as long as it lasts), no proxy from the environment,
 * plain http only. Loop context only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct event_base;
struct peer_client;
struct peer_call;

#define PEER_CONNECT_MS   3000u /* a peer must take the connection within this */
#define PEER_BODY_WAIT    ((size_t)-1)
#define PEER_BODY_CHUNKED (-2)

struct peer_header {
    const char *name, *value;
};

/* on_head, on_data and read_body run inside libcurl: they must not start, cancel or resume a
 * call. on_done runs outside, and may. */
struct peer_call_ops {
    /* The answer's status and headers (interim 1xx answers are skipped): peer_call_headers()
     * reads them, during this call only. */
    void (*on_head)(long status, void *userdata);
    /* Bytes of the answer's body, all taken; false: no more until peer_call_resume(). */
    bool (*on_data)(const char *data, size_t n, void *userdata);
    /* The request's body: up to n bytes into buf; returns how many, 0 at its end, or
     * PEER_BODY_WAIT for none now (then peer_call_body_ready() when there are). */
    size_t (*read_body)(char *buf, size_t n, void *userdata);
    /* The call is over: 0 (the whole answer came), or -ECONNREFUSED (nobody listens),
     * -ETIMEDOUT (no connection within PEER_CONNECT_MS), -EHOSTUNREACH (its name does not
     * resolve), -EPIPE (the connection broke), -EIO. The call is freed after it returns. */
    void (*on_done)(int r, void *userdata);
};

struct peer_request {
    const char *method;
    const char *url; /* "http://host:port/path?query" */
    const struct peer_header *headers;
    size_t n_headers;
    /* -1: no body; PEER_BODY_CHUNKED: one of a length not known yet (sent chunked); else
     * exactly this many bytes come from read_body */
    int64_t body_len;
};

struct peer_client_stats {
    uint64_t calls, failures;
    unsigned in_flight;
};

struct peer_client *peer_client_new(struct event_base *base);
/* Calls in flight end without their callbacks. Accepts NULL. */
struct peer_client *peer_client_free(struct peer_client *c);
void peer_client_get_stats(const struct peer_client *c, struct peer_client_stats *ret);

/* Starts rq (everything in it is copied). Never fails here: an error ends the call through
 * on_done, never from inside this call. */
struct peer_call *peer_call_start(struct peer_client *c, const struct peer_request *rq,
                                  const struct peer_call_ops *ops, void *userdata);
/* After on_data said false: the answer's body flows again. */
void peer_call_resume(struct peer_call *pc);
/* After read_body said PEER_BODY_WAIT: there are bytes (or the end) to send. */
void peer_call_body_ready(struct peer_call *pc);
/* No more callbacks; a connection in the middle of the call is closed (the peer sees its
 * client go). */
void peer_call_cancel(struct peer_call *pc);
/* Calls fn with each header of the answer, in order; only from on_head. */
void peer_call_headers(struct peer_call *pc,
                       void (*fn)(const char *name, const char *value, void *arg), void *arg);
/* The value of the answer's header name (its first), or NULL; only from on_head. */
const char *peer_call_header(struct peer_call *pc, const char *name);
