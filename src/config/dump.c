/* Rendering: the effective configuration as JSON (--print-config) and the option list
 * (--help); see config.h. Pure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config-internal.h"
#include "config.h"
#include "util/buf.h"
#include "util/macro.h"

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

    for (size_t i = 0; i < cfg_n_options; i++) {
        json_set_path(root, cfg_options[i].name,
                      OOM_CHECK(cfg_field_to_json((void *)c, &cfg_options[i])));
    }
    for (size_t i = 0; i < c->n_profiles; i++) {
        struct cfg_profile *p = &c->profiles[i];
        json_t *po = OOM_CHECK(json_object());

        for (size_t j = 0; j < cfg_n_profile_options; j++) {
            json_set_path(po, cfg_profile_options[j].name,
                          OOM_CHECK(cfg_field_to_json(p, &cfg_profile_options[j])));
        }
        if (p->command != NULL) {
            json_t *cmd = OOM_CHECK(json_array());

            for (char **a = p->command; *a != NULL; a++) {
                (void)json_array_append_new(cmd, OOM_CHECK(json_string(*a)));
            }
            json_set_path(po, "command", cmd);
        }
        if (p->egress_json != NULL) {
            json_set_path(po, "egress", OOM_CHECK(json_loads(p->egress_json, 0, NULL)));
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
        if (t->n_e2b_keys > 0) {
            json_t *keys = OOM_CHECK(json_array());

            for (size_t k = 0; k < t->n_e2b_keys; k++) {
                for (size_t j = 0; j < CFG_SHA256_LEN; j++) {
                    (void)snprintf(hex + 2 * j, 3, "%02x", t->e2b_keys_sha256[k][j]);
                }
                (void)json_array_append_new(keys, OOM_CHECK(json_string(hex)));
            }
            (void)json_object_set_new(o, "e2b_keys_sha256", keys);
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

    for (size_t i = 0; i < cfg_n_options; i++) {
        const struct cfg_option *o = &cfg_options[i];
        char flag[96], env[96];
        size_t k;

        for (k = 0; o->name[k] != '\0' && k + 1 < sizeof(flag); k++) {
            flag[k] = (char)(o->name[k] == '.' || o->name[k] == '_' ? '-' : o->name[k]);
        }
        flag[k] = '\0';
        cfg_env_name(o->name, env, sizeof(env));
        if (buf_printf(&b, "  --%-24s SANDPOOL_%-24s %s (default '%s'%s)\n", flag, env, o->help,
                       o->def, (o->flags & CFG_RELOADABLE) ? "; SIGHUP applies it" : "") < 0) {
            oom();
        }
    }
    return buf_detach(&b, NULL);
}
