/* Fake sandbox kernel; see fake-kernel.h.
 *
 * One execution at a time, as kernel.py: a request for another while one runs is answered with
 * done "rejected". Ordering follows kernel.py: output before done, "restarted" before the done
 * of an execution the restart or the worker's death ended (so the daemon's epoch has moved when
 * it answers). Deferred ends (sleep) run from a timer on the test's loop. */
#include "fake-kernel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "util/buf.h"
#include "util/macro.h"
#include "util/parse.h"
#include "util/time.h"

#define NS_MAX    32
#define LINE_MAX_ (64u << 20) /* kernel.py's MAX_LINE */

enum run_mode {
    RUN_ENDING, /* ends when its timer fires (0 ms: the next loop turn) */
    RUN_HANG,
    RUN_HANG_HARD,
};

struct fk_exec {
    char id[65];
    bool is_cmd;
    enum run_mode mode;
    uint64_t max_output;
    uint64_t total[2], head[2], dropped[2]; /* [0] stdout, [1] stderr */
    struct buf tail[2];
    json_t *result; /* string, or NULL */
    json_t *error;  /* object, or NULL */
    int exit_code;
    uint64_t started_ms;
};

struct fake_kernel {
    struct event_base *base;
    fake_kernel_write_fn *write;
    void *userdata;
    struct buf in;
    bool silent;
    int64_t gen;
    char session[129];
    bool used;
    char key[129];
    struct fk_exec *cur;
    struct event *timer;
    char *ns_name[NS_MAX];
    char *ns_value[NS_MAX];
    unsigned counts[8];
};

static const char *const count_names[8] = {"hello",   "exec", "cmd",  "interrupt",
                                           "restart", "bind", "ping", "garbage"};

static void
count(struct fake_kernel *k, const char *t)
{
    for (size_t i = 0; i < ELEMENTSOF(count_names); i++) {
        if (strcmp(count_names[i], t) == 0) {
            k->counts[i]++;
        }
    }
}

/* Sends obj (stolen) as one line. */
static void
send_new(struct fake_kernel *k, json_t *obj)
{
    char *text = json_dumps(obj, JSON_COMPACT);
    size_t n;

    json_decref(obj);
    if (text == NULL) {
        abort();
    }
    n = strlen(text);
    text = realloc(text, n + 2);
    if (text == NULL) {
        abort();
    }
    text[n++] = '\n';
    text[n] = '\0';
    if (k->write != NULL && !k->silent) {
        k->write(text, n, k->userdata);
    }
    free(text);
}

static void
ns_clear(struct fake_kernel *k)
{
    for (size_t i = 0; i < NS_MAX; i++) {
        free(k->ns_name[i]);
        free(k->ns_value[i]);
        k->ns_name[i] = k->ns_value[i] = NULL;
    }
}

static const char *
ns_get(const struct fake_kernel *k, const char *name)
{
    for (size_t i = 0; i < NS_MAX; i++) {
        if (k->ns_name[i] != NULL && strcmp(k->ns_name[i], name) == 0) {
            return k->ns_value[i];
        }
    }
    return NULL;
}

static void
ns_set(struct fake_kernel *k, const char *name, const char *value)
{
    size_t free_slot = NS_MAX;

    for (size_t i = 0; i < NS_MAX; i++) {
        if (k->ns_name[i] != NULL && strcmp(k->ns_name[i], name) == 0) {
            free(k->ns_value[i]);
            k->ns_value[i] = strdup(value);
            return;
        }
        if (k->ns_name[i] == NULL && free_slot == NS_MAX) {
            free_slot = i;
        }
    }
    if (free_slot < NS_MAX) {
        k->ns_name[free_slot] = strdup(name);
        k->ns_value[free_slot] = strdup(value);
    }
}

static void
send_out(struct fake_kernel *k, bool to_stderr, const char *text, size_t n)
{
    send_new(k, json_pack("{s:s, s:s, s:s, s:s%}", "t", "out", "id", k->cur->id, "s",
                          to_stderr ? "e" : "o", "d", text, n));
}

