/* Unit tests for configuration loading: defaults, strict JSON, environment, flags, validation. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "config/config.h"
#include "egress/rules.h"
#include "tap.h"
#include "util/macro.h"

#define HASH_LITERAL "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
static const char *const HASH = HASH_LITERAL;

static int
load(struct cfg **ret, const char *json, struct err *e)
{
    struct cfg *c = cfg_new();
    int r = cfg_load_json(c, json, strlen(json), e);

    if (r == 0) {
        r = cfg_validate(c, e);
    }
    if (r < 0) {
        cfg_free(c);
        return r;
    }
    *ret = c;
    return 0;
}

TEST(defaults)
{
    struct cfg *c = cfg_new();
    const struct cfg_profile *p;
    struct err e = {0};

    ASSERT_OK(cfg_validate(c, &e));
    ASSERT_STREQ(c->listen, "127.0.0.1:8080");
    ASSERT_TRUE(strcmp(c->node_id, "auto") != 0); /* resolved */
    p = cfg_profile_find(c, "python");
    ASSERT_TRUE(p != NULL);
    ASSERT_STREQ(p->image, "sandpool/python:latest");
    ASSERT_EQ_U(p->warm, 4);
    ASSERT_EQ_U(p->max, 64);
    ASSERT_EQ_U(p->memory_mb, 512);
    ASSERT_EQ_U(p->max_output_bytes, 1048576);
    ASSERT_TRUE(p->cpus > 0.99 && p->cpus < 1.01);
    ASSERT_STREQ(c->cluster_advertise_url, "http://127.0.0.1:8080"); /* the listen address's */
    ASSERT_EQ_U(c->cluster_heartbeat_ms, 1000);
    cfg_free(c);
}

TEST(cluster)
{
    struct cfg *c = NULL;
    struct err e = {0};

    ASSERT_OK(load(&c, "{\"listen\": \"unix:/run/sp.sock\"}", &e));
    ASSERT_STREQ(c->cluster_advertise_url, "unix:/run/sp.sock");
    cfg_free(c);
    ASSERT_OK(load(&c, "{\"cluster\": {\"advertise_url\": \"unix:/run/other.sock\"}}", &e));
    cfg_free(c);
    ASSERT_OK(load(&c, "{\"cluster\": {\"advertise_url\": \"http://10.0.0.5:9000\"}}", &e));
    ASSERT_STREQ(c->cluster_advertise_url, "http://10.0.0.5:9000");
    cfg_free(c);
    ASSERT_ERR(load(&c, "{\"cluster\": {\"advertise_url\": \"ftp://x\"}}", &e), EINVAL);
    ASSERT_TRUE(strstr(e.msg, "http://HOST:PORT") != NULL);
    ASSERT_ERR(load(&c, "{\"cluster\": {\"advertise_url\": \"http://\"}}", &e), EINVAL);
    ASSERT_ERR(load(&c, "{\"cluster\": {\"advertise_url\": \"http://a b\"}}", &e), EINVAL);
    ASSERT_TRUE(strstr(e.msg, "space") != NULL);
    ASSERT_ERR(load(&c, "{\"cluster\": {\"heartbeat_ms\": 10}}", &e), EINVAL);
}

/* Egress by name (docs/egress.md): a profile's list is checked and kept (its text printed back),
 * the hosts map and the ranges are checked at load. */
TEST(egress)
{
    struct cfg *c = NULL, *c2 = NULL;
    struct err e = {0};
    char *text;

    ASSERT_OK(load(&c,
                   "{\"egress\": {\"hosts\": \"pypi.org=127.0.0.1\", \"allow_cidrs\": "
                   "\"127.0.0.1/32\"}, \"profiles\": {\"net\": {\"egress\": {\"allow\": "
                   "[\"pypi.org\", \"*.pythonhosted.org:443\"], \"deny\": [\"x.pypi.org\"]}},"
                   " \"plain\": {}}}",
                   &e));
    if (c == NULL) {
        return;
    }
    ASSERT_TRUE(c->profiles[0].egress != NULL && c->profiles[0].egress->n_allow == 2 &&
                c->profiles[0].egress->n_deny == 1);
    ASSERT_TRUE(c->profiles[1].egress == NULL); /* no list: no network at all */
    ASSERT_EQ_U(c->egress_port, 3128);
    text = cfg_dump(c);
    ASSERT_OK(load(&c2, text, &e)); /* printed back as it was given */
    ASSERT_TRUE(c2 != NULL && c2->profiles[0].egress_json != NULL &&
                strcmp(c2->profiles[0].egress_json, c->profiles[0].egress_json) == 0);
    free(text);
    cfg_free(c);
    cfg_free(c2);
    ASSERT_ERR(load(&c, "{\"profiles\": {\"p\": {\"egress\": {\"allow\": [\"a b\"]}}}}", &e),
               EINVAL);
    ASSERT_TRUE(strstr(e.msg, "profiles.p.egress.allow") != NULL);
    ASSERT_ERR(load(&c, "{\"profiles\": {\"p\": {\"egress\": [\"a.com\"]}}}", &e), EINVAL);
    ASSERT_ERR(load(&c, "{\"egress\": {\"hosts\": \"a.com=nowhere\"}}", &e), EINVAL);
    ASSERT_TRUE(strstr(e.msg, "egress.hosts") != NULL);
    ASSERT_ERR(load(&c, "{\"egress\": {\"allow_cidrs\": \"10.0.0.1/8\"}}", &e), EINVAL);
    ASSERT_TRUE(strstr(e.msg, "egress.allow_cidrs") != NULL);
    ASSERT_ERR(load(&c, "{\"egress\": {\"dir\": \"relative\"}}", &e), EINVAL);
    /* <dir>/<slot>/proxy.sock must fit a unix socket's address. */
    ASSERT_ERR(load(&c,
                    "{\"egress\": {\"dir\": "
                    "\"/var/lib/sandpool/a-very-long-directory-name/for-the-gates\"}, \"node_id\":"
                    " \"node-7\", \"profiles\": {\"p\": {\"egress\": {\"allow\": [\"a.com\"]}}}}",
                    &e),
               ENAMETOOLONG);
    ASSERT_TRUE(strstr(e.msg, "egress.dir") != NULL);
    /* The forwarder's descriptors must fit the profile's nofile: 7 * (200 + 4) + 16 > 1024. */
    ASSERT_ERR(load(&c,
                    "{\"egress\": {\"max_connections\": 200}, \"profiles\": {\"p\": {\"egress\": "
                    "{\"allow\": [\"a.com\"]}}}}",
                    &e),
               EINVAL);
    TAP_CHECK(strstr(e.msg, "nofile (1024) is below the 1444 descriptors") != NULL, "%s", e.msg);
    ASSERT_OK(load(&c,
                   "{\"egress\": {\"max_connections\": 200}, \"profiles\": {\"p\": {\"nofile\": "
                   "1444, \"egress\": {\"allow\": [\"a.com\"]}}}}",
                   &e));
    cfg_free(c);
    /* Every profile knows where its gates are and the forwarder's port (docker/policy.c). */
    ASSERT_OK(
        load(&c, "{\"egress\": {\"dir\": \"/run/g\", \"port\": 8080}, \"node_id\": \"n-1\"}", &e));
    if (c != NULL) {
        ASSERT_STREQ(c->profiles[0].egress_dir, "/run/g/n-1"); /* each node its own */
        ASSERT_EQ_U(c->profiles[0].egress_port, 8080);
        cfg_free(c);
    }
}

