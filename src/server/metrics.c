/* /metrics: the Prometheus text exposition (format 0.0.4) of every module's counters and gauges,
 * in one pass into the caller's bounded buffer: what does not fit is left out (the buffer is
 * sized for thousands of series). Every family has its HELP and TYPE lines and its samples
 * together. The fixed families are rows of tables (struct metric: a name, a type, a help text
 * and up to METRIC_SERIES samples), filled from the modules' stats and written by one loop; the
 * families with a series per profile or tenant have their own writers. Every writer returns
 * < 0 once the buffer's cap is reached, and rendering stops there. */
#include "metrics/metrics.h"

#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit.h"
#include "cluster/registry.h"
#include "cluster/route.h"
#include "docker/client.h"
#include "e2b/e2b.h"
#include "egress/proxy.h"
#include "http/http.h"
#include "mcp/mcp.h"
#include "pool/pool.h"
#include "server-internal.h"
#include "session/session.h"
#include "snapshot/snapshot.h"
#include "store/redis.h"
#include "util/buf.h"
#include "util/macro.h"

#define METRIC_SERIES 10

/* One family: without labels (series[0].label NULL) its one sample; otherwise one sample per
 * series, each label a ready key="value" pair. */
struct metric {
    const char *name, *type, *help;
    struct {
        const char *label;
        uint64_t v;
    } series[METRIC_SERIES];
};

/* The "# HELP" and "# TYPE" lines of one family. */
static int
metric_family(struct buf *out, const char *name, const char *type, const char *help)
{
    return buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static int
metrics_write(struct buf *out, const struct metric *tab, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct metric *m = &tab[i];

        if (metric_family(out, m->name, m->type, m->help) < 0) {
            return -ENOBUFS;
        }
        if (m->series[0].label == NULL) {
            if (buf_printf(out, "%s %llu\n", m->name, (unsigned long long)m->series[0].v) < 0) {
                return -ENOBUFS;
            }
            continue;
        }
        for (size_t k = 0; k < METRIC_SERIES && m->series[k].label != NULL; k++) {
            if (buf_printf(out, "%s{%s} %llu\n", m->name, m->series[k].label,
                           (unsigned long long)m->series[k].v) < 0) {
                return -ENOBUFS;
            }
        }
    }
    return 0;
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
    const struct metric tab[] = {
        {"sandpool_engine_requests_total",
         "counter",
         "Requests sent to the container engine.",
         {{NULL, ds.requests}}},
        {"sandpool_engine_failures_total",
         "counter",
         "Engine requests that failed (error answer, deadline, transport).",
         {{NULL, ds.failures}}},
        {"sandpool_engine_up",
         "gauge",
         "1 while the engine answers.",
         {{NULL, s->link == ENGINE_UP}}},
        {"sandpool_redis_up",
         "gauge",
         "1 while Redis is connected.",
         {{NULL, store_redis_is_up(s->redis)}}},
        {"sandpool_redis_commands_total",
         "counter",
         "Commands sent to Redis.",
         {{NULL, rs.commands}}},
        {"sandpool_redis_timeouts_total",
         "counter",
         "Redis commands that passed their deadline.",
         {{NULL, rs.timeouts}}},
        {"sandpool_redis_errors_total",
         "counter",
         "Redis commands answered with an error, a timeout or a lost connection.",
         {{NULL, rs.errors}}},
    };

    return metrics_write(out, tab, ELEMENTSOF(tab));
}

#define EXECUTIONS_ROW 7 /* metrics_sessions()'s "sandpool_executions_total", filled per status */

