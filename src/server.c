/* The daemon's root object; see server.h.
 *
 * Engine link state machine (edge-logged here, not in the modules):
 *   DOWN --ping ok--> (info, then list+reconcile) --> UP (events stream open)
 *   UP --events stream ends / reconcile or liveness ping fails--> DOWN, retried with backoff
 *   250 ms .. 5 s.
 * The engine events stream is only a hint: a full list + reconcile runs after every (re)connect
 * and every 30 s (docs/internals/engine.md §3).
 *
 * Cron (docs/internals/style.md §6.7): one 250 ms timer; pool top-up every tick, reconcile
 * every 30 s, a liveness ping every 5 s (an engine that stops answering keeps its event stream
 * open: only a call with a deadline notices). Each job does bounded work per tick.
 *
 * Crash-only: nothing is persisted locally. On start every container labelled with this node is
 * listed; running ones that match a profile's policy are re-adopted into the pool, the rest are
 * removed. On SIGTERM the server first answers readyz 503 for shutdown_delay_s while it still
 * serves (Kubernetes takes the endpoint out of rotation meanwhile; no new sessions), then stops
 * listening, drains running executions and leaves its sessions' containers for the next start.
 * Under systemd (Type=notify) it sends READY=1 once listening, STOPPING=1 at the stop signal and
 * STATUS= when readiness changes. */
#include "server.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>
#include <jansson.h>

#define LOG_MODULE "server"
#include "api/api.h"
#include "api/session-audit.h"
#include "audit/audit.h"
#include "docker/api.h"
#include "docker/client.h"
#include "docker/json.h"
#include "docker/policy.h"
#include "docker/quirks.h"
#include "kernel/kernel.h"
#include "log/log.h"
#include "pool/drift.h"
#include "pool/pool.h"
#include "session/session.h"
#include "store/redis.h"
#include "util/macro.h"
#include "util/sdnotify.h"
#include "util/time.h"

#define CRON_MS          250u
#define RECONCILE_MS     30000u
#define PING_MS          5000u
#define ENGINE_RETRY_MIN 250u
#define ENGINE_RETRY_MAX 5000u
#define DRAIN_CUT_MS     2000u

enum engine_link {
    ENGINE_DOWN,
    ENGINE_CONNECTING,
    ENGINE_UP,
};

struct server {
    struct cfg *cfg;
    struct event_base *base;
    struct docker_client *docker;
    struct store_redis *redis;
    struct session_manager *sessions;
    struct pool **pools;
    size_t n_pools;
    struct pool_budget budget;
    struct pool_uids *uids; /* the node's sandbox uids, shared by the pools */
    struct api *api;
    struct api_backend backend;
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
    bool leaving;              /* SIGTERM seen, shutdown_delay_s running: API_LEAVING */
    struct event *leave_timer; /* ends the shutdown delay */
    bool notify;               /* NOTIFY_SOCKET set: tell the service manager */
    int notified_ready;        /* readiness last sent in STATUS=: -1 none yet, 0, 1 */
    struct drift_check *drift; /* policy drift check in flight */
    TAILQ_HEAD(, api_policy_wait) policy_waits; /* admin requests waiting for its report */
    uint64_t next_drift_ms;
    uint64_t drain_deadline_ms;
    char engine_why[192];
    char label_owner[128]; /* "sandpool.owner=<node>" */
    server_config_loader *reload;
    void *reload_userdata;
};

static void engine_connect(struct server *s);
static void drain_step(struct server *s);
static void start_drift_check(struct server *s);
static void notify_readiness(struct server *s);

/* ---- engine link ----------------------------------------------------------------------------- */

static void engine_down(struct server *s, const char *fmt, ...) PRINTF_LIKE(2, 3);

static void
engine_down(struct server *s, const char *fmt, ...)
{
    char why[192];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (s->link == ENGINE_UP || strcmp(why, s->engine_why) != 0) {
        log_warn("engine unavailable: %s; retrying", why);
    }
    memcpy(s->engine_why, why, sizeof(why));
    s->link = ENGINE_DOWN;
    /* Whatever is still in flight belongs to the link that just failed. */
    docker_call_cancel(s->engine_call);
    s->engine_call = NULL;
    docker_call_cancel(s->events_call);
    s->events_call = NULL;
    if (!s->stopping) {
        struct timeval tv;

        s->engine_backoff_ms =
            MIN(MAX(s->engine_backoff_ms * 2, ENGINE_RETRY_MIN), ENGINE_RETRY_MAX);
        time_tv_from_ms(&tv, s->engine_backoff_ms);
        (void)evtimer_add(s->engine_retry, &tv);
    }
}

static struct pool *
pool_by_name(struct server *s, const char *name)
{
    for (size_t i = 0; name != NULL && i < s->n_pools; i++) {
        if (strcmp(pool_name(s->pools[i]), name) == 0) {
            return s->pools[i];
        }
    }
    return NULL;
}

/* A container nobody owns, until the engine confirmed it is gone: its removal, at most one in
 * flight per container, each holding one unit of the engine budget (a node full of leftovers
 * cannot crowd out the pools' own work), and its sandbox uid, claimed from the first list that
 * shows it until then: its processes live until the removal, so no new sandbox may get the uid
 * meanwhile, whether the removal waits for the budget or failed (the next reconcile retries).
 * One that a later list no longer shows is forgotten (removed by someone else). */
struct orphan {
    TAILQ_ENTRY(orphan) link;
    struct server *server;
    struct docker_call *call; /* the removal in flight, or NULL */
    int64_t uid;              /* the sandbox uid it holds (claimed), or -1 */
    bool listed;              /* in the list being reconciled */
    char id[129];
};

static void
orphan_free(struct orphan *o)
{
    TAILQ_REMOVE(&o->server->orphans, o, link);
    if (o->call != NULL) {
        docker_call_cancel(o->call);
        o->server->budget.inflight--;
    }
    if (o->uid >= 0) {
        pool_uids_release(o->server->uids, (uint64_t)o->uid);
    }
    free(o);
}

