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
};

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
    FS("metadata", metadata, false),
    FS("ext", ext, false),
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
    }
    return -EPROTO;
}

int
store_session_parse(const char *const *kv, const size_t *lens, size_t n,
                    struct store_session_rec *rec)
{
    struct store_session_rec r = {0};
    bool seen[ELEMENTSOF(fields)] = {0};

    (void)snprintf(r.metadata, sizeof(r.metadata), "{}");
    if (n % 2 != 0) {
        return -EPROTO;
    }
    for (size_t i = 0; i < n; i += 2) {
        for (size_t f = 0; f < ELEMENTSOF(fields); f++) {
            if (strlen(fields[f].name) == lens[i] && memcmp(fields[f].name, kv[i], lens[i]) == 0) {
                if (set_field(&r, &fields[f], kv[i + 1], lens[i + 1]) < 0) {
                    return -EPROTO;
                }
                seen[f] = true;
            }
        }
    }
    for (size_t f = 0; f < ELEMENTSOF(fields); f++) {
        if (fields[f].required && !seen[f]) {
            return -EPROTO;
        }
    }
    if (r.id[0] == '\0' || !str_is_name(r.id, STORE_ID_MAX)) {
        return -EPROTO;
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
        {"metadata", rec->metadata},
        {"ext", rec->ext},
    };
    const struct {
        const char *name;
        uint64_t value;
    } u[] = {
        {"created_at", rec->created_at}, {"last_active_at", rec->last_active_at},
        {"expires_at", rec->expires_at}, {"idle_timeout_s", rec->idle_timeout_s},
        {"epoch", rec->epoch},           {"pause_after_s", rec->pause_after_s},
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
    (void)snprintf(scratch[ELEMENTSOF(u)], 24, "%lld", (long long)rec->gen);
    argv[*argc] = "gen";
    lens[(*argc)++] = 3;
    argv[*argc] = scratch[ELEMENTSOF(u)];
    lens[(*argc)++] = strlen(scratch[ELEMENTSOF(u)]);
}

uint64_t
store_session_deadline(const struct store_session_rec *rec, uint64_t last_active_ms)
{
    uint64_t idle = last_active_ms + (uint64_t)rec->idle_timeout_s * 1000u;

    return MIN(idle, rec->expires_at);
}
