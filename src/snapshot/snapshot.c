/* The snapshot service: the store and the records, the jobs, takes, get/list/delete and the
 * retention sweep; see snapshot.h. Restores are restore.c's. */
#define LOG_MODULE "snapshot"
#include "snapshot/snapshot.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "config/config.h"
#include "files/files.h"
#include "kernel/proto.h"
#include "log/log.h"
#include "session/session.h"
#include "snapshot/snapshot-internal.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/time.h"

/* ---- jobs ------------------------------------------------------------------------------------ */

struct snapshot_job *
job_new(struct snapshots *sn, struct session *s, enum job_step step, snapshots_json_cb *cb,
        void *userdata)
{
    struct snapshot_job *j = xcalloc(1, sizeof(*j));

    j->sn = sn;
    j->step = step;
    (void)snprintf(j->session, sizeof(j->session), "%s", session_id(s));
    (void)snprintf(j->tenant, sizeof(j->tenant), "%s", session_tenant(s));
    j->sha = EVP_MD_CTX_new();
    if (j->sha == NULL || EVP_DigestInit_ex(j->sha, EVP_sha256(), NULL) != 1) {
        oom();
    }
    j->cb = cb;
    j->userdata = userdata;
    session_use(s); /* no pause while its container is in use */
    j->used = true;
    TAILQ_INSERT_TAIL(&sn->jobs, j, link);
    sn->stats.inflight++;
    return j;
}

void
job_set(struct snapshot_job *j, enum job_step step)
{
    log_debug("snapshot job session=%s step %d -> %d", j->session, (int)j->step, (int)step);
    j->step = step;
}

struct session *
job_session(const struct snapshot_job *j)
{
    return j->sn != NULL ? session_find(j->sn->sessions, j->tenant, j->session) : NULL;
}

bool
job_target(const struct snapshot_job *j, struct files_target *ret)
{
    struct session *s = job_session(j);

    if (s == NULL || session_container(s) == NULL || session_user(s) == NULL) {
        return false;
    }
    *ret = (struct files_target){
        .engine = j->sn->engine, .container = session_container(s), .user = session_user(s)};
    return true;
}

void
job_sha_hex(struct snapshot_job *j, char out[65])
{
    unsigned char md[32];
    unsigned int n = 0;

    if (EVP_DigestFinal_ex(j->sha, md, &n) != 1 || n != sizeof(md)) {
        oom();
    }
    for (size_t i = 0; i < sizeof(md); i++) {
        (void)snprintf(out + 2 * i, 3, "%02x", md[i]);
    }
}

int
job_store_errno(int r)
{
    /* The store's failures are an outage for the API (503 with Retry-After), never a lost
     * session: what was there stays. */
    return r == -ENOENT || r == -EMSGSIZE ? r : -ENOTCONN;
}

bool
job_orphaned(struct snapshot_job *j)
{
    if (j->step != JOB_ORPHAN) {
        return false;
    }
    store_snapshot_rec_done(&j->rec);
    json_decref(j->manifest);
    EVP_MD_CTX_free(j->sha);
    free(j);
    return true;
}

void
job_stop_work(struct snapshot_job *j)
{
    if (j->x != NULL) {
        execution_detach(j->x);
    }
    files_cancel(j->files);
    if (j->put != NULL) {
        snapstore_put_abort(j->put);
    }
    if (j->get != NULL) {
        snapstore_get_cancel(j->get);
    }
    j->x = NULL;
    j->files = NULL;
    j->put = NULL;
    j->get = NULL;
}

static void
job_free(struct snapshot_job *j)
{
    job_stop_work(j);
    if (j->used && j->sn != NULL) {
        session_unuse(j->sn->sessions, j->session);
    }
    if (j->sn != NULL) {
        TAILQ_REMOVE(&j->sn->jobs, j, link);
        j->sn->stats.inflight--;
    }
    store_snapshot_rec_done(&j->rec);
    json_decref(j->manifest);
    EVP_MD_CTX_free(j->sha);
    free(j);
}