static void
on_orphan_removed(int r, json_t *result, const struct err *e, void *userdata)
{
    struct orphan *o = userdata;

    o->call = NULL;
    o->server->budget.inflight--;
    if (r < 0) {
        log_warn("removing container ctr=%.12s failed: %s; the next reconcile retries (its uid "
                 "stays taken)",
                 o->id, err_msg(e));
        return;
    }
    orphan_free(o);
}

static void
orphan_remove(struct server *s, struct orphan *o)
{
    if (o->call != NULL || s->budget.inflight >= s->budget.max) {
        return; /* on its way, or the next reconcile comes back to it */
    }
    log_info("removing container ctr=%.12s: no profile or pool owns it", o->id);
    s->budget.inflight++;
    o->call = docker_container_remove(s->docker, o->id, on_orphan_removed, o);
}

static void
remove_orphan(struct server *s, const char *id, int64_t uid)
{
    struct orphan *o;

    TAILQ_FOREACH (o, &s->orphans, link) {
        if (strcmp(o->id, id) == 0) {
            o->listed = true;
            orphan_remove(s, o);
            return;
        }
    }
    if (strlen(id) >= sizeof(o->id)) {
        return;
    }
    o = xcalloc(1, sizeof(*o));
    o->server = s;
    o->listed = true;
    memcpy(o->id, id, strlen(id) + 1);
    o->uid = uid >= 0 && pool_uids_claim(s->uids, (uint64_t)uid) == 0 ? uid : -1;
    TAILQ_INSERT_TAIL(&s->orphans, o, link);
    orphan_remove(s, o);
}

/* Every container labelled with our node is either tracked by a pool, adopted, or removed.
 * listed_at_ms is when the list was asked for: newer slot states are not judged by it. */
static void
reconcile_list(struct server *s, json_t *list, uint64_t listed_at_ms)
{
    size_t i;
    json_t *c;
    struct orphan *o, *next;

    TAILQ_FOREACH (o, &s->orphans, link) {
        o->listed = o->call != NULL; /* one being removed is judged by its removal */
    }
    json_array_foreach (list, i, c) {
        const char *id = json_string_value(json_object_get(c, "Id"));
        const char *slot = docker_label(c, DOCKER_LABEL_SLOT);
        struct pool *p = pool_by_name(s, docker_label(c, DOCKER_LABEL_PROFILE));

        if (id == NULL) {
            continue;
        }
        if (p != NULL && (pool_owns(p, id) || (slot != NULL && pool_knows_slot(p, slot)))) {
            continue;
        }
        if (p != NULL && pool_adopt(p, c) == 0) {
            log_info("adopting container ctr=%.12s profile='%s'", id, pool_name(p));
            continue;
        }
        remove_orphan(s, id, docker_policy_uid(c));
    }
    for (o = TAILQ_FIRST(&s->orphans); o != NULL; o = next) {
        next = TAILQ_NEXT(o, link);
        if (!o->listed) {
            orphan_free(o); /* gone without us */
        }
    }
    for (size_t k = 0; k < s->n_pools; k++) {
        pool_reconcile(s->pools[k], list, listed_at_ms);
    }
    session_manager_reconcile(s->sessions, list, listed_at_ms);
}

static void
on_event(json_t *ev, void *userdata)
{
    struct server *s = userdata;
    const char *action = json_string_value(json_object_get(ev, "Action"));
    const char *id = json_string_value(json_object_get(json_object_get(ev, "Actor"), "ID"));

    if (action == NULL || id == NULL) {
        return;
    }
    if (strcmp(action, "oom") == 0) { /* comes before its "die" */
        session_manager_container_oom(s->sessions, id);
        return;
    }
    if (strcmp(action, "die") == 0 || strcmp(action, "destroy") == 0 ||
        strcmp(action, "remove") == 0) {
        session_manager_container_gone(s->sessions, id, action);
        for (size_t i = 0; i < s->n_pools; i++) {
            if (pool_container_gone(s->pools[i], id)) {
                log_info("container ctr=%.12s: %s", id, action);
                break;
            }
        }
    }
}

static void
on_events_end(int r, json_t *result, const struct err *e, void *userdata)
{
    struct server *s = userdata;

    s->events_call = NULL;
    /* Also while connecting: going UP without the stream would miss every container death
     * until the next reconcile. */
    if (s->link != ENGINE_DOWN) {
        engine_down(s, "event stream ended: %s", r < 0 ? err_msg(e) : "closed by the engine");
    }
}

static void
on_list(int r, json_t *result, const struct err *e, void *userdata)
{
    struct server *s = userdata;

    s->engine_call = NULL;
    if (r < 0 || !json_is_array(result)) {
        engine_down(s, "listing containers failed: %s", r < 0 ? err_msg(e) : "not an array");
        return;
    }
    reconcile_list(s, result, s->list_sent_ms);
    s->next_reconcile_ms = time_now_ms() + RECONCILE_MS;
    if (s->link != ENGINE_UP) {
        s->link = ENGINE_UP;
        s->engine_backoff_ms = 0;
        s->engine_why[0] = '\0';
        log_info("engine ready: API %s, %zu containers of node '%s' found",
                 docker_client_prefix(s->docker), json_array_size(result), s->cfg->node_id);
        for (size_t i = 0; i < s->n_pools; i++) {
            pool_engine_back(s->pools[i]);
        }
    }
    for (size_t i = 0; i < s->n_pools; i++) {
        pool_tick(s->pools[i]);
    }
}

static void
start_reconcile(struct server *s)
{
    const char *labels[] = {s->label_owner, NULL};

    s->list_sent_ms = time_now_ms();
    s->engine_call = docker_container_list(s->docker, labels, on_list, s);
}

/* At every engine (re)connect: a profile whose runtime the engine lacks, or whose limits its
 * runtime cannot enforce (gVisor and pids), gets no container (its pool is refused, readyz
 * names why); the other profiles are served. Only the engine knows which binary a runtime name
 * stands for and the host's cgroup version, so this cannot be decided at start-up. */
