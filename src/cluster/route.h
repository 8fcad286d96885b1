/* Where a session lives: the route of a request for a session this node does not hold
 * (docs/cluster.md#routing).
 *
 * The owner comes from a bounded cache (owners.h) of what the session records in Redis said,
 * and the owner's address and liveness from the node registry's cache (registry.h): a request
 * for a session whose owner is known costs no Redis operation. On a miss, one HMGET of the
 * session's record (its node, tenant and state) answers, and the owner is cached; the forwarder
 * forgets it when the owner answers that it no longer has the session (it ended, or moved
 * elsewhere after a wake), so the next request looks again; so does a cached owner that the
 * registry says is lost (its sessions are being claimed: ended, or moved to the claimer). A
 * lost node's ended session answers NONE with node_lost. MCP sessions on /mcp are routed to
 * where their sandbox is (route_find_mcp()). Loop context only. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "cluster/owners.h"
#include "store/nodes.h"

struct cfg;
struct registry;
struct route;
struct route_op;
struct store_redis;

enum route_verdict {
    ROUTE_FORWARD,     /* a live node holds it: forward to url */
    ROUTE_NONE,        /* no such session (ended, never was, or another tenant's): 404 */
    ROUTE_DOWN,        /* its node is not live (restarting, lost, unreachable): 503 */
    ROUTE_UNAVAILABLE, /* the route cannot be known now (Redis, a stale registry): 503 */
    ROUTE_HERE,        /* an MCP session this node serves (or takes over): answered here */
    ROUTE__COUNT,
};

struct route_answer {
    enum route_verdict verdict;
    char node[OWNER_ID_MAX + 1];      /* FORWARD, DOWN: the owner */
    char url[STORE_NODE_URL_MAX + 1]; /* FORWARD: its cluster.advertise_url */
    char why[160];                    /* NONE, DOWN, UNAVAILABLE: the client's, naming no node */
    bool node_lost;                   /* NONE: it ended because its node (node) was lost */
};

typedef void route_cb(const struct route_answer *ans, void *userdata);

/* cfg, redis and registry are borrowed. */
struct route *route_new(const struct cfg *cfg, struct store_redis *redis,
                        const struct registry *registry);
/* Lookups still in Redis's hands must have come (store_redis_free() first). Accepts NULL. */
struct route *route_free(struct route *r);

/* The route of session id for tenant (NULL: the admin, any tenant's). Returns 1 with *ret
 * filled when it is known now (cached, or unknowable: Redis down, too many lookups in flight, or
 * the node registry not read yet since this node started: UNAVAILABLE, never NONE);
 * returns 0 when the session's record is being read: cb runs once later with the answer, unless
 * route_cancel(*ret_op) came first. */
int route_find(struct route *r, const char *id, const char *tenant, struct route_answer *ret,
               route_cb *cb, void *userdata, struct route_op **ret_op);
/* The route of the MCP session id (on /mcp) of tenant, as route_find() answers it. It is served
 * where its sandbox is (the sandbox's route), or while it has none by the node that made it (its
 * record's node); HERE when that is this node, when the record is not there or not tenant's (this
 * node then answers as it would alone), when its sandbox ended, and when the node that made a
 * session without a sandbox was lost (this node takes it over: nothing of it lived there; a node
 * that is restarting keeps its sessions, DOWN). Before the node registry's first read, always
 * UNAVAILABLE: a record read then could be served here while its node serves it too. A
 * forwarded session's node is cached as a session's owner is: no Redis read the next time. */
int route_find_mcp(struct route *r, const char *id, const char *tenant, struct route_answer *ret,
                   route_cb *cb, void *userdata, struct route_op **ret_op);
/* The requester went away: cb never runs. */
void route_cancel(struct route_op *op);
/* The owner answered that it has no session id (anymore): the next request looks again. */
void route_forget(struct route *r, const char *id);
void route_forget_mcp(struct route *r, const char *id);

struct route_stats {
    uint64_t cache_hits;      /* answered from the cache */
    uint64_t lookups;         /* records read from Redis (one HMGET each) */
    uint64_t lookup_failures; /* of those: Redis failed, or answered garbage */
    uint64_t refused;         /* not looked up: Redis down or ROUTE_LOOKUPS_MAX in flight */
    size_t cached;
    unsigned in_flight;
};
void route_get_stats(const struct route *r, struct route_stats *ret);
