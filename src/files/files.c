/* Workspace files through the in-sandbox helper; see files.h.
 *
 * The helper's protocol (images/python/sandbox/files.py): `files.py OP PATH [SIZE]`; it writes
 * one JSON line to stdout first, then, for `get`, exactly the announced number of raw bytes.
 * Exit 0 is success; exit 2 comes with {"error": CODE, "message"}; anything else is a failure of
 * the helper itself. Its answers come from inside the sandbox, where user code runs with the same
 * uid: they are checked and bounded like any untrusted input. */
#include "files.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "docker/exec.h"
#include "util/buf.h"
#include "util/macro.h"

#define HELPER        "/opt/sandpool/files.py"
#define IDLE_MS       60000u            /* an operation without progress this long fails */
#define ANSWER_MAX    ((size_t)8 << 20) /* a listing of 10000 entries fits */
#define HEADER_MAX    4096u
#define STDERR_MAX    16384u
#define CONGESTED_AT  ((size_t)1 << 20)
#define SEGMENT_MAX   255u
#define HELPER_FAILED 2          /* the helper's exit code for a reported error */
#define FRAME_MAX     (1u << 20) /* put ... upto: bytes in one frame */

enum files_kind {
    FILES_ANSWER, /* one JSON line: list, delete, stat, mkdir, move */
    FILES_PUT,
    FILES_GET,
    FILES_TAR, /* {"tar":true}, then a tar stream to the end (files_tar()) */
};

struct files_op {
    enum files_kind kind;
    struct docker_exec_run *run;
    struct buf answer; /* the JSON line (GET: up to its newline; others: all of stdout) */
    bool header_seen;  /* GET: the JSON line ended; PUT: the ready line came */
    json_t *header;    /* GET: its object, when it was not an error */
    uint64_t size, got;
    const struct files_get_io *io;
    const struct files_put_io *put_io;
    bool framed; /* files_put_upto(): stdin is frames, the empty one its end */
    files_done_cb *cb;
    void *userdata;
};

/* ---- paths ----------------------------------------------------------------------------------- */

int
files_normalize(const char *in, size_t len, bool allow_root, char *out, size_t out_n,
                struct err *reterr)
{
    static const char root[] = "/workspace";
    const char *p = in, *end = in + len;
    size_t o = 0;

    if (len > FILES_PATH_MAX) {
        return err_set(reterr, -EINVAL, "the path is longer than %d bytes", FILES_PATH_MAX);
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)in[i];

        if (c < 0x20 || c == 0x7f) {
            return err_set(reterr, -EINVAL, "the path holds a NUL or control character");
        }
    }
    if (len > 0 && in[0] == '/') {
        size_t rl = sizeof(root) - 1;

        if (len < rl || memcmp(in, root, rl) != 0 || (len > rl && in[rl] != '/')) {
            return err_set(reterr, -EINVAL, "an absolute path must be inside %s", root);
        }
        p += rl;
    }
    while (p < end) {
        const char *slash = memchr(p, '/', (size_t)(end - p));
        size_t seg = slash ? (size_t)(slash - p) : (size_t)(end - p);

        if (seg == 2 && p[0] == '.' && p[1] == '.') {
            return err_set(reterr, -EINVAL, "'..' is not allowed in a path");
        }
        if (seg > SEGMENT_MAX) {
            return err_set(reterr, -EINVAL, "a path segment is longer than %u bytes", SEGMENT_MAX);
        }
        if (seg > 0 && !(seg == 1 && p[0] == '.')) {
            if (o + (o > 0) + seg + 1 > out_n) {
                return err_set(reterr, -EINVAL, "the path is too long");
            }
            if (o > 0) {
                out[o++] = '/';
            }
            memcpy(out + o, p, seg);
            o += seg;
        }
        p += seg + (slash != NULL);
    }
    if (out_n == 0) {
        return err_set(reterr, -EINVAL, "the path is too long");
    }
    out[o] = '\0';
    if (o == 0 && !allow_root) {
        return err_set(reterr, -EINVAL, "the path names the workspace itself, not a file in it");
    }
    return 0;
}

