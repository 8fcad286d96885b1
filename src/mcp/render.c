/* Tool results built from an execution or a file; see proto.h ("results") and docs/mcp.md.
 *
 * The text block is what a model reads: stdout, stderr, the result and the error in that order,
 * then every note in brackets on a line of its own. Nothing is left out silently: an output cut
 * here or by the kernel, a restart that lost the variables and an image not sent each get a
 * note with the numbers. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <event2/http.h>
#include <jansson.h>

#include "proto.h"
#include "session/session.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/utf8.h"

#define TEXT_MAX (64u << 20) /* a bound far above what the limits let through */

static void
put(struct buf *b, const char *s, size_t n)
{
    if (buf_append(b, s, n) < 0) {
        oom();
    }
}

/* A line of its own: a newline first unless the text is empty or ends in one. */
static void
line_start(struct buf *b)
{
    if (b->len > 0 && b->buf[b->len - 1] != '\n') {
        put(b, "\n", 1);
    }
}

static void note(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
note(struct buf *b, const char *fmt, ...)
{
    char text[512];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    line_start(b);
    put(b, "[", 1);
    put(b, text, strlen(text));
    put(b, "]", 1);
}

/* n bytes of UTF-8 from the sandbox as a JSON string; what jansson refuses is repaired. */
static json_t *
text_json(const char *t, size_t n)
{
    json_t *v = json_stringn(t, n);

    if (v == NULL) {
        struct buf fixed = BUF_INIT(n * 3 + 1);

        (void)utf8_append_sanitized(&fixed, t, n);
        v = OOM_CHECK(json_stringn(fixed.buf ? fixed.buf : "", fixed.len));
        buf_done(&fixed);
    }
    return v;
}

/* The first max bytes of a stream (cut at a character), with a note when it was cut here; a
 * new JSON string for structuredContent. */
static json_t *
stream_shown(struct buf *b, const char *label, const struct buf *s, size_t max, struct buf *notes)
{
    const char *t = s->buf;
    size_t n = s->len;
    size_t shown;

    if (t == NULL || n == 0) {
        return OOM_CHECK(json_string(""));
    }
    shown = n <= max ? n : utf8_boundary(t, max);
    if (label != NULL) {
        line_start(b);
        put(b, label, strlen(label));
        put(b, "\n", 1);
    }
    put(b, t, shown);
    if (shown < n) {
        note(notes, "%s: %zu bytes, the first %zu shown here", label ? "stderr" : "stdout", n,
             shown);
    }
    return text_json(t, shown);
}

static void
error_text(struct buf *b, const struct execution_result *r)
{
    json_t *tb = r->error.traceback;
    const char *name = r->error.name;
    const char *value = r->error.value;

    if (!r->has_error) {
        return;
    }
    line_start(b);
    put(b, "[error] ", 8);
    put(b, name ? name : "Error", strlen(name ? name : "Error"));
    if (value != NULL && value[0] != '\0') {
        put(b, ": ", 2);
        put(b, value, strlen(value));
    }
    for (size_t i = 0; i < json_array_size(tb); i++) {
        const char *l = json_string_value(json_array_get(tb, i));

        if (l != NULL) {
            line_start(b);
            put(b, l, strlen(l));
        }
    }
}

/* The status's note, saying whether the variables were kept. */
static void
status_note(struct buf *notes, enum session_exec_status status, bool preserved)
{
    static const struct {
        enum session_exec_status status;
        const char *what;
    } rows[] = {
        {SESSION_EXEC_TIMEOUT, "timed out"},
        {SESSION_EXEC_INTERRUPTED, "interrupted"},
        {SESSION_EXEC_OOM, "out of memory: the code was killed"},
    };

    for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
        if (status == rows[i].status) {
            note(notes, "%s; %s", rows[i].what,
                 preserved ? "the interpreter's variables are kept"
                           : "the interpreter restarted: variables were lost");
        }
    }
}

static void
truncation_notes(struct buf *notes, const struct execution_result *r)
{
    static const char *const names[2] = {"stdout", "stderr"};

    for (int i = 0; r->truncation_known && i < 2; i++) {
        if (r->truncated[i].dropped > 0) {
            note(notes, "%s truncated in the sandbox: %llu bytes written, %llu dropped", names[i],
                 (unsigned long long)r->truncated[i].total,
                 (unsigned long long)r->truncated[i].dropped);
        }
    }
}

