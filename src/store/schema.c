/* Key names and session records; see schema.h. */
#include "schema.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util/macro.h"
#include "util/parse.h"
#include "util/utf8.h"

static const char *const state_names[STORE_SESSION__COUNT] = {
    [STORE_SESSION_ACTIVE] = "active",
    [STORE_SESSION_ENDING] = "ending",
    [STORE_SESSION_HIBERNATED] = "hibernated",
};

static const char *const idle_names[STORE_IDLE__COUNT] = {
    [STORE_IDLE_PROFILE] = "",
    [STORE_IDLE_END] = "end",
    [STORE_IDLE_HIBERNATE] = "hibernate",
};

const char *
store_idle_action_name(enum store_idle_action a)
{
    return a >= 0 && a < STORE_IDLE__COUNT ? idle_names[a] : NULL;
}

int
store_idle_action_parse(const char *s, enum store_idle_action *ret)
{
    for (int i = 0; i < STORE_IDLE__COUNT; i++) {
        if (strcmp(idle_names[i], s) == 0) {
            *ret = (enum store_idle_action)i;
            return 0;
        }
    }
    return -EINVAL;
}

static int
key(char *out, size_t n, const char *prefix, const char *a, const char *b, const char *c)
{
    int w = snprintf(out, n, "%s%s%s%s", prefix, a, b, c);

    return w < 0 || (size_t)w >= n ? -ENAMETOOLONG : 0;
}

int
store_key_session(char *out, size_t n, const char *prefix, const char *id)
{
    return key(out, n, prefix, "session:", id, "");
}

int
store_key_session_history(char *out, size_t n, const char *prefix, const char *id)
{
    return key(out, n, prefix, "history:", id, "");
}

int
store_key_mcp(char *out, size_t n, const char *prefix, const char *id)
{
    return key(out, n, prefix, "mcp:", id, "");
}

int
store_key_snapshot(char *out, size_t n, const char *prefix, const char *id)
{
    return key(out, n, prefix, "snapshot:", id, "");
}

int
store_key_snapshots_expiry(char *out, size_t n, const char *prefix)
{
    return key(out, n, prefix, "snapshots:expiry", "", "");
}

int
store_key_tenant_snapshot_bytes(char *out, size_t n, const char *prefix, const char *tenant)
{
    return key(out, n, prefix, "tenant:", tenant, ":snapshot_bytes");
}

int
store_key_tenant_sessions(char *out, size_t n, const char *prefix, const char *tenant)
{
    return key(out, n, prefix, "tenant:", tenant, ":sessions");
}

int
store_key_tenant_admitted(char *out, size_t n, const char *prefix, const char *tenant)
{
    return key(out, n, prefix, "tenant:", tenant, ":admitted");
}

int
store_key_tenant_prefix(char *out, size_t n, const char *prefix)
{
    return key(out, n, prefix, "tenant:", "", "");
}

int
store_key_node_sessions(char *out, size_t n, const char *prefix, const char *node)
{
    return key(out, n, prefix, "node:", node, ":sessions");
}

int
store_key_node_deadlines(char *out, size_t n, const char *prefix, const char *node)
{
    return key(out, n, prefix, "node:", node, ":deadlines");
}

enum field_kind {
    F_STR,
    F_U64,
    F_I64,
    F_UINT,
    F_STATE,
    F_IDLE,
    F_TEXT, /* a malloc'd text of at most size bytes */
};

struct field {
    const char *name;
    size_t offset, size;
    enum field_kind kind;
    bool required;
};

/* clang-format off */
#define FS(n, m, req) \
    {n, offsetof(struct store_session_rec, m), sizeof(((struct store_session_rec *)0)->m), F_STR, req}
#define FN(n, k, m) {n, offsetof(struct store_session_rec, m), 0, k, true}
#define FO(n, k, m) {n, offsetof(struct store_session_rec, m), 0, k, false}
/* clang-format on */