TEST(full_file)
{
    struct cfg *c = NULL;
    struct err e = {0};
    const struct cfg_profile *p;
    char json[2048];

    (void)snprintf(
        json, sizeof(json),
        "{\"listen\": \"127.0.0.1:9090\", \"node_id\": \"n1\","
        " \"engine\": {\"socket\": \"/run/docker.sock\"},"
        " \"redis\": {\"url\": \"unix:///run/sandpool/redis.sock\", \"prefix\": \"sp:\"},"
        " \"tenants\": [{\"id\": \"acme\", \"token_sha256\": \"%s\"}],"
        " \"admin_token_sha256\": \"%s\","
        " \"profiles\": {\"py\": {\"image\": \"img:1\", \"warm\": 2, \"max\": 3,"
        " \"cpus\": 0.5, \"command\": [\"sleep\", \"1\"], \"max_output_bytes\": 4096}}}",
        HASH, HASH);
    ASSERT_OK(load(&c, json, &e));
    if (c == NULL) {
        return;
    }
    ASSERT_STREQ(c->node_id, "n1");
    ASSERT_STREQ(c->engine_socket, "/run/docker.sock");
    ASSERT_STREQ(c->redis_prefix, "sp:");
    ASSERT_EQ_U(c->n_tenants, 1);
    ASSERT_STREQ(c->tenants[0].id, "acme");
    ASSERT_EQ_U(c->tenants[0].token_sha256[0], 0x9f);
    ASSERT_EQ_U(c->n_profiles, 1);
    ASSERT_TRUE(cfg_profile_find(c, "python") == NULL); /* file profiles replace defaults */
    p = cfg_profile_find(c, "py");
    ASSERT_TRUE(p != NULL && p->warm == 2 && p->max == 3 && p->memory_mb == 512);
    ASSERT_STREQ(p->command[1], "1");
    ASSERT_TRUE(p->command[2] == NULL);
    cfg_free(c);
}

