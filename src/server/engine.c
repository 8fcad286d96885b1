/* The engine link; see server-internal.h.
 *
 * Engine link state machine (edge-logged here, not in the modules):
 *   DOWN --ping ok--> (info, then list+reconcile) --> UP (events stream open)
 *   UP --events stream ends / reconcile or liveness ping fails--> DOWN, retried with backoff
 *   250 ms .. 5 s.
 * The engine events stream is only a hint: a full list + reconcile runs after every (re)connect
 * and every 30 s (docs/internals/engine.md §3). One link call (ping, info, list) is in flight at
 * a time, besides the events stream.
 *
 * Reconcile: every container labelled with this node is tracked by a pool, adopted into one
 * (running, matching its profile's policy) or removed as an orphan; the sessions are reconciled
 * against the same list. The Engine's JSON (list entries, events) is read here and only here in
 * src/server/. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "server-internal.h"

#define LOG_MODULE "server"
#include "docker/api.h"
#include "docker/client.h"
#include "docker/json.h"
#include "docker/list.h"
#include "docker/policy.h"
#include "docker/quirks.h"
#include "log/log.h"
#include "pool/pool.h"
#include "session/session.h"
#include "util/macro.h"
#include "util/time.h"

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
    server_engine_cancel(s);
    if (!s->stopping) {
        struct timeval tv;

        s->engine_backoff_ms =
            MIN(MAX(s->engine_backoff_ms * 2, ENGINE_RETRY_MIN), ENGINE_RETRY_MAX);
        time_tv_from_ms(&tv, s->engine_backoff_ms);
        (void)evtimer_add(s->engine_retry, &tv);
    }
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
reconcile_list(struct server *s, const struct docker_container_list *list, uint64_t listed_at_ms)
{
    struct orphan *o, *next;

    TAILQ_FOREACH (o, &s->orphans, link) {
        o->listed = o->call != NULL; /* one being removed is judged by its removal */
    }
    for (size_t i = 0; i < docker_container_list_size(list); i++) {
        const struct docker_container_summary *c = docker_container_list_at(list, i);
        struct pool *p = server_pool_by_name(s, c->profile);

        if (p != NULL &&
            (pool_owns(p, c->id) || (c->slot[0] != '\0' && pool_knows_slot(p, c->slot)))) {
            continue;
        }
        if (p != NULL && pool_adopt(p, c) == 0) {
            log_info("adopting container ctr=%.12s profile='%s'", c->id, pool_name(p));
            continue;
        }
        remove_orphan(s, c->id, c->uid);
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
    server_egress_sweep(s, list);
}

static void
on_event(json_t *obj, void *userdata)
{
    struct server *s = userdata;
    struct docker_event ev;
    struct err e = {0};

    if (docker_event_decode(obj, &ev, &e) < 0) {
        log_debug("engine event skipped: %s", err_msg(&e));
        return;
    }
    if (ev.action == DOCKER_EVENT_OOM) { /* comes before its "die" */
        session_manager_container_oom(s->sessions, ev.actor_id);
        return;
    }
    if (docker_event_action_ends_container(ev.action)) {
        session_manager_container_gone(s->sessions, ev.actor_id, ev.action == DOCKER_EVENT_DIE);
        for (size_t i = 0; i < s->n_pools; i++) {
            if (pool_container_gone(s->pools[i], ev.actor_id)) {
                log_info("container ctr=%.12s: %s", ev.actor_id,
                         docker_event_action_to_string(ev.action));
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
    struct docker_container_list *list = NULL;
    struct err e2 = {0};

    s->engine_call = NULL;
    if (r < 0) {
        engine_down(s, "listing containers failed: %s", err_msg(e));
        return;
    }
    if (docker_container_list_decode(result, &list, &e2) < 0) {
        engine_down(s, "listing containers failed: %s", err_msg(&e2));
        return;
    }
    reconcile_list(s, list, s->list_sent_ms);
    s->next_reconcile_ms = time_now_ms() + RECONCILE_MS;
    if (s->link != ENGINE_UP) {
        s->link = ENGINE_UP;
        s->engine_backoff_ms = 0;
        s->engine_why[0] = '\0';
        log_info("engine ready: API %s, %zu containers of node '%s' found",
                 docker_client_prefix(s->docker), docker_container_list_size(list),
                 s->cfg->node_id);
        for (size_t i = 0; i < s->n_pools; i++) {
            pool_engine_back(s->pools[i]);
        }
    }
    docker_container_list_free(list);
    for (size_t i = 0; i < s->n_pools; i++) {
        pool_tick(s->pools[i]);
    }
}

void
server_engine_reconcile(struct server *s)
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
        struct pool *pool = server_pool_by_name(s, p->name);
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
    server_engine_reconcile(s);
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

void
server_engine_connect(struct server *s)
{
    s->link = ENGINE_CONNECTING;
    s->engine_call = docker_ping(s->docker, on_ping, s);
}

static void
on_engine_retry(evutil_socket_t fd, short what, void *arg)
{
    struct server *s = arg;

    if (!s->stopping && s->link == ENGINE_DOWN) {
        server_engine_connect(s);
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

bool
server_engine_ok(void *userdata, char *why, size_t n)
{
    struct server *s = userdata;

    if (s->link == ENGINE_UP) {
        return true;
    }
    (void)snprintf(why, n, "%s", s->engine_why[0] ? s->engine_why : "connecting");
    return false;
}

void
server_engine_ping(struct server *s)
{
    s->next_ping_ms = time_now_ms() + PING_MS;
    s->engine_call = docker_ping(s->docker, on_alive, s);
}

void
server_engine_cancel(struct server *s)
{
    docker_call_cancel(s->engine_call);
    s->engine_call = NULL;
    docker_call_cancel(s->events_call);
    s->events_call = NULL;
}

void
server_engine_init(struct server *s)
{
    s->engine_retry = OOM_CHECK(evtimer_new(s->base, on_engine_retry, s));
}

void
server_engine_free(struct server *s)
{
    server_engine_cancel(s);
    if (s->engine_retry != NULL) {
        event_free(s->engine_retry);
        s->engine_retry = NULL;
    }
    while (!TAILQ_EMPTY(&s->orphans)) {
        orphan_free(TAILQ_FIRST(&s->orphans));
    }
}
