/* Unit tests for configuration loading: defaults, strict JSON, environment, flags, validation. */
#include <errno.h>

#include <jansson.h>

#include "config/config.h"
#include "tap.h"

static const char *const HASH = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

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
    cfg_free(c);
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
    return tap_done();
}
