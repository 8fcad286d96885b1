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

#include "docker/api.h"
#include "docker/client.h"
#include "docker/hijack.h"
#include "docker/json.h"
#include "util/macro.h"
#include "util/time.h"

#define STDERR_KEEP 1024

struct kernel {
    struct docker_client *client; /* borrowed */
    struct docker_call *call;     /* the relay's exec create in flight */
    struct docker_hijack *stream;
    struct event *hello_timer;
    struct kernel_splitter splitter;
    struct kernel_handlers h;
    void *userdata;
    char container[129];
    char key[65];
    bool relay;
    char stderr_tail[STDERR_KEEP];
    size_t stderr_len;
    bool hello_seen, closed;
    int depth;
    bool free_pending;
    int64_t gen;
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
    if (k->call != NULL) {
        docker_call_cancel(k->call);
        k->call = NULL;
    }
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
        return 0; /* not a message of the protocol: skipped, as the splitter skips garbage */
    }
    if (m.gen >= 0) { /* hello and restarted only (proto.c) */
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
        if (k->relay) {
            /* The relay's first line, checked by the kernel before anything else passes. */
            hello = kernel_proto_simple("relay", "key", k->key);
            (void)docker_hijack_write(k->stream, hello, strlen(hello));
            free(hello);
        }
        hello = kernel_proto_simple("hello", k->key[0] ? "key" : NULL, k->key);
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

static void
stream_opts(struct kernel *k, struct docker_hijack_opts *o)
{
    *o = (struct docker_hijack_opts){
        .max_queued = KERNEL_MAX_QUEUE,
        .on_data = on_stream_data,
        .on_event = on_stream_event,
        .userdata = k,
    };
}

static void
on_relay_created(int r, json_t *result, const struct err *e, void *userdata)
{
    struct kernel *k = userdata;
    const char *exec_id = docker_answer_id(result);
    struct docker_hijack_opts o;
    struct err e2 = {0};
    char msg[320];

    k->call = NULL;
    if (r == 0 && exec_id == NULL) {
        r = err_set(&e2, -EPROTO, "the engine's exec answer has no Id");
        e = &e2;
    }
    if (r == 0) {
        stream_opts(k, &o);
        r = docker_hijack_exec_start(k->client, exec_id, &o, &k->stream, &e2);
        e = &e2;
    }
    if (r < 0) {
        (void)snprintf(msg, sizeof(msg), "starting the kernel's relay failed: %s",
                       e != NULL ? err_msg(e) : strerror(-r));
        kernel_close(k, r, msg);
        if (k->free_pending && k->depth == 0) {
            kernel_destroy(k);
        }
    }
}

int
kernel_open(struct docker_client *c, const struct kernel_target *t, unsigned hello_timeout_ms,
            const struct kernel_handlers *h, void *userdata, struct kernel **ret,
            struct err *reterr)
{
    /* -I -S: nothing from the environment or the writable HOME (user code's) is imported. */
    static const char *const relay_argv[] = {"python3", "-I", "-S", KERNEL_RELAY, NULL};
    struct kernel *k;
    struct docker_hijack_opts o;
    struct timeval tv;
    int r;

    if (t->relay && (t->relay_user == NULL || t->relay_user[0] == '\0')) {
        return err_set(reterr, -EINVAL, "a relay needs a user of its own");
    }
    if (t->relay && (t->key == NULL || t->key[0] == '\0')) {
        return err_set(reterr, -ENOKEY,
                       "container %.12s has no relay key (created by an older sandpoold?): its "
                       "kernel cannot be reached again on this engine",
                       t->container_id);
    }
    k = xcalloc(1, sizeof(*k));
    k->client = c;
    k->h = *h;
    k->userdata = userdata;
    k->gen = -1;
    k->relay = t->relay;
    (void)snprintf(k->container, sizeof(k->container), "%s", t->container_id);
    (void)snprintf(k->key, sizeof(k->key), "%s", t->key ? t->key : "");
    kernel_splitter_init(&k->splitter);
    k->hello_timer = OOM_CHECK(evtimer_new(docker_client_base(c), on_hello_timeout, k));
    if (t->relay) {
        /* "/": the workspace is the sandbox user's alone (mode 0700). */
        struct docker_exec_spec spec = {
            .argv = relay_argv, .user = t->relay_user, .workdir = "/", .attach_stdin = true};

        /* Failures, an invalid id included, come back through the callback. */
        k->call = docker_exec_create(c, t->container_id, &spec, on_relay_created, k);
    } else {
        stream_opts(k, &o);
        r = docker_hijack_attach(c, t->container_id, &o, &k->stream, reterr);
        if (r < 0) {
            kernel_destroy(k);
            return r;
        }
    }
    time_tv_from_ms(&tv, hello_timeout_ms);
    (void)evtimer_add(k->hello_timer, &tv);
    *ret = k;
    return 0;
}

static void
kernel_destroy(struct kernel *k)
{
    if (k->call != NULL) {
        docker_call_cancel(k->call);
    }
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
            uint64_t max_output, const struct kernel_exec_opts *o)
{
    return send_line(k, kernel_proto_exec(id, code, code_len, max_output, o));
}

int
kernel_cmd(struct kernel *k, const char *id, json_t *argv, uint64_t max_output,
           const struct kernel_exec_opts *o)
{
    return send_line(k, kernel_proto_cmd(id, argv, max_output, o));
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
