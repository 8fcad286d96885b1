/* Asynchronous HTTP client for the Docker Engine API (and Podman's Docker-compatible API) over
 * a unix socket, on the daemon's libcurl transfer engine (util/transfer.h: one libcurl multi
 * handle driven by the libevent loop). Nothing in here blocks the loop.
 *
 * Contract of every request:
 *  - the completion callback runs exactly once, never from inside the call that started the
 *    request, unless the request is cancelled first (then it never runs);
 *  - every request has a deadline unless it is explicitly a stream (events, wait);
 *  - the response body is bounded; r < 0 is a transport failure (-ECONNREFUSED/-ENOENT: engine
 *    not there, -ETIMEDOUT, -EMSGSIZE: body over the cap, -ECANCELED: client freed, -EIO);
 *    r == 0 means an HTTP answer arrived, whatever its status.
 *
 * Loop context only; not thread-safe. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/err.h"

struct event_base;
struct docker_client;
struct docker_call;
struct docker_quirks;

/* Completion: r as above; status is the HTTP status (0 when r < 0); body is borrowed and valid
 * only during the callback. */
typedef void docker_call_cb(int r, long status, const struct buf *body, void *userdata);
/* Streaming delivery for long-lived answers (events): called outside libcurl with the bytes
 * received so far; the callee consumes what it can with buf_consume() and leaves partial records
 * for the next call. Return 0, or a negative errno to abort the transfer (the completion then
 * reports that value). Only called for 2xx answers. */
typedef int docker_call_data_cb(struct buf *data, void *userdata);

struct docker_request {
    const char *method; /* "GET", "POST", "DELETE" */
    const char *path;   /* without version prefix, e.g. "/containers/json?all=1" */
    const char *body;   /* JSON, copied; NULL for none */
    size_t body_len;
    unsigned timeout_ms;           /* 0 = client default; DOCKER_NO_TIMEOUT for streams */
    size_t max_response;           /* 0 = client default (4 MiB) */
    bool unversioned;              /* "/_ping" before negotiation */
    docker_call_data_cb *on_data;  /* NULL: buffer the whole body */
    void (*free_userdata)(void *); /* called once when the call is freed (done or cancelled) */
    int fail; /* < 0: do not send; complete with this error (bad arguments found by the caller) */
};

#define DOCKER_NO_TIMEOUT UINT32_MAX

struct docker_client_stats {
    uint64_t requests; /* HTTP requests started (also counts hijacked streams) */
    uint64_t failures; /* transport failures */
    unsigned inflight;
};

/* Creates a client for the engine at socket_path. base is borrowed. */
struct docker_client *docker_client_new(struct event_base *base, const char *socket_path,
                                        unsigned default_timeout_ms);
/* Cancels every request (their callbacks do not run) and frees c. Accepts NULL. Must not be
 * called from inside one of this client's callbacks. */
struct docker_client *docker_client_free(struct docker_client *c);

/* Starts a request. Returns the call handle (borrowed: valid until its completion callback
 * returns or it is cancelled). Never NULL: failures to start are reported through the callback. */
struct docker_call *docker_client_request(struct docker_client *c, const struct docker_request *req,
                                          docker_call_cb *cb, void *userdata);
/* Cancels a call that has not completed: its callback will not run. Accepts NULL. */
void docker_call_cancel(struct docker_call *call);

/* The negotiated API version as major*1000+minor (0 before negotiation), and "/v1.41". */
unsigned docker_client_api_version(const struct docker_client *c);
const char *docker_client_prefix(const struct docker_client *c);
/* Records the API version to use for every later versioned path. */
void docker_client_set_api_version(struct docker_client *c, unsigned version);
const char *docker_client_socket(const struct docker_client *c);
struct event_base *docker_client_base(const struct docker_client *c);
unsigned docker_client_timeout_ms(const struct docker_client *c);
void docker_client_set_timeout_ms(struct docker_client *c, unsigned ms);
/* The value of the last Api-Version (or Libpod-Api-Version) header seen, "" if none, and
 * whether the peer identified itself as Podman. */
const char *docker_client_peer_api_version(const struct docker_client *c);
bool docker_client_peer_is_podman(const struct docker_client *c);
/* The differences of the engine found at the last /_ping (docker/quirks.h); Docker's before. */
const struct docker_quirks *docker_client_quirks(const struct docker_client *c);
void docker_client_get_stats(const struct docker_client *c, struct docker_client_stats *ret);
/* Counts a request that bypassed libcurl (hijacked streams), for the engine request counter. */
void docker_client_count_request(struct docker_client *c);

/* Maps an HTTP error status and Docker's {"message": ...} body to a negative errno and a
 * message "engine answered <status>: <message>". Pure; exposed for tests. */
int docker_status_to_errno(long status, const char *body, size_t len, struct err *reterr);
