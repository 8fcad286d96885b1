/* The snapshot service's lifecycle, its records as the API sees them (get, list, delete) and the
 * retention sweep; see snapshot.h. */
#define LOG_MODULE "snapshot"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config/config.h"
#include "files/files.h"
#include "log/log.h"
#include "session/session.h"
#include "snapshot/snapshot-internal.h"
#include "util/macro.h"
#include "util/time.h"

struct snapshot_req;
static void req_cancel(struct snapshot_req *q);

/* ---- lifecycle ------------------------------------------------------------------------------- */

static int
store_config(const struct cfg *cfg, struct snapstore_cfg *ret, struct err *reterr)
{
    *ret = (struct snapstore_cfg){.timeout_ms = 30000};
    if (strcmp(cfg->snapshots_store, "dir") == 0) {
        ret->kind = SNAPSTORE_DIR;
        ret->dir = cfg->snapshots_dir;
        return 0;
    }
    if (strcmp(cfg->snapshots_store, "s3") == 0) {
        ret->kind = SNAPSTORE_S3;
        ret->endpoint = cfg->snapshots_s3_endpoint;
        ret->bucket = cfg->snapshots_s3_bucket;
        ret->region = cfg->snapshots_s3_region;
        ret->prefix = cfg->snapshots_s3_prefix;
        ret->access_key = cfg->snapshots_s3_access_key;
        ret->secret_key = cfg->snapshots_s3_secret_key;
        return 0;
    }
    return err_set(reterr, -EINVAL,
                   "snapshots.store must be \"dir\", \"s3\" or \"\" (off), not '%s'",
                   cfg->snapshots_store);
}

struct snapshots *
snapshots_new(struct event_base *base, const struct cfg *cfg, struct store_redis *redis,
              struct docker_client *engine, struct session_manager *sessions, struct err *reterr)
{
    struct snapstore_cfg sc;
    struct snapshots *sn;
    struct snapstore *store;

    if (cfg->snapshots_store[0] == '\0') {
        return NULL;
    }
    if (store_config(cfg, &sc, reterr) < 0) {
        return NULL;
    }
    store = snapstore_new(base, &sc, reterr);
    if (store == NULL) {
        return NULL;
    }
    sn = xcalloc(1, sizeof(*sn));
    sn->base = base;
    sn->cfg = cfg;
    sn->redis = redis;
    sn->engine = engine;
    sn->sessions = sessions;
    sn->store = store;
    sn->records = store_snapshots_new(redis, cfg->redis_prefix);
    TAILQ_INIT(&sn->jobs);
    TAILQ_INIT(&sn->reqs);
    return sn;
}

struct snapshots *
snapshots_free(struct snapshots *sn)
{
    struct snapshot_job *j;

    if (sn == NULL) {
        return NULL;
    }
    while ((j = TAILQ_FIRST(&sn->jobs)) != NULL) {
        bool redis_pending = j->step == JOB_BEGIN || j->step == JOB_COMMIT || j->step == JOB_LOOKUP;

        TAILQ_REMOVE(&sn->jobs, j, link);
        job_stop_work(j);
        if (j->cb != NULL) {
            struct err e = {0};

            (void)err_set(&e, -ECANCELED, "the daemon is stopping");
            j->cb(-ECANCELED, NULL, &e, j->userdata);
        }
        j->sn = NULL;
        j->step = JOB_ORPHAN;
        if (!redis_pending) {
            (void)job_orphaned(j);
        }
    }
    while (!TAILQ_EMPTY(&sn->reqs)) {
        req_cancel(TAILQ_FIRST(&sn->reqs));
    }
    sn->records = store_snapshots_free(sn->records);
    sn->store = snapstore_free(sn->store);
    free(sn);
    return NULL;
}

void
snapshots_get_stats(const struct snapshots *sn, struct snapshots_stats *ret)
{
    *ret = sn->stats;
}

/* ---- get, list, delete ----------------------------------------------------------------------- */

/* A request on the records, or one of the sweep's. Freed by its last callback; at
 * snapshots_free() its caller is answered -ECANCELED, one waiting for the store (which calls back
 * no more) is freed, one waiting for Redis is left without its service (q->sn NULL) for the
 * answer that store_redis_free() gives it. */
