/* Unit tests for the container policy: every restriction is in the create body, nothing that
 * would weaken the engine defaults is, and verify() notices drift. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include <jansson.h>

#include "config/config.h"
#include "docker/policy.h"
#include "tap.h"
#include "util/macro.h"

static struct cfg *
config(void)
{
    struct cfg *c = cfg_new();
    struct err e = {0};

    if (cfg_validate(c, &e) < 0) {
        abort();
    }
    return c;
}

static json_int_t
geti(json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

static const char *
gets(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));

    return s ? s : "(none)";
}

TEST(create_body)
{
    struct cfg *c = config();
    const struct cfg_profile *p = &c->profiles[0];
    json_t *b = docker_policy_create_body(p, "node-a", "slot1", 1000);
    json_t *hc = json_object_get(b, "HostConfig");
    json_t *ul = json_object_get(hc, "Ulimits");
    size_t i;
    json_t *u;
    int seen = 0;

    ASSERT_STREQ(gets(b, "Image"), "sandpool/python:latest");
    ASSERT_STREQ(gets(b, "User"), "1000:1000");
    ASSERT_TRUE(json_is_true(json_object_get(b, "NetworkDisabled")));
    ASSERT_TRUE(json_is_false(json_object_get(b, "Tty")));
    ASSERT_TRUE(json_is_true(json_object_get(b, "OpenStdin")));
    ASSERT_TRUE(json_is_false(json_object_get(b, "StdinOnce")));
    ASSERT_STREQ(gets(json_object_get(b, "Labels"), "sandpool.owner"), "node-a");
    ASSERT_STREQ(gets(json_object_get(b, "Labels"), "sandpool.profile"), "python");
    ASSERT_STREQ(gets(json_object_get(b, "Labels"), "sandpool.slot"), "slot1");
    ASSERT_TRUE(json_object_get(b, "Cmd") == NULL); /* the image's CMD */
    ASSERT_STREQ(gets(hc, "NetworkMode"), "none");
    ASSERT_TRUE(json_is_true(json_object_get(hc, "ReadonlyRootfs")));
    ASSERT_EQ_I(geti(hc, "Memory"), 512ll << 20);
    ASSERT_EQ_I(geti(hc, "MemorySwap"), 512ll << 20);
    ASSERT_EQ_I(geti(hc, "NanoCpus"), 1000000000ll);
    ASSERT_EQ_I(geti(hc, "PidsLimit"), 128);
    ASSERT_STREQ(json_string_value(json_array_get(json_object_get(hc, "CapDrop"), 0)), "ALL");
    ASSERT_EQ_U(json_array_size(json_object_get(hc, "CapDrop")), 1);
    ASSERT_TRUE(json_object_get(hc, "CapAdd") == NULL);
    ASSERT_TRUE(json_object_get(hc, "Privileged") == NULL);
    ASSERT_STREQ(json_string_value(json_array_get(json_object_get(hc, "SecurityOpt"), 0)),
                 "no-new-privileges");
    ASSERT_STREQ(gets(json_object_get(hc, "Tmpfs"), "/workspace"),
                 "rw,exec,nosuid,nodev,size=256m,mode=0700,uid=1000,gid=1000");
    ASSERT_STREQ(gets(json_object_get(hc, "Tmpfs"), "/tmp"),
                 "rw,noexec,nosuid,nodev,size=64m,mode=1777");
    /* The image's supervisor is PID 1 (no docker-init): see docker_policy_wants_init(). */
    ASSERT_TRUE(json_is_false(json_object_get(hc, "Init")));
    ASSERT_STREQ(gets(json_object_get(hc, "LogConfig"), "Type"), "none");
    ASSERT_STREQ(gets(json_object_get(hc, "RestartPolicy"), "Name"), "no");
    /* Never send empty MaskedPaths/ReadonlyPaths: they would replace the engine defaults. */
    ASSERT_TRUE(json_object_get(hc, "MaskedPaths") == NULL);
    ASSERT_TRUE(json_object_get(hc, "ReadonlyPaths") == NULL);
    ASSERT_TRUE(json_object_get(hc, "Binds") == NULL && json_object_get(hc, "Mounts") == NULL);
    ASSERT_TRUE(json_object_get(hc, "Runtime") == NULL); /* runc = engine default */
    json_array_foreach (ul, i, u) {
        const char *name = gets(u, "Name");

        if (strcmp(name, "nofile") == 0 && geti(u, "Soft") == 1024 && geti(u, "Hard") == 1024) {
            seen |= 1;
        } else if (strcmp(name, "nproc") == 0 && geti(u, "Hard") == 65536) {
            seen |= 2;
        } else if (strcmp(name, "fsize") == 0 && geti(u, "Hard") == 256ll << 20) {
            seen |= 4;
        } else if (strcmp(name, "core") == 0 && geti(u, "Soft") == 0 && geti(u, "Hard") == 0) {
            seen |= 8;
        }
    }
    ASSERT_EQ_I(seen, 15);
    json_decref(b);
    cfg_free(c);
}

