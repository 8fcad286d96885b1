/* Snapshot records in Redis (the bytes are in the snapshot store, snapshot/store.h): who owns a
 * snapshot, its size, SHA-256, manifest and end of retention, and each tenant's byte count for
 * its quota. Keys (P = redis.prefix):
 *
 *   P snapshot:ID               hash: the record (fields below)
 *   P tenant:T:snapshots        zset: ID -> created_at, the tenant's snapshots (listing; not
 *                               the hibernations')
 *   P tenant:T:snapshot_bytes   string: what its ready snapshots count (quota: size + manifest)
 *   P snapshots:expiry          zset: ID -> when it goes (ms), every record with an end: a
 *                               writing one's is its deadline, a ready one's its retention
 *
 * Crash-only: a record is written "writing" (with a deadline) before a byte goes to the store and
 * "ready" once the bytes are complete (atomically with the quota check); a writing record whose
 * deadline passed is a crashed write: the sweep removes its bytes, then its record. Every
 * operation is one Lua script; contract as store/sessions.h (0 and one later callback, or a
 * negative errno and none). Pure: store_snapshot_parse() is fuzzed. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/redis.h"

#define STORE_SNAPSHOT_ID_LEN       32
#define STORE_SNAPSHOT_MANIFEST_MAX (256u << 10) /* the manifest's JSON text, at most */

enum store_snapshot_state {
    STORE_SNAPSHOT_WRITING,
    STORE_SNAPSHOT_READY,
    STORE_SNAPSHOT__COUNT,
};

struct store_snapshot_rec {
    char id[STORE_SNAPSHOT_ID_LEN + 1];
    char tenant[65];
    char session[65]; /* the session it was taken of */
    enum store_snapshot_state state;
    uint64_t size;
    char sha256[65];                 /* lowercase hex; "" while writing */
    uint64_t created_at, expires_at; /* wall-clock ms; expires_at 0: kept until deleted */
    char *manifest;                  /* JSON object text (malloc'd; "{}" while writing) */
    /* A hibernated session's (docs/hibernate.md): not listed, not the tenant's to get, delete or
     * fork; counted in its bytes, never refused by its quota. Optional in Redis ("1"). */
    bool hibernation;
};

void store_snapshot_rec_done(struct store_snapshot_rec *rec);
/* Fills rec from HGETALL's field/value pairs: -EPROTO when a required field is missing or
 * malformed (rec untouched). rec->manifest is malloc'd (store_snapshot_rec_done()). */
int store_snapshot_parse(const char *const *kv, const size_t *lens, size_t n,
                         struct store_snapshot_rec *rec);
bool store_snapshot_valid_id(const char *id);

struct store_snapshots;

typedef void store_snapshots_cb(int r, void *userdata);
/* recs (n) borrowed for the call. */
typedef void store_snapshots_recs_cb(int r, const struct store_snapshot_rec *recs, size_t n,
                                     void *userdata);

struct store_snapshots *store_snapshots_new(struct store_redis *redis, const char *prefix);
struct store_snapshots *store_snapshots_free(struct store_snapshots *s);

/* Writes rec (state writing, its deadline in expires_at). -EEXIST (callback) when the id is
 * taken, -EDQUOT when the tenant's snapshots already count max_tenant_bytes (0: no quota). */
int store_snapshots_begin(struct store_snapshots *s, const struct store_snapshot_rec *rec,
                          uint64_t max_tenant_bytes, store_snapshots_cb *cb, void *userdata);
/* Makes the writing record ready with size, sha256, manifest and expires_at (0: none), if the
 * tenant's ready snapshots plus this one stay within max_tenant_bytes (0: no quota; a snapshot
 * counts its bytes and its manifest, which Redis keeps). r: 0,
 * -EDQUOT over the quota (the record stays writing: delete it), -ENOENT no such writing record. */
int store_snapshots_commit(struct store_snapshots *s, const struct store_snapshot_rec *rec,
                           uint64_t max_tenant_bytes, store_snapshots_cb *cb, void *userdata);
/* The record of id (n == 1), or n == 0 when there is none. */
int store_snapshots_get(struct store_snapshots *s, const char *id, store_snapshots_recs_cb *cb,
                        void *userdata);
/* The tenant's newest max records, and what its snapshots count towards its quota (bytes and
 * manifests, the hibernations' included). */
typedef void store_snapshots_list_cb(int r, const struct store_snapshot_rec *recs, size_t n,
                                     uint64_t tenant_bytes, void *userdata);
int store_snapshots_list(struct store_snapshots *s, const char *tenant, unsigned max,
                         store_snapshots_list_cb *cb, void *userdata);
/* Removes the record (and its bytes from the tenant's count); tenant NULL: whoever's. r: 0, or
 * -ENOENT (none, or another tenant's). Its bytes in the store go first (the caller's). */
int store_snapshots_delete(struct store_snapshots *s, const char *id, const char *tenant,
                           store_snapshots_cb *cb, void *userdata);
/* Up to max records whose end is at or before now_ms (not removed: delete each). */
int store_snapshots_expired(struct store_snapshots *s, uint64_t now_ms, unsigned max,
                            store_snapshots_recs_cb *cb, void *userdata);