static void
check_runtimes(struct server *s, json_t *info)
{
    for (size_t i = 0; i < s->cfg->n_profiles; i++) {
        const struct cfg_profile *p = &s->cfg->profiles[i];
        struct pool *pool = pool_by_name(s, p->name);
        struct err e = {0};
        struct pool_stats st;

        if (pool == NULL) {
            continue;
        }
        pool_get_stats(pool, &st);
        if (docker_quirks_check_profile(docker_client_quirks(s->docker), p,
                                        docker_quirks_host_pid_max(), &e) < 0 ||
            docker_policy_check_engine(p, info, &e) < 0) {
            if (strcmp(st.refused, e.msg) != 0) {
                log_error("%s; no container of profile '%s' is started", e.msg, p->name);
            }
            pool_refuse(pool, e.msg);
        } else if (st.refused[0]) {
            log_info("profile '%s': the engine can run it now", p->name);
            pool_refuse(pool, NULL);
        }
    }
}

static void
on_info(int r, json_t *info, const struct err *e, void *userdata)
{
    struct server *s = userdata;

    s->engine_call = NULL;
    if (r < 0) {
        engine_down(s, "engine info failed: %s", err_msg(e));
        return;
    }
    log_info("engine %s %s, cgroup v%s, storage %s, API %s",
             docker_client_peer_is_podman(s->docker) ? "podman" : "docker",
             json_string_value(json_object_get(info, "ServerVersion")) ?: "?",
             json_string_value(json_object_get(info, "CgroupVersion")) ?: "?",
             json_string_value(json_object_get(info, "Driver")) ?: "?",
             docker_client_prefix(s->docker));
    check_runtimes(s, info);
    s->events_call = docker_events(s->docker, s->label_owner, on_event, on_events_end, s);
    start_reconcile(s);
}

static void
on_ping(int r, json_t *result, const struct err *e, void *userdata)
{
    struct server *s = userdata;

    s->engine_call = NULL;
    if (r < 0) {
        engine_down(s, "%s", err_msg(e));
        return;
    }
    s->engine_call = docker_info(s->docker, on_info, s);
}

static void
engine_connect(struct server *s)
{
    s->link = ENGINE_CONNECTING;
    s->engine_call = docker_ping(s->docker, on_ping, s);
}

static void
on_engine_retry(evutil_socket_t fd, short what, void *arg)
{
    struct server *s = arg;

    if (!s->stopping && s->link == ENGINE_DOWN) {
        engine_connect(s);
    }
}

/* ---- cron, pools, signals -------------------------------------------------------------------- */

/* Drain: wait for running executions until the deadline, then interrupt them and give their
 * answers DRAIN_CUT_MS to go out; then leave the loop. */
static void
drain_step(struct server *s)
{
    uint64_t now = time_now_ms();

    bool removing = false;

    for (size_t i = 0; i < s->n_pools; i++) {
        pool_tick(s->pools[i]); /* retries removals the engine budget held back */
        removing = removing || pool_removing(s->pools[i]);
    }
    if (!session_manager_busy(s->sessions) && !removing) {
        (void)event_base_loopexit(s->base, NULL);
        return;
    }
    if (now >= s->drain_deadline_ms && !s->drain_cut) {
        log_warn("drain deadline passed: interrupting running executions");
        session_manager_cut(s->sessions);
        s->drain_cut = true;
    }
    if (now >= s->drain_deadline_ms + DRAIN_CUT_MS) {
        log_warn("executions still running after the drain: leaving them to the next start");
        (void)event_base_loopexit(s->base, NULL);
    }
}

static void
on_alive(int r, json_t *result, const struct err *e, void *userdata)
{
    struct server *s = userdata;

    s->engine_call = NULL;
    if (r < 0 && s->link == ENGINE_UP) {
        engine_down(s, "the engine did not answer a liveness ping: %s", err_msg(e));
    }
}

static void
on_cron(evutil_socket_t fd, short what, void *arg)
{
    struct server *s = arg;
    uint64_t now;

    if (s->stopping) {
        drain_step(s);
        return;
    }
    notify_readiness(s);
    session_manager_tick(s->sessions);
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
        start_drift_check(s);
    }
    if (s->engine_call != NULL) {
        return; /* one link call at a time: a reconcile or ping is in flight */
    }
    if (now >= s->next_reconcile_ms) {
        start_reconcile(s);
    } else if (now >= s->next_ping_ms) {
        s->next_ping_ms = now + PING_MS;
        s->engine_call = docker_ping(s->docker, on_alive, s);
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

static bool
backend_engine_ok(void *userdata, char *why, size_t n)
{
    struct server *s = userdata;

    if (s->link == ENGINE_UP) {
        return true;
    }
    (void)snprintf(why, n, "%s", s->engine_why[0] ? s->engine_why : "connecting");
    return false;
}

static bool
backend_redis_ok(void *userdata, char *why, size_t n)
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
    } else {
        log_warn("redis unavailable: %s; reconnecting", why);
    }
}

/* ---- metrics --------------------------------------------------------------------------------- */

/* The "# HELP" and "# TYPE" lines of one family, then (when the family has no labels) its one
 * sample. Every helper returns < 0 once the buffer's cap is reached. */
