/* Fake Docker Engine; see fake-engine.h.
 *
 * Connections: a plain HTTP connection reads one request at a time (the client never pipelines)
 * and answers it, unless a delay fault holds it; a request with "Upgrade: tcp" that is accepted
 * turns its connection into a stream (attach or exec start), whose later bytes are stdin; GET
 * /events turns it into an event stream answered in chunks. A connection is freed on EOF, on a
 * drop fault, or, for streams the engine ends, once its output is flushed (so the client sees
 * the end on a frame boundary). */
#include "fake-engine.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <jansson.h>

#include "docker/frames.h"
#include "docker/policy.h"
#include "fake-files.h"
#include "fake-kernel.h"
#include "kernel/kernel.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/time.h"

#define FILES_HELPER "/opt/sandpool/files.py" /* src/files/files.c */

#define HEAD_MAX (64u << 10)
#define BODY_MAX (16u << 20)

enum conn_mode {
    CONN_HTTP,
    CONN_STREAM, /* hijacked: attach or exec start */
    CONN_EVENTS,
};

enum fault_kind {
    FAULT_FAIL,
    FAULT_DELAY,
    FAULT_DROP,
};

struct request {
    char method[8];
    char *target; /* as sent, with version prefix and query */
    char *path;   /* without both */
    const char *query;
    char *body;
    size_t body_len;
    bool upgrade;
};

struct ctr;
struct fexec;

struct conn {
    struct fake_engine *fe;
    struct bufferevent *bev;
    enum conn_mode mode;
    struct ctr *ctr;                  /* a stream's container */
    bool relay_pending;               /* a relay stream whose first line (the key) is still due */
    struct fexec *exec;               /* a plain exec's stream */
    struct fake_files_run *files_run; /* an exec of the file helper (fake-files.h) */
    json_t *filters;                  /* an event stream's label filters */
    struct request held;              /* a delayed request */
    bool holding;
    struct event *delay;
    bool closing;
    /* scripted mode */
    bool hijacked;
    TAILQ_ENTRY(conn) link;
};

struct ctr {
    char id[65];
    char name[128];
    json_t *body; /* the create body */
    const char *state;
    int exit_code;
    bool oom_killed;
    struct fake_kernel *kernel;
    struct fake_files *files; /* its workspace, from the first file helper exec on */
    TAILQ_ENTRY(ctr) link;
};

struct fexec {
    char id[65];
    char ctr[65];
    bool relay;
    json_t *files_argv; /* an exec of the file helper: its arguments after files.py */
    bool running;
    int exit_code;
    TAILQ_ENTRY(fexec) link;
};

struct fault {
    enum fault_kind kind;
    char method[8];
    char pattern[128];
    unsigned n;
    int status;
    unsigned ms;
    char message[256];
};

struct fake_engine {
    struct event_base *base;
    struct evconnlistener *lis;
    char dir[64];
    char path[108];
    TAILQ_HEAD(, conn) conns;
    TAILQ_HEAD(, ctr) ctrs;
    TAILQ_HEAD(, fexec) execs;
    struct fault faults[32];
    size_t n_faults;
    char **log; /* "METHOD path" of every request */
    size_t n_log;
    bool kernels_silent;
    bool podman;
    /* scripted mode */
    bool scripted;
    const char *answer;
    size_t answer_len;
    bool close_after;
    int requests;
    char last_request[4096];
    size_t stdin_seen_before_answer;
};

static void conn_free(struct conn *c);
static void process(struct conn *c);

static void *
xalloc0(size_t n)
{
    void *p = calloc(1, n);

    if (p == NULL) {
        abort();
    }
    return p;
}

static char *
xdup(const char *s, size_t n)
{
    char *p = xalloc0(n + 1);

    memcpy(p, s, n);
    return p;
}

/* ---- patterns and faults ----------------------------------------------------------------- */

/* '%' matches one segment; the pattern matches a prefix of path. */
static bool
pattern_match(const char *pattern, const char *path)
{
    for (; *pattern != '\0'; pattern++) {
        if (*pattern == '%') {
            path += strcspn(path, "/");
        } else if (*pattern != *path++) {
            return false;
        }
    }
    return true;
}

static bool
call_match(const char *method, const char *pattern, const char *req_method, const char *path)
{
    return (method == NULL || method[0] == '\0' || strcmp(method, req_method) == 0) &&
           pattern_match(pattern, path);
}

static void
fault_add(struct fake_engine *fe, enum fault_kind kind, const char *method, const char *pattern,
          unsigned n, int status, unsigned ms, const char *message)
{
    struct fault *f;

    if (fe->n_faults >= ELEMENTSOF(fe->faults)) {
        abort();
    }
    f = &fe->faults[fe->n_faults++];
    *f = (struct fault){.kind = kind, .n = n, .status = status, .ms = ms};
    (void)snprintf(f->method, sizeof(f->method), "%s", method ? method : "");
    (void)snprintf(f->pattern, sizeof(f->pattern), "%s", pattern);
    (void)snprintf(f->message, sizeof(f->message), "%s", message ? message : "fault");
}

