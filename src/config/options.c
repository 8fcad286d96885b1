/* The option tables and typed access to the fields they describe; see config-internal.h.
 *
 * Two tables drive everything: cfg_options for daemon-wide settings (fields of struct cfg) and
 * cfg_profile_options for the keys of each profile (fields of struct cfg_profile). A row's default
 * is a string parsed by the same code that parses environment variables and flags, so there is
 * exactly one parser per type. JSON values must have the row's JSON type: a number given as a
 * string, or a string given as a number, is an error rather than a guess. A row's flags say
 * whether SIGHUP applies it (CFG_RELOADABLE: reload.c and the server's reload obey it, nothing
 * else decides it). Pure: no I/O, no event loop. */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config-internal.h"
#include "util/macro.h"
#include "util/parse.h"
#include "util/utf8.h"

/* clang-format off */
#define OPT(n, t, field, d, lo, hi, fl, h) {n, d, h, offsetof(struct cfg, field), lo, hi, t, fl}
#define POPT(n, t, field, d, lo, hi, fl, h) \
    {n, d, h, offsetof(struct cfg_profile, field), lo, hi, t, fl}
/* clang-format on */

const struct cfg_option cfg_options[] = {
    OPT("listen", CFG_STRING, listen, "127.0.0.1:8080", 0, 0, CFG_NONEMPTY,
        "HTTP listen address: HOST:PORT, [V6]:PORT or unix:/path"),
    OPT("node_id", CFG_STRING, node_id, "auto", 0, 0, CFG_NONEMPTY,
        "name of this daemon on the engine (container labels); auto = host name"),
    OPT("engine.socket", CFG_STRING, engine_socket, "/var/run/docker.sock", 0, 0, CFG_NONEMPTY,
        "Docker or Podman API unix socket"),
    OPT("engine.timeout_ms", CFG_UINT, engine_timeout_ms, "15000", 100, 600000, CFG_RELOADABLE,
        "deadline of one ordinary engine call"),
    OPT("engine.max_concurrency", CFG_UINT, engine_max_concurrency, "4", 1, 256, CFG_RELOADABLE,
        "container creations/removals in flight at once"),
    OPT("engine.tenant_ops_per_s", CFG_UINT, engine_tenant_ops_per_s, "2", 1, 100000, 0,
        "engine operations a tenant asks for at will (pause, hibernate, snapshot) a second, on "
        "average; past the burst, 429 (a storm of 9,000 pauses and resumes in 20 s took "
        "another tenant's print(1) from 2 to 99 ms)"),
    OPT("engine.tenant_ops_burst", CFG_UINT, engine_tenant_ops_burst, "10", 1, 100000, 0,
        "engine operations of that kind a tenant may ask for at once, after a quiet while"),
    OPT("redis.url", CFG_STRING, redis_url, "unix:///run/sandpool/redis.sock", 0, 0, CFG_NONEMPTY,
        "redis://HOST:PORT[/DB] or unix:///path[?db=N]"),
    OPT("redis.prefix", CFG_STRING, redis_prefix, "sandpool:", 0, 0, 0,
        "prefix of every Redis key"),
    OPT("redis.timeout_ms", CFG_UINT, redis_timeout_ms, "2000", 50, 60000, CFG_RELOADABLE,
        "deadline of one Redis command"),
    OPT("admin_token_sha256", CFG_STRING, admin_token_sha256, "", 0, 0, CFG_RELOADABLE | CFG_SECRET,
        "hex SHA-256 of the admin bearer token"),
    OPT("metrics_token_sha256", CFG_STRING, metrics_token_sha256, "", 0, 0,
        CFG_RELOADABLE | CFG_SECRET,
        "hex SHA-256 of a bearer token /metrics then requires (the admin token works too); "
        "empty: /metrics is open, its per-tenant series only shown with either token"),
    OPT("log.level", CFG_STRING, log_level, "info", 0, 0, CFG_RELOADABLE,
        "debug, info, warn or error"),
    OPT("log.format", CFG_STRING, log_format, "text", 0, 0, CFG_RELOADABLE, "text or json"),
    OPT("audit.file", CFG_STRING, audit_file, "", 0, 0, 0,
        "append-only audit log of sessions, executions and files (JSON lines); empty: off"),
    OPT("drain_timeout_s", CFG_UINT, drain_timeout_s, "20", 0, 3600, CFG_RELOADABLE,
        "on SIGTERM, how long running executions may go on before they are interrupted"),
    OPT("shutdown_delay_s", CFG_UINT, shutdown_delay_s, "5", 0, 600, 0,
        "on SIGTERM, how long readyz answers 503 while existing sessions are still served, "
        "before the daemon stops accepting connections and drains"),
    OPT("policy_check_s", CFG_UINT, policy_check_s, "60", 0, 86400, 0,
        "every this many seconds, re-inspect every container and end those whose limits drifted "
        "from their profile (0: only on GET /v1/admin/policy)"),
    OPT("http.max_body_bytes", CFG_UINT, http_max_body_bytes, "8388608", 1024, 8388608, 0,
        "largest JSON request body"),
    OPT("http.max_connections", CFG_UINT, http_max_connections, "1024", 8, 1000000, 0,
        "client connection slots; a newcomer at the cap closes the connection idle longest "
        "(anonymous ones first); with none idle, newcomers wait in the listen backlog"),
    OPT("http.max_connections_per_peer", CFG_UINT, http_max_connections_per_peer, "128", 0, 1000000,
        0,
        "connections of one client address (IPv6: /64) not yet authenticated; one more closes "
        "that address's idle one, or is refused with 503 (0: no bound)"),
    OPT("http.health_listen", CFG_STRING, http_health_listen, "", 0, 0, 0,
        "second listen address serving only /healthz, /readyz and /metrics, with 64 connection "
        "slots of its own (for the kubelet and Prometheus; empty: none)"),
    OPT("sandbox.uid_first", CFG_UINT, sandbox_uid_first, "1879048192", 65536, 2147483646.0, 0,
        "first host uid of the node's sandboxes: each container gets a pair of its own (user "
        "code's, even, and its relay's); no host account may use the range"),
    OPT("sandbox.uid_count", CFG_UINT, sandbox_uid_count, "262144", 2, 16777216, 0,
        "uids in the range (even): room for half as many containers at once"),
    OPT("sandbox.seccomp_profile", CFG_STRING, sandbox_seccomp_profile, CFG_SECCOMP_DEFAULT_PATH, 0,
        0, 0,
        "seccomp profile of every sandbox (JSON, read at start; deploy/seccomp/sandbox.json): "
        "Docker is sent its content, Podman its path (which it opens itself); empty: the "
        "engine's default profile (Docker 20.10's allows io_uring)"),
    OPT("files.max_inflight", CFG_UINT, files_max_inflight, "16", 1, 4096, 0,
        "file operations (an engine exec each) in flight at once; more wait, then get 429"),
    OPT("files.max_inflight_per_tenant", CFG_UINT, files_per_tenant, "2", 1, 4096, 0,
        "file operations of one tenant in flight at once (each costs the engine about 50 ms "
        "of CPU: on 2 cores, 8 of one tenant tripled another's listing time, 2 kept it under "
        "2x)"),
    OPT("files.max_inflight_per_session", CFG_UINT, files_per_session, "2", 1, 4096, 0,
        "file operations of one session in flight at once"),
    OPT("files.max_waiting_per_tenant", CFG_UINT, files_queue_per_tenant, "64", 0, 100000, 0,
        "file operations of one tenant waiting for their turn; one more gets 429 at once"),
    OPT("queue.max_bytes", CFG_U64, queue_max_bytes, "67108864", 1048576, 1099511627776.0, 0,
        "what calls waiting for a busy sandbox (MCP tool calls, E2B executions) hold on this "
        "node, at most: their code, arguments and 1 KiB each; one more gets the protocol's "
        "queue-full answer"),
    OPT("queue.max_bytes_per_tenant", CFG_U64, queue_max_bytes_per_tenant, "16777216", 65536,
        1099511627776.0, 0, "the same for one tenant's waiting calls"),
    OPT("http.header_timeout_s", CFG_UINT, http_header_timeout_s, "10", 1, 600, 0,
        "a request head must arrive whole within this time"),
    OPT("snapshots.store", CFG_STRING, snapshots_store, "", 0, 0, 0,
        "where snapshots are kept: \"dir\" (snapshots.dir), \"s3\" (snapshots.s3.*); empty: "
        "no snapshots (their endpoints answer 501)"),
    OPT("snapshots.dir", CFG_STRING, snapshots_dir, "/var/lib/sandpool/snapshots", 0, 0, 0,
        "the dir store's directory (in Kubernetes a ReadWriteMany volume)"),
    OPT("snapshots.s3.endpoint", CFG_STRING, snapshots_s3_endpoint, "", 0, 0, 0,
        "the s3 store's endpoint, http(s)://host:port (path-style requests)"),
    OPT("snapshots.s3.bucket", CFG_STRING, snapshots_s3_bucket, "", 0, 0, 0, "its bucket"),
    OPT("snapshots.s3.region", CFG_STRING, snapshots_s3_region, "us-east-1", 0, 0, 0,
        "its SigV4 region"),
    OPT("snapshots.s3.prefix", CFG_STRING, snapshots_s3_prefix, "sandpool/", 0, 0, 0,
        "the key prefix of its objects"),
    OPT("snapshots.s3.access_key", CFG_STRING, snapshots_s3_access_key, "", 0, 0, CFG_SECRET,
        "its access key id"),
    OPT("snapshots.s3.secret_key", CFG_STRING, snapshots_s3_secret_key, "", 0, 0, CFG_SECRET,
        "its secret access key"),
    OPT("snapshots.max_bytes", CFG_U64, snapshots_max_bytes, "1073741824", 1048576, 1099511627776.0,
        0, "one snapshot, at most (workspace and pickled variables)"),
    OPT("snapshots.max_bytes_per_tenant", CFG_U64, snapshots_max_bytes_per_tenant, "10737418240", 0,
        1125899906842624.0, 0, "a tenant's snapshots together, at most; 0: no quota"),
    OPT("snapshots.max_hibernated_per_tenant", CFG_UINT, snapshots_max_hibernated_per_tenant, "256",
        1, 1000000, 0,
        "hibernated sessions of one tenant on this node, at most; one more hibernation is "
        "refused (an idle one ends its session instead)"),
    OPT("snapshots.retention_s", CFG_UINT, snapshots_retention_s, "604800", 60, 315360000, 0,
        "a snapshot goes this long after it was taken (one a hibernated session holds lives as "
        "long as the session)"),
    OPT("cluster.advertise_url", CFG_STRING, cluster_advertise_url, "", 0, 0, 0,
        "where the other nodes reach this one (http://HOST:PORT); empty: http://<listen>"),
    OPT("cluster.heartbeat_ms", CFG_UINT, cluster_heartbeat_ms, "1000", 100, 60000, 0,
        "the node registry's heartbeat; a node that misses 3 is not live"),
    OPT("mcp.max_sessions", CFG_UINT, mcp_max_sessions, "4096", 0, 1000000, 0,
        "MCP sessions (/mcp and /v1/sessions/{id}/mcp) kept at once; 0 turns MCP off (404)"),
    OPT("mcp.max_sessions_per_tenant", CFG_UINT, mcp_max_sessions_per_tenant, "256", 1, 1000000, 0,
        "MCP sessions of one tenant at once; one more initialize is refused"),
    OPT("mcp.idle_timeout_s", CFG_UINT, mcp_idle_timeout_s, "3600", 10, 31536000, 0,
        "an MCP session without a sandbox of its own (none yet, or bound to a REST session) "
        "unused this long is forgotten"),
    OPT("mcp.queue_max", CFG_UINT, mcp_queue_max, "8", 0, 1024, 0,
        "tool calls waiting for the one running on the same MCP session; one more gets an "
        "isError result at once"),
    OPT("mcp.max_output_bytes", CFG_UINT, mcp_max_output_bytes, "65536", 256, 67108864, 0,
        "stdout and stderr shown (each) in one tool result; the rest is cut there, said in the "
        "text, and still streams as progress"),
    OPT("mcp.max_image_bytes", CFG_UINT, mcp_max_image_bytes, "2097152", 1024, 67108864, 0,
        "one image in a tool result; a larger one is named, not sent"),
    OPT("mcp.max_read_bytes", CFG_UINT, mcp_max_read_bytes, "1048576", 1024, 67108864, 0,
        "a file read by read_file or resources/read"),
    OPT("mcp.allowed_origins", CFG_STRING, mcp_allowed_origins, "", 0, 0, 0,
        "comma-separated Origin values a browser may call /mcp from (a request with any other "
        "Origin is refused with 403; clients that send none are not affected)"),
    OPT("e2b.templates", CFG_STRING, e2b_templates, "", 0, 0, 0,
        "E2B templateIDs as comma-separated template=profile pairs; \"base\" and "
        "\"code-interpreter-v1\" name the first profile unless listed here"),
    OPT("e2b.default_timeout_s", CFG_UINT, e2b_default_timeout_s, "300", 1, 31536000, 0,
        "an E2B sandbox's lease when its create names no timeout (capped by the profile's "
        "max_lifetime_s)"),
    OPT("e2b.max_contexts", CFG_UINT, e2b_max_contexts, "8", 1, 16, 0,
        "code contexts (separate namespaces) an E2B sandbox may create besides its default one"),
    OPT("egress.dir", CFG_STRING, egress_dir, "/run/sandpool/egress", 0, 0, CFG_NONEMPTY,
        "where each sandbox's egress socket is made (bind-mounted into it; the engine must see "
        "the same path)"),
    OPT("egress.resolv_conf", CFG_STRING, egress_resolv_conf, "/etc/resolv.conf", 0, 0, 0,
        "the nameservers the egress proxy resolves allowed names with; empty: none (egress.hosts "
        "only)"),
    OPT("egress.hosts", CFG_STRING, egress_hosts, "", 0, 0, 0,
        "names pinned to addresses, consulted before DNS: comma-separated name=address pairs"),
    OPT("egress.allow_cidrs", CFG_STRING, egress_allow_cidrs, "", 0, 0, 0,
        "comma-separated address ranges an allowed name may resolve into although they are "
        "loopback, private, link-local or otherwise refused"),
    OPT("egress.port", CFG_UINT, egress_port, "3128", 1, 65535, 0,
        "the port of the forwarder inside a sandbox (HTTP_PROXY=http://127.0.0.1:PORT)"),
    OPT("egress.max_connections", CFG_UINT, egress_max_connections, "16", 1, 4096, 0,
        "a session's egress connections at once; one more is refused (429)"),
    OPT("egress.max_bytes", CFG_U64, egress_max_bytes, "1073741824", 1024, 1099511627776.0, 0,
        "a session's egress bytes, both ways together; past it its connections are cut"),
    OPT("egress.max_exec_bytes", CFG_U64, egress_max_exec_bytes, "268435456", 1024, 1099511627776.0,
        0, "the egress bytes of one execution, both ways together"),
    OPT("egress.connect_timeout_ms", CFG_UINT, egress_connect_timeout_ms, "10000", 100, 120000, 0,
        "resolving and connecting to an allowed name, at most"),
    OPT("egress.head_timeout_ms", CFG_UINT, egress_head_timeout_ms, "10000", 100, 120000, 0,
        "sending a request's head to the egress proxy, at most"),
};

