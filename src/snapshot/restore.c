/* Restoring a snapshot into a fresh session (snapshot.h): its record is read (the tenant's, and
 * ready), the untar helper is started, the tar streams from the store into it with backpressure
 * both ways while its SHA-256 and size are computed, and only when both match the record is the
 * end frame sent (a mismatch cuts the stream: the helper keeps nothing it had not finished, and
 * the caller ends the session: never a half-restored sandbox presented as whole). Then the kernel
 * loads the globals, inside the sandbox. */
#define LOG_MODULE "snapshot"
#include <errno.h>
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

static void on_restored(struct execution *x, void *userdata);

static const struct exec_observer restore_observer = {.on_done = on_restored};

/* {"from", "variables": [names], "skipped"} of the kernel's restore report. */
static json_t *
restored_json(const char *from, const json_t *report)
{
    json_t *names = OOM_CHECK(json_array());
    json_t *skipped = json_object_get(report, "skipped");
    json_t *v;
    size_t i;

    json_array_foreach (json_object_get(report, "variables"), i, v) {
        json_t *name = json_object_get(v, "name");

        if (json_is_string(name)) {
            (void)json_array_append(names, name);
        }
    }
    return OOM_CHECK(
        json_pack("{s:s, s:o, s:o}", "from", from, "variables", names, "skipped",
                  json_is_array(skipped) ? json_incref(skipped) : OOM_CHECK(json_array())));
}

static void
on_restored(struct execution *x, void *userdata)
{
    struct snapshot_job *j = userdata;
    char why[256];
    json_t *report = job_report(x, why, sizeof(why));

    j->x = NULL;
    if (report == NULL) {
        job_end(j, -EBADMSG, NULL, "the sandbox could not load the snapshot's variables (%s)", why);
        return;
    }
    j->sn->stats.restored_total++;
    j->sn->stats.bytes_read += j->bytes;
    log_info("snapshot %s restored into session=%s", j->rec.id, j->session);
    job_end(j, 0, restored_json(j->rec.id, report), "ok");
    json_decref(report);
}

static void
on_untarred(int r, json_t *result, const struct err *e, void *userdata)
{
    struct snapshot_job *j = userdata;
    struct session *s;
    struct exec_req req = {.code = "", .internal = true};
    struct kernel_exec_opts o = {.snapshot = "restore"};
    struct err e2 = {0};

    j->files = NULL;
    if (r < 0) {
        job_end(j, r == -EBADMSG || r == -EMSGSIZE ? -EBADMSG : r, NULL,
                "the snapshot could not be unpacked in the sandbox: %s", e ? e->msg : strerror(-r));
        return;
    }
    s = job_session(j);
    if (s == NULL) {
        job_end(j, -EPIPE, NULL, "the session ended during its restore");
        return;
    }
    job_set(j, JOB_RESTORE);
    req.opts = &o;
    if (session_execute(s, &req, &restore_observer, j, false, &j->x, &e2) < 0) {
        job_end(j, e2.code, NULL, "%s", e2.msg);
    }
}

static void
on_get_data(const void *data, size_t len, void *userdata)
{
    struct snapshot_job *j = userdata;

    j->bytes += len;
    if (j->bytes > j->rec.size) {
        j->data_err = -EBADMSG;
    } else if (files_put_write(j->files, data, len) < 0) {
        j->data_err = -EPIPE;
    }
    if (j->data_err < 0) {
        snapstore_get_cancel(j->get);
        j->get = NULL;
        job_end(j, j->data_err, NULL, "%s",
                j->data_err == -EBADMSG ? "the snapshot's bytes are longer than its record says"
                                        : "the sandbox stopped taking the snapshot");
        return;
    }
    if (EVP_DigestUpdate(j->sha, data, len) != 1) {
        oom();
    }
    if (files_put_congested(j->files)) {
        snapstore_get_pause(j->get, true);
    }
}