static struct fault *
fault_take(struct fake_engine *fe, const struct request *r)
{
    for (size_t i = 0; i < fe->n_faults; i++) {
        struct fault *f = &fe->faults[i];

        if (f->n > 0 && call_match(f->method, f->pattern, r->method, r->path)) {
            f->n--;
            return f;
        }
    }
    return NULL;
}

/* ---- answers ----------------------------------------------------------------------------- */

static const char *
reason_of(int status)
{
    switch (status) {
    case 101:
        return "UPGRADED";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 204:
        return "No Content";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 409:
        return "Conflict";
    default:
        return "Error";
    }
}

static void
reply_raw(struct conn *c, int status, const char *type, const char *body, size_t len)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);

    (void)evbuffer_add_printf(out,
                              "HTTP/1.1 %d %s\r\nApi-Version: 1.43\r\nServer: Docker/fake\r\n"
                              "%sContent-Type: %s\r\nContent-Length: %zu\r\n\r\n",
                              status, reason_of(status),
                              c->fe->podman ? "Libpod-Api-Version: 4.3.1\r\n" : "", type, len);
    (void)evbuffer_add(out, body, len);
}

/* Answers with obj (stolen) as JSON; NULL: no body. */
static void
reply_json(struct conn *c, int status, json_t *obj)
{
    char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;

    json_decref(obj);
    reply_raw(c, status, "application/json", text ? text : "", text ? strlen(text) : 0);
    free(text);
}

static void reply_error(struct conn *c, int status, const char *fmt, ...) PRINTF_LIKE(3, 4);

static void
reply_error(struct conn *c, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    reply_json(c, status, json_pack("{s:s}", "message", msg));
}

/* ---- containers -------------------------------------------------------------------------- */

static struct ctr *
ctr_find(const struct fake_engine *fe, const char *id_or_name)
{
    struct ctr *k;

    TAILQ_FOREACH (k, &fe->ctrs, link) {
        if (strcmp(k->id, id_or_name) == 0 || strcmp(k->name, id_or_name) == 0) {
            return k;
        }
    }
    return NULL;
}

static json_t *
ctr_labels(const struct ctr *k)
{
    return json_object_get(k->body, "Labels");
}

/* Docker's label filter: every "key" or "key=value" must hold. */
static bool
labels_match(json_t *labels, json_t *filter)
{
    size_t i;
    json_t *f;

    json_array_foreach (filter, i, f) {
        const char *s = json_string_value(f), *eq = s ? strchr(s, '=') : NULL;
        char key[256];
        const char *v;

        if (s == NULL) {
            return false;
        }
        (void)snprintf(key, sizeof(key), "%.*s", eq ? (int)(eq - s) : (int)strlen(s), s);
        v = json_string_value(json_object_get(labels, key));
        if (v == NULL || (eq != NULL && strcmp(v, eq + 1) != 0)) {
            return false;
        }
    }
    return true;
}

static void
emit_event(struct fake_engine *fe, const struct ctr *k, const char *action)
{
    json_t *attrs = json_deep_copy(ctr_labels(k));
    json_t *ev;
    char *text;
    struct conn *c;

    if (attrs == NULL) {
        attrs = json_object();
    }
    (void)json_object_set_new(attrs, "name", json_string(k->name));
    if (strcmp(action, "die") == 0) {
        char code[16];

        (void)snprintf(code, sizeof(code), "%d", k->exit_code);
        (void)json_object_set_new(attrs, "exitCode", json_string(code));
    }
    ev = json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:o}, s:I}", "Type", "container", "status", action,
                   "id", k->id, "Action", action, "Actor", "ID", k->id, "Attributes", attrs, "time",
                   (json_int_t)(time_wall_ms() / 1000));
    text = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    TAILQ_FOREACH (c, &fe->conns, link) {
        if (c->mode == CONN_EVENTS && !c->closing && labels_match(ctr_labels(k), c->filters)) {
            (void)evbuffer_add_printf(bufferevent_get_output(c->bev), "%zx\r\n%s\n\r\n",
                                      strlen(text) + 1, text);
        }
    }
    free(text);
}

/* Ends c once what it has to send is sent. */
static void
conn_finish(struct conn *c)
{
    c->closing = true;
    bufferevent_disable(c->bev, EV_READ);
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
        conn_free(c);
    }
}

static void
kernel_write(const char *line, size_t n, void *userdata)
{
    struct conn *c = userdata;
    uint8_t hdr[8];

    docker_frames_header(hdr, DOCKER_STREAM_STDOUT, (uint32_t)n);
    (void)bufferevent_write(c->bev, hdr, sizeof(hdr));
    (void)bufferevent_write(c->bev, line, n);
}

/* The kernel's output goes to the newest open stream of its container, if any. */
static void
kernel_rewire(struct fake_engine *fe, struct ctr *k, struct conn *gone)
{
    struct conn *c, *to = NULL;

    if (k->kernel == NULL) {
        return;
    }
    TAILQ_FOREACH (c, &fe->conns, link) {
        if (c != gone && c->mode == CONN_STREAM && c->ctr == k && !c->closing &&
            !c->relay_pending) {
            to = c;
        }
    }
    fake_kernel_set_output(k->kernel, to ? kernel_write : NULL, to);
}