void
job_end(struct snapshot_job *j, int r, json_t *ok, const char *fmt, ...)
{
    struct err e = {0};
    va_list ap;

    if (r < 0) {
        va_start(ap, fmt);
        (void)vsnprintf(e.msg, sizeof(e.msg), fmt, ap);
        va_end(ap);
        e.code = r;
        j->sn->stats.failed_total++;
        log_warn("snapshot %s of session=%s failed: %s", j->rec.id[0] ? j->rec.id : "-", j->session,
                 e.msg);
    }
    if (r < 0 && j->begun) {
        if (j->put != NULL) {
            snapstore_put_abort(j->put);
            j->put = NULL;
        }
        records_remove(j->sn, j->rec.id); /* bytes, then the record: never bytes without one */
    }
    if (j->cb != NULL) {
        j->cb(r, ok, r < 0 ? &e : NULL, j->userdata);
    }
    json_decref(ok);
    job_free(j);
}

/* ---- the API object -------------------------------------------------------------------------- */

static json_t *
time_json(uint64_t ms)
{
    char t[32];

    return ms == 0 ? json_null() : OOM_CHECK(json_string(time_rfc3339(ms, t, sizeof(t))));
}

json_t *
snapshot_rec_json(const struct store_snapshot_rec *rec)
{
    json_t *m = json_loads(rec->manifest ? rec->manifest : "{}", 0, NULL);
    json_t *o = OOM_CHECK(json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", rec->id, "session",
                                    rec->session, "size", (json_int_t)rec->size, "sha256",
                                    rec->sha256, "created_at", time_json(rec->created_at),
                                    "expires_at", time_json(rec->expires_at)));
    static const char *const keys[] = {"variables", "skipped", "modules"};

    for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
        json_t *v = json_object_get(m, keys[i]);

        (void)json_object_set_new(o, keys[i],
                                  json_is_array(v) ? json_incref(v) : OOM_CHECK(json_array()));
    }
    json_decref(m);
    return o;
}

/* ---- take ------------------------------------------------------------------------------------ */

static void on_saved(struct execution *x, void *userdata);

static const struct exec_observer save_observer = {.on_done = on_saved};

static void
on_committed(int r, void *userdata)
{
    struct snapshot_job *j = userdata;

    if (job_orphaned(j)) {
        return;
    }
    if (r == -EDQUOT) {
        job_end(j, r, NULL,
                "tenant '%s' is over snapshots.max_bytes_per_tenant (%llu bytes) with this "
                "snapshot of %llu bytes: delete snapshots, or end hibernated sessions",
                j->tenant, (unsigned long long)j->sn->cfg->snapshots_max_bytes_per_tenant,
                (unsigned long long)j->rec.size);
        return;
    }
    if (r < 0) {
        job_end(j, r == -ENOENT ? -EIO : r, NULL, "the snapshot's record could not be completed");
        return;
    }
    if (j->rec.hibernation && j->cb == NULL) {
        job_end(j, -ECANCELED, NULL, "its session went before it hibernated");
        return; /* begun still: its bytes and record go */
    }
    j->begun = false; /* it is the tenant's now */
    j->rec.state = STORE_SNAPSHOT_READY;
    j->sn->stats.taken_total++;
    j->sn->stats.bytes_written += j->rec.size;
    if (j->rec.hibernation) { /* its session's audit line says it */
        log_info("snapshot %s of session=%s taken for its hibernation: %llu bytes", j->rec.id,
                 j->session, (unsigned long long)j->rec.size);
        job_end(j, 0, snapshot_rec_json(&j->rec), "ok");
        return;
    }
    snapshots_audit(j->sn, &(struct snapshot_audit){.action = "snapshot.created",
                                                    .actor = j->actor,
                                                    .tenant = j->tenant,
                                                    .session = j->session,
                                                    .snapshot = j->rec.id,
                                                    .size = j->rec.size,
                                                    .sha256 = j->rec.sha256});
    log_info("snapshot %s of session=%s taken: %llu bytes", j->rec.id, j->session,
             (unsigned long long)j->rec.size);
    job_end(j, 0, snapshot_rec_json(&j->rec), "ok");
}

