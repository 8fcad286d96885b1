/* Configuration loading and validation; see config.h.
 *
 * Two tables drive everything: `options` for daemon-wide settings (fields of struct cfg) and
 * `profile_options` for the keys of each profile (fields of struct cfg_profile). A row's default
 * is a string parsed by the same code that parses environment variables and flags, so there is
 * exactly one parser per type. JSON values must have the row's JSON type: a number given as a
 * string, or a string given as a number, is an error rather than a guess.
 *
 * Nothing here touches the event loop; cfg_load_file() and cfg_load_seccomp() do blocking file
 * I/O and are only called at start-up or on reload (docs/internals/style.md §6.1). */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "log/log.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/parse.h"
#include "util/utf8.h"

#define CFG_MAX_FILE_BYTES   (1u << 20)
#define CFG_MAX_PROFILES     64
#define CFG_MAX_TENANTS      4096
#define CFG_MAX_TENANT_LIMIT 1000000

enum cfg_type {
    CFG_STRING,
    CFG_UINT,
    CFG_U64,
    CFG_DOUBLE,
};

enum {
    CFG_IMMUTABLE = 0,
    CFG_RELOADABLE = 1 << 0,
    CFG_NONEMPTY = 1 << 1, /* strings: "" is invalid */
};

struct cfg_option {
    const char *name; /* dotted JSON path */
    const char *def;
    const char *help;
    size_t offset;
    double min, max; /* numeric bounds, inclusive */
    enum cfg_type type;
    unsigned flags;
};

/* clang-format off */
#define OPT(n, t, field, d, lo, hi, fl, h) {n, d, h, offsetof(struct cfg, field), lo, hi, t, fl}
#define POPT(n, t, field, d, lo, hi, fl, h) \
    {n, d, h, offsetof(struct cfg_profile, field), lo, hi, t, fl}
/* clang-format on */

static const struct cfg_option options[] = {
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
    OPT("redis.url", CFG_STRING, redis_url, "unix:///run/sandpool/redis.sock", 0, 0, CFG_NONEMPTY,
        "redis://HOST:PORT[/DB] or unix:///path[?db=N]"),
    OPT("redis.prefix", CFG_STRING, redis_prefix, "sandpool:", 0, 0, 0,
        "prefix of every Redis key"),
    OPT("redis.timeout_ms", CFG_UINT, redis_timeout_ms, "2000", 50, 60000, CFG_RELOADABLE,
        "deadline of one Redis command"),
    OPT("admin_token_sha256", CFG_STRING, admin_token_sha256, "", 0, 0, CFG_RELOADABLE,
        "hex SHA-256 of the admin bearer token"),
    OPT("metrics_token_sha256", CFG_STRING, metrics_token_sha256, "", 0, 0, CFG_RELOADABLE,
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
    OPT("http.header_timeout_s", CFG_UINT, http_header_timeout_s, "10", 1, 600, 0,
        "a request head must arrive whole within this time"),
};

static const struct cfg_option profile_options[] = {
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

/* ---- typed field access ---------------------------------------------------------------------- */

static void *
field(void *base, const struct cfg_option *o)
{
    return (char *)base + o->offset;
}

static int
check_range(const struct cfg_option *o, double v, struct err *reterr)
{
    if (v < o->min || v > o->max) {
        return err_set(reterr, -EINVAL, "'%s' must be between %g and %g", o->name, o->min, o->max);
    }
    return 0;
}

/* Sets a field from its textual form (defaults, environment, flags). */
static int
set_from_string(void *base, const struct cfg_option *o, const char *value, struct err *reterr)
{
    uint64_t u;
    double d;

    switch (o->type) {
    case CFG_STRING: {
        char **p = field(base, o);

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
        if (check_range(o, (double)u, reterr) < 0) {
            return -EINVAL;
        }
        if (o->type == CFG_UINT) {
            *(unsigned *)field(base, o) = (unsigned)u;
        } else {
            *(uint64_t *)field(base, o) = u;
        }
        return 0;
    case CFG_DOUBLE:
        if (parse_double(value, 0, 1e12, &d) < 0) {
            return err_set(reterr, -EINVAL, "'%s' must be a non-negative number", o->name);
        }
        if (check_range(o, d, reterr) < 0) {
            return -EINVAL;
        }
        *(double *)field(base, o) = d;
        return 0;
    }
    return -EINVAL;
}

/* Sets a field from a JSON value of the matching JSON type. `where` names the key for errors. */
static int
set_from_json(void *base, const struct cfg_option *o, json_t *v, const char *where,
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
        return set_from_string(base, o, json_string_value(v), reterr);
    case CFG_UINT:
    case CFG_U64:
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            return err_set(reterr, -EINVAL, "'%s' must be a non-negative integer", where);
        }
        (void)snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return set_from_string(base, o, num, reterr);
    case CFG_DOUBLE:
        if (!json_is_number(v) || json_number_value(v) < 0) {
            return err_set(reterr, -EINVAL, "'%s' must be a non-negative number", where);
        }
        if (check_range(o, json_number_value(v), reterr) < 0) {
            return -EINVAL;
        }
        *(double *)field(base, o) = json_number_value(v);
        return 0;
    }
    return -EINVAL;
}

static json_t *
field_to_json(void *base, const struct cfg_option *o)
{
    switch (o->type) {
    case CFG_STRING:
        return json_string(*(char **)field(base, o));
    case CFG_UINT:
        return json_integer(*(unsigned *)field(base, o));
    case CFG_U64:
        return json_integer((json_int_t) * (uint64_t *)field(base, o));
    case CFG_DOUBLE:
        return json_real(*(double *)field(base, o));
    }
    return json_null();
}

static void
free_strings(void *base, const struct cfg_option *tab, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (tab[i].type == CFG_STRING) {
            char **p = field(base, &tab[i]);

            free(*p);
            *p = NULL;
        }
    }
}