static const struct field fields[] = {
    FS("id", id, true),
    FS("tenant", tenant, true),
    FS("profile", profile, true),
    FS("container", container, true),
    FS("node", node, true),
    FN("created_at", F_U64, created_at),
    FN("last_active_at", F_U64, last_active_at),
    FN("expires_at", F_U64, expires_at),
    FN("idle_timeout_s", F_UINT, idle_timeout_s),
    FN("epoch", F_U64, epoch),
    FO("pause_after_s", F_UINT, pause_after_s),
    FN("gen", F_I64, gen),
    FN("state", F_STATE, state),
    {"idle_action", offsetof(struct store_session_rec, idle_action), 0, F_IDLE, false},
    FS("snapshot", snapshot, false),
    FO("snapshot_size", F_U64, snapshot_size),
    FS("snapshot_sha256", snapshot_sha256, false),
    {"metadata", offsetof(struct store_session_rec, metadata), STORE_METADATA_MAX, F_TEXT, false},
    {"ext", offsetof(struct store_session_rec, ext), STORE_EXT_MAX, F_TEXT, false},
    {"egress", offsetof(struct store_session_rec, egress), STORE_EGRESS_MAX, F_TEXT, false},
};

static int
set_field(struct store_session_rec *r, const struct field *f, const char *v, size_t n)
{
    char *base = (char *)r + f->offset;
    uint64_t u;

    switch (f->kind) {
    case F_STR:
        if (n >= f->size || memchr(v, '\0', n) != NULL || !utf8_valid(v, n)) {
            return -EPROTO;
        }
        memcpy(base, v, n);
        base[n] = '\0';
        return 0;
    case F_U64:
    case F_UINT:
        if (parse_u64n(v, n, &u) < 0 || (f->kind == F_UINT && u > UINT32_MAX)) {
            return -EPROTO;
        }
        if (f->kind == F_UINT) {
            *(unsigned *)(void *)base = (unsigned)u;
        } else {
            *(uint64_t *)(void *)base = u;
        }
        return 0;
    case F_I64:
        if (n == 2 && memcmp(v, "-1", 2) == 0) {
            *(int64_t *)(void *)base = -1;
            return 0;
        }
        if (parse_u64n(v, n, &u) < 0 || u > INT64_MAX) {
            return -EPROTO;
        }
        *(int64_t *)(void *)base = (int64_t)u;
        return 0;
    case F_STATE:
        for (int i = 0; i < STORE_SESSION__COUNT; i++) {
            if (strlen(state_names[i]) == n && memcmp(state_names[i], v, n) == 0) {
                *(enum store_session_state *)(void *)base = (enum store_session_state)i;
                return 0;
            }
        }
        return -EPROTO;
    case F_TEXT:
        if (n > f->size || memchr(v, '\0', n) != NULL || !utf8_valid(v, n)) {
            return -EPROTO;
        }
        free(*(char **)(void *)base);
        *(char **)(void *)base = xstrndup(v, n);
        return 0;
    case F_IDLE:
        for (int i = 0; i < STORE_IDLE__COUNT; i++) {
            if (strlen(idle_names[i]) == n && memcmp(idle_names[i], v, n) == 0) {
                *(enum store_idle_action *)(void *)base = (enum store_idle_action)i;
                return 0;
            }
        }
        return -EPROTO;
    }
    return -EPROTO;
}

int
store_session_parse(const char *const *kv, const size_t *lens, size_t n,
                    struct store_session_rec *rec)
{
    struct store_session_rec r = {0};
    bool seen[ELEMENTSOF(fields)] = {0};
    bool ok = n % 2 == 0;

    for (size_t i = 0; ok && i < n; i += 2) {
        for (size_t f = 0; ok && f < ELEMENTSOF(fields); f++) {
            if (strlen(fields[f].name) == lens[i] && memcmp(fields[f].name, kv[i], lens[i]) == 0) {
                ok = set_field(&r, &fields[f], kv[i + 1], lens[i + 1]) == 0;
                seen[f] = true;
            }
        }
    }
    for (size_t f = 0; ok && f < ELEMENTSOF(fields); f++) {
        ok = !fields[f].required || seen[f];
    }
    if (!ok || r.id[0] == '\0' || !str_is_name(r.id, STORE_ID_MAX)) {
        store_session_rec_done(&r);
        return -EPROTO;
    }
    if (r.metadata == NULL) {
        r.metadata = xstrdup("{}");
    }
    if (r.ext == NULL) {
        r.ext = xstrdup("");
    }
    if (r.egress == NULL) {
        r.egress = xstrdup("");
    }
    *rec = r;
    return 0;
}

