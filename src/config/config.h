/* Daemon configuration.
 *
 * Sources, applied in order: built-in defaults, a JSON file (strict: unknown keys, wrong types
 * and duplicate keys are errors), SANDPOOL_* environment variables, command-line flags. Every
 * scalar option is one row of one table (redis standardConfig) that gives its name, type,
 * default, bounds and whether SIGHUP may change it; environment names and flag names are derived
 * from the row name ("engine.socket" -> SANDPOOL_ENGINE_SOCKET, --engine-socket).
 *
 * A struct cfg is validated completely by cfg_validate() and is immutable afterwards, but for
 * cfg_reload_commit(): a reload builds a new one and exchanges the reloadable rows with it (see
 * "reload" below). All strings are owned by the struct cfg. The code: the tables and typed
 * fields in options.c, loading in load.c and tenants.c, checks in validate.c, the seccomp
 * profile in seccomp.c, reload in reload.c, rendering in dump.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define CFG_SHA256_LEN 32

struct egress_rules;

struct cfg_profile {
    char *name;
    char *image;
    char **command; /* NULL-terminated argv, or NULL for the image's own CMD */
    char *runtime;  /* OCI runtime name; "runc" means the engine default */
    /* Who caps the sandbox's processes: "cgroup" (PidsLimit = pids) or "runtime" (gVisor: its
     * own per-sandbox RLIMIT_NPROC = nproc; PidsLimit is not sent). See cfg_pids_by_runtime(). */
    char *pids_enforced_by;
    unsigned warm, max;
    unsigned max_per_tenant; /* 0: see cfg_profile_tenant_share() */
    unsigned memory_mb;
    double cpus;
    unsigned pids;
    unsigned workspace_mb, tmp_mb, shm_mb;
    unsigned nofile, nproc;
    unsigned idle_timeout_s, max_lifetime_s, exec_timeout_s;
    unsigned pause_after_s; /* 0: never paused for inactivity */
    char *idle_action;      /* "end" or "hibernate" (cfg_validate()) */
    char *hibernate;        /* "allowed" or "never" */
    uint64_t max_output_bytes;
    unsigned interrupt_grace_ms;
    uint64_t max_file_bytes;
    /* The sandbox seccomp profile (cfg_load_seccomp()), both borrowed from the struct cfg that
     * holds this profile: compact JSON and the file it was read from. NULL: none read, or
     * sandbox.seccomp_profile is "" (the engine's default profile). */
    const char *seccomp;
    const char *seccomp_path;
    /* Egress by name (docs/egress.md): what its sandboxes may reach through the daemon's proxy;
     * NULL: nothing (no network at all). Its JSON text, compact with sorted keys, alongside. */
    struct egress_rules *egress;
    char *egress_json;
    /* Where its sandboxes' gates are (egress.dir/node_id: two daemons on one engine keep theirs
     * apart) and the port their forwarder listens on
     * (egress.port), both borrowed from the struct cfg that holds this profile (cfg_validate(),
     * cfg_reload_keep()): what docker/policy.c writes into a create body and checks. */
    const char *egress_dir;
    unsigned egress_port;
};

struct cfg_tenant {
    char *id;
    uint8_t token_sha256[CFG_SHA256_LEN];
    unsigned max_sessions; /* 0: no limit */
    unsigned max_running;  /* concurrent executions; 0: no limit */
    char **profiles;       /* the profiles it may use, NULL-terminated; NULL: all */
    /* Reserved share of profiles' warm pools: reserved[i] warm containers of profile
     * reserved_profiles[i] are kept for this tenant (other tenants wait for fresh ones). */
    char **reserved_profiles; /* NULL-terminated, or NULL */
    unsigned *reserved;
    /* E2B API keys (X-API-KEY, docs/e2b.md): their SHA-256, n_e2b_keys of them. */
    uint8_t (*e2b_keys_sha256)[CFG_SHA256_LEN];
    size_t n_e2b_keys;
};

