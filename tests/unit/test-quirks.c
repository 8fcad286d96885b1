/* Unit tests for the engine differences (src/docker/quirks.c): each engine's flags, the profile
 * check, the create body as sent to each engine, and the rewriting of inspect answers and events
 * into Docker's shape.
 *
 * The Podman inspect objects are built here from the policy's own create body, one Podman
 * difference at a time (quirks.h, docs/engines.md): our two tmpfs as sent plus the "rprivate"
 * Podman appends, its own writable tmpfs on /dev and /dev/shm, our read-only covers of /run and
 * /var/tmp, CapDrop as its 14 default capabilities, RLIMIT_* ulimit names, Runtime "oci" and a
 * null NetworkDisabled. Each one alone makes docker_policy_verify() fail, and after the rewrite
 * the object is exactly the Docker-shaped one and passes. The negative cases are what Podman
 * does not add on its own: those must survive the rewrite and still fail the check. */
#include <errno.h>

#include <jansson.h>

#include "config/config.h"
#include "docker/policy.h"
#include "docker/quirks.h"
#include "tap.h"
#include "util/parse.h"

/* Our two tmpfs for the built-in profile, as docker_policy_create_body() writes them. */
#define WS_OPTS  "rw,exec,nosuid,nodev,size=256m,mode=0700,uid=1000,gid=1000"
#define TMP_OPTS "rw,noexec,nosuid,nodev,size=64m,mode=1777"
/* Podman's own writable tmpfs (quirks.h), and our read-only cover as inspect shows it. */
#define PODMAN_RW    "rw,nosuid,nodev,rprivate,tmpcopyup"
#define PODMAN_COVER "ro,nosuid,nodev,noexec,size=64k,rprivate"

/* Podman 4.3's default capabilities (deploy/podman/containers.conf), which its inspect lists as
 * CapDrop for "ALL". Written out here rather than taken from quirks.c, so that a change there
 * shows. */
static const char *const podman_caps[] = {
    "AUDIT_WRITE",      "CHOWN",   "DAC_OVERRIDE", "FOWNER", "FSETID",  "KILL",   "MKNOD",
    "NET_BIND_SERVICE", "NET_RAW", "SETFCAP",      "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
};
#define N_PODMAN_CAPS (sizeof(podman_caps) / sizeof(podman_caps[0]))

/* json_dumps with sorted keys: equal strings mean byte-for-byte equal documents. */
static char *
dump(json_t *j)
{
    return json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY);
}