/* Output of the current execution, cut at its max_output as kernel.py's Capture does: the
 * first 3/4 (the head) streamed as it comes, past it only the last 1/4 (the tail) kept, sent
 * before done (tail_flush()). ASCII only: no character boundaries to mind. */
static void
output(struct fake_kernel *k, bool to_stderr, const char *text, size_t n)
{
    struct fk_exec *x = k->cur;
    int i = to_stderr ? 1 : 0;
    uint64_t head_cap = x->max_output - x->max_output / 4;
    size_t take = (size_t)MIN((uint64_t)n, head_cap - MIN(x->head[i], head_cap));
    struct buf *tail = &x->tail[i];

    x->total[i] += n;
    x->head[i] += take;
    if (take > 0) {
        send_out(k, to_stderr, text, take);
    }
    text += take;
    n -= take;
    if (n > tail->max) {
        text += n - tail->max;
        n = tail->max;
    }
    if (n > tail->max - tail->len) {
        buf_consume(tail, n - (tail->max - tail->len));
    }
    if (n > 0 && buf_append(tail, text, n) < 0) {
        abort();
    }
}

/* The tail, with kernel.py's marker when bytes were cut; sets dropped. */
static void
tail_flush(struct fake_kernel *k)
{
    struct fk_exec *x = k->cur;
    char marker[96];

    for (int i = 0; i < 2; i++) {
        x->dropped[i] = x->total[i] - x->head[i] - x->tail[i].len;
        if (x->dropped[i] > 0) {
            int len = snprintf(marker, sizeof(marker), "\n[... %llu bytes of output cut ...]\n",
                               (unsigned long long)x->dropped[i]);

            send_out(k, i == 1, marker, (size_t)len);
        }
        if (x->tail[i].len > 0) {
            send_out(k, i == 1, x->tail[i].buf, x->tail[i].len);
        }
    }
}

static void
exec_free(struct fk_exec *x)
{
    json_decref(x->result);
    json_decref(x->error);
    buf_done(&x->tail[0]);
    buf_done(&x->tail[1]);
    free(x);
}

static json_t *
error_new(const char *name, const char *value)
{
    return json_pack("{s:s, s:s, s:[s]}", "name", name, "value", value, "traceback",
                     "Traceback (most recent call last): fake");
}

/* Sends done for the current execution with status and extra members (stolen; may be NULL). */
static void
finish(struct fake_kernel *k, const char *status, json_t *extra)
{
    struct fk_exec *x = k->cur;
    json_t *msg;

    (void)event_del(k->timer);
    tail_flush(k);
    msg = json_pack("{s:s, s:s, s:I, s:s, s:{s:[I,I], s:[I,I]}, s:I, s:{s:i, s:i}}", "t", "done",
                    "id", x->id, "gen", (json_int_t)k->gen, "status", status, "truncated", "o",
                    (json_int_t)x->total[0], (json_int_t)x->dropped[0], "e",
                    (json_int_t)x->total[1], (json_int_t)x->dropped[1], "duration_ms",
                    (json_int_t)(time_now_ms() - x->started_ms), "resources", "cpu_ms", 1,
                    "peak_memory_bytes", 1 << 20);
    if (x->is_cmd) {
        (void)json_object_set_new(msg, "exit_code", json_integer(x->exit_code));
    } else {
        (void)json_object_set_new(msg, "result", x->result ? json_incref(x->result) : json_null());
        (void)json_object_set_new(msg, "error", x->error ? json_incref(x->error) : json_null());
    }
    if (extra != NULL) {
        (void)json_object_update(msg, extra);
        json_decref(extra);
    }
    k->cur = NULL;
    exec_free(x);
    send_new(k, msg);
}

/* A new worker generation: the namespace is gone. */
static void
new_worker(struct fake_kernel *k, const char *reason)
{
    k->gen++;
    ns_clear(k);
    send_new(k, json_pack("{s:s, s:I, s:s}", "t", "restarted", "gen", (json_int_t)k->gen, "reason",
                          reason));
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct fake_kernel *k = arg;

    if (k->cur != NULL && k->cur->mode == RUN_ENDING) {
        finish(k,
               k->cur->is_cmd ? (k->cur->exit_code == 0 ? "ok" : "error")
                              : (k->cur->error ? "error" : "ok"),
               NULL);
    }
}