const size_t cfg_n_options = ELEMENTSOF(cfg_options);

const struct cfg_option cfg_profile_options[] = {
    POPT("image", CFG_STRING, image, "sandpool/python:latest", 0, 0, CFG_NONEMPTY,
         "container image"),
    POPT("runtime", CFG_STRING, runtime, "runc", 0, 0, CFG_NONEMPTY, "OCI runtime"),
    POPT("pids_enforced_by", CFG_STRING, pids_enforced_by, "cgroup", 0, 0, CFG_NONEMPTY,
         "cgroup (PidsLimit = pids) or runtime (runsc only: gVisor's own per-sandbox "
         "RLIMIT_NPROC = nproc caps the processes; PidsLimit is not sent)"),
    POPT("warm", CFG_UINT, warm, "4", 0, 10000, CFG_RELOADABLE, "containers kept ready"),
    POPT("max", CFG_UINT, max, "64", 1, 100000, CFG_RELOADABLE, "containers at most"),
    POPT("max_per_tenant", CFG_UINT, max_per_tenant, "0", 0, 100000, 0,
         "sessions of this profile one tenant may hold (creates in flight included); 0: half of "
         "max when several tenants are configured, no bound with one"),
    POPT("memory_mb", CFG_UINT, memory_mb, "512", 6, 1048576, 0, "memory cap, no swap"),
    POPT("cpus", CFG_DOUBLE, cpus, "1.0", 0.01, 1024, 0, "CPU cap"),
    POPT("pids", CFG_UINT, pids, "128", 8, 1000000, 0, "process/thread cap"),
    POPT("workspace_mb", CFG_UINT, workspace_mb, "256", 1, 1048576, 0, "/workspace tmpfs size"),
    POPT("tmp_mb", CFG_UINT, tmp_mb, "64", 1, 1048576, 0, "/tmp tmpfs size"),
    POPT("shm_mb", CFG_UINT, shm_mb, "16", 1, 1048576, 0, "/dev/shm size"),
    POPT("nofile", CFG_UINT, nofile, "1024", 64, 1048576, 0, "open files per process"),
    POPT("nproc", CFG_UINT, nproc, "65536", 64, 4194304, 0,
         "RLIMIT_NPROC; counted per host uid across all containers, so keep it high: pids caps "
         "each container"),
    POPT("idle_timeout_s", CFG_UINT, idle_timeout_s, "600", 1, 31536000, CFG_RELOADABLE,
         "end sessions idle this long"),
    POPT("pause_after_s", CFG_UINT, pause_after_s, "0", 0, 31536000, CFG_RELOADABLE,
         "freeze sessions (cgroup freezer: no CPU, memory kept) idle this long; 0: never"),
    POPT("idle_action", CFG_STRING, idle_action, "end", 0, 0, CFG_NONEMPTY,
         "what a session idle for idle_timeout_s does: \"end\", or \"hibernate\" (its snapshot "
         "is taken and its container released; the next call wakes it; needs snapshots.store); "
         "a session may choose its own at create"),
    POPT("hibernate", CFG_STRING, hibernate, "allowed", 0, 0, CFG_NONEMPTY,
         "\"allowed\" (with a snapshot store, sessions may hibernate: on request or as their idle "
         "action) or \"never\""),
    POPT("max_lifetime_s", CFG_UINT, max_lifetime_s, "86400", 1, 31536000, CFG_RELOADABLE,
         "end sessions this old"),
    POPT("exec_timeout_s", CFG_UINT, exec_timeout_s, "30", 1, 86400, CFG_RELOADABLE,
         "longest execution"),
    POPT("max_output_bytes", CFG_U64, max_output_bytes, "1048576", 1024, 1073741824, CFG_RELOADABLE,
         "output kept per stream and execution"),
    POPT("interrupt_grace_ms", CFG_UINT, interrupt_grace_ms, "2000", 100, 600000, CFG_RELOADABLE,
         "after an interrupt or a timeout, how long code may go on before its kernel is "
         "restarted (variables lost)"),
    POPT("max_file_bytes", CFG_U64, max_file_bytes, "1073741824", 1, 1099511627776.0,
         CFG_RELOADABLE, "largest file upload (the workspace size caps it too)"),
};