/* Prints both documents only when they differ (an inspect object is a few hundred bytes). */
#define ASSERT_JSON_EQ(a, b)                                               \
    do {                                                                   \
        char *_a = dump(a), *_b = dump(b);                                 \
        int _eq = _a != NULL && _b != NULL && strcmp(_a, _b) == 0;         \
        if (!_eq) {                                                        \
            printf("# got:  %s\n# want: %s\n", _a != NULL ? _a : "(null)", \
                   _b != NULL ? _b : "(null)");                            \
        }                                                                  \
        TAP_CHECK(_eq, "%s == %s (sorted JSON, byte for byte)", #a, #b);   \
        free(_a);                                                          \
        free(_b);                                                          \
    } while (0)

/* The built-in config with json applied on top (NULL: none); aborts if it does not validate. */
static struct cfg *
config(const char *json)
{
    struct cfg *c = cfg_new();
    struct err e = {0};

    if ((json != NULL && cfg_load_json(c, json, strlen(json), &e) < 0) || cfg_validate(c, &e) < 0) {
        printf("Bail out! config: %s\n", e.msg);
        abort();
    }
    return c;
}

static const struct docker_quirks *
docker(void)
{
    return docker_quirks_of(DOCKER_ENGINE_DOCKER);
}

static const struct docker_quirks *
podman(void)
{
    return docker_quirks_of(DOCKER_ENGINE_PODMAN);
}

static json_t *
hc_of(json_t *o)
{
    return json_object_get(o, "HostConfig");
}

static json_t *
tmpfs_of(json_t *o)
{
    return json_object_get(hc_of(o), "Tmpfs");
}

static const char *
tmpfs_at(json_t *o, const char *path)
{
    const char *s = json_string_value(json_object_get(tmpfs_of(o), path));

    return s != NULL ? s : "(none)";
}

/* ---- flags ------------------------------------------------------------------------------------
 */

TEST(flags)
{
    const struct docker_quirks *d = docker(), *p = podman();

    ASSERT_TRUE(d != NULL && p != NULL && d != p);
    if (d == NULL || p == NULL) {
        return;
    }
    ASSERT_TRUE(docker_quirks_of(DOCKER_ENGINE_DOCKER) == d); /* static */
    ASSERT_TRUE(d->engine == DOCKER_ENGINE_DOCKER);
    ASSERT_STREQ(d->name, "docker");
    ASSERT_TRUE(d->oom_event);
    ASSERT_TRUE(d->runtime_selectable);
    ASSERT_TRUE(d->tmpfs_owner_option);
    ASSERT_TRUE(!d->readonly_adds_tmpfs);
    ASSERT_TRUE(!d->capdrop_expanded);
    ASSERT_TRUE(!d->nproc_capped_by_pid_max);
    ASSERT_TRUE(d->stdin_survives_detach);
    ASSERT_TRUE(d->seccomp_inline);

    ASSERT_TRUE(p->engine == DOCKER_ENGINE_PODMAN);
    ASSERT_STREQ(p->name, "podman");
    ASSERT_TRUE(!p->oom_event);
    ASSERT_TRUE(!p->runtime_selectable);
    ASSERT_TRUE(!p->tmpfs_owner_option);
    ASSERT_TRUE(p->readonly_adds_tmpfs);
    ASSERT_TRUE(p->capdrop_expanded);
    ASSERT_TRUE(p->nproc_capped_by_pid_max);
    ASSERT_TRUE(!p->stdin_survives_detach);
    ASSERT_TRUE(!p->seccomp_inline);
}

/* ---- profile check ----------------------------------------------------------------------------
 */

TEST(check_profile)
{
    struct cfg *c = config("{\"profiles\": {\"python\": {}, \"g\": {\"runtime\": \"runsc\"},"
                           " \"small\": {\"nproc\": 32768}}}");
    const struct cfg_profile *py = cfg_profile_find(c, "python"); /* nproc 65536 */
    const struct cfg_profile *g = cfg_profile_find(c, "g");
    const struct cfg_profile *small = cfg_profile_find(c, "small");
    struct err e = {0};

    ASSERT_EQ_U(py->nproc, 65536);
    /* Docker: any runtime, any nproc. */
    ASSERT_OK(docker_quirks_check_profile(docker(), g, 32768, &e));
    ASSERT_OK(docker_quirks_check_profile(docker(), py, 32768, &e));
    ASSERT_OK(docker_quirks_check_profile(docker(), py, 1, &e));
    ASSERT_EQ_I(e.code, 0); /* no message on success */

    /* Podman: no runtime of the profile's own, whatever pid_max is. */
    ASSERT_ERR(docker_quirks_check_profile(podman(), g, 0, &e), ENOTSUP);
    ASSERT_EQ_I(e.code, -ENOTSUP);
    ASSERT_STREQ(e.msg, "profile 'g': podman ignores the container's runtime, so 'runsc' cannot "
                        "be chosen (it would run under the engine's default); use Docker for it");
    ASSERT_ERR(docker_quirks_check_profile(podman(), g, 4194304, NULL), ENOTSUP);

    /* Podman: nproc at most pid_max; 0 means unknown and is not checked. */
    err_clear(&e);
    ASSERT_ERR(docker_quirks_check_profile(podman(), py, 32768, &e), ENOTSUP);
    ASSERT_EQ_I(e.code, -ENOTSUP);
    ASSERT_STREQ(e.msg, "profile 'python': 'nproc' 65536 is above what podman allows a container "
                        "here (the kernel's pid_max, 32768); set 'nproc' to at most 32768");
    ASSERT_ERR(docker_quirks_check_profile(podman(), py, 65535, &e), ENOTSUP);
    ASSERT_TRUE(strstr(e.msg, "profile 'python'") != NULL);
    err_clear(&e);
    ASSERT_OK(docker_quirks_check_profile(podman(), py, 65536, &e)); /* equal is fine */
    ASSERT_OK(docker_quirks_check_profile(podman(), py, 4194304, &e));
    ASSERT_OK(docker_quirks_check_profile(podman(), py, 0, &e));
    ASSERT_OK(docker_quirks_check_profile(podman(), small, 32768, &e));
    ASSERT_EQ_I(e.code, 0);
    cfg_free(c);
}

TEST(host_pid_max)
{
    FILE *f = fopen("/proc/sys/kernel/pid_max", "re");
    char line[32] = "";
    uint64_t want = 0;

    if (f != NULL) {
        if (fgets(line, sizeof(line), f) != NULL) {
            line[strcspn(line, "\n")] = '\0';
            if (parse_u64(line, &want) < 0) {
                want = 0;
            }
        }
        (void)fclose(f);
    }
    ASSERT_EQ_U(docker_quirks_host_pid_max(), want);
    ASSERT_TRUE(want <= 4194304); /* PID_MAX_LIMIT */
}

/* ---- create body ------------------------------------------------------------------------------
 */

/* Docker takes the policy's body as it is. */
TEST(adapt_create_docker)
{
    struct cfg *c = config("{\"profiles\": {\"python\": {}, \"g\": {\"runtime\": \"runsc\","
                           " \"command\": [\"/bin/sleep\", \"1\"]}}}");
    struct err e = {0};

    for (size_t i = 0; i < c->n_profiles; i++) {
        json_t *b = docker_policy_create_body(&c->profiles[i], "node-a", "slot1", 1000);
        char *before = dump(b), *after;

        ASSERT_OK(docker_quirks_adapt_create(docker(), b, &e));
        after = dump(b);
        TAP_CHECK(before != NULL && after != NULL && strcmp(before, after) == 0,
                  "profile '%s': docker body unchanged", c->profiles[i].name);
        free(before);
        free(after);
        json_decref(b);
    }
    ASSERT_EQ_I(e.code, 0);
    cfg_free(c);
}

/* Podman: uid=/gid= become "U" where they were, "notmpcopyup" is added to every tmpfs, and the
 * read-only covers of /run and /var/tmp are added; nothing else changes. */
TEST(adapt_create_podman)
{
    struct cfg *c = config(NULL);
    struct err e = {0};
    json_t *b = docker_policy_create_body(&c->profiles[0], "node-a", "slot1", 1000);
    json_t *want = json_deep_copy(b);

    ASSERT_STREQ(tmpfs_at(b, "/workspace"), WS_OPTS);
    ASSERT_STREQ(tmpfs_at(b, "/tmp"), TMP_OPTS);
    (void)json_object_set_new(hc_of(want), "Tmpfs",
                              json_pack("{s:s, s:s, s:s, s:s}", "/workspace",
                                        "rw,exec,nosuid,nodev,size=256m,mode=0700,U,notmpcopyup",
                                        "/tmp",
                                        "rw,noexec,nosuid,nodev,size=64m,mode=1777,notmpcopyup",
                                        "/run", "ro,nosuid,nodev,noexec,size=64k,notmpcopyup",
                                        "/var/tmp", "ro,nosuid,nodev,noexec,size=64k,notmpcopyup"));
    ASSERT_OK(docker_quirks_adapt_create(podman(), b, &e));
    ASSERT_STREQ(tmpfs_at(b, "/workspace"),
                 "rw,exec,nosuid,nodev,size=256m,mode=0700,U,notmpcopyup");
    ASSERT_STREQ(tmpfs_at(b, "/tmp"), "rw,noexec,nosuid,nodev,size=64m,mode=1777,notmpcopyup");
    ASSERT_STREQ(tmpfs_at(b, "/run"), "ro,nosuid,nodev,noexec,size=64k,notmpcopyup");
    ASSERT_STREQ(tmpfs_at(b, "/var/tmp"), "ro,nosuid,nodev,noexec,size=64k,notmpcopyup");
    ASSERT_EQ_U(json_object_size(tmpfs_of(b)), 4);
    ASSERT_JSON_EQ(b, want);
    ASSERT_EQ_I(e.code, 0);
    json_decref(want);
    json_decref(b);
    cfg_free(c);
}

/* Another user and size: "U" stands for whatever the User is. */
TEST(adapt_create_podman_other_user)
{
    struct cfg *c = config("{\"profiles\": {\"u\": {\"workspace_mb\": 16, \"tmp_mb\": 8}}}");
    struct err e = {0};
    json_t *b = docker_policy_create_body(&c->profiles[0], "n", "s", 2000);

    ASSERT_STREQ(tmpfs_at(b, "/workspace"),
                 "rw,exec,nosuid,nodev,size=16m,mode=0700,uid=2000,gid=2000");
    ASSERT_OK(docker_quirks_adapt_create(podman(), b, &e));
    ASSERT_STREQ(tmpfs_at(b, "/workspace"),
                 "rw,exec,nosuid,nodev,size=16m,mode=0700,U,notmpcopyup");
    ASSERT_STREQ(tmpfs_at(b, "/tmp"), "rw,noexec,nosuid,nodev,size=8m,mode=1777,notmpcopyup");
    json_decref(b);
    cfg_free(c);
}

/* Adapts a one-tmpfs body {"User": user, "HostConfig": {"Tmpfs": {path: opts}}} for Podman;
 * returns what adapt_create returned, the message in *e and the new value in out. */
static int
adapt_one(const char *user, const char *path, const char *opts, char *out, size_t n, struct err *e)
{
    json_t *b = json_pack("{s:{s:{s:s}}}", "HostConfig", "Tmpfs", path, opts);
    int r;

    if (user != NULL) {
        (void)json_object_set_new(b, "User", json_string(user));
    }
    err_clear(e);
    r = docker_quirks_adapt_create(podman(), b, e);
    (void)snprintf(out, n, "%s", tmpfs_at(b, path));
    json_decref(b);
    return r;
}

TEST(adapt_create_podman_owner)
{
    char out[1024], big[700];
    struct err e = {0};

    ASSERT_OK(adapt_one("1000:1000", "/w", "rw,gid=1000", out, sizeof(out), &e));
    ASSERT_STREQ(out, "rw,U,notmpcopyup");
    ASSERT_OK(adapt_one("1000:1000", "/w", "uid=1000,rw,gid=1000,size=1m", out, sizeof(out), &e));
    ASSERT_STREQ(out, "rw,size=1m,U,notmpcopyup");
    ASSERT_OK(adapt_one("1000:1000", "/w", "rw,,size=1m,", out, sizeof(out), &e));
    ASSERT_STREQ(out, "rw,size=1m,notmpcopyup"); /* no owner: no U; empty items go */
    ASSERT_OK(adapt_one("1000:1000", "/w", "", out, sizeof(out), &e));
    ASSERT_STREQ(out, "notmpcopyup");

    /* Only the container's own user can be expressed ("U"). */
    ASSERT_ERR(adapt_one("1000:1000", "/w", "rw,uid=0,gid=1000", out, sizeof(out), &e), EOPNOTSUPP);
    ASSERT_STREQ(e.msg, "podman cannot give tmpfs /w an owner other than the container's user "
                        "'1000:1000' (it needs \"uid:gid\")");
    ASSERT_ERR(adapt_one("1000:1000", "/w", "rw,uid=1000,gid=2000", out, sizeof(out), &e),
               EOPNOTSUPP);
    ASSERT_ERR(adapt_one("1000:1000", "/w", "uid=10000,gid=1000", out, sizeof(out), &e),
               EOPNOTSUPP);
    ASSERT_ERR(adapt_one("1000", "/w", "uid=1000", out, sizeof(out), &e), EOPNOTSUPP);
    ASSERT_TRUE(strstr(e.msg, "user '1000'") != NULL);
    ASSERT_ERR(adapt_one(NULL, "/w", "uid=1000,gid=1000", out, sizeof(out), &e), EOPNOTSUPP);
    ASSERT_TRUE(strstr(e.msg, "user ''") != NULL);

    /* Longer than any option list of ours: refused, not cut. */
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ASSERT_ERR(adapt_one("1000:1000", "/big", big, out, sizeof(out), &e), EOPNOTSUPP);
    ASSERT_STREQ(e.msg, "tmpfs /big: options too long");
}

/* A /run or /var/tmp of the body's own is adapted, not replaced by the cover; a body without
 * tmpfs gets no cover; non-strings and non-objects are left alone. */
TEST(adapt_create_podman_edges)
{
    struct err e = {0};
    json_t *b = json_pack("{s:s, s:{s:{s:s, s:i}}}", "User", "1:1", "HostConfig", "Tmpfs", "/run",
                          "rw,size=1m", "/x", 7);
    json_t *copy;

    ASSERT_OK(docker_quirks_adapt_create(podman(), b, &e));
    ASSERT_STREQ(tmpfs_at(b, "/run"), "rw,size=1m,notmpcopyup");
    ASSERT_STREQ(tmpfs_at(b, "/var/tmp"), "ro,nosuid,nodev,noexec,size=64k,notmpcopyup");
    ASSERT_EQ_I(json_integer_value(json_object_get(tmpfs_of(b), "/x")), 7);
    json_decref(b);

    b = json_pack("{s:s, s:{s:s}}", "User", "1:1", "HostConfig", "NetworkMode", "none");
    copy = json_deep_copy(b);
    ASSERT_OK(docker_quirks_adapt_create(podman(), b, &e));
    ASSERT_JSON_EQ(b, copy); /* no Tmpfs object: nothing to cover */
    json_decref(copy);
    json_decref(b);

    b = json_pack("[s, i]", "HostConfig", 1);
    copy = json_deep_copy(b);
    ASSERT_OK(docker_quirks_adapt_create(podman(), b, &e));
    ASSERT_OK(docker_quirks_adapt_create(docker(), b, &e));
    ASSERT_JSON_EQ(b, copy);
    json_decref(copy);
    json_decref(b);
    ASSERT_OK(docker_quirks_adapt_create(podman(), NULL, &e));
}

/* ---- inspect ----------------------------------------------------------------------------------
 */

/* A container made from body, as Docker's inspect shows it (the fields the policy reads). */
static json_t *
docker_inspect(json_t *body)
{
    json_t *cfg = json_deep_copy(body);
    json_t *hc = json_deep_copy(hc_of(body));

    (void)json_object_del(cfg, "HostConfig");
    (void)json_object_set_new(hc, "Privileged", json_false());
    (void)json_object_set_new(hc, "MaskedPaths", json_pack("[s, s]", "/proc/kcore", "/proc/keys"));
    return json_pack("{s:s, s:o, s:o}", "Id", "c0ffee", "Config", cfg, "HostConfig", hc);
}

/* Podman's differences, each applied in place to a Docker-shaped inspect object. */
static void
podman_network(json_t *in)
{
    (void)json_object_set_new(json_object_get(in, "Config"), "NetworkDisabled", json_null());
}

static void
podman_capdrop(json_t *in)
{
    json_t *drop = json_array();

    for (size_t i = 0; i < N_PODMAN_CAPS; i++) {
        char cap[64];

        (void)snprintf(cap, sizeof(cap), "CAP_%s", podman_caps[i]);
        (void)json_array_append_new(drop, json_string(cap));
    }
    (void)json_object_set_new(hc_of(in), "CapDrop", drop);
}

static void
podman_ulimits(json_t *in)
{
    size_t i;
    json_t *u;

    json_array_foreach (json_object_get(hc_of(in), "Ulimits"), i, u) {
        const char *name = json_string_value(json_object_get(u, "Name"));
        char upper[64];
        int n = snprintf(upper, sizeof(upper), "RLIMIT_%s", name);

        for (int k = 7; k < n; k++) {
            upper[k] = (char)(upper[k] - 'a' + 'A');
        }
        (void)json_object_set_new(u, "Name", json_string(upper));
    }
}

static void
podman_runtime(json_t *in)
{
    (void)json_object_set_new(hc_of(in), "Runtime", json_string("oci"));
}

static void
podman_rprivate(json_t *in)
{
    const char *path;
    json_t *v;

    json_object_foreach (tmpfs_of(in), path, v) {
        char opts[256];

        (void)snprintf(opts, sizeof(opts), "%s,rprivate", json_string_value(v));
        (void)json_string_set(v, opts);
    }
}

static void
podman_own_tmpfs(json_t *in)
{
    (void)json_object_set_new(tmpfs_of(in), "/dev", json_string(PODMAN_RW));
    /* Any order, noexec optional. */
    (void)json_object_set_new(tmpfs_of(in), "/dev/shm",
                              json_string("tmpcopyup,rprivate,nodev,noexec,nosuid,rw"));
}

static void
podman_covers(json_t *in)
{
    (void)json_object_set_new(tmpfs_of(in), "/run", json_string(PODMAN_COVER));
    (void)json_object_set_new(tmpfs_of(in), "/var/tmp", json_string(PODMAN_COVER));
}

static const struct {
    const char *name;
    void (*apply)(json_t *in);
    const char *refused; /* what verify says before the rewrite; NULL: it passes */
} podman_diffs[] = {
    {"NetworkDisabled null", podman_network, "NetworkDisabled is not true"},
    {"CapDrop expanded", podman_capdrop, "capabilities are not all dropped"},
    {"RLIMIT_ names", podman_ulimits, "ulimit nofile is not 1024"},
    {"Runtime oci", podman_runtime, NULL},
    {"rprivate", podman_rprivate, "/workspace is '" WS_OPTS ",rprivate'"},
    {"own rw tmpfs", podman_own_tmpfs, "container has 4 tmpfs mounts, policy makes 2"},
    {"read-only covers", podman_covers, "container has 4 tmpfs mounts, policy makes 2"},
};

/* A container made from the built-in profile's body, as Podman's inspect shows it. */
static json_t *
podman_inspect(json_t *body)
{
    json_t *in = docker_inspect(body);

    for (size_t i = 0; i < sizeof(podman_diffs) / sizeof(podman_diffs[0]); i++) {
        podman_diffs[i].apply(in);
    }
    return in;
}

/* Each difference alone fails the policy; rewritten, the object is the Docker one and passes. */
TEST(normalize_inspect_each)
{
    struct cfg *c = config(NULL);
    const struct cfg_profile *p = &c->profiles[0];
    json_t *body = docker_policy_create_body(p, "n", "s", 1000);
    json_t *want = docker_inspect(body);
    struct err e = {0};

    ASSERT_OK(docker_policy_verify(want, p, 1000, &e));
    for (size_t i = 0; i < sizeof(podman_diffs) / sizeof(podman_diffs[0]); i++) {
        json_t *in = json_deep_copy(want);
        int r;

        podman_diffs[i].apply(in);
        err_clear(&e);
        r = docker_policy_verify(in, p, 1000, &e);
        if (podman_diffs[i].refused != NULL) {
            TAP_CHECK(r == -EPERM && strstr(e.msg, podman_diffs[i].refused) != NULL,
                      "%s: refused as it is (%d '%s')", podman_diffs[i].name, r, e.msg);
        } else {
            TAP_CHECK(r == 0, "%s: passes as it is (%d '%s')", podman_diffs[i].name, r, e.msg);
        }
        docker_quirks_normalize_inspect(podman(), in);
        ASSERT_JSON_EQ(in, want);
        err_clear(&e);
        r = docker_policy_verify(in, p, 1000, &e);
        TAP_CHECK(r == 0, "%s: passes rewritten (%d '%s')", podman_diffs[i].name, r, e.msg);
        json_decref(in);
    }
    json_decref(want);
    json_decref(body);
    cfg_free(c);
}

/* All of them at once, as Podman answers; Docker's quirks change nothing of it. */
/* Podman reports a bind mount in Binds ("src:dst:ro,rprivate,rbind"), not in Mounts: an egress
 * profile's gate is read back into the create body's shape, and judged the same; a writable one,
 * or one at another place, is still drift. */
TEST(normalize_podman_binds)
{
    struct cfg *c = config("{\"node_id\": \"n\", \"egress\": {\"dir\": \"/run\"}, "
                           "\"profiles\": {\"net\": {\"egress\": {\"allow\": [\"a.com\"]}}}}");
    const struct cfg_profile *p = &c->profiles[0];
    json_t *body = docker_policy_create_body(p, "n", "abc", 1000);
    static const struct {
        const char *bind;
        bool ok;
    } cases[] = {
        {"/run/n/abc:/run/sandpool/egress:ro,rprivate,rbind", true},
        {"/run/n/abc:/run/sandpool/egress:rbind,ro", true},
        {"/run/n/abc:/run/sandpool/egress:rw,rprivate,rbind", false},
        {"/run/n/abc:/run/sandpool/egress", false},
        {"/run/n/abc:/workspace/gate:ro", false},
        {"/:/run/sandpool/egress:ro", false},
        {"garbage", false},
    };

    for (size_t k = 0; k < ELEMENTSOF(cases); k++) {
        json_t *in = podman_inspect(body);
        json_t *hc = hc_of(in);
        struct err e = {0};
        int r;

        (void)json_object_del(hc, "Mounts");
        (void)json_object_set_new(hc, "Binds", json_pack("[s]", cases[k].bind));
        docker_quirks_normalize_inspect(podman(), in);
        r = docker_policy_verify(in, p, 1000, &e);
        TAP_CHECK((r == 0) == cases[k].ok, "Podman's bind '%s' is %s: %d '%s'", cases[k].bind,
                  cases[k].ok ? "the gate" : "drift", r, e.msg);
        json_decref(in);
    }
    json_decref(body);
    cfg_free(c);
}

TEST(normalize_inspect_all)
{
    struct cfg *c = config(NULL);
    const struct cfg_profile *p = &c->profiles[0];
    json_t *body = docker_policy_create_body(p, "n", "s", 1000);
    json_t *want = docker_inspect(body);
    json_t *in = podman_inspect(body);
    json_t *orig = json_deep_copy(in);
    json_t *ul = json_object_get(hc_of(in), "Ulimits");
    struct err e = {0};

    ASSERT_STREQ(tmpfs_at(in, "/workspace"), WS_OPTS ",rprivate");
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(ul, 0), "Name")),
                 "RLIMIT_NOFILE");
    ASSERT_EQ_U(json_array_size(json_object_get(hc_of(in), "CapDrop")), 14);
    ASSERT_EQ_U(json_object_size(tmpfs_of(in)), 6);
    ASSERT_ERR(docker_policy_verify(in, p, 1000, &e), EPERM);

    docker_quirks_normalize_inspect(docker(), in);
    ASSERT_JSON_EQ(in, orig);
    ASSERT_ERR(docker_policy_verify(in, p, 1000, &e), EPERM);

    docker_quirks_normalize_inspect(podman(), in);
    ASSERT_JSON_EQ(in, want);
    ASSERT_STREQ(json_string_value(json_array_get(json_object_get(hc_of(in), "CapDrop"), 0)),
                 "ALL");
    ASSERT_EQ_U(json_array_size(json_object_get(hc_of(in), "CapDrop")), 1);
    ASSERT_TRUE(json_object_get(hc_of(in), "Runtime") == NULL);
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(ul, 0), "Name")), "nofile");
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(ul, 1), "Name")), "nproc");
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(ul, 2), "Name")), "fsize");
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(ul, 3), "Name")), "core");
    ASSERT_STREQ(tmpfs_at(in, "/workspace"), WS_OPTS);
    ASSERT_STREQ(tmpfs_at(in, "/tmp"), TMP_OPTS);
    ASSERT_EQ_U(json_object_size(tmpfs_of(in)), 2);
    ASSERT_TRUE(json_is_true(json_object_get(json_object_get(in, "Config"), "NetworkDisabled")));
    err_clear(&e);
    ASSERT_OK(docker_policy_verify(in, p, 1000, &e));

    /* A second pass changes nothing. */
    docker_quirks_normalize_inspect(podman(), in);
    ASSERT_JSON_EQ(in, want);

    /* A Docker-shaped answer is left as it is by either engine's rewrite. */
    json_decref(in);
    in = json_deep_copy(want);
    docker_quirks_normalize_inspect(docker(), in);
    ASSERT_JSON_EQ(in, want);
    docker_quirks_normalize_inspect(podman(), in);
    ASSERT_JSON_EQ(in, want);

    json_decref(orig);
    json_decref(in);
    json_decref(want);
    json_decref(body);
    cfg_free(c);
}

