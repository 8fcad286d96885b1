/* Reload's pure half: what differs between two configurations, keeping what needs a restart,
 * and the exchange of the reloadable rows; see config.h ("reload") for the order and the
 * lifetimes. The table rows' CFG_RELOADABLE flag decides alone what may change. */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config-internal.h"
#include "config.h"
#include "egress/rules.h"
#include "util/macro.h"

static void add_change(struct cfg_diff *d, bool reloadable, const char *name, const char *fmt, ...)
    PRINTF_LIKE(4, 5);

static void
add_change(struct cfg_diff *d, bool reloadable, const char *name, const char *fmt, ...)
{
    struct cfg_change *c;
    va_list ap;

    d->changes = xrealloc(d->changes, (d->n + 1) * sizeof(*d->changes));
    c = &d->changes[d->n++];
    memset(c, 0, sizeof(*c));
    c->reloadable = reloadable;
    (void)snprintf(c->name, sizeof(c->name), "%s", name);
    va_start(ap, fmt);
    (void)vsnprintf(c->detail, sizeof(c->detail), fmt, ap);
    va_end(ap);
}

/* The rows of tab that differ between a and b; prefix goes before each row's name. */
static void
diff_rows(struct cfg_diff *d, const char *prefix, const void *a, const void *b,
          const struct cfg_option *tab, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct cfg_option *o = &tab[i];
        char name[160], from[96], to[96];

        if (cfg_field_equal(a, b, o)) {
            continue;
        }
        (void)snprintf(name, sizeof(name), "%s%s", prefix, o->name);
        if (o->flags & CFG_SECRET) {
            add_change(d, o->flags & CFG_RELOADABLE, name, "changed");
            continue;
        }
        cfg_field_format(a, o, from, sizeof(from));
        cfg_field_format(b, o, to, sizeof(to));
        add_change(d, o->flags & CFG_RELOADABLE, name, "%s -> %s", from, to);
    }
}

static void
diff_profiles(struct cfg_diff *d, const struct cfg *a, const struct cfg *b)
{
    char name[160];

    for (size_t i = 0; i < a->n_profiles; i++) {
        const struct cfg_profile *pa = &a->profiles[i];
        const struct cfg_profile *pb = cfg_profile_find(b, pa->name);

        (void)snprintf(name, sizeof(name), "profiles.%s", pa->name);
        if (pb == NULL) {
            add_change(d, false, name, "removed");
            continue;
        }
        if (!cfg_strv_equal(pa->command, pb->command)) {
            (void)snprintf(name, sizeof(name), "profiles.%s.command", pa->name);
            add_change(d, false, name, "changed");
        }
        if ((pa->egress_json == NULL) != (pb->egress_json == NULL) ||
            (pa->egress_json != NULL && strcmp(pa->egress_json, pb->egress_json) != 0)) {
            (void)snprintf(name, sizeof(name), "profiles.%s.egress", pa->name);
            add_change(d, false, name, "changed");
        }
        (void)snprintf(name, sizeof(name), "profiles.%s.", pa->name);
        diff_rows(d, name, pa, pb, cfg_profile_options, cfg_n_profile_options);
    }
    for (size_t i = 0; i < b->n_profiles; i++) {
        if (cfg_profile_find(a, b->profiles[i].name) == NULL) {
            (void)snprintf(name, sizeof(name), "profiles.%s", b->profiles[i].name);
            add_change(d, false, name, "added");
        }
    }
}

/* What differs in one tenant, as "token_sha256, max_sessions changed" into out[n]; "" if none. */
static void
tenant_changes(const struct cfg_tenant *a, const struct cfg_tenant *b, char *out, size_t n)
{
    const char *parts[6];
    size_t k = 0, used = 0;
    bool reserved = !cfg_strv_equal(a->reserved_profiles, b->reserved_profiles);

    for (size_t i = 0; !reserved && a->reserved_profiles != NULL && a->reserved_profiles[i]; i++) {
        reserved = a->reserved[i] != b->reserved[i];
    }
    if (memcmp(a->token_sha256, b->token_sha256, CFG_SHA256_LEN) != 0) {
        parts[k++] = "token_sha256";
    }
    if (a->max_sessions != b->max_sessions) {
        parts[k++] = "max_sessions";
    }
    if (a->max_running != b->max_running) {
        parts[k++] = "max_running";
    }
    if (!cfg_strv_equal(a->profiles, b->profiles)) {
        parts[k++] = "profiles";
    }
    if (reserved) {
        parts[k++] = "reserved";
    }
    if (a->n_e2b_keys != b->n_e2b_keys ||
        (a->n_e2b_keys > 0 &&
         memcmp(a->e2b_keys_sha256, b->e2b_keys_sha256, a->n_e2b_keys * CFG_SHA256_LEN) != 0)) {
        parts[k++] = "e2b_keys_sha256";
    }
    out[0] = '\0';
    for (size_t i = 0; i < k; i++) {
        int w = snprintf(out + used, n - used, "%s%s%s", i ? ", " : "", parts[i],
                         i + 1 == k ? " changed" : "");

        used = w < 0 ? used : MIN(used + (size_t)w, n - 1);
    }
}