static void
apply_defaults(void *base, const struct cfg_option *tab, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int r = set_from_string(base, &tab[i], tab[i].def, NULL);

        assert(r == 0); /* a default outside its own bounds is a programming error */
        (void)r;
    }
}

/* ---- profiles and tenants -------------------------------------------------------------------- */

/* Frees a NULL-terminated array of strings (NULL is fine). */
static void
strv_free(char **v)
{
    for (char **a = v; a != NULL && *a != NULL; a++) {
        free(*a);
    }
    free(v);
}

static void
profile_done(struct cfg_profile *p)
{
    free_strings(p, profile_options, ELEMENTSOF(profile_options));
    free(p->name);
    strv_free(p->command);
    memset(p, 0, sizeof(*p));
}

static void
profiles_clear(struct cfg *c)
{
    for (size_t i = 0; i < c->n_profiles; i++) {
        profile_done(&c->profiles[i]);
    }
    free(c->profiles);
    c->profiles = NULL;
    c->n_profiles = 0;
}

static void
tenants_clear(struct cfg *c)
{
    for (size_t i = 0; i < c->n_tenants; i++) {
        free(c->tenants[i].id);
        strv_free(c->tenants[i].profiles);
        strv_free(c->tenants[i].reserved_profiles);
        free(c->tenants[i].reserved);
    }
    free(c->tenants);
    c->tenants = NULL;
    c->n_tenants = 0;
}

static struct cfg_profile *
profile_add(struct cfg *c, const char *name)
{
    struct cfg_profile *p;

    c->profiles = xrealloc(c->profiles, (c->n_profiles + 1) * sizeof(*c->profiles));
    p = &c->profiles[c->n_profiles++];
    memset(p, 0, sizeof(*p));
    p->name = xstrdup(name);
    apply_defaults(p, profile_options, ELEMENTSOF(profile_options));
    return p;
}

static int
load_command(struct cfg_profile *p, json_t *v, struct err *reterr)
{
    size_t i, n;
    json_t *a;

    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > 64) {
        return err_set(reterr, -EINVAL,
                       "profile '%s': 'command' must be an array of 1 to 64 strings", p->name);
    }
    n = json_array_size(v);
    p->command = xcalloc(n + 1, sizeof(char *));
    json_array_foreach (v, i, a) {
        if (!json_is_string(a) || strlen(json_string_value(a)) != json_string_length(a)) {
            return err_set(reterr, -EINVAL, "profile '%s': 'command' must hold strings", p->name);
        }
        p->command[i] = xstrdup(json_string_value(a));
    }
    return 0;
}

static int
load_profile(struct cfg *c, const char *name, json_t *obj, struct err *reterr)
{
    struct cfg_profile *p;
    const char *key;
    char where[160];
    json_t *v;
    int r;

    if (!str_is_name(name, 48)) {
        return err_set(reterr, -EINVAL,
                       "profile name '%.48s' must be 1-48 characters of [A-Za-z0-9._-]", name);
    }
    if (!json_is_object(obj)) {
        return err_set(reterr, -EINVAL, "profile '%s' must be an object", name);
    }
    p = profile_add(c, name);
    json_object_foreach (obj, key, v) {
        const struct cfg_option *o = NULL;

        if (strcmp(key, "command") == 0) {
            r = load_command(p, v, reterr);
            if (r < 0) {
                return r;
            }
            continue;
        }
        for (size_t i = 0; i < ELEMENTSOF(profile_options); i++) {
            if (strcmp(profile_options[i].name, key) == 0) {
                o = &profile_options[i];
            }
        }
        (void)snprintf(where, sizeof(where), "profiles.%s.%s", name, key);
        if (o == NULL) {
            return err_set(reterr, -EINVAL, "unknown key '%.100s'", where);
        }
        r = set_from_json(p, o, v, where, reterr);
        if (r < 0) {
            return r;
        }
    }
    return 0;
}

static int
load_profiles(struct cfg *c, json_t *obj, struct err *reterr)
{
    const char *name;
    json_t *v;
    int r;

    if (!json_is_object(obj) || json_object_size(obj) == 0) {
        return err_set(reterr, -EINVAL, "'profiles' must be a non-empty object");
    }
    if (json_object_size(obj) > CFG_MAX_PROFILES) {
        return err_set(reterr, -EINVAL, "at most %d profiles", CFG_MAX_PROFILES);
    }
    profiles_clear(c);
    json_object_foreach (obj, name, v) {
        r = load_profile(c, name, v, reterr);
        if (r < 0) {
            return r;
        }
    }
    return 0;
}

int
cfg_parse_sha256_hex(const char *hex, uint8_t out[CFG_SHA256_LEN])
{
    uint8_t tmp[CFG_SHA256_LEN];

    if (strlen(hex) != (size_t)2 * CFG_SHA256_LEN) {
        return -EINVAL;
    }
    for (size_t i = 0; i < (size_t)2 * CFG_SHA256_LEN; i++) {
        char ch = hex[i];
        unsigned v;

        if (ch >= '0' && ch <= '9') {
            v = (unsigned)(ch - '0');
        } else if (ch >= 'a' && ch <= 'f') {
            v = (unsigned)(ch - 'a' + 10);
        } else if (ch >= 'A' && ch <= 'F') {
            v = (unsigned)(ch - 'A' + 10);
        } else {
            return -EINVAL;
        }
        if (i % 2 == 0) {
            tmp[i / 2] = (uint8_t)(v << 4);
        } else {
            tmp[i / 2] |= (uint8_t)v;
        }
    }
    memcpy(out, tmp, sizeof(tmp));
    return 0;
}

