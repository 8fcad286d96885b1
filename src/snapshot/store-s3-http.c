/* S3 requests on the loop for the s3 backend (store-s3.c): libcurl's multi handle driven by
 * libevent (util/curl-loop.c: curl's multi_socket_action pattern), SigV4 by
 * libcurl (CURLOPT_AWS_SIGV4 "aws:amz:<region>:s3"), and the parsing of S3's small XML answers.
 *
 * What libcurl 7.88 (Debian 12) does and does not do for SigV4, seen on the wire and against a
 * verifier (tests/interop/s3rver.mjs):
 *   - it sends no x-amz-content-sha256 header, which S3 requires: we send it, with the SHA-256
 *     of the body we hand over, and curl signs that value as the payload hash;
 *   - it signs the query string as written, unsorted and unencoded: the callers write it in
 *     SigV4's canonical form ("uploads=", not "uploads"; parameters sorted; values encoded);
 *   - it signs the headers we add, and also those we remove with "Name:" (as empty values), so
 *     we remove none (curl's own Expect: 100-continue on bodies over 1 MiB is not signed).
 *
 * As in src/docker/client.c, nothing of ours runs inside libcurl but appending to bounded
 * buffers (the streaming get's, or the answer's): finished transfers are moved off the multi
 * handle first, then their callbacks run (dispatch()), so callbacks may start and cancel
 * requests. A request that cannot start ends through a zero-delay event. S3's answers are read by
 * store-s3-xml.c. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/queue.h>

#include <curl/curl.h>
#include <event2/event.h>

#include "snapshot/store-internal.h"
#include "util/curl-loop.h"
#include "util/macro.h"
#include "util/parse.h"

#define URL_MAX  2048
#define ETAG_MAX 130

struct s3_client {
    struct event_base *base; /* borrowed */
    struct curl_loop *loop;  /* util/curl-loop.h */
    CURLM *multi;            /* the loop's */
    struct event *dispatch_ev;
    char *endpoint, *bucket, *access_key, *secret_key;
    char sigv4[96];
    unsigned timeout_ms;
    TAILQ_HEAD(, s3_req) active, done;
    bool dispatching;
};

struct s3_req {
    struct s3_client *c;
    CURL *easy;
    struct curl_slist *headers;
    const char *method, *content_type; /* static strings */
    struct buf body;                   /* owned: the request's */
    struct buf answer;                 /* bounded: S3_XML_MAX */
    struct snapstore_get *get;         /* borrowed: a streaming GET's consumer */
    s3_req_cb *cb;
    void *userdata;
    CURLcode result;
    int start_error;
    long status;
    bool overflow, recv_paused, last_words;
    enum {
        RQ_NEW,
        RQ_ACTIVE,
        RQ_DONE,
        RQ_DELIVERING
    } where;
    char etag[ETAG_MAX];
    TAILQ_ENTRY(s3_req) link;
};

static void dispatch(struct s3_client *c);

/* ---- after libcurl's actions ------------------------------------------------------------------
 */

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

/* A 2xx answer of a streaming GET goes to its get (paused while it has no room); any other
 * answer to the bounded answer buffer: an error's is cut (its Code comes first), a 2xx one that
 * does not fit fails the request. */
static size_t
on_curl_write(char *data, size_t size, size_t nmemb, void *userp)
{
    struct s3_req *rq = userp;
    size_t n = size * nmemb;
    long status = 0;

    (void)curl_easy_getinfo(rq->easy, CURLINFO_RESPONSE_CODE, &status);
    if (rq->get != NULL && status >= 200 && status < 300) {
        if (snapstore_get_push(rq->get, data, n) < 0) {
            rq->recv_paused = true;
            return CURL_WRITEFUNC_PAUSE;
        }
        return n;
    }
    if (buf_append(&rq->answer, data, MIN(n, rq->answer.max - rq->answer.len)) < 0 ||
        rq->answer.len == rq->answer.max) {
        if (status >= 200 && status < 300) {
            rq->overflow = true;
            return 0;
        }
    }
    return n;
}