static unsigned
ctr_cut_streams(struct fake_engine *fe, struct ctr *k)
{
    struct conn *c, *next;
    unsigned n = 0;

    for (c = TAILQ_FIRST(&fe->conns); c != NULL; c = next) {
        next = TAILQ_NEXT(c, link);
        if (c->mode == CONN_STREAM && c->ctr == k && !c->closing) {
            c->ctr = NULL;
            n++;
            conn_finish(c);
        }
    }
    if (k->kernel != NULL) {
        fake_kernel_set_output(k->kernel, NULL, NULL);
    }
    return n;
}

static void
ctr_stop(struct fake_engine *fe, struct ctr *k, bool oom)
{
    (void)ctr_cut_streams(fe, k);
    k->kernel = fake_kernel_free(k->kernel);
    k->state = "exited";
    k->exit_code = 137;
    k->oom_killed = oom;
    if (oom) {
        emit_event(fe, k, "oom");
    }
    emit_event(fe, k, "die");
}

static void
ctr_free(struct fake_engine *fe, struct ctr *k)
{
    (void)ctr_cut_streams(fe, k);
    fake_kernel_free(k->kernel);
    fake_files_free(k->files);
    TAILQ_REMOVE(&fe->ctrs, k, link);
    json_decref(k->body);
    free(k);
}

static json_t *
ctr_summary(const struct ctr *k)
{
    return json_pack("{s:s, s:[s+], s:O?, s:s, s:s, s:O}", "Id", k->id, "Names", "/", k->name,
                     "Image", json_object_get(k->body, "Image"), "State", k->state, "Status",
                     k->state, "Labels", ctr_labels(k) ? ctr_labels(k) : json_object());
}

static json_t *
ctr_inspect(const struct ctr *k)
{
    json_t *config = json_deep_copy(k->body);
    json_t *host = json_incref(json_object_get(k->body, "HostConfig"));
    bool running = strcmp(k->state, "running") == 0;

    (void)json_object_del(config, "HostConfig");
    (void)json_object_del(config, "NetworkingConfig");
    return json_pack("{s:s, s:s+, s:o, s:o, s:{s:s, s:b, s:b, s:i, s:i}}", "Id", k->id, "Name", "/",
                     k->name, "Config", config, "HostConfig", host ? host : json_object(), "State",
                     "Status", k->state, "Running", running, "OOMKilled", k->oom_killed, "ExitCode",
                     k->exit_code, "Pid", running ? 4242 : 0);
}

/* ---- endpoints --------------------------------------------------------------------------- */

/* The value of query parameter key, URL-decoded (malloc'd), or NULL. */
static char *
query_get(const char *query, const char *key)
{
    size_t klen = strlen(key);
    const char *p = query;
    char *out, *o;

    while (p != NULL && *p != '\0') {
        if (strncmp(p, key, klen) == 0 && p[klen] == '=') {
            p += klen + 1;
            o = out = xalloc0(strlen(p) + 1);
            for (; *p != '\0' && *p != '&'; p++) {
                unsigned hi, lo;

                if (*p == '%' && p[1] && p[2]) {
                    hi = (unsigned)(p[1] <= '9' ? p[1] - '0' : (p[1] | 0x20) - 'a' + 10);
                    lo = (unsigned)(p[2] <= '9' ? p[2] - '0' : (p[2] | 0x20) - 'a' + 10);
                    *o++ = (char)(hi << 4 | lo);
                    p += 2;
                } else {
                    *o++ = *p;
                    if (o[-1] == '+') {
                        o[-1] = ' ';
                    }
                }
            }
            return out;
        }
        p = strchr(p, '&');
        p = p ? p + 1 : NULL;
    }
    return NULL;
}

static json_t *
label_filter(const char *query)
{
    char *f = query_get(query, "filters");
    json_t *doc = f ? json_loads(f, 0, NULL) : NULL;
    json_t *labels = json_incref(json_object_get(doc, "label"));

    free(f);
    json_decref(doc);
    return labels ? labels : json_array();
}

static void
on_create(struct conn *c, const struct request *r)
{
    struct fake_engine *fe = c->fe;
    char *name = query_get(r->query, "name");
    json_t *body = json_loadb(r->body ? r->body : "", r->body_len, 0, NULL);
    struct ctr *k;

    if (!json_is_object(body)) {
        reply_error(c, 400, "%s", "invalid JSON body");
    } else if (name != NULL && ctr_find(fe, name) != NULL) {
        reply_error(c, 409, "Conflict. The container name \"/%s\" is already in use", name);
    } else {
        k = xalloc0(sizeof(*k));
        random_hex(k->id, 32);
        (void)snprintf(k->name, sizeof(k->name), "%s", name ? name : k->id);
        k->body = json_incref(body);
        k->state = "created";
        TAILQ_INSERT_TAIL(&fe->ctrs, k, link);
        reply_json(c, 201, json_pack("{s:s, s:[]}", "Id", k->id, "Warnings"));
    }
    json_decref(body);
    free(name);
}

