/* Validation of a loaded configuration: every cross-field rule, checked completely at load and
 * again on reload before anything is swapped in; see config.h. Pure, except that node_id "auto"
 * asks for the host name. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config-internal.h"
#include "config.h"
#include "egress/rules.h"
#include "log/log.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/parse.h"

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

bool
cfg_runtime_is_default(const struct cfg_profile *p)
{
    return strcmp(p->runtime, "runc") == 0;
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
     * binary a runtime name stands for is only known from the engine (src/server/engine.c checks
     * it). */
    if (cfg_pids_by_runtime(p) && cfg_runtime_is_default(p)) {
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

bool
cfg_profile_may_hibernate(const struct cfg *c, const struct cfg_profile *p)
{
    return c->snapshots_store[0] != '\0' && strcmp(p->hibernate, "allowed") == 0;
}

static int
validate_idle_action(const struct cfg *c, const struct cfg_profile *p, struct err *reterr)
{
    if (strcmp(p->hibernate, "allowed") != 0 && strcmp(p->hibernate, "never") != 0) {
        return err_set(reterr, -EINVAL,
                       "profile '%s': 'hibernate' must be \"allowed\" or \"never\"", p->name);
    }
    if (strcmp(p->idle_action, "end") != 0 && strcmp(p->idle_action, "hibernate") != 0) {
        return err_set(reterr, -EINVAL,
                       "profile '%s': 'idle_action' must be \"end\" or \"hibernate\"", p->name);
    }
    if (strcmp(p->idle_action, "hibernate") == 0 && !cfg_profile_may_hibernate(c, p)) {
        return err_set(reterr, -EINVAL,
                       "profile '%s': 'idle_action' \"hibernate\" needs snapshots.store and "
                       "'hibernate' \"allowed\"",
                       p->name);
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
    if (c->queue_max_bytes_per_tenant > c->queue_max_bytes) {
        return err_set(
            reterr, -EINVAL,
            "'queue.max_bytes_per_tenant' (%llu) is larger than 'queue.max_bytes' (%llu)",
            (unsigned long long)c->queue_max_bytes_per_tenant,
            (unsigned long long)c->queue_max_bytes);
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

/* E2B keys are unique, and none is also a tenant's token (which would make a leaked E2B key a
 * REST token too); e2b.templates names configured profiles. */
static int
validate_e2b(const struct cfg *c, struct err *reterr)
{
    for (size_t i = 0; i < c->n_tenants; i++) {
        const struct cfg_tenant *t = &c->tenants[i];

        for (size_t k = 0; k < t->n_e2b_keys; k++) {
            for (size_t j = 0; j < c->n_tenants; j++) {
                if (memcmp(t->e2b_keys_sha256[k], c->tenants[j].token_sha256, CFG_SHA256_LEN) ==
                    0) {
                    return err_set(reterr, -EINVAL,
                                   "tenant '%s' has an E2B key that is tenant '%s''s token", t->id,
                                   c->tenants[j].id);
                }
                for (size_t l = 0; l < c->tenants[j].n_e2b_keys && (j < i || l < k); l++) {
                    if ((j != i || l != k) &&
                        memcmp(t->e2b_keys_sha256[k], c->tenants[j].e2b_keys_sha256[l],
                               CFG_SHA256_LEN) == 0) {
                        return err_set(reterr, -EINVAL, "tenants '%s' and '%s' share an E2B key",
                                       c->tenants[j].id, t->id);
                    }
                }
            }
        }
    }
    return cfg_e2b_templates_check(c, reterr);
}

/* The advertised URL: http://HOST:PORT (or unix:/path, for nodes of one host), printable ASCII;
 * "" becomes the listen address's. */
static int
validate_cluster(struct cfg *c, struct err *reterr)
{
    const char *u = c->cluster_advertise_url;

    if (u[0] == '\0') {
        size_t n = strlen(c->listen) + sizeof("http://");
        char *d = xcalloc(1, n);

        (void)snprintf(d, n, "%s%s", strncmp(c->listen, "unix:", 5) == 0 ? "" : "http://",
                       c->listen);
        free(c->cluster_advertise_url);
        c->cluster_advertise_url = d;
        u = d;
    } else if (!(strncmp(u, "http://", 7) == 0 && u[7] != '\0') &&
               !(strncmp(u, "unix:/", 6) == 0)) {
        return err_set(reterr, -EINVAL,
                       "'cluster.advertise_url' must be http://HOST:PORT (or unix:/path), not "
                       "'%.80s'",
                       u);
    }
    if (strlen(u) > 255) {
        return err_set(reterr, -EINVAL, "'cluster.advertise_url' is longer than 255 bytes");
    }
    for (const char *p = u; *p != '\0'; p++) {
        if (*p <= ' ' || *p > '~') {
            return err_set(reterr, -EINVAL,
                           "'cluster.advertise_url' holds a space or a character outside ASCII");
        }
    }
    return 0;
}

/* egress.hosts and egress.allow_cidrs parse (the proxy reads them again at start); egress.dir is
 * an absolute path; sets egress_node_dir. */
static int
validate_egress(struct cfg *c, struct err *reterr)
{
    struct egress_host *hosts = xcalloc(EGRESS_HOSTS_MAX, sizeof(*hosts));
    struct egress_cidr cidrs[EGRESS_CIDRS_MAX];
    struct buf b = BUF_INIT(SIZE_MAX);
    int r = egress_hosts_parse(c->egress_hosts, hosts, EGRESS_HOSTS_MAX, reterr);

    free(hosts);
    if (r < 0) {
        return err_wrap(reterr, r, "'egress.hosts'");
    }
    r = egress_cidrs_parse(c->egress_allow_cidrs, cidrs, EGRESS_CIDRS_MAX, reterr);
    if (r < 0) {
        return err_wrap(reterr, r, "'egress.allow_cidrs'");
    }
    if (c->egress_dir[0] != '/') {
        return err_set(reterr, -EINVAL, "'egress.dir' must be an absolute path");
    }
    /* This node's gates: <dir>/<node_id>/<32 hex digits>/proxy.sock must fit a unix socket's
     * address (108 bytes) when a profile has an egress list. */
    if (buf_printf(&b, "%s/%s", c->egress_dir, c->node_id) < 0) {
        oom();
    }
    free(c->egress_node_dir);
    c->egress_node_dir = b.buf;
    for (size_t i = 0; i < c->n_profiles; i++) {
        const struct cfg_profile *p = &c->profiles[i];

        if (p->egress != NULL && strlen(c->egress_node_dir) > EGRESS_DIR_MAX) {
            return err_set(reterr, -ENAMETOOLONG,
                           "'egress.dir' and the node id together ('%s') are longer than %d "
                           "characters: a gate's socket path must fit a unix socket address",
                           c->egress_node_dir, EGRESS_DIR_MAX);
        }
        if (p->egress != NULL && p->nofile < EGRESS_FORWARDER_FDS(c->egress_max_connections)) {
            return err_set(reterr, -EINVAL,
                           "profile '%s': its nofile (%u) is below the %lu descriptors its "
                           "egress forwarder may hold with egress.max_connections %u: raise "
                           "nofile or lower egress.max_connections",
                           p->name, p->nofile, EGRESS_FORWARDER_FDS(c->egress_max_connections),
                           c->egress_max_connections);
        }
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
    r = validate_cluster(c, reterr);
    if (r < 0) {
        return r;
    }
    r = validate_egress(c, reterr);
    if (r < 0) {
        return r;
    }
    if (c->n_profiles == 0) {
        return err_set(reterr, -EINVAL, "at least one profile is needed");
    }
    for (size_t i = 0; i < c->n_profiles; i++) {
        r = validate_profile(&c->profiles[i], reterr);
        if (r < 0) {
            return r;
        }
        r = validate_idle_action(c, &c->profiles[i], reterr);
        if (r < 0) {
            return r;
        }
        c->profiles[i].egress_dir = c->egress_node_dir;
        c->profiles[i].egress_port = c->egress_port;
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
    return validate_e2b(c, reterr);
}