TEST(runtime_and_command)
{
    struct cfg *c = cfg_new();
    struct err e = {0};
    const char *json = "{\"profiles\": {\"g\": {\"runtime\": \"runsc\", \"cpus\": 0.25,"
                       " \"command\": [\"/bin/sleep\", \"1000\"]}}}";
    json_t *b;

    ASSERT_OK(cfg_load_json(c, json, strlen(json), &e));
    ASSERT_OK(cfg_validate(c, &e));
    b = docker_policy_create_body(&c->profiles[0], "n", "s", 1000);
    ASSERT_STREQ(gets(json_object_get(b, "HostConfig"), "Runtime"), "runsc");
    ASSERT_EQ_I(geti(json_object_get(b, "HostConfig"), "NanoCpus"), 250000000);
    ASSERT_STREQ(json_string_value(json_array_get(json_object_get(b, "Cmd"), 1)), "1000");
    /* A command of the profile's own gets the engine's init, to reap its orphans. */
    ASSERT_TRUE(json_is_true(json_object_get(json_object_get(b, "HostConfig"), "Init")));
    json_decref(b);
    cfg_free(c);
}

/* Turns a create body into the shape inspect answers with, so verify() can be tested offline. */
static json_t *
fake_inspect(json_t *body)
{
    json_t *copy = json_deep_copy(body);
    json_t *in = json_pack("{s:o, s:o}", "Config", copy, "HostConfig",
                           json_deep_copy(json_object_get(body, "HostConfig")));

    (void)json_object_set_new(json_object_get(in, "HostConfig"), "MaskedPaths",
                              json_pack("[s, s]", "/proc/kcore", "/proc/keys"));
    return in;
}

TEST(verify_drift)
{
    struct cfg *c = config();
    const struct cfg_profile *p = &c->profiles[0];
    static const struct {
        const char *key;
        const char *want;
    } drifts[] = {
        {"NetworkMode", "NetworkMode"},
        {"ReadonlyRootfs", "ReadonlyRootfs"},
        {"Memory", "Memory"},
        {"PidsLimit", "PidsLimit"},
        {"CapDrop", "capabilities"},
        {"SecurityOpt", "no-new-privileges"},
        {"Init", "Init"},
        {"Ulimits", "ulimit"},
        {"Tmpfs", "/workspace"},
        {"MaskedPaths", "masked"},
    };
    struct err e = {0};
    json_t *b = docker_policy_create_body(p, "n", "s", 1000);
    json_t *in = fake_inspect(b);

    ASSERT_OK(docker_policy_verify(in, p, 1000, &e));
    json_decref(in);
    for (size_t i = 0; i < sizeof(drifts) / sizeof(drifts[0]); i++) {
        json_t *copy = fake_inspect(b);
        json_t *hc = json_object_get(copy, "HostConfig");

        if (strcmp(drifts[i].key, "MaskedPaths") == 0) {
            (void)json_object_set_new(hc, "MaskedPaths", json_array());
        } else if (strcmp(drifts[i].key, "ReadonlyRootfs") == 0) {
            (void)json_object_set_new(hc, drifts[i].key, json_false());
        } else if (strcmp(drifts[i].key, "Init") == 0) {
            /* docker-init as PID 1 would hold the protocol channel, dumpable. */
            (void)json_object_set_new(hc, drifts[i].key, json_true());
        } else if (strcmp(drifts[i].key, "NetworkMode") == 0) {
            (void)json_object_set_new(hc, drifts[i].key, json_string("bridge"));
        } else if (json_is_integer(json_object_get(hc, drifts[i].key))) {
            (void)json_object_set_new(hc, drifts[i].key, json_integer(0));
        } else {
            (void)json_object_del(hc, drifts[i].key);
        }
        e.msg[0] = '\0';
        int r = docker_policy_verify(copy, p, 1000, &e);

        TAP_CHECK(r == -EPERM && strstr(e.msg, drifts[i].want) != NULL,
                  "drift in %s detected: %d '%s'", drifts[i].key, r, e.msg);
        json_decref(copy);
    }
    {
        json_t *copy = fake_inspect(b);

        (void)json_object_set_new(json_object_get(copy, "HostConfig"), "CapAdd",
                                  json_pack("[s]", "SYS_ADMIN"));
        ASSERT_ERR(docker_policy_verify(copy, p, 1000, &e), EPERM);
        (void)json_object_set_new(json_object_get(copy, "HostConfig"), "CapAdd", json_null());
        (void)json_object_set_new(json_object_get(copy, "Config"), "User", json_string("0:0"));
        ASSERT_ERR(docker_policy_verify(copy, p, 1000, &e), EPERM);
        json_decref(copy);
    }
    json_decref(b);
    cfg_free(c);
}

