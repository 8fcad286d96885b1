/* Container policy; see policy.h. Pure: builds and compares JSON, no I/O. Any field added to the
 * create body must also be checked by docker_policy_verify() so that drift is detectable. */
#include "policy.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "egress/rules.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/parse.h"

#define MIB (1024ull * 1024ull)

static void
tmpfs_options(const struct cfg_profile *p, uint32_t uid, char *ws, size_t ws_n, char *tmp,
              size_t tmp_n)
{
    /* mode 0700 owned by the sandbox user: nobody else in the container needs it. */
    (void)snprintf(ws, ws_n, "rw,exec,nosuid,nodev,size=%um,mode=0700,uid=%u,gid=%u",
                   p->workspace_mb, uid, uid);
    (void)snprintf(tmp, tmp_n, "rw,noexec,nosuid,nodev,size=%um,mode=1777", p->tmp_mb);
}

/* A new JSON string "seccomp=" and the profile. */
static json_t *
seccomp_opt_new(const char *profile)
{
    struct buf b = BUF_INIT(SIZE_MAX);
    json_t *v;

    if (buf_printf(&b, "seccomp=%s", profile) < 0) {
        oom();
    }
    v = OOM_CHECK(json_string(b.buf));
    buf_done(&b);
    return v;
}

static uint64_t
fsize_bytes(const struct cfg_profile *p)
{
    return (uint64_t)MAX(p->workspace_mb, p->tmp_mb) * MIB;
}

static json_t *
ulimits(const struct cfg_profile *p)
{
    return OOM_CHECK(
        json_pack("[{s:s, s:I, s:I}, {s:s, s:I, s:I}, {s:s, s:I, s:I}, {s:s, s:i, s:i}]", "Name",
                  "nofile", "Soft", (json_int_t)p->nofile, "Hard", (json_int_t)p->nofile, "Name",
                  "nproc", "Soft", (json_int_t)p->nproc, "Hard", (json_int_t)p->nproc, "Name",
                  "fsize", "Soft", (json_int_t)fsize_bytes(p), "Hard", (json_int_t)fsize_bytes(p),
                  "Name", "core", "Soft", 0, "Hard", 0));
}

/* A new string: the gate directory of slot_id (egress/rules.h). */
static char *
egress_source(const struct cfg_profile *p, const char *slot_id)
{
    struct buf b = BUF_INIT(SIZE_MAX);

    if (buf_printf(&b, "%s/%s", p->egress_dir, slot_id) < 0) {
        oom();
    }
    return b.buf;
}

/* A profile with an egress list: its gate mounted read-only, and the proxy variables naming the
 * forwarder that listens on the container's loopback (docs/egress.md). */
static void
add_egress(json_t *body, const struct cfg_profile *p, const char *slot_id)
{
    char proxy[40], *src = egress_source(p, slot_id);
    json_t *env = json_object_get(body, "Env");

    (void)snprintf(proxy, sizeof(proxy), "http://127.0.0.1:%u", p->egress_port);
    (void)json_object_set_new(
        json_object_get(body, "HostConfig"), "Mounts",
        OOM_CHECK(json_pack("[{s:s, s:s, s:s, s:b}]", "Type", "bind", "Source", src, "Target",
                            EGRESS_MOUNT, "ReadOnly", 1)));
    free(src);
    for (const char *const *k =
             (const char *const[]){"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
                                   "https_proxy", "all_proxy", NULL};
         *k != NULL; k++) {
        struct buf b = BUF_INIT(SIZE_MAX);

        if (buf_printf(&b, "%s=%s", *k, proxy) < 0) {
            oom();
        }
        (void)json_array_append_new(env, OOM_CHECK(json_string(b.buf)));
        buf_done(&b);
    }
    /* The sandbox's own servers stay direct. */
    (void)json_array_append_new(env, OOM_CHECK(json_string("NO_PROXY=localhost,127.0.0.1,::1")));
    (void)json_array_append_new(env, OOM_CHECK(json_string("no_proxy=localhost,127.0.0.1,::1")));
}

bool
docker_policy_wants_init(const struct cfg_profile *p)
{
    return p->command != NULL;
}

