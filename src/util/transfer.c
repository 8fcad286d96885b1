/* libcurl transfers on the loop; see transfer.h for the contract.
 *
 * Wiring: util/curl-loop.c drives the multi handle from libevent (curl's multi_socket_action
 * pattern) and calls dispatch() after each of libcurl's actions. Nothing of a caller's runs
 * inside libcurl but the callbacks transfer.h marks so, which only take or give bytes: after
 * curl_multi_socket_action() returns, dispatch() (1) moves finished transfers off the multi
 * handle onto `done`, (2) hands buffered bytes to their consumers (on_buffered) and (3) ends
 * what is done, one on_done each. Callbacks may therefore start, cancel or inspect transfers
 * freely (no CURLM_RECURSIVE_API_CALL, no freeing under libcurl's feet).
 *
 * States (one enum, written by transfer_set() alone, which asserts the transition and keeps the
 * lists): NEW (being set up) -> ACTIVE (on the multi handle and `active`) -> DONE (on `done`:
 * ended, on_done due) -> ENDING (off every list, its on_done on the stack). NEW -> DONE is a
 * transfer that did not start: a zero-delay event runs dispatch(), so on_done never fires from
 * the starting call. transfer_cancel() frees a transfer in NEW, ACTIVE or DONE at once; inside
 * one of its own callbacks (on_buffered, on_done) it only marks it `cancelled`, and the frame
 * that called out frees it afterwards. transfer_destroy() is the one teardown: off its list and
 * the multi handle first, then the easy handle (style.md §5). */
#include "util/transfer.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "util/curl-loop.h"
#include "util/macro.h"

enum transfer_state {
    TRANSFER_NEW,
    TRANSFER_ACTIVE,
    TRANSFER_DONE,
    TRANSFER_ENDING,
    TRANSFER__COUNT,
};

#define LAST_WORDS_TURNS   5  /* transfer_engine_free(): turns for the last words ... */
#define LAST_WORDS_TURN_MS 10 /* ... each waiting this long at most */

struct transfer {
    struct transfer_engine *x;
    CURL *easy;
    struct curl_slist *headers;
    struct buf body;   /* what POST and PUT send */
    struct buf answer; /* bounded: max_answer */
    const struct transfer_ops *ops;
    void *userdata;
    enum transfer_state state;
    CURLcode result; /* valid from DONE on */
    int error;       /* < 0: the end, whatever libcurl says (transfer_fail(), on_buffered) */
    bool cut_errors, overflow, headed, last_words;
    bool recv_paused, send_paused;
    bool in_callback; /* on_buffered or on_done of this transfer is on the stack */
    bool cancelled;   /* cancelled from there: freed once it returns */
    bool queued;      /* on `buffered` */
    TAILQ_ENTRY(transfer) link;
    TAILQ_ENTRY(transfer) queue_link;
};

TAILQ_HEAD(transfer_list, transfer);

struct transfer_engine {
    struct curl_loop *loop; /* util/curl-loop.h */
    CURLM *multi;           /* the loop's */
    struct event *dispatch_ev;
    struct transfer_list active, done;
    struct transfer_list buffered; /* active with on_buffered and bytes not handed over */
    bool dispatching;
};

static void dispatch(struct transfer_engine *x);

/* ---- the state machine ----------------------------------------------------------------------- */

/* transitions[from][to]: whether from may go to to. */
static const bool transitions[TRANSFER__COUNT][TRANSFER__COUNT] = {
    [TRANSFER_NEW] = {[TRANSFER_ACTIVE] = true, [TRANSFER_DONE] = true},
    [TRANSFER_ACTIVE] = {[TRANSFER_DONE] = true},
    [TRANSFER_DONE] = {[TRANSFER_ENDING] = true},
};

