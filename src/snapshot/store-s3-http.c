/* S3 requests on the loop for the s3 backend (store-s3.c): transfers of the daemon's libcurl
 * engine (util/transfer.h: one multi handle driven by libevent), SigV4 by libcurl
 * (CURLOPT_AWS_SIGV4 "aws:amz:<region>:s3"), and the parsing of S3's small XML answers.
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
 * The engine gives the requests their lifecycle: nothing of ours runs inside libcurl but
 * taking bytes (a streaming get's, or the answer's into its bounded buffer), callbacks run after
 * libcurl returned (so they may start and cancel requests), and a request that cannot start ends
 * on the next loop turn. A request is built before it starts (snapstore_s3_req_new(), then its
 * body and stream): its transfer exists from snapstore_s3_req_start() on. S3's answers are read
 * by store-s3-xml.c. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "snapshot/store-internal.h"
#include "util/macro.h"
#include "util/parse.h"
#include "util/transfer.h"

#define URL_MAX  2048
#define ETAG_MAX 130

struct s3_client {
    struct transfer_engine *engine; /* util/transfer.h */
    char *endpoint, *bucket, *access_key, *secret_key;
    char sigv4[96];
    unsigned timeout_ms;
};

struct s3_req {
    struct s3_client *c;
    struct transfer *t;                /* NULL before the start */
    char *url;                         /* NULL: too long (the request ends -ENAMETOOLONG) */
    const char *method, *content_type; /* static strings */
    struct buf body;                   /* owned until the start, then the transfer's */
    struct snapstore_get *get;         /* borrowed: a streaming GET's consumer */
    s3_req_cb *cb;
    void *userdata;
    long status;
    bool last_words;
    char etag[ETAG_MAX];
};

/* ---- the transfer's callbacks (inside libcurl) ----------------------------------------------- */

/* A 2xx answer of a streaming GET goes to its get (held while it has no room); any other answer
 * to the bounded answer buffer: an error's is cut (its Code comes first), a 2xx one that does
 * not fit fails the request. */
static enum transfer_data
on_data(struct transfer *t, const char *data, size_t n, void *userdata)
{
    struct s3_req *rq = userdata;
    long status = transfer_status(t);

    if (rq->get == NULL || status < 200 || status >= 300) {
        return TRANSFER_DATA_BUFFER;
    }
    return snapstore_get_push(rq->get, data, n) < 0 ? TRANSFER_DATA_HOLD : TRANSFER_DATA_TAKEN;
}

static void
on_header(struct transfer *t, const char *name, size_t name_len, const char *v, size_t vlen,
          void *userdata)
{
    struct s3_req *rq = userdata;

    if (strn_case_eq(name, name_len, "ETag") && vlen < sizeof(rq->etag)) {
        memcpy(rq->etag, v, vlen);
        rq->etag[vlen] = '\0';
    }
}

/* ---- requests ----------------------------------------------------------------------------------
 */