/* structuredContent's "truncated": null when nothing was cut, else both streams' counts. */
static json_t *
truncated_json(const struct execution_result *r)
{
    static const char *const names[2] = {"stdout", "stderr"};
    json_t *o;

    if (!r->truncation_known || (r->truncated[0].dropped == 0 && r->truncated[1].dropped == 0)) {
        return json_null();
    }
    o = OOM_CHECK(json_object());
    for (int i = 0; i < 2; i++) {
        (void)json_object_set_new(
            o, names[i],
            OOM_CHECK(json_pack("{s:I, s:I}", "bytes_total", (json_int_t)r->truncated[i].total,
                                "bytes_dropped", (json_int_t)r->truncated[i].dropped)));
    }
    return o;
}

/* structuredContent's "error": {name, value, traceback[, line, column]}, or null. */
static json_t *
error_json(const struct execution_result *r)
{
    json_t *o;

    if (!r->has_error) {
        return json_null();
    }
    o = OOM_CHECK(json_pack("{s:s, s:s, s:O}", "name", r->error.name, "value", r->error.value,
                            "traceback",
                            r->error.traceback != NULL ? r->error.traceback : json_array()));
    if (r->error.line >= 0) {
        (void)json_object_set_new(o, "line", OOM_CHECK(json_integer(r->error.line)));
    }
    if (r->error.column >= 0) {
        (void)json_object_set_new(o, "column", OOM_CHECK(json_integer(r->error.column)));
    }
    return o;
}

json_t *
mcp_render_execution(const struct mcp_render *in)
{
    const struct execution_result *x = in->result;
    json_t *content = OOM_CHECK(json_array());
    const char *status = session_exec_status_to_string(x->status);
    uint64_t epoch = x->epoch;
    struct buf text = BUF_INIT(TEXT_MAX), notes = BUF_INIT(TEXT_MAX);
    json_t *out, *err, *structured;

    status = status != NULL ? status : "error";
    out = stream_shown(&text, NULL, &x->out, in->max_output, &notes);
    err = stream_shown(&text, "[stderr]", &x->err, in->max_output, &notes);
    if (x->value != NULL) {
        line_start(&text);
        put(&text, "[result] ", 9);
        put(&text, x->value, x->value_len);
    }
    error_text(&text, x);
    status_note(&notes, x->status, x->state_preserved);
    if (in->last_epoch != 0 && epoch != in->last_epoch) {
        note(&notes,
             "the interpreter restarted since the previous call (kernel_epoch %llu -> %llu): "
             "variables were lost",
             (unsigned long long)in->last_epoch, (unsigned long long)epoch);
    }
    truncation_notes(&notes, x);
    if (in->is_cmd && x->exit_code >= 0) {
        note(&notes, "exit code %d", x->exit_code);
    }
    if (in->image_note != NULL) {
        note(&notes, "%s", in->image_note);
    }
    if (notes.len > 0) {
        line_start(&text);
        put(&text, notes.buf, notes.len);
    }
    if (text.len == 0) {
        put(&text, "[no output]", 11);
    }
    (void)json_array_append_new(
        content, OOM_CHECK(json_pack("{s:s, s:s%}", "type", "text", "text", text.buf, text.len)));
    for (size_t i = 0; i < json_array_size(in->images); i++) {
        json_t *img = json_array_get(in->images, i);

        if (!json_is_string(json_object_get(img, "data")) ||
            !json_is_string(json_object_get(img, "mimeType"))) {
            continue; /* not an image entry: nothing to send */
        }
        (void)json_array_append_new(content,
                                    OOM_CHECK(json_pack("{s:s, s:O, s:O}", "type", "image", "data",
                                                        json_object_get(img, "data"), "mimeType",
                                                        json_object_get(img, "mimeType"))));
    }
    structured = OOM_CHECK(json_pack(
        "{s:s, s:o, s:o, s:o, s:o, s:I, s:b, s:o, s:s}", "status", status, "stdout", out, "stderr",
        err, "result", x->value != NULL ? text_json(x->value, x->value_len) : json_null(), "error",
        error_json(x), "kernel_epoch", (json_int_t)epoch, "state_preserved", x->state_preserved,
        "truncated", truncated_json(x), "execution_id", x->id));
    if (in->is_cmd) {
        (void)json_object_set_new(structured, "exit_code",
                                  x->exit_code >= 0 ? json_integer(x->exit_code) : json_null());
    }
    buf_done(&text);
    buf_done(&notes);
    return OOM_CHECK(json_pack("{s:o, s:o, s:b}", "content", content, "structuredContent",
                               structured, "isError", strcmp(status, "ok") != 0));
}