TEST(rejects)
{
    static const struct {
        const char *json;
        const char *msg_part;
    } cases[] = {
        {"{\"listne\": \"x\"}", "unknown key 'listne'"},
        {"{\"engine\": {\"sockett\": \"/x\"}}", "unknown key 'engine.sockett'"},
        {"{\"engine\": \"/x\"}", "'engine' must be an object"},
        {"{\"listen\": 8080}", "'listen' must be a string"},
        {"{\"listen\": \"nowhere\"}", "'listen' must be"},
        {"{\"engine\": {\"timeout_ms\": \"100\"}}", "must be a non-negative integer"},
        {"{\"engine\": {\"timeout_ms\": 5}}", "between"},
        {"{\"listen\": \"a:1\", \"listen\": \"b:2\"}", "duplicate"},
        {"{\"profiles\": {}}", "non-empty"},
        {"{\"profiles\": {\"p\": {\"warm\": 5, \"max\": 2}}}", "warm (5) is larger than max"},
        /* One uid per sandbox: a profile names none (sandbox.uid_first and uid_count do). */
        {"{\"profiles\": {\"p\": {\"user\": \"1000:1000\"}}}", "unknown key 'profiles.p.user'"},
        {"{\"sandbox\": {\"uid_first\": 1000001}}", "must be even"},
        {"{\"sandbox\": {\"uid_count\": 3}}", "must be even"},
        {"{\"sandbox\": {\"uid_first\": 1000}}", "between"},
        {"{\"sandbox\": {\"uid_first\": 2147483000}}", "ends past uid 2147483647"},
        {"{\"sandbox\": {\"uid_count\": 64}, \"profiles\": {\"p\": {\"max\": 33}}}",
         "holds 32 sandboxes; the profiles' 'max' add up to 33"},
        {"{\"profiles\": {\"p\": {\"memory_mb\": 1}}}", "between"},
        {"{\"profiles\": {\"p\": {\"wram\": 1}}}", "unknown key 'profiles.p.wram'"},
        {"{\"profiles\": {\"bad name\": {}}}", "profile name"},
        {"{\"profiles\": {\"p\": {\"command\": []}}}", "'command' must be"},
        {"{\"tenants\": [{\"id\": \"a\"}]}", "tenants[0]"},
        {"{\"tenants\": [{\"id\": \"a\", \"token_sha256\": \"zz\"}]}", "64 hex digits"},
        {"{\"tenants\": [{\"id\": \"a\", \"token_sha256\": \"" /* extra key */
         "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\", \"x\": 1}]}",
         "tenants[0]"},
        {"{\"redis\": {\"url\": \"http://x\"}}", "'redis.url' must be"},
        {"{\"log\": {\"level\": \"loud\"}}", "'log.level'"},
        {"[1,2]", "must be a JSON object"},
        {"{\"listen\": ", "line 1"},
        {"{\"node_id\": \"a b\"}", "'node_id'"},
        {"{\"sandbox\": {\"seccomp_profile\": \"seccomp.json\"}}",
         "'sandbox.seccomp_profile' must be an absolute path, or \"\" for the engine's default"},
        {"{\"profiles\": {\"p\": {\"pids_enforced_by\": \"kernel\"}}}",
         "'pids_enforced_by' must be \"cgroup\" or \"runtime\""},
        {"{\"profiles\": {\"p\": {\"pids_enforced_by\": \"runtime\", \"nproc\": 64}}}",
         "profile 'p': 'pids_enforced_by' \"runtime\" needs a runtime with a process limit of its own "
         "(runsc); runc relies on the cgroup"},
        {"{\"profiles\": {\"p\": {\"runtime\": \"runsc\", \"pids_enforced_by\": \"runtime\"}}}",
         "'nproc' (65536) caps the sandbox's processes and must be at most 'pids' (128)"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct cfg *c = NULL;
        struct err e = {0};
        int r = load(&c, cases[i].json, &e);

        TAP_CHECK(r == -EINVAL && strstr(e.msg, cases[i].msg_part) != NULL,
                  "reject %s -> %d '%s' (want '%s')", cases[i].json, r, e.msg, cases[i].msg_part);
        cfg_free(c);
    }
}

TEST(duplicate_tokens)
{
    struct cfg *c = NULL;
    struct err e = {0};
    char json[1024];

    (void)snprintf(json, sizeof(json),
                   "{\"tenants\": [{\"id\": \"a\", \"token_sha256\": \"%s\"},"
                   " {\"id\": \"b\", \"token_sha256\": \"%s\"}]}",
                   HASH, HASH);
    ASSERT_ERR(load(&c, json, &e), EINVAL);
    ASSERT_TRUE(strstr(e.msg, "share a token") != NULL);
}

TEST(reserved_share)
{
    struct cfg *c = NULL, *c2 = NULL;
    struct err e = {0};
    char json[1024], *text;

    (void)snprintf(
        json, sizeof(json),
        "{\"profiles\": {\"python\": {\"warm\": 3}, \"big\": {\"warm\": 0}},"
        " \"tenants\": [{\"id\": \"a\", \"token_sha256\": \"%s\", \"max_sessions\": 2,"
        " \"profiles\": [\"python\"], \"reserved\": {\"python\": 2}},"
        " {\"id\": \"b\", \"token_sha256\": \"%.63s0\", \"reserved\": {\"python\": 1}}]}",
        HASH, HASH);
    ASSERT_OK(load(&c, json, &e));
    if (c == NULL) {
        return;
    }
    ASSERT_EQ_U(cfg_tenant_reserved(&c->tenants[0], "python"), 2);
    ASSERT_EQ_U(cfg_tenant_reserved(&c->tenants[0], "big"), 0);
    ASSERT_EQ_U(cfg_reserved_for_others(c, "a", "python"), 1);
    ASSERT_EQ_U(cfg_reserved_for_others(c, "b", "python"), 2);
    ASSERT_EQ_U(cfg_reserved_for_others(c, "nobody", "python"), 3);
    ASSERT_EQ_U(cfg_reserved_for_others(c, NULL, "python"), 3);
    /* --print-config keeps quotas and reservations */
    text = cfg_dump(c);
    ASSERT_OK(load(&c2, text, &e));
    if (c2 != NULL) {
        ASSERT_EQ_U(c2->tenants[0].max_sessions, 2);
        ASSERT_STREQ(c2->tenants[0].profiles[0], "python");
        ASSERT_EQ_U(cfg_tenant_reserved(&c2->tenants[0], "python"), 2);
    }
    free(text);
    cfg_free(c2);
    cfg_free(c);
    /* more reserved than warm; a reservation of a profile the tenant may not use */
    (void)snprintf(json, sizeof(json),
                   "{\"profiles\": {\"python\": {\"warm\": 1}}, \"tenants\": [{\"id\": \"a\","
                   " \"token_sha256\": \"%s\", \"reserved\": {\"python\": 2}}]}",
                   HASH);
    ASSERT_ERR(load(&c, json, &e), EINVAL);
    ASSERT_TRUE(strstr(e.msg, "more than its 'warm' of 1") != NULL);
    (void)snprintf(json, sizeof(json),
                   "{\"profiles\": {\"python\": {}, \"big\": {}}, \"tenants\": [{\"id\": \"a\","
                   " \"token_sha256\": \"%s\", \"profiles\": [\"python\"],"
                   " \"reserved\": {\"big\": 1}}]}",
                   HASH);
    ASSERT_ERR(load(&c, json, &e), EINVAL);
    ASSERT_TRUE(strstr(e.msg, "not allowed") != NULL);
}

TEST(env_and_flags)
{
    struct cfg *c = cfg_new();
    struct err e = {0};
    const char *env_ok[] = {"PATH=/bin",
                            "SANDPOOL_ENGINE_SOCKET=/e.sock",
                            "SANDPOOL_LISTEN=unix:/l",
                            "SANDPOOL_CONFIG=/x",
                            "SANDPOOL_TOKEN=t",
                            NULL};
    const char *env_bad[] = {"SANDPOOL_LISTNE=x", NULL};
    const char *env_badval[] = {"SANDPOOL_ENGINE_TIMEOUT_MS=abc", NULL};

    char unknown[64];

    ASSERT_OK(cfg_apply_env(c, env_ok, unknown, sizeof(unknown), &e));
    ASSERT_STREQ(unknown, "");
    ASSERT_STREQ(c->engine_socket, "/e.sock");
    ASSERT_STREQ(c->listen, "unix:/l");
    ASSERT_OK(cfg_apply_env(c, env_bad, unknown, sizeof(unknown), &e));
    ASSERT_STREQ(unknown, "SANDPOOL_LISTNE");
    ASSERT_ERR(cfg_apply_env(c, env_badval, NULL, 0, &e), EINVAL);
    ASSERT_OK(cfg_set(c, "engine-timeout-ms", "2000", &e));
    ASSERT_EQ_U(c->engine_timeout_ms, 2000);
    ASSERT_OK(cfg_set(c, "redis.url", "redis://127.0.0.1:6379/2", &e));
    ASSERT_ERR(cfg_set(c, "nope", "1", &e), ENOENT);
    ASSERT_ERR(cfg_set(c, "listen", "", &e), EINVAL);
    ASSERT_OK(cfg_validate(c, &e));
    cfg_free(c);
}

TEST(redis_urls)
{
    struct cfg_redis_addr a;

    ASSERT_OK(cfg_parse_redis_url("unix:///run/r.sock", &a));
    ASSERT_STREQ(a.path, "/run/r.sock");
    ASSERT_OK(cfg_parse_redis_url("unix:///run/r.sock?db=3", &a));
    ASSERT_EQ_U(a.db, 3);
    ASSERT_OK(cfg_parse_redis_url("redis://localhost:6380/1", &a));
    ASSERT_STREQ(a.host, "localhost");
    ASSERT_EQ_U(a.port, 6380);
    ASSERT_EQ_U(a.db, 1);
    ASSERT_ERR(cfg_parse_redis_url("redis://localhost", &a), EINVAL);
    ASSERT_ERR(cfg_parse_redis_url("unix://relative", &a), EINVAL);
    ASSERT_ERR(cfg_parse_redis_url("redis://h:1/99", &a), EINVAL);
}

TEST(dump_round_trip)
{
    struct cfg *c = cfg_new(), *c2 = NULL;
    struct err e = {0};
    char *text;

    ASSERT_OK(cfg_validate(c, &e));
    text = cfg_dump(c);
    ASSERT_TRUE(strstr(text, "\"engine\"") != NULL);
    ASSERT_OK(load(&c2, text, &e)); /* what we print is a valid config file */
    if (c2 != NULL) {
        ASSERT_STREQ(c2->listen, c->listen);
        ASSERT_EQ_U(c2->profiles[0].pids, c->profiles[0].pids);
    }
    free(text);
    cfg_free(c);
    cfg_free(c2);
}

/* gVisor: the profile leaves the process cap to the runtime (nproc within pids); the default is
 * the cgroup, also for runsc profiles (the engine check refuses those, see test-policy). */
TEST(pids_enforced_by)
{
    struct cfg *c = NULL;
    struct err e = {0};
    const struct cfg_profile *p;
    char *text;

    ASSERT_OK(load(&c,
                   "{\"profiles\": {\"g\": {\"runtime\": \"runsc\", \"pids_enforced_by\": "
                   "\"runtime\", \"pids\": 128, \"nproc\": 128}, \"s\": {\"runtime\": \"runsc\"}}}",
                   &e));
    if (c == NULL) {
        return;
    }
    p = cfg_profile_find(c, "g");
    ASSERT_TRUE(p != NULL && cfg_pids_by_runtime(p));
    p = cfg_profile_find(c, "s");
    ASSERT_TRUE(p != NULL && !cfg_pids_by_runtime(p));
    ASSERT_STREQ(p->pids_enforced_by, "cgroup");
    text = cfg_dump(c);
    ASSERT_TRUE(strstr(text, "\"pids_enforced_by\": \"runtime\"") != NULL);
    free(text);
    cfg_free(c);
}

/* ---- the sandbox seccomp profile ----------------------------------------------------------- */

#define SMALL_PROFILE                                                                      \
    "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"defaultErrnoRet\": 38,\n \"syscalls\": [\n" \
    "  {\"names\": [\"read\", \"write\"], \"action\": \"SCMP_ACT_ALLOW\"},\n"              \
    "  {\"name\": \"io_uring_setup\", \"action\": \"SCMP_ACT_ERRNO\", \"errnoRet\": 38}]}\n"
/* The same, compact, keys in the file's order. */
#define SMALL_COMPACT                                                                              \
    "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"defaultErrnoRet\":38,\"syscalls\":[{\"names\":"       \
    "[\"read\",\"write\"],\"action\":\"SCMP_ACT_ALLOW\"},{\"name\":\"io_uring_setup\",\"action\":" \
    "\"SCMP_ACT_ERRNO\",\"errnoRet\":38}]}"

TEST(seccomp_parse)
{
    static const struct {
        const char *json;
        const char *msg_part;
    } bad[] = {
        {"", "line 1"},
        {"[]", "not a JSON object"},
        {"{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"defaultAction\": \"SCMP_ACT_ALLOW\","
         " \"syscalls\": [{\"names\": [\"read\"], \"action\": \"SCMP_ACT_ALLOW\"}]}",
         "duplicate"},
        /* Allowing by default would pass what the engine's default keeps out. */
        {"{\"defaultAction\": \"SCMP_ACT_ALLOW\", \"syscalls\": [{\"names\": [\"bpf\"],"
         " \"action\": \"SCMP_ACT_ERRNO\"}]}",
         "'defaultAction' must refuse (SCMP_ACT_ERRNO, _KILL*, _TRAP), not 'SCMP_ACT_ALLOW'"},
        {"{\"defaultAction\": \"SCMP_ACT_LOG\", \"syscalls\": [{\"names\": [\"bpf\"],"
         " \"action\": \"SCMP_ACT_ERRNO\"}]}",
         "not 'SCMP_ACT_LOG'"},
        {"{\"syscalls\": [{\"names\": [\"read\"], \"action\": \"SCMP_ACT_ALLOW\"}]}",
         "not '(unset)'"},
        {"{\"defaultAction\": 1, \"syscalls\": []}", "not '(unset)'"},
        {"{\"defaultAction\": \"SCMP_ACT_ERRNO\"}", "'syscalls' must be a non-empty array"},
        {"{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": []}", "non-empty array"},
        {"{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": {}}", "non-empty array"},
        {"{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [1]}", "syscalls[0] needs"},
        {"{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\"]}]}",
         "syscalls[0] needs an 'action'"},
        {"{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\"],"
         " \"action\": \"SCMP_ACT_ALLOW\"}, {\"names\": [], \"action\": \"SCMP_ACT_ALLOW\"}]}",
         "syscalls[1] needs"},
        {"{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\", 2],"
         " \"action\": \"SCMP_ACT_ALLOW\"}]}",
         "syscalls[0] needs"},
        {"{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"\"],"
         " \"action\": \"SCMP_ACT_ALLOW\"}]}",
         "syscalls[0] needs"},
        {"{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"action\": \"SCMP_ACT_ALLOW\"}]}",
         "syscalls[0] needs"},
    };
    char *compact = NULL, *big;
    struct err e = {0};

    ASSERT_OK(cfg_parse_seccomp(SMALL_PROFILE, strlen(SMALL_PROFILE), &compact, &e));
    ASSERT_STREQ(compact != NULL ? compact : "(null)", SMALL_COMPACT);
    free(compact);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *out = NULL;
        int r = cfg_parse_seccomp(bad[i].json, strlen(bad[i].json), &out, &e);

        TAP_CHECK(r == -EINVAL && strstr(e.msg, bad[i].msg_part) != NULL && out == NULL,
                  "reject profile %s -> %d '%s' (want '%s'; output untouched)", bad[i].json, r,
                  e.msg, bad[i].msg_part);
        free(out);
    }
    /* Bounded: one byte past the limit is refused before it is parsed. */
    big = malloc(CFG_SECCOMP_MAX_BYTES + 2);
    ASSERT_TRUE(big != NULL);
    if (big == NULL) {
        return;
    }
    memset(big, ' ', CFG_SECCOMP_MAX_BYTES + 1);
    memcpy(big, SMALL_PROFILE, strlen(SMALL_PROFILE));
    big[CFG_SECCOMP_MAX_BYTES + 1] = '\0';
    compact = NULL;
    ASSERT_ERR(cfg_parse_seccomp(big, CFG_SECCOMP_MAX_BYTES + 1, &compact, &e), EMSGSIZE);
    ASSERT_TRUE(compact == NULL);
    ASSERT_OK(cfg_parse_seccomp(big, CFG_SECCOMP_MAX_BYTES, &compact, &e)); /* trailing spaces */
    ASSERT_STREQ(compact != NULL ? compact : "(null)", SMALL_COMPACT);
    free(compact);
    free(big);
}

