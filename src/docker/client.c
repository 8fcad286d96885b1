/* libcurl multi on the libevent loop; see client.h for the request contract.
 *
 * Wiring: util/curl-loop.c drives the multi handle from libevent (curl's multi_socket_action
 * pattern) and calls dispatch() after each of curl's actions. Nothing user-visible ever runs inside
 * libcurl: the write callback only appends to a bounded buffer, and after each
 * curl_multi_socket_action() returns, dispatch() (1) moves finished transfers off the multi handle
 * into `done`, (2) hands streamed bytes to their consumers and (3) runs completion callbacks. User
 * callbacks may therefore start, cancel or inspect requests freely (no CURLM_RECURSIVE_API_CALL, no
 * freeing under curl's feet).
 *
 * A call lives on exactly one list: `active` (owned by curl), `done` (finished, callback due) or
 * none (being delivered). Cancelling an active call removes it from curl and frees it; cancelling
 * a done call frees it before its callback. Failures to start are put straight on `done` and a
 * zero-delay event runs dispatch(), so callbacks never fire from the starting call. */
#include "client.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <curl/curl.h>
#include <event2/event.h>
#include <jansson.h>

#include "docker/quirks.h"
#include "util/curl-loop.h"
#include "util/macro.h"
#include "util/parse.h"

#define DEFAULT_MAX_RESPONSE (4u << 20)
#define MAX_INFLIGHT         1024

struct docker_call {
    struct docker_client *client;
    CURL *easy;
    struct curl_slist *headers;
    char *body;
    struct buf resp;
    docker_call_cb *cb;
    docker_call_data_cb *on_data;
    void (*free_userdata)(void *);
    void *userdata;
    CURLcode result;  /* valid once on `done` */
    int start_error;  /* < 0 when the request could not be started */
    bool overflow;    /* body passed max_response */
    int abort_error;  /* on_data asked to stop */
    bool cancelled;   /* cancelled while its callback ran */
    bool data_queued; /* on the client's `streaming` list */
    bool unversioned; /* /_ping: its answer says which engine is behind the socket */
    bool saw_libpod;  /* its answer carried Libpod-Api-Version */
    TAILQ_ENTRY(docker_call) link;
    TAILQ_ENTRY(docker_call) data_link;
    enum {
        CALL_ACTIVE,
        CALL_DONE,
        CALL_DELIVERING
    } where;
    enum {
        CALL_IDLE,
        CALL_IN_CALLBACK
    } state;
    char errbuf[CURL_ERROR_SIZE];
};

TAILQ_HEAD(call_list, docker_call);
TAILQ_HEAD(data_list, docker_call);

struct docker_client {
    struct event_base *base; /* borrowed */
    struct curl_loop *loop;  /* util/curl-loop.h */
    CURLM *multi;            /* the loop's */
    struct event *dispatch_ev;
    char *socket_path;
    unsigned timeout_ms;
    unsigned api_version;
    char prefix[16];
    char peer_api_version[16];
    bool peer_podman;
    struct call_list active, done;
    struct data_list streaming; /* active stream calls with bytes not yet handed over */
    unsigned inflight;
    uint64_t requests, failures;
    bool dispatching;
};

static void dispatch(struct docker_client *c);

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

/* CURLOPT_WRITEFUNCTION: append only; everything else happens in dispatch(). */
static size_t
on_curl_write(char *data, size_t size, size_t nmemb, void *userp)
{
    struct docker_call *call = userp;
    size_t n = size * nmemb;

    if (buf_append(&call->resp, data, n) < 0) {
        call->overflow = true;
        return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
    }
    if (call->on_data != NULL && !call->data_queued) {
        call->data_queued = true;
        TAILQ_INSERT_TAIL(&call->client->streaming, call, data_link);
    }
    return n;
}