static int
metric_family(struct buf *out, const char *name, const char *type, const char *help)
{
    return buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static int
metric_one(struct buf *out, const char *name, const char *type, const char *help, uint64_t v)
{
    if (metric_family(out, name, type, help) < 0) {
        return -ENOBUFS;
    }
    return buf_printf(out, "%s %llu\n", name, (unsigned long long)v);
}

/* Writes key="value" (escaped) into lbl, replacing what it held. */
static const char *
metric_label(struct buf *lbl, const char *key, const char *value)
{
    buf_reset(lbl);
    if (buf_printf(lbl, "%s=\"", key) < 0 || metrics_label_escape(lbl, value) < 0 ||
        buf_putc(lbl, '"') < 0) {
        buf_reset(lbl); /* a value over the label cap: the sample goes without labels */
    }
    return lbl->len > 0 ? lbl->buf : "";
}

static int
metrics_links(struct server *s, struct buf *out)
{
    struct docker_client_stats ds;
    struct store_redis_stats rs;

    docker_client_get_stats(s->docker, &ds);
    store_redis_get_stats(s->redis, &rs);
    if (metric_one(out, "sandpool_engine_requests_total", "counter",
                   "Requests sent to the container engine.", ds.requests) < 0 ||
        metric_one(out, "sandpool_engine_failures_total", "counter",
                   "Engine requests that failed (error answer, deadline, transport).",
                   ds.failures) < 0 ||
        metric_one(out, "sandpool_engine_up", "gauge", "1 while the engine answers.",
                   s->link == ENGINE_UP) < 0 ||
        metric_one(out, "sandpool_redis_up", "gauge", "1 while Redis is connected.",
                   store_redis_is_up(s->redis)) < 0 ||
        metric_one(out, "sandpool_redis_commands_total", "counter", "Commands sent to Redis.",
                   rs.commands) < 0 ||
        metric_one(out, "sandpool_redis_timeouts_total", "counter",
                   "Redis commands that passed their deadline.", rs.timeouts) < 0 ||
        metric_one(out, "sandpool_redis_errors_total", "counter",
                   "Redis commands answered with an error, a timeout or a lost connection.",
                   rs.errors) < 0) {
        return -ENOBUFS;
    }
    return 0;
}

static int
metrics_sessions(struct server *s, struct buf *out, const struct session_manager_stats *ss)
{
    if (metric_one(out, "sandpool_sessions", "gauge", "Sessions on this node.", ss->sessions) < 0 ||
        metric_one(out, "sandpool_sessions_busy", "gauge", "Sessions running an execution.",
                   ss->busy) < 0 ||
        metric_one(out, "sandpool_sessions_created_total", "counter", "Sessions created.",
                   ss->created_total) < 0 ||
        metric_one(out, "sandpool_sessions_ended_total", "counter",
                   "Sessions ended (deleted, expired or lost).", ss->ended_total) < 0 ||
        metric_one(out, "sandpool_sessions_reaped_total", "counter",
                   "Sessions ended by the idle and lifetime reaper.", ss->reaped_total) < 0 ||
        metric_one(out, "sandpool_sessions_reconnected_total", "counter",
                   "Sessions whose sandbox connection broke and was made again.",
                   ss->reconnected_total) < 0 ||
        metric_one(out, "sandpool_executions_started_total", "counter",
                   "Executions started by this daemon.", ss->executions_total) < 0 ||
        metric_family(out, "sandpool_executions_total", "counter",
                      "Executions started by this daemon that ended, by status.") < 0) {
        return -ENOBUFS;
    }
    for (int i = 0; i < SESSION_EXEC__COUNT; i++) {
        if (buf_printf(out, "sandpool_executions_total{status=\"%s\"} %llu\n",
                       session_exec_status_to_string((enum session_exec_status)i),
                       (unsigned long long)ss->executions_ended[i]) < 0) {
            return -ENOBUFS;
        }
    }
    if (metric_family(out, "sandpool_output_bytes_total", "counter",
                      "Output bytes received from sandboxes, by stream.") < 0 ||
        buf_printf(out,
                   "sandpool_output_bytes_total{stream=\"stdout\"} %llu\n"
                   "sandpool_output_bytes_total{stream=\"stderr\"} %llu\n",
                   (unsigned long long)ss->output_bytes[0],
                   (unsigned long long)ss->output_bytes[1]) < 0) {
        return -ENOBUFS;
    }
    return 0;
}

/* One family per pool statistic, each with a series per profile. */
static int
metrics_pools(struct server *s, struct buf *out, struct buf *lbl)
{
    static const char *const states[3] = {"ready", "starting", "bound"};
    int r = metric_family(out, "sandpool_pool_containers", "gauge",
                          "Containers of each profile's pool, by state.");

    for (size_t i = 0; r >= 0 && i < s->n_pools; i++) {
        struct pool_stats ps;
        const char *l = metric_label(lbl, "profile", pool_name(s->pools[i]));

        pool_get_stats(s->pools[i], &ps);
        unsigned v[3] = {ps.ready, ps.starting + ps.creating, ps.bound};
        for (size_t k = 0; r >= 0 && k < ELEMENTSOF(states); k++) {
            r = buf_printf(out, "sandpool_pool_containers{%s,state=\"%s\"} %u\n", l, states[k],
                           v[k]);
        }
    }
    if (r < 0 || metric_family(out, "sandpool_pool_warm_target", "gauge",
                               "Ready containers each pool keeps.") < 0) {
        return -ENOBUFS;
    }
    for (size_t i = 0; r >= 0 && i < s->n_pools; i++) {
        struct pool_stats ps;

        pool_get_stats(s->pools[i], &ps);
        r = buf_printf(out, "sandpool_pool_warm_target{%s} %u\n",
                       metric_label(lbl, "profile", pool_name(s->pools[i])), ps.warm_target);
    }
    if (r < 0 ||
        metric_family(out, "sandpool_pool_failures_total", "counter",
                      "Container creations or starts that failed (refill failures).") < 0) {
        return -ENOBUFS;
    }
    for (size_t i = 0; r >= 0 && i < s->n_pools; i++) {
        struct pool_stats ps;

        pool_get_stats(s->pools[i], &ps);
        r = buf_printf(out, "sandpool_pool_failures_total{%s} %llu\n",
                       metric_label(lbl, "profile", pool_name(s->pools[i])),
                       (unsigned long long)ps.failures_total);
    }
    return r < 0 ? -ENOBUFS : 0;
}

static int
metrics_latencies(struct server *s, struct buf *out, struct buf *lbl)
{
    static const char *const sources[2] = {"warm", "cold"};
    int r = metric_family(out, "sandpool_session_acquire_seconds", "histogram",
                          "Session create request to ready, by profile and whether a warm "
                          "container was taken.");

    for (size_t i = 0; r >= 0 && i < s->n_pools; i++) {
        const struct session_profile_stats *ps = session_manager_profile_stats(s->sessions, i);

        for (size_t k = 0; r >= 0 && k < ELEMENTSOF(sources); k++) {
            char l[640];

            (void)snprintf(l, sizeof(l), "%s,source=\"%s\"",
                           metric_label(lbl, "profile", pool_name(s->pools[i])), sources[k]);
            r = metrics_hist_write(out, "sandpool_session_acquire_seconds", l, &ps->acquire[k]);
        }
    }
    if (r < 0 || metric_family(out, "sandpool_execution_seconds", "histogram",
                               "Execution start to end, by profile.") < 0) {
        return -ENOBUFS;
    }
    for (size_t i = 0; r >= 0 && i < s->n_pools; i++) {
        r = metrics_hist_write(out, "sandpool_execution_seconds",
                               metric_label(lbl, "profile", pool_name(s->pools[i])),
                               &session_manager_profile_stats(s->sessions, i)->execution);
    }
    return r < 0 ? -ENOBUFS : 0;
}

/* Per tenant of the configuration: its sessions and running executions. */
static int
metrics_tenants(struct server *s, struct buf *out, struct buf *lbl)
{
    static const char *const names[2] = {"sandpool_tenant_sessions",
                                         "sandpool_tenant_running_executions"};
    static const char *const helps[2] = {"Sessions of each tenant (those being created included).",
                                         "Executions running in each tenant's sessions."};

    size_t n = s->cfg->n_tenants;
    const char **ids = xcalloc(n + 1, sizeof(*ids));
    unsigned *v[2] = {xcalloc(n + 1, sizeof(unsigned)), xcalloc(n + 1, sizeof(unsigned))};
    int r = 0;

    for (size_t i = 0; i < n; i++) {
        ids[i] = s->cfg->tenants[i].id;
    }
    session_manager_tenant_counts(s->sessions, ids, n, v[0], v[1]);
    for (size_t k = 0; k < ELEMENTSOF(names) && r == 0; k++) {
        r = metric_family(out, names[k], "gauge", helps[k]);
        for (size_t i = 0; i < n && r == 0; i++) {
            r = buf_printf(out, "%s{%s} %u\n", names[k], metric_label(lbl, "tenant", ids[i]),
                           v[k][i]);
        }
    }
    free(ids);
    free(v[0]);
    free(v[1]);
    return r < 0 ? -ENOBUFS : 0;
}

static int
metrics_http(struct server *s, struct buf *out)
{
    struct api_stats as;

    api_get_stats(s->api, &as);
    if (metric_family(out, "sandpool_file_bytes_total", "counter",
                      "Bytes moved by the files API, by direction.") < 0 ||
        buf_printf(out,
                   "sandpool_file_bytes_total{direction=\"upload\"} %llu\n"
                   "sandpool_file_bytes_total{direction=\"download\"} %llu\n",
                   (unsigned long long)as.upload_bytes,
                   (unsigned long long)as.download_bytes) < 0 ||
        metric_family(out, "sandpool_http_connections", "gauge",
                      "Client connections of the main listener: idle or busy (a request in "
                      "progress), lingering closes, and closed ones not freed yet.") < 0 ||
        buf_printf(out,
                   "sandpool_http_connections{state=\"idle\"} %u\n"
                   "sandpool_http_connections{state=\"busy\"} %u\n"
                   "sandpool_http_connections{state=\"lingering\"} %u\n"
                   "sandpool_http_connections{state=\"closing\"} %u\n",
                   as.conns_idle, as.conns_busy, as.conns_lingering, as.conns_closing) < 0 ||
        metric_one(out, "sandpool_http_connections_anonymous", "gauge",
                   "Client connections on which no valid token was seen yet.",
                   as.conns_anonymous) < 0 ||
        metric_one(out, "sandpool_http_connections_evicted_total", "counter",
                   "Idle connections closed to make room for a newcomer.",
                   as.conns_evicted_total) < 0 ||
        metric_one(out, "sandpool_http_connections_refused_total", "counter",
                   "Connections refused with 503: their address's anonymous share was busy.",
                   as.conns_refused_total) < 0 ||
        metric_one(out, "sandpool_http_lingers_skipped_total", "counter",
                   "Closes with an upload body unread that could not linger (no slot free).",
                   as.conns_linger_skipped_total) < 0 ||
        metric_family(out, "sandpool_file_operations", "gauge",
                      "Operations of the files API at the gate (files.max_inflight*): in flight "
                      "at the engine, or waiting.") < 0 ||
        buf_printf(out,
                   "sandpool_file_operations{state=\"inflight\"} %u\n"
                   "sandpool_file_operations{state=\"waiting\"} %u\n",
                   as.files_inflight, as.files_waiting) < 0 ||
        metric_one(out, "sandpool_file_operations_queued_total", "counter",
                   "File operations that had to wait at the gate.", as.files_queued_total) < 0 ||
        metric_one(out, "sandpool_file_operations_refused_total", "counter",
                   "File operations answered 429: they waited in vain, or their tenant had too "
                   "many waiting.",
                   as.files_refused_total) < 0) {
        return -ENOBUFS;
    }
    return 0;
}

/* Prometheus text exposition (format 0.0.4), in one pass into out, whose cap bounds it: what
 * does not fit is left out (the buffer is sized for thousands of series). Every family has its
 * HELP and TYPE lines and its samples together. */
static void
backend_metrics(void *userdata, bool tenants, struct buf *out)
{
    struct server *s = userdata;
    struct session_manager_stats ss;
    struct buf lbl = BUF_INIT(512); /* one escaped label pair */

    session_manager_get_stats(s->sessions, &ss);
    /* Stops at the first section that no longer fits the cap. */
    (void)(metrics_links(s, out) < 0 || metrics_sessions(s, out, &ss) < 0 ||
           metrics_pools(s, out, &lbl) < 0 || metrics_latencies(s, out, &lbl) < 0 ||
           (tenants && metrics_tenants(s, out, &lbl) < 0) || metrics_http(s, out) < 0);
    buf_done(&lbl);
}

static enum api_drain
backend_drain_state(void *userdata)
{
    struct server *s = userdata;

    return s->stopping  ? API_STOPPING
           : s->leaving ? API_LEAVING
           : s->drained ? API_DRAINED
                        : API_SERVING;
}

static void
backend_set_drained(void *userdata, bool drained)
{
    struct server *s = userdata;

    if (s->drained != drained) {
        log_info("%s by the admin: %s", drained ? "drained" : "undrained",
                 drained ? "no new sessions; existing ones go on until they end or go idle"
                         : "taking new sessions again");
    }
    s->drained = drained;
}

/* ---- policy drift ---------------------------------------------------------------------------- */

struct api_policy_wait {
    TAILQ_ENTRY(api_policy_wait) link;
    api_policy_cb *cb;
    void *arg;
};

static struct pool *
pool_of_container(struct server *s, const char *container_id)
{
    for (size_t i = 0; i < s->n_pools; i++) {
        if (pool_owns(s->pools[i], container_id)) {
            return s->pools[i];
        }
    }
    return NULL;
}

/* Ends what drifted: the session a container serves (or is being bound to: that create fails),
 * or the warm container itself, which the pool replaces. A container in no such state (already
 * being removed) needs nothing. */
static json_t *
quarantine(struct server *s, const struct drift_finding *f)
{
    char why[400], session[65] = "";
    struct pool *p = pool_of_container(s, f->container);
    enum pool_slot_state st =
        p != NULL ? pool_container_state(p, f->container) : POOL_SLOT__INVALID;
    const char *action = "none";

    (void)snprintf(why, sizeof(why), "quarantined: its limits drifted from profile '%s': %s",
                   f->profile->name, f->why);
    if (session_manager_quarantine(s->sessions, f->container, why, session, sizeof(session))) {
        action = "ended";
        log_warn("container ctr=%.12s session=%s %s", f->container, session, why);
    } else if (st == POOL_SLOT_READY || st == POOL_SLOT_CONNECTING) {
        (void)pool_container_gone(p, f->container);
        action = "removed";
        log_warn("warm container ctr=%.12s %s", f->container, why);
    } else if (st == POOL_SLOT_BOUND) {
        /* Bound, yet no session has it: one is being adopted. The next check ends it. */
        action = "deferred";
        log_warn("container ctr=%.12s %s; its session is not known yet: the next check ends it",
                 f->container, why);
    }
    audit_log("policy.quarantine", "daemon",
              OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s, s:s}", "container", f->container, "profile",
                                  f->profile->name, "session", session, "difference", f->why,
                                  "action", action)));
    return OOM_CHECK(json_pack("{s:s, s:s, s:o, s:[s], s:s}", "container", f->container, "profile",
                               f->profile->name, "session",
                               session[0] ? OOM_CHECK(json_string(session)) : json_null(),
                               "differences", f->why, "action", action));
}