const char *
files_content_type(const char *path)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {"png", "image/png"},
        {"jpg", "image/jpeg"},
        {"jpeg", "image/jpeg"},
        {"gif", "image/gif"},
        {"webp", "image/webp"},
        {"svg", "image/svg+xml"},
        {"pdf", "application/pdf"},
        {"json", "application/json"},
        {"csv", "text/csv; charset=utf-8"},
        {"tsv", "text/tab-separated-values; charset=utf-8"},
        {"txt", "text/plain; charset=utf-8"},
        {"log", "text/plain; charset=utf-8"},
        {"md", "text/markdown; charset=utf-8"},
        {"py", "text/x-python; charset=utf-8"},
        {"html", "text/html; charset=utf-8"},
        {"htm", "text/html; charset=utf-8"},
        {"xml", "application/xml"},
        {"zip", "application/zip"},
        {"gz", "application/gzip"},
        {"tar", "application/x-tar"},
        {"parquet", "application/vnd.apache.parquet"},
        {"xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"},
        {"npy", "application/octet-stream"},
    };
    const char *base = strrchr(path, '/');
    const char *dot;

    base = base ? base + 1 : path;
    dot = strrchr(base, '.');
    if (dot != NULL && dot != base) {
        for (size_t i = 0; i < ELEMENTSOF(types); i++) {
            if (strcasecmp(dot + 1, types[i].ext) == 0) {
                return types[i].type;
            }
        }
    }
    return "application/octet-stream";
}

/* ---- running the helper ---------------------------------------------------------------------- */

static void
op_free(struct files_op *op)
{
    buf_done(&op->answer);
    json_decref(op->header);
    free(op);
}

/* The helper's error codes, as errno. */
static int
helper_errno(const char *code)
{
    static const struct {
        const char *code;
        int r;
    } map[] = {
        {"not_found", -ENOENT},    {"too_large", -EMSGSIZE}, {"no_space", -EMSGSIZE},
        {"bad_path", -EINVAL},     {"symlink", -EINVAL},     {"not_dir", -EINVAL},
        {"not_file", -EINVAL},     {"is_dir", -EINVAL},      {"exists", -EINVAL},
        {"not_empty", -EINVAL},    {"incomplete", -EINVAL},  {"usage", -EINVAL},
        {"gone", -ESTALE},         /* the sandbox changed the path under the operation: 409 */
        {"bad_archive", -EBADMSG}, /* untar: a member it refuses (a snapshot that lies) */
    };

    for (size_t i = 0; code != NULL && i < ELEMENTSOF(map); i++) {
        if (strcmp(code, map[i].code) == 0) {
            return map[i].r;
        }
    }
    return -EIO;
}

static json_t *
parse_answer(const struct buf *b)
{
    json_t *v = json_loadb(b->buf, b->len, JSON_REJECT_DUPLICATES, NULL);

    if (v != NULL && !json_is_object(v)) {
        json_decref(v);
        v = NULL;
    }
    return v;
}