/* Takes t off the list (and the multi handle) of its state. */
static void
leave(struct transfer *t)
{
    struct transfer_engine *x = t->x;

    switch (t->state) {
    case TRANSFER_ACTIVE:
        TAILQ_REMOVE(&x->active, t, link);
        (void)curl_multi_remove_handle(x->multi, t->easy);
        break;
    case TRANSFER_DONE:
        TAILQ_REMOVE(&x->done, t, link);
        break;
    case TRANSFER_NEW:
    case TRANSFER_ENDING:
    case TRANSFER__COUNT:
        break;
    }
}

static void
transfer_set(struct transfer *t, enum transfer_state to)
{
    struct transfer_engine *x = t->x;

    assert(transitions[t->state][to]);
    leave(t);
    t->state = to;
    if (to == TRANSFER_ACTIVE) {
        TAILQ_INSERT_TAIL(&x->active, t, link);
    } else if (to == TRANSFER_DONE) {
        TAILQ_INSERT_TAIL(&x->done, t, link);
    }
}

static void
unqueue(struct transfer *t)
{
    if (t->queued) {
        TAILQ_REMOVE(&t->x->buffered, t, queue_link);
        t->queued = false;
    }
}

/* The one teardown, from any state: nothing of t is referenced afterwards. */
static void
transfer_destroy(struct transfer *t)
{
    leave(t);
    unqueue(t);
    if (t->ops->on_free != NULL) {
        t->ops->on_free(t->userdata);
    }
    curl_easy_cleanup(t->easy);
    curl_slist_free_all(t->headers);
    buf_done(&t->body);
    buf_done(&t->answer);
    free(t);
}

/* ---- inside libcurl -------------------------------------------------------------------------- */

static bool
status_2xx(long status)
{
    return status >= 200 && status < 300;
}

/* Into the answer buffer; past its bound the transfer fails, unless it is an error answer to
 * cut (its start says what went wrong). */
static size_t
buffer_answer(struct transfer *t, const char *data, size_t n)
{
    struct buf *a = &t->answer;
    size_t room = a->max - a->len;
    bool cut = t->cut_errors && n > room && !status_2xx(transfer_status(t));

    if (buf_append(a, data, cut ? room : n) < 0) {
        t->overflow = true;
        return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
    }
    if (t->ops->on_buffered != NULL && !t->queued) {
        t->queued = true;
        TAILQ_INSERT_TAIL(&t->x->buffered, t, queue_link);
    }
    return n;
}

/* CURLOPT_WRITEFUNCTION. */
static size_t
on_curl_write(char *data, size_t size, size_t nmemb, void *userp)
{
    struct transfer *t = userp;
    size_t n = size * nmemb;

    if (t->recv_paused) {
        return CURL_WRITEFUNC_PAUSE; /* libcurl keeps these bytes until the resume */
    }
    if (t->ops->on_data != NULL) {
        switch (t->ops->on_data(t, data, n, t->userdata)) {
        case TRANSFER_DATA_TAKEN:
            return n;
        case TRANSFER_DATA_FULL:
            t->recv_paused = true;
            return n;
        case TRANSFER_DATA_HOLD:
            t->recv_paused = true;
            return CURL_WRITEFUNC_PAUSE;
        case TRANSFER_DATA_BUFFER:
            break;
        }
    }
    return buffer_answer(t, data, n);
}

/* CURLOPT_HEADERFUNCTION: the end of a header block, or one "Name: value" line. */
static size_t
on_curl_header(char *data, size_t size, size_t nmemb, void *userp)
{
    struct transfer *t = userp;
    size_t n = size * nmemb, vlen;
    const char *colon = memchr(data, ':', n), *v;
    long status;

    if ((n == 2 && data[0] == '\r' && data[1] == '\n') || (n == 1 && data[0] == '\n')) {
        status = transfer_status(t);
        if (status >= 200 && !t->headed && t->ops->on_head != NULL) {
            t->headed = true;
            t->ops->on_head(t, status, t->userdata);
        }
        return n;
    }
    if (colon == NULL || t->ops->on_header == NULL) {
        return n;
    }
    v = colon + 1;
    while (v < data + n && *v == ' ') {
        v++;
    }
    vlen = (size_t)(data + n - v);
    while (vlen > 0 && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' ')) {
        vlen--;
    }
    t->ops->on_header(t, data, (size_t)(colon - data), v, vlen, t->userdata);
    return n;
}

