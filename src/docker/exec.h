/* One-shot exec with stdin and collected output: create, start (hijacked), feed stdin, half-close,
 * collect stdout and stderr apart, then read the exit code (retrying while the engine still
 * reports the process as running, docs/internals/engine.md §4).
 *
 * This is for administrative commands (health probes, file transfer helpers, tests), never for
 * the request hot path: it costs an engine round trip per step. The completion fires exactly
 * once and never synchronously; docker_exec_run_cancel() suppresses it. Note that cancelling, or
 * hitting the deadline, does not stop the process inside the container (there is no exec kill in
 * the engine API, docs/internals/engine.md §4): callers that care kill the container. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "docker/api.h"
#include "util/buf.h"
#include "util/err.h"

struct docker_exec_run;

struct docker_exec_result {
    int exit_code;
    struct buf out; /* borrowed for the callback; bounded by max_output */
    struct buf err;
    bool out_truncated, err_truncated;
};

/* r == 0: the process ran and exit_code is valid. r < 0: -ETIMEDOUT (deadline), engine errors. */
typedef void docker_exec_run_cb(int r, const struct docker_exec_result *res, const struct err *e,
                                void *userdata);

/* Starts argv in container id. stdin_data (copied; may be NULL) is streamed in and stdin is then
 * closed; without stdin_data the exec gets no stdin at all. Output beyond max_output per stream
 * is dropped and flagged. timeout_ms bounds the whole run. */
struct docker_exec_run *docker_exec_run(struct docker_client *c, const char *id,
                                        const struct docker_exec_spec *spec, const void *stdin_data,
                                        size_t stdin_len, size_t max_output, unsigned timeout_ms,
                                        docker_exec_run_cb *cb, void *userdata);
void docker_exec_run_cancel(struct docker_exec_run *run);

/* Streaming use (file transfers): the caller writes stdin as the stream takes it and receives
 * stdout as it arrives, with backpressure both ways; stderr is still collected (max_stderr). */
struct docker_exec_io {
    /* stdout bytes; return 0, or a negative errno to end the run with that error. */
    int (*on_stdout)(const char *data, size_t n, void *userdata);
    /* The stream is open, or everything written so far was sent: stdin can take more. Optional. */
    void (*on_writable)(void *userdata);
};

/* Like docker_exec_run() but streaming (io borrowed; stdin attached when spec->attach_stdin).
 * idle_ms bounds the time without progress (bytes either way), not the whole run. The
 * completion's res->out is empty. */
struct docker_exec_run *docker_exec_stream(struct docker_client *c, const char *id,
                                           const struct docker_exec_spec *spec,
                                           const struct docker_exec_io *io, size_t max_stderr,
                                           unsigned idle_ms, docker_exec_run_cb *cb,
                                           void *userdata);
/* Queues stdin bytes: 0, -EPIPE (not open yet, or closed), -ENOBUFS (over 2 MiB queued: wait
 * for on_writable). */
int docker_exec_write(struct docker_exec_run *run, const void *data, size_t n);
size_t docker_exec_queued(const struct docker_exec_run *run);
/* EOF on the process's stdin once everything queued is sent. */
void docker_exec_close_stdin(struct docker_exec_run *run);
/* Stops or resumes reading stdout (backpressure); the idle clock stops while paused. */
void docker_exec_pause(struct docker_exec_run *run, bool pause);
