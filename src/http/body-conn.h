/* Shared by body.c and held.c only: one client connection's filter state (body.c's opening
 * comment says what the filter does). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>

#include "http/http-internal.h"
#include "util/buf.h"

struct bufferevent;
struct event;

enum conn_state {
    CONN_HEAD,    /* reading a request head */
    CONN_BODY,    /* passing on `left` body bytes */
    CONN_CHUNKED, /* passing on a chunked body, following its framing (`chunk`) to its end */
    CONN_HELD,    /* held body number `seq` of `left` bytes waits in the socket for its handler */
    CONN_BLIND,   /* passing everything on */
    CONN_BROKEN,  /* a held body failed half-way: nothing more is passed on */
};

struct http_conn {
    struct http_conns *reg;        /* conns.c: the listener's connections */
    struct http_conn_entry *entry; /* this one's slot there */
    struct timeval head_timeout;   /* zero: none */
    struct bufferevent *bev;       /* the filter evhttp uses */
    struct bufferevent *sock;      /* the socket under it */
    enum conn_state state;
    struct buf head;
    size_t line_start; /* where the incomplete line of head starts */
    uint64_t left, length;
    bool chunked;             /* the held body (CONN_HELD) is chunked: `chunk` frames it */
    bool body_started;        /* a byte of the held body was read */
    struct chunked chunk;     /* CONN_CHUNKED, and a chunked CONN_HELD */
    uint64_t seq;             /* of the last held body */
    uint64_t consumed_seq;    /* of the last held body read to its end */
    uint64_t consumed_length; /* ... its length (a chunked one's is known only then) */
    bool expect_continue;
    uint64_t heads;      /* passed on to evhttp, */
    uint64_t dispatched; /* dispatched by it */
    uint64_t nul_head;   /* the head (by number) that held a NUL, 0: none */
    /* output */
    struct event *head_timer; /* a head that started must complete in time */
    struct event *kick;       /* writes what evhttp queued, next loop iteration */
    struct event *writable;   /* the socket takes output again */
    bool flushing, write_failed;
    /* the reader of a held body */
    struct event *readable;
    http_body_data_cb *on_data; /* NULL: discard */
    http_body_end_cb *on_end;
    void *userdata;
    bool reading, paused, in_pump;
};

/* The filter state of req's connection (one of reg's); NULL when it has none. */
struct http_conn *http_conn_of(struct http_conns *reg, struct evhttp_request *req);
