/* Engine differences; see quirks.h. Every Podman rule here was seen on Podman 4.3.1 (Debian 12)
 * through its compat socket: the create answer, the inspect of the container it made, and the
 * events stream. */
#include "quirks.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "docker/policy.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/parse.h"

#define OPTS_MAX 512 /* a tmpfs option string; ours are under 100 bytes */

static const struct docker_quirks quirks_docker = {
    .engine = DOCKER_ENGINE_DOCKER,
    .name = "docker",
    .oom_event = true,
    .runtime_selectable = true,
    .tmpfs_owner_option = true,
    .readonly_adds_tmpfs = false,
    .capdrop_expanded = false,
    .nproc_capped_by_pid_max = false,
    .stdin_survives_detach = true,
    .seccomp_inline = true,
};

static const struct docker_quirks quirks_podman = {
    .engine = DOCKER_ENGINE_PODMAN,
    .name = "podman",
    .oom_event = false,
    .runtime_selectable = false,
    .tmpfs_owner_option = false,
    .readonly_adds_tmpfs = true,
    .capdrop_expanded = true,
    .nproc_capped_by_pid_max = true,
    .stdin_survives_detach = false,
    .seccomp_inline = false,
};

/* Where Podman's own writable tmpfs are accepted in an inspect answer: /dev and /dev/shm (every
 * container has them), and /tmp, which our policy then finds without its own options and refuses.
 * Not /run and /var/tmp (read-only-tmpfs.md): there only our read-only cover is accepted, so a
 * container without it (made by hand, or by a daemon older than the cover) fails the check. */
static const char *const podman_rw_tmpfs[] = {"/dev", "/dev/shm", "/tmp"};
/* Of those, the ones no profile mounts: we mount them read-only ourselves, so that Podman leaves
 * them be and the root stays read-only everywhere but our scratch mounts (Podman 4.3 has no
 * read_only_tmpfs switch). Tiny and empty: writes fail with EROFS. */
static const char *const podman_ro_paths[] = {"/run", "/var/tmp"};
/* As sent, and as inspect shows it (without the create-time notmpcopyup, and with "rprivate"
 * added, which normalize_tmpfs() drops). */
#define PODMAN_RO_SHOWN "ro,nosuid,nodev,noexec,size=64k"
#define PODMAN_RO_OPTS  PODMAN_RO_SHOWN ",notmpcopyup"

const struct docker_quirks *
docker_quirks_of(enum docker_engine e)
{
    return e == DOCKER_ENGINE_PODMAN ? &quirks_podman : &quirks_docker;
}

/* Podman 4.3's default capability set (containers.conf default_capabilities), which it lists as
 * CapDrop for "ALL". */
/* Podman's default_capabilities, pinned to this list in deploy/podman/containers.conf. */
static const char *const podman_default_caps[] = {
    "AUDIT_WRITE",      "CHOWN",   "DAC_OVERRIDE", "FOWNER", "FSETID",  "KILL",   "MKNOD",
    "NET_BIND_SERVICE", "NET_RAW", "SETFCAP",      "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
};

int
docker_quirks_check_profile(const struct docker_quirks *q, const struct cfg_profile *p,
                            unsigned long pid_max, struct err *reterr)
{
    if (!q->runtime_selectable && !cfg_runtime_is_default(p)) {
        return err_set(reterr, -ENOTSUP,
                       "profile '%s': %s ignores the container's runtime, so '%s' cannot be "
                       "chosen (it would run under the engine's default); use Docker for it",
                       p->name, q->name, p->runtime);
    }
    if (q->nproc_capped_by_pid_max && pid_max > 0 && p->nproc > pid_max) {
        return err_set(reterr, -ENOTSUP,
                       "profile '%s': 'nproc' %u is above what %s allows a container here "
                       "(the kernel's pid_max, %lu); set 'nproc' to at most %lu",
                       p->name, p->nproc, q->name, pid_max, pid_max);
    }
    return 0;
}

unsigned long
docker_quirks_host_pid_max(void)
{
    FILE *f = fopen("/proc/sys/kernel/pid_max", "re");
    char line[32] = "";
    uint64_t v = 0;

    if (f == NULL) {
        return 0;
    }
    if (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (parse_u64(line, &v) < 0) {
            v = 0;
        }
    }
    (void)fclose(f);
    return (unsigned long)v;
}

/* ---- tmpfs option lists -----------------------------------------------------------------------
 */

/* Calls cb for each comma-separated item of opts (empty items skipped); stops at a non-zero
 * return and passes it on. */
static int
opts_each(const char *opts, int (*cb)(const char *item, size_t n, void *userdata), void *userdata)
{
    const char *p = opts;

    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        int r = n > 0 ? cb(p, n, userdata) : 0;

        if (r != 0) {
            return r;
        }
        p += n;
        if (*p == ',') {
            p++;
        }
    }
    return 0;
}