struct snapshot_req {
    TAILQ_ENTRY(snapshot_req) link;
    struct snapshots *sn;
    char tenant[65], id[STORE_SNAPSHOT_ID_LEN + 1], actor[80];
    snapshots_json_cb *cb;
    snapshots_list_cb *list_cb;
    snapshots_done_cb *done_cb;
    void *userdata;
    bool in_store; /* waits for the store, not Redis */
};

#define req snapshot_req

static struct req *
req_new(struct snapshots *sn, const char *tenant, const char *id, void *userdata)
{
    struct req *q = xcalloc(1, sizeof(*q));

    q->sn = sn;
    (void)snprintf(q->tenant, sizeof(q->tenant), "%s", tenant != NULL ? tenant : "");
    (void)snprintf(q->id, sizeof(q->id), "%s", id != NULL ? id : "");
    q->userdata = userdata;
    TAILQ_INSERT_TAIL(&sn->reqs, q, link);
    return q;
}

/* Its work is over: freed (after its caller was answered). */
static void
req_free(struct req *q)
{
    if (q->sn != NULL) {
        TAILQ_REMOVE(&q->sn->reqs, q, link);
        if (q->sn->sweep == q) {
            q->sn->sweep = NULL;
        }
    }
    free(q);
}

/* Whether a Redis answer came for a request whose service is gone (then it is freed). */
static bool
req_orphaned(struct req *q)
{
    if (q->sn != NULL) {
        return false;
    }
    free(q);
    return true;
}

static void
req_cancel(struct req *q)
{
    struct err e = {0};

    (void)err_set(&e, -ECANCELED, "the daemon is stopping");
    if (q->cb != NULL) {
        q->cb(-ECANCELED, NULL, &e, q->userdata);
    } else if (q->list_cb != NULL) {
        q->list_cb(-ECANCELED, NULL, &e, q->userdata);
    } else if (q->done_cb != NULL) {
        q->done_cb(-ECANCELED, &e, q->userdata);
    }
    TAILQ_REMOVE(&q->sn->reqs, q, link);
    q->sn = NULL;
    if (q->in_store) {
        free(q);
    }
}

static const struct err *
msg(struct err *e, int r, const char *text)
{
    (void)err_set(e, r, "%s", text);
    return e;
}

static void
on_got(int r, const struct store_snapshot_rec *recs, size_t n, void *userdata)
{
    struct req *q = userdata;
    struct err e = {0};

    if (req_orphaned(q)) {
        return;
    }
    if (r < 0) {
        q->cb(r, NULL, msg(&e, r, "redis is unavailable"), q->userdata);
    } else if (n == 0 || strcmp(recs[0].tenant, q->tenant) != 0 ||
               recs[0].state != STORE_SNAPSHOT_READY || recs[0].hibernation) {
        q->cb(-ENOENT, NULL, msg(&e, -ENOENT, "no such snapshot"), q->userdata);
    } else {
        json_t *o = snapshot_rec_json(&recs[0]);

        q->cb(0, o, NULL, q->userdata);
        json_decref(o);
    }
    req_free(q);
}