const size_t cfg_n_profile_options = ELEMENTSOF(cfg_profile_options);

/* ---- typed field access ---------------------------------------------------------------------- */

void *
cfg_field(void *base, const struct cfg_option *o)
{
    return (char *)base + o->offset;
}

int
cfg_check_range(const struct cfg_option *o, double v, struct err *reterr)
{
    if (v < o->min || v > o->max) {
        return err_set(reterr, -EINVAL, "'%s' must be between %g and %g", o->name, o->min, o->max);
    }
    return 0;
}

/* Sets a field from its textual form (defaults, environment, flags). */
int
cfg_set_from_string(void *base, const struct cfg_option *o, const char *value, struct err *reterr)
{
    uint64_t u;
    double d;

    switch (o->type) {
    case CFG_STRING: {
        char **p = cfg_field(base, o);

        if ((o->flags & CFG_NONEMPTY) && value[0] == '\0') {
            return err_set(reterr, -EINVAL, "'%s' must not be empty", o->name);
        }
        if (!utf8_valid(value, strlen(value))) {
            return err_set(reterr, -EINVAL, "'%s' must be UTF-8 text", o->name);
        }
        free(*p);
        *p = xstrdup(value);
        return 0;
    }
    case CFG_UINT:
    case CFG_U64:
        if (parse_u64(value, &u) < 0) {
            return err_set(reterr, -EINVAL, "'%s' must be a non-negative integer", o->name);
        }
        if (cfg_check_range(o, (double)u, reterr) < 0) {
            return -EINVAL;
        }
        if (o->type == CFG_UINT) {
            *(unsigned *)cfg_field(base, o) = (unsigned)u;
        } else {
            *(uint64_t *)cfg_field(base, o) = u;
        }
        return 0;
    case CFG_DOUBLE:
        if (parse_double(value, 0, 1e12, &d) < 0) {
            return err_set(reterr, -EINVAL, "'%s' must be a non-negative number", o->name);
        }
        if (cfg_check_range(o, d, reterr) < 0) {
            return -EINVAL;
        }
        *(double *)cfg_field(base, o) = d;
        return 0;
    }
    return -EINVAL;
}