/* A profile with an egress list: its gate (<egress.dir>/<slot>) mounted read-only at
 * /run/sandpool/egress and the proxy variables; verify() accepts exactly that mount, and a
 * profile without a list no mount at all. */
TEST(egress_mount)
{
    struct cfg *c = cfg_new();
    struct err e = {0};
    const char *json =
        "{\"node_id\": \"n\", \"egress\": {\"dir\": \"/run\", \"port\": 3130}, \"profiles\":"
        " {\"net\": {\"egress\": {\"allow\": [\"pypi.org\"]}}, \"plain\": {}}}";

    ASSERT_OK(cfg_load_json(c, json, strlen(json), &e));
    ASSERT_OK(cfg_validate(c, &e));
    const struct cfg_profile *net = &c->profiles[0], *plain = &c->profiles[1];
    json_t *b = docker_policy_create_body(net, "n", "abc", 1000);
    json_t *m = json_array_get(json_object_get(json_object_get(b, "HostConfig"), "Mounts"), 0);
    json_t *env = json_object_get(b, "Env");
    bool proxy = false, no_proxy = false;
    size_t i;
    json_t *v;

    ASSERT_STREQ(gets(m, "Type"), "bind");
    ASSERT_STREQ(gets(m, "Source"), "/run/n/abc");
    ASSERT_STREQ(gets(m, "Target"), "/run/sandpool/egress");
    ASSERT_TRUE(json_is_true(json_object_get(m, "ReadOnly")));
    ASSERT_STREQ(gets(json_object_get(b, "HostConfig"), "NetworkMode"), "none");
    json_array_foreach (env, i, v) {
        proxy |= strcmp(json_string_value(v), "HTTPS_PROXY=http://127.0.0.1:3130") == 0;
        no_proxy |= strcmp(json_string_value(v), "NO_PROXY=localhost,127.0.0.1,::1") == 0;
    }
    ASSERT_TRUE(proxy && no_proxy);

    json_t *in = fake_inspect(b);

    ASSERT_OK(docker_policy_verify(in, net, 1000, &e));
    /* What the runtime mounted, as Docker reports it. */
    (void)json_object_set_new(in, "Mounts",
                              json_pack("[{s:s, s:s, s:s, s:b}]", "Type", "bind", "Source",
                                        "/run/n/abc", "Destination", "/run/sandpool/egress", "RW",
                                        0));
    ASSERT_OK(docker_policy_verify(in, net, 1000, &e));
    json_object_set_new(json_array_get(json_object_get(in, "Mounts"), 0), "RW", json_true());
    ASSERT_ERR(docker_policy_verify(in, net, 1000, &e), EPERM);
    json_decref(in);

    static const char *const drifts[] = {"none", "rw", "other-slot", "two", "binds", "target"};
    for (size_t k = 0; k < ELEMENTSOF(drifts); k++) {
        json_t *copy = fake_inspect(b);
        json_t *hc = json_object_get(copy, "HostConfig");
        json_t *cm = json_array_get(json_object_get(hc, "Mounts"), 0);

        if (strcmp(drifts[k], "none") == 0) {
            (void)json_object_del(hc, "Mounts");
        } else if (strcmp(drifts[k], "rw") == 0) {
            (void)json_object_set_new(cm, "ReadOnly", json_false());
        } else if (strcmp(drifts[k], "other-slot") == 0) {
            (void)json_object_set_new(cm, "Source", json_string("/run/n/def"));
        } else if (strcmp(drifts[k], "two") == 0) {
            (void)json_array_append_new(
                json_object_get(hc, "Mounts"),
                json_pack("{s:s, s:s, s:s}", "Type", "bind", "Source", "/", "Target", "/host"));
        } else if (strcmp(drifts[k], "binds") == 0) {
            (void)json_object_set_new(hc, "Binds", json_pack("[s]", "/:/host"));
        } else {
            (void)json_object_set_new(cm, "Target", json_string("/workspace/gate"));
        }
        TAP_CHECK(docker_policy_verify(copy, net, 1000, &e) == -EPERM,
                  "an egress mount that is not exactly the gate (%s) is drift: '%s'", drifts[k],
                  e.msg);
        json_decref(copy);
    }
    /* The same inspect judged by the profile without a list: a mount is drift. */
    in = fake_inspect(b);
    (void)json_object_set_new(json_object_get(in, "Config"), "User", json_string("1000:1000"));
    ASSERT_ERR(docker_policy_verify(in, plain, 1000, &e), EPERM);
    json_decref(in);
    json_decref(b);
    b = docker_policy_create_body(plain, "n", "abc", 1000);
    ASSERT_TRUE(json_object_get(json_object_get(b, "HostConfig"), "Mounts") == NULL);
    in = fake_inspect(b);
    ASSERT_OK(docker_policy_verify(in, plain, 1000, &e));
    json_decref(in);
    json_decref(b);
    cfg_free(c);
}

