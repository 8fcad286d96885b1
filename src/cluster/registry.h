/* This node in the node registry (store/nodes.h, docs/cluster.md): a heartbeat every
 * cluster.heartbeat_ms publishes who it is (node_id, cluster.advertise_url, version), whether it
 * takes new sessions and what it can take (per profile: warm ready, bound, max), and after each
 * heartbeat the registry is read back into a cache: the admin's view (GET /v1/admin/nodes) and
 * the routing's answer come from it, never from a Redis call on the request's path. A node is
 * live while its last heartbeat is younger than 3 heartbeats; at a clean stop a last heartbeat
 * says "stopped".
 *
 * A node that missed its heartbeats without having stopped cleanly is lost: after a list, this
 * node tries to claim it (store_nodes_claim(): one node in the cluster wins), ending its live
 * sessions (tombstones that answer 404 node_lost) and adopting its hibernated ones; the winner is
 * told (registry_self.took_over). A node that finds at its heartbeat that it was declared lost is
 * told too (declared_lost): its sessions are no longer its own.
 *
 * States (one writer, registry_set(), which asserts the transition): IDLE (waiting for the next
 * beat) -> BEATING (the heartbeat is in Redis's hands) -> LISTING (the list is) -> [CLAIMING (a
 * lost node's claim is)] -> IDLE; STOPPING (the last heartbeat is) -> STOPPED. Loop context only.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/nodes.h"

struct cfg;
struct event_base;
struct registry;

typedef struct json_t json_t;

/* What the node says of itself at each heartbeat: draining, the number of its sessions, and its
 * capacity (a JSON object {"PROFILE": {"ready", "bound", "max"}}, returned owned). */
struct registry_self {
    bool (*draining)(void *userdata);
    unsigned (*sessions)(void *userdata);
    json_t *(*capacity)(void *userdata);
    /* This node claimed node `lost`: c says what became of its sessions (borrowed). */
    void (*took_over)(const char *lost, const struct store_nodes_claimed *c, void *userdata);
    /* Node `by` declared this one lost and took its sessions (this node was cut off). */
    void (*declared_lost)(const char *by, void *userdata);
    void *userdata;
};

/* Starts heartbeating at once (when Redis is up; else at the next beat). Everything borrowed. */
struct registry *registry_new(struct event_base *base, const struct cfg *cfg,
                              struct store_redis *redis, const struct registry_self *self);
/* Callbacks of operations still in Redis's hands must have come (store_redis_free() first). */
struct registry *registry_free(struct registry *r);

/* Redis came up: the next heartbeat (and list) goes at once rather than at the next beat, so that
 * a node just started knows the others (registry_listed()) as early as it can. */
void registry_redis_up(struct registry *r);

/* Whether the registry was read once since this node started. Before, the node does not know
 * whether it is alone: a session it does not hold may be another node's, so it is neither ready
 * nor answers for such a session (docs/cluster.md#routing). */
bool registry_listed(const struct registry *r);

/* The last heartbeat, "stopped": true once it is answered, failed or Redis is down (then the
 * others see the heartbeat age). Called again until true by the drain. */
bool registry_stop(struct registry *r);

/* The cached view: {"self", "heartbeat_ms", "listed_at", "nodes": [{"id", "url", "version",
 * "live", "draining", "stopped", "started_at", "heartbeat_at", "heartbeat_age_ms", "sessions",
 * "capacity"}]} (newest heartbeat first; listed_at null before the first list). */
json_t *registry_to_json(const struct registry *r);

/* The cached record of node id, or NULL when the last list did not have it. Borrowed until the
 * next list. */
const struct store_node_rec *registry_node(const struct registry *r, const char *id);

/* Where a new session of profile goes when this node has no warm container for it (or is
 * draining: self_free 0): another live node that takes sessions and advertises an http://
 * address, the one with the most warm containers ready for the profile, else the one with the
 * most room for it (max - bound) if that is more than self_free; NULL: nowhere better than here.
 * From the last list (at most a heartbeat old): a guess, which the chosen node makes good by
 * creating the session itself, from its pool or cold. */
const struct store_node_rec *registry_place(const struct registry *r, const char *profile,
                                            unsigned self_free);

/* How many other nodes the last list had (live or not): 0 for a node alone. */
size_t registry_peers(const struct registry *r);
/* The i-th of them (i < registry_peers()), borrowed until the next list. */
const struct store_node_rec *registry_peer(const struct registry *r, size_t i);

struct registry_stats {
    uint64_t heartbeats_total, heartbeat_failures_total;
    uint64_t claims_total;           /* lost nodes this node claimed */
    uint64_t sessions_lost_total;    /* their live sessions it ended (node_lost) */
    uint64_t sessions_adopted_total; /* their hibernated sessions it took */
    unsigned live, down;             /* of the last list: nodes live, and known but not live */
};
void registry_get_stats(const struct registry *r, struct registry_stats *ret);