static void
on_put_done(int r, const struct err *e, void *userdata)
{
    struct snapshot_job *j = userdata;
    char *text;

    j->put = NULL;
    if (r < 0) {
        job_end(j, job_store_errno(r), NULL, "the snapshot store failed: %s",
                e ? e->msg : strerror(-r));
        return;
    }
    if (j->rec.hibernation && j->cb == NULL) {
        job_end(j, -ECANCELED, NULL, "its session went before it hibernated");
        return;
    }
    j->rec.size = j->bytes;
    job_sha_hex(j, j->rec.sha256);
    /* A hibernation's keeps the write deadline until its session names it (then it has none: it
     * goes with the session), so that a crash in between leaves nothing for long. */
    j->rec.expires_at =
        time_wall_ms() + (j->rec.hibernation ? SNAPSHOT_WRITE_DEADLINE_MS
                                             : (uint64_t)j->sn->cfg->snapshots_retention_s * 1000u);
    text = json_dumps(j->manifest, JSON_COMPACT);
    free(j->rec.manifest);
    j->rec.manifest =
        text != NULL && strlen(text) <= STORE_SNAPSHOT_MANIFEST_MAX ? text : xstrdup("{}");
    if (j->rec.manifest != text) {
        free(text);
    }
    job_set(j, JOB_COMMIT);
    /* A hibernation's bytes count like any snapshot's: without the quota, hibernating filled the
     * store every tenant's hibernation depends on. */
    if (store_snapshots_commit(j->sn->records, &j->rec, j->sn->cfg->snapshots_max_bytes_per_tenant,
                               on_committed, j) < 0) {
        job_end(j, -ENOTCONN, NULL, "redis is unavailable");
    }
}

static int
on_tar_data(const char *data, size_t n, void *userdata)
{
    struct snapshot_job *j = userdata;
    int r;

    j->bytes += n;
    if (j->bytes > j->sn->cfg->snapshots_max_bytes) {
        j->data_err = -EMSGSIZE;
        return -EMSGSIZE;
    }
    if (EVP_DigestUpdate(j->sha, data, n) != 1) {
        oom();
    }
    r = snapstore_put_write(j->put, data, n);
    if (r < 0) {
        j->data_err = r;
        return r;
    }
    if (r == 1) {
        files_pause(j->files, true);
    }
    return 0;
}

static void
on_put_drained(void *userdata)
{
    struct snapshot_job *j = userdata;

    if (j->files != NULL) {
        files_pause(j->files, false);
    }
}

static const struct files_get_io tar_io = {.on_data = on_tar_data};

static void
on_tarred(int r, json_t *result, const struct err *e, void *userdata)
{
    struct snapshot_job *j = userdata;

    j->files = NULL;
    if (j->data_err == -EMSGSIZE) {
        job_end(j, -EMSGSIZE, NULL, "the snapshot is larger than snapshots.max_bytes (%llu)",
                (unsigned long long)j->sn->cfg->snapshots_max_bytes);
        return;
    }
    if (r < 0 || j->data_err < 0) {
        job_end(j, j->data_err < 0 ? job_store_errno(j->data_err) : r, NULL,
                "the workspace could not be archived: %s",
                e ? e->msg : strerror(-(j->data_err < 0 ? j->data_err : r)));
        return;
    }
    job_set(j, JOB_FINISH);
    snapstore_put_finish(j->put, on_put_done, j);
}

json_t *
job_report(struct execution *x, char *why, size_t n)
{
    struct execution_result *res = execution_result_new(x);
    json_t *report = NULL;

    if (res->status == SESSION_EXEC_OK && json_is_object(res->snapshot)) {
        report = json_incref(res->snapshot);
    } else {
        const char *status = session_exec_status_to_string(res->status);

        (void)snprintf(why, n, "%s: %s", status ? status : "?",
                       res->has_error ? res->error.value : "no report");
    }
    execution_result_free(res);
    return report;
}

