/* The daemon's root object; see server.h.
 *
 * It owns the event base and every module (engine client, Redis store, pools, session manager,
 * HTTP front end), wires their callbacks and runs the one cron timer; the engine link lives in
 * engine.c, signals, the drain, the service manager and the reload in lifecycle.c, /metrics in
 * metrics.c, the policy drift check in policy.c.
 *
 * Cron (docs/internals/style.md §6.7): one 250 ms timer; pool top-up every tick, reconcile
 * every 30 s, a liveness ping every 5 s (an engine that stops answering keeps its event stream
 * open: only a call with a deadline notices), the drift check every policy_check_s. Each job does
 * bounded work per tick.
 *
 * Crash-only: nothing is persisted locally. On start every container labelled with this node is
 * listed; running ones that match a profile's policy are re-adopted into the pool, the rest are
 * removed (engine.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "server-internal.h"

#define LOG_MODULE "server"
#include "audit/audit.h"
#include "cluster/registry.h"
#include "cluster/route.h"
#include "docker/api.h"
#include "docker/client.h"
#include "docker/policy.h"
#include "e2b/e2b.h"
#include "kernel/kernel.h"
#include "log/log.h"
#include "mcp/mcp.h"
#include "pool/pool.h"
#include "rest/rest.h"
#include "server/session-audit.h"
#include "session/session.h"
#include "snapshot/snapshot.h"
#include "store/redis.h"
#include "util/macro.h"
#include "util/memory.h"
#include "util/sdnotify.h"
#include "util/time.h"

struct pool *
server_pool_by_name(struct server *s, const char *name)
{
    for (size_t i = 0; name != NULL && i < s->n_pools; i++) {
        if (strcmp(pool_name(s->pools[i]), name) == 0) {
            return s->pools[i];
        }
    }
    return NULL;
}

static void
on_cron(evutil_socket_t fd, short what, void *arg)
{
    struct server *s = arg;
    uint64_t now;

    (void)memory_give_back(); /* what a flood of large requests left behind */
    if (s->stopping) {
        server_drain_step(s);
        return;
    }
    server_notify_readiness(s);
    audit_limited_flush();
    session_manager_tick(s->sessions);
    snapshots_tick(s->snapshots);
    if (s->link != ENGINE_UP) {
        return;
    }
    for (size_t i = 0; i < s->n_pools; i++) {
        pool_tick(s->pools[i]);
    }
    now = time_now_ms();
    if (session_manager_want_list(s->sessions)) {
        s->next_reconcile_ms = MIN(s->next_reconcile_ms, now); /* a detached session waits */
    }
    if (s->cfg->policy_check_s > 0 && now >= s->next_drift_ms && s->drift == NULL) {
        server_policy_start(s);
    }
    if (s->engine_call != NULL) {
        return; /* one link call at a time: a reconcile or ping is in flight */
    }
    if (now >= s->next_reconcile_ms) {
        server_engine_reconcile(s);
    } else if (now >= s->next_ping_ms) {
        server_engine_ping(s);
    }
}

static void
on_pool_notify(struct pool *p, const char *what, int r, const char *msg, void *userdata)
{
    log_warn("pool '%s': %s", pool_name(p), msg);
}

static void
on_session_event(const char *event, const char *id, const char *tenant, const char *detail,
                 void *userdata)
{
    log_info("session %s session=%s tenant='%s': %s", event, id, tenant, detail);
}

static void
on_found_session(struct pool *p, struct pool_slot *slot, const struct kernel_msg *hello,
                 void *userdata)
{
    struct server *s = userdata;

    log_info("container ctr=%.12s serves session=%s: re-adopting it", pool_slot_container(slot),
             hello->session);
    session_manager_adopt(s->sessions, slot, hello);
}

bool
server_redis_ok(void *userdata, char *why, size_t n)
{
    struct server *s = userdata;

    if (store_redis_is_up(s->redis)) {
        return true;
    }
    (void)snprintf(why, n, "%s",
                   store_redis_why(s->redis)[0] ? store_redis_why(s->redis) : "connecting");
    return false;
}

static void
on_redis_state(bool up, const char *why, void *userdata)
{
    struct server *s = userdata;

    if (up) {
        log_info("redis connected");
        session_manager_redis_up(s->sessions);
        if (s->registry != NULL) {
            registry_redis_up(s->registry);
        }
    } else {
        log_warn("redis unavailable: %s; reconnecting", why);
    }
}

/* What this node says of itself in the node registry (cluster/registry.h). */
static bool
self_draining(void *userdata)
{
    return server_drain_state(userdata) != HTTP_SERVING;
}

static unsigned
self_sessions(void *userdata)
{
    struct server *s = userdata;
    struct session_manager_stats st;

    session_manager_get_stats(s->sessions, &st);
    return (unsigned)st.sessions;
}