struct cfg {
    char *listen;
    char *node_id; /* "auto" until cfg_validate() resolves it */
    char *engine_socket;
    unsigned engine_timeout_ms;
    unsigned engine_max_concurrency;
    unsigned engine_tenant_ops_per_s, engine_tenant_ops_burst; /* http/bucket.c */
    char *redis_url;
    char *redis_prefix;
    unsigned redis_timeout_ms;
    char *admin_token_sha256; /* hex, "" when no admin token is configured */
    char *log_level;
    char *log_format;
    char *audit_file; /* "": no audit log */
    unsigned drain_timeout_s;
    unsigned shutdown_delay_s; /* SIGTERM: not ready, still serving, before the drain */
    unsigned policy_check_s;
    /* Host uids of the sandboxes: [first, first + count), a pair per container (pool/uids.c). */
    unsigned sandbox_uid_first, sandbox_uid_count;
    char *sandbox_seccomp_profile; /* path of the sandbox seccomp profile; "": engine default */
    char *seccomp;                 /* its content, compact (cfg_load_seccomp()); NULL until then */
    unsigned http_max_body_bytes;
    unsigned http_max_connections;
    unsigned http_max_connections_per_peer; /* anonymous ones per address; 0: no bound */
    char *http_health_listen;               /* "": no health listener */
    unsigned http_header_timeout_s;
    /* the files API's gate (http/gate.c) */
    unsigned files_max_inflight, files_per_tenant, files_per_session, files_queue_per_tenant;
    uint64_t queue_max_bytes, queue_max_bytes_per_tenant; /* http/waiting.h */
    char *metrics_token_sha256; /* hex, "": /metrics needs no token (tenant series: admin only) */
    /* MCP (docs/mcp.md): max_sessions 0 turns it off */
    unsigned mcp_max_sessions, mcp_max_sessions_per_tenant, mcp_idle_timeout_s, mcp_queue_max;
    unsigned mcp_max_output_bytes, mcp_max_image_bytes, mcp_max_read_bytes;
    char *mcp_allowed_origins; /* comma-separated Origin values; "": none */
    char *e2b_templates;       /* "template=profile,...": E2B templateIDs (docs/e2b.md) */
    /* Egress by name (docs/egress.md, src/egress/proxy.h) */
    char *egress_dir;
    char *egress_node_dir; /* egress_dir/node_id: this node's gates (cfg_validate()) */
    char *egress_resolv_conf;
    char *egress_hosts;       /* "name=address,...", checked by cfg_validate() */
    char *egress_allow_cidrs; /* "a.b.c.d/n,...", checked by cfg_validate() */
    unsigned egress_port;
    unsigned egress_max_connections;
    uint64_t egress_max_bytes, egress_max_exec_bytes;
    unsigned egress_connect_timeout_ms, egress_head_timeout_ms;
    unsigned e2b_default_timeout_s, e2b_max_contexts;
    /* snapshots (docs/hibernate.md): store "" turns them off */
    char *snapshots_store, *snapshots_dir;
    char *snapshots_s3_endpoint, *snapshots_s3_bucket, *snapshots_s3_region, *snapshots_s3_prefix;
    char *snapshots_s3_access_key, *snapshots_s3_secret_key;
    uint64_t snapshots_max_bytes, snapshots_max_bytes_per_tenant;
    unsigned snapshots_max_hibernated_per_tenant;
    unsigned snapshots_retention_s;
    /* several nodes behind one Redis (docs/cluster.md) */
    char *cluster_advertise_url; /* "" until cfg_validate(): then http://<listen> */
    unsigned cluster_heartbeat_ms;

    struct cfg_profile *profiles;
    size_t n_profiles;
    struct cfg_tenant *tenants;
    size_t n_tenants;
};

/* Returns a config holding the built-in defaults (one "python" profile, no tenants). */
struct cfg *cfg_new(void);
/* Frees c; accepts NULL; returns NULL. */
struct cfg *cfg_free(struct cfg *c);

/* Applies a JSON document on top of c. On error c may be partly updated; callers discard it.
 * Errors: -EINVAL (syntax, unknown key, wrong type, out of range) with a message naming the key,
 * -EMSGSIZE (document over 1 MiB). */
