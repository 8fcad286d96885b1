/* The daemon's life with its service manager and its operator; see server-internal.h.
 *
 * Stop: on SIGTERM the server first answers readyz 503 for shutdown_delay_s while it still serves
 * (Kubernetes takes the endpoint out of rotation meanwhile; no new sessions), then stops
 * listening, drains running executions and leaves its sessions' containers for the next start.
 * SIGINT and a delay of 0 drain at once; a second signal exits at once. Under systemd
 * (Type=notify) it sends READY=1 once listening, STOPPING=1 at the stop signal, STATUS= when
 * readiness changes, RELOADING=1 around a reload and WATCHDOG=1 when asked.
 *
 * Reload (SIGHUP): the audit file is reopened, a new configuration is loaded and validated from
 * the same sources as at start, and swapped in as config.h ("reload") describes: every change
 * is logged by name, those of reloadable rows applied (the engine and Redis deadlines, the engine
 * budget, the log level and format, tokens, tenants, the profiles' reloadable rows and warm
 * targets, drain_timeout_s), the others kept at their running value. A configuration that fails
 * to load or validate changes nothing. Requests in flight are unaffected: the session manager,
 * the API, the pools and the sessions read the running struct cfg (whose address and profiles
 * stay) where they use a value, and keep no pointer into its tenants across a loop turn. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <event2/event.h>

#include "server-internal.h"

#define LOG_MODULE "server"
#include "audit/audit.h"
#include "cluster/registry.h"
#include "docker/client.h"
#include "egress/proxy.h"
#include "http/http.h"
#include "log/log.h"
#include "pool/pool.h"
#include "session/session.h"
#include "store/redis.h"
#include "util/macro.h"
#include "util/sdnotify.h"
#include "util/time.h"

/* Tells the service manager (sd_notify) state; each failure is logged once. */
void
server_notify(struct server *s, const char *state)
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
void
server_notify_readiness(struct server *s)
{
    char why[192] = "";
    char state[256];
    bool ready;

    if (!s->notify) {
        return;
    }
    ready = server_engine_ok(s, why, sizeof(why)) && server_redis_ok(s, why, sizeof(why)) &&
            !s->drained && !s->leaving;
    if (ready && s->registry != NULL && !registry_listed(s->registry)) {
        ready = false;
        (void)snprintf(why, sizeof(why), "the node registry not read yet");
    }
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
    server_notify(s, state);
}

/* Drain: wait for running executions until the deadline, then interrupt them and give their
 * answers DRAIN_CUT_MS to go out; then leave the loop. */
