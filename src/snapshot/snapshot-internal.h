/* The snapshot service's own declarations, shared by snapshot.c (the service, records, takes)
 * and restore.c (restores). Nothing else includes it. */
#pragma once

#include <openssl/evp.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "snapshot/snapshot.h"
#include "snapshot/store.h"
#include "store/snapshots.h"

#define SNAPSHOT_WRITE_DEADLINE_MS 3600000ull /* a take not ready by then was a crash's */
#define SNAPSHOT_LIST_MAX          1000u
#define SNAPSHOT_SWEEP_BATCH       16u

struct snapshots {
    struct event_base *base;          /* borrowed */
    const struct cfg *cfg;            /* borrowed */
    struct store_redis *redis;        /* borrowed */
    struct docker_client *engine;     /* borrowed */
    struct session_manager *sessions; /* borrowed */
    struct snapstore *store;
    struct store_snapshots *records;
    TAILQ_HEAD(, snapshot_job) jobs;
    TAILQ_HEAD(, snapshot_req) reqs; /* get, list, delete and the sweep's deletes (records.c) */
    struct snapshot_req *sweep;      /* the sweep's query in flight */
    struct snapshots_stats stats;
    snapshot_audit_cb *audit; /* NULL: nothing reported */
    void *audit_userdata;
};
/* Reports a to the installed audit callback, if any. */
void snapshots_audit(const struct snapshots *sn, const struct snapshot_audit *a);

/* What a job is doing; the one writer is job_set() (snapshot.c). */
enum job_step {
    JOB_BEGIN,   /* take: its writing record is being written */
    JOB_SAVE,    /* take: the kernel saves its globals */
    JOB_TAR,     /* take: the tar streams into the store */
    JOB_FINISH,  /* take: the store completes the object */
    JOB_COMMIT,  /* take: the record turns ready (quota) */
    JOB_LOOKUP,  /* restore: its record is read */
    JOB_UNTAR,   /* restore: the tar streams from the store into the sandbox */
    JOB_RESTORE, /* restore: the kernel loads the globals */
    JOB_ORPHAN,  /* the service was freed: waits for its Redis answer, then goes */
};

struct snapshot_job {
    TAILQ_ENTRY(snapshot_job) link;
    struct snapshots *sn;
    enum job_step step;
    char session[65], tenant[65], actor[80];
    struct store_snapshot_rec rec;
    json_t *manifest;       /* the kernel's report */
    struct execution *x;    /* the save or the restore running */
    struct files_op *files; /* the tar or the untar */
    struct snapstore_put *put;
    struct snapstore_get *get;
    EVP_MD_CTX *sha;
    uint64_t bytes;
    bool begun;   /* take: its record exists (a failure deletes it) */
    bool got_all; /* restore: every byte came from the store */
    bool used;    /* counted in its session's uses */
    int data_err; /* a failure found while bytes flowed */
    snapshots_json_cb *cb;
    void *userdata;
};

struct snapshot_job *job_new(struct snapshots *sn, struct session *s, enum job_step step,
                             snapshots_json_cb *cb, void *userdata);
void job_set(struct snapshot_job *j, enum job_step step);
/* Cancels what the job has in flight (its execution goes on, detached). */
void job_stop_work(struct snapshot_job *j);
/* The report of a save or restore that ended well (a new reference, read from x's typed result
 * during on_done), or NULL with why[] saying what the sandbox answered. */
json_t *job_report(struct execution *x, char *why, size_t n);
/* Answers the job's caller (r < 0: msg says why; ok: the JSON, stolen) and frees it. */
void job_end(struct snapshot_job *j, int r, json_t *ok, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The job's session, if it still exists. */
struct session *job_session(const struct snapshot_job *j);
/* The files target of the job's session; false when it is gone. */
struct files_target;
bool job_target(const struct snapshot_job *j, struct files_target *ret);
/* The lowercase hex SHA-256 of what the job's digest took. */
void job_sha_hex(struct snapshot_job *j, char out[65]);
/* A store error as the API answers it: an outage (-ENOTCONN, 503 + Retry-After). */
int job_store_errno(int r);
/* Whether the service's Redis answer may still come for this job (ORPHAN handling). */
bool job_orphaned(struct snapshot_job *j);

/* Removes a snapshot as the sweep does: its bytes, then (once they are gone) its record; a crash
 * in between leaves the record for the sweep (records.c). */
void records_remove(struct snapshots *sn, const char *id);

/* The API object of a record (snapshot.h). */
json_t *snapshot_rec_json(const struct store_snapshot_rec *rec);