static void
on_done(int r, const struct docker_exec_result *res, const struct err *e, void *userdata)
{
    struct files_op *op = userdata;
    json_t *answer = NULL;
    struct err e2 = {0};

    if (r == -ENOENT) {
        /* The engine knows no such container (or exec): the sandbox went away under us. */
        r = err_set(&e2, -EPIPE, "the session's container is gone: %s", e ? e->msg : "");
        e = &e2;
    }
    if (r < 0) {
        op->cb(r, NULL, e, op->userdata);
        op_free(op);
        return;
    }
    if (op->kind == FILES_TAR && res->exit_code == 0 && !op->header_seen) {
        answer = NULL; /* no header at all: judged below as the helper's failure */
    } else if (op->kind == FILES_TAR && res->exit_code == 0) {
        answer = json_incref(op->header);
    } else if (op->kind == FILES_GET || op->kind == FILES_TAR) {
        answer = op->header != NULL ? json_incref(op->header)
                                    : (op->header_seen ? parse_answer(&op->answer) : NULL);
    } else {
        answer = parse_answer(&op->answer);
    }
    if (res->exit_code == HELPER_FAILED && answer != NULL &&
        json_is_string(json_object_get(answer, "error"))) {
        const char *code = json_string_value(json_object_get(answer, "error"));
        const char *msg = json_string_value(json_object_get(answer, "message"));

        r = err_set(&e2, helper_errno(code), "%s", msg != NULL ? msg : code);
    } else if (res->exit_code != 0 || answer == NULL) {
        /* 126/127: an image without the helper. Otherwise its own failure: say what it said. */
        r = err_set(&e2, -EPROTO, "the sandbox's file helper failed (exit %d): %.*s",
                    res->exit_code, (int)MIN(res->err.len, (size_t)200),
                    res->err.len ? res->err.buf : "no message");
    } else if (op->kind == FILES_GET && op->got != op->size) {
        r = err_set(&e2, -EPROTO, "the file changed while it was read");
    }
    if (r == 0 && op->kind == FILES_TAR) {
        (void)json_object_set_new(answer, "bytes", json_integer((json_int_t)op->got));
    }
    op->cb(r, r == 0 ? answer : NULL, r < 0 ? &e2 : NULL, op->userdata);
    json_decref(answer);
    op_free(op);
}

/* The JSON line that starts a GET's or a TAR's stdout, taken from the data given (which moves
 * past it): 1 once it ended (op->header: its object, or NULL for an error line, judged at the
 * end, after which nothing may follow), 0 while it is incomplete, -EPROTO past HEADER_MAX. */
static int
header_line(struct files_op *op, const char **data, size_t *n)
{
    const char *nl = memchr(*data, '\n', *n);
    size_t take = nl ? (size_t)(nl - *data) : *n;

    if (buf_append(&op->answer, *data, take) < 0) {
        return -EPROTO; /* no newline within HEADER_MAX */
    }
    if (nl == NULL) {
        return 0;
    }
    op->header_seen = true;
    *data += take + 1;
    *n -= take + 1;
    op->header = parse_answer(&op->answer);
    if (op->header != NULL && json_object_get(op->header, "error") != NULL) {
        json_decref(op->header);
        op->header = NULL;
    }
    return op->header == NULL && *n > 0 ? -EPROTO : 1;
}

/* GET: the JSON line, then the file's bytes. */
static int
get_stdout(struct files_op *op, const char *data, size_t n)
{
    if (!op->header_seen) {
        json_t *size;
        int r = header_line(op, &data, &n);

        if (r <= 0 || op->header == NULL) {
            return r < 0 ? r : 0;
        }
        size = json_object_get(op->header, "size");
        if (!json_is_integer(size) || json_integer_value(size) < 0) {
            return -EPROTO;
        }
        op->size = (uint64_t)json_integer_value(size);
        r = op->io->on_header(op->size, json_number_value(json_object_get(op->header, "mtime")),
                              op->userdata);
        if (r < 0) {
            return r;
        }
    }
    if (n == 0) {
        return 0;
    }
    if (op->header == NULL || n > op->size - op->got) {
        return -EPROTO; /* more than announced */
    }
    op->got += n;
    return op->io->on_data(data, n, op->userdata);
}

/* TAR: the JSON line {"tar":true}, then the archive's bytes to the end of the stream. */
static int
tar_stdout(struct files_op *op, const char *data, size_t n)
{
    if (!op->header_seen) {
        int r = header_line(op, &data, &n);

        if (r <= 0 || op->header == NULL) {
            return r < 0 ? r : 0;
        }
        if (!json_is_true(json_object_get(op->header, "tar"))) {
            return -EPROTO;
        }
    }
    if (n == 0) {
        return 0;
    }
    if (op->header == NULL) {
        return -EPROTO;
    }
    op->got += n;
    return op->io->on_data(data, n, op->userdata);
}