int cfg_load_json(struct cfg *c, const char *data, size_t len, struct err *reterr);
/* Reads path (at most 1 MiB) and applies it. -ENOENT etc. from open/read. */
int cfg_load_file(struct cfg *c, const char *path, struct err *reterr);
/* Applies SANDPOOL_<NAME> variables from envp for every table row; a bad value is -EINVAL.
 * Unknown SANDPOOL_* names are not errors (Kubernetes injects SANDPOOL_SERVICE_HOST and the like
 * for a Service named sandpool): they are listed, comma-separated and possibly cut, in
 * ret_unknown (size n, may be NULL) for the caller to warn about. */
int cfg_apply_env(struct cfg *c, const char *const *envp, char *ret_unknown, size_t n,
                  struct err *reterr);
/* Sets one option by table name or flag name ("engine.socket", "engine-socket").
 * -ENOENT for an unknown name, -EINVAL for a bad value. */
int cfg_set(struct cfg *c, const char *name, const char *value, struct err *reterr);
/* Checks cross-field rules and resolves node_id "auto" to the host name. */
int cfg_validate(struct cfg *c, struct err *reterr);

/* Largest sandbox seccomp profile accepted (its compact form goes into every create body and
 * comes back in every inspect answer). Docker's default is 11 KiB compact. */
#define CFG_SECCOMP_MAX_BYTES (256u << 10)
/* Where sandbox.seccomp_profile looks by default: deploy/seccomp/sandbox.json installed (the
 * daemon's image has it there; deploy/systemd and deploy/local/lib.sh install it). */
#define CFG_SECCOMP_DEFAULT_PATH "/usr/share/sandpool/seccomp.json"

/* Reads the seccomp profile that sandbox.seccomp_profile names (blocking file I/O: start-up and
 * reload only), checks it with cfg_parse_seccomp() and points every profile of c at it (see
 * struct cfg_profile). With "" it does nothing (the caller warns). Call after cfg_validate().
 * Errors: -errno of open/read, -EMSGSIZE, -EINVAL, each with a message naming the option and the
 * file; c is unchanged then. */
int cfg_load_seccomp(struct cfg *c, struct err *reterr);
/* Checks that data[len] is a seccomp profile as Docker and Podman read it: a JSON object (no
 * duplicate keys; at most CFG_SECCOMP_MAX_BYTES) whose "defaultAction" denies (SCMP_ACT_ERRNO,
 * _KILL, _KILL_PROCESS, _KILL_THREAD or _TRAP: an allow-by-default profile would pass what the
 * engine's default blocks) and whose "syscalls" is a non-empty array of rules, each an object
 * with an "action" string and "names" (non-empty array of strings) or "name". Pure. On success
 * *ret_compact is the profile re-encoded compact (malloc'd; keys in file order). Errors: -EINVAL
 * or -EMSGSIZE with a message; *ret_compact untouched. */
int cfg_parse_seccomp(const char *data, size_t len, char **ret_compact, struct err *reterr);

/* The sessions of profile p one tenant may hold: its max_per_tenant, or else half its max when
 * c has several tenants; 0: no bound (a single tenant). */
unsigned cfg_profile_tenant_share(const struct cfg *c, const struct cfg_profile *p);
/* Whether sessions of p may hibernate: a snapshot store and p's "hibernate" "allowed". */
bool cfg_profile_may_hibernate(const struct cfg *c, const struct cfg_profile *p);
/* True when profile p leaves the process cap to its runtime ("pids_enforced_by": "runtime"). */
bool cfg_pids_by_runtime(const struct cfg_profile *p);
/* True when profile p runs under the engine's default runtime (runtime "runc": no HostConfig
 * Runtime is sent, and the memory cap is the kernel's per cgroup, not a sandbox VM's). */
bool cfg_runtime_is_default(const struct cfg_profile *p);

/* Returns the profile named name, or NULL. */
const struct cfg_profile *cfg_profile_find(const struct cfg *c, const char *name);
const struct cfg_tenant *cfg_tenant_find(const struct cfg *c, const char *id);
/* Whether tenant t may use profile name. */
bool cfg_tenant_allows(const struct cfg_tenant *t, const char *profile);