/* One tmpfs at path with opts, on top of Podman's answer for the built-in profile. */
static const struct {
    const char *path;
    const char *opts;
    const char *kept; /* what is left after the rewrite; NULL: dropped as Podman's own */
} tmpfs_cases[] = {
    /* Podman's own, in any order, noexec optional, rprivate and tmpcopyup optional. */
    {"/dev", "rw,nosuid,nodev", NULL},
    {"/dev", ",rw,,nosuid,nodev,", NULL},
    {"/dev/shm", "rw,nosuid,nodev,noexec,rprivate,tmpcopyup", NULL},
    /* Our read-only covers, as sent or as shown. */
    {"/run", "ro,nosuid,nodev,noexec,size=64k,notmpcopyup,rprivate", NULL},
    {"/var/tmp", "ro,nosuid,nodev,noexec,size=64k", NULL},
    {"/run", "rprivate,ro,nosuid,nodev,noexec,size=64k", NULL},
    /* Writable, or not exactly the cover, at /run and /var/tmp: kept. */
    {"/run", PODMAN_RW, "rw,nosuid,nodev,tmpcopyup"},
    {"/var/tmp", "rw,nosuid,nodev,noexec,rprivate,tmpcopyup", "rw,nosuid,nodev,noexec,tmpcopyup"},
    {"/run", "ro,nosuid,nodev,noexec,size=1m,rprivate", "ro,nosuid,nodev,noexec,size=1m"},
    {"/run", "ro,nosuid,nodev,size=64k,rprivate", "ro,nosuid,nodev,size=64k"},
    {"/var/tmp", "nosuid,ro,nodev,noexec,size=64k", "nosuid,ro,nodev,noexec,size=64k"},
    /* Not only Podman's options, or not all of rw/nosuid/nodev: kept. */
    {"/dev/shm", "rw,nosuid,nodev,rbind,rprivate", "rw,nosuid,nodev,rbind"},
    {"/dev/shm", "rw,nosuid,rprivate,tmpcopyup", "rw,nosuid,tmpcopyup"},
    {"/dev/shm", "rw,nosuid,nodev,size=1g", "rw,nosuid,nodev,size=1g"},
    {"/dev", "rw,nosuid,nodev,exec,rprivate", "rw,nosuid,nodev,exec"},
    {"/dev", "nosuid,nodev,rprivate,tmpcopyup", "nosuid,nodev,tmpcopyup"},
    {"/dev", "ro,nosuid,nodev", "ro,nosuid,nodev"},
    /* Not one of Podman's paths. */
    {"/home", PODMAN_RW, "rw,nosuid,nodev,tmpcopyup"},
    {"/dev/", PODMAN_RW, "rw,nosuid,nodev,tmpcopyup"},
    {"/dev/shm/x", PODMAN_RW, "rw,nosuid,nodev,tmpcopyup"},
};

