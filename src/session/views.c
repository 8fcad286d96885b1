/* The API's JSON views of sessions and executions (docs/api.md): the only place their states
 * and statuses become strings, with history.c's entries.
 *
 * They stay in the session module rather than in src/http/: the execution view reads fifteen
 * members of an execution (its collected output buffers, the kernel's byte counts, the
 * artifacts, the resources), which src/http/ would need as one accessor each or as a copy of
 * struct execution in a public header; here they read the objects directly and src/http/ calls
 * the three functions session.h declares. */
#include <jansson.h>

#include "pool/pool.h"
#include "session-internal.h"
#include "util/macro.h"
#include "util/utf8.h"

/* The API's state of a session: "ending", "hibernating", "hibernated", "waking", "paused"
 * (frozen, or being frozen or thawed), "busy" (an execution runs) or "ready". */
static const char *
view_state(const struct session *s)
{
    if (s->state == SESSION_ENDING || session_is_hibernated(s)) {
        return session_state_name(s->state);
    }
    if (pause_is_paused(s)) {
        return "paused";
    }
    return s->exec != NULL ? "busy" : "ready";
}

json_t *
session_to_json(const struct session *s)
{
    const struct store_session_rec *r = &s->rec;
    json_t *meta = json_loads(r->metadata, 0, NULL);

    if (!json_is_object(meta)) {
        json_decref(meta);
        meta = OOM_CHECK(json_object());
    }
    json_t *o;

    o = OOM_CHECK(json_pack(
        "{s:s, s:s, s:s, s:o, s:o, s:I, s:o, s:o, s:I, s:o}", "id", r->id, "profile", r->profile,
        "state", view_state(s), "created_at", history_time_json(r->created_at), "last_active_at",
        history_time_json(r->last_active_at), "idle_timeout_s", (json_int_t)r->idle_timeout_s,
        "idle_expires_at", history_time_json(store_session_deadline(r, r->last_active_at)),
        "expires_at", history_time_json(r->expires_at), "kernel_epoch", (json_int_t)r->epoch,
        "metadata", meta));
    (void)json_object_set_new(
        o, "idle_action",
        OOM_CHECK(json_string(hibernate_on_idle_action(s) ? "hibernate" : "end")));
    if (s->restored != NULL) {
        (void)json_object_set(o, "restored", s->restored);
    }
    if (r->egress != NULL && r->egress[0] != '\0') {
        json_t *eg = json_loads(r->egress, 0, NULL);

        if (eg != NULL) {
            (void)json_object_set_new(o, "egress", eg);
        }
    }
    return o;
}

json_t *
session_to_admin_json(const struct session *s)
{
    json_t *o = session_to_json(s);
    bool detached = s->state == SESSION_DETACHED || s->state == SESSION_RECONNECTING ||
                    s->state == SESSION_DYING;

    (void)json_object_set_new(o, "tenant", OOM_CHECK(json_string(s->rec.tenant)));
    (void)json_object_set_new(o, "node", OOM_CHECK(json_string(s->rec.node)));
    (void)json_object_set_new(o, "container",
                              s->slot != NULL ? OOM_CHECK(json_string(pool_slot_container(s->slot)))
                                              : json_null());
    (void)json_object_set_new(o, "detached", json_boolean(detached));
    (void)json_object_set_new(o, "execution",
                              s->exec != NULL ? OOM_CHECK(json_string(execution_id(s->exec)))
                                              : json_null());
    return o;
}

/* The bytes of a buffer as a JSON string (kernel output is valid UTF-8 already; jansson checks
 * again and we repair anything that is not). */
static json_t *
text_json(const struct buf *b)
{
    json_t *v = json_stringn(b->buf, b->len);

    if (v == NULL) {
        struct buf fixed = BUF_INIT(b->len * 3 + 1);

        (void)utf8_append_sanitized(&fixed, b->buf, b->len);
        v = OOM_CHECK(json_stringn(fixed.buf, fixed.len));
        buf_done(&fixed);
    }
    return v;
}

/* What was cut of the output: null when nothing was (or the kernel's done never came), else
 * both streams' byte counts, with what this side dropped on top of the kernel's. */
static json_t *
truncation_json(const struct execution *x)
{
    static const char *const names[2] = {"stdout", "stderr"};
    json_t *out;
    bool any = false;

    if (!x->kernel_done) {
        return json_null();
    }
    out = OOM_CHECK(json_object());
    for (int i = 0; i < 2; i++) {
        uint64_t dropped = x->truncated[i].dropped + (i == 0 ? x->out_extra : x->err_extra);

        any = any || dropped > 0;
        (void)json_object_set_new(
            out, names[i],
            OOM_CHECK(json_pack("{s:I, s:I}", "bytes_total", (json_int_t)x->truncated[i].total,
                                "bytes_dropped", (json_int_t)dropped)));
    }
    if (!any) {
        json_decref(out);
        return json_null();
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
resources_json(const struct execution *x)
{
    if (!x->has_resources) {
        return json_null();
    }
    return OOM_CHECK(json_pack("{s:o, s:o}", "cpu_ms", count_json(x->cpu_ms), "peak_memory_bytes",
                               count_json(x->peak_memory_bytes)));
}

json_t *
execution_to_json(const struct execution *x, bool with_output)
{
    json_t *o = OOM_CHECK(json_pack(
        "{s:s, s:s, s:O, s:O, s:I, s:o, s:I, s:b}", "id", x->id, "status",
        session_exec_status_to_string(x->status), "result", x->result ? x->result : json_null(),
        "error", x->error ? x->error : json_null(), "duration_ms", (json_int_t)x->duration_ms,
        "truncated", truncation_json(x), "kernel_epoch", (json_int_t)x->s->rec.epoch,
        "state_preserved", x->state_preserved));

    (void)json_object_set_new(
        o, "exit_code", x->is_cmd && x->exit_code >= 0 ? json_integer(x->exit_code) : json_null());
    (void)json_object_set(o, "artifacts", x->artifacts);
    (void)json_object_set_new(o, "resources", resources_json(x));
    if (x->restored != NULL) {
        (void)json_object_set(o, "restored", x->restored);
    }
    if (with_output) {
        (void)json_object_set_new(o, "stdout", text_json(&x->out));
        (void)json_object_set_new(o, "stderr", text_json(&x->err));
    }
    return o;
}

/* ---- accessors ------------------------------------------------------------------------------ */

void
session_set_restored(struct session *s, json_t *restored)
{
    json_decref(s->restored);
    s->restored = json_incref(restored);
    s->restored_told = false;
}

uint64_t
session_expires_at(const struct session *s)
{
    return s->rec.expires_at;
}

uint64_t
session_created_at(const struct session *s)
{
    return s->rec.created_at;
}

const char *
session_ext(const struct session *s)
{
    return s->rec.ext;
}
