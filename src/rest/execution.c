/* REST's Execution object (docs/api.md), rendered from the session module's typed result: the
 * one place its members get their names. */
#include <jansson.h>

#include "rest/rest-internal.h"
#include "session/session.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/utf8.h"

/* The bytes of an output buffer as a JSON string (kernel output is valid UTF-8 already; jansson
 * checks again and anything that is not is repaired). */
static json_t *
text_json(const struct buf *b)
{
    json_t *v = json_stringn(b->buf ? b->buf : "", b->len);

    if (v == NULL) {
        struct buf fixed = BUF_INIT(b->len * 3 + 1);

        (void)utf8_append_sanitized(&fixed, b->buf, b->len);
        v = OOM_CHECK(json_stringn(fixed.buf ? fixed.buf : "", fixed.len));
        buf_done(&fixed);
    }
    return v;
}

/* What was cut of the output: null when nothing was (or the kernel's done never came), else
 * both streams' byte counts. */
static json_t *
truncation_json(const struct execution_result *r)
{
    static const char *const names[2] = {"stdout", "stderr"};
    json_t *out;

    if (!r->truncation_known || (r->truncated[0].dropped == 0 && r->truncated[1].dropped == 0)) {
        return json_null();
    }
    out = OOM_CHECK(json_object());
    for (int i = 0; i < 2; i++) {
        (void)json_object_set_new(
            out, names[i],
            OOM_CHECK(json_pack("{s:I, s:I}", "bytes_total", (json_int_t)r->truncated[i].total,
                                "bytes_dropped", (json_int_t)r->truncated[i].dropped)));
    }
    return out;
}

static json_t *
count_json(int64_t v)
{
    return v >= 0 ? OOM_CHECK(json_integer(v)) : json_null();
}

/* The kernel's resource record, or null. */
static json_t *
resources_json(const struct execution_result *r)
{
    if (!r->has_resources) {
        return json_null();
    }
    return OOM_CHECK(json_pack("{s:o, s:o}", "cpu_ms", count_json(r->cpu_ms), "peak_memory_bytes",
                               count_json(r->peak_memory_bytes)));
}

static json_t *
error_json(const struct execution_result *r)
{
    const struct execution_error *e = &r->error;
    json_t *o;

    if (!r->has_error) {
        return json_null();
    }
    o = OOM_CHECK(json_pack("{s:s, s:s, s:O}", "name", e->name, "value", e->value, "traceback",
                            e->traceback != NULL ? e->traceback : json_array()));
    if (e->line >= 0) {
        (void)json_object_set_new(o, "line", OOM_CHECK(json_integer(e->line)));
    }
    if (e->column >= 0) {
        (void)json_object_set_new(o, "column", OOM_CHECK(json_integer(e->column)));
    }
    return o;
}

json_t *
rest_execution_json(const struct execution_result *r, bool with_output)
{
    json_t *o = OOM_CHECK(json_pack(
        "{s:s, s:s, s:o, s:o, s:I, s:o, s:I, s:b}", "id", r->id, "status",
        session_exec_status_to_string(r->status), "result",
        r->value != NULL ? OOM_CHECK(json_stringn(r->value, r->value_len)) : json_null(), "error",
        error_json(r), "duration_ms", (json_int_t)r->duration_ms, "truncated", truncation_json(r),
        "kernel_epoch", (json_int_t)r->epoch, "state_preserved", r->state_preserved));

    (void)json_object_set_new(
        o, "exit_code", r->is_cmd && r->exit_code >= 0 ? json_integer(r->exit_code) : json_null());
    (void)json_object_set_new(o, "artifacts",
                              r->artifacts != NULL ? json_incref(r->artifacts) : json_array());
    (void)json_object_set_new(o, "resources", resources_json(r));
    if (r->restored != NULL) {
        (void)json_object_set(o, "restored", r->restored);
    }
    if (with_output) {
        (void)json_object_set_new(o, "stdout", text_json(&r->out));
        (void)json_object_set_new(o, "stderr", text_json(&r->err));
    }
    return o;
}
