/* The struct cfg object: its life (new, free), its profiles and the arrays of strings they hold;
 * see config.h. The rows live in options.c, the loaders in load.c and tenants.c, the checks in
 * validate.c, the sandbox seccomp profile in seccomp.c, reload's diff and swap in reload.c,
 * --print-config and --help in dump.c. Pure: no I/O, no event loop. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "config-internal.h"
#include "egress/rules.h"
#include "util/macro.h"

struct cfg *
cfg_new(void)
{
    struct cfg *c = xcalloc(1, sizeof(*c));

    cfg_apply_defaults(c, cfg_options, cfg_n_options);
    (void)cfg_profile_add(c, "python");
    return c;
}

struct cfg *
cfg_free(struct cfg *c)
{
    if (c == NULL) {
        return NULL;
    }
    cfg_free_strings(c, cfg_options, cfg_n_options);
    cfg_profiles_clear(c);
    cfg_tenants_clear(c);
    free(c->seccomp);
    free(c->egress_node_dir);
    free(c);
    return NULL;
}

void
cfg_strv_free(char **v)
{
    for (char **a = v; a != NULL && *a != NULL; a++) {
        free(*a);
    }
    free(v);
}

void
cfg_profile_done(struct cfg_profile *p)
{
    cfg_free_strings(p, cfg_profile_options, cfg_n_profile_options);
    free(p->name);
    cfg_strv_free(p->command);
    if (p->egress != NULL) {
        egress_rules_done(p->egress);
        free(p->egress);
    }
    free(p->egress_json);
    memset(p, 0, sizeof(*p));
}

void
cfg_profiles_clear(struct cfg *c)
{
    for (size_t i = 0; i < c->n_profiles; i++) {
        cfg_profile_done(&c->profiles[i]);
    }
    free(c->profiles);
    c->profiles = NULL;
    c->n_profiles = 0;
}

void
cfg_tenants_clear(struct cfg *c)
{
    for (size_t i = 0; i < c->n_tenants; i++) {
        free(c->tenants[i].id);
        cfg_strv_free(c->tenants[i].profiles);
        cfg_strv_free(c->tenants[i].reserved_profiles);
        free(c->tenants[i].reserved);
        free(c->tenants[i].e2b_keys_sha256);
    }
    free(c->tenants);
    c->tenants = NULL;
    c->n_tenants = 0;
}

char **
cfg_strv_dup(char *const *v)
{
    size_t n = 0;
    char **d;

    if (v == NULL) {
        return NULL;
    }
    while (v[n] != NULL) {
        n++;
    }
    d = xcalloc(n + 1, sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        d[i] = xstrdup(v[i]);
    }
    return d;
}

bool
cfg_strv_equal(char *const *a, char *const *b)
{
    size_t i = 0;

    if (a == NULL || b == NULL) {
        return a == b;
    }
    for (; a[i] != NULL && b[i] != NULL; i++) {
        if (strcmp(a[i], b[i]) != 0) {
            return false;
        }
    }
    return a[i] == b[i];
}

struct cfg_profile *
cfg_profile_add(struct cfg *c, const char *name)
{
    struct cfg_profile *p;

    c->profiles = xrealloc(c->profiles, (c->n_profiles + 1) * sizeof(*c->profiles));
    p = &c->profiles[c->n_profiles++];
    memset(p, 0, sizeof(*p));
    p->name = xstrdup(name);
    cfg_apply_defaults(p, cfg_profile_options, cfg_n_profile_options);
    return p;
}

const struct cfg_profile *
cfg_profile_find(const struct cfg *c, const char *name)
{
    for (size_t i = 0; i < c->n_profiles; i++) {
        if (strcmp(c->profiles[i].name, name) == 0) {
            return &c->profiles[i];
        }
    }
    return NULL;
}