/* E2B templateIDs and the profiles they name (docs/e2b.md). */
#define CFG_E2B_TEMPLATES_MAX 32
struct cfg_e2b_template {
    char name[65];
    char profile[49];
};
/* The templates tenant t may name, into out[max]: e2b.templates' entries, then "base" and
 * "code-interpreter-v1" for t's first profile unless listed. Returns how many. Pure. */
size_t cfg_e2b_templates(const struct cfg *c, const struct cfg_tenant *t,
                         struct cfg_e2b_template *out, size_t max);
/* The tenant one of whose E2B keys hashes to digest, or NULL (constant time over all keys). */
const struct cfg_tenant *cfg_e2b_key_tenant(const struct cfg *c,
                                            const uint8_t digest[CFG_SHA256_LEN]);
/* The warm containers of profile reserved for tenant t. */
unsigned cfg_tenant_reserved(const struct cfg_tenant *t, const char *profile);
/* The warm containers of profile reserved for tenants other than tenant (NULL: for all). */
unsigned cfg_reserved_for_others(const struct cfg *c, const char *tenant, const char *profile);

/* Renders the effective configuration as indented JSON (malloc'd, caller frees). */
char *cfg_dump(const struct cfg *c);

/* One line per daemon-wide option for --help (flag, environment name, help, default, and
 * whether SIGHUP applies it); returns a malloc'd string. */
char *cfg_help(void);

/* ---- reload (SIGHUP) ----------------------------------------------------------------------------
 *
 * The running configuration is one struct cfg whose address never changes: the API, the session
 * manager, the pools and the sessions borrow it and its profiles for their whole life. A reload
 * loads and validates a new struct cfg (next), then:
 *   1. cfg_diff(live, next) names every difference and whether its row is reloadable;
 *   2. cfg_reload_keep(next, live) sets every difference that needs a restart back to the running
 *      value (the profile set, a profile's command and image, listen, engine.socket, ...);
 *   3. cfg_validate(next) again: the mix must hold too (a raised max against the old uid range);
 *   4. cfg_reload_commit(live, next) exchanges the reloadable rows (the CFG_RELOADABLE rows of
 *      both tables) and the tenants: live holds the new values, next the old ones; cfg_free(next).
 * What changes under a borrower is numbers and the strings of reloadable rows (tokens, log
 * level and format), read where they are used, and the tenants array, which nobody keeps a
 * pointer into across a loop turn (requests copy the tenant's id). Profiles stay where they are;
 * only their reloadable numbers change. All four steps are pure. */

struct cfg_change {
    char name[160]; /* "engine.timeout_ms", "profiles.python.warm", "tenants.acme", "profiles.go" */
    char detail[224]; /* "15000 -> 2000", "added", "removed", "token_sha256 changed", ... */
    bool reloadable;
};

struct cfg_diff {
    struct cfg_change *changes;
    size_t n;
};

/* Every difference between a and b (validated configs), in table order: the daemon-wide rows,
 * the seccomp profile's content, the profiles (added, removed, their command, their rows), the
 * tenants (added, removed, changed). Secret rows (token hashes) show no values. Pure. */
void cfg_diff(const struct cfg *a, const struct cfg *b, struct cfg_diff *ret);
void cfg_diff_done(struct cfg_diff *d);
/* Sets every part of next that may not change while running to live's value: the rows without
 * CFG_RELOADABLE, the seccomp profile read, the profile set and each profile's command; the
 * reloadable rows of a profile live still has come from next. Pure. */
void cfg_reload_keep(struct cfg *next, const struct cfg *live);
/* Exchanges the reloadable rows and the tenants of live and next, which cfg_reload_keep() made
 * alike in everything else (asserted: the same profiles in the same order). Pure. */
void cfg_reload_commit(struct cfg *live, struct cfg *next);

struct cfg_redis_addr {
    char path[108]; /* unix socket path, or "" for TCP */
    char host[256];
    uint16_t port;
    unsigned db;
};

/* Parses a redis.url value. -EINVAL when malformed; *ret untouched on failure. */
int cfg_parse_redis_url(const char *url, struct cfg_redis_addr *ret);

/* Parses 64 hex digits into out[32]. -EINVAL otherwise. */
int cfg_parse_sha256_hex(const char *hex, uint8_t out[CFG_SHA256_LEN]);