static void
on_list(struct conn *c, const struct request *r)
{
    json_t *filter = label_filter(r->query), *arr = json_array();
    struct ctr *k;

    TAILQ_FOREACH (k, &c->fe->ctrs, link) {
        if (labels_match(ctr_labels(k), filter)) {
            (void)json_array_append_new(arr, ctr_summary(k));
        }
    }
    json_decref(filter);
    reply_json(c, 200, arr);
}

static void
on_start(struct conn *c, struct ctr *k)
{
    if (strcmp(k->state, "running") == 0) {
        reply_json(c, 304, NULL);
        return;
    }
    k->state = "running";
    k->exit_code = 0;
    k->oom_killed = false;
    k->kernel = fake_kernel_new(c->fe->base);
    fake_kernel_set_silent(k->kernel, c->fe->kernels_silent);
    emit_event(c->fe, k, "start");
    reply_json(c, 204, NULL);
}

/* Turns c into a stream of container k (101 sent). */
static void
stream_open(struct conn *c, struct ctr *k, bool relay)
{
    static const char up[] =
        "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
        "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n";

    (void)bufferevent_write(c->bev, up, sizeof(up) - 1);
    c->mode = CONN_STREAM;
    c->ctr = k;
    c->relay_pending = relay;
    kernel_rewire(c->fe, k, NULL);
}

static void
on_attach(struct conn *c, const struct request *r, struct ctr *k)
{
    if (!r->upgrade) {
        reply_error(c, 400, "%s", "attach without upgrade is not faked");
    } else if (strcmp(k->state, "running") != 0) {
        reply_error(c, 409, "container %s is not running", k->id);
    } else {
        stream_open(c, k, false);
    }
}

/* ---- the file helper (fake-files.h) ------------------------------------------------------ */

static void
files_write(const char *data, size_t n, bool err, void *userdata)
{
    struct conn *c = userdata;
    uint8_t hdr[8];

    docker_frames_header(hdr, err ? DOCKER_STREAM_STDERR : DOCKER_STREAM_STDOUT, (uint32_t)n);
    (void)bufferevent_write(c->bev, hdr, sizeof(hdr));
    (void)bufferevent_write(c->bev, data, n);
}

static void
files_exit(int code, void *userdata)
{
    struct conn *c = userdata;

    if (c->exec != NULL) {
        c->exec->exit_code = code;
    }
    conn_finish(c); /* its answer is in the output: freed once that is sent */
}

/* Starts the exec x of the file helper on k's workspace, on the hijacked connection c. */
static void
files_open(struct conn *c, struct ctr *k, struct fexec *x)
{
    const char *argv[8];
    size_t argc = 0;

    for (; argc < ELEMENTSOF(argv) && argc < json_array_size(x->files_argv); argc++) {
        argv[argc] = json_string_value(json_array_get(x->files_argv, argc));
    }
    if (k->files == NULL) {
        k->files = fake_files_new();
    }
    (void)bufferevent_write(c->bev, "HTTP/1.1 101 UPGRADED\r\n\r\n", 25);
    c->mode = CONN_STREAM;
    c->exec = x;
    x->running = true;
    c->files_run = fake_files_start(k->files, argv, argc, files_write, files_exit, c);
}

static void
on_exec_create(struct conn *c, const struct request *r, struct ctr *k)
{
    json_t *body = json_loadb(r->body ? r->body : "", r->body_len, 0, NULL);
    json_t *cmd = json_object_get(body, "Cmd");
    struct fexec *x;

    if (strcmp(k->state, "running") != 0) {
        reply_error(c, 409, "container %s is not running", k->id);
        json_decref(body);
        return;
    }
    x = xalloc0(sizeof(*x));
    random_hex(x->id, 32);
    (void)snprintf(x->ctr, sizeof(x->ctr), "%s", k->id);
    for (size_t i = 0; i < json_array_size(cmd); i++) {
        const char *a = json_string_value(json_array_get(cmd, i));

        x->relay = x->relay || (a != NULL && strcmp(a, KERNEL_RELAY) == 0);
        if (x->files_argv != NULL && a != NULL) {
            (void)json_array_append_new(x->files_argv, json_string(a));
        }
        if (a != NULL && strcmp(a, FILES_HELPER) == 0) {
            x->files_argv = json_array();
        }
    }
    TAILQ_INSERT_TAIL(&c->fe->execs, x, link);
    json_decref(body);
    reply_json(c, 201, json_pack("{s:s}", "Id", x->id));
}

static struct fexec *
exec_find(const struct fake_engine *fe, const char *id)
{
    struct fexec *x;

    TAILQ_FOREACH (x, &fe->execs, link) {
        if (strcmp(x->id, id) == 0) {
            return x;
        }
    }
    return NULL;
}