void
server_drain_step(struct server *s)
{
    uint64_t now = time_now_ms();

    bool removing = false;

    for (size_t i = 0; i < s->n_pools; i++) {
        pool_tick(s->pools[i]); /* retries removals the engine budget held back */
        removing = removing || pool_removing(s->pools[i]);
    }
    if (!session_manager_busy(s->sessions) && !removing) {
        if (registry_stop(s->registry)) { /* else its last heartbeat is on its way */
            (void)event_base_loopexit(s->base, NULL);
        }
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

/* Stop accepting, drain running executions up to drain_timeout_s, remove the warm containers,
 * then leave the loop (drain_step). */
static void
begin_drain(struct server *s, const char *why)
{
    log_info("%s: draining (up to %u s for running executions); sessions stay for the next "
             "start, warm containers are removed",
             why, s->cfg->drain_timeout_s);
    server_notify(s, "STATUS=draining");
    s->leaving = false;
    s->stopping = true;
    s->drain_deadline_ms = time_now_ms() + (uint64_t)s->cfg->drain_timeout_s * 1000u;
    http_stop_listening(s->api);
    server_engine_cancel(s);
    /* Warm containers go: the next start creates fresh ones (it never reuses unbound ones). */
    for (size_t i = 0; i < s->n_pools; i++) {
        pool_shutdown(s->pools[i]);
    }
    server_drain_step(s);
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
    server_notify(s, "STOPPING=1");
    if (sig == SIGINT || s->cfg->shutdown_delay_s == 0) {
        (void)snprintf(why, sizeof(why), "%s received", name);
        begin_drain(s, why);
        return;
    }
    log_info("SIGTERM received: readyz answers 503 and no session is created from now on; "
             "existing sessions are served for %u s (shutdown_delay_s), then the drain",
             s->cfg->shutdown_delay_s);
    server_notify(s, "STATUS=shutting down: not ready, serving existing sessions");
    s->leaving = true;
    s->notified_ready = 0;
    time_tv_from_ms(&tv, (uint64_t)s->cfg->shutdown_delay_s * 1000u);
    (void)evtimer_add(s->leave_timer, &tv);
}

enum http_drain
server_drain_state(void *userdata)
{
    struct server *s = userdata;

    return s->stopping  ? HTTP_STOPPING
           : s->leaving ? HTTP_LEAVING
           : s->drained ? HTTP_DRAINED
                        : HTTP_SERVING;
}

void
server_set_drained(void *userdata, bool drained)
{
    struct server *s = userdata;

    if (s->drained != drained) {
        log_info("%s by the admin: %s", drained ? "drained" : "undrained",
                 drained ? "no new sessions; existing ones go on until they end or go idle"
                         : "taking new sessions again");
    }
    s->drained = drained;
}

/* ---- reload ---------------------------------------------------------------------------------- */

/* Logs each change by name: applied, or kept at its running value until a restart. Returns the
 * number of those that need a restart. */
static size_t
log_changes(const struct cfg_diff *d)
{
    size_t kept = 0;

    for (size_t i = 0; i < d->n; i++) {
        const struct cfg_change *c = &d->changes[i];

        if (c->reloadable) {
            log_info("config: %s changed (%s): applied", c->name, c->detail);
        } else {
            log_warn("config: %s changed (%s); needs a restart, keeping the old value", c->name,
                     c->detail);
            kept++;
        }
    }
    return kept;
}

/* Tells the modules that copied a reloadable value at start what the running configuration holds
 * now (the log: reload_swap(), last); the others read it where they use it. Returns the number
 * of warm targets changed. */
static size_t
apply_to_modules(struct server *s, const struct cfg_diff *d)
{
    const struct cfg *c = s->cfg;
    size_t changed = 0;

    docker_client_set_timeout_ms(s->docker, c->engine_timeout_ms);
    store_redis_set_timeout(s->redis, c->redis_timeout_ms);
    s->budget.max = c->engine_max_concurrency; /* a lowered one: the work in flight goes on */
    for (size_t i = 0; i < d->n; i++) {
        if (strcmp(d->changes[i].name, "admin_token_sha256") == 0) {
            log_info("reload: the admin token changed");
        } else if (strcmp(d->changes[i].name, "metrics_token_sha256") == 0) {
            log_info("reload: the metrics token changed");
        }
    }
    /* Every pool's warm target is the configuration's again, an admin's resize included; not
     * while draining (the pools were told to make nothing more: containers made now would
     * outlive the daemon). */
    for (size_t i = 0; !s->stopping && i < s->n_pools; i++) {
        const struct cfg_profile *p = pool_profile(s->pools[i]);
        struct pool_stats st;

        pool_get_stats(s->pools[i], &st);
        if (st.warm_target != MIN(p->warm, p->max)) {
            log_info("reload: profile '%s' warm target %u -> %u", p->name, st.warm_target,
                     MIN(p->warm, p->max));
            pool_set_warm(s->pools[i], p->warm);
            changed++;
        }
    }
    return changed;
}

/* The descriptors this configuration can hold at once, whatever its clients and sandboxes do:
 * every bound below is enforced by the daemon (docs/security.md). */
unsigned long
server_descriptor_budget(const struct cfg *c)
{
    unsigned long n = 32; /* stdio, the loop, signals, Redis, the audit file, libraries */
    unsigned long containers = 0, gates = 0;

    for (size_t i = 0; i < c->n_profiles; i++) {
        containers += c->profiles[i].max;
        gates += c->profiles[i].egress != NULL ? c->profiles[i].max : 0;
    }
    n += egress_descriptor_budget(gates, c->egress_max_connections);
    n += c->http_max_connections + HTTP_CONNS_SLACK; /* slots (lingering ones within) */
    if (c->http_health_listen[0] != '\0') {
        n += HTTP_HEALTH_MAX_CONNECTIONS + HTTP_CONNS_SLACK;
    }
    n += 2 * containers;            /* each one's kernel stream, and a relay's exec during a
                                     * reconnection */
    n += c->files_max_inflight;     /* a file operation's exec stream each */
    n += c->engine_max_concurrency; /* creations, starts, removals */
    n += 32; /* the engine client's kept connections (CURLMOPT_MAXCONNECTS) */
    return n;
}

/* The open files limit, 0 when unlimited or unknown. */
static unsigned long
nofile_limit(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY) {
        return 0;
    }
    return (unsigned long)rl.rlim_cur;
}

/* Swaps fresh (loaded and validated, stolen) in; see config.h ("reload"). Returns < 0 when the
 * mix of its reloadable rows and the running values of the others does not validate: nothing
 * changed then. */
static int
reload_swap(struct server *s, struct cfg *fresh)
{
    struct cfg_diff d;
    struct err e = {0};
    size_t kept, warm;
    unsigned long nofile, budget;

    cfg_diff(s->cfg, fresh, &d);
    cfg_reload_keep(fresh, s->cfg);
    if (cfg_validate(fresh, &e) < 0) {
        log_error("reload failed: with the settings that need a restart kept at their running "
                  "values, the new configuration is invalid: %s; the running configuration stays",
                  e.msg);
        cfg_diff_done(&d);
        cfg_free(fresh);
        return -EINVAL;
    }
    nofile = nofile_limit();
    budget = server_descriptor_budget(fresh);
    if (nofile > 0 && nofile < budget) {
        /* As at start (cmd/sandpoold/main.c): past the limit, accept() and the engine's sockets
         * would fail for everyone. */
        log_error(
            "reload failed: the open files limit (%lu) is below the %lu descriptors the new "
            "configuration may hold (http.max_connections, the profiles' max, "
            "files.max_inflight, engine.max_concurrency, egress.max_connections); the running "
            "configuration stays",
            nofile, budget);
        cfg_diff_done(&d);
        cfg_free(fresh);
        return -EMFILE;
    }
    kept = log_changes(&d);
    cfg_reload_commit(s->cfg, fresh);
    cfg_free(fresh); /* it holds the old values now */
    warm = apply_to_modules(s, &d);
    log_info("configuration reloaded: %zu tenants, %zu changes applied (%zu warm targets), %zu "
             "need a restart",
             s->cfg->n_tenants, d.n - kept, warm, kept);
    /* Last: the lines of this reload are all in the format they began in. */
    log_setup(log_level_from_string(s->cfg->log_level), log_format_from_string(s->cfg->log_format));
    cfg_diff_done(&d);
    return 0;
}

static void
on_hup(evutil_socket_t sig, short what, void *arg)
{
    struct server *s = arg;
    bool tell = !s->stopping && !s->leaving; /* after STOPPING=1, no other state */
    struct cfg *fresh;

    if (s->reload == NULL) {
        log_info("SIGHUP received: no configuration to reload, ignoring");
        return;
    }
    log_info("SIGHUP received: reloading the configuration");
    if (tell) {
        server_notify(s, "RELOADING=1\nSTATUS=reloading the configuration");
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
    }
    if (fresh == NULL || reload_swap(s, fresh) < 0) {
        if (tell) {
            server_notify(s, "READY=1\nSTATUS=reload failed: the running configuration stays");
        }
        return;
    }
    if (tell) {
        server_notify(s, "READY=1\nSTATUS=configuration reloaded");
        s->notified_ready = -1; /* the next readiness change is told again */
    }
}

void
server_set_reload(struct server *s, server_config_loader *load, void *userdata)
{
    s->reload = load;
    s->reload_userdata = userdata;
}

/* ---- set-up ---------------------------------------------------------------------------------- */

static void
on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    server_notify(arg, "WATCHDOG=1");
}