/* PUT: {"ready":true} once the helper reads stdin, then the answer; an early error comes
 * alone. */
static int
put_stdout(struct files_op *op, const char *data, size_t n)
{
    static const char ready[] = "{\"ready\":true}\n";

    if (buf_append(&op->answer, data, n) < 0) {
        return -EPROTO;
    }
    if (!op->header_seen && op->answer.len >= sizeof(ready) - 1 &&
        memcmp(op->answer.buf, ready, sizeof(ready) - 1) == 0) {
        op->header_seen = true;
        memmove(op->answer.buf, op->answer.buf + sizeof(ready) - 1,
                op->answer.len - (sizeof(ready) - 1));
        op->answer.len -= sizeof(ready) - 1;
        op->put_io->on_ready(op->userdata);
    }
    return 0;
}

static int
on_stdout(const char *data, size_t n, void *userdata)
{
    struct files_op *op = userdata;

    switch (op->kind) {
    case FILES_GET:
        return get_stdout(op, data, n);
    case FILES_TAR:
        return tar_stdout(op, data, n);
    case FILES_PUT:
        return put_stdout(op, data, n);
    default:
        return buf_append(&op->answer, data, n) < 0 ? -EPROTO : 0;
    }
}

static void
on_writable(void *userdata)
{
    struct files_op *op = userdata;

    if (op->kind == FILES_PUT && op->header_seen) {
        op->put_io->on_writable(op->userdata);
    }
}

static const struct docker_exec_io exec_io = {
    .on_stdout = on_stdout,
    .on_writable = on_writable,
};

static struct files_op *
op_start(const struct files_target *t, enum files_kind kind, const char *const *argv,
         files_done_cb *cb, void *userdata)
{
    struct files_op *op = xcalloc(1, sizeof(*op));
    struct docker_exec_spec spec = {
        .argv = argv,
        .user = t->user,
        .workdir = "/workspace",
        .attach_stdin = kind == FILES_PUT,
    };

    op->kind = kind;
    op->cb = cb;
    op->userdata = userdata;
    buf_init(&op->answer, kind == FILES_GET ? HEADER_MAX : ANSWER_MAX);
    op->run = docker_exec_stream(t->engine, t->container, &spec, &exec_io, STDERR_MAX, IDLE_MS,
                                 on_done, op);
    return op;
}

struct files_op *
files_list(const struct files_target *t, const char *dir, files_done_cb *cb, void *userdata)
{
    const char *argv[] = {"python3", "-I", "-S", HELPER, "list", dir, NULL};

    return op_start(t, FILES_ANSWER, argv, cb, userdata);
}

struct files_op *
files_delete(const struct files_target *t, const char *path, files_done_cb *cb, void *userdata)
{
    const char *argv[] = {"python3", "-I", "-S", HELPER, "delete", path, NULL};

    return op_start(t, FILES_ANSWER, argv, cb, userdata);
}

struct files_op *
files_stat(const struct files_target *t, const char *path, files_done_cb *cb, void *userdata)
{
    const char *argv[] = {"python3", "-I", "-S", HELPER, "stat", path, NULL};

    return op_start(t, FILES_ANSWER, argv, cb, userdata);
}

struct files_op *
files_mkdir(const struct files_target *t, const char *path, files_done_cb *cb, void *userdata)
{
    const char *argv[] = {"python3", "-I", "-S", HELPER, "mkdir", path, NULL};

    return op_start(t, FILES_ANSWER, argv, cb, userdata);
}

struct files_op *
files_move(const struct files_target *t, const char *from, const char *to, files_done_cb *cb,
           void *userdata)
{
    const char *argv[] = {"python3", "-I", "-S", HELPER, "move", from, to, NULL};

    return op_start(t, FILES_ANSWER, argv, cb, userdata);
}