static bool
item_is(const char *item, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(item, lit, n) == 0;
}

static int
buf_add_item(struct buf *b, const char *item, size_t n)
{
    if ((b->len > 0 && buf_append(b, ",", 1) < 0) || buf_append(b, item, n) < 0) {
        return -EMSGSIZE;
    }
    return 0;
}

struct owner_rewrite {
    struct buf out;
    const char *uid, *gid; /* the container's User, split */
    size_t uid_len, gid_len;
    bool owner;    /* saw uid= or gid= */
    bool owner_ok; /* every uid=/gid= names the container's User */
};

static int
on_create_item(const char *item, size_t n, void *userdata)
{
    struct owner_rewrite *w = userdata;

    if (n > 4 && memcmp(item, "uid=", 4) == 0) {
        w->owner = true;
        w->owner_ok &= n - 4 == w->uid_len && memcmp(item + 4, w->uid, w->uid_len) == 0;
        return 0;
    }
    if (n > 4 && memcmp(item, "gid=", 4) == 0) {
        w->owner = true;
        w->owner_ok &= n - 4 == w->gid_len && memcmp(item + 4, w->gid, w->gid_len) == 0;
        return 0;
    }
    return buf_add_item(&w->out, item, n);
}

/* Podman: uid=/gid= (only the container's own user can be expressed) become "U"; the image's
 * files are never copied into the tmpfs. */
static int
adapt_tmpfs_value(const char *user, const char *path, json_t *value, struct err *reterr)
{
    const char *colon = strchr(user, ':');
    struct owner_rewrite w = {
        .out = BUF_INIT(OPTS_MAX),
        .uid = user,
        .uid_len = colon != NULL ? (size_t)(colon - user) : strlen(user),
        .gid = colon != NULL ? colon + 1 : "",
        .gid_len = colon != NULL ? strlen(colon + 1) : 0,
        .owner_ok = true,
    };
    int r = opts_each(json_string_value(value), on_create_item, &w);

    if (r == 0 && w.owner && (!w.owner_ok || w.gid_len == 0)) {
        r = err_set(reterr, -EOPNOTSUPP,
                    "podman cannot give tmpfs %s an owner other than the container's user "
                    "'%s' (it needs \"uid:gid\")",
                    path, user);
    } else if (r == 0 &&
               ((w.owner && buf_add_item(&w.out, "U", 1) < 0) ||
                buf_add_item(&w.out, "notmpcopyup", 11) < 0 || buf_append(&w.out, "", 1) < 0)) {
        r = -EMSGSIZE;
    }
    if (r == -EMSGSIZE) {
        r = err_set(reterr, -EOPNOTSUPP, "tmpfs %s: options too long", path);
    }
    if (r == 0) {
        (void)json_string_set(value, w.out.buf);
    }
    buf_done(&w.out);
    return r;
}

/* Podman: a seccomp profile by content becomes the file the body's label names. */
static int
adapt_seccomp(const struct docker_quirks *q, json_t *body, struct err *reterr)
{
    json_t *opts = json_object_get(json_object_get(body, "HostConfig"), "SecurityOpt");
    const char *file =
        json_string_value(json_object_get(json_object_get(body, "Labels"), DOCKER_LABEL_SECCOMP));
    struct buf b = BUF_INIT(SIZE_MAX);
    size_t i;
    json_t *v;

    json_array_foreach (opts, i, v) {
        const char *s = json_string_value(v);

        if (s == NULL || !str_startswith(s, "seccomp={")) {
            continue;
        }
        if (file == NULL || file[0] != '/') {
            buf_done(&b);
            return err_set(reterr, -EOPNOTSUPP,
                           "%s takes a seccomp profile only as a file it opens itself, and the "
                           "create body names none (label %s)",
                           q->name, DOCKER_LABEL_SECCOMP);
        }
        buf_reset(&b);
        if (buf_printf(&b, "seccomp=%s", file) < 0) {
            oom();
        }
        (void)json_array_set_new(opts, i, OOM_CHECK(json_string(b.buf)));
    }
    buf_done(&b);
    return 0;
}

int
docker_quirks_adapt_create(const struct docker_quirks *q, json_t *body, struct err *reterr)
{
    json_t *tmpfs = json_object_get(json_object_get(body, "HostConfig"), "Tmpfs");
    const char *user = json_string_value(json_object_get(body, "User"));
    const char *path;
    json_t *value;

    if (!q->seccomp_inline && adapt_seccomp(q, body, reterr) < 0) {
        return -EOPNOTSUPP;
    }
    if (q->tmpfs_owner_option) {
        return 0;
    }
    json_object_foreach (tmpfs, path, value) {
        if (json_is_string(value) &&
            adapt_tmpfs_value(user != NULL ? user : "", path, value, reterr) < 0) {
            return -EOPNOTSUPP;
        }
    }
    for (size_t i = 0; json_is_object(tmpfs) && i < ELEMENTSOF(podman_ro_paths); i++) {
        if (json_object_get(tmpfs, podman_ro_paths[i]) == NULL) {
            (void)json_object_set_new(tmpfs, podman_ro_paths[i],
                                      OOM_CHECK(json_string(PODMAN_RO_OPTS)));
        }
    }
    return 0;
}