/* Writes data to a new temporary file; its path in path[64]. */
static bool
temp_file(char path[64], const char *data, size_t len)
{
    int fd;
    bool ok;

    (void)snprintf(path, 64, "/tmp/test-config-XXXXXX");
    fd = mkstemp(path);
    if (fd < 0) {
        return false;
    }
    ok = write(fd, data, len) == (ssize_t)len;
    (void)close(fd);
    return ok;
}

TEST(seccomp_load)
{
    struct cfg *c = NULL;
    struct err e = {0};
    char path[64], json[256], *text;

    /* The default names the installed profile; "" leaves it to the engine. */
    c = cfg_new();
    ASSERT_STREQ(c->sandbox_seccomp_profile, CFG_SECCOMP_DEFAULT_PATH);
    ASSERT_STREQ(CFG_SECCOMP_DEFAULT_PATH, "/usr/share/sandpool/seccomp.json");
    ASSERT_OK(cfg_set(c, "sandbox-seccomp-profile", "", &e));
    ASSERT_OK(cfg_validate(c, &e));
    ASSERT_OK(cfg_load_seccomp(c, &e));
    ASSERT_TRUE(c->seccomp == NULL && c->profiles[0].seccomp == NULL &&
                c->profiles[0].seccomp_path == NULL);
    cfg_free(c);

    ASSERT_TRUE(temp_file(path, SMALL_PROFILE, strlen(SMALL_PROFILE)));
    (void)snprintf(json, sizeof(json),
                   "{\"sandbox\": {\"seccomp_profile\": \"%s\"}, \"profiles\": {\"a\": {},"
                   " \"b\": {}}}",
                   path);
    ASSERT_OK(load(&c, json, &e));
    if (c == NULL) {
        return;
    }
    ASSERT_TRUE(c->seccomp == NULL); /* cfg_validate() reads no file */
    ASSERT_OK(cfg_load_seccomp(c, &e));
    ASSERT_STREQ(c->seccomp != NULL ? c->seccomp : "(null)", SMALL_COMPACT);
    for (size_t i = 0; i < c->n_profiles; i++) {
        TAP_CHECK(c->profiles[i].seccomp == c->seccomp &&
                      c->profiles[i].seccomp_path == c->sandbox_seccomp_profile,
                  "profile '%s' points at the profile read", c->profiles[i].name);
    }
    ASSERT_EQ_U(c->n_profiles, 2);
    text = cfg_dump(c);
    ASSERT_TRUE(strstr(text, "\"seccomp_profile\": \"/tmp/test-config-") != NULL);
    free(text);
    cfg_free(c); /* frees the profile read too (ASan would see a leak) */

    /* Errors name the option and the file, and leave the config as it was. */
    (void)unlink(path);
    c = cfg_new();
    ASSERT_OK(cfg_set(c, "sandbox.seccomp_profile", path, &e));
    ASSERT_OK(cfg_validate(c, &e));
    ASSERT_ERR(cfg_load_seccomp(c, &e), ENOENT);
    TAP_CHECK(strstr(e.msg, "'sandbox.seccomp_profile': cannot open '/tmp/test-config-") != NULL &&
                  strstr(e.msg, "(install deploy/seccomp/sandbox.json there") != NULL,
              "missing file: '%s'", e.msg);
    ASSERT_TRUE(c->seccomp == NULL && c->profiles[0].seccomp == NULL);
    {
        static const char allow[] = "{\"defaultAction\": \"SCMP_ACT_ALLOW\"}";

        ASSERT_TRUE(temp_file(path, allow, strlen(allow)));
    }
    ASSERT_OK(cfg_set(c, "sandbox.seccomp_profile", path, &e));
    ASSERT_ERR(cfg_load_seccomp(c, &e), EINVAL);
    TAP_CHECK(strstr(e.msg, "'sandbox.seccomp_profile': seccomp profile: 'defaultAction' must "
                            "refuse") != NULL,
              "allow-by-default file: '%s'", e.msg);
    ASSERT_TRUE(c->seccomp == NULL && c->profiles[0].seccomp == NULL);
    (void)unlink(path);
    {
        /* Too large a file: refused while it is read. */
        size_t n = CFG_SECCOMP_MAX_BYTES + 1;
        char *big = malloc(n);

        ASSERT_TRUE(big != NULL);
        if (big != NULL) {
            memset(big, ' ', n);
            ASSERT_TRUE(temp_file(path, big, n));
            ASSERT_OK(cfg_set(c, "sandbox.seccomp_profile", path, &e));
            ASSERT_ERR(cfg_load_seccomp(c, &e), EMSGSIZE);
            TAP_CHECK(strstr(e.msg, "is larger than 262144 bytes") != NULL, "big file: '%s'",
                      e.msg);
            (void)unlink(path);
            free(big);
        }
    }
    /* A directory cannot be read as one. */
    ASSERT_OK(cfg_set(c, "sandbox.seccomp_profile", "/tmp", &e));
    ASSERT_ERR(cfg_load_seccomp(c, &e), EISDIR);
    cfg_free(c);

    /* The environment sets it like any option. */
    {
        const char *env[] = {"SANDPOOL_SANDBOX_SECCOMP_PROFILE=/etc/sandpool/seccomp.json", NULL};

        c = cfg_new();
        ASSERT_OK(cfg_apply_env(c, env, NULL, 0, &e));
        ASSERT_STREQ(c->sandbox_seccomp_profile, "/etc/sandpool/seccomp.json");
        cfg_free(c);
    }
}