static void
on_exec(struct conn *c, const struct request *r, const char *id, const char *what)
{
    struct fexec *x = exec_find(c->fe, id);
    struct ctr *k = x ? ctr_find(c->fe, x->ctr) : NULL;

    if (x == NULL) {
        reply_error(c, 404, "No such exec instance: %s", id);
    } else if (strcmp(what, "json") == 0) {
        reply_json(c, 200,
                   json_pack("{s:s, s:b, s:i}", "ID", x->id, "Running", x->running, "ExitCode",
                             x->exit_code));
    } else if (strcmp(what, "start") != 0 || !r->upgrade) {
        reply_error(c, 404, "page not found: %s", r->path);
    } else if (k == NULL || strcmp(k->state, "running") != 0) {
        reply_error(c, 409, "container %s is not running", x->ctr);
    } else if (x->relay) {
        x->running = true;
        stream_open(c, k, true);
        c->exec = x;
    } else if (x->files_argv != NULL) {
        files_open(c, k, x);
    } else {
        /* Any other command: it runs and exits 0 with no output. */
        (void)bufferevent_write(c->bev, "HTTP/1.1 101 UPGRADED\r\n\r\n", 25);
        c->mode = CONN_STREAM;
        conn_finish(c);
    }
}

static void
on_container(struct conn *c, const struct request *r)
{
    char id[129];
    const char *rest = r->path + strlen("/containers/");
    size_t n = strcspn(rest, "/");
    struct ctr *k;
    const char *what = rest[n] == '/' ? rest + n + 1 : "";

    (void)snprintf(id, sizeof(id), "%.*s", (int)n, rest);
    k = ctr_find(c->fe, id);
    if (k == NULL) {
        reply_error(c, 404, "No such container: %s", id);
    } else if (strcmp(r->method, "DELETE") == 0 && what[0] == '\0') {
        if (strcmp(k->state, "running") == 0) {
            ctr_stop(c->fe, k, false);
        }
        emit_event(c->fe, k, "destroy");
        ctr_free(c->fe, k);
        reply_json(c, 204, NULL);
    } else if (strcmp(what, "start") == 0) {
        on_start(c, k);
    } else if (strcmp(what, "kill") == 0) {
        if (strcmp(k->state, "running") != 0) {
            reply_error(c, 409, "Container %s is not running", k->id);
        } else {
            ctr_stop(c->fe, k, false);
            reply_json(c, 204, NULL);
        }
    } else if (strcmp(what, "json") == 0) {
        reply_json(c, 200, ctr_inspect(k));
    } else if (strcmp(what, "attach") == 0) {
        on_attach(c, r, k);
    } else if (strcmp(what, "exec") == 0) {
        on_exec_create(c, r, k);
    } else {
        reply_error(c, 404, "page not found: %s", r->path);
    }
}

static void
route(struct conn *c, const struct request *r)
{
    const char *p = r->path;

    if (strcmp(p, "/_ping") == 0) {
        reply_raw(c, 200, "text/plain", "OK", 2);
    } else if (strcmp(p, "/info") == 0) {
        reply_json(c, 200,
                   json_pack("{s:s, s:s, s:s, s:{s:{s:s}}, s:i}", "ServerVersion", "fake",
                             "CgroupVersion", "2", "Driver", "fake", "Runtimes", "runc", "path",
                             "runc", "NCPU", 2));
    } else if (strcmp(p, "/version") == 0) {
        reply_json(c, 200, json_pack("{s:s, s:s}", "Version", "fake", "ApiVersion", "1.43"));
    } else if (strcmp(p, "/containers/create") == 0 && strcmp(r->method, "POST") == 0) {
        on_create(c, r);
    } else if (strcmp(p, "/containers/json") == 0) {
        on_list(c, r);
    } else if (strncmp(p, "/containers/", 12) == 0) {
        on_container(c, r);
    } else if (strncmp(p, "/exec/", 6) == 0) {
        char id[129];
        size_t n = strcspn(p + 6, "/");

        (void)snprintf(id, sizeof(id), "%.*s", (int)n, p + 6);
        on_exec(c, r, id, p[6 + n] == '/' ? p + 7 + n : "");
    } else if (strcmp(p, "/events") == 0) {
        static const char head[] = "HTTP/1.1 200 OK\r\nApi-Version: 1.43\r\nContent-Type: "
                                   "application/json\r\nTransfer-Encoding: chunked\r\n\r\n";

        c->mode = CONN_EVENTS;
        c->filters = label_filter(r->query);
        (void)bufferevent_write(c->bev, head, sizeof(head) - 1);
    } else {
        reply_error(c, 404, "page not found: %s", p);
    }
}

/* ---- requests ---------------------------------------------------------------------------- */

static void
request_done(struct request *r)
{
    free(r->target);
    free(r->path);
    free(r->body);
    memset(r, 0, sizeof(*r));
}

static void
on_delay(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;

    c->holding = false;
    route(c, &c->held);
    request_done(&c->held);
    process(c);
}

/* Logs, applies faults, routes. Takes r over. False when c was freed. */
static bool
dispatch(struct conn *c, struct request *r)
{
    struct fake_engine *fe = c->fe;
    struct fault *f = fault_take(fe, r);
    char line[512];

    (void)snprintf(line, sizeof(line), "%s %s", r->method, r->path);
    fe->log = realloc(fe->log, (fe->n_log + 1) * sizeof(*fe->log));
    if (fe->log == NULL) {
        abort();
    }
    fe->log[fe->n_log++] = xdup(line, strlen(line));
    if (f != NULL && f->kind == FAULT_DROP) {
        request_done(r);
        conn_free(c);
        return false;
    }
    if (f != NULL && f->kind == FAULT_FAIL) {
        reply_error(c, f->status, "%s", f->message);
    } else if (f != NULL && f->kind == FAULT_DELAY) {
        c->held = *r;
        c->holding = true;
        if (f->ms != FAKE_ENGINE_NEVER) {
            struct timeval tv;

            time_tv_from_ms(&tv, f->ms);
            (void)evtimer_add(c->delay, &tv);
        }
        return true;
    } else {
        route(c, r);
    }
    request_done(r);
    return true;
}

