/* One-shot exec runner; see exec.h.
 *
 * Steps: CREATE (POST /containers/{id}/exec) -> STREAM (hijacked start; stdin is written in
 * slices of at most 1 MiB as the socket drains, then half-closed) -> INSPECT (GET /exec/{id}/json
 * until Running is false, backing off 5..100 ms) -> done. One evtimer bounds the whole run, or,
 * when streaming, the time without progress. The runner owns whichever engine call or stream is
 * in flight and cancels it on every exit path, so exactly one completion reaches the caller. */
#include "exec.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "docker/hijack.h"
#include "util/macro.h"
#include "util/time.h"

#define STDIN_SLICE ((size_t)1 << 20)

struct docker_exec_run {
    struct docker_client *client; /* borrowed */
    struct docker_call *call;     /* engine request in flight, if any */
    struct docker_hijack *stream;
    struct event *deadline;
    struct event *retry;
    char exec_id[129];
    char *stdin_data;
    size_t stdin_len, stdin_off;
    bool with_stdin;
    unsigned retry_ms;
    /* streaming: the caller feeds stdin and takes stdout */
    const struct docker_exec_io *io;
    unsigned idle_ms;
    struct docker_exec_result res;
    docker_exec_run_cb *cb;
    void *userdata;
};

static void
run_free(struct docker_exec_run *run)
{
    docker_call_cancel(run->call);
    docker_hijack_free(run->stream);
    event_free(run->deadline);
    event_free(run->retry);
    free(run->stdin_data);
    buf_done(&run->res.out);
    buf_done(&run->res.err);
    free(run);
}

static void
run_finish(struct docker_exec_run *run, int r, const struct err *e)
{
    run->call = NULL; /* the finishing call is completing; it frees itself */
    run->cb(r, r == 0 ? &run->res : NULL, e, run->userdata);
    run_free(run);
}

static void
on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct docker_exec_run *run = arg;
    struct err e;

    docker_call_cancel(run->call);
    run->call = NULL;
    (void)err_set(&e, -ETIMEDOUT, "exec '%s' did not finish in time", run->exec_id);
    run_finish(run, -ETIMEDOUT, &e);
}

static void start_inspect(struct docker_exec_run *run);

static void
on_inspect(int r, json_t *result, const struct err *e, void *userdata)
{
    struct docker_exec_run *run = userdata;
    json_t *running, *code;
    struct err e2;

    run->call = NULL;
    if (r < 0) {
        run_finish(run, r, e);
        return;
    }
    running = json_object_get(result, "Running");
    code = json_object_get(result, "ExitCode");
    if (json_is_true(running) || !json_is_integer(code)) {
        struct timeval tv;

        run->retry_ms = MIN(run->retry_ms ? run->retry_ms * 2 : 5, 100u);
        time_tv_from_ms(&tv, run->retry_ms);
        (void)evtimer_add(run->retry, &tv);
        return;
    }
    run->res.exit_code = (int)json_integer_value(code);
    if (run->res.exit_code < 0 || run->res.exit_code > 255) {
        run_finish(run, err_set(&e2, -EPROTO, "engine reported exit code %d", run->res.exit_code),
                   &e2);
        return;
    }
    run_finish(run, 0, NULL);
}

static void
start_inspect(struct docker_exec_run *run)
{
    run->call = docker_exec_inspect(run->client, run->exec_id, on_inspect, run);
}

static void
on_retry(evutil_socket_t fd, short what, void *arg)
{
    start_inspect(arg);
}

/* Streaming: progress pushes the deadline back. */
static void
touch(struct docker_exec_run *run)
{
    struct timeval tv;

    if (run->io != NULL) {
        time_tv_from_ms(&tv, run->idle_ms);
        (void)evtimer_add(run->deadline, &tv);
    }
}

static void
feed_stdin(struct docker_exec_run *run)
{
    while (run->stdin_off < run->stdin_len) {
        size_t n = MIN(run->stdin_len - run->stdin_off, (size_t)STDIN_SLICE);

        if (docker_hijack_queued(run->stream) > 0) {
            return; /* wait for DRAINED: keeps at most one slice queued */
        }
        if (docker_hijack_write(run->stream, run->stdin_data + run->stdin_off, n) < 0) {
            return; /* closed; the CLOSED event reports it */
        }
        run->stdin_off += n;
    }
    docker_hijack_shutdown_write(run->stream);
}

static int
on_stream_data(struct docker_hijack *h, enum docker_stream stream, const char *data, size_t n,
               void *userdata)
{
    struct docker_exec_run *run = userdata;
    /* The engine's own error text (stream 3) goes with stderr: it is not program output. */
    bool to_err = stream == DOCKER_STREAM_STDERR || stream == DOCKER_STREAM_SYSTEMERR;
    struct buf *b = to_err ? &run->res.err : &run->res.out;

    if (run->io != NULL && !to_err) {
        touch(run);
        return run->io->on_stdout(data, n, run->userdata);
    }
    bool *trunc = to_err ? &run->res.err_truncated : &run->res.out_truncated;
    size_t room = b->max - b->len;

    if (buf_append(b, data, MIN(n, room)) < 0 || n > room) {
        *trunc = true;
    }
    return 0;
}

