/* The one libcurl transfer engine of the daemon: the engine client (docker/client.c), the S3
 * store (snapshot/store-s3-http.c) and the node peer client (cluster/peer.c) each run their HTTP
 * transfers through it, on one libcurl multi handle of their own driven by the libevent loop
 * (util/curl-loop.h).
 *
 * Contract of every transfer:
 *  - ops->on_done runs exactly once, never from inside the call that started the transfer and
 *    never after transfer_cancel(); ops->on_free runs exactly once, whichever way it goes (after
 *    on_done returned, at the cancel, or when the engine is freed);
 *  - it has its deadlines (connect, total or stall) and a bounded answer buffer;
 *  - r < 0 is the transfer's failure: -ECONNREFUSED (nobody listens), -EHOSTUNREACH (the name
 *    does not resolve), -ETIMEDOUT (a deadline passed), -ECONNRESET (the connection broke or
 *    brought nothing), -EMSGSIZE (the answer passed its bound), the value transfer_fail() or
 *    on_buffered gave, -EIO (anything else; curl's own code is transfer_curl_code()). r == 0: an
 *    HTTP answer came whole, whatever its status. libcurl out of memory is fatal.
 *
 * Callbacks marked "inside libcurl" run from libcurl's own stack: they must not start, cancel,
 * resume or inspect any transfer but through the getters marked so. The others run after
 * libcurl returned, and may do anything (start and cancel transfers, free the caller's objects),
 * except free the engine. Loop context only; not thread-safe. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "util/buf.h"

struct event_base;
struct transfer_engine;
struct transfer;

/* What on_data did with the bytes it was given. */
enum transfer_data {
    TRANSFER_DATA_TAKEN,  /* all taken */
    TRANSFER_DATA_FULL,   /* all taken, and no more until transfer_resume() */
    TRANSFER_DATA_HOLD,   /* none taken: libcurl keeps them, hands them again after the resume */
    TRANSFER_DATA_BUFFER, /* none taken: they go to the answer buffer */
};

#define TRANSFER_BODY_WAIT    ((size_t)-1) /* read_body: no bytes now */
#define TRANSFER_BODY_CHUNKED (-2)         /* transfer_upload(): a length not known yet */

struct transfer_ops {
    /* Inside libcurl: a header line of an answer (interim 1xx ones too), its name and its
     * value without the blanks and line end around it. NULL: not wanted. */
    void (*on_header)(struct transfer *t, const char *name, size_t name_len, const char *value,
                      size_t value_len, void *userdata);
    /* Inside libcurl: the final answer's header block is in (once; transfer_status() and
     * curl_easy_header() on transfer_easy() read it). NULL: not wanted. */
    void (*on_head)(struct transfer *t, long status, void *userdata);
    /* Inside libcurl: bytes of the answer's body. NULL: all go to the answer buffer. */
    enum transfer_data (*on_data)(struct transfer *t, const char *data, size_t n, void *userdata);
    /* Inside libcurl: the body of a transfer_upload(): up to n bytes into buf, returns how many,
     * 0 at its end, or TRANSFER_BODY_WAIT (then transfer_body_ready() when there are). */
    size_t (*read_body)(struct transfer *t, char *buf, size_t n, void *userdata);
    /* After libcurl's action: a 2xx answer's bytes arrived in the answer buffer. Consume what
     * can be with buf_consume(); return 0, or a negative errno that ends the transfer with it.
     * The bytes still there when the transfer ends come here once more before on_done.
     * NULL: the buffer holds the whole answer for on_done. */
    int (*on_buffered)(struct transfer *t, struct buf *answer, void *userdata);
    /* The end (see above); transfer_answer() and the getters are valid during it. */
    void (*on_done)(struct transfer *t, int r, void *userdata);
    /* The transfer is freed right after: the caller frees what it tied to it. NULL: nothing. */
    void (*on_free)(void *userdata);
};

struct transfer_opts {
    const char *url;
    const char *unix_socket; /* NULL: TCP */
    unsigned connect_ms;     /* 0: libcurl's own deadline */
    unsigned total_ms;       /* the whole transfer's deadline; 0: none (a stream) */
    unsigned stall_s;        /* fails after this long under one byte a second; 0: never */
    size_t max_answer;       /* the answer buffer's bound; past it the transfer fails -EMSGSIZE */
    bool cut_errors;         /* a non-2xx answer past max_answer is cut there instead */
    const struct transfer_ops *ops; /* borrowed; must outlive the transfer */
    void *userdata;
};

/* base is borrowed. max_connects: idle connections kept for reuse (0: libcurl's default). */
struct transfer_engine *transfer_engine_new(struct event_base *base, unsigned max_connects);
/* Gives the transfers marked transfer_last_words() a few non-blocking turns (50 ms at most) to
 * be sent, their answers unread; cancels every transfer (on_free runs, on_done does not); frees
 * x. Must not be called from inside a callback of x's. Accepts NULL; returns NULL. */
struct transfer_engine *transfer_engine_free(struct transfer_engine *x);

/* A transfer to set up, then start (transfer_start() or transfer_fail()). Never NULL. */
struct transfer *transfer_new(struct transfer_engine *x, const struct transfer_opts *o);
/* The easy handle, for the options of the caller's own (auth, protocols, connection reuse). The
 * engine owns it: never CURLOPT_PRIVATE or the data, header and read functions. */
CURL *transfer_easy(const struct transfer *t);
/* Adds a request header line "Name: value" (copied); "Name:" removes one libcurl would add. */
void transfer_add_header(struct transfer *t, const char *line);
/* The request's method, and its body moved out of body (left empty; NULL: none). POST and PUT
 * send it from memory with its length (empty without one); a method other than GET and POST is
 * sent as named. */
void transfer_set_method(struct transfer *t, const char *method, struct buf *body);
/* The request sends method as named (HEAD: no answer body) and, unless len is -1, a body of len
 * bytes (or TRANSFER_BODY_CHUNKED) from ops->read_body. */
void transfer_upload(struct transfer *t, const char *method, int64_t len);
/* When x is freed with t in flight, t gets its few turns to be sent (see transfer_engine_free). */
void transfer_last_words(struct transfer *t);

/* Starts t; a failure to start ends it with -EIO on the next loop turn. */
void transfer_start(struct transfer *t);
/* Starts nothing: t ends with r (< 0) on the next loop turn, as if it had failed. */
void transfer_fail(struct transfer *t, int r);
/* Before on_done: no callback but on_free, t is freed. From inside on_done or on_buffered of t:
 * its on_done does not run (again), it is freed after. Accepts NULL. */
void transfer_cancel(struct transfer *t);
/* After TRANSFER_DATA_FULL or HOLD: the answer flows again. */
void transfer_resume(struct transfer *t);
/* After TRANSFER_BODY_WAIT: there are bytes (or the end) to send. */
void transfer_body_ready(struct transfer *t);

/* The answer's HTTP status (0 before one came); also inside libcurl. */
long transfer_status(const struct transfer *t);
/* The answer buffer: borrowed, valid until the transfer is freed. */
const struct buf *transfer_answer(const struct transfer *t);
/* libcurl's result (CURLE_OK until the transfer ended in libcurl), for words of its own. */
CURLcode transfer_curl_code(const struct transfer *t);