/* CURLOPT_READFUNCTION of an upload. */
static size_t
on_curl_read(char *buf, size_t size, size_t nitems, void *userp)
{
    struct transfer *t = userp;
    size_t n = t->ops->read_body(t, buf, size * nitems, t->userdata);

    if (n == TRANSFER_BODY_WAIT) {
        t->send_paused = true;
        return CURL_READFUNC_PAUSE;
    }
    return n;
}

/* ---- setting up ------------------------------------------------------------------------------ */

struct transfer *
transfer_new(struct transfer_engine *x, const struct transfer_opts *o)
{
    struct transfer *t = xcalloc(1, sizeof(*t));
    CURL *e;

    t->x = x;
    t->ops = o->ops;
    t->userdata = o->userdata;
    t->cut_errors = o->cut_errors;
    t->state = TRANSFER_NEW;
    buf_init(&t->body, 0);
    buf_init(&t->answer, o->max_answer);
    e = t->easy = OOM_CHECK(curl_easy_init());
    (void)curl_easy_setopt(e, CURLOPT_PRIVATE, t);
    (void)curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    (void)curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_curl_write);
    (void)curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
    (void)curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_curl_header);
    (void)curl_easy_setopt(e, CURLOPT_HEADERDATA, t);
    if (o->url != NULL) {
        (void)curl_easy_setopt(e, CURLOPT_URL, o->url);
    }
    if (o->unix_socket != NULL) {
        (void)curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, o->unix_socket);
    }
    if (o->connect_ms > 0) {
        (void)curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)o->connect_ms);
    }
    if (o->total_ms > 0) {
        (void)curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)o->total_ms);
    }
    if (o->stall_s > 0) {
        /* libcurl does not count a paused transfer as stalled. */
        (void)curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
        (void)curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)o->stall_s);
    }
    return t;
}

CURL *
transfer_easy(const struct transfer *t)
{
    return t->easy;
}

void
transfer_add_header(struct transfer *t, const char *line)
{
    t->headers = OOM_CHECK(curl_slist_append(t->headers, line));
}

void
transfer_set_method(struct transfer *t, const char *method, struct buf *body)
{
    if (body != NULL) {
        buf_done(&t->body);
        t->body = *body;
        buf_init(body, body->max);
    }
    if (strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0) {
        (void)curl_easy_setopt(t->easy, CURLOPT_POSTFIELDS, t->body.buf);
        (void)curl_easy_setopt(t->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)t->body.len);
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0) {
        (void)curl_easy_setopt(t->easy, CURLOPT_CUSTOMREQUEST, method);
    }
}

void
transfer_upload(struct transfer *t, const char *method, int64_t len)
{
    CURL *e = t->easy;

    (void)curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    (void)curl_easy_setopt(e, CURLOPT_NOBODY, strcmp(method, "HEAD") == 0 ? 1L : 0L);
    if (len >= 0 || len == TRANSFER_BODY_CHUNKED) {
        /* TRANSFER_BODY_CHUNKED: libcurl's unknown size (-1), sent chunked over HTTP/1.1. */
        (void)curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
        (void)curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)(len >= 0 ? len : -1));
        (void)curl_easy_setopt(e, CURLOPT_READFUNCTION, on_curl_read);
        (void)curl_easy_setopt(e, CURLOPT_READDATA, t);
    }
}

void
transfer_last_words(struct transfer *t)
{
    t->last_words = true;
}

/* ---- running --------------------------------------------------------------------------------- */

