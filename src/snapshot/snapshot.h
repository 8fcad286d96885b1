/* Snapshots of sessions (docs/hibernate.md): taking one of a live session (the kernel saves its
 * globals, the files helper tars them with the workspace, the tar streams into the store while
 * its SHA-256 is computed), restoring one into a fresh session (the tar streams back from the
 * store into the files helper, its SHA-256 checked before its end is sent, then the kernel
 * loads the globals), and the records (store/snapshots.h). Unpickling happens only inside the
 * sandbox; the daemon only moves bytes and checks their hash.
 *
 * A take is crash-only: its record is written "writing" with a deadline before a byte moves, the
 * bytes go to the store under a temporary name, and the record turns "ready" (with the tenant's
 * quota checked in the same script) only once they are complete; any failure removes both, and
 * the sweep (snapshots_tick()) removes what a crash left (a writing record past its deadline, a
 * ready one past its retention: bytes first, then the record).
 *
 * Callbacks never run from inside the call that started the work. Loop context only. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

struct cfg;
struct docker_client;
struct event_base;
struct session;
struct session_manager;
struct store_redis;
struct snapshots;

typedef struct json_t json_t;

/* NULL without error when cfg's snapshots.store is "" (off); NULL with reterr set when the store
 * cannot work (a dir that cannot be made, an s3 store without bucket). Everything borrowed. */
struct snapshots *snapshots_new(struct event_base *base, const struct cfg *cfg,
                                struct store_redis *redis, struct docker_client *engine,
                                struct session_manager *sessions, struct err *reterr);
/* Cancels what is in flight (no callbacks); records and bytes of takes in flight stay for the
 * sweep. */
struct snapshots *snapshots_free(struct snapshots *sn);
/* What the module reports for the audit log (it writes none itself: the server does,
 * server/session-audit.c). Strings borrowed for the call. */
struct snapshot_audit {
    const char *action; /* "snapshot.created", "snapshot.deleted" */
    const char *actor;  /* "tenant:<id>", "admin" or "daemon" */
    const char *tenant, *snapshot;
    const char *session, *sha256; /* created only */
    uint64_t size;                /* created only */
    const char *why;              /* the daemon's deletes: "incomplete", "hibernation_over", ... */
};
typedef void snapshot_audit_cb(const struct snapshot_audit *a, void *userdata);
/* Installs the audit reporter (NULL: none). */
void snapshots_set_audit(struct snapshots *sn, snapshot_audit_cb *cb, void *userdata);

/* Retention: removes up to a batch of ended snapshots. */
void snapshots_tick(struct snapshots *sn);

/* The API object of a snapshot record: {id, session, size, sha256, created_at, expires_at,
 * variables, skipped, modules}. */
typedef void snapshots_json_cb(int r, json_t *snapshot, const struct err *e, void *userdata);
typedef void snapshots_list_cb(int r, json_t *snapshots, const struct err *e, void *userdata);
typedef void snapshots_done_cb(int r, const struct err *e, void *userdata);

/* Takes a snapshot of s (live: resumed by the caller; no execution running): cb(0, the
 * snapshot) once it is ready, or r < 0: -EBUSY (an execution runs), -EDQUOT (the tenant's quota,
 * named), -EMSGSIZE (over snapshots.max_bytes), -ENOTCONN/-EIO/-ETIMEDOUT (Redis or the store
 * is down: nothing kept), -EPIPE (the sandbox went). cb runs exactly once, also when s ends
 * meanwhile. A take whose caller left runs on to its end. Returns -ENOTCONN (Redis down) with no
 * callback. actor: the audit line's. */
int snapshots_take(struct snapshots *sn, struct session *s, const char *actor,
                   snapshots_json_cb *cb, void *userdata, struct err *reterr);
/* Restores snapshot id of tenant into s (a fresh session of the tenant): cb(0, the restored
 * object {"from", "variables", "skipped"}) or r < 0: -ENOENT (no such snapshot of this tenant),
 * -EBADMSG (its bytes are missing or differ from their SHA-256: snapshot_lost), -EPIPE, -EIO...
 * The session is left as it is either way (the caller ends it on a failure). */
int snapshots_restore(struct snapshots *sn, struct session *s, const char *id,
                      snapshots_json_cb *cb, void *userdata, struct err *reterr);

/* Hibernation (docs/hibernate.md): a take whose snapshot is the session's own (never listed,
 * never refused by the tenant's quota, kept with the write deadline until the session's record
 * names it), and its restore into the woken session (only the session it was taken of; a fork's
 * restore never reads one). Contracts as snapshots_take() and snapshots_restore(). */
int snapshots_hibernate(struct snapshots *sn, struct session *s, snapshots_json_cb *cb,
                        void *userdata, struct err *reterr);
int snapshots_wake(struct snapshots *sn, struct session *s, const char *id, snapshots_json_cb *cb,
                   void *userdata, struct err *reterr);
/* No more callbacks for the jobs of this session (it went); a hibernation's take in flight is
 * abandoned: its bytes and record go. */
void snapshots_forget(struct snapshots *sn, const char *session);

/* The tenant's snapshot id (-ENOENT for another tenant's). */
int snapshots_get(struct snapshots *sn, const char *tenant, const char *id, snapshots_json_cb *cb,
                  void *userdata, struct err *reterr);
/* The tenant's snapshots, newest first (at most 1000), and what they count towards its quota:
 * {"snapshots": [...], "bytes": n (its hibernations' included), "quota_bytes": n or null}. */
int snapshots_list(struct snapshots *sn, const char *tenant, snapshots_list_cb *cb, void *userdata,
                   struct err *reterr);
/* The admin's view of tenants[0..n) (n >= 1), one Redis call a tenant: {"snapshots": [the newest
 * 1000 of them all, each with its "tenant"], "tenants": [{"tenant", "snapshots" (how many),
 * "bytes", "quota_bytes"}], "truncated": bool}. */
int snapshots_admin_list(struct snapshots *sn, const char *const *tenants, size_t n,
                         snapshots_list_cb *cb, void *userdata, struct err *reterr);
/* Deletes the tenant's snapshot (its bytes, then its record); tenant NULL: the admin's, any
 * tenant's (-EBUSY for a hibernated session's, which only ends with its session). actor: the
 * audit line's. */
int snapshots_delete(struct snapshots *sn, const char *tenant, const char *id, const char *actor,
                     snapshots_done_cb *cb, void *userdata, struct err *reterr);

struct snapshots_stats {
    uint64_t taken_total, restored_total, failed_total, deleted_total, expired_total;
    uint64_t bytes_written, bytes_read;
    unsigned inflight;
};
void snapshots_get_stats(const struct snapshots *sn, struct snapshots_stats *ret);