json_t *
docker_policy_create_body(const struct cfg_profile *p, const char *node_id, const char *slot_id,
                          uint32_t uid)
{
    char ws[160], tmp[160], user[24], uid_text[12];
    json_t *host, *body;
    json_int_t mem = (json_int_t)((uint64_t)p->memory_mb * MIB);

    tmpfs_options(p, uid, ws, sizeof(ws), tmp, sizeof(tmp));
    (void)snprintf(user, sizeof(user), "%u:%u", uid, uid);
    (void)snprintf(uid_text, sizeof(uid_text), "%u", uid);
    host = OOM_CHECK(json_pack(
        "{s:s, s:b, s:I, s:I, s:I, s:I, s:[s], s:[s], s:{s:s, s:s}, s:I, s:s, s:o, s:b, s:b,"
        " s:{s:s}, s:{s:s}, s:i}",
        "NetworkMode", "none", "ReadonlyRootfs", 1, "Memory", mem, "MemorySwap", mem, "NanoCpus",
        (json_int_t)(p->cpus * 1e9), "PidsLimit", (json_int_t)p->pids, "CapDrop", "ALL",
        "SecurityOpt", "no-new-privileges", "Tmpfs", DOCKER_WORKSPACE, ws, DOCKER_TMP, tmp,
        "ShmSize", (json_int_t)((uint64_t)p->shm_mb * MIB), "IpcMode", "private", "Ulimits",
        ulimits(p), "Init", docker_policy_wants_init(p), "AutoRemove", 0, "RestartPolicy", "Name",
        "no", "LogConfig", "Type", "none", "OomScoreAdj", 500));
    /* Docker's form, the content; Podman is sent the file instead (docker/quirks.c). */
    if (p->seccomp != NULL) {
        (void)json_array_append_new(json_object_get(host, "SecurityOpt"),
                                    seccomp_opt_new(p->seccomp));
    }
    /* Under gVisor the pids cgroup would count the sandbox's own host threads, not the
     * container's processes (docker_policy_check_engine): the profile accepted nproc instead. */
    if (cfg_pids_by_runtime(p)) {
        (void)json_object_del(host, "PidsLimit");
    }
    if (!cfg_runtime_is_default(p)) {
        (void)json_object_set_new(host, "Runtime", OOM_CHECK(json_string(p->runtime)));
    }
    /* USER and LOGNAME: the uid has no passwd entry (getpass.getuser() reads them). */
    body = OOM_CHECK(json_pack(
        "{s:s, s:s, s:s, s:s, s:[s, s, s, s], s:{s:s, s:s, s:s, s:s, s:s}, s:b, s:b, s:b, s:b,"
        " s:b, s:b, s:b, s:i, s:o}",
        "Image", p->image, "User", user, "WorkingDir", DOCKER_WORKSPACE, "Hostname", "sandbox",
        "Env", "HOME=" DOCKER_WORKSPACE, "TMPDIR=" DOCKER_TMP, "USER=sandbox", "LOGNAME=sandbox",
        "Labels", DOCKER_LABEL_OWNER, node_id, DOCKER_LABEL_PROFILE, p->name, DOCKER_LABEL_SLOT,
        slot_id, DOCKER_LABEL_SCHEMA, DOCKER_LABEL_SCHEMA_VERSION, DOCKER_LABEL_UID, uid_text,
        "NetworkDisabled", 1, "Tty", 0, "OpenStdin", 1, "StdinOnce", 0, "AttachStdin", 0,
        "AttachStdout", 0, "AttachStderr", 0, "StopTimeout", 1, "HostConfig", host));
    if (p->seccomp != NULL) {
        /* For Podman, which takes the file (docker/quirks.c), and for whoever reads the labels. */
        (void)json_object_set_new(json_object_get(body, "Labels"), DOCKER_LABEL_SECCOMP,
                                  OOM_CHECK(json_string(p->seccomp_path)));
    }
    if (p->command != NULL) {
        json_t *cmd = OOM_CHECK(json_array());

        for (char **a = p->command; *a != NULL; a++) {
            (void)json_array_append_new(cmd, OOM_CHECK(json_string(*a)));
        }
        (void)json_object_set_new(body, "Cmd", cmd);
    }
    if (p->egress != NULL) {
        add_egress(body, p, slot_id);
    }
    return body;
}

/* ---- verification ---------------------------------------------------------------------------- */

static int
want_int(json_t *obj, const char *key, json_int_t want, struct err *reterr)
{
    json_t *v = json_object_get(obj, key);

    if (!json_is_integer(v) || json_integer_value(v) != want) {
        return err_set(reterr, -EPERM,
                       "%s is %s%" JSON_INTEGER_FORMAT ", policy wants %" JSON_INTEGER_FORMAT, key,
                       json_is_integer(v) ? "" : "unset/",
                       json_is_integer(v) ? json_integer_value(v) : 0, want);
    }
    return 0;
}

static int
want_str(json_t *obj, const char *key, const char *want, struct err *reterr)
{
    const char *v = json_string_value(json_object_get(obj, key));

    if (v == NULL || strcmp(v, want) != 0) {
        return err_set(reterr, -EPERM, "%s is '%s', policy wants '%s'", key, v ? v : "(unset)",
                       want);
    }
    return 0;
}