static void
schedule_dispatch(struct transfer_engine *x)
{
    event_active(x->dispatch_ev, EV_TIMEOUT, 0);
}

void
transfer_start(struct transfer *t)
{
    if (t->headers != NULL) {
        (void)curl_easy_setopt(t->easy, CURLOPT_HTTPHEADER, t->headers);
    }
    if (curl_multi_add_handle(t->x->multi, t->easy) != CURLM_OK) {
        transfer_fail(t, -EIO);
        return;
    }
    transfer_set(t, TRANSFER_ACTIVE);
}

void
transfer_fail(struct transfer *t, int r)
{
    assert(r < 0);
    t->error = r;
    transfer_set(t, TRANSFER_DONE);
    schedule_dispatch(t->x);
}

void
transfer_cancel(struct transfer *t)
{
    if (t == NULL) {
        return;
    }
    if (t->in_callback || t->state == TRANSFER_ENDING) {
        t->cancelled = true; /* the frame that called out frees it */
        return;
    }
    transfer_destroy(t);
}

/* Lifts the pauses that are over (libcurl may hand held bytes to the callbacks at once). */
static void
unpause(struct transfer *t)
{
    int mask = (t->recv_paused ? CURLPAUSE_RECV : 0) | (t->send_paused ? CURLPAUSE_SEND : 0);

    if (t->state != TRANSFER_ACTIVE) {
        return;
    }
    (void)curl_easy_pause(t->easy, mask);
    /* The unpause may have finished the transfer: it ends on the next turn, never inside the
     * caller's own callback (a drained stream's, a body reader's). */
    schedule_dispatch(t->x);
}

void
transfer_resume(struct transfer *t)
{
    if (t->recv_paused) {
        t->recv_paused = false;
        unpause(t);
    }
}

void
transfer_body_ready(struct transfer *t)
{
    if (t->send_paused) {
        t->send_paused = false;
        unpause(t);
    }
}