/* Parses one request from in; 0 when one was taken, -EAGAIN when incomplete, -EPROTO. */
static int
parse_request(struct evbuffer *in, struct request *r)
{
    struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
    char *head, *sp1, *sp2, *cl, *q;
    size_t hlen, body = 0;

    if (end.pos < 0) {
        return evbuffer_get_length(in) > HEAD_MAX ? -EPROTO : -EAGAIN;
    }
    hlen = (size_t)end.pos + 4;
    head = xalloc0(hlen + 1);
    (void)evbuffer_copyout(in, head, hlen);
    for (char *p = strchr(head, '\n'); p != NULL && *p; p++) {
        if (*p >= 'A' && *p <= 'Z') {
            *p = (char)(*p - 'A' + 'a'); /* header names and values */
        }
    }
    cl = strstr(head, "\ncontent-length:");
    for (cl = cl ? cl + 16 : NULL; cl != NULL && *cl == ' '; cl++) {
    }
    for (; cl != NULL && *cl >= '0' && *cl <= '9' && body <= BODY_MAX; cl++) {
        body = body * 10 + (size_t)(*cl - '0');
    }
    sp1 = strchr(head, ' ');
    sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (sp2 == NULL || body > BODY_MAX || (size_t)(sp1 - head) >= sizeof(r->method)) {
        free(head);
        return -EPROTO;
    }
    if (evbuffer_get_length(in) < hlen + body) {
        free(head);
        return -EAGAIN;
    }
    memset(r, 0, sizeof(*r));
    memcpy(r->method, head, (size_t)(sp1 - head));
    r->target = xdup(sp1 + 1, (size_t)(sp2 - sp1 - 1));
    r->upgrade = strstr(head, "\nupgrade: tcp") != NULL;
    free(head);
    (void)evbuffer_drain(in, hlen);
    if (body > 0) {
        r->body = xalloc0(body + 1);
        r->body_len = body;
        (void)evbuffer_remove(in, r->body, body);
    }
    q = r->target;
    if (strncmp(q, "/v1.", 4) == 0) {
        q = strchr(q + 1, '/') ?: q + strlen(q);
    }
    r->path = xdup(q, strcspn(q, "?"));
    r->query = strchr(r->target, '?') ? strchr(r->target, '?') + 1 : "";
    return 0;
}

/* Bytes on a stream: stdin of its kernel (a relay's first line is its key), or of the file
 * helper. */
static void
stream_input(struct conn *c, struct evbuffer *in)
{
    size_t n = evbuffer_get_length(in);
    char *data;

    if (c->files_run != NULL) {
        data = xalloc0(n + 1);
        (void)evbuffer_remove(in, data, n);
        fake_files_feed(c->files_run, data, n);
        free(data);
        return;
    }
    if (c->ctr == NULL || c->ctr->kernel == NULL) {
        (void)evbuffer_drain(in, n);
        return;
    }
    if (c->relay_pending) {
        struct evbuffer_ptr nl = evbuffer_search(in, "\n", 1, NULL);
        const char *want = json_string_value(json_object_get(ctr_labels(c->ctr), DOCKER_LABEL_KEY));
        json_t *line;
        char *text;

        if (nl.pos < 0) {
            return;
        }
        text = xalloc0((size_t)nl.pos + 1);
        (void)evbuffer_remove(in, text, (size_t)nl.pos + 1);
        line = json_loads(text, JSON_DISABLE_EOF_CHECK, NULL);
        free(text);
        if (want == NULL || !json_is_string(json_object_get(line, "key")) ||
            strcmp(json_string_value(json_object_get(line, "key")), want) != 0) {
            json_decref(line);
            conn_finish(c); /* kernel.py drops a relay with the wrong key */
            return;
        }
        json_decref(line);
        c->relay_pending = false;
        kernel_rewire(c->fe, c->ctr, NULL);
        n = evbuffer_get_length(in);
    }
    data = xalloc0(n + 1);
    (void)evbuffer_remove(in, data, n);
    fake_kernel_feed(c->ctr->kernel, data, n);
    free(data);
}

static void
process(struct conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    struct request r;
    int rc;

    while (!c->holding && !c->closing && evbuffer_get_length(in) > 0) {
        if (c->mode == CONN_STREAM) {
            stream_input(c, in);
            return;
        }
        if (c->mode == CONN_EVENTS) {
            (void)evbuffer_drain(in, evbuffer_get_length(in));
            return;
        }
        rc = parse_request(in, &r);
        if (rc == -EAGAIN) {
            return;
        }
        if (rc < 0) {
            conn_free(c);
            return;
        }
        if (!dispatch(c, &r)) {
            return; /* c was freed */
        }
    }
}