TEST(normalize_inspect_tmpfs)
{
    struct cfg *c = config(NULL);
    const struct cfg_profile *p = &c->profiles[0];
    json_t *body = docker_policy_create_body(p, "n", "s", 1000);
    struct err e = {0};

    for (size_t i = 0; i < sizeof(tmpfs_cases) / sizeof(tmpfs_cases[0]); i++) {
        json_t *in = podman_inspect(body);
        const char *path = tmpfs_cases[i].path;
        int r;

        (void)json_object_set_new(tmpfs_of(in), path, json_string(tmpfs_cases[i].opts));
        docker_quirks_normalize_inspect(podman(), in);
        err_clear(&e);
        r = docker_policy_verify(in, p, 1000, &e);
        if (tmpfs_cases[i].kept == NULL) {
            TAP_CHECK(json_object_get(tmpfs_of(in), path) == NULL && r == 0,
                      "%s '%s' dropped, policy passes (%d '%s')", path, tmpfs_cases[i].opts, r,
                      e.msg);
        } else {
            TAP_CHECK(strcmp(tmpfs_at(in, path), tmpfs_cases[i].kept) == 0 && r == -EPERM &&
                          strcmp(e.msg, "container has 3 tmpfs mounts, policy makes 2") == 0,
                      "%s '%s' kept as '%s', policy refuses (%d '%s')", path, tmpfs_cases[i].opts,
                      tmpfs_at(in, path), r, e.msg);
        }
        json_decref(in);
    }
    json_decref(body);
    cfg_free(c);
}

