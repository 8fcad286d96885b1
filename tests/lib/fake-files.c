/* Fake file helper; see fake-files.h.
 *
 * The workspace is a flat list of paths with their bytes; a put builds its file aside and puts it
 * in place at its end, as files.py's part file is renamed, so a cut upload leaves nothing. */
#include "fake-files.h"

#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "util/macro.h"

struct file {
    char *path;
    char *data;
    size_t len;
};

struct fake_files {
    struct file *files;
    size_t n;
};

struct fake_files_run {
    struct fake_files *ws;
    fake_files_write_fn *write;
    fake_files_exit_fn *exit_fn;
    void *userdata;
    bool putting, framed, exited;
    char *path;
    uint64_t max; /* put: SIZE, or upto's MAX */
    char *data;   /* what came */
    size_t len;
    char head[4]; /* upto: the frame head being read */
    size_t head_n;
    uint32_t frame_left;
};

static struct file *
file_find(const struct fake_files *ws, const char *path)
{
    for (size_t i = 0; i < ws->n; i++) {
        if (strcmp(ws->files[i].path, path) == 0) {
            return &ws->files[i];
        }
    }
    return NULL;
}

struct fake_files *
fake_files_new(void)
{
    struct fake_files *ws = calloc(1, sizeof(*ws));

    if (ws == NULL) {
        abort();
    }
    return ws;
}

struct fake_files *
fake_files_free(struct fake_files *ws)
{
    if (ws != NULL) {
        for (size_t i = 0; i < ws->n; i++) {
            free(ws->files[i].path);
            free(ws->files[i].data);
        }
        free(ws->files);
        free(ws);
    }
    return NULL;
}

const char *
fake_files_get(const struct fake_files *ws, const char *path, size_t *ret_len)
{
    const struct file *f = file_find(ws, path);

    if (f != NULL && ret_len != NULL) {
        *ret_len = f->len;
    }
    return f != NULL ? f->data : NULL;
}

/* ---- answers ------------------------------------------------------------------------------ */

/* One JSON line on stdout (obj stolen). */
static void
say(struct fake_files_run *run, json_t *obj)
{
    char *text = json_dumps(obj, JSON_COMPACT);

    if (text == NULL) {
        abort();
    }
    run->write(text, strlen(text), false, run->userdata);
    run->write("\n", 1, false, run->userdata);
    free(text);
    json_decref(obj);
}

static void
finish(struct fake_files_run *run, int code)
{
    run->exited = true;
    run->exit_fn(code, run->userdata);
}

static void
fail(struct fake_files_run *run, const char *error, const char *message)
{
    say(run, json_pack("{s:s, s:s}", "error", error, "message", message));
    finish(run, 2);
}

static void
put_done(struct fake_files_run *run)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    char hex[2 * EVP_MAX_MD_SIZE + 1] = "";
    struct file *f = file_find(run->ws, run->path);

    (void)EVP_Digest(run->data, run->len, md, &mdn, EVP_sha256(), NULL);
    for (unsigned i = 0; i < mdn; i++) {
        (void)snprintf(hex + (size_t)2 * i, 3, "%02x", md[i]);
    }
    if (f == NULL) {
        run->ws->files = xrealloc(run->ws->files, (run->ws->n + 1) * sizeof(*run->ws->files));
        f = &run->ws->files[run->ws->n++];
        *f = (struct file){.path = xstrdup(run->path)};
    }
    free(f->data);
    f->data = run->data;
    f->len = run->len;
    run->data = NULL;
    run->putting = false;
    say(run,
        json_pack("{s:s, s:I, s:s}", "path", run->path, "size", (json_int_t)f->len, "sha256", hex));
    finish(run, 0);
}

static void
op_get(struct fake_files_run *run, const char *path, bool with_bytes)
{
    const struct file *f = file_find(run->ws, path);
    const char *name = strrchr(path, '/');

    if (f == NULL) {
        fail(run, "not_found", "no such file");
        return;
    }
    if (with_bytes) {
        say(run,
            json_pack("{s:s, s:I, s:f}", "path", path, "size", (json_int_t)f->len, "mtime", 1.7e9));
        if (f->len > 0) {
            run->write(f->data, f->len, false, run->userdata);
        }
    } else {
        say(run, json_pack("{s:s, s:s, s:s, s:I, s:f, s:i}", "path", path, "name",
                           name != NULL ? name + 1 : path, "type", "file", "size",
                           (json_int_t)f->len, "mtime", 1.7e9, "mode", 0644));
    }
    finish(run, 0);
}