static size_t
on_curl_header(char *data, size_t size, size_t nmemb, void *userp)
{
    struct s3_req *rq = userp;
    size_t n = size * nmemb, vlen;
    const char *colon = memchr(data, ':', n), *v;

    if (colon == NULL || !strn_case_eq(data, (size_t)(colon - data), "ETag")) {
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
    if (vlen < sizeof(rq->etag)) {
        memcpy(rq->etag, v, vlen);
        rq->etag[vlen] = '\0';
    }
    return n;
}

/* ---- requests ----------------------------------------------------------------------------------
 */

static void
req_free(struct s3_req *rq)
{
    if (rq->easy != NULL) {
        curl_easy_cleanup(rq->easy);
    }
    curl_slist_free_all(rq->headers);
    buf_done(&rq->body);
    buf_done(&rq->answer);
    free(rq);
}

struct s3_req *
snapstore_s3_req_new(struct s3_client *c, const char *method, const char *key, const char *query)
{
    struct s3_req *rq = xcalloc(1, sizeof(*rq));
    char url[URL_MAX];
    int n;

    rq->c = c;
    rq->method = method;
    buf_init(&rq->body, 0);
    buf_init(&rq->answer, S3_XML_MAX);
    n = snprintf(url, sizeof(url), "%s/%s/%s%s%s", c->endpoint, c->bucket, key, query ? "?" : "",
                 query ? query : "");
    if (n < 0 || (size_t)n >= sizeof(url)) {
        rq->start_error = -ENAMETOOLONG;
        return rq;
    }
    rq->easy = OOM_CHECK(curl_easy_init());
    (void)curl_easy_setopt(rq->easy, CURLOPT_URL, url);
    return rq;
}

void
snapstore_s3_req_body(struct s3_req *rq, struct buf *b, const char *content_type)
{
    buf_done(&rq->body);
    rq->body = *b;
    buf_init(b, b->max);
    rq->content_type = content_type;
}

void
snapstore_s3_req_stream(struct s3_req *rq, struct snapstore_get *g)
{
    rq->get = g;
}

void
snapstore_s3_req_last_words(struct s3_req *rq)
{
    rq->last_words = true;
}

static void
req_headers(struct s3_req *rq)
{
    char line[96], hash[65];

    snapstore_sha256_hex(rq->body.buf, rq->body.len, hash);
    (void)snprintf(line, sizeof(line), "x-amz-content-sha256: %s", hash);
    rq->headers = OOM_CHECK(curl_slist_append(rq->headers, line));
    if (rq->content_type != NULL) {
        (void)snprintf(line, sizeof(line), "Content-Type: %s", rq->content_type);
        rq->headers = OOM_CHECK(curl_slist_append(rq->headers, line));
    }
}

static void
req_setup(struct s3_req *rq)
{
    struct s3_client *c = rq->c;
    CURL *e = rq->easy;

    req_headers(rq);
    (void)curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    (void)curl_easy_setopt(e, CURLOPT_PRIVATE, rq);
    (void)curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_curl_write);
    (void)curl_easy_setopt(e, CURLOPT_WRITEDATA, rq);
    (void)curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_curl_header);
    (void)curl_easy_setopt(e, CURLOPT_HEADERDATA, rq);
    (void)curl_easy_setopt(e, CURLOPT_USERAGENT, "sandpoold");
#if LIBCURL_VERSION_NUM >= 0x075500
    (void)curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
#if LIBCURL_VERSION_NUM >= 0x074b00
    (void)curl_easy_setopt(e, CURLOPT_AWS_SIGV4, c->sigv4);
#endif
    /* Name and password apart: a key with a ':' in it cannot be split wrong. */
    (void)curl_easy_setopt(e, CURLOPT_USERNAME, c->access_key);
    (void)curl_easy_setopt(e, CURLOPT_PASSWORD, c->secret_key);
    (void)curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)MIN(c->timeout_ms, 10000u));
    if (rq->get != NULL) {
        /* An object may take long; a stalled transfer may not (curl skips paused ones). */
        (void)curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
        (void)curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)MAX(1u, c->timeout_ms / 1000));
    } else {
        (void)curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)c->timeout_ms);
    }
    if (strcmp(rq->method, "PUT") == 0 || strcmp(rq->method, "POST") == 0) {
        /* A body in memory: curl sends it as it is, with its length. */
        (void)curl_easy_setopt(e, CURLOPT_POSTFIELDS, rq->body.buf);
        (void)curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body.len);
    }
    if (strcmp(rq->method, "GET") != 0 && strcmp(rq->method, "POST") != 0) {
        (void)curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, rq->method);
    }
    (void)curl_easy_setopt(e, CURLOPT_HTTPHEADER, rq->headers);
}