static int
metrics_sessions(struct server *s, struct buf *out, const struct session_manager_stats *ss)
{
    struct metric tab[] = {
        {"sandpool_sessions", "gauge", "Sessions on this node.", {{NULL, ss->sessions}}},
        {"sandpool_sessions_busy", "gauge", "Sessions running an execution.", {{NULL, ss->busy}}},
        {"sandpool_sessions_created_total",
         "counter",
         "Sessions created.",
         {{NULL, ss->created_total}}},
        {"sandpool_sessions_ended_total",
         "counter",
         "Sessions ended (deleted, expired or lost).",
         {{NULL, ss->ended_total}}},
        {"sandpool_sessions_reaped_total",
         "counter",
         "Sessions ended by the idle and lifetime reaper.",
         {{NULL, ss->reaped_total}}},
        {"sandpool_sessions_reconnected_total",
         "counter",
         "Sessions whose sandbox connection broke and was made again.",
         {{NULL, ss->reconnected_total}}},
        {"sandpool_executions_started_total",
         "counter",
         "Executions started by this daemon.",
         {{NULL, ss->executions_total}}},
        {"sandpool_executions_total",
         "counter",
         "Executions started by this daemon that ended, by status.",
         {{NULL, 0}}},
        {"sandpool_output_bytes_total",
         "counter",
         "Output bytes received from sandboxes, by stream.",
         {{"stream=\"stdout\"", ss->output_bytes[0]}, {"stream=\"stderr\"", ss->output_bytes[1]}}},
        {"sandpool_sessions_paused",
         "gauge",
         "Sessions whose container is frozen (or being frozen or thawed).",
         {{NULL, ss->paused}}},
        {"sandpool_sessions_paused_total",
         "counter",
         "Session containers frozen (the engine confirmed the pause).",
         {{NULL, ss->paused_total}}},
        {"sandpool_sessions_resumed_total",
         "counter",
         "Paused sessions thawed for a call.",
         {{NULL, ss->resumed_total}}},
        {"sandpool_session_pause_failures_total",
         "counter",
         "Pauses and resumes the engine refused, by operation.",
         {{"op=\"pause\"", ss->pause_failures}, {"op=\"resume\"", ss->resume_failures}}},
        {"sandpool_sessions_hibernated",
         "gauge",
         "Sessions without a container, their state in a snapshot (or being hibernated or woken).",
         {{NULL, ss->hibernated}}},
        {"sandpool_sessions_hibernations_total",
         "counter",
         "Sessions hibernated (hibernated) and woken (woken), those that failed for now, and wakes "
         "refused over the tenant's share (wake_refused).",
         {{"outcome=\"hibernated\"", ss->hibernated_total},
          {"outcome=\"woken\"", ss->woken_total},
          {"outcome=\"hibernate_failed\"", ss->hibernate_failures},
          {"outcome=\"wake_failed\"", ss->wake_failures},
          {"outcome=\"wake_refused\"", ss->wake_refused}}},
    };
    char labels[SESSION_EXEC__COUNT][48];

    static_assert(SESSION_EXEC__COUNT < METRIC_SERIES, "a series per status");
    assert(strcmp(tab[EXECUTIONS_ROW].name, "sandpool_executions_total") == 0);
    for (int i = 0; i < SESSION_EXEC__COUNT; i++) {
        (void)snprintf(labels[i], sizeof(labels[i]), "status=\"%s\"",
                       session_exec_status_to_string((enum session_exec_status)i));
        tab[EXECUTIONS_ROW].series[i].label = labels[i];
        tab[EXECUTIONS_ROW].series[i].v = ss->executions_ended[i];
    }
    return metrics_write(out, tab, ELEMENTSOF(tab));
}

/* The snapshot service's counters (none while snapshots are off). */
static int
metrics_snapshots(struct server *s, struct buf *out)
{
    struct snapshots_stats st;

    if (s->snapshots == NULL) {
        return 0;
    }
    snapshots_get_stats(s->snapshots, &st);
    struct metric tab[] = {
        {"sandpool_snapshots_total",
         "counter",
         "Snapshot operations that ended, by operation and outcome.",
         {{"op=\"take\",outcome=\"ok\"", st.taken_total},
          {"op=\"restore\",outcome=\"ok\"", st.restored_total},
          {"op=\"any\",outcome=\"failed\"", st.failed_total},
          {"op=\"delete\",outcome=\"ok\"", st.deleted_total},
          {"op=\"expire\",outcome=\"ok\"", st.expired_total}}},
        {"sandpool_snapshot_bytes_total",
         "counter",
         "Snapshot bytes written to and read from the store.",
         {{"direction=\"written\"", st.bytes_written}, {"direction=\"read\"", st.bytes_read}}},
        {"sandpool_snapshots_inflight",
         "gauge",
         "Takes and restores in flight.",
         {{NULL, st.inflight}}},
    };

    return metrics_write(out, tab, ELEMENTSOF(tab));
}