static void
op_list(struct fake_files_run *run, const char *dir)
{
    json_t *entries = json_array();
    size_t dn = strlen(dir);

    for (size_t i = 0; i < run->ws->n; i++) {
        const struct file *f = &run->ws->files[i];
        bool under = dn == 0 || strcmp(dir, ".") == 0 ||
                     (strncmp(f->path, dir, dn) == 0 && f->path[dn] == '/');
        const char *rest = dn == 0 || strcmp(dir, ".") == 0 ? f->path : f->path + dn + 1;

        if (under && strchr(rest, '/') == NULL) {
            (void)json_array_append_new(entries, json_pack("{s:s, s:s, s:I, s:f}", "name", rest,
                                                           "type", "file", "size",
                                                           (json_int_t)f->len, "mtime", 1.7e9));
        }
    }
    say(run, json_pack("{s:s, s:o, s:b}", "path", dir, "entries", entries, "truncated", 0));
    finish(run, 0);
}

static void
op_delete(struct fake_files_run *run, const char *path)
{
    struct file *f = file_find(run->ws, path);

    if (f == NULL) {
        fail(run, "not_found", "no such file");
        return;
    }
    free(f->path);
    free(f->data);
    *f = run->ws->files[--run->ws->n];
    say(run, json_pack("{s:s, s:b}", "path", path, "deleted", 1));
    finish(run, 0);
}

/* ---- a run -------------------------------------------------------------------------------- */

static void
op_put(struct fake_files_run *run, const char *const *argv, size_t argc)
{
    uint64_t n = 0;

    for (const char *p = argc >= 3 ? argv[2] : ""; *p >= '0' && *p <= '9'; p++) {
        n = n * 10 + (uint64_t)(*p - '0');
    }
    run->path = xstrdup(argv[1]);
    run->max = n;
    run->framed = argc >= 4 && strcmp(argv[3], "upto") == 0;
    run->putting = true;
    run->write("{\"ready\":true}\n", 15, false, run->userdata);
    if (!run->framed && n == 0) {
        put_done(run);
    }
}

struct fake_files_run *
fake_files_start(struct fake_files *ws, const char *const *argv, size_t argc,
                 fake_files_write_fn *write, fake_files_exit_fn *exit_fn, void *userdata)
{
    struct fake_files_run *run = calloc(1, sizeof(*run));
    const char *op = argc > 0 ? argv[0] : "";
    const char *path = argc > 1 ? argv[1] : "";

    if (run == NULL) {
        abort();
    }
    *run =
        (struct fake_files_run){.ws = ws, .write = write, .exit_fn = exit_fn, .userdata = userdata};
    if (strcmp(op, "put") == 0 && argc >= 3) {
        op_put(run, argv, argc);
    } else if (strcmp(op, "get") == 0 && argc == 2) {
        op_get(run, path, true);
    } else if (strcmp(op, "stat") == 0 && argc == 2) {
        op_get(run, path, false);
    } else if (strcmp(op, "list") == 0) {
        op_list(run, path);
    } else if (strcmp(op, "delete") == 0 && argc == 2) {
        op_delete(run, path);
    } else if (strcmp(op, "mkdir") == 0 && argc == 2) {
        say(run, json_pack("{s:s, s:b}", "path", path, "created", 1));
        finish(run, 0);
    } else {
        run->write("fake-files: not faked\n", 22, true, run->userdata);
        fail(run, "usage", "this operation is not faked");
    }
    return run;
}

/* Takes up to n bytes of a framed put's stdin; returns how many. */
static size_t
feed_framed(struct fake_files_run *run, const char *data, size_t n)
{
    size_t take;

    if (run->frame_left == 0) {
        run->head[run->head_n++] = data[0];
        if (run->head_n < 4) {
            return 1;
        }
        run->head_n = 0;
        run->frame_left = (uint32_t)(uint8_t)run->head[0] << 24 |
                          (uint32_t)(uint8_t)run->head[1] << 16 |
                          (uint32_t)(uint8_t)run->head[2] << 8 | (uint8_t)run->head[3];
        if (run->frame_left == 0) {
            put_done(run); /* the empty frame: the end */
        }
        return 1;
    }
    take = n < run->frame_left ? n : run->frame_left;
    if (run->len + take > run->max) {
        fail(run, "too_large", "more than announced");
        return n;
    }
    run->data = xrealloc(run->data, run->len + take);
    memcpy(run->data + run->len, data, take);
    run->len += take;
    run->frame_left -= (uint32_t)take;
    return take;
}

void
fake_files_feed(struct fake_files_run *run, const char *data, size_t n)
{
    while (n > 0 && run->putting && !run->exited) {
        size_t take;

        if (run->framed) {
            take = feed_framed(run, data, n);
        } else {
            take = n < run->max - run->len ? n : (size_t)(run->max - run->len);
            run->data = xrealloc(run->data, run->len + take);
            memcpy(run->data + run->len, data, take);
            run->len += take;
            if (run->len == run->max) {
                put_done(run);
            }
            if (take == 0) {
                break;
            }
        }
        data += take;
        n -= take;
    }
}

void
fake_files_eof(struct fake_files_run *run)
{
    if (run->putting && !run->exited) {
        fail(run, "incomplete", "stdin ended before the upload did");
    }
}

void
fake_files_run_free(struct fake_files_run *run)
{
    if (run != NULL) {
        free(run->path);
        free(run->data);
        free(run);
    }
}