/* Sets a field from a JSON value of the matching JSON type. `where` names the key for errors. */
int
cfg_set_from_json(void *base, const struct cfg_option *o, json_t *v, const char *where,
                  struct err *reterr)
{
    char num[64];

    switch (o->type) {
    case CFG_STRING:
        if (!json_is_string(v)) {
            return err_set(reterr, -EINVAL, "'%s' must be a string", where);
        }
        if (strlen(json_string_value(v)) != json_string_length(v)) {
            return err_set(reterr, -EINVAL, "'%s' must not contain NUL", where);
        }
        return cfg_set_from_string(base, o, json_string_value(v), reterr);
    case CFG_UINT:
    case CFG_U64:
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            return err_set(reterr, -EINVAL, "'%s' must be a non-negative integer", where);
        }
        (void)snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return cfg_set_from_string(base, o, num, reterr);
    case CFG_DOUBLE:
        if (!json_is_number(v) || json_number_value(v) < 0) {
            return err_set(reterr, -EINVAL, "'%s' must be a non-negative number", where);
        }
        if (cfg_check_range(o, json_number_value(v), reterr) < 0) {
            return -EINVAL;
        }
        *(double *)cfg_field(base, o) = json_number_value(v);
        return 0;
    }
    return -EINVAL;
}