/* The profile the project ships (deploy/seccomp/sandbox.json) is one the daemon accepts, and
 * carries the denials it was made for. The path is the source tree's, from this file's (meson
 * compiles and runs the tests in the build directory). */
TEST(seccomp_shipped)
{
    char path[4096];
    const char *slash = strrchr(__FILE__, '/');
    struct cfg *c = cfg_new();
    struct err e = {0};
    json_t *root;

    (void)snprintf(path, sizeof(path), "%.*s/../../deploy/seccomp/sandbox.json",
                   slash != NULL ? (int)(slash - __FILE__) : 1, slash != NULL ? __FILE__ : ".");
    ASSERT_OK(cfg_set(c, "sandbox.seccomp_profile", path, &e));
    ASSERT_OK(cfg_load_seccomp(c, &e));
    if (c->seccomp == NULL) {
        printf("# %s: %s\n", path, e.msg);
        cfg_free(c);
        return;
    }
    root = json_loads(c->seccomp, 0, NULL);
    ASSERT_TRUE(root != NULL);
    {
        static const struct {
            const char *name;
            int errno_ret; /* 0: allowed */
        } want[] = {
            {"io_uring_setup", ENOSYS},
            {"io_uring_enter", ENOSYS},
            {"io_uring_register", ENOSYS},
            {"clone3", ENOSYS},
            {"userfaultfd", EPERM},
            {"perf_event_open", EPERM},
            {"bpf", EPERM},
            {"keyctl", EPERM},
            {"add_key", EPERM},
            {"request_key", EPERM},
            {"fanotify_init", EPERM},
            {"open_by_handle_at", EPERM},
            {"name_to_handle_at", EPERM},
            {"kexec_load", EPERM},
            {"init_module", EPERM},
            {"swapon", EPERM},
            {"reboot", EPERM},
            {"acct", EPERM},
            {"quotactl", EPERM},
            {"lookup_dcookie", EPERM},
            {"vm86", EPERM},
            {"iopl", EPERM},
            {"ioperm", EPERM},
            {"unshare", EPERM},
            {"mount", EPERM},
            {"setns", EPERM},
            {"syslog", EPERM},
            {"ptrace", 0},
            {"read", 0},
            {"clone", 0},
        };

        for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
            json_t *rules = json_object_get(root, "syscalls"), *rule, *found = NULL;
            size_t i, j, n = 0;
            json_t *name;

            json_array_foreach (rules, i, rule) {
                json_array_foreach (json_object_get(rule, "names"), j, name) {
                    if (strcmp(json_string_value(name), want[k].name) == 0) {
                        found = rule;
                        n++;
                    }
                }
            }
            const char *action = json_string_value(json_object_get(found, "action"));
            json_int_t ret = json_integer_value(json_object_get(found, "errnoRet"));

            TAP_CHECK(n == 1 && action != NULL &&
                          (want[k].errno_ret == 0
                               ? strcmp(action, "SCMP_ACT_ALLOW") == 0
                               : strcmp(action, "SCMP_ACT_ERRNO") == 0 && ret == want[k].errno_ret),
                      "%s: one rule, %s %lld (want %d)", want[k].name, action ? action : "(none)",
                      (long long)ret, want[k].errno_ret);
        }
    }
    json_decref(root);
    cfg_free(c);
}