/* ---- scripted mode ----------------------------------------------------------------------- */

static void
script_read(struct conn *c)
{
    struct fake_engine *fe = c->fe;
    struct evbuffer *in = bufferevent_get_input(c->bev);
    struct request r;

    if (c->hijacked) {
        (void)evbuffer_drain(in, evbuffer_get_length(in)); /* stdin after the answer */
        return;
    }
    {
        struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
        size_t n = end.pos < 0 ? 0 : MIN((size_t)end.pos + 4, sizeof(fe->last_request) - 1);

        if (n == 0) {
            return;
        }
        (void)evbuffer_copyout(in, fe->last_request, n);
        fe->last_request[n] = '\0';
    }
    if (parse_request(in, &r) < 0) {
        fe->last_request[0] = '\0';
        return; /* wait for the whole body */
    }
    request_done(&r);
    c->hijacked = fe->answer != NULL && strncmp(fe->answer, "HTTP/1.1 101", 12) == 0;
    fe->requests++;
    /* Whatever else is already here came before our answer: hijack stdin must not. */
    fe->stdin_seen_before_answer = evbuffer_get_length(in);
    (void)evbuffer_drain(in, evbuffer_get_length(in));
    if (fe->answer != NULL && fe->close_after) {
        /* Small answers fit the socket buffer: send directly, then EOF (no reset). */
        evutil_socket_t fd = bufferevent_getfd(c->bev);

        if (send(fd, fe->answer, fe->answer_len, MSG_NOSIGNAL) != (ssize_t)fe->answer_len) {
            abort();
        }
        (void)shutdown(fd, SHUT_WR);
    } else if (fe->answer != NULL) {
        (void)bufferevent_write(c->bev, fe->answer, fe->answer_len);
    }
}

/* ---- connections ------------------------------------------------------------------------- */

static void
conn_free(struct conn *c)
{
    struct ctr *k = c->ctr;

    TAILQ_REMOVE(&c->fe->conns, c, link);
    if (k != NULL) {
        kernel_rewire(c->fe, k, c);
    }
    if (c->exec != NULL) {
        c->exec->running = false;
    }
    fake_files_run_free(c->files_run);
    request_done(&c->held);
    event_free(c->delay);
    json_decref(c->filters);
    bufferevent_free(c->bev);
    free(c);
}

static void
on_conn_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;

    if (c->fe->scripted) {
        script_read(c);
    } else {
        process(c);
    }
}

static void
on_conn_write(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;

    if (c->closing) {
        conn_free(c);
    }
}

static void
on_conn_event(struct bufferevent *bev, short what, void *arg)
{
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        conn_free(arg);
    }
}