static int
want_true(json_t *obj, const char *key, bool want, struct err *reterr)
{
    if (json_is_true(json_object_get(obj, key)) != want) {
        return err_set(reterr, -EPERM, "%s is not %s", key, want ? "true" : "false");
    }
    return 0;
}

static bool
array_has(json_t *arr, const char *s)
{
    size_t i;
    json_t *v;

    json_array_foreach (arr, i, v) {
        if (json_is_string(v) && strcmp(json_string_value(v), s) == 0) {
            return true;
        }
    }
    return false;
}

static int
verify_ulimits(json_t *hc, const struct cfg_profile *p, struct err *reterr)
{
    const struct {
        const char *name;
        json_int_t value;
    } want[] = {
        {"nofile", p->nofile},
        {"nproc", p->nproc},
        {"fsize", (json_int_t)fsize_bytes(p)},
        {"core", 0},
    };
    json_t *ul = json_object_get(hc, "Ulimits");

    for (size_t k = 0; k < ELEMENTSOF(want); k++) {
        bool found = false;
        size_t i;
        json_t *u;

        json_array_foreach (ul, i, u) {
            const char *name = json_string_value(json_object_get(u, "Name"));

            if (name != NULL && strcmp(name, want[k].name) == 0) {
                found = json_integer_value(json_object_get(u, "Soft")) == want[k].value &&
                        json_integer_value(json_object_get(u, "Hard")) == want[k].value;
            }
        }
        if (!found) {
            return err_set(reterr, -EPERM, "ulimit %s is not %" JSON_INTEGER_FORMAT, want[k].name,
                           want[k].value);
        }
    }
    return 0;
}

static bool
str_eq_opt(const char *a, const char *b)
{
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}

static int
verify_tmpfs(json_t *hc, const struct cfg_profile *p, uint32_t uid, struct err *reterr)
{
    char ws[160], tmp[160];
    json_t *t = json_object_get(hc, "Tmpfs");

    tmpfs_options(p, uid, ws, sizeof(ws), tmp, sizeof(tmp));
    if (want_str(t, DOCKER_WORKSPACE, ws, reterr) < 0 || want_str(t, DOCKER_TMP, tmp, reterr) < 0) {
        return -EPERM;
    }
    /* Only ours (Podman's own read-only-tmpfs mounts are dropped by docker/quirks.c). */
    if (json_object_size(t) != 2) {
        return err_set(reterr, -EPERM, "container has %zu tmpfs mounts, policy makes 2",
                       json_object_size(t));
    }
    return 0;
}

/* Whether m (a create body's mount, HostConfig.Mounts) is the gate of the slot src names. */
static bool
is_our_gate_mount(json_t *m, const char *src)
{
    return str_eq_opt(json_string_value(json_object_get(m, "Type")), "bind") &&
           str_eq_opt(json_string_value(json_object_get(m, "Source")), src) &&
           str_eq_opt(json_string_value(json_object_get(m, "Target")), EGRESS_MOUNT) &&
           json_is_true(json_object_get(m, "ReadOnly"));
}

/* No bind or volume mount but, for a profile with an egress list, its gate: read-only, at
 * EGRESS_MOUNT, from the directory its slot label names; in what was sent (HostConfig) and in
 * what the runtime mounted (the inspect's Mounts, when the engine reports them). */
static int
verify_mounts(json_t *cfg, json_t *hc, json_t *mounts, const struct cfg_profile *p,
              struct err *reterr)
{
    const char *slot =
        json_string_value(json_object_get(json_object_get(cfg, "Labels"), DOCKER_LABEL_SLOT));
    json_t *sent = json_object_get(hc, "Mounts");
    char *src;
    size_t i;
    json_t *m;
    int r = 0;

    if (json_array_size(json_object_get(hc, "Binds")) > 0) {
        return err_set(reterr, -EPERM, "container has bind or volume mounts");
    }
    if (p->egress == NULL) {
        return json_array_size(sent) > 0
                   ? err_set(reterr, -EPERM, "container has bind or volume mounts")
                   : 0;
    }
    if (slot == NULL) {
        return err_set(reterr, -EPERM, "its %s label is missing", DOCKER_LABEL_SLOT);
    }
    src = egress_source(p, slot);
    if (json_array_size(sent) != 1 || !is_our_gate_mount(json_array_get(sent, 0), src)) {
        r = err_set(reterr, -EPERM, "its mounts are not exactly its egress gate %s, read-only",
                    src);
    }
    json_array_foreach (mounts, i, m) {
        if (r == 0 && str_eq_opt(json_string_value(json_object_get(m, "Type")), "bind") &&
            (!str_eq_opt(json_string_value(json_object_get(m, "Destination")), EGRESS_MOUNT) ||
             !str_eq_opt(json_string_value(json_object_get(m, "Source")), src) ||
             !json_is_false(json_object_get(m, "RW")))) {
            r = err_set(reterr, -EPERM, "it has a bind mount other than its read-only gate");
        }
    }
    free(src);
    return r;
}