json_t *
cfg_field_to_json(void *base, const struct cfg_option *o)
{
    switch (o->type) {
    case CFG_STRING:
        return json_string(*(char **)cfg_field(base, o));
    case CFG_UINT:
        return json_integer(*(unsigned *)cfg_field(base, o));
    case CFG_U64:
        return json_integer((json_int_t) * (uint64_t *)cfg_field(base, o));
    case CFG_DOUBLE:
        return json_real(*(double *)cfg_field(base, o));
    }
    return json_null();
}

void
cfg_free_strings(void *base, const struct cfg_option *tab, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (tab[i].type == CFG_STRING) {
            char **p = cfg_field(base, &tab[i]);

            free(*p);
            *p = NULL;
        }
    }
}

void
cfg_apply_defaults(void *base, const struct cfg_option *tab, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int r = cfg_set_from_string(base, &tab[i], tab[i].def, NULL);

        assert(r == 0); /* a default outside its own bounds is a programming error */
        (void)r;
    }
}

bool
cfg_field_equal(const void *a, const void *b, const struct cfg_option *o)
{
    void *fa = cfg_field((void *)a, o), *fb = cfg_field((void *)b, o);

    switch (o->type) {
    case CFG_STRING:
        return strcmp(*(char **)fa, *(char **)fb) == 0;
    case CFG_UINT:
        return *(unsigned *)fa == *(unsigned *)fb;
    case CFG_U64:
        return *(uint64_t *)fa == *(uint64_t *)fb;
    case CFG_DOUBLE:
        return memcmp(fa, fb, sizeof(double)) == 0;
    }
    return false;
}

