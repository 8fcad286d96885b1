/* The tenants of the configuration: loading the "tenants" array (strict: every key known, every
 * bound checked) and the lookups the daemon makes per request; see config.h. Pure. */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config-internal.h"
#include "config.h"
#include "util/macro.h"
#include "util/parse.h"

int
cfg_parse_sha256_hex(const char *hex, uint8_t out[CFG_SHA256_LEN])
{
    uint8_t tmp[CFG_SHA256_LEN];

    if (strlen(hex) != (size_t)2 * CFG_SHA256_LEN) {
        return -EINVAL;
    }
    for (size_t i = 0; i < (size_t)2 * CFG_SHA256_LEN; i++) {
        char ch = hex[i];
        unsigned v;

        if (ch >= '0' && ch <= '9') {
            v = (unsigned)(ch - '0');
        } else if (ch >= 'a' && ch <= 'f') {
            v = (unsigned)(ch - 'a' + 10);
        } else if (ch >= 'A' && ch <= 'F') {
            v = (unsigned)(ch - 'A' + 10);
        } else {
            return -EINVAL;
        }
        if (i % 2 == 0) {
            tmp[i / 2] = (uint8_t)(v << 4);
        } else {
            tmp[i / 2] |= (uint8_t)v;
        }
    }
    memcpy(out, tmp, sizeof(tmp));
    return 0;
}

/* Checks the lists of tenants[i]: the profiles it may use and its reservations. */
static int
check_tenant_lists(size_t i, json_t *profiles, json_t *reserved, struct err *reterr)
{
    const char *key;
    json_t *v;
    size_t k;

    if (profiles != NULL && (!json_is_array(profiles) || json_array_size(profiles) == 0 ||
                             json_array_size(profiles) > CFG_MAX_PROFILES)) {
        return err_set(reterr, -EINVAL,
                       "tenants[%zu]: 'profiles' must be a non-empty array of profile names", i);
    }
    json_array_foreach (profiles, k, v) {
        if (!json_is_string(v) || !str_is_name(json_string_value(v), 48)) {
            return err_set(reterr, -EINVAL, "tenants[%zu]: 'profiles[%zu]' must be a name", i, k);
        }
    }
    if (reserved != NULL &&
        (!json_is_object(reserved) || json_object_size(reserved) > CFG_MAX_PROFILES)) {
        return err_set(reterr, -EINVAL,
                       "tenants[%zu]: 'reserved' must be an object {\"<profile>\": <count>}", i);
    }
    json_object_foreach (reserved, key, v) {
        if (!str_is_name(key, 48) || !json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > 10000) {
            return err_set(reterr, -EINVAL,
                           "tenants[%zu]: 'reserved' maps profile names to counts of 0 to 10000",
                           i);
        }
    }
    return 0;
}

/* 'e2b_keys_sha256': several, so that keys can be rotated. */
static int
check_e2b_keys(size_t i, json_t *keys, struct err *reterr)
{
    uint8_t digest[CFG_SHA256_LEN];
    size_t k;
    json_t *v;

    if (keys == NULL) {
        return 0;
    }
    if (!json_is_array(keys) || json_array_size(keys) > CFG_MAX_E2B_KEYS) {
        return err_set(reterr, -EINVAL,
                       "tenants[%zu]: 'e2b_keys_sha256' must be an array of at most %d hashes", i,
                       CFG_MAX_E2B_KEYS);
    }
    json_array_foreach (keys, k, v) {
        if (!json_is_string(v) || cfg_parse_sha256_hex(json_string_value(v), digest) < 0) {
            return err_set(reterr, -EINVAL,
                           "tenants[%zu]: 'e2b_keys_sha256'[%zu] must be 64 hex digits", i, k);
        }
    }
    return 0;
}