static void
on_saved(struct execution *x, void *userdata)
{
    struct snapshot_job *j = userdata;
    char why[256];
    json_t *report = job_report(x, why, sizeof(why));
    struct files_target ft;

    j->x = NULL;
    if (report == NULL) {
        job_end(j, -EIO, NULL, "the sandbox could not save its variables (%s)", why);
        return;
    }
    j->manifest = report;
    if (!job_target(j, &ft)) {
        job_end(j, -EPIPE, NULL, "the session ended during its snapshot");
        return;
    }
    job_set(j, JOB_TAR);
    j->put = snapstore_put_begin(j->sn->store, j->rec.id, on_put_drained, j);
    j->files = files_tar(&ft, &tar_io, on_tarred, j);
}

static void
on_begun(int r, void *userdata)
{
    struct snapshot_job *j = userdata;
    struct session *s;
    struct exec_req req = {.code = "", .internal = true};
    struct kernel_exec_opts o = {.snapshot = "save"};
    struct err e = {0};

    if (job_orphaned(j)) {
        return;
    }
    if (r == -EDQUOT) {
        job_end(j, r, NULL,
                "tenant '%s' is at snapshots.max_bytes_per_tenant (%llu bytes): delete "
                "snapshots, or end hibernated sessions",
                j->tenant, (unsigned long long)j->sn->cfg->snapshots_max_bytes_per_tenant);
        return;
    }
    if (r < 0) {
        job_end(j, r == -EEXIST ? -EIO : r, NULL, "the snapshot's record could not be written");
        return;
    }
    j->begun = true;
    s = job_session(j);
    if (s == NULL) {
        job_end(j, -EPIPE, NULL, "the session ended during its snapshot");
        return;
    }
    job_set(j, JOB_SAVE);
    req.opts = &o;
    req.actor = j->actor;
    if (session_execute(s, &req, &save_observer, j, false, &j->x, &e) < 0) {
        job_end(j, e.code, NULL, "%s", e.msg);
    }
}

static int
take_start(struct snapshots *sn, struct session *s, const char *actor, bool hibernation,
           snapshots_json_cb *cb, void *userdata, struct err *reterr)
{
    struct snapshot_job *j;

    TAILQ_FOREACH (j, &sn->jobs, link) {
        if (strcmp(j->session, session_id(s)) == 0) {
            return err_set(reterr, -EBUSY, "a snapshot of this session is being taken");
        }
    }
    if (!store_redis_is_up(sn->redis)) {
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    j = job_new(sn, s, JOB_BEGIN, cb, userdata);
    (void)snprintf(j->actor, sizeof(j->actor), "%s", actor);
    random_hex(j->rec.id, STORE_SNAPSHOT_ID_LEN / 2); /* 128 bits */
    (void)snprintf(j->rec.tenant, sizeof(j->rec.tenant), "%s", j->tenant);
    (void)snprintf(j->rec.session, sizeof(j->rec.session), "%s", j->session);
    j->rec.created_at = time_wall_ms();
    j->rec.expires_at = j->rec.created_at + SNAPSHOT_WRITE_DEADLINE_MS;
    j->rec.hibernation = hibernation;
    if (store_snapshots_begin(sn->records, &j->rec, sn->cfg->snapshots_max_bytes_per_tenant,
                              on_begun, j) < 0) {
        job_free(j);
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    return 0;
}

int
snapshots_take(struct snapshots *sn, struct session *s, const char *actor, snapshots_json_cb *cb,
               void *userdata, struct err *reterr)
{
    return take_start(sn, s, actor, false, cb, userdata, reterr);
}

int
snapshots_hibernate(struct snapshots *sn, struct session *s, snapshots_json_cb *cb, void *userdata,
                    struct err *reterr)
{
    return take_start(sn, s, "daemon", true, cb, userdata, reterr);
}

void
snapshots_forget(struct snapshots *sn, const char *session)
{
    struct snapshot_job *j;

    TAILQ_FOREACH (j, &sn->jobs, link) {
        if (strcmp(j->session, session) == 0) {
            j->cb = NULL;
        }
    }
}