/* Whether opt is a seccomp option: "seccomp=X", Docker's older "seccomp:X", or a file as
 * docker/quirks.c writes Podman's. */
static bool
is_seccomp_opt(const char *opt)
{
    return str_startswith(opt, "seccomp=") || str_startswith(opt, "seccomp:") ||
           str_startswith(opt, DOCKER_SECCOMP_FILE_OPT);
}

/* Whether opt is p's profile: its content (Docker applied it), or its file (Podman opened it). */
static bool
is_our_seccomp(const char *opt, const struct cfg_profile *p)
{
    const size_t n = strlen(DOCKER_SECCOMP_FILE_OPT);

    return (str_startswith(opt, "seccomp=") && strcmp(opt + 8, p->seccomp) == 0) ||
           (p->seccomp_path != NULL && strncmp(opt, DOCKER_SECCOMP_FILE_OPT, n) == 0 &&
            strcmp(opt + n, p->seccomp_path) == 0);
}

/* Exactly one seccomp option, p's, and the label naming its file; no seccomp option when p leaves
 * seccomp to the engine's default. */
static int
verify_seccomp(json_t *cfg, json_t *hc, const struct cfg_profile *p, struct err *reterr)
{
    json_t *opts = json_object_get(hc, "SecurityOpt");
    const char *other = NULL;
    size_t i, n = 0;
    bool ours = false;
    json_t *v;

    json_array_foreach (opts, i, v) {
        const char *s = json_string_value(v);

        if (s == NULL || !is_seccomp_opt(s)) {
            continue;
        }
        n++;
        if (p->seccomp != NULL && is_our_seccomp(s, p)) {
            ours = true;
        } else {
            other = s;
        }
    }
    if (p->seccomp == NULL && n > 0) {
        return err_set(reterr, -EPERM,
                       "seccomp is '%.60s', policy leaves it to the engine's default profile",
                       other);
    }
    if (p->seccomp != NULL && n > 1) {
        return err_set(reterr, -EPERM, "%zu seccomp options, policy sends one", n);
    }
    if (p->seccomp != NULL && !ours) {
        return err_set(reterr, -EPERM,
                       "seccomp is %s%.60s%s, policy wants the profile of sandbox.seccomp_profile "
                       "'%.60s'",
                       other != NULL ? "'" : "", other != NULL ? other : "the engine's default",
                       other != NULL ? "'" : "", p->seccomp_path);
    }
    if (p->seccomp != NULL &&
        !str_eq_opt(json_string_value(
                        json_object_get(json_object_get(cfg, "Labels"), DOCKER_LABEL_SECCOMP)),
                    p->seccomp_path)) {
        return err_set(reterr, -EPERM, "its %s label is not '%.60s'", DOCKER_LABEL_SECCOMP,
                       p->seccomp_path);
    }
    return 0;
}

int64_t
docker_policy_uid_value(const char *v)
{
    uint64_t uid;

    if (v == NULL || v[0] < '1' || v[0] > '9' || parse_u64(v, &uid) < 0 || uid > UINT32_MAX) {
        return -1;
    }
    return (int64_t)uid;
}

int64_t
docker_policy_uid(json_t *obj)
{
    json_t *labels = json_object_get(obj, "Labels");

    if (labels == NULL) {
        labels = json_object_get(json_object_get(obj, "Config"), "Labels");
    }
    return docker_policy_uid_value(json_string_value(json_object_get(labels, DOCKER_LABEL_UID)));
}