/* CURLOPT_HEADERFUNCTION: remember who answered and which API version it speaks. */
static size_t
on_curl_header(char *data, size_t size, size_t nmemb, void *userp)
{
    struct docker_call *call = userp;
    struct docker_client *c = call->client;
    size_t n = size * nmemb, vlen;
    const char *colon = memchr(data, ':', n), *v;

    if (colon == NULL) {
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
    if (strn_case_eq(data, (size_t)(colon - data), "Api-Version") && vlen > 0 &&
        vlen < sizeof(c->peer_api_version)) {
        memcpy(c->peer_api_version, v, vlen);
        c->peer_api_version[vlen] = '\0';
    } else if (strn_case_eq(data, (size_t)(colon - data), "Libpod-Api-Version")) {
        call->saw_libpod = true;
    }
    return n;
}

/* ---- call lifecycle -------------------------------------------------------------------------- */

static void
call_free(struct docker_call *call)
{
    if (call->easy != NULL) {
        curl_easy_cleanup(call->easy);
    }
    curl_slist_free_all(call->headers);
    if (call->free_userdata != NULL) {
        call->free_userdata(call->userdata);
    }
    free(call->body);
    buf_done(&call->resp);
    free(call);
}

static void
schedule_dispatch(struct docker_client *c)
{
    event_active(c->dispatch_ev, EV_TIMEOUT, 0);
}

static int
call_setup(struct docker_call *call, const struct docker_request *req)
{
    struct docker_client *c = call->client;
    char url[2048];
    CURL *e;

    if (snprintf(url, sizeof(url), "http://docker%s%s", req->unversioned ? "" : c->prefix,
                 req->path) >= (int)sizeof(url)) {
        return -ENAMETOOLONG;
    }
    call->unversioned = req->unversioned;
    e = call->easy = OOM_CHECK(curl_easy_init());
    (void)curl_easy_setopt(e, CURLOPT_URL, url);
    (void)curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, c->socket_path);
    (void)curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    (void)curl_easy_setopt(e, CURLOPT_PRIVATE, call);
    (void)curl_easy_setopt(e, CURLOPT_ERRORBUFFER, call->errbuf);
    (void)curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_curl_write);
    (void)curl_easy_setopt(e, CURLOPT_WRITEDATA, call);
    (void)curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_curl_header);
    (void)curl_easy_setopt(e, CURLOPT_HEADERDATA, call);
    (void)curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)MIN(c->timeout_ms, 5000u));
    if (req->timeout_ms != DOCKER_NO_TIMEOUT) {
        (void)curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                               (long)(req->timeout_ms ? req->timeout_ms : c->timeout_ms));
    }
    /* No Expect: 100-continue round trip on POST bodies (docs/internals/engine.md §2). */
    call->headers = OOM_CHECK(curl_slist_append(call->headers, "Expect:"));
    if (strcmp(req->method, "POST") == 0 || strcmp(req->method, "PUT") == 0) {
        call->body = req->body ? xstrndup(req->body, req->body_len) : xstrdup("");
        if (req->body != NULL) {
            call->headers =
                OOM_CHECK(curl_slist_append(call->headers, "Content-Type: application/json"));
        }
        (void)curl_easy_setopt(e, CURLOPT_POSTFIELDS, call->body);
        (void)curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                               (curl_off_t)(req->body ? req->body_len : 0));
        if (strcmp(req->method, "PUT") == 0) {
            (void)curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
        }
    } else if (strcmp(req->method, "GET") != 0) {
        (void)curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req->method);
    }
    (void)curl_easy_setopt(e, CURLOPT_HTTPHEADER, call->headers);
    return 0;
}

struct docker_call *
docker_client_request(struct docker_client *c, const struct docker_request *req, docker_call_cb *cb,
                      void *userdata)
{
    struct docker_call *call = xcalloc(1, sizeof(*call));
    int r;

    call->client = c;
    call->cb = cb;
    call->on_data = req->on_data;
    call->free_userdata = req->free_userdata;
    call->userdata = userdata;
    buf_init(&call->resp, req->max_response ? req->max_response : DEFAULT_MAX_RESPONSE);
    c->requests++;
    c->inflight++;

    r = req->fail < 0 ? req->fail : c->inflight > MAX_INFLIGHT ? -EAGAIN : call_setup(call, req);
    if (r == 0 && curl_multi_add_handle(c->multi, call->easy) != CURLM_OK) {
        r = -EIO;
    }
    if (r < 0) {
        call->start_error = r;
        call->where = CALL_DONE;
        TAILQ_INSERT_TAIL(&c->done, call, link);
        schedule_dispatch(c);
        return call;
    }
    call->where = CALL_ACTIVE;
    TAILQ_INSERT_TAIL(&c->active, call, link);
    return call;
}

