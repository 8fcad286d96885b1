/* Hijacked bidirectional engine streams: exec start and container attach.
 *
 * libcurl cannot half-close or hand over a live connection, so these use their own AF_UNIX socket
 * under a libevent bufferevent (docs/internals/engine.md §4 has the engine's rules). The request
 * carries Host, Content-Type, Connection: Upgrade and Upgrade: tcp. Bytes written before the
 * 101/200 status line are held back; bytes that arrive with the headers are stream data; the
 * stream is always parsed as 8-byte multiplexed frames because we never ask for a TTY.
 *
 * Events, each delivered at most once except DRAINED:
 *   OPEN     the engine accepted; stdin may flow
 *   DRAINED  everything written so far has reached the kernel socket buffer
 *   CLOSED   the stream ended: r == 0 clean EOF on a frame boundary; r < 0 otherwise (handshake
 *            refused with the engine's status mapped to errno, -ETIMEDOUT handshake deadline,
 *            -EPROTO garbage or truncation, -ECONNRESET, or the data callback's own error).
 * CLOSED always comes exactly once, and never from inside docker_hijack_new(). The handle stays
 * valid until docker_hijack_free(), which may be called from inside any callback. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "docker/frames.h"
#include "util/err.h"

struct event_base;
struct docker_hijack;

enum docker_hijack_event {
    DOCKER_HIJACK_OPEN,
    DOCKER_HIJACK_DRAINED,
    DOCKER_HIJACK_CLOSED,
};

typedef void docker_hijack_event_cb(struct docker_hijack *h, enum docker_hijack_event ev, int r,
                                    const struct err *e, void *userdata);
/* Payload of stdout, stderr or the engine's system-error stream. Return 0, or a negative errno to
 * end the stream with that error. */
typedef int docker_hijack_data_cb(struct docker_hijack *h, enum docker_stream stream,
                                  const char *data, size_t n, void *userdata);

struct docker_hijack_opts {
    const char *socket_path;
    const char *path;              /* with version prefix, e.g. "/v1.41/exec/ID/start" */
    const char *body;              /* JSON, or NULL for none */
    unsigned handshake_timeout_ms; /* deadline for connect + status line */
    size_t max_queued;             /* bound on written-but-unsent bytes; 0 = 4 MiB */
    docker_hijack_data_cb *on_data;
    docker_hijack_event_cb *on_event;
    void *userdata;
};

/* Connects and sends the request. On success *ret is the handle and events follow; on immediate
 * failure (socket path unusable, connect refused synchronously) returns -errno, writes reterr and
 * no callback ever runs. */
int docker_hijack_new(struct event_base *base, const struct docker_hijack_opts *o,
                      struct docker_hijack **ret, struct err *reterr);
/* Closes the connection without further callbacks and frees h (deferred when called from inside
 * a callback). Accepts NULL; returns NULL. */
struct docker_hijack *docker_hijack_free(struct docker_hijack *h);

/* Queues stdin bytes. 0, -EPIPE after shutdown or close, -ENOBUFS when the queue would pass
 * max_queued (wait for DRAINED). */
int docker_hijack_write(struct docker_hijack *h, const void *data, size_t n);
/* Bytes queued and not yet handed to the kernel. */
size_t docker_hijack_queued(const struct docker_hijack *h);
/* Half-closes our side (SHUT_WR) once every queued byte is sent: the process sees EOF on stdin.
 * Reading goes on until the engine closes. */
void docker_hijack_shutdown_write(struct docker_hijack *h);
/* Stops or resumes reading (backpressure). A pause requested from inside the data callback takes
 * effect after the current read chunk (at most 64 KiB); data already buffered is delivered on
 * resume. */
void docker_hijack_pause_read(struct docker_hijack *h, bool pause);
bool docker_hijack_is_open(const struct docker_hijack *h);

struct docker_client;

/* Starts exec exec_id (from docker_exec_create) as a hijacked stream on c's engine, with c's
 * API version and deadline. o->socket_path, o->path and o->body are filled in here. */
int docker_hijack_exec_start(struct docker_client *c, const char *exec_id,
                             struct docker_hijack_opts *o, struct docker_hijack **ret,
                             struct err *reterr);
/* Attaches to container id's stdio (stdin, stdout, stderr; no logs replay). The container must
 * have been created with OpenStdin for stdin to flow; with StdinOnce false, closing this stream
 * leaves the container's stdin open, so a later attach can take over (how a restarted daemon
 * reaches the in-sandbox program again). */
int docker_hijack_attach(struct docker_client *c, const char *id, struct docker_hijack_opts *o,
                         struct docker_hijack **ret, struct err *reterr);