/* ---- inspect ------------------------------------------------------------------------------------
 */

struct inspect_opts {
    struct buf out;   /* the options without Podman's own "rprivate" */
    bool only_podman; /* every item is one Podman puts on its own read-only-tmpfs mounts */
    unsigned must;    /* bits of rw, nosuid, nodev seen */
};

static int
on_inspect_item(const char *item, size_t n, void *userdata)
{
    static const char *const podman_own[] = {"rw", "nosuid", "nodev", "noexec", "tmpcopyup"};
    struct inspect_opts *o = userdata;
    bool known = false;

    if (item_is(item, n, "rprivate")) {
        return 0;
    }
    for (size_t i = 0; i < ELEMENTSOF(podman_own); i++) {
        if (item_is(item, n, podman_own[i])) {
            known = true;
            o->must |= i < 3 ? 1u << i : 0u;
        }
    }
    o->only_podman &= known;
    return buf_add_item(&o->out, item, n);
}

/* True when path is one of list[n]. */
static bool
path_in(const char *path, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(path, list[i]) == 0) {
            return true;
        }
    }
    return false;
}

static void
normalize_tmpfs(json_t *tmpfs)
{
    const char *path;
    json_t *value;
    void *tmp;

    json_object_foreach_safe (tmpfs, tmp, path, value) {
        struct inspect_opts o = {.out = BUF_INIT(OPTS_MAX), .only_podman = true};

        if (!json_is_string(value) ||
            opts_each(json_string_value(value), on_inspect_item, &o) < 0 ||
            buf_append(&o.out, "", 1) < 0) {
            buf_done(&o.out); /* too long to be ours or Podman's: left for the policy to refuse */
            continue;
        }
        if ((path_in(path, podman_rw_tmpfs, ELEMENTSOF(podman_rw_tmpfs)) && o.only_podman &&
             o.must == 7u) ||
            (path_in(path, podman_ro_paths, ELEMENTSOF(podman_ro_paths)) &&
             (strcmp(o.out.buf, PODMAN_RO_SHOWN) == 0 || strcmp(o.out.buf, PODMAN_RO_OPTS) == 0))) {
            (void)json_object_del(tmpfs, path); /* Podman's own, or our read-only cover of one */
        } else {
            (void)json_string_set(value, o.out.buf);
        }
        buf_done(&o.out);
    }
}

static void
normalize_ulimits(json_t *ulimits)
{
    size_t i;
    json_t *u;

    json_array_foreach (ulimits, i, u) {
        const char *name = json_string_value(json_object_get(u, "Name"));
        char lower[32];
        size_t k;

        if (name == NULL || !str_startswith(name, "RLIMIT_") || strlen(name + 7) >= sizeof(lower)) {
            continue;
        }
        for (k = 0; name[7 + k] != '\0'; k++) {
            lower[k] = (char)tolower((unsigned char)name[7 + k]);
        }
        lower[k] = '\0';
        (void)json_object_set_new(u, "Name", OOM_CHECK(json_string(lower)));
    }
}

/* Podman shows a seccomp profile by the file it opened ("seccomp=/path"): written the way the
 * policy recognises a file (DOCKER_SECCOMP_FILE_OPT), not as Docker's "seccomp=<content>". */
static void
normalize_seccomp(json_t *hc)
{
    json_t *opts = json_object_get(hc, "SecurityOpt");
    struct buf b = BUF_INIT(SIZE_MAX);
    size_t i;
    json_t *v;

    json_array_foreach (opts, i, v) {
        const char *s = json_string_value(v);

        if (s == NULL || !str_startswith(s, "seccomp=/")) {
            continue;
        }
        buf_reset(&b);
        if (buf_printf(&b, "%s%s", DOCKER_SECCOMP_FILE_OPT, s + strlen("seccomp=")) < 0) {
            oom();
        }
        (void)json_array_set_new(opts, i, OOM_CHECK(json_string(b.buf)));
    }
    buf_done(&b);
}

