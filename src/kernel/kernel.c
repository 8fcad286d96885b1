/* Kernel connection; see kernel.h.
 *
 * Byte path: engine attach stream (docker/hijack.c) -> stdout frames -> kernel_splitter (lines,
 * garbage-tolerant) -> kernel_proto_decode -> handler. The kernel's own stderr (a Python
 * traceback if the supervisor itself breaks) is kept, bounded, for the close reason.
 *
 * Re-entrancy: every handler may call kernel_free(). `depth` counts handlers on the stack and a
 * free inside one only marks `free_pending`; the data path stops at the first such mark and the
 * outermost frame frees (as hijack.c does for its own handle). */
#include "kernel.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "docker/client.h"
#include "docker/hijack.h"
#include "util/macro.h"
#include "util/time.h"

#define STDERR_KEEP 1024

struct kernel {
    struct docker_client *client; /* borrowed */
    struct docker_hijack *stream;
    struct event *hello_timer;
    struct kernel_splitter splitter;
    struct kernel_handlers h;
    void *userdata;
    char container[129];
    char stderr_tail[STDERR_KEEP];
    size_t stderr_len;
    bool hello_seen, closed;
    int depth;
    bool free_pending;
    int64_t gen;
    struct kernel_stats stats;
};

static void kernel_destroy(struct kernel *k);

/* Ends the connection once and reports it, unless the user is freeing it. */
static void
kernel_close(struct kernel *k, int r, const char *why)
{
    char msg[512];

    if (k->closed) {
        return;
    }
    k->closed = true;
    (void)event_del(k->hello_timer);
    k->stream = docker_hijack_free(k->stream);
    if (k->stderr_len > 0) {
        (void)snprintf(msg, sizeof(msg), "%s; kernel stderr: %.*s", why, (int)k->stderr_len,
                       k->stderr_tail);
        why = msg;
    }
    if (k->h.on_closed != NULL && !k->free_pending) {
        k->depth++;
        k->h.on_closed(k, r, why, k->userdata);
        k->depth--;
    }
}

static int
on_message(json_t *obj, void *userdata)
{
    struct kernel *k = userdata;
    struct kernel_msg m;

    if (kernel_proto_decode(obj, &m) < 0) {
        k->stats.garbage++;
        return 0;
    }
    k->stats.messages++;
    if (m.gen >= 0) {
        k->gen = m.gen;
    }
    k->depth++;
    switch (m.type) {
    case KERNEL_MSG_HELLO:
        if (!k->hello_seen) {
            k->hello_seen = true;
            (void)event_del(k->hello_timer);
        }
        if (k->h.on_hello != NULL) {
            k->h.on_hello(k, &m, k->userdata);
        }
        break;
    case KERNEL_MSG_OUT:
        if (k->h.on_output != NULL) {
            k->h.on_output(k, m.id, m.to_stderr, m.text, m.text_len, k->userdata);
        }
        break;
    case KERNEL_MSG_DONE:
        if (k->h.on_done != NULL) {
            k->h.on_done(k, &m, k->userdata);
        }
        break;
    case KERNEL_MSG_RESTARTED:
        if (k->h.on_restarted != NULL) {
            k->h.on_restarted(k, &m, k->userdata);
        }
        break;
    case KERNEL_MSG_ARTIFACT:
        if (k->h.on_artifact != NULL) {
            k->h.on_artifact(k, &m, k->userdata);
        }
        break;
    case KERNEL_MSG_PONG:
    case KERNEL_MSG_BOUND:
    case KERNEL_MSG_ERROR:
    case KERNEL_MSG__COUNT:
    case KERNEL_MSG__INVALID:
        break;
    }
    k->depth--;
    return k->free_pending || k->closed ? -ECANCELED : 0;
}

static int
on_stream_data(struct docker_hijack *h, enum docker_stream s, const char *data, size_t n,
               void *userdata)
{
    struct kernel *k = userdata;

    k->stats.bytes_in += n;
    if (s != DOCKER_STREAM_STDOUT) {
        /* Keep the last bytes of the kernel's own stderr for the close reason. */
        size_t take = MIN(n, sizeof(k->stderr_tail));

        if (k->stderr_len + take > sizeof(k->stderr_tail)) {
            size_t drop = k->stderr_len + take - sizeof(k->stderr_tail);

            memmove(k->stderr_tail, k->stderr_tail + drop, k->stderr_len - drop);
            k->stderr_len -= drop;
        }
        memcpy(k->stderr_tail + k->stderr_len, data + n - take, take);
        k->stderr_len += take;
        return 0;
    }
    return kernel_splitter_feed(&k->splitter, data, n, on_message, k);
}