static void
on_drift_done(size_t checked, size_t errors, const struct drift_finding *found, size_t n,
              void *userdata)
{
    struct server *s = userdata;
    json_t *drifted = OOM_CHECK(json_array());
    struct api_policy_wait *w;
    json_t *report;

    s->drift = NULL;
    s->next_drift_ms = time_now_ms() + (uint64_t)s->cfg->policy_check_s * 1000u;
    for (size_t i = 0; i < n; i++) {
        (void)json_array_append_new(drifted, quarantine(s, &found[i]));
    }
    if (errors > 0) {
        log_warn("policy check: %zu of %zu containers could not be inspected", errors,
                 errors + checked);
    }
    report = OOM_CHECK(json_pack("{s:I, s:I, s:o}", "checked", (json_int_t)checked, "errors",
                                 (json_int_t)errors, "drifted", drifted));
    while ((w = TAILQ_FIRST(&s->policy_waits)) != NULL) {
        TAILQ_REMOVE(&s->policy_waits, w, link);
        w->cb(report, w->arg);
        free(w);
    }
    json_decref(report);
}

static void
start_drift_check(struct server *s)
{
    s->drift = drift_check_start(s->base, s->docker, s->pools, s->n_pools, on_drift_done, s);
}

static struct api_policy_wait *
backend_policy_check(void *userdata, api_policy_cb *cb, void *arg)
{
    struct server *s = userdata;
    struct api_policy_wait *w = xcalloc(1, sizeof(*w));

    w->cb = cb;
    w->arg = arg;
    TAILQ_INSERT_TAIL(&s->policy_waits, w, link);
    if (s->drift == NULL) {
        start_drift_check(s);
    }
    return w;
}

