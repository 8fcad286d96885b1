/* MCP calls on the workspace's files: write_file, read_file, list_files, resources/list,
 * resources/read, and the images of an execution's result (docs/mcp.md, "Tools").
 *
 * Each is one operation of the files module (an exec of the in-sandbox helper, which confines
 * paths to the workspace) through the files API's gate (http/gate.c), so MCP and REST share one
 * bound per session, per tenant and in all. What is read is bounded before it is read: a file by
 * mcp.max_read_bytes, an image by mcp.max_image_bytes (larger ones are named in the text, not
 * sent), at most MCP_IMAGES_MAX images a result. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define LOG_MODULE "mcp"
#include "files/files.h"
#include "mcp/calls.h"
#include "session/session.h"
#include "util/macro.h"

enum {
    FILES_IMAGE_TOO_BIG = -EFBIG
};

static void files_begin(struct mcp_call *c);
static void image_next(struct mcp_call *c);
static void image_note(struct mcp_call *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A file operation could not start: the call fails, or an image of a result is left out. */
static void
refused(struct mcp_call *c, const char *why)
{
    if (c->result != NULL) {
        image_note(c, "/workspace/%.128s is not shown: %s.", c->image_path, why);
        image_next(c);
    } else {
        mcp_call_fail(c, MCP_ERR_INTERNAL, why);
    }
}

/* ---- the gate -------------------------------------------------------------------------------- */

static void
gate_leave(struct mcp_call *c, bool in_flight)
{
    if (!c->gate_in) {
        return;
    }
    c->gate_in = false;
    if (in_flight) {
        http_gate_leave_later(c->a->files_gate, c->ms->rec.tenant, c->ms->rec.sandbox);
    } else {
        http_gate_leave(c->a->files_gate, c->ms->rec.tenant, c->ms->rec.sandbox);
    }
}

static void
on_gate(int r, void *arg)
{
    struct mcp_call *c = arg;

    c->gw = NULL;
    http_pending_log(&c->pending);
    if (r < 0) {
        refused(c, "too many file operations of this tenant are in flight; retry in a moment");
    } else {
        c->gate_in = true;
        files_begin(c);
    }
    log_set_request(NULL);
}

/* Through the gate, then files_begin(). */
static void
gate_enter(struct mcp_call *c)
{
    int r = http_gate_enter(c->a->files_gate, c->ms->rec.tenant, c->ms->rec.sandbox, on_gate, c,
                            &c->gw);

    if (r < 0) {
        refused(c, "too many file operations of this tenant are waiting; retry in a moment");
    } else if (r == 0) {
        c->gate_in = true;
        files_begin(c);
    } else {
        mcp_call_set(c, MCP_CALL_GATE);
    }
}

/* The operation ended: out of the gate. */
static void
op_ended(struct mcp_call *c)
{
    c->op = NULL;
    gate_leave(c, false);
}

void
mcp_files_cancel(struct mcp_call *c)
{
    http_gate_cancel(c->gw);
    c->gw = NULL;
    if (c->op != NULL) {
        files_cancel(c->op);
        c->op = NULL;
        gate_leave(c, true); /* the engine may still be at it for a moment */
    }
    gate_leave(c, false);
}

void
mcp_files_release(struct mcp_call *c)
{
    mcp_files_cancel(c);
    buf_done(&c->data);
    json_decref(c->images);
    c->images = NULL;
}

/* What a failed operation says to the model. */
static const char *
op_error(const struct mcp_call *c, int r, const struct err *e, char *out, size_t n)
{
    if (r == -ENOENT) {
        (void)snprintf(out, n, "no such file or directory: /workspace/%.256s", c->tc.path);
    } else if (r == FILES_IMAGE_TOO_BIG) {
        (void)snprintf(out, n,
                       "/workspace/%.256s is larger than mcp.max_read_bytes (%u bytes); "
                       "read a part of it with execute_python",
                       c->tc.path, c->a->cfg->mcp_max_read_bytes);
    } else {
        (void)snprintf(out, n, "%s", e && e->msg[0] ? e->msg : strerror(-r));
    }
    return out;
}