void
cfg_field_format(const void *base, const struct cfg_option *o, char *out, size_t n)
{
    void *f = cfg_field((void *)base, o);

    switch (o->type) {
    case CFG_STRING:
        (void)snprintf(out, n, "'%.80s'", *(char **)f);
        return;
    case CFG_UINT:
        (void)snprintf(out, n, "%u", *(unsigned *)f);
        return;
    case CFG_U64:
        (void)snprintf(out, n, "%llu", (unsigned long long)*(uint64_t *)f);
        return;
    case CFG_DOUBLE:
        (void)snprintf(out, n, "%g", *(double *)f);
        return;
    }
}

void
cfg_field_swap(void *a, void *b, const struct cfg_option *o)
{
    void *fa = cfg_field(a, o), *fb = cfg_field(b, o);

    switch (o->type) {
    case CFG_STRING: {
        char *t = *(char **)fa;

        *(char **)fa = *(char **)fb;
        *(char **)fb = t;
        return;
    }
    case CFG_UINT: {
        unsigned t = *(unsigned *)fa;

        *(unsigned *)fa = *(unsigned *)fb;
        *(unsigned *)fb = t;
        return;
    }
    case CFG_U64: {
        uint64_t t = *(uint64_t *)fa;

        *(uint64_t *)fa = *(uint64_t *)fb;
        *(uint64_t *)fb = t;
        return;
    }
    case CFG_DOUBLE: {
        double t = *(double *)fa;

        *(double *)fa = *(double *)fb;
        *(double *)fb = t;
        return;
    }
    }
}