/* ---- reload: cfg_diff, cfg_reload_keep, cfg_reload_commit ---------------------------------- */

static const char *const HASH2 = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752";

/* A configuration with the tenants given, profile "py" with the keys py ("warm": 2, "max": 8
 * when ""); extra goes in front. */
static struct cfg *
reload_cfg(const char *extra, const char *py, const char *tenants)
{
    struct cfg *c = NULL;
    struct err e = {0};
    char json[2048];

    (void)snprintf(json, sizeof(json),
                   "{%s \"node_id\": \"n1\", \"tenants\": [%s],"
                   " \"profiles\": {\"py\": {\"image\": \"img:1\", %s}}}",
                   extra, tenants, py[0] ? py : "\"warm\": 2, \"max\": 8");
    if (load(&c, json, &e) < 0) {
        TAP_CHECK(false, "reload_cfg: %s", e.msg);
        return NULL;
    }
    return c;
}

static const struct cfg_change *
change_find(const struct cfg_diff *d, const char *name)
{
    for (size_t i = 0; i < d->n; i++) {
        if (strcmp(d->changes[i].name, name) == 0) {
            return &d->changes[i];
        }
    }
    return NULL;
}

static char tenants_ab[256], tenants_ac[256];

static void
reload_tenants_init(void)
{
    (void)snprintf(tenants_ab, sizeof(tenants_ab),
                   "{\"id\": \"a\", \"token_sha256\": \"%s\"},"
                   " {\"id\": \"b\", \"token_sha256\": \"%s\", \"max_sessions\": 2}",
                   HASH, HASH2);
    /* a's token changes, b goes, c comes */
    (void)snprintf(tenants_ac, sizeof(tenants_ac),
                   "{\"id\": \"a\", \"token_sha256\": \"%s\"},"
                   " {\"id\": \"c\", \"token_sha256\": \"%s\"}",
                   HASH2, HASH);
}