long
transfer_status(const struct transfer *t)
{
    long status = 0;

    (void)curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

const struct buf *
transfer_answer(const struct transfer *t)
{
    return &t->answer;
}

CURLcode
transfer_curl_code(const struct transfer *t)
{
    return t->result;
}

/* ---- completion ------------------------------------------------------------------------------ */

static int
errno_of(CURLcode code)
{
    switch (code) {
    case CURLE_OK:
        return 0;
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return -EHOSTUNREACH;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
        return -ECONNRESET;
    case CURLE_OUT_OF_MEMORY:
        oom();
    default:
        return -EIO;
    }
}

/* Hands a 2xx answer's buffered bytes to on_buffered; a refusal (or a cancel from inside) sets
 * t->error. */
static void
deliver_buffered(struct transfer *t)
{
    int r;

    if (t->ops->on_buffered == NULL || t->answer.len == 0 || t->error < 0 ||
        !status_2xx(transfer_status(t))) {
        return; /* an error answer is kept whole for on_done */
    }
    t->in_callback = true;
    r = t->ops->on_buffered(t, &t->answer, t->userdata);
    t->in_callback = false;
    if (r < 0) {
        t->error = r;
    }
    if (t->cancelled) {
        t->error = -ECANCELED;
    }
}

/* A transfer of `done`: its last buffered bytes, then its one on_done, then the teardown. */
static void
end(struct transfer *t)
{
    int r;

    transfer_set(t, TRANSFER_ENDING);
    unqueue(t);
    deliver_buffered(t);
    if (!t->cancelled) {
        r = t->error < 0 ? t->error : t->overflow ? -EMSGSIZE : errno_of(t->result);
        t->in_callback = true;
        t->ops->on_done(t, r, t->userdata);
    }
    transfer_destroy(t);
}

static void
dispatch(struct transfer_engine *x)
{
    struct transfer *t;
    CURLMsg *msg;
    int left;

    if (x->dispatching) {
        return; /* a callback re-entered the loop glue; the outer dispatch finishes the job */
    }
    x->dispatching = true;
    while ((msg = curl_multi_info_read(x->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE) {
            continue;
        }
        CURLcode result = msg->data.result;

        (void)curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&t);
        t->result = result;
        transfer_set(t, TRANSFER_DONE); /* off the multi handle: msg is invalid from here */
    }
    /* Buffered bytes first, so a finished transfer's last ones come before its end. */
    while ((t = TAILQ_FIRST(&x->buffered)) != NULL) {
        unqueue(t);
        if (t->state != TRANSFER_ACTIVE) {
            continue; /* finished: handed over in end() */
        }
        deliver_buffered(t);
        if (t->error < 0) {
            transfer_set(t, TRANSFER_DONE);
        }
    }
    while ((t = TAILQ_FIRST(&x->done)) != NULL) {
        end(t);
    }
    x->dispatching = false;
}

/* ---- the engine ------------------------------------------------------------------------------ */

static void
on_dispatch_event(evutil_socket_t fd, short what, void *arg)
{
    dispatch(arg);
}

/* After each of libcurl's actions (util/curl-loop.h). */
static void
after_action(void *userdata)
{
    dispatch(userdata);
}

struct transfer_engine *
transfer_engine_new(struct event_base *base, unsigned max_connects)
{
    struct transfer_engine *x = xcalloc(1, sizeof(*x));
    static bool curl_ready;

    if (!curl_ready) {
        /* Process-wide and not thread-safe; the daemon has one thread. */
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
            oom();
        }
        curl_ready = true;
    }
    TAILQ_INIT(&x->active);
    TAILQ_INIT(&x->done);
    TAILQ_INIT(&x->buffered);
    x->loop = curl_loop_new(base, after_action, x);
    x->multi = curl_loop_multi(x->loop);
    if (max_connects > 0) {
        (void)curl_multi_setopt(x->multi, CURLMOPT_MAXCONNECTS, (long)max_connects);
    }
    x->dispatch_ev = OOM_CHECK(event_new(base, -1, 0, on_dispatch_event, x));
    return x;
}

static bool
has_last_words(const struct transfer_engine *x)
{
    const struct transfer *t;

    TAILQ_FOREACH (t, &x->active, link) {
        if (t->last_words) {
            return true;
        }
    }
    return false;
}

/* The transfers marked last-words get a few turns to be sent; whatever comes back is not read.
 * Every other active one is cancelled first. */
static void
send_last_words(struct transfer_engine *x)
{
    struct transfer *t, *next;
    CURLMsg *msg;
    int running, left, nfds;

    for (t = TAILQ_FIRST(&x->active); t != NULL; t = next) {
        next = TAILQ_NEXT(t, link);
        if (!t->last_words) {
            transfer_destroy(t);
        }
    }
    for (int i = 0; i < LAST_WORDS_TURNS && has_last_words(x); i++) {
        (void)curl_multi_perform(x->multi, &running);
        while ((msg = curl_multi_info_read(x->multi, &left)) != NULL) {
            if (msg->msg == CURLMSG_DONE) {
                (void)curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&t);
                transfer_destroy(t); /* msg is invalid from here */
            }
        }
        if (has_last_words(x)) {
            (void)curl_multi_wait(x->multi, NULL, 0, LAST_WORDS_TURN_MS, &nfds);
        }
    }
}

struct transfer_engine *
transfer_engine_free(struct transfer_engine *x)
{
    struct transfer *t;

    if (x == NULL) {
        return NULL;
    }
    assert(!x->dispatching);
    send_last_words(x);
    while ((t = TAILQ_FIRST(&x->active)) != NULL) {
        transfer_destroy(t);
    }
    while ((t = TAILQ_FIRST(&x->done)) != NULL) {
        transfer_destroy(t);
    }
    curl_loop_free(x->loop);
    event_free(x->dispatch_ev);
    free(x);
    return NULL;
}
