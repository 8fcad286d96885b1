/* An incremental parser of server-sent events (the WHATWG "event stream" format) for the client
 * library: bytes go in as they arrive from the socket, in pieces of any size, and a callback
 * fires for each complete event.
 *
 * What it handles: `event:`, `data:` (several data lines join with "\n"), `id:`, comments
 * (lines starting with ':'), a field without a colon, the optional space after the colon, and LF,
 * CRLF or CR line ends, including a CRLF split between two reads. An event is dispatched at its
 * blank line; one without data lines is dropped, as the standard says. Unknown fields (`retry:`)
 * are ignored.
 *
 * Bounds: one line and the data of one event are limited to `max` bytes each (-EMSGSIZE past
 * it); the event name and id to 63 bytes (-EPROTO past them). Pure: no I/O. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "util/buf.h"

struct client_sse_event {
    const char *event; /* "message" when the event named none */
    const char *id;    /* "" when none */
    const char *data;  /* NUL-terminated; may hold NULs, data_len is authoritative */
    size_t data_len;
};

/* Returns 0 to go on, or a negative errno that client_sse_feed() returns at once. */
typedef int client_sse_event_cb(const struct client_sse_event *ev, void *userdata);

struct client_sse {
    struct buf line; /* the current, incomplete line */
    struct buf data; /* data lines of the current event */
    char event[64];
    char id[64];
    bool has_data; /* a data line was seen (the data may still be empty) */
    bool skip_lf;  /* the last byte was CR: a following LF belongs to it */
    client_sse_event_cb *cb;
    void *userdata;
};

/* Initializes p (embedded). Never allocates. cb is called for each event. */
void client_sse_init(struct client_sse *p, size_t max, client_sse_event_cb *cb, void *userdata);
void client_sse_done(struct client_sse *p);
/* Parses n more bytes. Returns 0, -EMSGSIZE, -EPROTO, or the callback's negative value; after
 * an error the parser must not be fed again. */
int client_sse_feed(struct client_sse *p, const char *data, size_t n);
/* True when bytes of an event that was not completed are pending (the stream was cut). */
bool client_sse_pending(const struct client_sse *p);
