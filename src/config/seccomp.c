/* The sandbox seccomp profile: read once at start (blocking file I/O, docs/internals/style.md
 * §6.1), checked and kept compact for every create body; see config.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config-internal.h"
#include "config.h"
#include "util/macro.h"

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

    r = cfg_parse_document("seccomp profile", data, len, CFG_SECCOMP_MAX_BYTES, &root, reterr);
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
    r = cfg_read_file(path, &b, &e);
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