/* ---- results --------------------------------------------------------------------------------- */

static json_t *
listing_result(json_t *result)
{
    json_t *entries = json_object_get(result, "entries"), *e, *shown = OOM_CHECK(json_array());
    const char *path = json_string_value(json_object_get(result, "path"));
    struct buf text = BUF_INIT(1u << 20);
    size_t i;

    if (buf_printf(&text, "/workspace%s%s:\n", path && path[0] ? "/" : "", path ? path : "") < 0) {
        oom(); /* a path is at most FILES_PATH_MAX */
    }
    json_array_foreach (entries, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *type = json_string_value(json_object_get(e, "type"));
        json_int_t size = json_integer_value(json_object_get(e, "size"));

        if (name == NULL || type == NULL) {
            continue;
        }
        if (buf_printf(&text, strcmp(type, "dir") == 0 ? "  %s/\n" : "  %s  (%lld bytes)\n", name,
                       (long long)size) < 0) {
            break; /* the helper bounds its listing far below the text's cap */
        }
        (void)json_array_append_new(shown, OOM_CHECK(json_pack("{s:s, s:s, s:I}", "name", name,
                                                               "type", type, "size", size)));
    }
    if (json_array_size(shown) == 0 && buf_puts(&text, "  (empty)\n") < 0) {
        oom();
    }
    if (json_is_true(json_object_get(result, "truncated")) &&
        buf_puts(&text, "[the listing was cut: there are more entries]\n") < 0) {
        oom();
    }
    e = OOM_CHECK(json_pack("{s:[{s:s, s:s%}], s:{s:s, s:o, s:b}, s:b}", "content", "type", "text",
                            "text", text.buf, text.len, "structuredContent", "path",
                            path ? path : "", "entries", shown, "truncated",
                            json_is_true(json_object_get(result, "truncated")), "isError", false));
    buf_done(&text);
    return e;
}

/* resources/list: the files at the workspace's top level. */
static json_t *
resources_result(json_t *result)
{
    json_t *entries = json_object_get(result, "entries"), *e, *out = OOM_CHECK(json_array());
    size_t i;

    json_array_foreach (entries, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *type = json_string_value(json_object_get(e, "type"));
        char uri[FILES_PATH_MAX + 32];

        if (name == NULL || type == NULL || strcmp(type, "file") != 0) {
            continue;
        }
        json_t *one = mcp_render_resource(name, "", 0);

        (void)snprintf(uri, sizeof(uri), "%s", json_string_value(json_object_get(one, "uri")));
        json_decref(one);
        (void)json_array_append_new(
            out, OOM_CHECK(json_pack("{s:s, s:s, s:s, s:I}", "uri", uri, "name", name, "mimeType",
                                     files_content_type(name), "size",
                                     json_integer_value(json_object_get(e, "size")))));
    }
    return OOM_CHECK(json_pack("{s:o}", "resources", out));
}

static void
on_listed(int r, json_t *result, const struct err *e, void *userdata)
{
    struct mcp_call *c = userdata;
    char why[512];

    op_ended(c);
    if (r < 0) {
        mcp_call_fail(c, MCP_ERR_RESOURCE, op_error(c, r, e, why, sizeof(why)));
    } else {
        mcp_call_finish(c, c->kind == MCP_CALL_RES_LIST ? resources_result(result)
                                                        : listing_result(result));
    }
}

/* ---- read ------------------------------------------------------------------------------------ */

static int
on_read_header(uint64_t size, double mtime, void *userdata)
{
    struct mcp_call *c = userdata;

    return size > c->data.max ? FILES_IMAGE_TOO_BIG : 0;
}

