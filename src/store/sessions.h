/* Session records in Redis: create, touch (push the idle deadline), mark ending, delete, claim
 * the expired ones, load a node's records. Each operation is one atomic Lua script.
 *
 * Contract: every function returns 0 and calls its callback exactly once later, or returns a
 * negative errno (-ENOTCONN: Redis is down) and never calls it. r in the callback: 0, -ENOENT
 * (no such active session, for touch), -EPROTO (Redis answered something unexpected), or the
 * connection's -ETIMEDOUT/-ENOTCONN/-ECANCELED.
 *
 * The scripts name every key they touch in KEYS except load_all, which reads the session hashes
 * listed in the node set; Redis Cluster is therefore not supported. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "store/redis.h"
#include "store/schema.h"

struct store_sessions;

typedef void store_sessions_cb(int r, void *userdata);
/* recs (n of them) are borrowed for the call; malformed records are skipped and counted. */
typedef void store_sessions_load_cb(int r, const struct store_session_rec *recs, size_t n,
                                    size_t malformed, void *userdata);
/* ids are borrowed for the call. */
typedef void store_sessions_claim_cb(int r, const char *const *ids, size_t n, void *userdata);

/* redis is borrowed; prefix and node are copied. */
struct store_sessions *store_sessions_new(struct store_redis *redis, const char *prefix,
                                          const char *node);
struct store_sessions *store_sessions_free(struct store_sessions *s);

/* Writes the record, adds it to the node set and sets its deadline. */
int store_sessions_create(struct store_sessions *s, const struct store_session_rec *rec,
                          store_sessions_cb *cb, void *userdata);
/* Writes the record back only if Redis lost it (restarted without persistence); an existing
 * record is left alone. Used to resynchronise after a reconnect. A hibernated record's snapshot
 * record, lost with it, comes back from the session's snapshot_size and snapshot_sha256 (and
 * counts in its tenant's bytes again). */
int store_sessions_restore(struct store_sessions *s, const struct store_session_rec *rec,
                           store_sessions_cb *cb, void *userdata);
/* Admits a new session id of tenant across the cluster while the tenant has fewer than max
 * sessions (its records on every node, hibernated ones included, and the admissions not written
 * yet): -ENOENT (callback) at max. The record's create completes the admission;
 * store_sessions_unadmit() gives back one whose create failed (else it goes a minute later). */
int store_sessions_admit(struct store_sessions *s, const char *tenant, const char *id, unsigned max,
                         store_sessions_cb *cb, void *userdata);
int store_sessions_unadmit(struct store_sessions *s, const char *tenant, const char *id,
                           store_sessions_cb *cb, void *userdata);
/* Records activity at now_ms and pushes the deadline to min(now + idle, expiry). -ENOENT when
 * the session is not active (claimed by the reaper, ended). */
int store_sessions_touch(struct store_sessions *s, const char *id, uint64_t now_ms,
                         store_sessions_cb *cb, void *userdata);
/* Moves the session's expiry (wall-clock ms) and its deadline with it, to min(last activity +
 * idle, expiry). -ENOENT when the session is not active. */
int store_sessions_set_expiry(struct store_sessions *s, const char *id, uint64_t expires_at,
                              store_sessions_cb *cb, void *userdata);
/* Replaces the record's "ext" (schema.h). -ENOENT when the session is not active. */
int store_sessions_set_ext(struct store_sessions *s, const char *id, const char *ext,
                           store_sessions_cb *cb, void *userdata);
/* Replaces the record's "egress" (schema.h: a narrowing's text, "" for none). -ENOENT when the
 * session is neither active nor hibernated. */
int store_sessions_set_egress(struct store_sessions *s, const char *id, const char *egress,
                              store_sessions_cb *cb, void *userdata);
/* Records a new kernel epoch and the worker generation it was observed at. */
int store_sessions_set_epoch(struct store_sessions *s, const char *id, uint64_t epoch, int64_t gen,
                             store_sessions_cb *cb, void *userdata);
/* Takes the session out of the deadline set and marks it ending (its container goes next; a
 * hibernated one's snapshot goes to the snapshot sweep). */
int store_sessions_mark_ending(struct store_sessions *s, const char *id, store_sessions_cb *cb,
                               void *userdata);
/* Hibernation (docs/hibernate.md). The live session on container becomes hibernated on its
 * ready snapshot (which then has no expiry of its own; ending or deleting the session hands it to
 * the snapshot sweep): -ENOENT when the session is no longer live on that container, -ESTALE when
 * the snapshot is not ready. */
int store_sessions_hibernate(struct store_sessions *s, const char *id, const char *container,
                             const char *snapshot, store_sessions_cb *cb, void *userdata);
/* The hibernated session is live again on container, with epoch and gen, active at now_ms; its
 * snapshot goes to the sweep. -ENOENT when it is no longer hibernated on that snapshot. */
int store_sessions_wake(struct store_sessions *s, const char *id, const char *container,
                        uint64_t epoch, int64_t gen, uint64_t now_ms, const char *snapshot,
                        store_sessions_cb *cb, void *userdata);
/* Hands a snapshot no session names to the snapshot sweep (a hibernation that did not happen). */
int store_sessions_drop_snapshot(struct store_sessions *s, const char *snapshot,
                                 store_sessions_cb *cb, void *userdata);
/* Gives an active session the reaper claimed a deadline again, at at_ms. -ENOENT when not
 * active. */
int store_sessions_requeue(struct store_sessions *s, const char *id, uint64_t at_ms,
                           store_sessions_cb *cb, void *userdata);
/* Removes every trace of the session (a hibernated one's snapshot goes to the sweep). */
int store_sessions_delete(struct store_sessions *s, const char *id, store_sessions_cb *cb,
                          void *userdata);
/* Atomically takes up to max ids whose deadline is <= now_ms out of the deadline set: a daemon
 * that gets an id owns its ending, so two daemons never reap one session twice. */
int store_sessions_claim_expired(struct store_sessions *s, uint64_t now_ms, unsigned max,
                                 store_sessions_claim_cb *cb, void *userdata);
/* Loads every record of this node. */
int store_sessions_load_all(struct store_sessions *s, store_sessions_load_cb *cb, void *userdata);

/* Execution history ("P history:ID", deleted with the record by
 * store_sessions_delete()). push prepends entry (len bytes, a JSON object's text) and keeps the
 * newest STORE_HISTORY_MAX; it does nothing when the record is gone. */
int store_sessions_history_push(struct store_sessions *s, const char *id, const char *entry,
                                size_t len, store_sessions_cb *cb, void *userdata);
/* items[i] (lens[i] bytes, not NUL-checked) are borrowed for the call, newest first. */
typedef void store_sessions_list_cb(int r, const char *const *items, const size_t *lens, size_t n,
                                    void *userdata);
/* Reads the history: at most STORE_HISTORY_MAX entries. An unknown id gives n == 0. */
int store_sessions_history(struct store_sessions *s, const char *id, store_sessions_list_cb *cb,
                           void *userdata);