/* Loads tenants[i] from t into c->tenants[i] (c->n_tenants is i: the ones before are loaded). */
static int
load_tenant(struct cfg *c, size_t i, json_t *t, struct err *reterr)
{
    struct cfg_tenant *ct = &c->tenants[i];
    const char *id = NULL, *hash = NULL, *key;
    json_int_t max_sessions = 0, max_running = 0;
    json_t *profiles = NULL, *reserved = NULL, *e2b_keys = NULL, *v;
    json_error_t jerr;
    size_t k;
    int r;

    if (json_unpack_ex(t, &jerr, JSON_STRICT, "{s:s, s:s, s?I, s?I, s?o, s?o, s?o}", "id", &id,
                       "token_sha256", &hash, "max_sessions", &max_sessions, "max_running",
                       &max_running, "profiles", &profiles, "reserved", &reserved,
                       "e2b_keys_sha256", &e2b_keys) < 0) {
        return err_set(reterr, -EINVAL, "tenants[%zu]: %s", i, jerr.text);
    }
    if (max_sessions < 0 || max_sessions > CFG_MAX_TENANT_LIMIT || max_running < 0 ||
        max_running > CFG_MAX_TENANT_LIMIT) {
        return err_set(reterr, -EINVAL,
                       "tenants[%zu]: 'max_sessions' and 'max_running' must be 0 (no limit) to %d",
                       i, CFG_MAX_TENANT_LIMIT);
    }
    r = check_tenant_lists(i, profiles, reserved, reterr);
    if (r < 0) {
        return r;
    }
    r = check_e2b_keys(i, e2b_keys, reterr);
    if (r < 0) {
        return r;
    }
    if (!str_is_name(id, 64)) {
        return err_set(reterr, -EINVAL,
                       "tenants[%zu]: 'id' must be 1-64 characters of [A-Za-z0-9._-]", i);
    }
    if (cfg_parse_sha256_hex(hash, ct->token_sha256) < 0) {
        return err_set(reterr, -EINVAL, "tenants[%zu]: 'token_sha256' must be 64 hex digits", i);
    }
    for (size_t j = 0; j < i; j++) {
        if (strcmp(c->tenants[j].id, id) == 0) {
            return err_set(reterr, -EINVAL, "tenants[%zu]: duplicate id '%s'", i, id);
        }
    }
    ct->id = xstrdup(id);
    ct->max_sessions = (unsigned)max_sessions;
    ct->max_running = (unsigned)max_running;
    if (profiles != NULL) {
        ct->profiles = xcalloc(json_array_size(profiles) + 1, sizeof(char *));
        json_array_foreach (profiles, k, v) {
            ct->profiles[k] = xstrdup(json_string_value(v));
        }
    }
    if (reserved != NULL) {
        ct->reserved_profiles = xcalloc(json_object_size(reserved) + 1, sizeof(char *));
        ct->reserved = xcalloc(json_object_size(reserved) + 1, sizeof(unsigned));
        k = 0;
        json_object_foreach (reserved, key, v) {
            ct->reserved_profiles[k] = xstrdup(key);
            ct->reserved[k++] = (unsigned)json_integer_value(v);
        }
    }
    if (e2b_keys != NULL && json_array_size(e2b_keys) > 0) {
        ct->n_e2b_keys = json_array_size(e2b_keys);
        ct->e2b_keys_sha256 = xcalloc(ct->n_e2b_keys, sizeof(*ct->e2b_keys_sha256));
        json_array_foreach (e2b_keys, k, v) {
            (void)cfg_parse_sha256_hex(json_string_value(v), ct->e2b_keys_sha256[k]);
        }
    }
    return 0;
}

int
cfg_load_tenants(struct cfg *c, json_t *arr, struct err *reterr)
{
    size_t i;
    json_t *t;

    if (!json_is_array(arr)) {
        return err_set(reterr, -EINVAL, "'tenants' must be an array");
    }
    if (json_array_size(arr) > CFG_MAX_TENANTS) {
        return err_set(reterr, -EINVAL, "at most %d tenants", CFG_MAX_TENANTS);
    }
    cfg_tenants_clear(c);
    c->tenants = xcalloc(json_array_size(arr), sizeof(*c->tenants));
    json_array_foreach (arr, i, t) {
        int r = load_tenant(c, i, t, reterr);

        if (r < 0) {
            return r; /* it allocated nothing */
        }
        c->n_tenants = i + 1;
    }
    return 0;
}

/* One "template=profile" entry of e2b.templates (len bytes at s) into *ret; -EINVAL. */
static int
e2b_entry(const char *s, size_t len, struct cfg_e2b_template *ret)
{
    const char *eq = memchr(s, '=', len);
    size_t nl, pl;

    if (eq == NULL) {
        return -EINVAL;
    }
    nl = (size_t)(eq - s);
    pl = len - nl - 1;
    if (nl == 0 || nl >= sizeof(ret->name) || pl == 0 || pl >= sizeof(ret->profile)) {
        return -EINVAL;
    }
    memcpy(ret->name, s, nl);
    ret->name[nl] = '\0';
    memcpy(ret->profile, eq + 1, pl);
    ret->profile[pl] = '\0';
    return str_is_name(ret->name, 64) && str_is_name(ret->profile, 48) ? 0 : -EINVAL;
}