TEST(reload_diff)
{
    struct cfg *a, *b;
    struct cfg_diff d;
    const struct cfg_change *ch;

    reload_tenants_init();
    a = reload_cfg("", "", tenants_ab);
    b = reload_cfg("\"engine\": {\"timeout_ms\": 2000, \"socket\": \"/run/other.sock\"},"
                   " \"log\": {\"level\": \"debug\"}, \"admin_token_sha256\": \"" HASH_LITERAL
                   "\",",
                   "\"warm\": 2, \"max\": 8, \"exec_timeout_s\": 5, \"memory_mb\": 256,"
                   " \"command\": [\"x\"]}, "
                   "\"go\": {\"image\": \"img:2\", \"warm\": 0, \"max\": 1",
                   tenants_ac);
    if (a == NULL || b == NULL) {
        cfg_free(a);
        cfg_free(b);
        return;
    }
    cfg_diff(a, a, &d);
    ASSERT_EQ_U(d.n, 0); /* a configuration does not differ from itself */
    cfg_diff_done(&d);

    cfg_diff(a, b, &d);
    ch = change_find(&d, "engine.timeout_ms");
    ASSERT_TRUE(ch != NULL && ch->reloadable);
    ASSERT_STREQ(ch ? ch->detail : "", "15000 -> 2000");
    ch = change_find(&d, "engine.socket");
    ASSERT_TRUE(ch != NULL && !ch->reloadable);
    ASSERT_STREQ(ch ? ch->detail : "", "'/var/run/docker.sock' -> '/run/other.sock'");
    ch = change_find(&d, "log.level");
    ASSERT_TRUE(ch != NULL && ch->reloadable);
    ASSERT_STREQ(ch ? ch->detail : "", "'info' -> 'debug'");
    ch = change_find(&d, "admin_token_sha256");
    ASSERT_TRUE(ch != NULL && ch->reloadable);
    ASSERT_STREQ(ch ? ch->detail : "", "changed"); /* secret: no values */
    ch = change_find(&d, "profiles.py.exec_timeout_s");
    ASSERT_TRUE(ch != NULL && ch->reloadable);
    ch = change_find(&d, "profiles.py.memory_mb");
    ASSERT_TRUE(ch != NULL && !ch->reloadable);
    ch = change_find(&d, "profiles.py.command");
    ASSERT_TRUE(ch != NULL && !ch->reloadable);
    ch = change_find(&d, "profiles.go");
    ASSERT_TRUE(ch != NULL && !ch->reloadable);
    ASSERT_STREQ(ch ? ch->detail : "", "added");
    ch = change_find(&d, "tenants.a");
    ASSERT_TRUE(ch != NULL && ch->reloadable);
    ASSERT_STREQ(ch ? ch->detail : "", "token_sha256 changed");
    ch = change_find(&d, "tenants.b");
    ASSERT_STREQ(ch ? ch->detail : "", "removed");
    ch = change_find(&d, "tenants.c");
    ASSERT_STREQ(ch ? ch->detail : "", "added");
    ASSERT_TRUE(change_find(&d, "listen") == NULL);
    ASSERT_TRUE(change_find(&d, "profiles.py.warm") == NULL);
    ASSERT_EQ_U(d.n, 11);
    cfg_diff_done(&d);

    /* The seccomp profile's content, read again from the same path, takes a restart. */
    free(b->seccomp);
    b->seccomp = xstrdup("{\"defaultAction\":\"SCMP_ACT_ERRNO\"}");
    cfg_diff(a, b, &d);
    ch = change_find(&d, "sandbox.seccomp_profile");
    ASSERT_TRUE(ch != NULL && !ch->reloadable);
    cfg_diff_done(&d);
    cfg_free(a);
    cfg_free(b);
}