static void
on_stream_event(struct docker_hijack *h, enum docker_hijack_event ev, int r, const struct err *e,
                void *userdata)
{
    struct kernel *k = userdata;
    char *hello;

    switch (ev) {
    case DOCKER_HIJACK_OPEN:
        hello = kernel_proto_simple("hello", NULL, NULL);
        (void)docker_hijack_write(k->stream, hello, strlen(hello));
        free(hello);
        return;
    case DOCKER_HIJACK_DRAINED:
        return;
    case DOCKER_HIJACK_CLOSED:
        k->depth++;
        kernel_close(k, r < 0 ? r : -ECONNRESET,
                     r < 0 && e != NULL ? e->msg : "the kernel closed its output");
        k->depth--;
        if (k->free_pending && k->depth == 0) {
            kernel_destroy(k);
        }
        return;
    }
}

static void
on_hello_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct kernel *k = arg;

    kernel_close(k, -ETIMEDOUT, "the kernel did not answer hello in time");
    if (k->free_pending && k->depth == 0) {
        kernel_destroy(k);
    }
}

int
kernel_open(struct docker_client *c, const char *container_id, unsigned hello_timeout_ms,
            const struct kernel_handlers *h, void *userdata, struct kernel **ret,
            struct err *reterr)
{
    struct kernel *k = xcalloc(1, sizeof(*k));
    struct docker_hijack_opts o = {
        .max_queued = KERNEL_MAX_QUEUE,
        .on_data = on_stream_data,
        .on_event = on_stream_event,
        .userdata = k,
    };
    struct timeval tv;
    int r;

    k->client = c;
    k->h = *h;
    k->userdata = userdata;
    k->gen = -1;
    (void)snprintf(k->container, sizeof(k->container), "%s", container_id);
    kernel_splitter_init(&k->splitter);
    k->hello_timer = OOM_CHECK(evtimer_new(docker_client_base(c), on_hello_timeout, k));
    r = docker_hijack_attach(c, container_id, &o, &k->stream, reterr);
    if (r < 0) {
        kernel_destroy(k);
        return r;
    }
    time_tv_from_ms(&tv, hello_timeout_ms);
    (void)evtimer_add(k->hello_timer, &tv);
    *ret = k;
    return 0;
}

static void
kernel_destroy(struct kernel *k)
{
    docker_hijack_free(k->stream);
    event_free(k->hello_timer);
    kernel_splitter_done(&k->splitter);
    free(k);
}

struct kernel *
kernel_free(struct kernel *k)
{
    if (k == NULL) {
        return NULL;
    }
    if (k->depth > 0) {
        k->free_pending = true;
        return NULL;
    }
    kernel_destroy(k);
    return NULL;
}

void
kernel_set_handlers(struct kernel *k, const struct kernel_handlers *h, void *userdata)
{
    k->h = *h;
    k->userdata = userdata;
}

static int
send_line(struct kernel *k, char *line)
{
    int r = k->closed || k->stream == NULL ? -EPIPE
                                           : docker_hijack_write(k->stream, line, strlen(line));

    free(line);
    return r;
}

int
kernel_exec(struct kernel *k, const char *id, const char *code, size_t code_len,
            uint64_t max_output)
{
    return send_line(k, kernel_proto_exec(id, code, code_len, max_output));
}

int
kernel_cmd(struct kernel *k, const char *id, json_t *argv, uint64_t max_output)
{
    return send_line(k, kernel_proto_cmd(id, argv, max_output));
}

int
kernel_interrupt(struct kernel *k, const char *id)
{
    return send_line(k, kernel_proto_simple("interrupt", "id", id));
}

int
kernel_restart(struct kernel *k, const char *reason)
{
    return send_line(k, kernel_proto_simple("restart", "reason", reason));
}

int
kernel_bind(struct kernel *k, const char *session_id)
{
    return send_line(k, kernel_proto_simple("bind", "session", session_id));
}

int
kernel_ping(struct kernel *k)
{
    return send_line(k, kernel_proto_simple("ping", NULL, NULL));
}

void
kernel_pause(struct kernel *k, bool pause)
{
    if (k->stream != NULL) {
        docker_hijack_pause_read(k->stream, pause);
    }
}

bool
kernel_is_open(const struct kernel *k)
{
    return !k->closed && k->hello_seen;
}

int64_t
kernel_gen(const struct kernel *k)
{
    return k->gen;
}

const char *
kernel_container(const struct kernel *k)
{
    return k->container;
}

void
kernel_get_stats(const struct kernel *k, struct kernel_stats *ret)
{
    *ret = k->stats;
    ret->garbage += k->splitter.garbage;
}