static void
backend_policy_cancel(void *userdata, struct api_policy_wait *w)
{
    struct server *s = userdata;

    TAILQ_REMOVE(&s->policy_waits, w, link);
    free(w);
}

/* Tells the service manager (sd_notify) state; each failure is logged once. */
static void
notify(struct server *s, const char *state)
{
    int r;

    if (!s->notify) {
        return;
    }
    r = sdnotify_send(state);
    if (r < 0 && !s->notify_failed) {
        /* Logged once; later ones are tried all the same: a watchdog that stopped pinging
         * after one lost datagram would have systemd kill a healthy daemon. */
        log_warn("cannot notify the service manager: %s, ignoring", strerror(-r));
    }
    s->notify_failed = r < 0;
}

/* STATUS= for `systemctl status`, sent when what readyz would answer changes (the cron runs it). */
static void
notify_readiness(struct server *s)
{
    char why[192] = "";
    char state[256];
    bool ready;

    if (!s->notify) {
        return;
    }
    ready = backend_engine_ok(s, why, sizeof(why)) && backend_redis_ok(s, why, sizeof(why)) &&
            !s->drained && !s->leaving;
    for (size_t i = 0; ready && i < s->n_pools; i++) {
        struct pool_stats st;

        pool_get_stats(s->pools[i], &st);
        if (!st.warm_reached) {
            ready = false;
            (void)snprintf(why, sizeof(why), "pool %s warming", pool_name(s->pools[i]));
        }
    }
    if ((int)ready == s->notified_ready) {
        return;
    }
    s->notified_ready = ready;
    if (ready) {
        (void)snprintf(state, sizeof(state), "STATUS=ready: %zu profile(s) warm", s->n_pools);
    } else {
        if (why[0] == '\0') {
            (void)snprintf(why, sizeof(why), "%s",
                           s->drained ? "drained by the admin" : "shutting down");
        }
        (void)snprintf(state, sizeof(state), "STATUS=not ready: %s", why);
    }
    notify(s, state);
}