static void
end_in(struct fake_kernel *k, unsigned ms)
{
    struct timeval tv;

    time_tv_from_ms(&tv, ms);
    (void)evtimer_add(k->timer, &tv);
}

/* One directive of code; false when it ended the execution (die, oom). */
static bool
directive(struct fake_kernel *k, char *d, unsigned *sleep_ms)
{
    struct fk_exec *x = k->cur;
    char *arg = strchr(d, ' '), *arg2;
    char line[4096];
    uint64_t n;

    if (arg != NULL) {
        *arg++ = '\0';
    }
    arg2 = arg ? strchr(arg, ' ') : NULL;
    if ((strcmp(d, "print") == 0 || strcmp(d, "eprint") == 0) && arg != NULL) {
        int len = snprintf(line, sizeof(line), "%s\n", arg);

        output(k, d[0] == 'e', line, (size_t)MIN(len, (int)sizeof(line) - 1));
    } else if (strcmp(d, "result") == 0 && arg != NULL) {
        json_decref(x->result);
        x->result = json_string(arg);
    } else if (strcmp(d, "raise") == 0 && arg != NULL) {
        if (arg2 != NULL) {
            *arg2++ = '\0';
        }
        json_decref(x->error);
        x->error = error_new(arg, arg2 ? arg2 : "");
    } else if (strcmp(d, "set") == 0 && arg2 != NULL) {
        *arg2++ = '\0';
        ns_set(k, arg, arg2);
    } else if (strcmp(d, "get") == 0 && arg != NULL) {
        const char *v = ns_get(k, arg);

        json_decref(x->result);
        x->result = v ? json_string(v) : NULL;
        if (v == NULL) {
            (void)snprintf(line, sizeof(line), "name '%s' is not defined", arg);
            json_decref(x->error);
            x->error = error_new("NameError", line);
        }
    } else if (strcmp(d, "spam") == 0 && arg != NULL && parse_u64(arg, &n) == 0) {
        memset(line, 'x', sizeof(line));
        for (; n > 0; n -= MIN(n, (uint64_t)sizeof(line))) {
            output(k, false, line, (size_t)MIN(n, (uint64_t)sizeof(line)));
        }
    } else if (strcmp(d, "sleep") == 0 && arg != NULL && parse_u64(arg, &n) == 0) {
        *sleep_ms = (unsigned)MIN(n, 3600000u);
    } else if (strcmp(d, "hang") == 0 || strcmp(d, "hang-hard") == 0) {
        x->mode = d[4] == '\0' ? RUN_HANG : RUN_HANG_HARD;
    } else if (strcmp(d, "die") == 0 || strcmp(d, "oom") == 0) {
        fake_kernel_worker_dies(k, d[0] == 'o');
        return false;
    } else if (d[0] != '\0') {
        (void)snprintf(line, sizeof(line), "unknown directive '%.64s'", d);
        json_decref(x->error);
        x->error = error_new("FakeKernelError", line);
    }
    return true;
}

static void
run_code(struct fake_kernel *k, const char *code)
{
    char *copy = strdup(code), *d = copy, *end;
    unsigned sleep_ms = 0;
    bool more = true;

    while (more) {
        end = d + strcspn(d, ";\n");
        more = *end != '\0';
        *end = '\0';
        while (*d == ' ') {
            d++;
        }
        if (!directive(k, d, &sleep_ms)) {
            free(copy);
            return;
        }
        d = end + 1;
    }
    free(copy);
    if (k->cur->mode == RUN_ENDING) {
        end_in(k, sleep_ms);
    }
}