/* ---- files ----------------------------------------------------------------------------------- */

/* The raster types a client can show (an SVG is text). */
static bool
is_image(const char *mime)
{
    return strcmp(mime, "image/png") == 0 || strcmp(mime, "image/jpeg") == 0 ||
           strcmp(mime, "image/gif") == 0 || strcmp(mime, "image/webp") == 0;
}

static bool
is_text(const char *data, size_t len)
{
    return memchr(data, '\0', len) == NULL && utf8_valid(data, len);
}

static json_t *
file_uri(const char *path)
{
    struct buf b = BUF_INIT(3 * FILES_PATH_MAX + 64);
    char *enc = OOM_CHECK(evhttp_uriencode(path, -1, 0));
    json_t *uri;

    /* Slashes stay slashes: each segment is encoded on its own. */
    if (buf_puts(&b, "file:///workspace/") < 0) {
        oom();
    }
    for (const char *p = enc; *p != '\0'; p++) {
        if (strncmp(p, "%2F", 3) == 0) {
            put(&b, "/", 1);
            p += 2;
        } else {
            put(&b, p, 1);
        }
    }
    free(enc);
    uri = OOM_CHECK(json_stringn(b.buf, b.len));
    buf_done(&b);
    return uri;
}

static json_t *
blob(const char *data, size_t len)
{
    size_t n = 0;
    char *b64 = mcp_base64_encode(data, len, &n);
    json_t *s = OOM_CHECK(json_stringn(b64, n));

    free(b64);
    return s;
}

json_t *
mcp_render_resource(const char *path, const char *data, size_t len)
{
    const char *mime = files_content_type(path);

    if (!is_image(mime) && is_text(data, len)) {
        return OOM_CHECK(json_pack("{s:o, s:s, s:s%}", "uri", file_uri(path), "mimeType", mime,
                                   "text", data, len));
    }
    return OOM_CHECK(json_pack("{s:o, s:s, s:o}", "uri", file_uri(path), "mimeType", mime, "blob",
                               blob(data, len)));
}

json_t *
mcp_render_file(const char *path, const char *data, size_t len)
{
    const char *mime = files_content_type(path);
    json_t *block;

    if (is_image(mime)) {
        block = OOM_CHECK(json_pack("{s:s, s:o, s:s}", "type", "image", "data", blob(data, len),
                                    "mimeType", mime));
    } else if (is_text(data, len)) {
        block = OOM_CHECK(json_pack("{s:s, s:s%}", "type", "text", "text", data, len));
    } else {
        block = OOM_CHECK(json_pack("{s:s, s:o}", "type", "resource", "resource",
                                    mcp_render_resource(path, data, len)));
    }
    return OOM_CHECK(json_pack("{s:[o], s:b}", "content", block, "isError", false));
}

int
mcp_resource_path(const char *uri, char *out, size_t out_n, struct err *reterr)
{
    static const char prefix[] = "file:///workspace/";
    size_t n = 0;
    char *dec;
    int r;

    if (uri == NULL || strncmp(uri, prefix, sizeof(prefix) - 1) != 0) {
        return err_set(reterr, -EINVAL, "a resource here is file:///workspace/<path>");
    }
    dec = evhttp_uridecode(uri + sizeof(prefix) - 1, 0, &n);
    if (dec == NULL) {
        return err_set(reterr, -EINVAL, "the resource uri is not valid percent-encoding");
    }
    if (!utf8_valid(dec, n)) {
        free(dec);
        return err_set(reterr, -EINVAL, "the resource uri's path is not UTF-8");
    }
    r = files_normalize(dec, n, false, out, out_n, reterr);
    free(dec);
    return r;
}