static void
on_stream_event(struct docker_hijack *h, enum docker_hijack_event ev, int r, const struct err *e,
                void *userdata)
{
    struct docker_exec_run *run = userdata;

    switch (ev) {
    case DOCKER_HIJACK_OPEN:
    case DOCKER_HIJACK_DRAINED:
        if (run->io != NULL) {
            touch(run);
            if (run->io->on_writable != NULL) {
                run->io->on_writable(run->userdata);
            }
        } else if (run->with_stdin) {
            feed_stdin(run);
        }
        return;
    case DOCKER_HIJACK_CLOSED:
        run->stream = docker_hijack_free(run->stream);
        if (r < 0) {
            run_finish(run, r, e);
            return;
        }
        start_inspect(run);
        return;
    }
}

static void
on_created(int r, json_t *result, const struct err *e, void *userdata)
{
    struct docker_exec_run *run = userdata;
    const char *id = json_string_value(json_object_get(result, "Id"));
    struct err e2;

    run->call = NULL;
    if (r < 0) {
        run_finish(run, r, e);
        return;
    }
    if (id == NULL || !docker_valid_id(id)) {
        run_finish(run, err_set(&e2, -EPROTO, "engine answered exec create without an Id"), &e2);
        return;
    }
    memcpy(run->exec_id, id, strlen(id) + 1);
    struct docker_hijack_opts o = {
        .max_queued = 2 * STDIN_SLICE,
        .on_data = on_stream_data,
        .on_event = on_stream_event,
        .userdata = run,
    };
    r = docker_hijack_exec_start(run->client, id, &o, &run->stream, &e2);
    if (r < 0) {
        run_finish(run, r, &e2);
    }
}

static struct docker_exec_run *
run_new(struct docker_client *c, size_t max_output, unsigned timeout_ms, docker_exec_run_cb *cb,
        void *userdata)
{
    struct docker_exec_run *run = xcalloc(1, sizeof(*run));
    struct timeval tv;

    run->client = c;
    run->cb = cb;
    run->userdata = userdata;
    buf_init(&run->res.out, max_output);
    buf_init(&run->res.err, max_output);
    run->deadline = OOM_CHECK(evtimer_new(docker_client_base(c), on_deadline, run));
    run->retry = OOM_CHECK(evtimer_new(docker_client_base(c), on_retry, run));
    time_tv_from_ms(&tv, timeout_ms);
    (void)evtimer_add(run->deadline, &tv);
    return run;
}

struct docker_exec_run *
docker_exec_run(struct docker_client *c, const char *id, const struct docker_exec_spec *spec,
                const void *stdin_data, size_t stdin_len, size_t max_output, unsigned timeout_ms,
                docker_exec_run_cb *cb, void *userdata)
{
    struct docker_exec_run *run = run_new(c, max_output, timeout_ms, cb, userdata);
    struct docker_exec_spec s = *spec;

    run->with_stdin = stdin_data != NULL;
    if (run->with_stdin) {
        run->stdin_data = xmalloc(stdin_len);
        memcpy(run->stdin_data, stdin_data, stdin_len);
        run->stdin_len = stdin_len;
    }
    s.attach_stdin = run->with_stdin;
    run->call = docker_exec_create(c, id, &s, on_created, run);
    return run;
}

struct docker_exec_run *
docker_exec_stream(struct docker_client *c, const char *id, const struct docker_exec_spec *spec,
                   const struct docker_exec_io *io, size_t max_stderr, unsigned idle_ms,
                   docker_exec_run_cb *cb, void *userdata)
{
    struct docker_exec_run *run = run_new(c, max_stderr, idle_ms, cb, userdata);

    run->io = io;
    run->idle_ms = idle_ms;
    run->with_stdin = spec->attach_stdin;
    run->call = docker_exec_create(c, id, spec, on_created, run);
    return run;
}

int
docker_exec_write(struct docker_exec_run *run, const void *data, size_t n)
{
    if (run->stream == NULL || !docker_hijack_is_open(run->stream)) {
        return -EPIPE;
    }
    touch(run);
    return docker_hijack_write(run->stream, data, n);
}

size_t
docker_exec_queued(const struct docker_exec_run *run)
{
    return run->stream != NULL ? docker_hijack_queued(run->stream) : 0;
}

void
docker_exec_close_stdin(struct docker_exec_run *run)
{
    if (run->stream != NULL) {
        docker_hijack_shutdown_write(run->stream);
    }
}

void
docker_exec_pause(struct docker_exec_run *run, bool pause)
{
    if (run->stream != NULL) {
        docker_hijack_pause_read(run->stream, pause);
    }
    /* The idle clock runs only while the process may make progress: a slow reader on the
     * caller's side is the caller's to bound. */
    if (pause) {
        (void)evtimer_del(run->deadline);
    } else {
        touch(run);
    }
}

void
docker_exec_run_cancel(struct docker_exec_run *run)
{
    if (run != NULL) {
        run_free(run);
    }
}
