/* What the files of src/server/ share: the root object and the entry points each file gives the
 * others. server.c wires the modules and runs the cron; engine.c keeps the engine link, lists and
 * reconciles, removes orphans and routes events; lifecycle.c handles signals, the drain, the
 * service manager and the reload; metrics.c renders /metrics; policy.c runs the drift check and
 * quarantines. Nothing outside src/server/ includes this (docs/internals/style.md §2). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "config/config.h"
#include "http/http.h"
#include "pool/pool.h"
#include "server.h"

#define CRON_MS          250u
#define RECONCILE_MS     30000u
#define PING_MS          5000u
#define ENGINE_RETRY_MIN 250u
#define ENGINE_RETRY_MAX 5000u
#define DRAIN_CUT_MS     2000u
/* The exit status of a node that another declared lost while it ran (EX_TEMPFAIL): its service
 * manager starts it again (docs/cluster.md#node-loss). */
#define SERVER_EXIT_LOST 75

struct event;
struct event_base;
struct docker_call;
struct docker_client;
struct docker_container_list;
struct drift_check;
struct egress_proxy;
struct session_manager;
struct store_redis;

enum engine_link {
    ENGINE_DOWN,
    ENGINE_CONNECTING,
    ENGINE_UP,
};

struct orphan;

struct server {
    struct cfg *cfg;         /* the running configuration; its address never changes (config.h) */
    struct event_base *base; /* owned unless server_new_on() was given one */
    bool own_base;
    struct docker_client *docker;
    struct store_redis *redis;
    struct session_manager *sessions;
    struct snapshots *snapshots; /* NULL: snapshots.store is off */
    struct registry *registry;   /* this node in the node registry */
    struct route *route;         /* where other nodes' sessions are (cluster/route.h) */
    struct pool **pools;
    size_t n_pools;
    struct pool_budget budget;
    struct pool_uids *uids;      /* the node's sandbox uids, shared by the pools */
    struct egress_proxy *egress; /* NULL: no profile has an egress list (egress.c) */
    struct http *api;
    struct http_backend backend;
    struct event *cron;
    struct event *engine_retry;
    struct event *sig_term, *sig_int, *sig_hup;
    struct event *watchdog; /* WATCHDOG=1 to the service manager, if it asked (WatchdogSec=) */
    bool notify_failed;     /* the last sd_notify failed (logged once) */
    enum engine_link link;
    unsigned engine_backoff_ms;
    struct docker_call *engine_call; /* ping/info/list in flight */
    struct docker_call *events_call;
    uint64_t next_reconcile_ms;
    uint64_t next_ping_ms;
    uint64_t list_sent_ms;
    TAILQ_HEAD(, orphan) orphans;
    bool stopping;
    bool drained; /* by the admin: no new sessions */
    bool drain_cut;
    bool leaving;              /* SIGTERM seen, shutdown_delay_s running: HTTP_LEAVING */
    struct event *leave_timer; /* ends the shutdown delay */
    bool notify;               /* NOTIFY_SOCKET set: tell the service manager */
    int notified_ready;        /* readiness last sent in STATUS=: -1 none yet, 0, 1 */
    struct drift_check *drift; /* policy drift check in flight */
    TAILQ_HEAD(, http_policy_wait) policy_waits; /* admin requests waiting for its report */
    uint64_t next_drift_ms;
    uint64_t drain_deadline_ms;
    char engine_why[192];
    char label_owner[128]; /* "sandpool.owner=<node>" */
    server_config_loader *reload;
    void *reload_userdata;
};

/* server.c */
struct pool *server_pool_by_name(struct server *s, const char *name);
/* The http_backend's redis_ok: true while Redis is connected, else why[n] says why. */
bool server_redis_ok(void *userdata, char *why, size_t n);

/* engine.c: the engine link. */
void server_engine_init(struct server *s);
void server_engine_connect(struct server *s);
/* Cancels the link's calls (the drain, server_free()). */
void server_engine_cancel(struct server *s);
/* A full list + reconcile (the cron, every RECONCILE_MS or when a session asks for one). */
void server_engine_reconcile(struct server *s);
/* The liveness ping of an UP link (the cron, every PING_MS). */
void server_engine_ping(struct server *s);
/* The http_backend's engine_ok. */
bool server_engine_ok(void *userdata, char *why, size_t n);
/* Cancels the link, frees the orphans and the retry timer (server_free()). */
void server_engine_free(struct server *s);

/* lifecycle.c: signals, the drain, the service manager, the reload. */
void server_lifecycle_init(struct server *s);
void server_lifecycle_free(struct server *s);
/* The drain's step per cron tick while stopping. */
void server_drain_step(struct server *s);
/* Tells the service manager state (sd_notify) when it listens; each failure is logged once. */
void server_notify(struct server *s, const char *state);
/* STATUS= when what readyz would answer changed (the cron). */
void server_notify_readiness(struct server *s);
/* Starts WATCHDOG=1 pings when the service manager asked for them (server_run()). */
void server_watchdog_start(struct server *s);
enum http_drain server_drain_state(void *userdata);
void server_set_drained(void *userdata, bool drained);

/* egress.c: the egress proxy, when a profile has an egress list. */
int server_egress_init(struct server *s, struct err *reterr);
/* After the pools (their gates) are freed. */
void server_egress_free(struct server *s);
/* After a reconcile with the engine's full list (borrowed for the call). */
void server_egress_sweep(struct server *s, const struct docker_container_list *list);

/* metrics.c: the http_backend's metrics, Prometheus text into out. */
void server_metrics(void *userdata, bool tenants, struct buf *out);

/* policy.c: the drift check and its waiters. */
void server_policy_start(struct server *s);
struct http_policy_wait *server_policy_check(void *userdata, http_policy_cb *cb, void *arg);
void server_policy_cancel(void *userdata, struct http_policy_wait *w);
/* Cancels the check and frees the waiters (server_free(), after http_free()). */
void server_policy_free(struct server *s);