static void
diff_tenants(struct cfg_diff *d, const struct cfg *a, const struct cfg *b)
{
    char name[160], what[128];

    for (size_t i = 0; i < a->n_tenants; i++) {
        const struct cfg_tenant *tb = cfg_tenant_find(b, a->tenants[i].id);

        (void)snprintf(name, sizeof(name), "tenants.%s", a->tenants[i].id);
        if (tb == NULL) {
            add_change(d, true, name, "removed");
            continue;
        }
        tenant_changes(&a->tenants[i], tb, what, sizeof(what));
        if (what[0] != '\0') {
            add_change(d, true, name, "%s", what);
        }
    }
    for (size_t i = 0; i < b->n_tenants; i++) {
        if (cfg_tenant_find(a, b->tenants[i].id) == NULL) {
            (void)snprintf(name, sizeof(name), "tenants.%s", b->tenants[i].id);
            add_change(d, true, name, "added");
        }
    }
}

void
cfg_diff(const struct cfg *a, const struct cfg *b, struct cfg_diff *ret)
{
    struct cfg_diff d = {0};
    bool same_path = strcmp(a->sandbox_seccomp_profile, b->sandbox_seccomp_profile) == 0;
    bool content_differs = (a->seccomp == NULL) != (b->seccomp == NULL) ||
                           (a->seccomp != NULL && strcmp(a->seccomp, b->seccomp) != 0);

    diff_rows(&d, "", a, b, cfg_options, cfg_n_options);
    if (same_path && content_differs) {
        add_change(&d, false, "sandbox.seccomp_profile", "the file's content changed");
    }
    diff_profiles(&d, a, b);
    diff_tenants(&d, a, b);
    *ret = d;
}

void
cfg_diff_done(struct cfg_diff *d)
{
    free(d->changes);
    d->changes = NULL;
    d->n = 0;
}

/* A copy of live's profile lp whose reloadable rows come from np when there is one. Its seccomp
 * pointers are set by the caller. */
static void
profile_keep(struct cfg_profile *dst, const struct cfg_profile *lp, const struct cfg_profile *np)
{
    memset(dst, 0, sizeof(*dst));
    dst->name = xstrdup(lp->name);
    dst->command = cfg_strv_dup(lp->command);
    if (lp->egress != NULL) {
        dst->egress = xmalloc(sizeof(*dst->egress));
        egress_rules_copy(dst->egress, lp->egress);
        dst->egress_json = xstrdup(lp->egress_json);
    }
    for (size_t k = 0; k < cfg_n_profile_options; k++) {
        const struct cfg_option *o = &cfg_profile_options[k];

        cfg_field_copy(dst, np != NULL && (o->flags & CFG_RELOADABLE) ? np : lp, o);
    }
}

void
cfg_reload_keep(struct cfg *next, const struct cfg *live)
{
    struct cfg_profile *kept = xcalloc(live->n_profiles, sizeof(*kept));

    for (size_t i = 0; i < cfg_n_options; i++) {
        if (!(cfg_options[i].flags & CFG_RELOADABLE)) {
            cfg_field_copy(next, live, &cfg_options[i]);
        }
    }
    free(next->seccomp);
    next->seccomp = live->seccomp != NULL ? xstrdup(live->seccomp) : NULL;
    for (size_t i = 0; i < live->n_profiles; i++) {
        profile_keep(&kept[i], &live->profiles[i], cfg_profile_find(next, live->profiles[i].name));
        kept[i].seccomp = next->seccomp;
        kept[i].seccomp_path = next->seccomp != NULL ? next->sandbox_seccomp_profile : NULL;
        kept[i].egress_dir = next->egress_node_dir; /* not reloadable: live's value */
        kept[i].egress_port = next->egress_port;
    }
    cfg_profiles_clear(next);
    next->profiles = kept;
    next->n_profiles = live->n_profiles;
}

void
cfg_reload_commit(struct cfg *live, struct cfg *next)
{
    struct cfg_tenant *t = live->tenants;
    size_t n = live->n_tenants;

    assert(live->n_profiles == next->n_profiles);
    for (size_t i = 0; i < cfg_n_options; i++) {
        if (cfg_options[i].flags & CFG_RELOADABLE) {
            cfg_field_swap(live, next, &cfg_options[i]);
        }
    }
    for (size_t i = 0; i < live->n_profiles; i++) {
        assert(strcmp(live->profiles[i].name, next->profiles[i].name) == 0);
        for (size_t k = 0; k < cfg_n_profile_options; k++) {
            if (cfg_profile_options[k].flags & CFG_RELOADABLE) {
                cfg_field_swap(&live->profiles[i], &next->profiles[i], &cfg_profile_options[k]);
            }
        }
    }
    live->tenants = next->tenants;
    live->n_tenants = next->n_tenants;
    next->tenants = t;
    next->n_tenants = n;
}