/* Podman's own writable /tmp in place of ours is dropped, and the policy misses its /tmp. */
TEST(normalize_inspect_podman_tmp)
{
    struct cfg *c = config(NULL);
    const struct cfg_profile *p = &c->profiles[0];
    json_t *body = docker_policy_create_body(p, "n", "s", 1000);
    json_t *in = podman_inspect(body);
    struct err e = {0};

    (void)json_object_set_new(tmpfs_of(in), "/tmp", json_string(PODMAN_RW));
    docker_quirks_normalize_inspect(podman(), in);
    ASSERT_TRUE(json_object_get(tmpfs_of(in), "/tmp") == NULL);
    ASSERT_ERR(docker_policy_verify(in, p, 1000, &e), EPERM);
    ASSERT_STREQ(e.msg, "/tmp is '(unset)', policy wants '" TMP_OPTS "'");
    json_decref(in);
    json_decref(body);
    cfg_free(c);
}

/* A bind mount is never Podman's own, whatever its target: kept for the policy to refuse. */
TEST(normalize_inspect_binds)
{
    struct cfg *c = config(NULL);
    const struct cfg_profile *p = &c->profiles[0];
    json_t *body = docker_policy_create_body(p, "n", "s", 1000);
    json_t *in = podman_inspect(body);
    json_t *binds = json_pack("[s]", "/dev/shm:/dev/shm:rw");
    json_t *mounts = json_pack("[{s:s, s:s, s:s, s:b}]", "Type", "bind", "Source", "/dev/shm",
                               "Destination", "/dev/shm", "RW", 1);
    struct err e = {0};

    (void)json_object_set(hc_of(in), "Binds", binds);
    docker_quirks_normalize_inspect(podman(), in);
    /* Read into Docker's shape (normalize_binds()), where the policy finds it all the same. */
    ASSERT_EQ_U(json_array_size(json_object_get(hc_of(in), "Mounts")), 1);
    ASSERT_STREQ(json_string_value(json_object_get(
                     json_array_get(json_object_get(hc_of(in), "Mounts"), 0), "Target")),
                 "/dev/shm");
    ASSERT_ERR(docker_policy_verify(in, p, 1000, &e), EPERM);
    ASSERT_STREQ(e.msg, "container has bind or volume mounts");
    json_decref(in);

    in = podman_inspect(body);
    (void)json_object_set(hc_of(in), "Mounts", mounts);
    docker_quirks_normalize_inspect(podman(), in);
    ASSERT_JSON_EQ(json_object_get(hc_of(in), "Mounts"), mounts);
    err_clear(&e);
    ASSERT_ERR(docker_policy_verify(in, p, 1000, &e), EPERM);
    ASSERT_STREQ(e.msg, "container has bind or volume mounts");
    json_decref(in);

    json_decref(mounts);
    json_decref(binds);
    json_decref(body);
    cfg_free(c);
}

