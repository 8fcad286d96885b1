/* The engine client over util/transfer.c; see client.h for the request contract.
 *
 * A call is one transfer of the client's transfer engine (one libcurl multi handle on the loop),
 * which gives the contract its shape: one completion, never from the starting call and never
 * after a cancel; nothing user-visible inside libcurl (a stream's bytes reach its consumer
 * through on_buffered, after libcurl returned); failures to start end on the next loop turn.
 * What is the engine's own is here: the URL with the negotiated version prefix, the bounds
 * (MAX_INFLIGHT calls, 4 MiB answers), the errno a transport failure maps to, and what the
 * answers' headers say of the engine behind the socket (Api-Version, Libpod-Api-Version). */
#include "client.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "docker/quirks.h"
#include "util/macro.h"
#include "util/parse.h"
#include "util/transfer.h"

#define DEFAULT_MAX_RESPONSE (4u << 20)
#define MAX_INFLIGHT         1024
#define CONNS_KEPT           32 /* idle keep-alive connections, for bursts of parallel creates */

struct docker_call {
    struct docker_client *client;
    struct transfer *t;
    docker_call_cb *cb;
    docker_call_data_cb *on_data;
    void (*free_userdata)(void *);
    void *userdata;
    bool ended;       /* its completion ran (and counted it out of `inflight`) */
    bool unversioned; /* /_ping: its answer says which engine is behind the socket */
    bool saw_libpod;  /* its answer carried Libpod-Api-Version */
};

struct docker_client {
    struct event_base *base;        /* borrowed */
    struct transfer_engine *engine; /* util/transfer.h */
    char *socket_path;
    unsigned timeout_ms;
    unsigned api_version;
    char prefix[16];
    char peer_api_version[16];
    bool peer_podman;
    unsigned inflight;
    uint64_t requests, failures;
};

/* ---- the transfer's callbacks ---------------------------------------------------------------- */

/* Inside libcurl: remember who answered and which API version it speaks. */
static void
on_header(struct transfer *t, const char *name, size_t name_len, const char *v, size_t vlen,
          void *userdata)
{
    struct docker_call *call = userdata;
    struct docker_client *c = call->client;

    if (strn_case_eq(name, name_len, "Api-Version") && vlen > 0 &&
        vlen < sizeof(c->peer_api_version)) {
        memcpy(c->peer_api_version, v, vlen);
        c->peer_api_version[vlen] = '\0';
    } else if (strn_case_eq(name, name_len, "Libpod-Api-Version")) {
        call->saw_libpod = true;
    }
}

static int
on_buffered(struct transfer *t, struct buf *answer, void *userdata)
{
    struct docker_call *call = userdata;

    return call->on_data(answer, call->userdata);
}

static void
on_done(struct transfer *t, int r, void *userdata)
{
    struct docker_call *call = userdata;
    struct docker_client *c = call->client;
    long status = 0;

    if (r == -EHOSTUNREACH) {
        r = -EIO; /* nothing resolves over the unix socket; client.h names no such error */
    }
    if (r < 0) {
        c->failures++;
    } else {
        status = transfer_status(t);
    }
    if (r == 0 && call->unversioned) {
        /* Only a complete /_ping answer switches: calls in flight meanwhile (the liveness ping
         * runs every few seconds) keep the engine's quirks. */
        c->peer_podman = call->saw_libpod;
    }
    c->inflight--;
    call->ended = true;
    if (call->cb != NULL) {
        call->cb(r, status, transfer_answer(t), call->userdata);
    }
}

static void
on_free(void *userdata)
{
    struct docker_call *call = userdata;

    if (!call->ended) {
        call->client->inflight--; /* cancelled */
    }
    if (call->free_userdata != NULL) {
        call->free_userdata(call->userdata);
    }
    free(call);
}

static const struct transfer_ops call_ops = {
    .on_header = on_header,
    .on_done = on_done,
    .on_free = on_free,
};

/* A stream's: its bytes go to its consumer as they come. */
static const struct transfer_ops stream_ops = {
    .on_header = on_header,
    .on_buffered = on_buffered,
    .on_done = on_done,
    .on_free = on_free,
};

/* ---- calls ----------------------------------------------------------------------------------- */

static void
call_setup(struct docker_call *call, const struct docker_request *req)
{
    struct transfer *t = call->t;
    struct buf body = BUF_INIT(req->body_len);

    /* No Expect: 100-continue round trip on POST bodies (docs/internals/engine.md §2). */
    transfer_add_header(t, "Expect:");
    if (req->body != NULL) {
        if (buf_append(&body, req->body, req->body_len) < 0) {
            oom(); /* cannot happen: the buffer's bound is the body's length */
        }
        if (strcmp(req->method, "POST") == 0 || strcmp(req->method, "PUT") == 0) {
            transfer_add_header(t, "Content-Type: application/json");
        }
    }
    transfer_set_method(t, req->method, &body);
    buf_done(&body);
}

struct docker_call *
docker_client_request(struct docker_client *c, const struct docker_request *req, docker_call_cb *cb,
                      void *userdata)
{
    struct docker_call *call = xcalloc(1, sizeof(*call));
    char url[2048];
    int r = req->fail < 0 ? req->fail : 0;

    call->client = c;
    call->cb = cb;
    call->on_data = req->on_data;
    call->free_userdata = req->free_userdata;
    call->userdata = userdata;
    call->unversioned = req->unversioned;
    c->requests++;
    c->inflight++;
    if (r == 0 && c->inflight > MAX_INFLIGHT) {
        r = -EAGAIN;
    }
    if (r == 0 && snprintf(url, sizeof(url), "http://docker%s%s", req->unversioned ? "" : c->prefix,
                           req->path) >= (int)sizeof(url)) {
        r = -ENAMETOOLONG;
    }
    call->t = transfer_new(
        c->engine, &(struct transfer_opts){
                       .url = r == 0 ? url : NULL,
                       .unix_socket = c->socket_path,
                       .connect_ms = MIN(c->timeout_ms, 5000u),
                       .total_ms = req->timeout_ms == DOCKER_NO_TIMEOUT ? 0
                                   : req->timeout_ms                    ? req->timeout_ms
                                                                        : c->timeout_ms,
                       .max_answer = req->max_response ? req->max_response : DEFAULT_MAX_RESPONSE,
                       .ops = req->on_data != NULL ? &stream_ops : &call_ops,
                       .userdata = call,
                   });
    if (r < 0) {
        transfer_fail(call->t, r);
        return call;
    }
    call_setup(call, req);
    transfer_start(call->t);
    return call;
}

void
docker_call_cancel(struct docker_call *call)
{
    if (call != NULL) {
        transfer_cancel(call->t);
    }
}

/* ---- client ---------------------------------------------------------------------------------- */

struct docker_client *
docker_client_new(struct event_base *base, const char *socket_path, unsigned default_timeout_ms)
{
    struct docker_client *c = xcalloc(1, sizeof(*c));

    c->base = base;
    c->socket_path = xstrdup(socket_path);
    c->timeout_ms = default_timeout_ms;
    c->engine = transfer_engine_new(base, CONNS_KEPT);
    docker_client_set_api_version(c, 1041);
    c->api_version = 0; /* not negotiated yet; the prefix above is the safe floor */
    return c;
}

struct docker_client *
docker_client_free(struct docker_client *c)
{
    if (c == NULL) {
        return NULL;
    }
    transfer_engine_free(c->engine);
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