static void
run_cmd(struct fake_kernel *k, json_t *argv)
{
    const char *a0 = json_string_value(json_array_get(argv, 0));
    struct fk_exec *x = k->cur;
    struct buf line = BUF_INIT(1u << 20);

    x->exit_code = 127;
    if (a0 != NULL && strcmp(a0, "echo") == 0) {
        for (size_t i = 1; i < json_array_size(argv); i++) {
            const char *s = json_string_value(json_array_get(argv, i));

            if ((i > 1 && buf_putc(&line, ' ') < 0) || buf_puts(&line, s ? s : "") < 0) {
                break;
            }
        }
        if (buf_putc(&line, '\n') == 0) {
            output(k, false, line.buf, line.len);
        }
        x->exit_code = 0;
    } else if (a0 != NULL && strcmp(a0, "false") == 0) {
        x->exit_code = 1;
    } else if (a0 != NULL && strcmp(a0, "hang") == 0) {
        x->mode = RUN_HANG;
    }
    buf_done(&line);
    if (x->mode == RUN_ENDING) {
        end_in(k, 0);
    }
}

static void
start(struct fake_kernel *k, json_t *req, bool is_cmd)
{
    const char *id = json_string_value(json_object_get(req, "id"));
    json_t *max = json_object_get(req, "max_output");
    struct fk_exec *x;

    k->used = true;
    if (id == NULL) {
        send_new(k, json_pack("{s:s, s:s}", "t", "error", "error", "'id' must be a string"));
        return;
    }
    if (k->cur != NULL) {
        send_new(k, json_pack("{s:s, s:s, s:I, s:s, s:s}", "t", "done", "id", id, "gen",
                              (json_int_t)k->gen, "status", "rejected", "reason", "busy"));
        return;
    }
    x = calloc(1, sizeof(*x));
    if (x == NULL) {
        abort();
    }
    (void)snprintf(x->id, sizeof(x->id), "%s", id);
    x->is_cmd = is_cmd;
    x->max_output = json_is_integer(max) && json_integer_value(max) > 0
                        ? (uint64_t)json_integer_value(max)
                        : 1u << 20;
    buf_init(&x->tail[0], (size_t)(x->max_output / 4));
    buf_init(&x->tail[1], (size_t)(x->max_output / 4));
    x->started_ms = time_now_ms();
    k->cur = x;
    if (is_cmd) {
        run_cmd(k, json_object_get(req, "argv"));
    } else {
        run_code(k, json_string_value(json_object_get(req, "code")) ?: "");
    }
}

static void
interrupt(struct fake_kernel *k, json_t *req)
{
    const char *id = json_string_value(json_object_get(req, "id"));
    struct fk_exec *x = k->cur;

    if (x == NULL || (id != NULL && strcmp(id, x->id) != 0) || x->mode == RUN_HANG_HARD) {
        return;
    }
    if (x->is_cmd) {
        x->exit_code = 137;
        finish(k, "interrupted", NULL);
        return;
    }
    json_decref(x->error);
    x->error = error_new("KeyboardInterrupt", "");
    finish(k, "interrupted", NULL);
}

static void
restart(struct fake_kernel *k, json_t *req)
{
    const char *reason = json_string_value(json_object_get(req, "reason"));
    char why[256];

    k->used = true;
    new_worker(k, reason ? reason : "requested");
    if (k->cur == NULL) {
        return;
    }
    if (k->cur->is_cmd) {
        k->cur->exit_code = 137;
        finish(k, "interrupted", NULL);
        return;
    }
    (void)snprintf(why, sizeof(why), "restarted: %s", reason ? reason : "requested");
    finish(k, "died", json_pack("{s:b, s:s}", "oom", 0, "reason", why));
}