static void
on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len, void *arg)
{
    struct fake_engine *fe = arg;
    struct conn *c = xalloc0(sizeof(*c));

    c->fe = fe;
    c->bev = bufferevent_socket_new(fe->base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->delay = evtimer_new(fe->base, on_delay, c);
    if (c->bev == NULL || c->delay == NULL) {
        abort();
    }
    fe->last_request[0] = '\0';
    TAILQ_INSERT_TAIL(&fe->conns, c, link);
    bufferevent_setcb(c->bev, on_conn_read, on_conn_write, on_conn_event, c);
    (void)bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

struct fake_engine *
fake_engine_new(struct event_base *base)
{
    struct fake_engine *fe = xalloc0(sizeof(*fe));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};

    fe->base = base;
    TAILQ_INIT(&fe->conns);
    TAILQ_INIT(&fe->ctrs);
    TAILQ_INIT(&fe->execs);
    (void)snprintf(fe->dir, sizeof(fe->dir), "/tmp/sandpool-fake-engine-XXXXXX");
    if (mkdtemp(fe->dir) == NULL) {
        abort();
    }
    (void)snprintf(fe->path, sizeof(fe->path), "%s/docker.sock", fe->dir);
    memcpy(sa.sun_path, fe->path, strlen(fe->path) + 1);
    fe->lis =
        evconnlistener_new_bind(base, on_accept, fe, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
                                64, (struct sockaddr *)&sa, sizeof(sa));
    if (fe->lis == NULL) {
        abort();
    }
    return fe;
}

struct fake_engine *
fake_engine_free(struct fake_engine *fe)
{
    struct fexec *x;

    if (fe == NULL) {
        return NULL;
    }
    while (!TAILQ_EMPTY(&fe->conns)) {
        conn_free(TAILQ_FIRST(&fe->conns));
    }
    while (!TAILQ_EMPTY(&fe->ctrs)) {
        ctr_free(fe, TAILQ_FIRST(&fe->ctrs));
    }
    while ((x = TAILQ_FIRST(&fe->execs)) != NULL) {
        TAILQ_REMOVE(&fe->execs, x, link);
        json_decref(x->files_argv);
        free(x);
    }
    for (size_t i = 0; i < fe->n_log; i++) {
        free(fe->log[i]);
    }
    free(fe->log);
    evconnlistener_free(fe->lis);
    (void)unlink(fe->path);
    (void)rmdir(fe->dir);
    free(fe);
    return NULL;
}

const char *
fake_engine_socket(const struct fake_engine *fe)
{
    return fe->path;
}

void
fake_engine_script(struct fake_engine *fe, const char *answer, size_t len, bool close_after)
{
    fe->scripted = true;
    fe->answer = answer;
    fe->answer_len = len ? len : (answer ? strlen(answer) : 0);
    fe->close_after = close_after;
    fe->last_request[0] = '\0';
}

const char *
fake_engine_last_request(const struct fake_engine *fe)
{
    return fe->last_request;
}

int
fake_engine_requests(const struct fake_engine *fe)
{
    return fe->requests;
}

size_t
fake_engine_stdin_before_answer(const struct fake_engine *fe)
{
    return fe->stdin_seen_before_answer;
}

void
fake_engine_fail(struct fake_engine *fe, const char *method, const char *pattern, unsigned n,
                 int status, const char *message)
{
    fault_add(fe, FAULT_FAIL, method, pattern, n, status, 0, message);
}

void
fake_engine_delay(struct fake_engine *fe, const char *method, const char *pattern, unsigned n,
                  unsigned ms)
{
    fault_add(fe, FAULT_DELAY, method, pattern, n, 0, ms, NULL);
}

void
fake_engine_drop(struct fake_engine *fe, const char *method, const char *pattern, unsigned n)
{
    fault_add(fe, FAULT_DROP, method, pattern, n, 0, 0, NULL);
}

void
fake_engine_clear_faults(struct fake_engine *fe)
{
    fe->n_faults = 0;
}

int
fake_engine_kill(struct fake_engine *fe, const char *id, bool oom)
{
    struct ctr *k = ctr_find(fe, id);

    if (k == NULL) {
        return -ENOENT;
    }
    if (strcmp(k->state, "running") != 0) {
        return -ESRCH;
    }
    ctr_stop(fe, k, oom);
    return 0;
}

int
fake_engine_vanish(struct fake_engine *fe, const char *id)
{
    struct ctr *k = ctr_find(fe, id);

    if (k == NULL) {
        return -ENOENT;
    }
    if (strcmp(k->state, "running") == 0) {
        ctr_stop(fe, k, false);
    }
    emit_event(fe, k, "destroy");
    ctr_free(fe, k);
    return 0;
}

unsigned
fake_engine_cut_streams(struct fake_engine *fe, const char *id)
{
    struct ctr *k = ctr_find(fe, id);

    return k ? ctr_cut_streams(fe, k) : 0;
}

void
fake_engine_set_kernels_silent(struct fake_engine *fe, bool silent)
{
    fe->kernels_silent = silent;
}

void
fake_engine_set_podman(struct fake_engine *fe, bool podman)
{
    fe->podman = podman;
}

void
fake_engine_emit(struct fake_engine *fe, const char *id, const char *action)
{
    struct ctr *k = ctr_find(fe, id);

    if (k != NULL) {
        emit_event(fe, k, action);
    }
}

unsigned
fake_engine_count(const struct fake_engine *fe, const char *state)
{
    const struct ctr *k;
    unsigned n = 0;

    TAILQ_FOREACH (k, &fe->ctrs, link) {
        n += state == NULL || strcmp(k->state, state) == 0;
    }
    return n;
}

unsigned
fake_engine_calls(const struct fake_engine *fe, const char *method, const char *pattern)
{
    unsigned n = 0;

    for (size_t i = 0; i < fe->n_log; i++) {
        const char *sp = strchr(fe->log[i], ' ');
        char m[8];

        (void)snprintf(m, sizeof(m), "%.*s", (int)(sp - fe->log[i]), fe->log[i]);
        n += call_match(method, pattern, m, sp + 1);
    }
    return n;
}

const char *
fake_engine_container(const struct fake_engine *fe, const char *state, unsigned i)
{
    const struct ctr *k;

    TAILQ_FOREACH (k, &fe->ctrs, link) {
        if ((state == NULL || strcmp(k->state, state) == 0) && i-- == 0) {
            return k->id;
        }
    }
    return NULL;
}

struct fake_kernel *
fake_engine_kernel(const struct fake_engine *fe, const char *id)
{
    const struct ctr *k = ctr_find(fe, id);

    return k ? k->kernel : NULL;
}

unsigned
fake_engine_streams(const struct fake_engine *fe, const char *id)
{
    const struct ctr *k = ctr_find(fe, id);
    const struct conn *c;
    unsigned n = 0;

    TAILQ_FOREACH (c, &fe->conns, link) {
        n += k != NULL && c->mode == CONN_STREAM && c->ctr == k && !c->closing;
    }
    return n;
}

const char *
fake_engine_label(const struct fake_engine *fe, const char *id, const char *key)
{
    const struct ctr *k = ctr_find(fe, id);

    return k ? json_string_value(json_object_get(ctr_labels(k), key)) : NULL;
}

const char *
fake_engine_file(const struct fake_engine *fe, const char *id, const char *path, size_t *ret_len)
{
    const struct ctr *k = ctr_find(fe, id);

    return k != NULL && k->files != NULL ? fake_files_get(k->files, path, ret_len) : NULL;
}
