/* The API's JSON views of sessions (docs/api.md), and an execution's typed result (struct
 * execution_result), which each protocol renders in its own shape: REST's Execution object is
 * src/rest/execution.c's. The session views stay here: they read the record and the state
 * machines directly. */
#include <string.h>

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

/* ---- the typed result ----------------------------------------------------------------------- */

static char *
json_strdup(const json_t *v, size_t *ret_len)
{
    size_t n = json_string_length(v);
    char *p = xmalloc(n + 1);

    memcpy(p, json_string_value(v), n);
    p[n] = '\0';
    if (ret_len != NULL) {
        *ret_len = n;
    }
    return p;
}

static void
buf_copy(struct buf *to, const struct buf *from)
{
    *to = (struct buf)BUF_INIT(from->len + 1);
    if (from->len > 0 && buf_append(to, from->buf, from->len) < 0) {
        oom(); /* its bound is its length */
    }
}

/* The error as execution.c keeps it: {name, value, traceback[, line, column]}. */
static void
error_take(struct execution_error *e, const json_t *o)
{
    const json_t *line = json_object_get(o, "line"), *column = json_object_get(o, "column");

    e->name = json_strdup(json_object_get(o, "name"), NULL);
    e->value = json_strdup(json_object_get(o, "value"), NULL);
    e->traceback = json_incref(json_object_get(o, "traceback"));
    e->line = json_is_integer(line) ? json_integer_value(line) : -1;
    e->column = json_is_integer(column) ? json_integer_value(column) : -1;
}

struct execution_result *
execution_result_new(const struct execution *x)
{
    struct execution_result *r = xcalloc(1, sizeof(*r));

    memcpy(r->id, x->id, sizeof(r->id));
    r->status = x->status;
    r->is_cmd = x->is_cmd;
    r->state_preserved = x->state_preserved;
    r->epoch = x->s->rec.epoch;
    r->exit_code = x->is_cmd ? x->exit_code : -1;
    if (x->result != NULL) {
        r->value = json_strdup(x->result, &r->value_len);
    }
    r->mime = json_incref(x->mime);
    r->has_error = x->error != NULL;
    if (r->has_error) {
        error_take(&r->error, x->error);
    }
    buf_copy(&r->out, &x->out);
    buf_copy(&r->err, &x->err);
    r->truncation_known = x->kernel_done;
    for (int i = 0; i < 2; i++) {
        r->truncated[i] = x->truncated[i];
        r->truncated[i].dropped += i == 0 ? x->out_extra : x->err_extra;
    }
    r->duration_ms = x->duration_ms;
    r->has_resources = x->has_resources;
    r->cpu_ms = x->cpu_ms;
    r->peak_memory_bytes = x->peak_memory_bytes;
    r->artifacts = json_incref(x->artifacts);
    r->restored = json_incref(x->restored);
    r->snapshot = json_incref(x->snapshot);
    return r;
}

void
execution_result_free(struct execution_result *r)
{
    if (r == NULL) {
        return;
    }
    free(r->value);
    json_decref(r->mime);
    free(r->error.name);
    free(r->error.value);
    json_decref(r->error.traceback);
    buf_done(&r->out);
    buf_done(&r->err);
    json_decref(r->artifacts);
    json_decref(r->restored);
    json_decref(r->snapshot);
    free(r);
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