static int
load_tenants(struct cfg *c, json_t *arr, struct err *reterr)
{
    size_t i;
    json_t *t;

    if (!json_is_array(arr)) {
        return err_set(reterr, -EINVAL, "'tenants' must be an array");
    }
    if (json_array_size(arr) > CFG_MAX_TENANTS) {
        return err_set(reterr, -EINVAL, "at most %d tenants", CFG_MAX_TENANTS);
    }
    tenants_clear(c);
    c->tenants = xcalloc(json_array_size(arr), sizeof(*c->tenants));
    json_array_foreach (arr, i, t) {
        const char *id = NULL, *hash = NULL;
        json_int_t max_sessions = 0, max_running = 0;
        json_t *profiles = NULL, *reserved = NULL, *v;
        json_error_t jerr;
        const char *key;
        size_t k;

        if (json_unpack_ex(t, &jerr, JSON_STRICT, "{s:s, s:s, s?I, s?I, s?o, s?o}", "id", &id,
                           "token_sha256", &hash, "max_sessions", &max_sessions, "max_running",
                           &max_running, "profiles", &profiles, "reserved", &reserved) < 0) {
            return err_set(reterr, -EINVAL, "tenants[%zu]: %s", i, jerr.text);
        }
        if (max_sessions < 0 || max_sessions > CFG_MAX_TENANT_LIMIT || max_running < 0 ||
            max_running > CFG_MAX_TENANT_LIMIT) {
            return err_set(reterr, -EINVAL,
                           "tenants[%zu]: 'max_sessions' and 'max_running' must be 0 (no limit) "
                           "to %d",
                           i, CFG_MAX_TENANT_LIMIT);
        }
        if (profiles != NULL && (!json_is_array(profiles) || json_array_size(profiles) == 0 ||
                                 json_array_size(profiles) > CFG_MAX_PROFILES)) {
            return err_set(reterr, -EINVAL,
                           "tenants[%zu]: 'profiles' must be a non-empty array of profile names",
                           i);
        }
        json_array_foreach (profiles, k, v) {
            if (!json_is_string(v) || !str_is_name(json_string_value(v), 48)) {
                return err_set(reterr, -EINVAL, "tenants[%zu]: 'profiles[%zu]' must be a name", i,
                               k);
            }
        }
        if (reserved != NULL &&
            (!json_is_object(reserved) || json_object_size(reserved) > CFG_MAX_PROFILES)) {
            return err_set(reterr, -EINVAL,
                           "tenants[%zu]: 'reserved' must be an object {\"<profile>\": <count>}",
                           i);
        }
        json_object_foreach (reserved, key, v) {
            if (!str_is_name(key, 48) || !json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > 10000) {
                return err_set(reterr, -EINVAL,
                               "tenants[%zu]: 'reserved' maps profile names to counts of 0 to "
                               "10000",
                               i);
            }
        }
        if (!str_is_name(id, 64)) {
            return err_set(reterr, -EINVAL,
                           "tenants[%zu]: 'id' must be 1-64 characters of [A-Za-z0-9._-]", i);
        }
        if (cfg_parse_sha256_hex(hash, c->tenants[i].token_sha256) < 0) {
            return err_set(reterr, -EINVAL, "tenants[%zu]: 'token_sha256' must be 64 hex digits",
                           i);
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(c->tenants[j].id, id) == 0) {
                return err_set(reterr, -EINVAL, "tenants[%zu]: duplicate id '%s'", i, id);
            }
        }
        c->tenants[i].id = xstrdup(id);
        c->tenants[i].max_sessions = (unsigned)max_sessions;
        c->tenants[i].max_running = (unsigned)max_running;
        if (profiles != NULL) {
            c->tenants[i].profiles = xcalloc(json_array_size(profiles) + 1, sizeof(char *));
            json_array_foreach (profiles, k, v) {
                c->tenants[i].profiles[k] = xstrdup(json_string_value(v));
            }
        }
        if (reserved != NULL) {
            c->tenants[i].reserved_profiles =
                xcalloc(json_object_size(reserved) + 1, sizeof(char *));
            c->tenants[i].reserved = xcalloc(json_object_size(reserved) + 1, sizeof(unsigned));
            k = 0;
            json_object_foreach (reserved, key, v) {
                c->tenants[i].reserved_profiles[k] = xstrdup(key);
                c->tenants[i].reserved[k++] = (unsigned)json_integer_value(v);
            }
        }
        c->n_tenants = i + 1;
    }
    return 0;
}

/* ---- the daemon-wide table ------------------------------------------------------------------- */

static const struct cfg_option *
option_find(const char *name)
{
    for (size_t i = 0; i < ELEMENTSOF(options); i++) {
        if (strcmp(options[i].name, name) == 0) {
            return &options[i];
        }
    }
    return NULL;
}

/* True when some option lives under "prefix." (so "engine" is a section, not an unknown key). */
static bool
is_section(const char *prefix)
{
    size_t n = strlen(prefix);

    for (size_t i = 0; i < ELEMENTSOF(options); i++) {
        if (strncmp(options[i].name, prefix, n) == 0 && options[i].name[n] == '.') {
            return true;
        }
    }
    return false;
}