/* Stop accepting, drain running executions up to drain_timeout_s, remove the warm containers,
 * then leave the loop (drain_step). */
static void
begin_drain(struct server *s, const char *why)
{
    log_info("%s: draining (up to %u s for running executions); sessions stay for the next "
             "start, warm containers are removed",
             why, s->cfg->drain_timeout_s);
    notify(s, "STATUS=draining");
    s->leaving = false;
    s->stopping = true;
    s->drain_deadline_ms = time_now_ms() + (uint64_t)s->cfg->drain_timeout_s * 1000u;
    api_stop_listening(s->api);
    docker_call_cancel(s->engine_call);
    s->engine_call = NULL;
    docker_call_cancel(s->events_call);
    s->events_call = NULL;
    /* Warm containers go: the next start creates fresh ones (it never reuses unbound ones). */
    for (size_t i = 0; i < s->n_pools; i++) {
        pool_shutdown(s->pools[i]);
    }
    drain_step(s);
}

static void
on_leave_timer(evutil_socket_t fd, short what, void *arg)
{
    begin_drain(arg, "shutdown delay over");
}

/* Kubernetes' order: readyz turns 503 at once, so that the endpoint is taken out of rotation,
 * while clients that already hold sessions (their requests may still be on their way) are served
 * for shutdown_delay_s; then the drain. SIGINT (an operator's Ctrl-C: nobody routes to us by
 * readiness) and a delay of 0 drain at once. A second signal exits at once. */
static void
on_stop_signal(evutil_socket_t sig, short what, void *arg)
{
    struct server *s = arg;
    const char *name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    struct timeval tv;
    char why[64];

    if (s->stopping || s->leaving) {
        log_warn("second stop signal: exiting now");
        (void)event_base_loopbreak(s->base);
        return;
    }
    notify(s, "STOPPING=1");
    if (sig == SIGINT || s->cfg->shutdown_delay_s == 0) {
        (void)snprintf(why, sizeof(why), "%s received", name);
        begin_drain(s, why);
        return;
    }
    log_info("SIGTERM received: readyz answers 503 and no session is created from now on; "
             "existing sessions are served for %u s (shutdown_delay_s), then the drain",
             s->cfg->shutdown_delay_s);
    notify(s, "STATUS=shutting down: not ready, serving existing sessions");
    s->leaving = true;
    s->notified_ready = 0;
    time_tv_from_ms(&tv, (uint64_t)s->cfg->shutdown_delay_s * 1000u);
    (void)evtimer_add(s->leave_timer, &tv);
}

/* Applies the reloadable part of fresh (see server.h); fresh keeps the old tenants. */
static void
apply_reload(struct server *s, struct cfg *fresh)
{
    size_t changed = 0;

    cfg_swap_tenants(s->cfg, fresh);
    if (strcmp(s->cfg->admin_token_sha256, fresh->admin_token_sha256) != 0) {
        char *t = s->cfg->admin_token_sha256;

        s->cfg->admin_token_sha256 = fresh->admin_token_sha256;
        fresh->admin_token_sha256 = t;
        log_info("reload: the admin token changed");
    }
    if (strcmp(s->cfg->metrics_token_sha256, fresh->metrics_token_sha256) != 0) {
        char *t = s->cfg->metrics_token_sha256;

        s->cfg->metrics_token_sha256 = fresh->metrics_token_sha256;
        fresh->metrics_token_sha256 = t;
        log_info("reload: the metrics token changed");
    }
    for (size_t i = 0; i < fresh->n_profiles; i++) {
        const struct cfg_profile *np = &fresh->profiles[i];
        struct pool *pool = pool_by_name(s, np->name);
        struct pool_stats st;

        if (pool == NULL) {
            log_warn("reload: profile '%s' is new: it takes a restart", np->name);
            continue;
        }
        pool_get_stats(pool, &st);
        if (st.warm_target != MIN(np->warm, st.max)) {
            log_info("reload: profile '%s' warm target %u -> %u", np->name, st.warm_target,
                     MIN(np->warm, st.max));
            pool_set_warm(pool, np->warm);
            changed++;
        }
    }
    for (size_t i = 0; i < s->cfg->n_profiles; i++) {
        if (cfg_profile_find(fresh, s->cfg->profiles[i].name) == NULL) {
            log_warn("reload: profile '%s' is gone from the configuration: it takes a restart",
                     s->cfg->profiles[i].name);
        }
    }
    log_info("configuration reloaded: %zu tenants, %zu warm targets changed; other settings "
             "take a restart",
             s->cfg->n_tenants, changed);
}