struct files_op *
files_put(const struct files_target *t, const char *path, uint64_t size,
          const struct files_put_io *io, files_done_cb *cb, void *userdata)
{
    char sz[24];
    const char *argv[] = {"python3", "-I", "-S", HELPER, "put", path, sz, NULL};
    struct files_op *op;

    (void)snprintf(sz, sizeof(sz), "%llu", (unsigned long long)size);
    op = op_start(t, FILES_PUT, argv, cb, userdata);
    op->put_io = io;
    return op;
}

struct files_op *
files_put_upto(const struct files_target *t, const char *path, uint64_t max,
               const struct files_put_io *io, files_done_cb *cb, void *userdata)
{
    char sz[24];
    const char *argv[] = {"python3", "-I", "-S", HELPER, "put", path, sz, "upto", NULL};
    struct files_op *op;

    (void)snprintf(sz, sizeof(sz), "%llu", (unsigned long long)max);
    op = op_start(t, FILES_PUT, argv, cb, userdata);
    op->put_io = io;
    op->framed = true;
    return op;
}

/* A frame's head: its length, 4 bytes big-endian (files.py's put ... upto). */
static int
write_frame_head(struct files_op *op, size_t n)
{
    unsigned char head[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16),
                             (unsigned char)(n >> 8), (unsigned char)n};

    return docker_exec_write(op->run, head, sizeof(head));
}

int
files_put_write(struct files_op *op, const void *data, size_t n)
{
    int r;

    if (!op->framed) {
        return docker_exec_write(op->run, data, n);
    }
    while (n > 0) { /* frames of at most FRAME_MAX bytes, which the helper takes */
        size_t k = MIN(n, (size_t)FRAME_MAX);

        if ((r = write_frame_head(op, k)) < 0 || (r = docker_exec_write(op->run, data, k)) < 0) {
            return r;
        }
        data = (const char *)data + k;
        n -= k;
    }
    return 0;
}

bool
files_put_congested(const struct files_op *op)
{
    return docker_exec_queued(op->run) > CONGESTED_AT;
}

void
files_put_end(struct files_op *op)
{
    /* framed: the empty frame says the end; a stdin closed without it is a cut upload */
    if (!op->framed || write_frame_head(op, 0) == 0) {
        docker_exec_close_stdin(op->run);
    }
}

struct files_op *
files_get(const struct files_target *t, const char *path, const struct files_get_io *io,
          files_done_cb *cb, void *userdata)
{
    const char *argv[] = {"python3", "-I", "-S", HELPER, "get", path, NULL};
    struct files_op *op = op_start(t, FILES_GET, argv, cb, userdata);

    op->io = io;
    return op;
}

struct files_op *
files_tar(const struct files_target *t, const struct files_get_io *io, files_done_cb *cb,
          void *userdata)
{
    const char *argv[] = {"python3", "-I", "-S", HELPER, "tar", NULL};
    struct files_op *op = op_start(t, FILES_TAR, argv, cb, userdata);

    op->io = io;
    return op;
}

struct files_op *
files_untar(const struct files_target *t, uint64_t max, const struct files_put_io *io,
            files_done_cb *cb, void *userdata)
{
    char sz[24];
    const char *argv[] = {"python3", "-I", "-S", HELPER, "untar", sz, NULL};
    struct files_op *op;

    (void)snprintf(sz, sizeof(sz), "%llu", (unsigned long long)max);
    op = op_start(t, FILES_PUT, argv, cb, userdata);
    op->put_io = io;
    op->framed = true;
    return op;
}

void
files_pause(struct files_op *op, bool pause)
{
    docker_exec_pause(op->run, pause);
}

void
files_cancel(struct files_op *op)
{
    if (op != NULL) {
        docker_exec_run_cancel(op->run);
        op_free(op);
    }
}