/* The egress proxy's connections and bytes (docs/egress.md), when a profile has a list. */
static int
metrics_egress(struct server *s, struct buf *out)
{
    struct egress_stats st;

    if (s->egress == NULL) {
        return 0;
    }
    egress_proxy_get_stats(s->egress, &st);
    const uint64_t *e = st.ends;
    const struct metric tab[] = {
        {"sandpool_egress_connections_total",
         "counter",
         "Connections through the egress proxy, by how they ended (docs/egress.md).",
         {{"verdict=\"done\"", e[EGRESS_END_DONE]},
          {"verdict=\"denied\"", e[EGRESS_END_DENIED]},
          {"verdict=\"not_allowed\"", e[EGRESS_END_NOT_ALLOWED]},
          {"verdict=\"refused_address\"", e[EGRESS_END_REFUSED_ADDRESS]},
          {"verdict=\"unresolved\"", e[EGRESS_END_UNRESOLVED]},
          {"verdict=\"upstream\"", e[EGRESS_END_UPSTREAM]},
          {"verdict=\"malformed\"", e[EGRESS_END_MALFORMED]},
          {"verdict=\"limit\"", e[EGRESS_END_LIMIT]}}},
        {"sandpool_egress_refused_no_session_total",
         "counter",
         "Egress connections from a container that served no session.",
         {{NULL, e[EGRESS_END_NO_SESSION]}}},
        {"sandpool_egress_bytes_total",
         "counter",
         "Bytes piped by the egress proxy: up (sandbox to upstream), down.",
         {{"direction=\"up\"", st.bytes_up}, {"direction=\"down\"", st.bytes_down}}},
        {"sandpool_egress_connections_open",
         "gauge",
         "Egress connections open now.",
         {{NULL, st.open}}},
        {"sandpool_egress_gates", "gauge", "Containers with an egress gate.", {{NULL, st.gates}}},
        {"sandpool_egress_handoffs_total",
         "counter",
         "Sandbox connections a forwarder handed over: taken (served without its hop), relayed "
         "(refused: another uid's).",
         {{"result=\"taken\"", st.handoffs}, {"result=\"relayed\"", st.handoffs_refused}}},
    };

    static_assert(EGRESS_END__COUNT == 9, "a verdict without a series");
    return metrics_write(out, tab, ELEMENTSOF(tab));
}