void
cfg_field_copy(void *dst, const void *src, const struct cfg_option *o)
{
    void *d = cfg_field(dst, o), *s = cfg_field((void *)src, o);

    switch (o->type) {
    case CFG_STRING:
        free(*(char **)d);
        *(char **)d = xstrdup(*(char **)s);
        return;
    case CFG_UINT:
        *(unsigned *)d = *(unsigned *)s;
        return;
    case CFG_U64:
        *(uint64_t *)d = *(uint64_t *)s;
        return;
    case CFG_DOUBLE:
        *(double *)d = *(double *)s;
        return;
    }
}

/* ---- the daemon-wide table ------------------------------------------------------------------- */

const struct cfg_option *
cfg_option_find(const char *name)
{
    for (size_t i = 0; i < cfg_n_options; i++) {
        if (strcmp(cfg_options[i].name, name) == 0) {
            return &cfg_options[i];
        }
    }
    return NULL;
}

/* True when some option lives under "prefix." (so "engine" is a section, not an unknown key). */
bool
cfg_is_section(const char *prefix)
{
    size_t n = strlen(prefix);

    for (size_t i = 0; i < cfg_n_options; i++) {
        if (strncmp(cfg_options[i].name, prefix, n) == 0 && cfg_options[i].name[n] == '.') {
            return true;
        }
    }
    return false;
}

/* "engine.socket" -> "ENGINE_SOCKET"; "engine-socket" -> "engine.socket" lookups. */
void
cfg_env_name(const char *opt, char *out, size_t n)
{
    size_t i = 0;

    for (; opt[i] != '\0' && i + 1 < n; i++) {
        char ch = opt[i];

        if (ch == '.') {
            ch = '_';
        } else if (ch >= 'a' && ch <= 'z') {
            ch = (char)(ch - 'a' + 'A');
        }
        out[i] = ch;
    }
    out[i] = '\0';
}

bool
cfg_flag_matches(const char *opt, const char *name)
{
    for (; *opt != '\0' && *name != '\0'; opt++, name++) {
        char a = (char)(*opt == '.' || *opt == '_' ? '-' : *opt);
        char b = (char)(*name == '.' || *name == '_' ? '-' : *name);

        if (a != b) {
            return false;
        }
    }
    return *opt == *name;
}