int
docker_policy_verify(json_t *inspect, const struct cfg_profile *p, uint32_t uid, struct err *reterr)
{
    json_t *cfg = json_object_get(inspect, "Config");
    json_t *hc = json_object_get(inspect, "HostConfig");
    json_int_t mem = (json_int_t)((uint64_t)p->memory_mb * MIB);
    json_t *masked = json_object_get(hc, "MaskedPaths");
    const char *runtime = json_string_value(json_object_get(hc, "Runtime"));
    char user[24];

    if (!json_is_object(cfg) || !json_is_object(hc)) {
        return err_set(reterr, -EPROTO, "inspect answer lacks Config or HostConfig");
    }
    (void)snprintf(user, sizeof(user), "%u:%u", uid, uid);
    if (docker_policy_uid(inspect) != (int64_t)uid) {
        return err_set(reterr, -EPERM, "its %s label is not %u, the uid it was given",
                       DOCKER_LABEL_UID, uid);
    }
    if (want_str(cfg, "User", user, reterr) < 0 ||
        want_true(cfg, "NetworkDisabled", true, reterr) < 0 ||
        want_str(hc, "NetworkMode", "none", reterr) < 0 ||
        want_true(hc, "ReadonlyRootfs", true, reterr) < 0 ||
        want_true(hc, "Privileged", false, reterr) < 0 || want_int(hc, "Memory", mem, reterr) < 0 ||
        want_int(hc, "MemorySwap", mem, reterr) < 0 ||
        want_int(hc, "NanoCpus", (json_int_t)(p->cpus * 1e9), reterr) < 0 ||
        (!cfg_pids_by_runtime(p) && want_int(hc, "PidsLimit", p->pids, reterr) < 0) ||
        want_true(hc, "Init", docker_policy_wants_init(p), reterr) < 0) {
        return -EPERM;
    }
    if (!array_has(json_object_get(hc, "CapDrop"), "ALL") ||
        json_array_size(json_object_get(hc, "CapAdd")) > 0) {
        return err_set(reterr, -EPERM, "capabilities are not all dropped");
    }
    if (!array_has(json_object_get(hc, "SecurityOpt"), "no-new-privileges")) {
        return err_set(reterr, -EPERM, "no-new-privileges is not set");
    }
    if (verify_seccomp(cfg, hc, p, reterr) < 0) {
        return -EPERM;
    }
    for (const char *const *m = (const char *const[]){"/proc/kcore", "/proc/keys", NULL}; *m; m++) {
        if (json_is_array(masked) && !array_has(masked, *m)) {
            return err_set(reterr, -EPERM, "default masked path %s is not masked", *m);
        }
    }
    if (!cfg_runtime_is_default(p) && (runtime == NULL || strcmp(runtime, p->runtime) != 0)) {
        return err_set(reterr, -EPERM, "runtime is '%s', policy wants '%s'",
                       runtime ? runtime : "(default)", p->runtime);
    }
    if (verify_ulimits(hc, p, reterr) < 0 || verify_tmpfs(hc, p, uid, reterr) < 0 ||
        verify_mounts(cfg, hc, json_object_get(inspect, "Mounts"), p, reterr) < 0) {
        return -EPERM;
    }
    return 0;
}

/* ---- what the engine can enforce ---------------------------------------------------------------
 */

/* gVisor, by the runtime's name or by the binary the engine runs for it. */
static bool
runtime_is_gvisor(const char *name, json_t *rt)
{
    const char *path = json_string_value(json_object_get(rt, "path"));
    const char *base = path != NULL ? strrchr(path, '/') : NULL;

    base = base != NULL ? base + 1 : path;
    return strcmp(name, "runsc") == 0 || (base != NULL && strcmp(base, "runsc") == 0);
}

int
docker_policy_check_engine(const struct cfg_profile *p, json_t *info, struct err *reterr)
{
    json_t *rt = json_object_get(json_object_get(info, "Runtimes"), p->runtime);
    const char *cgroup = json_string_value(json_object_get(info, "CgroupVersion"));
    bool gvisor;

    if (cfg_runtime_is_default(p)) {
        return 0; /* the engine default; config validation keeps pids with the cgroup */
    }
    if (!json_is_object(rt)) {
        return err_set(reterr, -ENOENT,
                       "profile '%s': the engine has no runtime '%s'; register it (daemon.json "
                       "\"runtimes\") or change the profile's 'runtime'",
                       p->name, p->runtime);
    }
    gvisor = runtime_is_gvisor(p->runtime, rt);
    if (gvisor && !cfg_pids_by_runtime(p)) {
        return err_set(reterr, -ENOTSUP,
                       "profile '%s': runtime %s cannot enforce 'pids' (PidsLimit) on this cgroup "
                       "v%s host; set \"pids_enforced_by\": \"runtime\" to accept gVisor's own "
                       "limit",
                       p->name, p->runtime, cgroup != NULL ? cgroup : "?");
    }
    if (!gvisor && cfg_pids_by_runtime(p)) {
        return err_set(reterr, -ENOTSUP,
                       "profile '%s': 'pids_enforced_by' \"runtime\" needs gVisor (runsc), and "
                       "runtime '%s' is not; it would leave the processes uncapped",
                       p->name, p->runtime);
    }
    return 0;
}