static int
on_read_data(const char *data, size_t n, void *userdata)
{
    struct mcp_call *c = userdata;

    return buf_append(&c->data, data, n) < 0 ? FILES_IMAGE_TOO_BIG : 0;
}

static const struct files_get_io read_io = {
    .on_header = on_read_header,
    .on_data = on_read_data,
};

static void
on_read(int r, json_t *result, const struct err *e, void *userdata)
{
    struct mcp_call *c = userdata;
    char why[512];

    op_ended(c);
    if (r < 0) {
        mcp_call_fail(c, MCP_ERR_RESOURCE, op_error(c, r, e, why, sizeof(why)));
    } else if (c->kind == MCP_CALL_RES_READ) {
        mcp_call_finish(
            c, OOM_CHECK(json_pack("{s:[o]}", "contents",
                                   mcp_render_resource(c->tc.path, c->data.buf, c->data.len))));
    } else {
        mcp_call_finish(c, mcp_render_file(c->tc.path, c->data.buf, c->data.len));
    }
}

/* ---- write ----------------------------------------------------------------------------------- */

static void
put_feed(struct mcp_call *c)
{
    while (c->op != NULL && c->offset < c->data.len && !files_put_congested(c->op)) {
        size_t n = MIN(c->data.len - c->offset, (size_t)64u << 10);

        if (files_put_write(c->op, c->data.buf + c->offset, n) < 0) {
            return; /* closed: the completion says why */
        }
        c->offset += n;
    }
    if (c->op != NULL && c->offset == c->data.len) {
        files_put_end(c->op);
        c->offset++; /* ended */
    }
}

static void
on_put_ready(void *userdata)
{
    put_feed(userdata);
}

static const struct files_put_io put_io = {
    .on_ready = on_put_ready,
    .on_writable = on_put_ready,
};

static void
on_put(int r, json_t *result, const struct err *e, void *userdata)
{
    struct mcp_call *c = userdata;
    json_t *link;
    char text[FILES_PATH_MAX + 64];

    op_ended(c);
    if (r < 0) {
        mcp_call_fail(c, MCP_ERR_INTERNAL, op_error(c, r, e, text, sizeof(text)));
        return;
    }
    (void)snprintf(text, sizeof(text), "wrote %zu bytes to /workspace/%s", c->data.len, c->tc.path);
    link = mcp_render_resource(c->tc.path, "", 0);
    mcp_call_finish(
        c, OOM_CHECK(json_pack("{s:[{s:s, s:s}, {s:s, s:O, s:s, s:s, s:I}], s:b}", "content",
                               "type", "text", "text", text, "type", "resource_link", "uri",
                               json_object_get(link, "uri"), "name", c->tc.path, "mimeType",
                               files_content_type(c->tc.path), "size", (json_int_t)c->data.len,
                               "isError", false)));
    json_decref(link);
}

/* ---- the images of a result ------------------------------------------------------------------ */

/* Appends a sentence to the result's note about images (cut at its size). */
static void
image_note(struct mcp_call *c, const char *fmt, ...)
{
    size_t used = strlen(c->image_note);
    va_list ap;

    if (used + 2 >= sizeof(c->image_note)) {
        return;
    }
    if (used > 0) {
        c->image_note[used++] = ' ';
        c->image_note[used] = '\0';
    }
    va_start(ap, fmt);
    (void)vsnprintf(c->image_note + used, sizeof(c->image_note) - used, fmt, ap);
    va_end(ap);
}

static void
on_image(int r, json_t *result, const struct err *e, void *userdata)
{
    struct mcp_call *c = userdata;

    op_ended(c);
    if (r == 0) {
        size_t n = 0;
        char *b64 = mcp_base64_encode(c->data.buf, c->data.len, &n);

        if (c->images == NULL) {
            c->images = OOM_CHECK(json_array());
        }
        (void)json_array_append_new(c->images,
                                    OOM_CHECK(json_pack("{s:s%, s:s}", "data", b64, n, "mimeType",
                                                        files_content_type(c->image_path))));
        free(b64);
    } else {
        image_note(c, "/workspace/%.128s could not be read (%s).", c->image_path,
                   r == FILES_IMAGE_TOO_BIG ? "larger than mcp.max_image_bytes"
                   : e && e->msg[0]         ? e->msg
                                            : strerror(-r));
    }
    image_next(c);
}