int
snapshots_get(struct snapshots *sn, const char *tenant, const char *id, snapshots_json_cb *cb,
              void *userdata, struct err *reterr)
{
    struct req *q;

    if (!store_snapshot_valid_id(id)) {
        return err_set(reterr, -ENOENT, "no such snapshot");
    }
    q = req_new(sn, tenant, id, userdata);
    q->cb = cb;
    if (store_snapshots_get(sn->records, id, on_got, q) < 0) {
        req_free(q);
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    return 0;
}

/* The list's answer for one tenant: {"tenant"?, "snapshots", "bytes", "quota_bytes"}. */
static json_t *
tenant_listing(const struct snapshots *sn, const char *tenant,
               const struct store_snapshot_rec *recs, size_t n, uint64_t bytes, bool admin)
{
    uint64_t quota = sn->cfg->snapshots_max_bytes_per_tenant;
    json_t *a = OOM_CHECK(json_array());

    for (size_t i = 0; i < n; i++) {
        if (recs[i].state == STORE_SNAPSHOT_READY && strcmp(recs[i].tenant, tenant) == 0) {
            json_t *o = snapshot_rec_json(&recs[i]);

            if (admin) {
                (void)json_object_set_new(o, "tenant", OOM_CHECK(json_string(tenant)));
            }
            (void)json_array_append_new(a, o);
        }
    }
    return OOM_CHECK(
        json_pack("{s:o, s:I, s:o}", "snapshots", a, "bytes", (json_int_t)bytes, "quota_bytes",
                  quota > 0 ? OOM_CHECK(json_integer((json_int_t)quota)) : json_null()));
}

static void
on_listed(int r, const struct store_snapshot_rec *recs, size_t n, uint64_t bytes, void *userdata)
{
    struct req *q = userdata;
    struct err e = {0};
    json_t *o;

    if (req_orphaned(q)) {
        return;
    }
    if (r < 0) {
        q->list_cb(r, NULL, msg(&e, r, "redis is unavailable"), q->userdata);
        req_free(q);
        return;
    }
    o = tenant_listing(q->sn, q->tenant, recs, n, bytes, false);
    q->list_cb(0, o, NULL, q->userdata);
    json_decref(o);
    req_free(q);
}

int
snapshots_list(struct snapshots *sn, const char *tenant, snapshots_list_cb *cb, void *userdata,
               struct err *reterr)
{
    struct req *q = req_new(sn, tenant, NULL, userdata);

    q->list_cb = cb;
    if (store_snapshots_list(sn->records, tenant, SNAPSHOT_LIST_MAX, on_listed, q) < 0) {
        req_free(q);
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    return 0;
}

/* ---- the admin's list: tenant after tenant --------------------------------------------------- */

struct admin_walk {
    struct req *q;
    char **tenants;
    size_t n, next;
    json_t *snapshots, *totals;
    bool truncated; /* snapshots were left out (newest SNAPSHOT_LIST_MAX kept) */
};

static void walk_next(struct admin_walk *w);

static void
walk_free(struct admin_walk *w)
{
    for (size_t i = 0; i < w->n; i++) {
        free(w->tenants[i]);
    }
    free(w->tenants);
    json_decref(w->snapshots);
    json_decref(w->totals);
    free(w);
}

struct listed {
    json_t *snapshot; /* borrowed from the walk's array */
};

static int
newest_first(const void *a, const void *b)
{
    const char *x =
        json_string_value(json_object_get(((const struct listed *)a)->snapshot, "created_at"));
    const char *y =
        json_string_value(json_object_get(((const struct listed *)b)->snapshot, "created_at"));

    return strcmp(y != NULL ? y : "", x != NULL ? x : ""); /* RFC 3339 UTC: text order is time */
}

/* Keeps the newest SNAPSHOT_LIST_MAX of the walk's snapshots (sorted, newest first): after each
 * tenant, so that the walk holds at most two lists' worth whatever the number of tenants. */
static void
walk_trim(struct admin_walk *w)
{
    size_t n = json_array_size(w->snapshots), keep = n < SNAPSHOT_LIST_MAX ? n : SNAPSHOT_LIST_MAX;
    struct listed *v = xcalloc(n ? n : 1, sizeof(*v));
    json_t *sorted = OOM_CHECK(json_array());

    for (size_t i = 0; i < n; i++) {
        v[i].snapshot = json_array_get(w->snapshots, i);
    }
    qsort(v, n, sizeof(*v), newest_first);
    for (size_t i = 0; i < keep; i++) {
        (void)json_array_append(sorted, v[i].snapshot);
    }
    free(v);
    w->truncated = w->truncated || n > keep;
    json_decref(w->snapshots);
    w->snapshots = sorted;
}

/* Every tenant listed: the answer. */
static void
walk_done(struct admin_walk *w)
{
    json_t *o;

    walk_trim(w);
    o = OOM_CHECK(json_pack("{s:O, s:O, s:b}", "snapshots", w->snapshots, "tenants", w->totals,
                            "truncated", w->truncated));
    w->q->list_cb(0, o, NULL, w->q->userdata);
    json_decref(o);
    req_free(w->q);
    walk_free(w);
}

static void
on_walked(int r, const struct store_snapshot_rec *recs, size_t n, uint64_t bytes, void *userdata)
{
    struct admin_walk *w = userdata;
    struct err e = {0};
    json_t *one, *list, *v;
    size_t i;

    if (req_orphaned(w->q)) {
        walk_free(w);
        return;
    }
    if (r < 0) {
        w->q->list_cb(r, NULL, msg(&e, r, "redis is unavailable"), w->q->userdata);
        req_free(w->q);
        walk_free(w);
        return;
    }
    one = tenant_listing(w->q->sn, w->tenants[w->next], recs, n, bytes, true);
    list = json_object_get(one, "snapshots");
    json_array_foreach (list, i, v) {
        (void)json_array_append(w->snapshots, v);
    }
    (void)json_object_set_new(one, "snapshots",
                              OOM_CHECK(json_integer((json_int_t)json_array_size(list))));
    if (json_array_size(w->snapshots) > SNAPSHOT_LIST_MAX) {
        walk_trim(w);
    }
    (void)json_object_set_new(one, "tenant", OOM_CHECK(json_string(w->tenants[w->next])));
    (void)json_array_append_new(w->totals, one);
    w->next++;
    walk_next(w);
}

static void
walk_next(struct admin_walk *w)
{
    struct err e = {0};

    if (w->next == w->n) {
        walk_done(w);
        return;
    }
    if (store_snapshots_list(w->q->sn->records, w->tenants[w->next], SNAPSHOT_LIST_MAX, on_walked,
                             w) < 0) {
        w->q->list_cb(-ENOTCONN, NULL, msg(&e, -ENOTCONN, "redis is unavailable"), w->q->userdata);
        req_free(w->q);
        walk_free(w);
    }
}

int
snapshots_admin_list(struct snapshots *sn, const char *const *tenants, size_t n,
                     snapshots_list_cb *cb, void *userdata, struct err *reterr)
{
    struct admin_walk *w;

    if (n == 0) {
        return err_set(reterr, -EINVAL, "no tenant to list");
    }
    w = xcalloc(1, sizeof(*w));
    w->tenants = xcalloc(n, sizeof(*w->tenants));
    for (size_t i = 0; i < n; i++) {
        w->tenants[i] = xstrdup(tenants[i]);
    }
    w->n = n;
    w->snapshots = OOM_CHECK(json_array());
    w->totals = OOM_CHECK(json_array());
    w->q = req_new(sn, NULL, NULL, userdata);
    w->q->list_cb = cb;
    if (store_snapshots_list(sn->records, w->tenants[0], SNAPSHOT_LIST_MAX, on_walked, w) < 0) {
        req_free(w->q);
        walk_free(w);
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    return 0;
}

static void
on_deleted(int r, void *userdata)
{
    struct req *q = userdata;
    struct err e = {0};

    if (req_orphaned(q)) {
        return;
    }
    if (q->done_cb == NULL) { /* the sweep's */
        req_free(q);
        return;
    }
    if (r == 0) {
        q->sn->stats.deleted_total++;
        snapshots_audit(q->sn, &(struct snapshot_audit){.action = "snapshot.deleted",
                                                        .actor = q->actor,
                                                        .tenant = q->tenant,
                                                        .snapshot = q->id});
    }
    q->done_cb(
        r, r < 0 ? msg(&e, r, r == -ENOENT ? "no such snapshot" : "redis is unavailable") : NULL,
        q->userdata);
    req_free(q);
}

/* The bytes went (or were not there): now the record, the tenant's bytes with it. */
static void
on_delete_bytes(int r, const struct err *e, void *userdata)
{
    struct req *q = userdata;
    struct err e2 = {0};

    q->in_store = false;
    if (r < 0) {
        if (q->done_cb != NULL) {
            q->done_cb(
                job_store_errno(r),
                msg(&e2, job_store_errno(r), e != NULL ? e->msg : "the snapshot store failed"),
                q->userdata);
        }
        req_free(q); /* the sweep's: the next sweep tries again */
        return;
    }
    if (store_snapshots_delete(q->sn->records, q->id, q->done_cb != NULL ? q->tenant : NULL,
                               on_deleted, q) < 0) {
        if (q->done_cb != NULL) {
            q->done_cb(-ENOTCONN, msg(&e2, -ENOTCONN, "redis is unavailable"), q->userdata);
        }
        req_free(q);
    }
}

/* Its record first (is it the tenant's?), then its bytes, then the record. */
static void
on_delete_lookup(int r, const struct store_snapshot_rec *recs, size_t n, void *userdata)
{
    struct req *q = userdata;
    struct err e = {0};
    bool admin = q->tenant[0] == '\0';

    if (req_orphaned(q)) {
        return;
    }
    if (r == 0 && n == 1 && admin && recs[0].hibernation) {
        (void)err_set(&e, -EBUSY,
                      "snapshot %s holds hibernated session %s: end the session to remove it",
                      q->id, recs[0].session);
        q->done_cb(-EBUSY, &e, q->userdata);
        req_free(q);
        return;
    }
    if (r < 0 || n == 0 || (!admin && strcmp(recs[0].tenant, q->tenant) != 0) ||
        recs[0].hibernation) {
        r = r < 0 ? r : -ENOENT;
        q->done_cb(r, msg(&e, r, r == -ENOENT ? "no such snapshot" : "redis is unavailable"),
                   q->userdata);
        req_free(q);
        return;
    }
    (void)snprintf(q->tenant, sizeof(q->tenant), "%s", recs[0].tenant); /* the admin's: whose */
    q->in_store = true;
    snapstore_delete(q->sn->store, q->id, on_delete_bytes, q);
}

int
snapshots_delete(struct snapshots *sn, const char *tenant, const char *id, const char *actor,
                 snapshots_done_cb *cb, void *userdata, struct err *reterr)
{
    struct req *q;

    if (!store_snapshot_valid_id(id)) {
        return err_set(reterr, -ENOENT, "no such snapshot");
    }
    q = req_new(sn, tenant, id, userdata);
    q->done_cb = cb;
    (void)snprintf(q->actor, sizeof(q->actor), "%s", actor);
    if (store_snapshots_get(sn->records, id, on_delete_lookup, q) < 0) {
        req_free(q);
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    return 0;
}

void
records_remove(struct snapshots *sn, const char *id)
{
    struct req *q = req_new(sn, NULL, id, NULL);

    q->in_store = true;
    snapstore_delete(sn->store, q->id, on_delete_bytes, q); /* then the record (the sweep's way) */
}

/* ---- retention ------------------------------------------------------------------------------- */

static void
on_expired(int r, const struct store_snapshot_rec *recs, size_t n, void *userdata)
{
    struct req *sweep = userdata;
    struct snapshots *sn = sweep->sn;

    if (req_orphaned(sweep)) {
        return;
    }
    req_free(sweep);
    for (size_t i = 0; r == 0 && i < n; i++) {
        sn->stats.expired_total++;
        log_info("snapshot %s of tenant '%s' goes: %s", recs[i].id, recs[i].tenant,
                 recs[i].state != STORE_SNAPSHOT_READY ? "its write never completed"
                 : recs[i].hibernation                 ? "its session woke or ended"
                                                       : "its retention ended");
        snapshots_audit(
            sn, &(struct snapshot_audit){.action = "snapshot.deleted",
                                         .actor = "daemon",
                                         .tenant = recs[i].tenant,
                                         .snapshot = recs[i].id,
                                         .why = recs[i].state != STORE_SNAPSHOT_READY ? "incomplete"
                                                : recs[i].hibernation ? "hibernation_over"
                                                                      : "retention"});
        records_remove(sn, recs[i].id);
    }
}

void
snapshots_tick(struct snapshots *sn)
{
    struct req *q;

    if (sn == NULL || sn->sweep != NULL || !store_redis_is_up(sn->redis)) {
        return;
    }
    q = req_new(sn, NULL, NULL, NULL);
    if (store_snapshots_expired(sn->records, time_wall_ms(), SNAPSHOT_SWEEP_BATCH, on_expired, q) <
        0) {
        req_free(q);
        return;
    }
    sn->sweep = q;
}

void
snapshots_set_audit(struct snapshots *sn, snapshot_audit_cb *cb, void *userdata)
{
    sn->audit = cb;
    sn->audit_userdata = userdata;
}

void
snapshots_audit(const struct snapshots *sn, const struct snapshot_audit *a)
{
    if (sn->audit != NULL) {
        sn->audit(a, sn->audit_userdata);
    }
}