void
store_session_fields(const struct store_session_rec *rec, char scratch[STORE_SCRATCH][24],
                     const char **argv, size_t *lens, int *argc)
{
    const struct {
        const char *name, *value;
    } s[] = {
        {"id", rec->id},
        {"tenant", rec->tenant},
        {"profile", rec->profile},
        {"container", rec->container},
        {"node", rec->node},
        {"state", state_names[rec->state]},
        {"metadata", rec->metadata != NULL ? rec->metadata : "{}"},
        {"ext", rec->ext != NULL ? rec->ext : ""},
        {"egress", rec->egress != NULL ? rec->egress : ""},
        {"snapshot", rec->snapshot},
        {"snapshot_sha256", rec->snapshot_sha256},
        {"idle_action", idle_names[rec->idle_action]},
    };
    const struct {
        const char *name;
        uint64_t value;
    } u[] = {
        {"created_at", rec->created_at},
        {"last_active_at", rec->last_active_at},
        {"expires_at", rec->expires_at},
        {"idle_timeout_s", rec->idle_timeout_s},
        {"epoch", rec->epoch},
        {"pause_after_s", rec->pause_after_s},
        {"snapshot_size", rec->snapshot_size},
    };

    for (size_t i = 0; i < ELEMENTSOF(s); i++) {
        argv[*argc] = s[i].name;
        lens[(*argc)++] = strlen(s[i].name);
        argv[*argc] = s[i].value;
        lens[(*argc)++] = strlen(s[i].value);
    }
    for (size_t i = 0; i < ELEMENTSOF(u); i++) {
        (void)snprintf(scratch[i], 24, "%llu", (unsigned long long)u[i].value);
        argv[*argc] = u[i].name;
        lens[(*argc)++] = strlen(u[i].name);
        argv[*argc] = scratch[i];
        lens[(*argc)++] = strlen(scratch[i]);
    }
    _Static_assert(ELEMENTSOF(u) + 1 <= STORE_SCRATCH, "a scratch entry for each number");
    _Static_assert(2 * (ELEMENTSOF(s) + ELEMENTSOF(u) + 1) == STORE_FIELDS_ARGV,
                   "STORE_FIELDS_ARGV counts every field");
    (void)snprintf(scratch[ELEMENTSOF(u)], 24, "%lld", (long long)rec->gen);
    argv[*argc] = "gen";
    lens[(*argc)++] = 3;
    argv[*argc] = scratch[ELEMENTSOF(u)];
    lens[(*argc)++] = strlen(scratch[ELEMENTSOF(u)]);
}

void
store_session_rec_done(struct store_session_rec *rec)
{
    free(rec->metadata);
    free(rec->ext);
    free(rec->egress);
    rec->metadata = rec->ext = rec->egress = NULL;
}

void
store_session_rec_copy(struct store_session_rec *dst, const struct store_session_rec *src)
{
    *dst = *src;
    dst->metadata = xstrdup(src->metadata != NULL ? src->metadata : "{}");
    dst->ext = xstrdup(src->ext != NULL ? src->ext : "");
    dst->egress = xstrdup(src->egress != NULL ? src->egress : "");
}

void
store_session_rec_set(char **field, const char *value)
{
    free(*field);
    *field = xstrdup(value);
}

uint64_t
store_session_deadline(const struct store_session_rec *rec, uint64_t last_active_ms)
{
    uint64_t idle = last_active_ms + (uint64_t)rec->idle_timeout_s * 1000u;

    if (rec->state == STORE_SESSION_HIBERNATED) {
        return rec->expires_at; /* it idles at no cost: only its end of life ends it */
    }
    return MIN(idle, rec->expires_at);
}
