/* The node registry in Redis (docs/cluster.md): every daemon sharing a Redis (and a prefix)
 * publishes who it is, where it answers and what it can take, with a heartbeat. Keys (P =
 * redis.prefix):
 *
 *   P nodes          zset: node id -> its last heartbeat (wall-clock ms)
 *   P node:ID:info   hash: the record (fields below); kept a day after its last heartbeat, so
 *                    that a node found lost is still known by what it said
 *
 * A node is live while its last heartbeat is younger than its own ttl_ms (what it promised: 3
 * heartbeats). A node that stops cleanly says so in a last heartbeat (stopped: its sessions wait
 * for its next start, docs/operations.md#shutdown). Every operation is one Lua script;
 * contract as store/sessions.h (0 and one later callback, or a negative errno and none). Pure:
 * store_node_parse() is fuzzed. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/redis.h"

#define STORE_NODE_URL_MAX      255
#define STORE_NODE_CAPACITY_MAX 8192 /* the capacity's JSON text, at most */
#define STORE_NODES_MAX         1000 /* nodes listed, at most */

struct store_node_rec {
    char id[65];
    char url[STORE_NODE_URL_MAX + 1]; /* cluster.advertise_url */
    char version[33];
    bool draining; /* takes no new sessions (the admin's drain, or a stop under way) */
    bool stopped;  /* its last heartbeat: it stopped cleanly */
    uint64_t started_at, heartbeat_at; /* wall-clock ms */
    unsigned ttl_ms;                   /* live while now - heartbeat_at < ttl_ms */
    unsigned sessions;
    /* {"PROFILE": {"ready", "bound", "max"}, ...} as JSON text (malloc'd); "{}" when none. */
    char *capacity;
};

void store_node_rec_done(struct store_node_rec *rec);
/* Fills rec from HGETALL's field/value pairs: -EPROTO when a required field (id, url, started_at,
 * heartbeat_at, ttl_ms) is missing or any field is malformed (rec untouched). Unknown fields are
 * a newer daemon's: ignored. rec->capacity is malloc'd (store_node_rec_done()). */
int store_node_parse(const char *const *kv, const size_t *lens, size_t n,
                     struct store_node_rec *rec);
/* Whether rec is live at now_ms: not stopped, its last heartbeat younger than its ttl. */
bool store_node_live(const struct store_node_rec *rec, uint64_t now_ms);

struct store_nodes;

/* lost_by: the node that declared this one lost (and took its sessions) since its last
 * heartbeat, or NULL. */
typedef void store_nodes_beat_cb(int r, const char *lost_by, void *userdata);
/* recs (n, newest heartbeat first) borrowed for the call. */
typedef void store_nodes_list_cb(int r, const struct store_node_rec *recs, size_t n,
                                 void *userdata);

struct store_nodes *store_nodes_new(struct store_redis *redis, const char *prefix);
struct store_nodes *store_nodes_free(struct store_nodes *s);

/* Writes rec and its heartbeat (rec->heartbeat_at), and reads (and clears) its lost marker. */
int store_nodes_heartbeat(struct store_nodes *s, const struct store_node_rec *rec,
                          store_nodes_beat_cb *cb, void *userdata);
/* What a claim did: the sessions it ended (ids and their tenants) and those it adopted (borrowed
 * for the callback). */
struct store_nodes_claimed {
    const char *const *ended; /* id, tenant, id, tenant, ... */
    size_t n_ended;           /* pairs */
    const char *const *adopted;
    size_t n_adopted;
};
/* claimed: this node claimed it (r may still be -EPROTO: what it did is then unknown). */
typedef void store_nodes_claim_cb(int r, bool claimed, const struct store_nodes_claimed *c,
                                  void *userdata);
/* Claims node lost (not heard from since heartbeat_at, as listed) for claimer, in one script:
 * once in the whole cluster (a marker set NX, kept tombstone_ms), and only if its last heartbeat
 * is still heartbeat_at. Its hibernated sessions become claimer's (their records, deadlines and
 * set); every other one becomes a tombstone, state "lost" without a container, gone after
 * tombstone_ms. Its next heartbeat reads the marker (store_nodes_beat_cb's lost_by). */
int store_nodes_claim(struct store_nodes *s, const char *lost, uint64_t heartbeat_at,
                      const char *claimer, unsigned tombstone_ms, store_nodes_claim_cb *cb,
                      void *userdata);

/* Every node that heartbeat within the last day, newest first (at most STORE_NODES_MAX). */
int store_nodes_list(struct store_nodes *s, uint64_t now_ms, store_nodes_list_cb *cb,
                     void *userdata);