static int
load_object(struct cfg *c, json_t *obj, const char *prefix, struct err *reterr)
{
    const char *key;
    json_t *v;
    int r;

    json_object_foreach (obj, key, v) {
        char path[128];
        const struct cfg_option *o;

        if (snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "." : "", key) >=
            (int)sizeof(path)) {
            return err_set(reterr, -EINVAL, "key '%.60s...' is too long", key);
        }
        if (prefix[0] == '\0' && strcmp(key, "profiles") == 0) {
            r = load_profiles(c, v, reterr);
        } else if (prefix[0] == '\0' && strcmp(key, "tenants") == 0) {
            r = load_tenants(c, v, reterr);
        } else if ((o = option_find(path)) != NULL) {
            r = set_from_json(c, o, v, path, reterr);
        } else if (is_section(path)) {
            if (!json_is_object(v)) {
                return err_set(reterr, -EINVAL, "'%s' must be an object", path);
            }
            r = load_object(c, v, path, reterr);
        } else {
            return err_set(reterr, -EINVAL, "unknown key '%s'", path);
        }
        if (r < 0) {
            return r;
        }
    }
    return 0;
}

struct cfg *
cfg_new(void)
{
    struct cfg *c = xcalloc(1, sizeof(*c));

    apply_defaults(c, options, ELEMENTSOF(options));
    (void)profile_add(c, "python");
    return c;
}

struct cfg *
cfg_free(struct cfg *c)
{
    if (c == NULL) {
        return NULL;
    }
    free_strings(c, options, ELEMENTSOF(options));
    profiles_clear(c);
    tenants_clear(c);
    free(c->seccomp);
    free(c);
    return NULL;
}

/* Parses len bytes of what (named in messages) as JSON of at most max bytes, duplicate keys
 * refused: 0 with a new reference in *ret, -EMSGSIZE or -EINVAL. */
static int
parse_document(const char *what, const char *data, size_t len, size_t max, json_t **ret,
               struct err *reterr)
{
    json_error_t jerr;

    if (len > max) {
        return err_set(reterr, -EMSGSIZE, "%s: larger than %zu bytes", what, max);
    }
    *ret = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (*ret == NULL) {
        return err_set(reterr, -EINVAL, "%s: line %d column %d: %s", what, jerr.line, jerr.column,
                       jerr.text);
    }
    return 0;
}

int
cfg_load_json(struct cfg *c, const char *data, size_t len, struct err *reterr)
{
    json_t *root = NULL;
    int r;

    r = parse_document("configuration", data, len, CFG_MAX_FILE_BYTES, &root, reterr);
    if (r < 0) {
        return r;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        return err_set(reterr, -EINVAL, "configuration must be a JSON object");
    }
    r = load_object(c, root, "", reterr);
    json_decref(root);
    return r;
}

/* Reads all of path into *b (at most b->max bytes). Blocking: start-up and reload only. */
static int
read_file(const char *path, struct buf *b, struct err *reterr)
{
    cleanup_close int fd = -1;
    char chunk[16384];
    ssize_t n;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return err_set(reterr, -errno, "cannot open '%s': %s", path, strerror(errno));
    }
    while ((n = read(fd, chunk, sizeof(chunk))) != 0) {
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return err_set(reterr, -errno, "cannot read '%s': %s", path, strerror(errno));
        }
        if (buf_append(b, chunk, (size_t)n) < 0) {
            return err_set(reterr, -EMSGSIZE, "'%s' is larger than %zu bytes", path, b->max);
        }
    }
    return 0;
}

int
cfg_load_file(struct cfg *c, const char *path, struct err *reterr)
{
    struct buf b = BUF_INIT(CFG_MAX_FILE_BYTES);
    int r = read_file(path, &b, reterr);

    if (r == 0) {
        r = cfg_load_json(c, b.buf, b.len, reterr);
    }
    buf_done(&b);
    return r;
}

/* ---- the sandbox seccomp profile ------------------------------------------------------------ */

/* A profile's defaultAction must refuse: with an allowing one the rules are a denylist, and every
 * call the engine's default keeps out (and every call newer than the profile) would pass. */