/* The next image artifact of c->result through the gate, or the result once none is left. */
static void
image_next(struct mcp_call *c)
{
    json_t *arts = c->result->artifacts;
    unsigned max = c->a->cfg->mcp_max_image_bytes;

    while (c->image_next < json_array_size(arts)) {
        json_t *art = json_array_get(arts, c->image_next++);
        const char *path = json_string_value(json_object_get(art, "path"));
        const char *mime = json_string_value(json_object_get(art, "mime"));
        json_int_t size = json_integer_value(json_object_get(art, "size"));
        struct err e = {0};

        if (path == NULL || mime == NULL || strcmp(mime, "image/png") != 0 ||
            files_normalize(path, strlen(path), false, c->image_path, sizeof(c->image_path), &e) <
                0) {
            continue;
        }
        if (++c->image_count > MCP_IMAGES_MAX) {
            image_note(c, "/workspace/%.128s is not shown (at most %u images a result).",
                       c->image_path, MCP_IMAGES_MAX);
        } else if (size > (json_int_t)max) {
            image_note(c,
                       "/workspace/%.128s (%lld bytes) is larger than mcp.max_image_bytes; read "
                       "it with the files API.",
                       c->image_path, (long long)size);
        } else {
            buf_done(&c->data);
            buf_init(&c->data, max);
            gate_enter(c);
            return;
        }
    }
    mcp_call_render(c);
}

void
mcp_files_images(struct mcp_call *c)
{
    c->image_next = 0;
    image_next(c);
}

/* ---- the operations -------------------------------------------------------------------------- */

static void
files_begin(struct mcp_call *c)
{
    struct session *s = mcp_call_sandbox(c);
    struct files_target ft = {.engine = c->a->backend->engine};

    ft.container = s != NULL ? session_container(s) : NULL;
    ft.user = s != NULL ? session_user(s) : NULL;
    if (ft.container == NULL || ft.user == NULL) {
        gate_leave(c, false);
        refused(c, "the sandbox of this MCP session ended");
        return;
    }
    session_touch(s);
    mcp_call_set(c, MCP_CALL_FILES);
    if (c->result != NULL) { /* an image of an execution's result */
        c->op = files_get(&ft, c->image_path, &read_io, on_image, c);
        return;
    }
    switch (c->tc.tool) {
    case MCP_TOOL_WRITE:
        c->op = files_put(&ft, c->tc.path, c->data.len, &put_io, on_put, c);
        break;
    case MCP_TOOL_READ:
        c->op = files_get(&ft, c->tc.path, &read_io, on_read, c);
        break;
    default:
        c->op = files_list(&ft, c->tc.path, on_listed, c);
        break;
    }
}

void
mcp_files_start(struct mcp_call *c)
{
    const struct cfg *cfg = c->a->cfg;

    if (c->tc.tool == MCP_TOOL_WRITE) {
        char *dec = NULL;
        size_t n = c->tc.content_len;

        buf_init(&c->data, SIZE_MAX);
        if (c->tc.base64 && mcp_base64_decode(c->tc.content, c->tc.content_len, &dec, &n) < 0) {
            mcp_call_fail(c, MCP_ERR_INVALID_PARAMS,
                          "content is not valid base64 (RFC 4648, padded, no whitespace)");
            return;
        }
        if (buf_append(&c->data, dec ? dec : c->tc.content, n) < 0) {
            oom();
        }
        free(dec);
    } else {
        buf_init(&c->data, cfg->mcp_max_read_bytes);
    }
    gate_enter(c);
}
