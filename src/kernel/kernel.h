/* The daemon's connection to the kernel inside one container: a hijacked attach stream to the
 * container's stdio speaking the protocol of kernel/proto.h.
 *
 * Lifecycle: kernel_open() attaches and sends "hello"; on_hello fires once when the kernel
 * answers (the connection is then usable), or on_closed fires if it does not within the
 * deadline. on_closed fires exactly once for every connection that does not end by
 * kernel_free(). The handle stays valid until kernel_free(), which may be called from inside any
 * of its callbacks. Handlers can be swapped (kernel_set_handlers) when a warm container passes
 * from the pool to a session.
 *
 * Closing the connection does not stop the kernel. Docker keeps the container's stdin open, so
 * a later kernel_open() (after a daemon restart) attaches to the same kernel again. Podman's
 * conmon closes it when the attach ends (docker/quirks.h stdin_survives_detach): the kernel then
 * waits for a relay, a process started with exec (`python3 -I -S KERNEL_RELAY`, as
 * another uid than user code's, so that user code can neither trace nor signal it, and the
 * kernel refuses connections from user code's uid) that joins its stdio to the kernel's abstract
 * unix socket; the relay's first line carries the container's key (its DOCKER_LABEL_KEY label),
 * which the kernel learned from the first hello on its stdin, before any user code ran. Loop
 * context only. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "kernel/proto.h"
#include "util/err.h"

struct docker_client;
struct kernel;

struct kernel_handlers {
    void (*on_hello)(struct kernel *k, const struct kernel_msg *m, void *userdata);
    /* Output text of execution exec_id (UTF-8, may hold NUL; len bytes). */
    void (*on_output)(struct kernel *k, const char *exec_id, bool to_stderr, const char *text,
                      size_t len, void *userdata);
    void (*on_done)(struct kernel *k, const struct kernel_msg *m, void *userdata);
    /* A file the running execution produced (checked; see struct kernel_msg). */
    void (*on_artifact)(struct kernel *k, const struct kernel_msg *m, void *userdata);
    void (*on_restarted)(struct kernel *k, const struct kernel_msg *m, void *userdata);
    void (*on_closed)(struct kernel *k, int r, const char *why, void *userdata);
};

/* The relay program in every sandpool image (images/python/sandbox/relay.py). */
#define KERNEL_RELAY "/opt/sandpool/relay.py"

/* Which container and how to reach its kernel. */
struct kernel_target {
    const char *container_id;
    const char *key;        /* the container's relay key (sent with hello), or NULL for none */
    bool relay;             /* through a relay started with exec (needs key), not the stdio */
    const char *relay_user; /* "uid:gid" the relay runs as: never user code's uid */
};

/* Connects to the kernel of t->container_id (engine client borrowed; must outlive the kernel;
 * t copied). hello_timeout_ms bounds the time to the hello answer, the relay's exec included.
 * Immediate failures return -errno with no callback. */
int kernel_open(struct docker_client *c, const struct kernel_target *t, unsigned hello_timeout_ms,
                const struct kernel_handlers *h, void *userdata, struct kernel **ret,
                struct err *reterr);
struct kernel *kernel_free(struct kernel *k);
void kernel_set_handlers(struct kernel *k, const struct kernel_handlers *h, void *userdata);

/* Requests; each returns 0, -EPIPE when the connection is closed, -ENOBUFS when the kernel is
 * not draining its stdin (more than KERNEL_MAX_QUEUE, 64 MiB, queued: proto.h). */
int kernel_exec(struct kernel *k, const char *id, const char *code, size_t code_len,
                uint64_t max_output, const struct kernel_exec_opts *o);
int kernel_cmd(struct kernel *k, const char *id, json_t *argv, uint64_t max_output,
               const struct kernel_exec_opts *o);
int kernel_interrupt(struct kernel *k, const char *id);
int kernel_restart(struct kernel *k, const char *reason);
int kernel_bind(struct kernel *k, const char *session_id);

/* Backpressure: stop or resume reading the kernel's output. */
void kernel_pause(struct kernel *k, bool pause);
bool kernel_is_open(const struct kernel *k);
/* The kernel's worker generation as last reported (hello, restarted). */
int64_t kernel_gen(const struct kernel *k);