/* Podman lists "ALL" as its default capability set, one by one. */
static void
normalize_capdrop(json_t *hc)
{
    json_t *drop = json_object_get(hc, "CapDrop");

    for (size_t i = 0; i < ELEMENTSOF(podman_default_caps); i++) {
        bool found = false;
        size_t k;
        json_t *v;

        json_array_foreach (drop, k, v) {
            const char *c = json_string_value(v);

            found |= c != NULL &&
                     (strcmp(c, podman_default_caps[i]) == 0 ||
                      (str_startswith(c, "CAP_") && strcmp(c + 4, podman_default_caps[i]) == 0));
        }
        if (!found) {
            return;
        }
    }
    (void)json_object_set_new(hc, "CapDrop", OOM_CHECK(json_pack("[s]", "ALL")));
}

/* Podman reports bind mounts in HostConfig.Binds ("src:dst:ro,rprivate,rbind") and no
 * HostConfig.Mounts: into Docker's shape, the one the create body sent ({Type, Source, Target,
 * ReadOnly}), so that the policy judges both alike. A bind it cannot read stays in Binds (drift).
 */
static void
normalize_binds(json_t *hc)
{
    json_t *binds = json_object_get(hc, "Binds"), *mounts, *keep;
    size_t i;
    json_t *v;

    if (json_array_size(binds) == 0 || json_array_size(json_object_get(hc, "Mounts")) > 0) {
        return;
    }
    mounts = OOM_CHECK(json_array());
    keep = OOM_CHECK(json_array());
    json_array_foreach (binds, i, v) {
        const char *b = json_string_value(v);
        const char *c1 = b != NULL ? strchr(b, ':') : NULL;
        const char *c2 = c1 != NULL ? strchr(c1 + 1, ':') : NULL;
        bool ro = false;

        if (c1 == NULL || c1 == b || c1[1] != '/') {
            (void)json_array_append(keep, v);
            continue;
        }
        for (const char *o = c2 != NULL ? c2 + 1 : NULL; o != NULL && *o != '\0';) {
            size_t n = strcspn(o, ",");

            ro |= n == 2 && strncmp(o, "ro", 2) == 0;
            o += n + (o[n] == ',');
        }
        (void)json_array_append_new(
            mounts, OOM_CHECK(json_pack("{s:s, s:s%, s:s%, s:b}", "Type", "bind", "Source", b,
                                        (size_t)(c1 - b), "Target", c1 + 1,
                                        c2 != NULL ? (size_t)(c2 - c1 - 1) : strlen(c1 + 1),
                                        "ReadOnly", ro)));
    }
    (void)json_object_set_new(hc, "Mounts", mounts);
    (void)json_object_set_new(hc, "Binds", keep);
}

void
docker_quirks_normalize_inspect(const struct docker_quirks *q, json_t *inspect)
{
    json_t *hc = json_object_get(inspect, "HostConfig");
    json_t *cfg = json_object_get(inspect, "Config");
    const char *runtime = json_string_value(json_object_get(hc, "Runtime"));
    const char *mode = json_string_value(json_object_get(hc, "NetworkMode"));

    if (q->engine != DOCKER_ENGINE_PODMAN || !json_is_object(hc)) {
        return;
    }
    normalize_ulimits(json_object_get(hc, "Ulimits"));
    if (!q->seccomp_inline) {
        normalize_seccomp(hc);
    }
    if (q->capdrop_expanded) {
        normalize_capdrop(hc);
    }
    if (runtime != NULL && strcmp(runtime, "oci") == 0) {
        (void)json_object_del(hc, "Runtime");
    }
    if (q->readonly_adds_tmpfs) {
        normalize_tmpfs(json_object_get(hc, "Tmpfs"));
    }
    normalize_binds(hc);
    /* Podman has no NetworkDisabled of its own (null in inspect): NetworkMode "none", which the
     * policy checks as well, is what takes the network away there. */
    if (json_object_get(cfg, "NetworkDisabled") == NULL ||
        json_is_null(json_object_get(cfg, "NetworkDisabled"))) {
        if (json_is_object(cfg) && mode != NULL && strcmp(mode, "none") == 0) {
            (void)json_object_set_new(cfg, "NetworkDisabled", json_true());
        }
    }
}

/* ---- events ------------------------------------------------------------------------------------
 */

void
docker_quirks_normalize_event(const struct docker_quirks *q, json_t *event)
{
    static const char *const renames[][2] = {{"remove", "destroy"}, {"exec_died", "exec_die"}};

    if (q->engine != DOCKER_ENGINE_PODMAN || !json_is_object(event)) {
        return;
    }
    for (const char *const *key = (const char *const[]){"Action", "status", NULL}; *key; key++) {
        const char *v = json_string_value(json_object_get(event, *key));

        for (size_t i = 0; v != NULL && i < ELEMENTSOF(renames); i++) {
            if (strcmp(v, renames[i][0]) == 0) {
                (void)json_object_set_new(event, *key, OOM_CHECK(json_string(renames[i][1])));
                break;
            }
        }
    }
}