void
snapstore_s3_req_start(struct s3_req *rq, s3_req_cb *cb, void *userdata)
{
    struct s3_client *c = rq->c;

    rq->cb = cb;
    rq->userdata = userdata;
    if (rq->start_error == 0) {
        req_setup(rq);
        if (curl_multi_add_handle(c->multi, rq->easy) != CURLM_OK) {
            rq->start_error = -EIO;
        }
    }
    if (rq->start_error < 0) {
        rq->where = RQ_DONE;
        TAILQ_INSERT_TAIL(&c->done, rq, link);
        event_active(c->dispatch_ev, EV_TIMEOUT, 0);
        return;
    }
    rq->where = RQ_ACTIVE;
    TAILQ_INSERT_TAIL(&c->active, rq, link);
}

void
snapstore_s3_req_retarget(struct s3_req *rq, s3_req_cb *cb, void *userdata)
{
    rq->cb = cb;
    rq->userdata = userdata;
    rq->get = NULL;
}

void
snapstore_s3_req_cancel(struct s3_req *rq)
{
    struct s3_client *c;

    if (rq == NULL) {
        return;
    }
    c = rq->c;
    switch (rq->where) {
    case RQ_NEW:
        break;
    case RQ_ACTIVE:
        TAILQ_REMOVE(&c->active, rq, link);
        (void)curl_multi_remove_handle(c->multi, rq->easy);
        break;
    case RQ_DONE:
        TAILQ_REMOVE(&c->done, rq, link);
        break;
    case RQ_DELIVERING:
        rq->cb = NULL; /* its callback runs; freed after it */
        return;
    }
    req_free(rq);
}

void
snapstore_s3_req_resume(struct s3_req *rq)
{
    if (rq->where == RQ_ACTIVE && rq->recv_paused) {
        rq->recv_paused = false;
        /* May hand curl's held bytes to on_curl_write at once: that only pushes. */
        (void)curl_easy_pause(rq->easy, CURLPAUSE_CONT);
    }
}

const struct buf *
snapstore_s3_req_answer(const struct s3_req *rq)
{
    return &rq->answer;
}

const char *
snapstore_s3_req_etag(const struct s3_req *rq)
{
    return rq->etag;
}

long
snapstore_s3_req_status(const struct s3_req *rq)
{
    return rq->status;
}

/* ---- completion --------------------------------------------------------------------------------
 */

static int
req_result(struct s3_req *rq, struct err *e)
{
    struct s3_client *c = rq->c;

    if (rq->start_error < 0) {
        return err_set(e, rq->start_error, "snapshot store (s3): request not sent: %s",
                       strerror(-rq->start_error));
    }
    switch (rq->result) {
    case CURLE_OK:
        break;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return err_set(e, -ECONNREFUSED, "snapshot store (s3) unreachable: %s",
                       curl_easy_strerror(rq->result));
    case CURLE_OPERATION_TIMEDOUT:
        return err_set(e, -ETIMEDOUT, "snapshot store (s3): no answer within %u ms", c->timeout_ms);
    case CURLE_OUT_OF_MEMORY:
        oom();
    case CURLE_WRITE_ERROR:
        if (rq->overflow) {
            return err_set(e, -EPROTO, "snapshot store (s3): answer over %d bytes", S3_XML_MAX);
        }
        return err_set(e, -EIO, "snapshot store (s3): %s", curl_easy_strerror(rq->result));
    default:
        return err_set(e, -EIO, "snapshot store (s3): %s", curl_easy_strerror(rq->result));
    }
    (void)curl_easy_getinfo(rq->easy, CURLINFO_RESPONSE_CODE, &rq->status);
    if (rq->status >= 200 && rq->status < 300 &&
        !snapstore_s3_xml_has(rq->answer.buf, rq->answer.len, "Error")) {
        return 0;
    }
    return snapstore_s3_error(rq->status, rq->answer.buf, rq->answer.len, e);
}