/* The node registry, as this node last read it (cluster/registry.h). */
static int
metrics_cluster(struct server *s, struct buf *out)
{
    struct registry_stats st;

    struct route_stats rs;
    struct http_forward_stats fs;

    registry_get_stats(s->registry, &st);
    route_get_stats(s->route, &rs);
    http_get_forward_stats(s->api, &fs);
    struct metric tab[] = {
        {"sandpool_cluster_nodes",
         "gauge",
         "Nodes of the registry at its last read: live, and known but not live (lost or stopped).",
         {{"state=\"live\"", st.live}, {"state=\"down\"", st.down}}},
        {"sandpool_cluster_heartbeats_total",
         "counter",
         "This node's heartbeats to the registry, by outcome.",
         {{"outcome=\"ok\"", st.heartbeats_total},
          {"outcome=\"failed\"", st.heartbeat_failures_total}}},
        {"sandpool_cluster_claims_total",
         "counter",
         "Lost nodes (heartbeats missed without a clean stop) this node claimed.",
         {{NULL, st.claims_total}}},
        {"sandpool_cluster_lost_node_sessions_total",
         "counter",
         "Sessions of the nodes this node claimed: live ones ended (node_lost), hibernated ones "
         "adopted.",
         {{"outcome=\"ended\"", st.sessions_lost_total},
          {"outcome=\"adopted\"", st.sessions_adopted_total}}},
        {"sandpool_route_requests_total",
         "counter",
         "Requests for sessions this node does not hold, by where they were routed: forwarded to "
         "the owner, none (404), owner down or route unknowable (503).",
         {{"verdict=\"forward\"", fs.verdicts[ROUTE_FORWARD]},
          {"verdict=\"none\"", fs.verdicts[ROUTE_NONE]},
          {"verdict=\"down\"", fs.verdicts[ROUTE_DOWN]},
          {"verdict=\"unavailable\"", fs.verdicts[ROUTE_UNAVAILABLE]},
          {"verdict=\"here\"", fs.verdicts[ROUTE_HERE]}}},
        {"sandpool_route_lookups_total",
         "counter",
         "Session owners looked up: from the cache, or read from Redis (one HMGET each).",
         {{"source=\"cache\"", rs.cache_hits},
          {"source=\"redis\"", rs.lookups},
          {"source=\"redis_failed\"", rs.lookup_failures},
          {"source=\"refused\"", rs.refused}}},
        {"sandpool_route_cached_owners",
         "gauge",
         "Session owners in the route cache.",
         {{NULL, rs.cached}}},
        {"sandpool_forward_requests_total",
         "counter",
         "Requests forwarded to the node that holds their session, by outcome.",
         {{"outcome=\"ok\"", fs.outcomes[HTTP_FWD_OK]},
          {"outcome=\"unreachable\"", fs.outcomes[HTTP_FWD_UNREACHABLE]},
          {"outcome=\"broken\"", fs.outcomes[HTTP_FWD_BROKEN]},
          {"outcome=\"client_gone\"", fs.outcomes[HTTP_FWD_CLIENT_GONE]}}},
        {"sandpool_forward_creates_total",
         "counter",
         "Session creates this node sent to another one (no warm container here, or drained).",
         {{NULL, fs.placed}}},
        {"sandpool_forward_in_flight",
         "gauge",
         "Requests being routed or forwarded now.",
         {{NULL, fs.in_flight}}},
    };

    if (metrics_write(out, tab, ELEMENTSOF(tab)) < 0 ||
        metric_family(out, "sandpool_forward_seconds", "histogram",
                      "A forwarded request's start to the owner's answer beginning.") < 0 ||
        metrics_hist_write(out, "sandpool_forward_seconds", "", &fs.latency) < 0) {
        return -ENOBUFS;
    }
    return 0;
}