TEST(reload_keep_commit)
{
    struct cfg *live, *next;
    const struct cfg_profile *py;
    struct err e = {0};

    reload_tenants_init();
    live = reload_cfg("", "", tenants_ab);
    next = reload_cfg("\"engine\": {\"timeout_ms\": 2000, \"socket\": \"/run/other.sock\"},"
                      " \"log\": {\"level\": \"debug\"},",
                      "\"warm\": 3, \"max\": 8, \"memory_mb\": 256}, "
                      "\"go\": {\"image\": \"img:2\", \"warm\": 0, \"max\": 1",
                      tenants_ac);
    if (live == NULL || next == NULL) {
        cfg_free(live);
        cfg_free(next);
        return;
    }
    py = cfg_profile_find(live, "py");
    cfg_reload_keep(next, live);
    ASSERT_STREQ(next->engine_socket, "/var/run/docker.sock"); /* kept */
    ASSERT_EQ_U(next->engine_timeout_ms, 2000);                /* reloadable: the new one */
    ASSERT_EQ_U(next->n_profiles, 1);                          /* "go" takes a restart */
    ASSERT_EQ_U(next->profiles[0].warm, 3);
    ASSERT_EQ_U(next->profiles[0].memory_mb, 512);
    ASSERT_OK(cfg_validate(next, &e));

    cfg_reload_commit(live, next);
    ASSERT_TRUE(cfg_profile_find(live, "py") == py); /* profiles stay where they are */
    ASSERT_EQ_U(py->warm, 3);
    ASSERT_EQ_U(py->memory_mb, 512);
    ASSERT_EQ_U(live->engine_timeout_ms, 2000);
    ASSERT_STREQ(live->log_level, "debug");
    ASSERT_STREQ(live->engine_socket, "/var/run/docker.sock");
    ASSERT_TRUE(cfg_tenant_find(live, "c") != NULL);
    ASSERT_TRUE(cfg_tenant_find(live, "b") == NULL);
    ASSERT_EQ_U(cfg_tenant_find(live, "a")->token_sha256[0], 0x60);
    /* next holds the old values, to be freed */
    ASSERT_EQ_U(next->engine_timeout_ms, 15000);
    ASSERT_STREQ(next->log_level, "info");
    ASSERT_TRUE(cfg_tenant_find(next, "b") != NULL);
    ASSERT_EQ_U(next->profiles[0].warm, 2);
    cfg_free(next);

    cfg_free(live);

    /* A reloadable change that only held with a restart-only one is refused by the check of the
     * mix: a max the running uid range cannot hold. */
    live = reload_cfg("\"sandbox\": {\"uid_count\": 40},", "", tenants_ab);
    next =
        reload_cfg("\"sandbox\": {\"uid_count\": 400},", "\"warm\": 2, \"max\": 100", tenants_ab);
    if (live != NULL && next != NULL) {
        cfg_reload_keep(next, live);
        ASSERT_EQ_U(next->sandbox_uid_count, 40);
        ASSERT_EQ_U(next->profiles[0].max, 100);
        ASSERT_ERR(cfg_validate(next, &e), EINVAL);
        ASSERT_TRUE(strstr(e.msg, "uid_count") != NULL);
    }
    cfg_free(next);
    cfg_free(live);
}

/* --help marks exactly the rows SIGHUP applies. */
TEST(help_reloadable)
{
    char *help = cfg_help();
    const char *line = strstr(help, "--engine-timeout-ms ");
    const char *end = line != NULL ? strchr(line, '\n') : NULL;
    const char *mark = line != NULL ? strstr(line, "SIGHUP applies it") : NULL;

    ASSERT_TRUE(line != NULL && end != NULL && mark != NULL && mark < end);
    line = strstr(help, "--engine-socket ");
    end = line != NULL ? strchr(line, '\n') : NULL;
    mark = line != NULL ? strstr(line, "SIGHUP applies it") : NULL;
    ASSERT_TRUE(line != NULL && end != NULL && (mark == NULL || mark > end));
    free(help);
}

int
main(void)
{
    RUN(defaults);
    RUN(full_file);
    RUN(rejects);
    RUN(duplicate_tokens);
    RUN(reserved_share);
    RUN(env_and_flags);
    RUN(redis_urls);
    RUN(dump_round_trip);
    RUN(pids_enforced_by);
    RUN(seccomp_parse);
    RUN(seccomp_load);
    RUN(seccomp_shipped);
    RUN(cluster);
    RUN(egress);
    RUN(reload_diff);
    RUN(reload_keep_commit);
    RUN(help_reloadable);
    return tap_done();
}