static void
on_hup(evutil_socket_t sig, short what, void *arg)
{
    struct server *s = arg;
    struct cfg *fresh;

    if (s->reload == NULL) {
        log_info("SIGHUP received: no configuration to reload, ignoring");
        return;
    }
    log_info("SIGHUP received: reloading the configuration");
    if (!s->stopping && !s->leaving) { /* after STOPPING=1, no other state */
        notify(s, "RELOADING=1\nSTATUS=reloading the configuration");
    }
    if (s->cfg->audit_file[0] != '\0') {
        struct err e = {0};

        /* After logrotate moved it: the same path, a new file. */
        if (audit_open(s->cfg->audit_file, &e) < 0) {
            log_error("cannot reopen the audit file: %s", e.msg);
        }
    }
    fresh = s->reload(s->reload_userdata);
    if (fresh == NULL) {
        log_error("reload failed (see above): the running configuration stays");
        if (!s->stopping && !s->leaving) {
            notify(s, "READY=1\nSTATUS=reload failed: the running configuration stays");
        }
        return;
    }
    apply_reload(s, fresh);
    cfg_free(fresh);
    if (!s->stopping && !s->leaving) {
        notify(s, "READY=1\nSTATUS=configuration reloaded");
        s->notified_ready = -1; /* the next readiness change is told again */
    }
}

static void
on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    notify(arg, "WATCHDOG=1");
}

void
server_set_reload(struct server *s, server_config_loader *load, void *userdata)
{
    s->reload = load;
    s->reload_userdata = userdata;
}

int
server_new(struct cfg *cfg, struct server **ret, struct err *reterr)
{
    struct server *s = xcalloc(1, sizeof(*s));
    struct cfg_redis_addr raddr;
    struct timeval tv;
    int r;

    s->cfg = cfg;
    s->base = OOM_CHECK(event_base_new());
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
    s->sessions = session_manager_new(s->base, cfg, s->pools, s->n_pools, s->redis);
    session_manager_set_notify(s->sessions, on_session_event, s);
    session_manager_set_audit(s->sessions, api_session_audit, NULL);
    s->backend = (struct api_backend){
        .pools = s->pools,
        .n_pools = s->n_pools,
        .sessions = s->sessions,
        .engine = s->docker,
        .engine_ok = backend_engine_ok,
        .redis_ok = backend_redis_ok,
        .drain_state = backend_drain_state,
        .set_drained = backend_set_drained,
        .policy_check = backend_policy_check,
        .policy_cancel = backend_policy_cancel,
        .metrics = backend_metrics,
        .userdata = s,
    };
    r = api_new(s->base, cfg, &s->backend, &s->api, reterr);
    if (r < 0) {
        server_free(s);
        return r;
    }
    s->cron = OOM_CHECK(event_new(s->base, -1, EV_PERSIST, on_cron, s));
    time_tv_from_ms(&tv, CRON_MS);
    (void)event_add(s->cron, &tv);
    s->engine_retry = OOM_CHECK(evtimer_new(s->base, on_engine_retry, s));
    s->leave_timer = OOM_CHECK(evtimer_new(s->base, on_leave_timer, s));
    s->notify = getenv("NOTIFY_SOCKET") != NULL;
    s->notified_ready = -1;
    s->sig_term = OOM_CHECK(evsignal_new(s->base, SIGTERM, on_stop_signal, s));
    s->sig_int = OOM_CHECK(evsignal_new(s->base, SIGINT, on_stop_signal, s));
    s->sig_hup = OOM_CHECK(evsignal_new(s->base, SIGHUP, on_hup, s));
    (void)event_add(s->sig_term, NULL);
    (void)event_add(s->sig_int, NULL);
    (void)event_add(s->sig_hup, NULL);
    *ret = s;
    return 0;
}

int
server_run(struct server *s)
{
    uint64_t watchdog_usec;

    log_info("listening on %s, node '%s', engine %s, %zu profile(s)", s->cfg->listen,
             s->cfg->node_id, s->cfg->engine_socket, s->n_pools);
    if (s->notify && !sdnotify_supported()) {
        log_warn("NOTIFY_SOCKET is set but this build has no libsystemd: READY=1 is never sent "
                 "(a Type=notify unit times out), ignoring");
    }
    /* READY=1 once listening, not once readyz turns 200: the engine or Redis being down at boot
     * is a state readyz reports, not a failed start for the service manager to restart. */
    notify(s, "READY=1\nSTATUS=listening; warming pools");
    watchdog_usec = s->notify ? sdnotify_watchdog_usec() : 0;
    if (watchdog_usec > 0) {
        struct timeval tv;

        time_tv_from_ms(&tv, (unsigned)MAX(watchdog_usec / 2000, 100));
        s->watchdog = OOM_CHECK(event_new(s->base, -1, EV_PERSIST, on_watchdog, s));
        (void)evtimer_add(s->watchdog, &tv);
        log_info("watchdog: WATCHDOG=1 to the service manager every %llu ms",
                 (unsigned long long)MAX(watchdog_usec / 2000, 100));
    }
    engine_connect(s);
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
    docker_call_cancel(s->engine_call);
    docker_call_cancel(s->events_call);
    drift_check_cancel(s->drift);
    while (!TAILQ_EMPTY(&s->orphans)) {
        orphan_free(TAILQ_FIRST(&s->orphans));
    }
    api_free(s->api); /* closing its connections cancels the admin requests' policy waits */
    while (!TAILQ_EMPTY(&s->policy_waits)) {
        struct api_policy_wait *w = TAILQ_FIRST(&s->policy_waits);

        TAILQ_REMOVE(&s->policy_waits, w, link);
        free(w);
    }
    session_manager_free(s->sessions);
    for (size_t i = 0; i < s->n_pools; i++) {
        pool_free(s->pools[i]);
    }
    free(s->pools);
    store_redis_free(s->redis);
    docker_client_free(s->docker);
    if (s->cron != NULL) {
        event_free(s->cron);
        event_free(s->engine_retry);
        event_free(s->leave_timer);
        event_free(s->sig_term);
        event_free(s->sig_int);
        event_free(s->sig_hup);
    }
    if (s->watchdog != NULL) {
        event_free(s->watchdog);
    }
    event_base_free(s->base);
    pool_uids_free(s->uids); /* after the pools and orphans that held its pairs */
    cfg_free(s->cfg);
    free(s);
    return NULL;
}