void
server_watchdog_start(struct server *s)
{
    uint64_t watchdog_usec = s->notify ? sdnotify_watchdog_usec() : 0;
    struct timeval tv;

    if (watchdog_usec == 0) {
        return;
    }
    time_tv_from_ms(&tv, (unsigned)MAX(watchdog_usec / 2000, 100));
    s->watchdog = OOM_CHECK(event_new(s->base, -1, EV_PERSIST, on_watchdog, s));
    (void)evtimer_add(s->watchdog, &tv);
    log_info("watchdog: WATCHDOG=1 to the service manager every %llu ms",
             (unsigned long long)MAX(watchdog_usec / 2000, 100));
}

void
server_lifecycle_init(struct server *s)
{
    s->leave_timer = OOM_CHECK(evtimer_new(s->base, on_leave_timer, s));
    s->notify = getenv("NOTIFY_SOCKET") != NULL;
    s->notified_ready = -1;
    s->sig_term = OOM_CHECK(evsignal_new(s->base, SIGTERM, on_stop_signal, s));
    s->sig_int = OOM_CHECK(evsignal_new(s->base, SIGINT, on_stop_signal, s));
    s->sig_hup = OOM_CHECK(evsignal_new(s->base, SIGHUP, on_hup, s));
    (void)event_add(s->sig_term, NULL);
    (void)event_add(s->sig_int, NULL);
    (void)event_add(s->sig_hup, NULL);
}

void
server_lifecycle_free(struct server *s)
{
    if (s->leave_timer != NULL) {
        event_free(s->leave_timer);
        event_free(s->sig_term);
        event_free(s->sig_int);
        event_free(s->sig_hup);
    }
    if (s->watchdog != NULL) {
        event_free(s->watchdog);
    }
}