/* CapDrop becomes "ALL" only when every one of Podman's defaults is in it. */
TEST(normalize_inspect_capdrop)
{
    struct cfg *c = config(NULL);
    const struct cfg_profile *p = &c->profiles[0];
    json_t *body = docker_policy_create_body(p, "n", "s", 1000);
    json_t *all = json_pack("[s]", "ALL");
    struct err e = {0};
    json_t *in, *drop;

    /* Without CAP_, reversed, with one more: still all of them. */
    in = podman_inspect(body);
    drop = json_array();
    for (size_t i = N_PODMAN_CAPS; i-- > 0;) {
        (void)json_array_append_new(drop, json_string(podman_caps[i]));
    }
    (void)json_array_append_new(drop, json_string("CAP_SYS_ADMIN"));
    (void)json_object_set_new(hc_of(in), "CapDrop", drop);
    docker_quirks_normalize_inspect(podman(), in);
    ASSERT_JSON_EQ(json_object_get(hc_of(in), "CapDrop"), all);
    ASSERT_OK(docker_policy_verify(in, p, 1000, &e));
    /* An added capability is refused however CapDrop reads. */
    (void)json_object_set_new(hc_of(in), "CapAdd", json_pack("[s]", "NET_RAW"));
    ASSERT_ERR(docker_policy_verify(in, p, 1000, &e), EPERM);
    json_decref(in);

    /* One left out (SYS_CHROOT kept), or a duplicate in its place, or lower case: not "ALL". */
    for (int variant = 0; variant < 3; variant++) {
        json_t *before;

        in = podman_inspect(body);
        drop = json_object_get(hc_of(in), "CapDrop");
        if (variant == 0) {
            (void)json_array_remove(drop, N_PODMAN_CAPS - 1);
        } else if (variant == 1) {
            (void)json_array_set_new(drop, N_PODMAN_CAPS - 1, json_string("CAP_CHOWN"));
        } else {
            (void)json_array_set_new(drop, 0, json_string("cap_audit_write"));
        }
        before = json_deep_copy(drop);
        docker_quirks_normalize_inspect(podman(), in);
        TAP_CHECK(json_equal(json_object_get(hc_of(in), "CapDrop"), before),
                  "variant %d: CapDrop left as it was", variant);
        err_clear(&e);
        ASSERT_ERR(docker_policy_verify(in, p, 1000, &e), EPERM);
        ASSERT_STREQ(e.msg, "capabilities are not all dropped");
        json_decref(before);
        json_decref(in);
    }
    json_decref(all);
    json_decref(body);
    cfg_free(c);
}

/* Ulimit names: only RLIMIT_<name> is renamed, and the values are still checked. */
TEST(normalize_inspect_ulimits)
{
    struct cfg *c = config(NULL);
    const struct cfg_profile *p = &c->profiles[0];
    json_t *body = docker_policy_create_body(p, "n", "s", 1000);
    json_t *in = podman_inspect(body);
    json_t *ul = json_object_get(hc_of(in), "Ulimits");
    struct err e = {0};
    static const char *const left[] = {"rlimit_nofile", "NOFILE", "RLIMIT",
                                       "RLIMIT_ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"};

    for (size_t i = 0; i < sizeof(left) / sizeof(left[0]); i++) {
        (void)json_array_append_new(
            ul, json_pack("{s:s, s:i, s:i}", "Name", left[i], "Soft", 1, "Hard", 1));
    }
    (void)json_array_append_new(ul, json_pack("{s:i}", "Name", 3));
    (void)json_array_append_new(ul, json_pack("{s:s}", "Name", "RLIMIT_"));
    docker_quirks_normalize_inspect(podman(), in);
    for (size_t i = 0; i < sizeof(left) / sizeof(left[0]); i++) {
        ASSERT_STREQ(json_string_value(json_object_get(json_array_get(ul, 4 + i), "Name")),
                     left[i]);
    }
    ASSERT_EQ_I(json_integer_value(json_object_get(json_array_get(ul, 8), "Name")), 3);
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(ul, 9), "Name")), "");
    ASSERT_OK(
        docker_policy_verify(in, p, 1000, &e)); /* extra ulimits are not the policy's business */
    json_decref(in);

    /* Renamed, but a wrong value is still a wrong value. */
    in = podman_inspect(body);
    (void)json_object_set_new(json_array_get(json_object_get(hc_of(in), "Ulimits"), 0), "Soft",
                              json_integer(4096));
    docker_quirks_normalize_inspect(podman(), in);
    ASSERT_ERR(docker_policy_verify(in, p, 1000, &e), EPERM);
    ASSERT_STREQ(e.msg, "ulimit nofile is not 1024");
    json_decref(in);
    json_decref(body);
    cfg_free(c);
}

/* Runtime "oci" (containers.conf's) goes; a named one stays, and cannot stand in for another. */
TEST(normalize_inspect_runtime)
{
    struct cfg *c = config("{\"profiles\": {\"python\": {}, \"g\": {\"runtime\": \"runsc\"}}}");
    const struct cfg_profile *py = cfg_profile_find(c, "python");
    const struct cfg_profile *g = cfg_profile_find(c, "g");
    json_t *body = docker_policy_create_body(g, "n", "s", 1000);
    json_t *in = podman_inspect(body);
    struct err e = {0};

    docker_quirks_normalize_inspect(podman(), in);
    ASSERT_TRUE(json_object_get(hc_of(in), "Runtime") == NULL);
    ASSERT_ERR(docker_policy_verify(in, g, 1000, &e), EPERM);
    ASSERT_STREQ(e.msg, "runtime is '(default)', policy wants 'runsc'");
    json_decref(in);

    in = podman_inspect(body);
    (void)json_object_set_new(hc_of(in), "Runtime", json_string("runsc"));
    docker_quirks_normalize_inspect(podman(), in);
    ASSERT_STREQ(json_string_value(json_object_get(hc_of(in), "Runtime")), "runsc");
    err_clear(&e);
    ASSERT_OK(docker_policy_verify(in, g, 1000, &e));
    json_decref(in);
    json_decref(body);

    body = docker_policy_create_body(py, "n", "s", 1000);
    in = podman_inspect(body);
    (void)json_object_set_new(hc_of(in), "Runtime", json_string("OCI"));
    docker_quirks_normalize_inspect(podman(), in);
    ASSERT_STREQ(json_string_value(json_object_get(hc_of(in), "Runtime")), "OCI");
    json_decref(in);
    json_decref(body);
    cfg_free(c);
}

/* NetworkDisabled is filled in only when Podman left it out and NetworkMode is "none". */
TEST(normalize_inspect_network)
{
    struct cfg *c = config(NULL);
    const struct cfg_profile *p = &c->profiles[0];
    json_t *body = docker_policy_create_body(p, "n", "s", 1000);
    struct err e = {0};
    json_t *in;

    in = podman_inspect(body);
    (void)json_object_del(json_object_get(in, "Config"), "NetworkDisabled"); /* absent */
    docker_quirks_normalize_inspect(podman(), in);
    ASSERT_TRUE(json_is_true(json_object_get(json_object_get(in, "Config"), "NetworkDisabled")));
    ASSERT_OK(docker_policy_verify(in, p, 1000, &e));
    json_decref(in);

    in = podman_inspect(body);
    (void)json_object_set_new(json_object_get(in, "Config"), "NetworkDisabled", json_false());
    docker_quirks_normalize_inspect(podman(), in);
    ASSERT_TRUE(json_is_false(json_object_get(json_object_get(in, "Config"), "NetworkDisabled")));
    ASSERT_ERR(docker_policy_verify(in, p, 1000, &e), EPERM);
    ASSERT_STREQ(e.msg, "NetworkDisabled is not true");
    json_decref(in);

    in = podman_inspect(body);
    (void)json_object_set_new(hc_of(in), "NetworkMode", json_string("bridge"));
    docker_quirks_normalize_inspect(podman(), in);
    ASSERT_TRUE(json_is_null(json_object_get(json_object_get(in, "Config"), "NetworkDisabled")));
    ASSERT_ERR(docker_policy_verify(in, p, 1000, &e), EPERM);
    json_decref(in);
    json_decref(body);
    cfg_free(c);
}