void
docker_call_cancel(struct docker_call *call)
{
    struct docker_client *c;

    if (call == NULL) {
        return;
    }
    c = call->client;
    if (call->state == CALL_IN_CALLBACK) {
        /* Its own callback is running; the code that called it frees it afterwards. */
        call->cancelled = true;
        call->cb = NULL;
        return;
    }
    if (call->data_queued) {
        TAILQ_REMOVE(&c->streaming, call, data_link);
        call->data_queued = false;
    }
    switch (call->where) {
    case CALL_ACTIVE:
        TAILQ_REMOVE(&c->active, call, link);
        (void)curl_multi_remove_handle(c->multi, call->easy);
        break;
    case CALL_DONE:
        TAILQ_REMOVE(&c->done, call, link);
        break;
    case CALL_DELIVERING:
        assert(!"unreachable: delivering calls are in a callback");
        return;
    }
    c->inflight--;
    call_free(call);
}

/* ---- completion ------------------------------------------------------------------------------ */

static int
curl_code_to_errno(CURLcode code)
{
    switch (code) {
    case CURLE_OK:
        return 0;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
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

static long
call_status(struct docker_call *call)
{
    long status = 0;

    if (call->easy != NULL) {
        (void)curl_easy_getinfo(call->easy, CURLINFO_RESPONSE_CODE, &status);
    }
    return status;
}

/* Hands streamed bytes to the consumer of an active call; sets abort_error on refusal. */
static void
deliver_stream(struct docker_call *call)
{
    long status;
    int r;

    if (call->on_data == NULL || call->resp.len == 0 || call->abort_error < 0) {
        return;
    }
    status = call_status(call);
    if (status < 200 || status >= 300) {
        return; /* an error body: keep it for the completion */
    }
    call->state = CALL_IN_CALLBACK;
    r = call->on_data(&call->resp, call->userdata);
    call->state = CALL_IDLE;
    if (r < 0) {
        call->abort_error = r;
    }
    if (call->cancelled) {
        call->abort_error = -ECANCELED;
    }
}

static void
complete(struct docker_client *c, struct docker_call *call)
{
    long status = 0;
    int r;

    if (call->start_error < 0) {
        r = call->start_error;
    } else if (call->abort_error < 0) {
        r = call->abort_error;
    } else if (call->overflow) {
        r = -EMSGSIZE;
    } else {
        r = curl_code_to_errno(call->result);
        status = r == 0 ? call_status(call) : 0;
    }
    if (r < 0) {
        c->failures++;
    }
    if (r == 0 && call->unversioned) {
        /* Only a complete /_ping answer switches: calls in flight meanwhile (the liveness ping
         * runs every few seconds) keep the engine's quirks. */
        c->peer_podman = call->saw_libpod;
    }
    c->inflight--;
    if (call->cb != NULL) {
        call->state = CALL_IN_CALLBACK;
        call->cb(r, status, &call->resp, call->userdata);
    }
    call_free(call);
}

static void
dispatch(struct docker_client *c)
{
    struct docker_call *call;
    CURLMsg *msg;
    int left;

    if (c->dispatching) {
        return; /* a callback re-entered the loop glue; the outer dispatch finishes the job */
    }
    c->dispatching = true;
    while ((msg = curl_multi_info_read(c->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE) {
            continue;
        }
        CURLcode result = msg->data.result;

        (void)curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&call);
        (void)curl_multi_remove_handle(c->multi, call->easy); /* msg is invalid from here */
        call->result = result;
        TAILQ_REMOVE(&c->active, call, link);
        call->where = CALL_DONE;
        TAILQ_INSERT_TAIL(&c->done, call, link);
    }
    /* Streams first, so a finished stream's last bytes reach the consumer before its end. */
    while ((call = TAILQ_FIRST(&c->streaming)) != NULL) {
        TAILQ_REMOVE(&c->streaming, call, data_link);
        call->data_queued = false;
        if (call->where != CALL_ACTIVE) {
            continue; /* finished: delivered below, just before its completion */
        }
        deliver_stream(call);
        if (call->abort_error < 0) {
            TAILQ_REMOVE(&c->active, call, link);
            (void)curl_multi_remove_handle(c->multi, call->easy);
            call->where = CALL_DONE;
            TAILQ_INSERT_TAIL(&c->done, call, link);
        }
    }
    while ((call = TAILQ_FIRST(&c->done)) != NULL) {
        TAILQ_REMOVE(&c->done, call, link);
        call->where = CALL_DELIVERING;
        if (call->data_queued) {
            TAILQ_REMOVE(&c->streaming, call, data_link);
            call->data_queued = false;
        }
        if (call->start_error == 0) {
            deliver_stream(call);
        }
        if (call->cancelled) {
            c->inflight--;
            call_free(call);
            continue;
        }
        complete(c, call);
    }
    c->dispatching = false;
}

/* ---- client ---------------------------------------------------------------------------------- */

struct docker_client *
docker_client_new(struct event_base *base, const char *socket_path, unsigned default_timeout_ms)
{
    struct docker_client *c = xcalloc(1, sizeof(*c));
    static bool curl_ready;

    if (!curl_ready) {
        /* Process-wide and not thread-safe; the daemon has one thread. */
        if (curl_global_init(CURL_GLOBAL_NOTHING) != CURLE_OK) {
            oom();
        }
        curl_ready = true;
    }
    c->base = base;
    c->socket_path = xstrdup(socket_path);
    c->timeout_ms = default_timeout_ms;
    TAILQ_INIT(&c->active);
    TAILQ_INIT(&c->done);
    TAILQ_INIT(&c->streaming);
    c->loop = curl_loop_new(base, after_action, c);
    c->multi = curl_loop_multi(c->loop);
    /* Keep enough idle keep-alive connections for bursts of parallel creates. */
    (void)curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, 32L);
    c->dispatch_ev = OOM_CHECK(event_new(base, -1, 0, on_dispatch_event, c));
    docker_client_set_api_version(c, 1041);
    c->api_version = 0; /* not negotiated yet; the prefix above is the safe floor */
    return c;
}

struct docker_client *
docker_client_free(struct docker_client *c)
{
    struct docker_call *call;

    if (c == NULL) {
        return NULL;
    }
    assert(!c->dispatching);
    while ((call = TAILQ_FIRST(&c->active)) != NULL) {
        docker_call_cancel(call);
    }
    while ((call = TAILQ_FIRST(&c->done)) != NULL) {
        docker_call_cancel(call);
    }
    curl_loop_free(c->loop);
    event_free(c->dispatch_ev);
    free(c->socket_path);
    free(c);
    return NULL;
}

unsigned
docker_client_api_version(const struct docker_client *c)
{
    return c->api_version;
}

const char *
docker_client_prefix(const struct docker_client *c)
{
    return c->prefix;
}

void
docker_client_set_api_version(struct docker_client *c, unsigned version)
{
    c->api_version = version;
    (void)snprintf(c->prefix, sizeof(c->prefix), "/v%u.%u", version / 1000, version % 1000);
}

const char *
docker_client_socket(const struct docker_client *c)
{
    return c->socket_path;
}

struct event_base *
docker_client_base(const struct docker_client *c)
{
    return c->base;
}

unsigned
docker_client_timeout_ms(const struct docker_client *c)
{
    return c->timeout_ms;
}

void
docker_client_set_timeout_ms(struct docker_client *c, unsigned ms)
{
    c->timeout_ms = ms;
}

const char *
docker_client_peer_api_version(const struct docker_client *c)
{
    return c->peer_api_version;
}

bool
docker_client_peer_is_podman(const struct docker_client *c)
{
    return c->peer_podman;
}

const struct docker_quirks *
docker_client_quirks(const struct docker_client *c)
{
    return docker_quirks_of(c->peer_podman ? DOCKER_ENGINE_PODMAN : DOCKER_ENGINE_DOCKER);
}

void
docker_client_get_stats(const struct docker_client *c, struct docker_client_stats *ret)
{
    ret->requests = c->requests;
    ret->failures = c->failures;
    ret->inflight = c->inflight;
}

void
docker_client_count_request(struct docker_client *c)
{
    c->requests++;
}

int
docker_status_to_errno(long status, const char *body, size_t len, struct err *reterr)
{
    const char *msg = NULL;
    json_t *root;
    int code;

    if (status >= 200 && status < 300) {
        return 0;
    }
    switch (status) {
    case 304:
        code = -EALREADY;
        break;
    case 400:
        code = -EINVAL;
        break;
    case 401:
    case 403:
        code = -EACCES;
        break;
    case 404:
        code = -ENOENT;
        break;
    case 409:
        code = -EBUSY;
        break;
    case 500:
    case 502:
    case 503:
        code = -EIO;
        break;
    default:
        code = -EPROTO;
        break;
    }
    root = len > 0 ? json_loadb(body, len, 0, NULL) : NULL;
    if (root != NULL) {
        msg = json_string_value(json_object_get(root, "message"));
    }
    if (msg != NULL) {
        (void)err_set(reterr, code, "engine answered %ld: %s", status, msg);
    } else {
        (void)err_set(reterr, code, "engine answered %ld", status);
    }
    json_decref(root);
    return code;
}