static json_t *
self_capacity(void *userdata)
{
    struct server *s = userdata;
    json_t *o = OOM_CHECK(json_object());

    for (size_t i = 0; i < s->n_pools; i++) {
        struct pool_stats st;

        pool_get_stats(s->pools[i], &st);
        (void)json_object_set_new(
            o, pool_name(s->pools[i]),
            OOM_CHECK(json_pack("{s:I, s:I, s:I}", "ready", (json_int_t)st.ready, "bound",
                                (json_int_t)st.bound, "max", (json_int_t)st.max)));
    }
    return o;
}

/* This node claimed a lost node: the audit says what became of its sessions, and its hibernated
 * ones (in this node's set now) are registered. */
static void
self_took_over(const char *lost, const struct store_nodes_claimed *c, void *userdata)
{
    struct server *s = userdata;

    server_audit_node_lost(lost, s->cfg->node_id, c);
    /* Read back even when none was said to be adopted: a claim whose answer could not be read
     * adopted what it did all the same. */
    session_manager_load_adopted(s->sessions);
}

/* Another node declared this one lost (it was cut off from Redis longer than 3 heartbeats) and
 * took its sessions: what this process still holds of them is no longer its own, and must not
 * be served nor written back. Holding nothing (a start after the loss), it goes on; else it
 * exits at once, writing nothing, and its next start (systemd, the kubelet) removes the
 * containers it finds (docs/cluster.md#node-loss). */
static void
self_declared_lost(const char *by, void *userdata)
{
    struct server *s = userdata;

    if (self_sessions(s) == 0) {
        log_info("node '%s' had declared this node lost before this start: its sessions were "
                 "ended or moved",
                 by);
        return;
    }
    log_error("node '%s' declared this node lost (cut off from Redis for over %u ms): its "
              "sessions were ended or moved; exiting to drop what this process holds "
              "(status %d)",
              by, 3 * s->cfg->cluster_heartbeat_ms, SERVER_EXIT_LOST);
    _exit(SERVER_EXIT_LOST);
}

/* Hibernation's use of the snapshot service (session.h's struct session_snapshot_ops). */
static int
hibernation_take(void *ops, struct session *sess, session_snap_cb *cb, void *userdata,
                 struct err *reterr)
{
    return snapshots_hibernate(ops, sess, cb, userdata, reterr);
}

static int
hibernation_restore(void *ops, struct session *sess, const char *snapshot, session_snap_cb *cb,
                    void *userdata, struct err *reterr)
{
    return snapshots_wake(ops, sess, snapshot, cb, userdata, reterr);
}

static void
hibernation_forget(void *ops, const char *session_id)
{
    snapshots_forget(ops, session_id);
}

static const struct session_snapshot_ops hibernation_ops = {
    .take = hibernation_take,
    .restore = hibernation_restore,
    .forget = hibernation_forget,
};

/* The protocols the HTTP core serves, in the order their routes are matched. */
static const struct http_protocol *const protocols[] = {&rest_protocol, &mcp_protocol,
                                                        &e2b_protocol};

const struct http_protocol *const *
server_protocols(size_t *ret_n)
{
    *ret_n = ELEMENTSOF(protocols);
    return protocols;
}

int
server_new(struct cfg *cfg, struct server **ret, struct err *reterr)
{
    return server_new_on(NULL, cfg, ret, reterr);
}

