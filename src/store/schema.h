/* Every Redis key and field name sandpool uses, and the session record's (de)serialisation.
 *
 * Keys (P = redis.prefix, N = node_id):
 *   P session:ID          hash: the session record (fields below)
 *   P node:N:sessions     set: ids of the sessions of node N (active and ending)
 *   P node:N:deadlines    zset: ID -> the ms wall-clock time it ends, min(last activity +
 *                         idle timeout, expiry); only active sessions are in it
 *   P history:ID          list: the session's last STORE_HISTORY_MAX executions, newest
 *                         first, each a JSON object; deleted with the session (not under
 *                         "session:", whose keys are the records)
 *   P tenant:T:sessions   set: ids of tenant T's sessions on every node (max_sessions across
 *                         the cluster), and P tenant:T:admitted, zset: those admitted whose
 *                         record is not written yet -> Redis's time of the admission
 * A hibernated session's record names its snapshot (store/snapshots.h: "P snapshot:ID"), which
 * has no expiry of its own: the scripts that wake, end or delete the session hand it to the
 * snapshot sweep ("P snapshots:expiry" at 0) in the same step.
 * Pure: record parsing takes field/value pairs as Redis returns them and is fuzzed. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

#define STORE_ID_MAX       64
#define STORE_HISTORY_MAX  100  /* executions kept per session */
#define STORE_EXT_MAX      1024 /* an edge's own data about a session (field "ext") */
#define STORE_METADATA_MAX 4096 /* a session's metadata text */
#define STORE_SCRATCH      8    /* store_session_fields()'s number buffers */
#define STORE_SNAPSHOT_ID  32   /* a snapshot id's characters (store/snapshots.h) */
#define STORE_EGRESS_MAX   4096 /* a session's own narrowing of its egress list (field "egress") */
#define STORE_FIELDS_ARGV  40   /* argv entries store_session_fields() appends */

/* What a session does at its idle deadline; stored as "end", "hibernate" or "" (the profile's). */
enum store_idle_action {
    STORE_IDLE_PROFILE,
    STORE_IDLE_END,
    STORE_IDLE_HIBERNATE,
    STORE_IDLE__COUNT,
};

enum store_session_state {
    STORE_SESSION_ACTIVE,
    STORE_SESSION_ENDING,
    STORE_SESSION_HIBERNATED, /* no container: its state is in its snapshot */
    STORE_SESSION__COUNT,
    STORE_SESSION__INVALID = -22,
};

struct store_session_rec {
    char id[STORE_ID_MAX + 1];
    char tenant[65];
    char profile[49];
    char container[129];
    char node[65];
    uint64_t created_at, last_active_at, expires_at; /* wall-clock ms */
    unsigned idle_timeout_s;
    unsigned pause_after_s; /* 0: never paused for inactivity; optional in Redis */
    uint64_t epoch;
    int64_t gen; /* kernel worker generation the epoch was taken at */
    enum store_session_state state;
    enum store_idle_action idle_action;   /* optional in Redis */
    char snapshot[STORE_SNAPSHOT_ID + 1]; /* hibernated: its snapshot's id; optional */
    /* Hibernated: what its snapshot's record says of its bytes, kept with the session so that a
     * Redis that lost the snapshot record gets it back (store_sessions_restore()); optional. */
    uint64_t snapshot_size;
    char snapshot_sha256[65];
    /* Out of line (malloc'd, owned: store_session_rec_done()), so that a session costs what its
     * texts are, not their maxima (a hibernated one is little more than this record). */
    char *metadata; /* JSON object text, at most STORE_METADATA_MAX bytes; "{}" when none */
    /* Opaque to the store and the session module: what an edge keeps with the session (the E2B
     * layer's credentials and template, src/e2b/e2b.c), at most STORE_EXT_MAX bytes. "" when
     * none; optional in Redis. */
    char *ext;
    /* What the session narrowed its profile's egress list to at its creation (an egress JSON
     * object's text, docs/egress.md), at most STORE_EGRESS_MAX bytes; "" when it did not;
     * optional in Redis. Kept here so that a restart or a wake narrows it again. */
    char *egress;
};

/* Frees rec's texts (rec itself is the caller's); NULL texts are fine. */
void store_session_rec_done(struct store_session_rec *rec);
/* *dst = *src with texts of its own ("{}" and "" for NULL ones). */
void store_session_rec_copy(struct store_session_rec *dst, const struct store_session_rec *src);
/* Replaces a text of rec (free, then a copy of value). */
void store_session_rec_set(char **field, const char *value);

/* Writes "P session:ID" etc. into out (NUL-terminated). -ENAMETOOLONG when it does not fit. */
int store_key_session(char *out, size_t n, const char *prefix, const char *id);
int store_key_node_sessions(char *out, size_t n, const char *prefix, const char *node);
int store_key_node_deadlines(char *out, size_t n, const char *prefix, const char *node);
int store_key_session_history(char *out, size_t n, const char *prefix, const char *id);
/* P mcp:ID: an MCP session's record (JSON text, store/mcp-record.h). */
int store_key_mcp(char *out, size_t n, const char *prefix, const char *id);
/* The snapshot record's key and the snapshot sweep's zset (store/snapshots.h). */
int store_key_snapshot(char *out, size_t n, const char *prefix, const char *id);
int store_key_snapshots_expiry(char *out, size_t n, const char *prefix);
int store_key_tenant_snapshot_bytes(char *out, size_t n, const char *prefix, const char *tenant);
/* P tenant:T:sessions, the ids of the tenant's sessions on every node, and P tenant:T:admitted,
 * those admitted whose record is not written yet (store/sessions.c, admit_lua); "P tenant:", what
 * scripts that know a record's tenant only from the record name those keys from. */
int store_key_tenant_sessions(char *out, size_t n, const char *prefix, const char *tenant);
int store_key_tenant_admitted(char *out, size_t n, const char *prefix, const char *tenant);
int store_key_tenant_prefix(char *out, size_t n, const char *prefix);
/* "end", "hibernate", "" (the profile's); NULL out of range. Parsing: -EINVAL for another name. */
const char *store_idle_action_name(enum store_idle_action a);
int store_idle_action_parse(const char *s, enum store_idle_action *ret);

/* Fills rec from alternating field/value strings (HGETALL order). Unknown fields are ignored
 * (newer daemons may add some); a missing or malformed required field is -EPROTO. *rec is
 * untouched on failure; on success its texts are the caller's (store_session_rec_done()). */
int store_session_parse(const char *const *fields, const size_t *lens, size_t n,
                        struct store_session_rec *rec);
/* Appends the record as field/value argv entries (pointing into rec and into `scratch`, which
 * must outlive the argv) to argv/lens starting at *argc. Needs room for STORE_FIELDS_ARGV
 * entries. */
void store_session_fields(const struct store_session_rec *rec, char scratch[STORE_SCRATCH][24],
                          const char **argv, size_t *lens, int *argc);
/* Session deadline: min(last activity + idle timeout, expiry), in ms; a hibernated one's is its
 * expiry. */
uint64_t store_session_deadline(const struct store_session_rec *rec, uint64_t last_active_ms);