int
cfg_e2b_templates_check(const struct cfg *c, struct err *reterr)
{
    const char *s = c->e2b_templates;
    size_t n = 0;

    while (s != NULL && *s != '\0') {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        struct cfg_e2b_template t;

        if (e2b_entry(s, len, &t) < 0) {
            return err_set(reterr, -EINVAL,
                           "'e2b.templates' must be comma-separated template=profile pairs "
                           "of [A-Za-z0-9._-] names");
        }
        if (cfg_profile_find(c, t.profile) == NULL) {
            return err_set(reterr, -EINVAL,
                           "'e2b.templates' maps '%s' to profile '%s', which "
                           "is not configured",
                           t.name, t.profile);
        }
        if (++n > CFG_E2B_TEMPLATES_MAX - 2) {
            return err_set(reterr, -EINVAL, "'e2b.templates' has more than %d entries",
                           CFG_E2B_TEMPLATES_MAX - 2);
        }
        s = comma ? comma + 1 : s + len;
    }
    return 0;
}

size_t
cfg_e2b_templates(const struct cfg *c, const struct cfg_tenant *t, struct cfg_e2b_template *out,
                  size_t max)
{
    static const char *const defaults[] = {"base", "code-interpreter-v1"};
    const char *first = t != NULL && t->profiles != NULL && t->profiles[0] != NULL ? t->profiles[0]
                        : c->n_profiles > 0 ? c->profiles[0].name
                                            : NULL;
    const char *s = c->e2b_templates;
    size_t n = 0;

    while (s != NULL && *s != '\0' && n < max) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);

        n += e2b_entry(s, len, &out[n]) == 0;
        s = comma ? comma + 1 : s + len;
    }
    for (size_t d = 0; d < ELEMENTSOF(defaults) && first != NULL; d++) {
        bool listed = false;

        for (size_t i = 0; i < n; i++) {
            listed = listed || strcmp(out[i].name, defaults[d]) == 0;
        }
        if (!listed && n < max) {
            (void)snprintf(out[n].name, sizeof(out[n].name), "%s", defaults[d]);
            (void)snprintf(out[n].profile, sizeof(out[n].profile), "%s", first);
            n++;
        }
    }
    return n;
}

const struct cfg_tenant *
cfg_e2b_key_tenant(const struct cfg *c, const uint8_t digest[CFG_SHA256_LEN])
{
    const struct cfg_tenant *found = NULL;

    for (size_t i = 0; i < c->n_tenants; i++) {
        for (size_t k = 0; k < c->tenants[i].n_e2b_keys; k++) {
            /* No early exit: every hash is compared whatever matched before. */
            if (CRYPTO_memcmp(digest, c->tenants[i].e2b_keys_sha256[k], CFG_SHA256_LEN) == 0) {
                found = &c->tenants[i];
            }
        }
    }
    return found;
}

const struct cfg_tenant *
cfg_tenant_find(const struct cfg *c, const char *id)
{
    for (size_t i = 0; id != NULL && i < c->n_tenants; i++) {
        if (strcmp(c->tenants[i].id, id) == 0) {
            return &c->tenants[i];
        }
    }
    return NULL;
}

bool
cfg_tenant_allows(const struct cfg_tenant *t, const char *profile)
{
    if (t->profiles == NULL) {
        return true;
    }
    for (char **p = t->profiles; *p != NULL; p++) {
        if (strcmp(*p, profile) == 0) {
            return true;
        }
    }
    return false;
}

unsigned
cfg_tenant_reserved(const struct cfg_tenant *t, const char *profile)
{
    for (size_t i = 0; t->reserved_profiles != NULL && t->reserved_profiles[i] != NULL; i++) {
        if (strcmp(t->reserved_profiles[i], profile) == 0) {
            return t->reserved[i];
        }
    }
    return 0;
}

unsigned
cfg_reserved_for_others(const struct cfg *c, const char *tenant, const char *profile)
{
    unsigned sum = 0;

    for (size_t i = 0; i < c->n_tenants; i++) {
        if (tenant == NULL || strcmp(c->tenants[i].id, tenant) != 0) {
            sum += cfg_tenant_reserved(&c->tenants[i], profile);
        }
    }
    return sum;
}