int
server_new_on(struct event_base *base, struct cfg *cfg, struct server **ret, struct err *reterr)
{
    struct server *s = xcalloc(1, sizeof(*s));
    struct cfg_redis_addr raddr;
    struct timeval tv;
    int r;

    s->cfg = cfg;
    s->own_base = base == NULL;
    s->base = base != NULL ? base : OOM_CHECK(event_base_new());
    TAILQ_INIT(&s->orphans);
    TAILQ_INIT(&s->policy_waits);
    s->next_drift_ms = time_now_ms() + (uint64_t)cfg->policy_check_s * 1000u;
    (void)snprintf(s->label_owner, sizeof(s->label_owner), "%s=%s", DOCKER_LABEL_OWNER,
                   cfg->node_id);
    s->docker = docker_client_new(s->base, cfg->engine_socket, cfg->engine_timeout_ms);
    if (cfg_parse_redis_url(cfg->redis_url, &raddr) < 0) {
        server_free(s);
        return err_set(reterr, -EINVAL, "bad redis.url"); /* cfg_validate() checked it */
    }
    s->redis = store_redis_new(s->base, &raddr, cfg->redis_timeout_ms, on_redis_state, s);
    s->budget.max = cfg->engine_max_concurrency;
    s->uids = pool_uids_new(cfg->sandbox_uid_first, cfg->sandbox_uid_count);
    s->n_pools = cfg->n_profiles;
    s->pools = xcalloc(s->n_pools, sizeof(struct pool *));
    struct pool_callbacks pcb = {
        .notify = on_pool_notify,
        .found_session = on_found_session,
        .userdata = s,
    };
    for (size_t i = 0; i < s->n_pools; i++) {
        s->pools[i] = pool_new(s->base, s->docker, &cfg->profiles[i], cfg->node_id, &s->budget,
                               s->uids, &pcb);
    }
    r = server_egress_init(s, reterr);
    if (r < 0) {
        server_free(s);
        return r;
    }
    s->sessions = session_manager_new(s->base, cfg, s->pools, s->n_pools, s->redis);
    session_manager_set_notify(s->sessions, on_session_event, s);
    session_manager_set_audit(s->sessions, server_session_audit, NULL);
    s->snapshots = snapshots_new(s->base, cfg, s->redis, s->docker, s->sessions, reterr);
    if (s->snapshots == NULL && cfg->snapshots_store[0] != '\0') {
        r = reterr->code;
        server_free(s);
        return r;
    }
    if (s->snapshots != NULL) {
        snapshots_set_audit(s->snapshots, server_snapshot_audit, NULL);
        session_manager_set_snapshots(s->sessions, &hibernation_ops, s->snapshots);
    }
    s->registry = registry_new(s->base, cfg, s->redis,
                               &(struct registry_self){.draining = self_draining,
                                                       .sessions = self_sessions,
                                                       .capacity = self_capacity,
                                                       .took_over = self_took_over,
                                                       .declared_lost = self_declared_lost,
                                                       .userdata = s});
    s->route = route_new(cfg, s->redis, s->registry);
    s->backend = (struct http_backend){
        .pools = s->pools,
        .n_pools = s->n_pools,
        .sessions = s->sessions,
        .snapshots = s->snapshots,
        .engine = s->docker,
        .redis = s->redis,
        .registry = s->registry,
        .route = s->route,
        .engine_ok = server_engine_ok,
        .redis_ok = server_redis_ok,
        .drain_state = server_drain_state,
        .set_drained = server_set_drained,
        .policy_check = server_policy_check,
        .policy_cancel = server_policy_cancel,
        .metrics = server_metrics,
        .userdata = s,
    };
    r = http_new(s->base, cfg, &s->backend, protocols, ELEMENTSOF(protocols), &s->api, reterr);
    if (r < 0) {
        server_free(s);
        return r;
    }
    s->cron = OOM_CHECK(event_new(s->base, -1, EV_PERSIST, on_cron, s));
    time_tv_from_ms(&tv, CRON_MS);
    (void)event_add(s->cron, &tv);
    server_engine_init(s);
    server_lifecycle_init(s);
    *ret = s;
    return 0;
}

void
server_begin(struct server *s)
{
    log_info("listening on %s, node '%s', engine %s, %zu profile(s)", s->cfg->listen,
             s->cfg->node_id, s->cfg->engine_socket, s->n_pools);
    if (s->notify && !sdnotify_supported()) {
        log_warn("NOTIFY_SOCKET is set but this build has no libsystemd: READY=1 is never sent "
                 "(a Type=notify unit times out), ignoring");
    }
    /* READY=1 once listening, not once readyz turns 200: the engine or Redis being down at boot
     * is a state readyz reports, not a failed start for the service manager to restart. */
    server_notify(s, "READY=1\nSTATUS=listening; warming pools");
    server_watchdog_start(s);
    server_engine_connect(s);
}

int
server_run(struct server *s)
{
    server_begin(s);
    if (event_base_dispatch(s->base) < 0) {
        return -EIO;
    }
    return 0;
}

struct server *
server_free(struct server *s)
{
    if (s == NULL) {
        return NULL;
    }
    server_engine_free(s);
    http_free(s->api); /* closing its connections cancels the admin requests' policy waits */
    server_policy_free(s);
    /* Before the sessions and the engine client its jobs use; a job waiting for Redis goes when
     * its answer comes (store_redis_free() cancels it), its record left to the sweep. */
    if (s->sessions != NULL) {
        session_manager_set_snapshots(s->sessions, NULL, NULL);
    }
    snapshots_free(s->snapshots);
    session_manager_free(s->sessions);
    for (size_t i = 0; i < s->n_pools; i++) {
        pool_free(s->pools[i]);
    }
    free(s->pools);
    store_redis_free(s->redis);
    route_free(s->route);       /* after Redis: its lookups in flight were answered */
    registry_free(s->registry); /* after Redis: its operations in flight were answered */
    docker_client_free(s->docker);
    if (s->cron != NULL) {
        event_free(s->cron);
    }
    server_lifecycle_free(s);
    /* After the pools' gates, and once no event of ours is left that its loop turn could run. */
    server_egress_free(s);
    if (s->own_base) {
        event_base_free(s->base);
    }
    pool_uids_free(s->uids); /* after the pools and orphans that held its pairs */
    cfg_free(s->cfg);
    free(s);
    return NULL;
}