/* Whatever shape the answer has, nothing crashes, and what is not Podman's is left alone. */
TEST(normalize_inspect_odd_shapes)
{
    static const char *const docs[] = {
        "[]",
        "[{\"HostConfig\": {\"Runtime\": \"oci\"}}]",
        "\"HostConfig\"",
        "42",
        "null",
        "true",
        "{}",
        "{\"HostConfig\": []}",
        "{\"HostConfig\": \"x\", \"Config\": {\"NetworkDisabled\": null}}",
        "{\"HostConfig\": {\"Tmpfs\": [\"/dev\"], \"Ulimits\": {\"Name\": \"RLIMIT_CORE\"}}}",
        "{\"HostConfig\": {\"CapDrop\": \"CAP_CHOWN\", \"Runtime\": 5}}",
        "{\"HostConfig\": {\"Tmpfs\": {\"/dev\": 5, \"/run\": null}}}",
        "{\"HostConfig\": {\"Ulimits\": [\"x\", 5, {}, {\"Name\": null}]}}",
        "{\"HostConfig\": {\"CapDrop\": [1, null, {}, \"CAP_CHOWN\"]}}",
        "{\"HostConfig\": {\"NetworkMode\": \"none\"}, \"Config\": \"x\"}",
        "{\"HostConfig\": {\"NetworkMode\": 0}, \"Config\": {}}",
    };

    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        json_t *in = json_loads(docs[i], JSON_DECODE_ANY, NULL);
        json_t *copy = json_deep_copy(in);

        docker_quirks_normalize_inspect(docker(), in);
        docker_quirks_normalize_inspect(podman(), in);
        TAP_CHECK(in != NULL && json_equal(in, copy), "left alone: %s", docs[i]);
        json_decref(copy);
        json_decref(in);
    }
    /* NULL (what json_object_get() gives for a missing answer): returns, does not crash. */
    docker_quirks_normalize_inspect(docker(), NULL);
    docker_quirks_normalize_inspect(podman(), NULL);
}

/* ---- seccomp -----------------------------------------------------------------------------------
 */

#define SECCOMP \
    "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"syscalls\":[{\"names\":[\"read\"],\"action\":\"SCMP_ACT_ALLOW\"}]}"
#define SECCOMP_FILE "/usr/share/sandpool/seccomp.json"

/* The built-in profile with the sandbox seccomp profile read (cfg_load_seccomp()). */
static struct cfg_profile
with_seccomp(const struct cfg_profile *p)
{
    struct cfg_profile q = *p;

    q.seccomp = SECCOMP;
    q.seccomp_path = SECCOMP_FILE;
    return q;
}

static const char *
opt_at(json_t *o, size_t i)
{
    const char *s = json_string_value(json_array_get(json_object_get(hc_of(o), "SecurityOpt"), i));

    return s != NULL ? s : "(none)";
}

/* Docker is sent the content; Podman (which opens the value as a file) the file the label names;
 * nothing else of the body changes for it. */
TEST(adapt_create_seccomp)
{
    struct cfg *c = config(NULL);
    struct cfg_profile p = with_seccomp(&c->profiles[0]);
    json_t *b = docker_policy_create_body(&p, "n", "s", 1000);
    json_t *d = json_deep_copy(b), *want = json_deep_copy(b);
    struct err e = {0};

    ASSERT_STREQ(opt_at(b, 1), "seccomp=" SECCOMP);
    ASSERT_OK(docker_quirks_adapt_create(docker(), d, &e));
    ASSERT_JSON_EQ(d, b);
    ASSERT_OK(docker_quirks_adapt_create(podman(), b, &e));
    ASSERT_STREQ(opt_at(b, 0), "no-new-privileges");
    ASSERT_STREQ(opt_at(b, 1), "seccomp=" SECCOMP_FILE);
    ASSERT_EQ_U(json_array_size(json_object_get(hc_of(b), "SecurityOpt")), 2);
    /* The rest as for a body without a profile (adapt_create_podman). */
    ASSERT_OK(docker_quirks_adapt_create(podman(), want, &e));
    (void)json_array_set_new(json_object_get(hc_of(want), "SecurityOpt"), 1,
                             json_string("seccomp=" SECCOMP_FILE));
    ASSERT_JSON_EQ(b, want);
    json_decref(want);
    json_decref(d);
    json_decref(b);

    /* A profile by content without its file named, or with a relative one: Podman cannot take
     * it. What is not a profile by content is left as it is. */
    for (int k = 0; k < 3; k++) {
        b = docker_policy_create_body(&p, "n", "s", 1000);
        if (k == 0) {
            (void)json_object_del(json_object_get(b, "Labels"), "sandpool.seccomp");
        } else if (k == 1) {
            (void)json_object_set_new(json_object_get(b, "Labels"), "sandpool.seccomp",
                                      json_string("seccomp.json"));
        } else {
            (void)json_object_set_new(json_object_get(b, "Labels"), "sandpool.seccomp",
                                      json_null());
        }
        err_clear(&e);
        ASSERT_ERR(docker_quirks_adapt_create(podman(), b, &e), EOPNOTSUPP);
        ASSERT_STREQ(e.msg, "podman takes a seccomp profile only as a file it opens itself, and "
                            "the create body names none (label sandpool.seccomp)");
        json_decref(b);
    }
    b = docker_policy_create_body(&c->profiles[0], "n", "s", 1000);
    (void)json_array_append_new(json_object_get(hc_of(b), "SecurityOpt"),
                                json_string("seccomp=unconfined"));
    (void)json_array_append_new(json_object_get(hc_of(b), "SecurityOpt"),
                                json_string("seccomp=/etc/x.json"));
    ASSERT_OK(docker_quirks_adapt_create(podman(), b, &e));
    ASSERT_STREQ(opt_at(b, 1), "seccomp=unconfined");
    ASSERT_STREQ(opt_at(b, 2), "seccomp=/etc/x.json");
    json_decref(b);
    cfg_free(c);
}

/* Podman's inspect shows the file it opened ("seccomp=<path>", seen on 4.3.1): rewritten into
 * the policy's file form, which verify() accepts for exactly our file; Docker's is as sent. The
 * whole way: the body as adapted for Podman, shown by its inspect, rewritten, checked. */
