/* The execution history: one JSON entry per ended execution, pushed to the session's list in
 * Redis (kept with the record, trimmed to STORE_HISTORY_MAX, deleted with it) and read back for
 * the API. A push is never waited for (the reply does not depend on it; a later read is behind
 * it on the same connection), and a read's entries are our own JSON, each checked again. */
#include <errno.h>
#include <string.h>

#include <jansson.h>

#include "session-internal.h"
#include "store/sessions.h"
#include "util/macro.h"
#include "util/time.h"

json_t *
history_time_json(uint64_t wall_ms)
{
    char ts[40];

    return OOM_CHECK(json_string(time_rfc3339(wall_ms, ts, sizeof(ts))));
}

static void
on_history_saved(int r, void *userdata)
{
    sop_free(userdata); /* best effort: the history is a record, not the session's state */
}

void
history_push(struct execution *x)
{
    struct session *s = x->s;
    json_t *head = json_string(x->code_head ? x->code_head : "");
    json_t *entry;
    struct sop *op;
    char *text;

    entry = OOM_CHECK(
        json_pack("{s:s, s:o, s:I, s:s, s:s, s:o, s:I, s:I}", "id", x->id, "started_at",
                  history_time_json(x->started_wall_ms), "duration_ms", (json_int_t)x->duration_ms,
                  "status", session_exec_status_to_string(x->status), "code_sha256", x->code_sha256,
                  "code_head", head ? head : json_null(), "code_bytes", (json_int_t)x->code_bytes,
                  "epoch", (json_int_t)s->rec.epoch));
    text = OOM_CHECK(json_dumps(entry, JSON_COMPACT));
    json_decref(entry);
    op = sop_new(s->m, SOP_HISTORY, s->rec.id);
    if (store_sessions_history_push(s->m->store, s->rec.id, text, strlen(text), on_history_saved,
                                    op) < 0) {
        sop_free(op); /* Redis is down: this entry is lost, the next ones are not */
    }
    free(text);
}

struct history_req {
    session_history_cb *cb;
    void *userdata;
};

static void
on_history(int r, const char *const *items, const size_t *lens, size_t n, void *userdata)
{
    struct history_req *h = userdata;
    json_t *list = NULL;

    if (r == 0) {
        list = OOM_CHECK(json_array());
        for (size_t i = 0; i < n; i++) {
            /* Entries are our own JSON; one that does not parse (a foreign write) is skipped. */
            json_t *e = json_loadb(items[i], lens[i], JSON_REJECT_DUPLICATES, NULL);

            if (json_is_object(e)) {
                (void)json_array_append(list, e);
            }
            json_decref(e);
        }
    }
    h->cb(r, list, h->userdata);
    json_decref(list);
    free(h);
}

int
session_history(struct session *s, session_history_cb *cb, void *userdata, struct err *reterr)
{
    struct history_req *h = xcalloc(1, sizeof(*h));
    int r;

    h->cb = cb;
    h->userdata = userdata;
    r = store_sessions_history(s->m->store, s->rec.id, on_history, h);
    if (r < 0) {
        free(h);
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    return 0;
}