/* gVisor: PidsLimit is left out only when the profile accepts the runtime's own limit, and the
 * engine check refuses what the engine cannot enforce, saying which limit and why. */
TEST(gvisor_pids)
{
    struct cfg *c = cfg_new();
    struct err e = {0};
    const char *json =
        "{\"profiles\": {\"g\": {\"runtime\": \"runsc\", \"pids_enforced_by\":"
        " \"runtime\", \"nproc\": 100, \"pids\": 100}, \"s\": {\"runtime\":"
        " \"runsc\"}, \"r\": {}, \"k\": {\"runtime\": \"kata\", \"pids_enforced_by\":"
        " \"runtime\", \"nproc\": 100, \"pids\": 100}}}";
    json_t *info = json_pack("{s:s, s:{s:{s:s}, s:{s:s}, s:{s:s}}}", "CgroupVersion", "1",
                             "Runtimes", "runc", "path", "runc", "runsc", "path", "/usr/bin/runsc",
                             "kata", "path", "/usr/bin/kata-runtime");
    const struct cfg_profile *g, *s, *r, *k;
    json_t *b, *in;

    ASSERT_OK(cfg_load_json(c, json, strlen(json), &e));
    ASSERT_OK(cfg_validate(c, &e));
    g = cfg_profile_find(c, "g");
    s = cfg_profile_find(c, "s");
    r = cfg_profile_find(c, "r");
    k = cfg_profile_find(c, "k");
    b = docker_policy_create_body(g, "n", "x", 1000);
    ASSERT_TRUE(json_object_get(json_object_get(b, "HostConfig"), "PidsLimit") == NULL);
    in = fake_inspect(b);
    ASSERT_OK(docker_policy_verify(in, g, 1000, &e)); /* not demanded */
    json_decref(in);
    json_decref(b);
    b = docker_policy_create_body(s, "n", "x", 1000);
    ASSERT_EQ_I(geti(json_object_get(b, "HostConfig"), "PidsLimit"), 128);
    json_decref(b);

    ASSERT_OK(docker_policy_check_engine(g, info, &e));
    ASSERT_OK(docker_policy_check_engine(r, info, &e));
    ASSERT_ERR(docker_policy_check_engine(s, info, &e), ENOTSUP);
    ASSERT_STREQ(e.msg, "profile 's': runtime runsc cannot enforce 'pids' (PidsLimit) on this "
                        "cgroup v1 host; set \"pids_enforced_by\": \"runtime\" to accept gVisor's "
                        "own limit");
    ASSERT_ERR(docker_policy_check_engine(k, info, &e), ENOTSUP);
    ASSERT_TRUE(strstr(e.msg, "needs gVisor (runsc), and runtime 'kata' is not") != NULL);
    /* gVisor registered under another name is still gVisor (by its binary). */
    (void)json_object_set_new(json_object_get(info, "Runtimes"), "kata",
                              json_pack("{s:s}", "path", "/opt/gvisor/runsc"));
    ASSERT_OK(docker_policy_check_engine(k, info, &e));
    (void)json_object_del(json_object_get(info, "Runtimes"), "runsc");
    ASSERT_ERR(docker_policy_check_engine(g, info, &e), ENOENT);
    ASSERT_TRUE(strstr(e.msg, "the engine has no runtime 'runsc'") != NULL);
    json_decref(info);
    cfg_free(c);
}