static void
dispatch(struct s3_client *c)
{
    struct s3_req *rq;
    CURLMsg *msg;
    int left;

    if (c->dispatching) {
        return;
    }
    c->dispatching = true;
    while ((msg = curl_multi_info_read(c->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE) {
            continue;
        }
        CURLcode result = msg->data.result;

        (void)curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&rq);
        (void)curl_multi_remove_handle(c->multi, rq->easy); /* msg is invalid from here */
        rq->result = result;
        TAILQ_REMOVE(&c->active, rq, link);
        rq->where = RQ_DONE;
        TAILQ_INSERT_TAIL(&c->done, rq, link);
    }
    while ((rq = TAILQ_FIRST(&c->done)) != NULL) {
        struct err e = {0};
        int r;

        TAILQ_REMOVE(&c->done, rq, link);
        rq->where = RQ_DELIVERING;
        r = req_result(rq, &e);
        if (rq->cb != NULL) {
            rq->cb(rq, r, &e, rq->userdata);
        }
        req_free(rq);
    }
    c->dispatching = false;
}

/* ---- the client --------------------------------------------------------------------------------
 */

struct s3_client *
snapstore_s3_client_new(struct event_base *base, const struct s3_client_cfg *cfg)
{
    static bool curl_ready;
    struct s3_client *c = xcalloc(1, sizeof(*c));
    size_t n = strlen(cfg->endpoint);

    if (!curl_ready) {
        /* Process-wide and not thread-safe; the daemon has one loop thread. Reference counted,
         * so the engine client's own call does not matter. */
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
            oom();
        }
        curl_ready = true;
    }
    while (n > 0 && cfg->endpoint[n - 1] == '/') {
        n--;
    }
    c->base = base;
    c->endpoint = xstrndup(cfg->endpoint, n);
    c->bucket = xstrdup(cfg->bucket);
    c->access_key = xstrdup(cfg->access_key);
    c->secret_key = xstrdup(cfg->secret_key);
    c->timeout_ms = cfg->timeout_ms;
    (void)snprintf(c->sigv4, sizeof(c->sigv4), "aws:amz:%s:s3", cfg->region);
    TAILQ_INIT(&c->active);
    TAILQ_INIT(&c->done);
    c->loop = curl_loop_new(base, after_action, c);
    c->multi = curl_loop_multi(c->loop);
    c->dispatch_ev = OOM_CHECK(event_new(base, -1, 0, on_dispatch_event, c));
    return c;
}

static bool
has_last_words(struct s3_client *c)
{
    struct s3_req *rq;

    TAILQ_FOREACH (rq, &c->active, link) {
        if (rq->last_words) {
            return true;
        }
    }
    return false;
}

/* The requests marked last-words get a few turns (10 ms each at most) to be sent; whatever
 * comes back is not read. Everything else is cancelled first. */
static void
send_last_words(struct s3_client *c)
{
    struct s3_req *rq, *next;
    CURLMsg *msg;
    int running, left, nfds;

    for (rq = TAILQ_FIRST(&c->active); rq != NULL; rq = next) {
        next = TAILQ_NEXT(rq, link);
        if (!rq->last_words) {
            snapstore_s3_req_cancel(rq);
        }
    }
    for (int i = 0; i < 5 && has_last_words(c); i++) {
        (void)curl_multi_perform(c->multi, &running);
        while ((msg = curl_multi_info_read(c->multi, &left)) != NULL) {
            if (msg->msg == CURLMSG_DONE) {
                (void)curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&rq);
                snapstore_s3_req_cancel(rq); /* msg is invalid from here */
            }
        }
        if (has_last_words(c)) {
            (void)curl_multi_wait(c->multi, NULL, 0, 10, &nfds);
        }
    }
}

void
snapstore_s3_client_free(struct s3_client *c)
{
    if (c == NULL) {
        return;
    }
    assert(!c->dispatching);
    send_last_words(c);
    while (!TAILQ_EMPTY(&c->active)) {
        snapstore_s3_req_cancel(TAILQ_FIRST(&c->active));
    }
    while (!TAILQ_EMPTY(&c->done)) {
        snapstore_s3_req_cancel(TAILQ_FIRST(&c->done));
    }
    curl_loop_free(c->loop);
    event_free(c->dispatch_ev);
    explicit_bzero(c->secret_key, strlen(c->secret_key));
    free(c->secret_key);
    free(c->access_key);
    free(c->bucket);
    free(c->endpoint);
    free(c);
}