static void
on_get_done(int r, uint64_t total, const struct err *e, void *userdata)
{
    struct snapshot_job *j = userdata;
    char hex[65];

    j->get = NULL;
    if (r == -ENOENT) {
        job_end(j, -EBADMSG, NULL, "the snapshot's bytes are missing from the store");
        return;
    }
    if (r < 0) {
        job_end(j, job_store_errno(r), NULL, "the snapshot store failed: %s",
                e ? e->msg : strerror(-r));
        return;
    }
    job_sha_hex(j, hex);
    if (total != j->rec.size || strcmp(hex, j->rec.sha256) != 0) {
        job_end(j, -EBADMSG, NULL,
                "the snapshot's bytes differ from their record (%llu bytes, sha256 %.12s...; "
                "recorded %llu, %.12s...)",
                (unsigned long long)total, hex, (unsigned long long)j->rec.size, j->rec.sha256);
        return;
    }
    j->got_all = true;
    files_put_end(j->files); /* only now: the helper's end frame */
}

static void
on_untar_ready(void *userdata)
{
    struct snapshot_job *j = userdata;

    j->get = snapstore_get_begin(j->sn->store, j->rec.id, on_get_data, on_get_done, j);
}

static void
on_untar_writable(void *userdata)
{
    struct snapshot_job *j = userdata;

    if (j->get != NULL) {
        snapstore_get_pause(j->get, false);
    }
}

static const struct files_put_io untar_io = {
    .on_ready = on_untar_ready,
    .on_writable = on_untar_writable,
};

static void
on_looked_up(int r, const struct store_snapshot_rec *recs, size_t n, void *userdata)
{
    struct snapshot_job *j = userdata;
    struct files_target ft;

    if (job_orphaned(j)) {
        return;
    }
    if (r < 0) {
        job_end(j, r, NULL, "redis is unavailable");
        return;
    }
    /* A hibernation's snapshot is its session's alone, and only ever restored into it. */
    if (n == 0 || strcmp(recs[0].tenant, j->tenant) != 0 || recs[0].state != STORE_SNAPSHOT_READY ||
        recs[0].hibernation != j->rec.hibernation ||
        (j->rec.hibernation && strcmp(recs[0].session, j->session) != 0)) {
        job_end(j, -ENOENT, NULL, "no such snapshot");
        return;
    }
    store_snapshot_rec_done(&j->rec);
    j->rec = recs[0];
    j->rec.manifest = xstrdup(recs[0].manifest != NULL ? recs[0].manifest : "{}");
    if (!job_target(j, &ft)) {
        job_end(j, -EPIPE, NULL, "the session ended during its restore");
        return;
    }
    job_set(j, JOB_UNTAR);
    j->files = files_untar(&ft, j->sn->cfg->snapshots_max_bytes, &untar_io, on_untarred, j);
}

static int
restore_start(struct snapshots *sn, struct session *s, const char *id, bool hibernation,
              snapshots_json_cb *cb, void *userdata, struct err *reterr)
{
    struct snapshot_job *j;

    if (!store_snapshot_valid_id(id)) {
        return err_set(reterr, -ENOENT, "no such snapshot");
    }
    if (!store_redis_is_up(sn->redis)) {
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    j = job_new(sn, s, JOB_LOOKUP, cb, userdata);
    (void)snprintf(j->rec.id, sizeof(j->rec.id), "%s", id);
    j->rec.hibernation = hibernation;
    if (store_snapshots_get(sn->records, id, on_looked_up, j) < 0) {
        j->cb = NULL;
        job_end(j, -ENOTCONN, NULL, "redis is unavailable");
        return err_set(reterr, -ENOTCONN, "redis is unavailable");
    }
    return 0;
}

int
snapshots_restore(struct snapshots *sn, struct session *s, const char *id, snapshots_json_cb *cb,
                  void *userdata, struct err *reterr)
{
    return restore_start(sn, s, id, false, cb, userdata, reterr);
}

int
snapshots_wake(struct snapshots *sn, struct session *s, const char *id, snapshots_json_cb *cb,
               void *userdata, struct err *reterr)
{
    return restore_start(sn, s, id, true, cb, userdata, reterr);
}