/* ---- seccomp ------------------------------------------------------------------------------- */

#define PROFILE \
    "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"syscalls\":[{\"names\":[\"read\"],\"action\":\"SCMP_ACT_ALLOW\"}]}"
#define PROFILE_FILE "/usr/share/sandpool/seccomp.json"
/* PROFILE inside a JSON string. */
#define PROFILE_JSON_ESC                                                                             \
    "{\\\"defaultAction\\\":\\\"SCMP_ACT_ERRNO\\\",\\\"syscalls\\\":[{\\\"names\\\":[\\\"read\\\"]," \
    "\\\"action\\\":\\\"SCMP_ACT_ALLOW\\\"}]}"

/* The built-in profile with the sandbox seccomp profile read (as cfg_load_seccomp() sets it). */
static struct cfg_profile
with_seccomp(const struct cfg_profile *p)
{
    struct cfg_profile q = *p;

    q.seccomp = PROFILE;
    q.seccomp_path = PROFILE_FILE;
    return q;
}

/* fake_inspect(b) with SecurityOpt replaced by opts (a JSON array). */
static json_t *
inspect_with_opts(json_t *b, json_t *opts)
{
    json_t *in = fake_inspect(b);

    (void)json_object_set_new(json_object_get(in, "HostConfig"), "SecurityOpt", opts);
    return in;
}

TEST(seccomp_create_body)
{
    struct cfg *c = config();
    struct cfg_profile p = with_seccomp(&c->profiles[0]);
    json_t *b = docker_policy_create_body(&p, "n", "s", 1000);
    json_t *opts = json_object_get(json_object_get(b, "HostConfig"), "SecurityOpt");

    /* Docker's form (the content), no-new-privileges first; the label names the file. */
    ASSERT_EQ_U(json_array_size(opts), 2);
    ASSERT_STREQ(json_string_value(json_array_get(opts, 0)), "no-new-privileges");
    ASSERT_STREQ(json_string_value(json_array_get(opts, 1)), "seccomp=" PROFILE);
    ASSERT_STREQ(gets(json_object_get(b, "Labels"), "sandpool.seccomp"), PROFILE_FILE);
    json_decref(b);

    /* Without a profile read ("" or not loaded): the engine's default, no label. */
    b = docker_policy_create_body(&c->profiles[0], "n", "s", 1000);
    opts = json_object_get(json_object_get(b, "HostConfig"), "SecurityOpt");
    ASSERT_EQ_U(json_array_size(opts), 1);
    ASSERT_TRUE(json_object_get(json_object_get(b, "Labels"), "sandpool.seccomp") == NULL);
    json_decref(b);
    cfg_free(c);
}