/* The latencies of pause and hibernation, one histogram per profile each. */
static int
metrics_state_hists(struct server *s, struct buf *out, struct buf *lbl)
{
    static const struct {
        const char *name, *help;
        size_t offset;
    } rows[] = {
        {"sandpool_session_resume_seconds",
         "A call on a paused session to its container thawed, by profile.",
         offsetof(struct session_profile_stats, resume)},
        {"sandpool_session_hibernate_seconds",
         "A hibernation's start to its container released, by profile.",
         offsetof(struct session_profile_stats, hibernate)},
        {"sandpool_session_wake_seconds",
         "A call on a hibernated session to its snapshot restored, by profile.",
         offsetof(struct session_profile_stats, wake)},
    };
    int r = 0;

    for (size_t k = 0; r >= 0 && k < ELEMENTSOF(rows); k++) {
        r = metric_family(out, rows[k].name, "histogram", rows[k].help);
        for (size_t i = 0; r >= 0 && i < s->n_pools; i++) {
            const char *ps = (const char *)session_manager_profile_stats(s->sessions, i);

            r = metrics_hist_write(
                out, rows[k].name, metric_label(lbl, "profile", pool_name(s->pools[i])),
                (const struct metrics_hist *)(const void *)(ps + rows[k].offset));
        }
    }
    return r < 0 ? -ENOBUFS : 0;
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
    return r < 0 ? -ENOBUFS : metrics_state_hists(s, out, lbl);
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
    struct http_stats as;

    http_get_stats(s->api, &as);
    const struct metric tab[] = {
        {"sandpool_file_bytes_total",
         "counter",
         "Bytes moved by the files API, by direction.",
         {{"direction=\"upload\"", as.upload_bytes},
          {"direction=\"download\"", as.download_bytes}}},
        {"sandpool_http_connections",
         "gauge",
         "Client connections of the main listener: idle or busy (a request in progress), "
         "lingering closes, and closed ones not freed yet.",
         {{"state=\"idle\"", as.conns_idle},
          {"state=\"busy\"", as.conns_busy},
          {"state=\"lingering\"", as.conns_lingering},
          {"state=\"closing\"", as.conns_closing}}},
        {"sandpool_http_connections_anonymous",
         "gauge",
         "Client connections on which no valid token was seen yet.",
         {{NULL, as.conns_anonymous}}},
        {"sandpool_http_websockets",
         "gauge",
         "WebSocket streams open (each holds a busy connection of the main listener).",
         {{NULL, as.websockets}}},
        {"sandpool_http_connections_evicted_total",
         "counter",
         "Idle connections closed to make room for a newcomer.",
         {{NULL, as.conns_evicted_total}}},
        {"sandpool_http_connections_refused_total",
         "counter",
         "Connections refused with 503: their address's anonymous share was busy.",
         {{NULL, as.conns_refused_total}}},
        {"sandpool_http_lingers_skipped_total",
         "counter",
         "Closes with an upload body unread that could not linger (no slot free).",
         {{NULL, as.conns_linger_skipped_total}}},
        {"sandpool_file_operations",
         "gauge",
         "Operations of the files API at the gate (files.max_inflight*): in flight at the "
         "engine, or waiting.",
         {{"state=\"inflight\"", as.files_inflight}, {"state=\"waiting\"", as.files_waiting}}},
        {"sandpool_file_operations_queued_total",
         "counter",
         "File operations that had to wait at the gate.",
         {{NULL, as.files_queued_total}}},
        {"sandpool_file_operations_refused_total",
         "counter",
         "File operations answered 429: they waited in vain, or their tenant had too many "
         "waiting.",
         {{NULL, as.files_refused_total}}},
        {"sandpool_waiting_calls",
         "gauge",
         "Calls waiting for a busy sandbox (MCP tool calls, E2B executions): how many, and the "
         "bytes they hold (queue.max_bytes*).",
         {{"unit=\"calls\"", as.waiting_calls}, {"unit=\"bytes\"", as.waiting_bytes}}},
        {"sandpool_waiting_refused_total",
         "counter",
         "Calls refused their place in a queue: over a byte budget (queue.max_bytes*) or their "
         "sandbox's queue full.",
         {{NULL, as.waiting_refused_total}}},
        {"sandpool_tenant_engine_operations_total",
         "counter",
         "Pauses, hibernations and snapshots tenants asked for: let through, or answered 429 "
         "(engine.tenant_ops_per_s).",
         {{"outcome=\"ok\"", as.engine_ops_total},
          {"outcome=\"refused\"", as.engine_ops_refused_total}}},
        {"sandpool_audit_lines_suppressed_total",
         "counter",
         "Audit lines of a kind a client repeats past 20 a second, counted in one line instead.",
         {{NULL, audit_limited_suppressed_total()}}},
    };

    return metrics_write(out, tab, ELEMENTSOF(tab));
}