static void
handle(struct fake_kernel *k, json_t *req)
{
    const char *t = json_string_value(json_object_get(req, "t"));
    const char *s;

    count(k, t);
    if (strcmp(t, "hello") == 0) {
        s = json_string_value(json_object_get(req, "key"));
        if (k->key[0] == '\0' && s != NULL) {
            (void)snprintf(k->key, sizeof(k->key), "%s", s);
        }
        send_new(k, json_pack("{s:s, s:i, s:I, s:s?, s:s?, s:b}", "t", "hello", "v", 1, "gen",
                              (json_int_t)k->gen, "busy", k->cur ? k->cur->id : NULL, "session",
                              k->session[0] ? k->session : NULL, "used", k->used));
    } else if (strcmp(t, "bind") == 0) {
        s = json_string_value(json_object_get(req, "session"));
        if (k->session[0] == '\0' && s != NULL) {
            (void)snprintf(k->session, sizeof(k->session), "%s", s);
        }
        k->used = true;
        send_new(k, json_pack("{s:s, s:s?}", "t", "bound", "session",
                              k->session[0] ? k->session : NULL));
    } else if (strcmp(t, "ping") == 0) {
        send_new(k, json_pack("{s:s, s:O?, s:I}", "t", "pong", "n", json_object_get(req, "n"),
                              "gen", (json_int_t)k->gen));
    } else if (strcmp(t, "exec") == 0 || strcmp(t, "cmd") == 0) {
        start(k, req, t[0] == 'c');
    } else if (strcmp(t, "interrupt") == 0) {
        interrupt(k, req);
    } else if (strcmp(t, "restart") == 0) {
        restart(k, req);
    } else if (strcmp(t, "relay") != 0) { /* a relay's first line: the engine checked its key */
        send_new(k, json_pack("{s:s, s:s}", "t", "error", "error", "unknown request"));
    }
}

void
fake_kernel_feed(struct fake_kernel *k, const char *data, size_t n)
{
    char *nl;

    if (buf_append(&k->in, data, n) < 0) {
        buf_reset(&k->in); /* kernel.py drops an over-long line */
        return;
    }
    while ((nl = memchr(k->in.buf, '\n', k->in.len)) != NULL) {
        size_t len = (size_t)(nl - k->in.buf);
        json_t *req = json_loadb(k->in.buf, len, 0, NULL);

        if (json_is_object(req) && json_is_string(json_object_get(req, "t"))) {
            if (!k->silent) {
                handle(k, req);
            }
        } else if (len > 0) {
            count(k, "garbage");
        }
        json_decref(req);
        buf_consume(&k->in, len + 1);
    }
}

void
fake_kernel_worker_dies(struct fake_kernel *k, bool oom)
{
    new_worker(k, oom ? "oom" : "exit 1");
    if (k->cur != NULL && !k->cur->is_cmd) {
        finish(k, "died", json_pack("{s:b, s:s}", "oom", oom, "reason", oom ? "oom" : "exit 1"));
    } else if (k->cur != NULL) {
        k->cur->exit_code = 137;
        finish(k, "error", NULL);
    }
}

struct fake_kernel *
fake_kernel_new(struct event_base *base)
{
    struct fake_kernel *k = calloc(1, sizeof(*k));

    if (k == NULL) {
        abort();
    }
    k->base = base;
    k->gen = 1;
    buf_init(&k->in, LINE_MAX_);
    k->timer = evtimer_new(base, on_timer, k);
    return k;
}

struct fake_kernel *
fake_kernel_free(struct fake_kernel *k)
{
    if (k == NULL) {
        return NULL;
    }
    if (k->cur != NULL) {
        exec_free(k->cur);
    }
    ns_clear(k);
    event_free(k->timer);
    buf_done(&k->in);
    free(k);
    return NULL;
}

void
fake_kernel_set_output(struct fake_kernel *k, fake_kernel_write_fn *fn, void *userdata)
{
    k->write = fn;
    k->userdata = userdata;
}

void
fake_kernel_set_silent(struct fake_kernel *k, bool silent)
{
    k->silent = silent;
}

int64_t
fake_kernel_gen(const struct fake_kernel *k)
{
    return k->gen;
}

const char *
fake_kernel_session(const struct fake_kernel *k)
{
    return k->session[0] ? k->session : NULL;
}

const char *
fake_kernel_busy(const struct fake_kernel *k)
{
    return k->cur ? k->cur->id : NULL;
}

unsigned
fake_kernel_count(const struct fake_kernel *k, const char *t)
{
    for (size_t i = 0; i < ELEMENTSOF(count_names); i++) {
        if (strcmp(count_names[i], t) == 0) {
            return k->counts[i];
        }
    }
    return 0;
}

const char *
fake_kernel_key(const struct fake_kernel *k)
{
    return k->key;
}