TEST(seccomp_verify)
{
    struct cfg *c = config();
    struct cfg_profile p = with_seccomp(&c->profiles[0]);
    const struct cfg_profile *none = &c->profiles[0];
    static const struct {
        const char *opts;    /* SecurityOpt as inspect shows it (JSON) */
        const char *with;    /* verify's message with the profile; NULL: it passes */
        const char *without; /* the same for a profile left to the engine's default */
    } cases[] = {
        /* Docker: as sent. Podman: its file, as docker/quirks.c writes it. */
        {"[\"no-new-privileges\", \"seccomp=" PROFILE_JSON_ESC "\"]", NULL,
         "policy leaves it to the engine's default profile"},
        {"[\"seccomp-file=" PROFILE_FILE "\", \"no-new-privileges\"]", NULL,
         "seccomp is 'seccomp-file=" PROFILE_FILE "'"},
        /* The engine's default, unconfined, another profile or file, a path in Docker's form. */
        {"[\"no-new-privileges\"]",
         "seccomp is the engine's default, policy wants the profile of sandbox.seccomp_profile "
         "'" PROFILE_FILE "'",
         NULL},
        {"[\"no-new-privileges\", \"seccomp=unconfined\"]", "seccomp is 'seccomp=unconfined'",
         "seccomp is 'seccomp=unconfined'"},
        {"[\"no-new-privileges\", \"seccomp:unconfined\"]", "seccomp is 'seccomp:unconfined'",
         "seccomp is 'seccomp:unconfined'"},
        {"[\"no-new-privileges\", \"seccomp={\\\"defaultAction\\\":\\\"SCMP_ACT_ERRNO\\\"}\"]",
         "seccomp is 'seccomp={\"defaultAction\":\"SCMP_ACT_ERRNO\"}'", "seccomp is 'seccomp={"},
        {"[\"no-new-privileges\", \"seccomp-file=/etc/other.json\"]",
         "seccomp is 'seccomp-file=/etc/other.json'", "seccomp is 'seccomp-file=/etc/other.json'"},
        {"[\"no-new-privileges\", \"seccomp=" PROFILE_FILE "\"]",
         "seccomp is 'seccomp=" PROFILE_FILE "'", "seccomp is 'seccomp=" PROFILE_FILE "'"},
        /* Ours twice, or ours and another one. */
        {"[\"no-new-privileges\", \"seccomp=" PROFILE_JSON_ESC "\", \"seccomp-file=" PROFILE_FILE
         "\"]",
         "2 seccomp options, policy sends one", "policy leaves it to the engine's default profile"},
        {"[\"no-new-privileges\", \"seccomp=unconfined\", \"seccomp=" PROFILE_JSON_ESC "\"]",
         "2 seccomp options, policy sends one", "policy leaves it to the engine's default profile"},
        /* Other options are not seccomp's. */
        {"[\"no-new-privileges\", \"label=disable\", \"seccomp=" PROFILE_JSON_ESC "\"]", NULL,
         "policy leaves it"},
    };
    json_t *b = docker_policy_create_body(&p, "n", "s", 1000);
    json_t *bn = docker_policy_create_body(none, "n", "s", 1000);
    struct err e = {0};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (int k = 0; k < 2; k++) {
            const char *want = k == 0 ? cases[i].with : cases[i].without;
            json_t *opts = json_loads(cases[i].opts, 0, NULL);
            json_t *in = inspect_with_opts(k == 0 ? b : bn, opts);
            int r;

            e.msg[0] = '\0';
            r = docker_policy_verify(in, k == 0 ? &p : none, 1000, &e);
            TAP_CHECK(opts != NULL &&
                          (want == NULL ? r == 0 : r == -EPERM && strstr(e.msg, want) != NULL),
                      "%s profile, SecurityOpt %.80s: %d '%s' (want '%s')",
                      k == 0 ? "with a" : "without a", cases[i].opts, r, e.msg,
                      want != NULL ? want : "ok");
            json_decref(in);
        }
    }
    /* The label must name the file too (Podman is sent that file). */
    {
        json_t *in = fake_inspect(b);

        ASSERT_OK(docker_policy_verify(in, &p, 1000, &e));
        (void)json_object_set_new(json_object_get(json_object_get(in, "Config"), "Labels"),
                                  "sandpool.seccomp", json_string("/tmp/other.json"));
        ASSERT_ERR(docker_policy_verify(in, &p, 1000, &e), EPERM);
        ASSERT_STREQ(e.msg, "its sandpool.seccomp label is not '" PROFILE_FILE "'");
        (void)json_object_del(json_object_get(json_object_get(in, "Config"), "Labels"),
                              "sandpool.seccomp");
        ASSERT_ERR(docker_policy_verify(in, &p, 1000, &e), EPERM);
        json_decref(in);
    }
    json_decref(b);
    json_decref(bn);
    cfg_free(c);
}

int
main(void)
{
    RUN(create_body);
    RUN(runtime_and_command);
    RUN(verify_drift);
    RUN(gvisor_pids);
    RUN(seccomp_create_body);
    RUN(seccomp_verify);
    RUN(egress_mount);
    return tap_done();
}