TEST(normalize_inspect_seccomp)
{
    struct cfg *c = config(NULL);
    struct cfg_profile p = with_seccomp(&c->profiles[0]);
    json_t *b = docker_policy_create_body(&p, "n", "s", 1000);
    json_t *sent = json_deep_copy(b);
    json_t *in, *copy;
    struct err e = {0};

    /* Docker: as sent, and it passes. */
    in = docker_inspect(b);
    copy = json_deep_copy(in);
    docker_quirks_normalize_inspect(docker(), in);
    ASSERT_JSON_EQ(in, copy);
    ASSERT_OK(docker_policy_verify(in, &p, 1000, &e));
    json_decref(copy);
    json_decref(in);

    /* Podman: what it was sent (the file), with all its other differences. */
    ASSERT_OK(docker_quirks_adapt_create(podman(), sent, &e));
    in = podman_inspect(b);
    (void)json_object_set(hc_of(in), "SecurityOpt", json_object_get(hc_of(sent), "SecurityOpt"));
    ASSERT_STREQ(opt_at(in, 1), "seccomp=" SECCOMP_FILE);
    docker_quirks_normalize_inspect(docker(), in);
    ASSERT_STREQ(opt_at(in, 1), "seccomp=" SECCOMP_FILE); /* Docker's rewrite leaves it */
    docker_quirks_normalize_inspect(podman(), in);
    ASSERT_STREQ(opt_at(in, 1), DOCKER_SECCOMP_FILE_OPT SECCOMP_FILE);
    ASSERT_OK(docker_policy_verify(in, &p, 1000, &e));
    copy = json_deep_copy(in);
    docker_quirks_normalize_inspect(podman(), in); /* a second pass changes nothing */
    ASSERT_JSON_EQ(in, copy);
    json_decref(copy);
    /* Another file, unconfined, none: still drift after the rewrite. */
    (void)json_array_set_new(json_object_get(hc_of(in), "SecurityOpt"), 1,
                             json_string("seccomp=/etc/other.json"));
    docker_quirks_normalize_inspect(podman(), in);
    ASSERT_STREQ(opt_at(in, 1), DOCKER_SECCOMP_FILE_OPT "/etc/other.json");
    ASSERT_ERR(docker_policy_verify(in, &p, 1000, &e), EPERM);
    (void)json_array_set_new(json_object_get(hc_of(in), "SecurityOpt"), 1,
                             json_string("seccomp=unconfined"));
    docker_quirks_normalize_inspect(podman(), in);
    ASSERT_STREQ(opt_at(in, 1), "seccomp=unconfined");
    ASSERT_ERR(docker_policy_verify(in, &p, 1000, &e), EPERM);
    (void)json_array_remove(json_object_get(hc_of(in), "SecurityOpt"), 1);
    docker_quirks_normalize_inspect(podman(), in);
    ASSERT_ERR(docker_policy_verify(in, &p, 1000, &e), EPERM);
    ASSERT_TRUE(strstr(e.msg, "seccomp is the engine's default") != NULL);
    json_decref(in);

    /* Docker never shows a file: a path in its inspect is no profile of ours. */
    in = docker_inspect(b);
    (void)json_array_set_new(json_object_get(hc_of(in), "SecurityOpt"), 1,
                             json_string("seccomp=" SECCOMP_FILE));
    docker_quirks_normalize_inspect(docker(), in);
    ASSERT_ERR(docker_policy_verify(in, &p, 1000, &e), EPERM);
    json_decref(in);
    json_decref(sent);
    json_decref(b);
    cfg_free(c);
}

/* ---- events -----------------------------------------------------------------------------------
 */

/* The event after Podman's rewrite, compared with want (both JSON texts). */
static void
check_event(const struct docker_quirks *q, const char *in_text, const char *want_text)
{
    json_t *ev = json_loads(in_text, JSON_DECODE_ANY, NULL);
    json_t *want = json_loads(want_text, JSON_DECODE_ANY, NULL);
    char *got;

    docker_quirks_normalize_event(q, ev);
    got = dump(ev);
    TAP_CHECK(ev != NULL && want != NULL && json_equal(ev, want), "%s %s -> %s (got %s)", q->name,
              in_text, want_text, got != NULL ? got : "(null)");
    free(got);
    json_decref(want);
    json_decref(ev);
}

TEST(normalize_event)
{
    static const char *const untouched[] = {
        "{\"Type\": \"container\", \"Action\": \"die\", \"status\": \"die\", \"id\": \"a\"}",
        "{\"Action\": \"destroy\", \"status\": \"destroy\"}",
        "{\"Action\": \"exec_die\"}",
        "{\"Action\": \"start\", \"status\": \"start\"}",
        "{\"Action\": \"Remove\", \"status\": \"removed\"}",
        "{\"Action\": \"remove \", \"status\": \"exec_died:\"}",
        "{\"Action\": 1, \"status\": null}",
        "{\"Type\": \"remove\", \"Actor\": {\"Attributes\": {\"name\": \"exec_died\"}}}",
        "{}",
        "[\"remove\"]",
        "\"remove\"",
        "null",
    };

    /* Podman's names become Docker's, in Action and status; nothing else changes. */
    check_event(podman(),
                "{\"Type\": \"container\", \"Action\": \"remove\", \"status\": \"remove\","
                " \"id\": \"abc\", \"Actor\": {\"ID\": \"abc\", \"Attributes\": {\"name\":"
                " \"remove\"}}, \"time\": 1}",
                "{\"Type\": \"container\", \"Action\": \"destroy\", \"status\": \"destroy\","
                " \"id\": \"abc\", \"Actor\": {\"ID\": \"abc\", \"Attributes\": {\"name\":"
                " \"remove\"}}, \"time\": 1}");
    check_event(podman(),
                "{\"Type\": \"container\", \"Action\": \"exec_died\", \"status\": \"exec_died\","
                " \"id\": \"abc\"}",
                "{\"Type\": \"container\", \"Action\": \"exec_die\", \"status\": \"exec_die\","
                " \"id\": \"abc\"}");
    check_event(podman(), "{\"Action\": \"remove\"}", "{\"Action\": \"destroy\"}");
    check_event(podman(), "{\"status\": \"exec_died\"}", "{\"status\": \"exec_die\"}");
    check_event(podman(), "{\"Action\": \"exec_died\", \"status\": \"remove\"}",
                "{\"Action\": \"exec_die\", \"status\": \"destroy\"}");
    check_event(podman(), "{\"Action\": \"remove\", \"status\": 3}",
                "{\"Action\": \"destroy\", \"status\": 3}");
    for (size_t i = 0; i < sizeof(untouched) / sizeof(untouched[0]); i++) {
        check_event(podman(), untouched[i], untouched[i]);
    }
    /* Docker's events are Docker's already. */
    check_event(docker(), "{\"Action\": \"remove\", \"status\": \"remove\"}",
                "{\"Action\": \"remove\", \"status\": \"remove\"}");
    check_event(docker(), "{\"Action\": \"exec_died\", \"status\": \"exec_died\"}",
                "{\"Action\": \"exec_died\", \"status\": \"exec_died\"}");
    docker_quirks_normalize_event(podman(), NULL); /* returns, does not crash */
    docker_quirks_normalize_event(docker(), NULL);
}

int
main(void)
{
    RUN(flags);
    RUN(check_profile);
    RUN(host_pid_max);
    RUN(adapt_create_docker);
    RUN(adapt_create_podman);
    RUN(adapt_create_podman_other_user);
    RUN(adapt_create_podman_owner);
    RUN(adapt_create_podman_edges);
    RUN(normalize_inspect_each);
    RUN(normalize_inspect_all);
    RUN(normalize_podman_binds);
    RUN(normalize_inspect_tmpfs);
    RUN(normalize_inspect_podman_tmp);
    RUN(normalize_inspect_binds);
    RUN(normalize_inspect_capdrop);
    RUN(normalize_inspect_ulimits);
    RUN(normalize_inspect_runtime);
    RUN(normalize_inspect_network);
    RUN(normalize_inspect_odd_shapes);
    RUN(adapt_create_seccomp);
    RUN(normalize_inspect_seccomp);
    RUN(normalize_event);
    return tap_done();
}