static bool
seccomp_action_denies(const char *action)
{
    static const char *const deny[] = {"SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS",
                                       "SCMP_ACT_KILL_THREAD", "SCMP_ACT_TRAP"};

    for (size_t i = 0; i < ELEMENTSOF(deny); i++) {
        if (strcmp(action, deny[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* One entry of "syscalls": {"action": "...", "names": ["...", ...]} (or Docker's older "name"). */
static bool
seccomp_rule_valid(json_t *rule)
{
    json_t *names = json_object_get(rule, "names");
    size_t i;
    json_t *v;

    if (!json_is_object(rule) || !json_is_string(json_object_get(rule, "action"))) {
        return false;
    }
    if (names == NULL) {
        return json_is_string(json_object_get(rule, "name"));
    }
    if (!json_is_array(names) || json_array_size(names) == 0) {
        return false;
    }
    json_array_foreach (names, i, v) {
        if (!json_is_string(v) || json_string_length(v) == 0) {
            return false;
        }
    }
    return true;
}

static int
seccomp_check(json_t *root, struct err *reterr)
{
    const char *action = json_string_value(json_object_get(root, "defaultAction"));
    json_t *rules = json_object_get(root, "syscalls");
    size_t i;
    json_t *rule;

    if (!json_is_object(root)) {
        return err_set(reterr, -EINVAL, "seccomp profile: not a JSON object");
    }
    if (action == NULL || !seccomp_action_denies(action)) {
        return err_set(reterr, -EINVAL,
                       "seccomp profile: 'defaultAction' must refuse (SCMP_ACT_ERRNO, _KILL*, "
                       "_TRAP), not '%.40s'",
                       action != NULL ? action : "(unset)");
    }
    if (!json_is_array(rules) || json_array_size(rules) == 0) {
        return err_set(reterr, -EINVAL, "seccomp profile: 'syscalls' must be a non-empty array");
    }
    json_array_foreach (rules, i, rule) {
        if (!seccomp_rule_valid(rule)) {
            return err_set(reterr, -EINVAL,
                           "seccomp profile: syscalls[%zu] needs an 'action' and 'names' (a "
                           "non-empty list of names)",
                           i);
        }
    }
    return 0;
}

int
cfg_parse_seccomp(const char *data, size_t len, char **ret_compact, struct err *reterr)
{
    json_t *root = NULL;
    char *compact;
    int r;

    r = parse_document("seccomp profile", data, len, CFG_SECCOMP_MAX_BYTES, &root, reterr);
    if (r < 0) {
        return r;
    }
    r = seccomp_check(root, reterr);
    if (r < 0) {
        json_decref(root);
        return r;
    }
    compact = OOM_CHECK(json_dumps(root, JSON_COMPACT));
    json_decref(root);
    if (strlen(compact) > CFG_SECCOMP_MAX_BYTES) {
        free(compact); /* a re-encoding longer than its source: escapes turned into more text */
        return err_set(reterr, -EMSGSIZE, "seccomp profile: larger than %u bytes compact",
                       CFG_SECCOMP_MAX_BYTES);
    }
    *ret_compact = compact;
    return 0;
}

int
cfg_load_seccomp(struct cfg *c, struct err *reterr)
{
    struct buf b = BUF_INIT(CFG_SECCOMP_MAX_BYTES);
    const char *path = c->sandbox_seccomp_profile;
    struct err e = {0};
    char *compact = NULL;
    int r;

    if (path[0] == '\0') {
        return 0;
    }
    r = read_file(path, &b, &e);
    if (r == 0) {
        r = cfg_parse_seccomp(b.buf, b.len, &compact, &e);
    }
    buf_done(&b);
    if (r == -ENOENT) {
        return err_set(reterr, r,
                       "'sandbox.seccomp_profile': %s (install deploy/seccomp/sandbox.json there, "
                       "or name another file)",
                       err_msg(&e));
    }
    if (r < 0) {
        return err_set(reterr, r, "'sandbox.seccomp_profile': %s", err_msg(&e));
    }
    free(c->seccomp);
    c->seccomp = compact;
    for (size_t i = 0; i < c->n_profiles; i++) {
        c->profiles[i].seccomp = c->seccomp;
        c->profiles[i].seccomp_path = c->sandbox_seccomp_profile;
    }
    return 0;
}

/* "engine.socket" -> "ENGINE_SOCKET"; "engine-socket" -> "engine.socket" lookups. */
static void
env_name(const char *opt, char *out, size_t n)
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

static bool
flag_matches(const char *opt, const char *name)
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

int
cfg_set(struct cfg *c, const char *name, const char *value, struct err *reterr)
{
    for (size_t i = 0; i < ELEMENTSOF(options); i++) {
        if (flag_matches(options[i].name, name)) {
            return set_from_string(c, &options[i], value, reterr);
        }
    }
    return err_set(reterr, -ENOENT, "unknown option '%s'", name);
}

int
cfg_apply_env(struct cfg *c, const char *const *envp, char *ret_unknown, size_t un,
              struct err *reterr)
{
    static const char *const not_options[] = {"CONFIG", "TOKEN", "URL"};
    size_t used = 0;

    if (ret_unknown != NULL && un > 0) {
        ret_unknown[0] = '\0';
    }
    for (const char *const *e = envp; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        char name[96];
        bool found = false;
        size_t n;
        int r;

        if (!str_startswith(*e, "SANDPOOL_") || eq == NULL) {
            continue;
        }
        n = MIN((size_t)(eq - *e) - strlen("SANDPOOL_"), sizeof(name) - 1);
        memcpy(name, *e + strlen("SANDPOOL_"), n);
        name[n] = '\0';
        for (size_t i = 0; i < ELEMENTSOF(not_options); i++) {
            found = found || strcmp(name, not_options[i]) == 0;
        }
        for (size_t i = 0; !found && i < ELEMENTSOF(options); i++) {
            char want[96];

            env_name(options[i].name, want, sizeof(want));
            if (strcmp(want, name) == 0) {
                r = set_from_string(c, &options[i], eq + 1, reterr);
                if (r < 0) {
                    return err_wrap(reterr, r, "SANDPOOL_%s", name);
                }
                found = true;
            }
        }
        if (!found && ret_unknown != NULL && used + 1 < un) {
            int w =
                snprintf(ret_unknown + used, un - used, "%sSANDPOOL_%s", used ? ", " : "", name);

            used = w < 0 ? used : MIN(used + (size_t)w, un - 1);
        }
    }
    return 0;
}

/* ---- validation ------------------------------------------------------------------------------ */

unsigned
cfg_profile_tenant_share(const struct cfg *c, const struct cfg_profile *p)
{
    if (p->max_per_tenant > 0) {
        return p->max_per_tenant;
    }
    return c->n_tenants > 1 ? MAX(1u, p->max / 2) : 0;
}

bool
cfg_pids_by_runtime(const struct cfg_profile *p)
{
    return strcmp(p->pids_enforced_by, "runtime") == 0;
}

static int
validate_profile(const struct cfg_profile *p, struct err *reterr)
{
    if (p->warm > p->max) {
        return err_set(reterr, -EINVAL, "profile '%s': warm (%u) is larger than max (%u)", p->name,
                       p->warm, p->max);
    }
    if (p->max_per_tenant > p->max) {
        return err_set(reterr, -EINVAL, "profile '%s': max_per_tenant (%u) is larger than max (%u)",
                       p->name, p->max_per_tenant, p->max);
    }
    if (!str_is_name(p->runtime, 64)) {
        return err_set(reterr, -EINVAL, "profile '%s': bad 'runtime' '%.64s'", p->name, p->runtime);
    }
    if (strcmp(p->pids_enforced_by, "cgroup") != 0 && strcmp(p->pids_enforced_by, "runtime") != 0) {
        return err_set(reterr, -EINVAL,
                       "profile '%s': 'pids_enforced_by' must be \"cgroup\" or \"runtime\"",
                       p->name);
    }
    /* runc has no limit of its own: without the cgroup nothing would cap the processes. Which
     * binary a runtime name stands for is only known from the engine (server.c checks it). */
    if (cfg_pids_by_runtime(p) && strcmp(p->runtime, "runc") == 0) {
        return err_set(
            reterr, -EINVAL,
            "profile '%s': 'pids_enforced_by' \"runtime\" needs a runtime with a process "
            "limit of its own (runsc); runc relies on the cgroup",
            p->name);
    }
    /* gVisor counts RLIMIT_NPROC per user inside its own kernel, i.e. per sandbox: with the
     * cgroup out, nproc is the process cap, so it must not be looser than pids. */
    if (cfg_pids_by_runtime(p) && p->nproc > p->pids) {
        return err_set(reterr, -EINVAL,
                       "profile '%s': with 'pids_enforced_by' \"runtime\", 'nproc' (%u) caps the "
                       "sandbox's processes and must be at most 'pids' (%u)",
                       p->name, p->nproc, p->pids);
    }
    for (const char *s = p->image; *s != '\0'; s++) {
        if (*s <= ' ' || *s == 0x7f) {
            return err_set(reterr, -EINVAL, "profile '%s': bad 'image'", p->name);
        }
    }
    return 0;
}

int
cfg_parse_redis_url(const char *url, struct cfg_redis_addr *ret)
{
    struct cfg_redis_addr a = {0};
    const char *rest, *q;
    uint64_t v;

    if (str_startswith(url, "unix://")) {
        rest = url + strlen("unix://");
        q = strchr(rest, '?');
        size_t n = q ? (size_t)(q - rest) : strlen(rest);

        if (n == 0 || rest[0] != '/' || n >= sizeof(a.path)) {
            return -EINVAL;
        }
        memcpy(a.path, rest, n);
        if (q != NULL) {
            if (!str_startswith(q, "?db=") || parse_u64(q + 4, &v) < 0 || v > 15) {
                return -EINVAL;
            }
            a.db = (unsigned)v;
        }
    } else if (str_startswith(url, "redis://")) {
        const char *colon, *slash;

        rest = url + strlen("redis://");
        slash = strchr(rest, '/');
        colon = memrchr(rest, ':', slash ? (size_t)(slash - rest) : strlen(rest));
        if (colon == NULL || colon == rest || (size_t)(colon - rest) >= sizeof(a.host)) {
            return -EINVAL;
        }
        memcpy(a.host, rest, (size_t)(colon - rest));
        if (parse_u64n(colon + 1, slash ? (size_t)(slash - colon - 1) : strlen(colon + 1), &v) <
                0 ||
            v == 0 || v > 65535) {
            return -EINVAL;
        }
        a.port = (uint16_t)v;
        if (slash != NULL && slash[1] != '\0') {
            if (parse_u64(slash + 1, &v) < 0 || v > 15) {
                return -EINVAL;
            }
            a.db = (unsigned)v;
        }
    } else {
        return -EINVAL;
    }
    *ret = a;
    return 0;
}

static int
validate_global(struct cfg *c, struct err *reterr)
{
    struct cfg_redis_addr ra;
    uint8_t hash[CFG_SHA256_LEN];
    char host[256];
    uint16_t port;

    if (parse_listen(c->listen, host, sizeof(host), &port) < 0) {
        return err_set(reterr, -EINVAL,
                       "'listen' must be HOST:PORT, [IPV6]:PORT or unix:/path, not '%.80s'",
                       c->listen);
    }
    if (c->engine_socket[0] != '/' || strlen(c->engine_socket) >= 108) {
        return err_set(reterr, -EINVAL, "'engine.socket' must be an absolute path under 108 bytes");
    }
    if (cfg_parse_redis_url(c->redis_url, &ra) < 0) {
        return err_set(reterr, -EINVAL,
                       "'redis.url' must be redis://HOST:PORT[/DB] or unix:///PATH[?db=N]");
    }
    if (strlen(c->redis_prefix) > 64) {
        return err_set(reterr, -EINVAL, "'redis.prefix' is longer than 64 bytes");
    }
    if (c->admin_token_sha256[0] != '\0' && cfg_parse_sha256_hex(c->admin_token_sha256, hash) < 0) {
        return err_set(reterr, -EINVAL, "'admin_token_sha256' must be 64 hex digits");
    }
    if (c->metrics_token_sha256[0] != '\0' &&
        cfg_parse_sha256_hex(c->metrics_token_sha256, hash) < 0) {
        return err_set(reterr, -EINVAL, "'metrics_token_sha256' must be 64 hex digits");
    }
    if (c->http_health_listen[0] != '\0' &&
        (parse_listen(c->http_health_listen, host, sizeof(host), &port) < 0 ||
         strcmp(c->http_health_listen, c->listen) == 0)) {
        return err_set(reterr, -EINVAL,
                       "'http.health_listen' must be HOST:PORT, [IPV6]:PORT or unix:/path, other "
                       "than 'listen', not '%.80s'",
                       c->http_health_listen);
    }
    /* Podman is sent the path itself ("seccomp=PATH"), and opens it where it runs. */
    if (c->sandbox_seccomp_profile[0] != '\0' &&
        (c->sandbox_seccomp_profile[0] != '/' || strlen(c->sandbox_seccomp_profile) >= PATH_MAX)) {
        return err_set(reterr, -EINVAL,
                       "'sandbox.seccomp_profile' must be an absolute path, or \"\" for the "
                       "engine's default profile");
    }
    if (log_level_from_string(c->log_level) < 0) {
        return err_set(reterr, -EINVAL, "'log.level' must be debug, info, warn or error");
    }
    if (log_format_from_string(c->log_format) < 0) {
        return err_set(reterr, -EINVAL, "'log.format' must be text or json");
    }
    return 0;
}

/* The sandbox uid range: pairs of an even first uid, room for every profile at its max, below
 * 4294967294 ((uid_t)-1 and (uid_t)-2 are no uids to give). */
static int
validate_uids(const struct cfg *c, struct err *reterr)
{
    uint64_t need = 0;

    if (c->sandbox_uid_first % 2 != 0 || c->sandbox_uid_count % 2 != 0) {
        return err_set(reterr, -EINVAL, "'sandbox.uid_first' and 'sandbox.uid_count' must be even");
    }
    if ((uint64_t)c->sandbox_uid_first + c->sandbox_uid_count > 2147483648ull) {
        /* Some tools read a uid as a signed 32-bit number. */
        return err_set(reterr, -EINVAL, "the sandbox uid range ends past uid 2147483647");
    }
    for (size_t i = 0; i < c->n_profiles; i++) {
        need += c->profiles[i].max;
    }
    /* A container keeps its uid until the engine confirmed its removal: those being removed
     * (at most engine.max_concurrency at once) hold theirs beside the profiles' max. */
    if (need + c->engine_max_concurrency > c->sandbox_uid_count / 2) {
        return err_set(reterr, -EINVAL,
                       "'sandbox.uid_count' (%u) holds %u sandboxes; the profiles' 'max' add up "
                       "to %llu, and up to %u more being removed keep theirs "
                       "(engine.max_concurrency; each needs 2 uids)",
                       c->sandbox_uid_count, c->sandbox_uid_count / 2, (unsigned long long)need,
                       c->engine_max_concurrency);
    }
    return 0;
}

int
cfg_validate(struct cfg *c, struct err *reterr)
{
    int r;

    r = validate_global(c, reterr);
    if (r < 0) {
        return r;
    }
    if (strcmp(c->node_id, "auto") == 0) {
        char host[HOST_NAME_MAX + 1] = "";

        if (gethostname(host, sizeof(host)) < 0 || host[0] == '\0') {
            return err_set(reterr, -EINVAL, "node_id is 'auto' and the host has no name");
        }
        host[sizeof(host) - 1] = '\0';
        free(c->node_id);
        c->node_id = xstrdup(host);
    }
    if (!str_is_name(c->node_id, 64)) {
        return err_set(reterr, -EINVAL, "'node_id' must be 1-64 characters of [A-Za-z0-9._-]");
    }
    if (c->n_profiles == 0) {
        return err_set(reterr, -EINVAL, "at least one profile is needed");
    }
    for (size_t i = 0; i < c->n_profiles; i++) {
        r = validate_profile(&c->profiles[i], reterr);
        if (r < 0) {
            return r;
        }
    }
    r = validate_uids(c, reterr);
    if (r < 0) {
        return r;
    }
    for (size_t i = 0; i < c->n_tenants; i++) {
        for (char **p = c->tenants[i].profiles; p != NULL && *p != NULL; p++) {
            if (cfg_profile_find(c, *p) == NULL) {
                return err_set(reterr, -EINVAL,
                               "tenant '%s' names profile '%s', which is not "
                               "configured",
                               c->tenants[i].id, *p);
            }
        }
        for (char **p = c->tenants[i].reserved_profiles; p != NULL && *p != NULL; p++) {
            if (cfg_profile_find(c, *p) == NULL || !cfg_tenant_allows(&c->tenants[i], *p)) {
                return err_set(reterr, -EINVAL,
                               "tenant '%s' reserves containers of profile '%s', which is not "
                               "configured or not allowed to it",
                               c->tenants[i].id, *p);
            }
        }
        for (size_t j = 0; j < i; j++) {
            if (memcmp(c->tenants[i].token_sha256, c->tenants[j].token_sha256, CFG_SHA256_LEN) ==
                0) {
                return err_set(reterr, -EINVAL, "tenants '%s' and '%s' share a token",
                               c->tenants[j].id, c->tenants[i].id);
            }
        }
    }
    for (size_t i = 0; i < c->n_profiles; i++) {
        unsigned sum = cfg_reserved_for_others(c, NULL, c->profiles[i].name);

        if (sum > c->profiles[i].warm) {
            return err_set(reterr, -EINVAL,
                           "tenants reserve %u warm containers of profile '%s', more than its "
                           "'warm' of %u",
                           sum, c->profiles[i].name, c->profiles[i].warm);
        }
    }
    return 0;
}

const struct cfg_tenant *
cfg_tenant_find(const struct cfg *c, const char *id)
{
    for (size_t i = 0; id != NULL && i < c->n_tenants; i++) {
        if (strcmp(c->tenants[i].id, id) == 0) {
            return &c->tenants[i];
        }
    }
    return NULL;
}

void
cfg_swap_tenants(struct cfg *a, struct cfg *b)
{
    struct cfg_tenant *t = a->tenants;
    size_t n = a->n_tenants;

    a->tenants = b->tenants;
    a->n_tenants = b->n_tenants;
    b->tenants = t;
    b->n_tenants = n;
}

bool
cfg_tenant_allows(const struct cfg_tenant *t, const char *profile)
{
    if (t->profiles == NULL) {
        return true;
    }
    for (char **p = t->profiles; *p != NULL; p++) {
        if (strcmp(*p, profile) == 0) {
            return true;
        }
    }
    return false;
}

unsigned
cfg_tenant_reserved(const struct cfg_tenant *t, const char *profile)
{
    for (size_t i = 0; t->reserved_profiles != NULL && t->reserved_profiles[i] != NULL; i++) {
        if (strcmp(t->reserved_profiles[i], profile) == 0) {
            return t->reserved[i];
        }
    }
    return 0;
}

unsigned
cfg_reserved_for_others(const struct cfg *c, const char *tenant, const char *profile)
{
    unsigned sum = 0;

    for (size_t i = 0; i < c->n_tenants; i++) {
        if (tenant == NULL || strcmp(c->tenants[i].id, tenant) != 0) {
            sum += cfg_tenant_reserved(&c->tenants[i], profile);
        }
    }
    return sum;
}

const struct cfg_profile *
cfg_profile_find(const struct cfg *c, const char *name)
{
    for (size_t i = 0; i < c->n_profiles; i++) {
        if (strcmp(c->profiles[i].name, name) == 0) {
            return &c->profiles[i];
        }
    }
    return NULL;
}

/* ---- rendering ------------------------------------------------------------------------------- */

/* Sets the value at dotted path `name` inside root, creating section objects on the way. */
static void
json_set_path(json_t *root, const char *name, json_t *v)
{
    const char *dot = strchr(name, '.');

    if (dot == NULL) {
        OOM_CHECK(json_object_set_new(root, name, v) == 0 ? root : NULL);
        return;
    }
    char sect[64];
    size_t n = MIN((size_t)(dot - name), sizeof(sect) - 1);
    json_t *sub;

    memcpy(sect, name, n);
    sect[n] = '\0';
    sub = json_object_get(root, sect);
    if (sub == NULL) {
        sub = OOM_CHECK(json_object());
        OOM_CHECK(json_object_set_new(root, sect, sub) == 0 ? root : NULL);
    }
    json_set_path(sub, dot + 1, v);
}

char *
cfg_dump(const struct cfg *c)
{
    json_t *root = OOM_CHECK(json_object());
    json_t *profiles = OOM_CHECK(json_object());
    json_t *tenants = OOM_CHECK(json_array());
    char *s;

    for (size_t i = 0; i < ELEMENTSOF(options); i++) {
        json_set_path(root, options[i].name, OOM_CHECK(field_to_json((void *)c, &options[i])));
    }
    for (size_t i = 0; i < c->n_profiles; i++) {
        struct cfg_profile *p = &c->profiles[i];
        json_t *po = OOM_CHECK(json_object());

        for (size_t j = 0; j < ELEMENTSOF(profile_options); j++) {
            json_set_path(po, profile_options[j].name,
                          OOM_CHECK(field_to_json(p, &profile_options[j])));
        }
        if (p->command != NULL) {
            json_t *cmd = OOM_CHECK(json_array());

            for (char **a = p->command; *a != NULL; a++) {
                (void)json_array_append_new(cmd, OOM_CHECK(json_string(*a)));
            }
            json_set_path(po, "command", cmd);
        }
        /* Profile names may contain dots: set by name, not by path. */
        OOM_CHECK(json_object_set_new(profiles, p->name, po) == 0 ? profiles : NULL);
    }
    for (size_t i = 0; i < c->n_tenants; i++) {
        char hex[2 * CFG_SHA256_LEN + 1];

        for (size_t j = 0; j < CFG_SHA256_LEN; j++) {
            (void)snprintf(hex + 2 * j, 3, "%02x", c->tenants[i].token_sha256[j]);
        }
        const struct cfg_tenant *t = &c->tenants[i];
        json_t *o = OOM_CHECK(json_pack("{s:s, s:s, s:I, s:I}", "id", t->id, "token_sha256", hex,
                                        "max_sessions", (json_int_t)t->max_sessions, "max_running",
                                        (json_int_t)t->max_running));

        if (t->profiles != NULL) {
            json_t *names = OOM_CHECK(json_array());

            for (char **p = t->profiles; *p != NULL; p++) {
                (void)json_array_append_new(names, OOM_CHECK(json_string(*p)));
            }
            (void)json_object_set_new(o, "profiles", names);
        }
        if (t->reserved_profiles != NULL) {
            json_t *reserved = OOM_CHECK(json_object());

            for (size_t k = 0; t->reserved_profiles[k] != NULL; k++) {
                (void)json_object_set_new(reserved, t->reserved_profiles[k],
                                          OOM_CHECK(json_integer(t->reserved[k])));
            }
            (void)json_object_set_new(o, "reserved", reserved);
        }
        (void)json_array_append_new(tenants, o);
    }
    json_set_path(root, "tenants", tenants);
    json_set_path(root, "profiles", profiles);
    s = OOM_CHECK(json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS));
    json_decref(root);
    return s;
}

char *
cfg_help(void)
{
    struct buf b = BUF_INIT(SIZE_MAX);

    for (size_t i = 0; i < ELEMENTSOF(options); i++) {
        const struct cfg_option *o = &options[i];
        char flag[96], env[96];
        size_t k;

        for (k = 0; o->name[k] != '\0' && k + 1 < sizeof(flag); k++) {
            flag[k] = (char)(o->name[k] == '.' || o->name[k] == '_' ? '-' : o->name[k]);
        }
        flag[k] = '\0';
        env_name(o->name, env, sizeof(env));
        if (buf_printf(&b, "  --%-24s SANDPOOL_%-24s %s (default '%s')\n", flag, env, o->help,
                       o->def) < 0) {
            oom();
        }
    }
    return buf_detach(&b, NULL);
}
