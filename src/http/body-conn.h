/* Shared by body.c, held.c and ws.c only: one client connection's filter state (body.c's opening
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

/* What the filter does with a connection's next bytes. Written by http_conn_set_state() alone,
 * which asserts the transition (http_conn_state_allowed(), the diagram below); CONN_HEAD (0, from
 * xcalloc) is the first, and needs none.
 *
 *   HEAD --a head with no body-----------------------------> HEAD
 *   HEAD --a Content-Length body, followed-----------------> BODY    --its last byte--> HEAD
 *   HEAD --a chunked body, followed------------------------> CHUNKED --its end--------> HEAD
 *                                                            CHUNKED --framing outside
 *                                                                       the rules-----> BLIND
 *   HEAD --a body held for a streamed route----------------> HELD    --read whole-----> HEAD
 *                                                            HELD    --failed
 *                                                                       half-way------> BROKEN
 *   HEAD --a head not understood, too long, or an empty
 *          line before it----------------------------------> BLIND
 *   HEAD --an upgrade head for a WebSocket route-----------> UPGRADED
 *
 * BLIND, BROKEN and UPGRADED are final: the connection keeps them until it is freed. body.c makes
 * every transition but HELD's, which held.c makes when the handler's read of the body ends. */
enum conn_state {
    CONN_HEAD,     /* reading a request head */
    CONN_BODY,     /* passing on `left` body bytes */
    CONN_CHUNKED,  /* passing on a chunked body, following its framing (`chunk`) to its end */
    CONN_HELD,     /* held body number `seq` of `left` bytes waits in the socket for its handler */
    CONN_BLIND,    /* passing everything on */
    CONN_BROKEN,   /* a held body failed half-way: nothing more is passed on */
    CONN_UPGRADED, /* what follows head number `upgrade_head` is no HTTP: it waits in the socket
                    * for the WebSocket stream (ws.c), or for the connection's close */
    CONN__COUNT,
};

struct http_conn {
    struct http_conns *reg;        /* conns.c: the listener's connections */
    struct http_conn_entry *entry; /* this one's slot there */
    struct timeval head_timeout;   /* zero: none */
    struct bufferevent *bev;       /* the filter evhttp uses */
    struct bufferevent *sock;      /* the socket under it */
    enum conn_state state;         /* http_conn_set_state() alone writes it */
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
    uint64_t heads;        /* passed on to evhttp, */
    uint64_t dispatched;   /* dispatched by it */
    uint64_t nul_head;     /* the head (by number) that held a NUL, 0: none */
    uint64_t upgrade_head; /* the head (by number) that asked for an upgrade, 0: none */
    /* output */
    struct event *head_timer; /* a head that started must complete in time */
    struct event *kick;       /* writes what evhttp queued, next loop iteration */
    struct event *writable;   /* the socket takes output again */
    /* a client that hangs up while its request waits for an answer (body.c, "Hang-ups"): made
     * at the first dispatch; NULL: the loop's backend cannot tell (no EV_CLOSED) */
    struct event *hangup;
    bool flushing, write_failed;
    bool waiting; /* dispatched, and no byte of the answer queued yet (hangup armed) */
    /* the reader of a held body */
    struct event *readable;
    http_body_data_cb *on_data; /* NULL: discard */
    http_body_end_cb *on_end;
    void *userdata;
    bool reading, paused, in_pump;
};

/* Whether the diagram of enum conn_state lets a connection go from `from` to `to`. */
bool http_conn_state_allowed(enum conn_state from, enum conn_state to);
/* The one writer of c->state: asserts that the diagram allows the transition. */
void http_conn_set_state(struct http_conn *c, enum conn_state to);

/* The request evhttp dispatched last on c is the one that asked for an upgrade (CONN_UPGRADED):
 * the last request of the connection, whose bytes after its head are the stream's. */
bool http_conn_upgrading(const struct http_conn *c);

/* The filter state of req's connection (one of reg's); NULL when it has none. */
struct http_conn *http_conn_of(struct http_conns *reg, struct evhttp_request *req);
