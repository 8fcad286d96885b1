/* A session's record fields that change while it lives: its epoch, its activity (touch), its end
 * of life (expiry) and an edge's data (ext); each written to Redis (store/sessions.h) as it
 * changes. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "session-internal.h"
#include "store/sessions.h"
#include "util/hashmap.h"
#include "util/macro.h"
#include "util/time.h"

/* ---- epoch ----------------------------------------------------------------------------------- */

static void
on_epoch_saved(int r, void *userdata)
{
    sop_free(userdata); /* best effort: the next change or a re-adoption writes it again */
}

void
session_epoch_bump(struct session *s, int64_t new_gen, const char *why)
{
    struct sop *op;
    char detail[160];

    s->rec.epoch++;
    (void)snprintf(detail, sizeof(detail), "kernel_epoch is now %llu: %s",
                   (unsigned long long)s->rec.epoch, why);
    manager_notify(s->m, "epoch", &s->rec, detail);
    s->rec.gen = new_gen;
    op = sop_new(s->m, SOP_EPOCH, s->rec.id);
    if (store_sessions_set_epoch(s->m->store, s->rec.id, s->rec.epoch, s->rec.gen, on_epoch_saved,
                                 op) < 0) {
        sop_free(op);
    }
}

/* ---- touch ----------------------------------------------------------------------------------- */

static void
on_touched(int r, void *userdata)
{
    /* -ENOENT: the reaper claimed it in the meantime; its ending is on the way. */
    sop_free(userdata);
}

void
session_touch(struct session *s)
{
    struct sop *op;
    uint64_t now = time_wall_ms(), mono = time_now_ms();

    s->rec.last_active_at = now;
    /* A deadline is pushed at most every TOUCH_MIN_MS (or a tenth of the idle timeout, when
     * shorter): a busy session then costs Redis a few scripts a second, not one per call, and
     * its deadline is never more than that early. */
    if (mono - s->last_touch_ms < MIN((uint64_t)TOUCH_MIN_MS, s->rec.idle_timeout_s * 100ull)) {
        return;
    }
    s->last_touch_ms = mono;
    op = sop_new(s->m, SOP_TOUCH, s->rec.id);
    if (store_sessions_touch(s->m->store, s->rec.id, now, on_touched, op) < 0) {
        sop_free(op);
    }
}

static void
on_expiry_set(int r, void *userdata)
{
    struct sop *op = userdata;
    struct session *s = op->m != NULL ? hashmap_get(op->m->by_id, op->id) : NULL;

    if (op->m == NULL && r == 0) {
        r = -ECANCELED;
    }
    if (r == 0 && s != NULL) {
        s->rec.expires_at = op->expires_at;
    }
    op->expiry_cb(r, op->expires_at, op->userdata);
    sop_free(op);
}

int
session_set_expiry(struct session *s, uint64_t at, session_expiry_cb *cb, void *userdata,
                   struct err *reterr)
{
    uint64_t cap = s->rec.created_at + (uint64_t)s->profile->max_lifetime_s * 1000u;
    struct sop *op;

    if (s->state == SESSION_ENDING || s->state == SESSION_DYING) {
        return err_set(reterr, -ENOENT, "the session is ending");
    }
    op = sop_new(s->m, SOP_EXPIRY, s->rec.id);
    op->expiry_cb = cb;
    op->userdata = userdata;
    op->expires_at = MIN(at, cap);
    if (store_sessions_set_expiry(s->m->store, s->rec.id, op->expires_at, on_expiry_set, op) < 0) {
        sop_free(op);
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    return 0;
}

static void
on_ext_set(int r, void *userdata)
{
    struct sop *op = userdata;

    op->ext_cb(op->m == NULL && r == 0 ? -ECANCELED : r, op->userdata);
    sop_free(op);
}

int
session_set_ext(struct session *s, const char *ext, session_ext_cb *cb, void *userdata,
                struct err *reterr)
{
    struct sop *op;

    if (strlen(ext) > STORE_EXT_MAX) {
        return err_set(reterr, -EINVAL, "the session's extension record is too long");
    }
    if (s->state == SESSION_ENDING || s->state == SESSION_DYING) {
        return err_set(reterr, -ENOENT, "the session is ending");
    }
    op = sop_new(s->m, SOP_EXT, s->rec.id);
    op->ext_cb = cb;
    op->userdata = userdata;
    if (store_sessions_set_ext(s->m->store, s->rec.id, ext, on_ext_set, op) < 0) {
        sop_free(op);
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    store_session_rec_set(&s->rec.ext, ext);
    return 0;
}

static void
on_egress_set(int r, void *userdata)
{
    struct sop *op = userdata;
    struct session *s = op->m != NULL ? hashmap_get(op->m->by_id, op->id) : NULL;

    if (op->m == NULL && r == 0) {
        r = -ECANCELED;
    }
    if (r == 0 && s != NULL) {
        store_session_rec_set(&s->rec.egress, op->egress);
        if (s->slot != NULL) {
            session_keep_egress_bytes(s); /* the count goes on through the gate bound again */
            session_bind_gate(s);
        }
    }
    op->ext_cb(r, op->userdata);
    sop_free(op);
}

int
session_set_egress(struct session *s, const char *text, session_ext_cb *cb, void *userdata,
                   struct err *reterr)
{
    struct sop *op;
    int r;

    if (s->profile->egress == NULL) {
        return err_set(reterr, -EINVAL, "profile '%s' has no egress list to narrow",
                       s->profile->name);
    }
    if (text[0] != '\0' && (r = session_check_egress(s->profile, text, reterr)) < 0) {
        return r;
    }
    if (s->state == SESSION_ENDING || s->state == SESSION_DYING) {
        return err_set(reterr, -ENOENT, "the session is ending");
    }
    op = sop_new(s->m, SOP_EGRESS, s->rec.id);
    op->ext_cb = cb;
    op->userdata = userdata;
    op->egress = xstrdup(text);
    if (store_sessions_set_egress(s->m->store, s->rec.id, text, on_egress_set, op) < 0) {
        sop_free(op);
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    return 0;
}

bool
session_has_egress(const struct session *s)
{
    return s->profile->egress != NULL;
}
