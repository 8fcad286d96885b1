/* Loading a configuration: the JSON file (strict: unknown keys, wrong types and duplicate keys
 * are errors), its profiles, SANDPOOL_* variables and command-line flags; see config.h.
 *
 * Nothing here touches the event loop; cfg_load_file() does blocking file I/O and is only called
 * at start-up or on reload (docs/internals/style.md §6.1). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config-internal.h"
#include "config.h"
#include "egress/rules.h"
#include "util/macro.h"
#include "util/parse.h"

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
load_egress(struct cfg_profile *p, json_t *v, struct err *reterr)
{
    char where[96];
    struct egress_rules r;

    (void)snprintf(where, sizeof(where), "profiles.%s.egress", p->name);
    if (egress_rules_from_json(v, where, &r, reterr) < 0) {
        return -EINVAL;
    }
    p->egress = xmalloc(sizeof(*p->egress));
    *p->egress = r;
    p->egress_json = OOM_CHECK(json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS));
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
    p = cfg_profile_add(c, name);
    json_object_foreach (obj, key, v) {
        const struct cfg_option *o = NULL;

        if (strcmp(key, "command") == 0 || strcmp(key, "egress") == 0) {
            r = key[0] == 'c' ? load_command(p, v, reterr) : load_egress(p, v, reterr);
            if (r < 0) {
                return r;
            }
            continue;
        }
        for (size_t i = 0; i < cfg_n_profile_options; i++) {
            if (strcmp(cfg_profile_options[i].name, key) == 0) {
                o = &cfg_profile_options[i];
            }
        }
        (void)snprintf(where, sizeof(where), "profiles.%s.%s", name, key);
        if (o == NULL) {
            return err_set(reterr, -EINVAL, "unknown key '%.100s'", where);
        }
        r = cfg_set_from_json(p, o, v, where, reterr);
        if (r < 0) {
            return r;
        }
    }
    return 0;
}

int
cfg_load_profiles(struct cfg *c, json_t *obj, struct err *reterr)
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
    cfg_profiles_clear(c);
    json_object_foreach (obj, name, v) {
        r = load_profile(c, name, v, reterr);
        if (r < 0) {
            return r;
        }
    }
    return 0;
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
            r = cfg_load_profiles(c, v, reterr);
        } else if (prefix[0] == '\0' && strcmp(key, "tenants") == 0) {
            r = cfg_load_tenants(c, v, reterr);
        } else if ((o = cfg_option_find(path)) != NULL) {
            r = cfg_set_from_json(c, o, v, path, reterr);
        } else if (cfg_is_section(path)) {
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

/* Parses len bytes of what (named in messages) as JSON of at most max bytes, duplicate keys
 * refused: 0 with a new reference in *ret, -EMSGSIZE or -EINVAL. */
int
cfg_parse_document(const char *what, const char *data, size_t len, size_t max, json_t **ret,
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

    r = cfg_parse_document("configuration", data, len, CFG_MAX_FILE_BYTES, &root, reterr);
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
int
cfg_read_file(const char *path, struct buf *b, struct err *reterr)
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
    int r = cfg_read_file(path, &b, reterr);

    if (r == 0) {
        r = cfg_load_json(c, b.buf, b.len, reterr);
    }
    buf_done(&b);
    return r;
}

int
cfg_set(struct cfg *c, const char *name, const char *value, struct err *reterr)
{
    for (size_t i = 0; i < cfg_n_options; i++) {
        if (cfg_flag_matches(cfg_options[i].name, name)) {
            return cfg_set_from_string(c, &cfg_options[i], value, reterr);
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
        for (size_t i = 0; !found && i < cfg_n_options; i++) {
            char want[96];

            cfg_env_name(cfg_options[i].name, want, sizeof(want));
            if (strcmp(want, name) == 0) {
                r = cfg_set_from_string(c, &cfg_options[i], eq + 1, reterr);
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