static void
req_free(struct s3_req *rq)
{
    buf_done(&rq->body);
    free(rq->url);
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
    n = snprintf(url, sizeof(url), "%s/%s/%s%s%s", c->endpoint, c->bucket, key, query ? "?" : "",
                 query ? query : "");
    if (n >= 0 && (size_t)n < sizeof(url)) {
        rq->url = xstrdup(url);
    }
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
req_setup(struct s3_req *rq)
{
    struct s3_client *c = rq->c;
    struct transfer *t = rq->t;
    CURL *e = transfer_easy(t);
    char line[96], hash[65];

    snapstore_sha256_hex(rq->body.buf, rq->body.len, hash);
    (void)snprintf(line, sizeof(line), "x-amz-content-sha256: %s", hash);
    transfer_add_header(t, line);
    if (rq->content_type != NULL) {
        (void)snprintf(line, sizeof(line), "Content-Type: %s", rq->content_type);
        transfer_add_header(t, line);
    }
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
    /* A body in memory: curl sends it as it is, with its length. */
    transfer_set_method(t, rq->method, &rq->body);
    if (rq->last_words) {
        transfer_last_words(t);
    }
}

static const struct transfer_ops req_ops;

void
snapstore_s3_req_start(struct s3_req *rq, s3_req_cb *cb, void *userdata)
{
    struct s3_client *c = rq->c;

    rq->cb = cb;
    rq->userdata = userdata;
    /* A GET streams an object, which may take long; a stalled one may not (a transfer paused
     * for want of room is not stalled). */
    rq->t =
        transfer_new(c->engine, &(struct transfer_opts){
                                    .url = rq->url,
                                    .connect_ms = MIN(c->timeout_ms, 10000u),
                                    .total_ms = rq->get != NULL ? 0 : c->timeout_ms,
                                    .stall_s = rq->get != NULL ? MAX(1u, c->timeout_ms / 1000) : 0,
                                    .max_answer = S3_XML_MAX,
                                    .cut_errors = true,
                                    .ops = &req_ops,
                                    .userdata = rq,
                                });
    if (rq->url == NULL) {
        transfer_fail(rq->t, -ENAMETOOLONG);
        return;
    }
    req_setup(rq);
    transfer_start(rq->t);
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
    if (rq == NULL) {
        return;
    }
    if (rq->t != NULL) {
        transfer_cancel(rq->t); /* frees rq (on_free), or after its callback when inside it */
        return;
    }
    req_free(rq);
}

void
snapstore_s3_req_resume(struct s3_req *rq)
{
    if (rq->t != NULL) {
        /* May hand curl's held bytes to on_data at once: that only pushes. */
        transfer_resume(rq->t);
    }
}

const struct buf *
snapstore_s3_req_answer(const struct s3_req *rq)
{
    return transfer_answer(rq->t);
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

/* The transfer's r as the store reports it. A failure with libcurl's CURLE_OK is not libcurl's:
 * the request was never handed to it. */
static int
req_result(struct s3_req *rq, int r, struct err *e)
{
    CURLcode code = transfer_curl_code(rq->t);
    const struct buf *a = transfer_answer(rq->t);

    if (r < 0 && code == CURLE_OK) {
        return err_set(e, r, "snapshot store (s3): request not sent: %s", strerror(-r));
    }
    switch (r) {
    case 0:
        break;
    case -ECONNREFUSED:
    case -EHOSTUNREACH:
        return err_set(e, -ECONNREFUSED, "snapshot store (s3) unreachable: %s",
                       curl_easy_strerror(code));
    case -ETIMEDOUT:
        return err_set(e, -ETIMEDOUT, "snapshot store (s3): no answer within %u ms",
                       rq->c->timeout_ms);
    case -EMSGSIZE:
        return err_set(e, -EPROTO, "snapshot store (s3): answer over %d bytes", S3_XML_MAX);
    default:
        return err_set(e, -EIO, "snapshot store (s3): %s", curl_easy_strerror(code));
    }
    rq->status = transfer_status(rq->t);
    if (rq->status >= 200 && rq->status < 300 && !snapstore_s3_xml_has(a->buf, a->len, "Error")) {
        return 0;
    }
    return snapstore_s3_error(rq->status, a->buf, a->len, e);
}

static void
on_done(struct transfer *t, int r, void *userdata)
{
    struct s3_req *rq = userdata;
    struct err e = {0};

    r = req_result(rq, r, &e);
    if (rq->cb != NULL) {
        rq->cb(rq, r, &e, rq->userdata);
    }
}

static void
on_free(void *userdata)
{
    req_free(userdata);
}

static const struct transfer_ops req_ops = {
    .on_header = on_header,
    .on_data = on_data,
    .on_done = on_done,
    .on_free = on_free,
};

/* ---- the client --------------------------------------------------------------------------------
 */

struct s3_client *
snapstore_s3_client_new(struct event_base *base, const struct s3_client_cfg *cfg)
{
    struct s3_client *c = xcalloc(1, sizeof(*c));
    size_t n = strlen(cfg->endpoint);

    while (n > 0 && cfg->endpoint[n - 1] == '/') {
        n--;
    }
    c->endpoint = xstrndup(cfg->endpoint, n);
    c->bucket = xstrdup(cfg->bucket);
    c->access_key = xstrdup(cfg->access_key);
    c->secret_key = xstrdup(cfg->secret_key);
    c->timeout_ms = cfg->timeout_ms;
    (void)snprintf(c->sigv4, sizeof(c->sigv4), "aws:amz:%s:s3", cfg->region);
    c->engine = transfer_engine_new(base, 0);
    return c;
}

void
snapstore_s3_client_free(struct s3_client *c)
{
    if (c == NULL) {
        return;
    }
    /* The requests marked last-words get a few turns (10 ms each at most) to be sent. */
    transfer_engine_free(c->engine);
    explicit_bzero(c->secret_key, strlen(c->secret_key));
    free(c->secret_key);
    free(c->access_key);
    free(c->bucket);
    free(c->endpoint);
    free(c);
}