static int
metrics_mcp(struct server *s, struct buf *out)
{
    struct mcp_stats ms;

    if (!mcp_get_stats(s->api, &ms)) {
        return 0;
    }
    const struct metric tab[] = {
        {"sandpool_mcp_sessions",
         "gauge",
         "MCP sessions this daemon knows (docs/mcp.md).",
         {{NULL, ms.sessions}}},
        {"sandpool_mcp_sessions_total",
         "counter",
         "MCP sessions by event: initialized, read back from Redis after a restart, deleted by "
         "their client, forgotten (expired, or their sandbox ended).",
         {{"event=\"created\"", ms.sessions_created},
          {"event=\"restored\"", ms.sessions_restored},
          {"event=\"deleted\"", ms.sessions_deleted},
          {"event=\"expired\"", ms.sessions_expired}}},
        {"sandpool_mcp_calls",
         "gauge",
         "MCP calls that need the sandbox: running (one per MCP session at most) or waiting.",
         {{"state=\"running\"", ms.calls_running}, {"state=\"waiting\"", ms.calls_waiting}}},
        {"sandpool_mcp_tool_calls_total",
         "counter",
         "MCP tools/call requests by tool.",
         {{"tool=\"execute_python\"", ms.tool_calls[MCP_TOOL_PYTHON]},
          {"tool=\"run_command\"", ms.tool_calls[MCP_TOOL_COMMAND]},
          {"tool=\"write_file\"", ms.tool_calls[MCP_TOOL_WRITE]},
          {"tool=\"read_file\"", ms.tool_calls[MCP_TOOL_READ]},
          {"tool=\"list_files\"", ms.tool_calls[MCP_TOOL_LIST]}}},
        {"sandpool_mcp_results_total",
         "counter",
         "Ends of MCP calls that need the sandbox: a result (ok, or isError), cancelled by the "
         "client, or refused because the session's queue was full.",
         {{"outcome=\"ok\"", ms.results_ok},
          {"outcome=\"error\"", ms.results_error},
          {"outcome=\"cancelled\"", ms.cancelled},
          {"outcome=\"queue_full\"", ms.queue_full}}},
        {"sandpool_mcp_requests_refused_total",
         "counter",
         "MCP requests answered with a 4xx or 5xx status by the transport (token, Origin, "
         "headers, body, unknown session, not ready).",
         {{NULL, ms.requests_refused}}},
    };

    return metrics_write(out, tab, ELEMENTSOF(tab));
}

static int
metrics_e2b(struct server *s, struct buf *out)
{
    struct e2b_stats es;

    e2b_get_stats(s->api, &es);
    const struct metric tab[] = {
        {"sandpool_e2b_requests_total",
         "counter",
         "Requests of E2B clients by plane (docs/e2b.md): the control plane (E2B_API_URL), a "
         "sandbox's envd (port 49983) and its interpreter (49999), once let in.",
         {{"plane=\"control\"", es.requests[E2B_PLANE_CONTROL]},
          {"plane=\"envd\"", es.requests[E2B_PLANE_ENVD]},
          {"plane=\"code\"", es.requests[E2B_PLANE_CODE]}}},
        {"sandpool_e2b_sandboxes_total",
         "counter",
         "E2B sandboxes created, killed and paused by their clients, and leases set (timeout, connect).",
         {{"event=\"created\"", es.created},
          {"event=\"killed\"", es.killed},
          {"event=\"lease\"", es.leases_set},
          {"event=\"paused\"", es.paused}}},
        {"sandpool_e2b_refused_total",
         "counter",
         "E2B requests refused with 401: no valid API key (control plane), or not the "
         "sandbox's credential for the port.",
         {{"why=\"key\"", es.refused_key}, {"why=\"token\"", es.refused_token}}},
        {"sandpool_e2b_runs_total",
         "counter",
         "E2B executions started: commands (process.Process/Start) and code (/execute).",
         {{"kind=\"process\"", es.runs_process}, {"kind=\"code\"", es.runs_code}}},
        {"sandpool_e2b_runs",
         "gauge",
         "E2B executions now: running, or waiting for their sandbox's running one.",
         {{"state=\"running\"", es.running}, {"state=\"waiting\"", es.waiting}}},
    };

    return metrics_write(out, tab, ELEMENTSOF(tab));
}

void
server_metrics(void *userdata, bool tenants, struct buf *out)
{
    struct server *s = userdata;
    struct session_manager_stats ss;
    struct buf lbl = BUF_INIT(512); /* one escaped label pair */

    session_manager_get_stats(s->sessions, &ss);
    /* Stops at the first section that no longer fits the cap. */
    (void)(metrics_links(s, out) < 0 || metrics_sessions(s, out, &ss) < 0 ||
           metrics_pools(s, out, &lbl) < 0 || metrics_latencies(s, out, &lbl) < 0 ||
           (tenants && metrics_tenants(s, out, &lbl) < 0) || metrics_http(s, out) < 0 ||
           metrics_mcp(s, out) < 0 || metrics_e2b(s, out) < 0 || metrics_snapshots(s, out) < 0 ||
           metrics_cluster(s, out) < 0 || metrics_egress(s, out) < 0);
    buf_done(&lbl);
}
