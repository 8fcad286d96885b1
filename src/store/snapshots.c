/* Snapshot records; see snapshots.h for the keys. The scripts that reach a tenant's keys build
 * their names from the record's tenant (list, delete, expired do not name every key in KEYS, as
 * load_all in sessions.c: Redis Cluster is not supported). */
#include "snapshots.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "util/macro.h"
#include "util/parse.h"

#define KEY_MAX 256

struct store_snapshots {
    struct store_redis *redis; /* borrowed */
    char *prefix;
    char key_expiry[KEY_MAX];
};

/* KEYS: hash, expiry, tenant bytes. ARGV: id, deadline, max, field/value pairs. A tenant already
 * at its quota writes nothing (-1): the commit would refuse it anyway. */
static const char begin_lua[] =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
    "local max = tonumber(ARGV[3])\n"
    "if max > 0 and tonumber(redis.call('GET', KEYS[3]) or '0') >= max then return -1 end\n"
    "redis.call('HSET', KEYS[1], unpack(ARGV, 4))\n"
    "redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])\n"
    "return 1\n";

/* KEYS: hash, tenant zset, tenant bytes, expiry. ARGV: id, size, sha256, manifest, expires_at,
 * max, created_at, charge (what the quota counts: the bytes and the manifest the record keeps). */
static const char commit_lua[] =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'writing' then return -1 end\n"
    "local used = tonumber(redis.call('GET', KEYS[3]) or '0')\n"
    "local max = tonumber(ARGV[6])\n"
    "if max > 0 and used + tonumber(ARGV[8]) > max then return 0 end\n"
    "redis.call('HSET', KEYS[1], 'state', 'ready', 'size', ARGV[2], 'sha256', ARGV[3],\n"
    "           'manifest', ARGV[4], 'expires_at', ARGV[5], 'charge', ARGV[8])\n"
    "redis.call('INCRBY', KEYS[3], ARGV[8])\n"
    "if redis.call('HGET', KEYS[1], 'hibernation') ~= '1' then\n"
    "  redis.call('ZADD', KEYS[2], ARGV[7], ARGV[1])\n"
    "end\n"
    "if tonumber(ARGV[5]) > 0 then redis.call('ZADD', KEYS[4], ARGV[5], ARGV[1])\n"
    "else redis.call('ZREM', KEYS[4], ARGV[1]) end\n"
    "return 1\n";

/* KEYS: tenant zset, its byte count. ARGV: snapshot key prefix, max. The count first, then the
 * hashes. */
static const char list_lua[] =
    "local out = {tonumber(redis.call('GET', KEYS[2]) or '0')}\n"
    "for _, id in ipairs(redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)) do\n"
    "  local h = redis.call('HGETALL', ARGV[1] .. id)\n"
    "  if #h > 0 then out[#out + 1] = h else redis.call('ZREM', KEYS[1], id) end\n"
    "end\n"
    "return out\n";

/* KEYS: hash, expiry. ARGV: id, tenant ('' for any), key prefix. */
static const char delete_lua[] =
    "local t = redis.call('HGET', KEYS[1], 'tenant')\n"
    "if not t then redis.call('ZREM', KEYS[2], ARGV[1]) return 0 end\n"
    "if ARGV[2] ~= '' and t ~= ARGV[2] then return 0 end\n"
    "local tk = ARGV[3] .. 'tenant:' .. t\n"
    "if redis.call('HGET', KEYS[1], 'state') == 'ready' then\n"
    "  local c = redis.call('HGET', KEYS[1], 'charge') or redis.call('HGET', KEYS[1], 'size')\n"
    "  redis.call('DECRBY', tk .. ':snapshot_bytes', c)\n"
    "end\n"
    "redis.call('ZREM', tk .. ':snapshots', ARGV[1])\n"
    "redis.call('ZREM', KEYS[2], ARGV[1])\n"
    "redis.call('DEL', KEYS[1])\n"
    "return 1\n";

/* KEYS: expiry. ARGV: now, max, snapshot key prefix. */
static const char expired_lua[] =
    "local out = {}\n"
    "for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0,\n"
    "                                ARGV[2])) do\n"
    "  local h = redis.call('HGETALL', ARGV[3] .. id)\n"
    "  if #h > 0 then out[#out + 1] = h else redis.call('ZREM', KEYS[1], id) end\n"
    "end\n"
    "return out\n";

/* ---- records (pure) -------------------------------------------------------------------------- */

static const char *const state_names[STORE_SNAPSHOT__COUNT] = {
    [STORE_SNAPSHOT_WRITING] = "writing",
    [STORE_SNAPSHOT_READY] = "ready",
};

bool
store_snapshot_valid_id(const char *id)
{
    size_t n = id != NULL ? strlen(id) : 0;

    if (n != STORE_SNAPSHOT_ID_LEN) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'))) {
            return false;
        }
    }
    return true;
}

void
store_snapshot_rec_done(struct store_snapshot_rec *rec)
{
    free(rec->manifest);
    rec->manifest = NULL;
}

static bool
is(const char *k, size_t n, const char *name)
{
    return strlen(name) == n && memcmp(k, name, n) == 0;
}

/* A string field into out (n bytes with the NUL): -EPROTO when too long or it holds a NUL. */
static int
str_field(char *out, size_t n, const char *v, size_t len)
{
    if (len >= n || memchr(v, '\0', len) != NULL) {
        return -EPROTO;
    }
    memcpy(out, v, len);
    out[len] = '\0';
    return 0;
}

static int
parse_pair(struct store_snapshot_rec *r, const char *k, size_t kn, const char *v, size_t vn,
           unsigned *seen)
{
    if (is(k, kn, "id")) {
        *seen |= 1u;
        return str_field(r->id, sizeof(r->id), v, vn);
    }
    if (is(k, kn, "tenant")) {
        *seen |= 2u;
        return str_field(r->tenant, sizeof(r->tenant), v, vn);
    }
    if (is(k, kn, "state")) {
        *seen |= 4u;
        for (int i = 0; i < STORE_SNAPSHOT__COUNT; i++) {
            if (is(v, vn, state_names[i])) {
                r->state = (enum store_snapshot_state)i;
                return 0;
            }
        }
        return -EPROTO;
    }
    if (is(k, kn, "created_at")) {
        *seen |= 8u;
        return parse_u64n(v, vn, &r->created_at) < 0 ? -EPROTO : 0;
    }
    if (is(k, kn, "session")) {
        return str_field(r->session, sizeof(r->session), v, vn);
    }
    if (is(k, kn, "sha256")) {
        return str_field(r->sha256, sizeof(r->sha256), v, vn);
    }
    if (is(k, kn, "size")) {
        return parse_u64n(v, vn, &r->size) < 0 ? -EPROTO : 0;
    }
    if (is(k, kn, "expires_at")) {
        return parse_u64n(v, vn, &r->expires_at) < 0 ? -EPROTO : 0;
    }
    if (is(k, kn, "hibernation")) {
        r->hibernation = is(v, vn, "1");
        return 0;
    }
    if (is(k, kn, "manifest")) {
        if (vn > STORE_SNAPSHOT_MANIFEST_MAX || memchr(v, '\0', vn) != NULL) {
            return -EPROTO;
        }
        free(r->manifest);
        r->manifest = xstrndup(v, vn);
    }
    return 0; /* unknown fields: a newer daemon's */
}

int
store_snapshot_parse(const char *const *kv, const size_t *lens, size_t n,
                     struct store_snapshot_rec *rec)
{
    struct store_snapshot_rec r = {0};
    unsigned seen = 0;

    if (n % 2 != 0) {
        return -EPROTO;
    }
    for (size_t i = 0; i < n; i += 2) {
        if (parse_pair(&r, kv[i], lens[i], kv[i + 1], lens[i + 1], &seen) < 0) {
            store_snapshot_rec_done(&r);
            return -EPROTO;
        }
    }
    if (seen != 15u || !store_snapshot_valid_id(r.id) || r.tenant[0] == '\0') {
        store_snapshot_rec_done(&r);
        return -EPROTO;
    }
    if (r.manifest == NULL) {
        r.manifest = xstrdup("{}");
    }
    *rec = r;
    return 0;
}

/* ---- scripts --------------------------------------------------------------------------------- */

enum op_kind {
    OP_FLAG, /* an integer: 1 ok, 0 and -1 mapped by the caller's table */
    OP_RECS, /* one hash (get) or an array of hashes */
    OP_RECS_ONE,
    OP_LIST, /* an integer (the tenant's bytes), then hashes */
};

struct op {
    enum op_kind kind;
    int on_zero, on_minus; /* OP_FLAG: the errno of a 0 and of a -1 */
    void (*cb)(void);
    void *userdata;
};

static int
parse_rec(const char *const *kv, const size_t *lens, size_t n, void *rec)
{
    return store_snapshot_parse(kv, lens, n, rec);
}

/* One HGETALL reply into recs[*n] when it parses. */
static void
take_hash(const redisReply *h, struct store_snapshot_rec *recs, size_t *n)
{
    if (store_redis_hash(h, parse_rec, &recs[*n]) == 0) {
        (*n)++;
    }
}

static void
finish_recs(struct op *op, int r, redisReply *reply)
{
    struct store_snapshot_rec *recs = NULL;
    uint64_t bytes = 0;
    size_t n = 0;

    if (r == 0 && reply->type != REDIS_REPLY_ARRAY) {
        r = -EPROTO;
    }
    if (r == 0 && op->kind == OP_LIST) { /* a count below 0 is one a crash left: none */
        if (reply->elements == 0 || reply->element[0]->type != REDIS_REPLY_INTEGER) {
            r = -EPROTO;
        } else if (reply->element[0]->integer > 0) {
            bytes = (uint64_t)reply->element[0]->integer;
        }
    }
    if (r == 0 && op->kind == OP_RECS_ONE) {
        recs = xcalloc(1, sizeof(*recs));
        take_hash(reply, recs, &n);
    } else if (r == 0) {
        recs = xcalloc(reply->elements ? reply->elements : 1, sizeof(*recs));
        for (size_t i = 0; i < reply->elements; i++) {
            take_hash(reply->element[i], recs, &n);
        }
    }
    if (op->kind == OP_LIST) {
        ((store_snapshots_list_cb *)op->cb)(r, recs, n, bytes, op->userdata);
    } else {
        ((store_snapshots_recs_cb *)op->cb)(r, recs, n, op->userdata);
    }
    for (size_t i = 0; i < n; i++) {
        store_snapshot_rec_done(&recs[i]);
    }
    free(recs);
}

static void
on_reply(int r, redisReply *reply, void *userdata)
{
    struct op *op = userdata;

    if (r == 0 && reply->type == REDIS_REPLY_ERROR) {
        r = -EPROTO;
    }
    switch (op->kind) {
    case OP_FLAG:
        if (r == 0 && reply->type != REDIS_REPLY_INTEGER) {
            r = -EPROTO;
        } else if (r == 0 && reply->integer != 1) {
            r = reply->integer == 0 ? op->on_zero : op->on_minus;
        }
        ((store_snapshots_cb *)op->cb)(r, op->userdata);
        break;
    case OP_RECS:
    case OP_RECS_ONE:
    case OP_LIST:
        finish_recs(op, r, reply);
        break;
    }
    free(op);
}

static int
command(struct store_snapshots *s, struct op *proto, int argc, const char **argv,
        const size_t *lens)
{
    size_t argvlen[24];
    struct op *op;
    int r;

    for (int i = 0; i < argc; i++) {
        argvlen[i] = lens != NULL && lens[i] != (size_t)-1 ? lens[i] : strlen(argv[i]);
    }
    op = xcalloc(1, sizeof(*op));
    *op = *proto;
    r = store_redis_command(s->redis, on_reply, op, argc, argv, argvlen);
    if (r < 0) {
        free(op);
    }
    return r;
}

static int
key(const struct store_snapshots *s, char out[KEY_MAX], const char *a, const char *b, const char *c)
{
    int n = snprintf(out, KEY_MAX, "%s%s%s%s", s->prefix, a, b, c);

    return n < 0 || n >= KEY_MAX ? -ENAMETOOLONG : 0;
}

struct store_snapshots *
store_snapshots_new(struct store_redis *redis, const char *prefix)
{
    struct store_snapshots *s = xcalloc(1, sizeof(*s));

    s->redis = redis;
    s->prefix = xstrdup(prefix);
    (void)snprintf(s->key_expiry, sizeof(s->key_expiry), "%ssnapshots:expiry", prefix);
    return s;
}

struct store_snapshots *
store_snapshots_free(struct store_snapshots *s)
{
    if (s != NULL) {
        free(s->prefix);
        free(s);
    }
    return NULL;
}

int
store_snapshots_begin(struct store_snapshots *s, const struct store_snapshot_rec *rec,
                      uint64_t max_tenant_bytes, store_snapshots_cb *cb, void *userdata)
{
    char k[KEY_MAX], kb[KEY_MAX], created[24], deadline[24], max[24];
    const char *argv[] = {"EVAL",
                          begin_lua,
                          "3",
                          k,
                          s->key_expiry,
                          kb,
                          rec->id,
                          deadline,
                          max,
                          "id",
                          rec->id,
                          "tenant",
                          rec->tenant,
                          "session",
                          rec->session,
                          "state",
                          "writing",
                          "created_at",
                          created,
                          "expires_at",
                          deadline,
                          "hibernation",
                          rec->hibernation ? "1" : "0"};

    if (!store_snapshot_valid_id(rec->id) || key(s, k, "snapshot:", rec->id, "") < 0 ||
        key(s, kb, "tenant:", rec->tenant, ":snapshot_bytes") < 0) {
        return -EINVAL;
    }
    (void)snprintf(created, sizeof(created), "%llu", (unsigned long long)rec->created_at);
    (void)snprintf(deadline, sizeof(deadline), "%llu", (unsigned long long)rec->expires_at);
    (void)snprintf(max, sizeof(max), "%llu", (unsigned long long)max_tenant_bytes);
    return command(s,
                   &(struct op){.kind = OP_FLAG,
                                .on_zero = -EEXIST,
                                .on_minus = -EDQUOT,
                                .cb = (void (*)(void))cb,
                                .userdata = userdata},
                   (int)ELEMENTSOF(argv), argv, NULL);
}

int
store_snapshots_commit(struct store_snapshots *s, const struct store_snapshot_rec *rec,
                       uint64_t max_tenant_bytes, store_snapshots_cb *cb, void *userdata)
{
    char k[KEY_MAX], kz[KEY_MAX], kb[KEY_MAX], size[24], exp[24], max[24], created[24];
    char charge[24];
    const char *manifest = rec->manifest != NULL ? rec->manifest : "{}";
    const char *argv[] = {"EVAL", commit_lua,  "4",      k,   kz,  kb,      s->key_expiry, rec->id,
                          size,   rec->sha256, manifest, exp, max, created, charge};

    if (!store_snapshot_valid_id(rec->id) || key(s, k, "snapshot:", rec->id, "") < 0 ||
        key(s, kz, "tenant:", rec->tenant, ":snapshots") < 0 ||
        key(s, kb, "tenant:", rec->tenant, ":snapshot_bytes") < 0) {
        return -EINVAL;
    }
    (void)snprintf(size, sizeof(size), "%llu", (unsigned long long)rec->size);
    (void)snprintf(exp, sizeof(exp), "%llu", (unsigned long long)rec->expires_at);
    (void)snprintf(max, sizeof(max), "%llu", (unsigned long long)max_tenant_bytes);
    (void)snprintf(created, sizeof(created), "%llu", (unsigned long long)rec->created_at);
    (void)snprintf(charge, sizeof(charge), "%llu",
                   (unsigned long long)rec->size + (unsigned long long)strlen(manifest));
    return command(s,
                   &(struct op){.kind = OP_FLAG,
                                .on_zero = -EDQUOT,
                                .on_minus = -ENOENT,
                                .cb = (void (*)(void))cb,
                                .userdata = userdata},
                   (int)ELEMENTSOF(argv), argv, NULL);
}

int
store_snapshots_get(struct store_snapshots *s, const char *id, store_snapshots_recs_cb *cb,
                    void *userdata)
{
    char k[KEY_MAX];
    const char *argv[] = {"HGETALL", k};

    if (!store_snapshot_valid_id(id) || key(s, k, "snapshot:", id, "") < 0) {
        return -EINVAL;
    }
    return command(
        s, &(struct op){.kind = OP_RECS_ONE, .cb = (void (*)(void))cb, .userdata = userdata},
        (int)ELEMENTSOF(argv), argv, NULL);
}

int
store_snapshots_list(struct store_snapshots *s, const char *tenant, unsigned max,
                     store_snapshots_list_cb *cb, void *userdata)
{
    char kz[KEY_MAX], kb[KEY_MAX], kp[KEY_MAX], n[16];
    const char *argv[] = {"EVAL", list_lua, "2", kz, kb, kp, n};

    if (key(s, kz, "tenant:", tenant, ":snapshots") < 0 ||
        key(s, kb, "tenant:", tenant, ":snapshot_bytes") < 0 ||
        key(s, kp, "snapshot:", "", "") < 0) {
        return -EINVAL;
    }
    (void)snprintf(n, sizeof(n), "%u", max);
    return command(s, &(struct op){.kind = OP_LIST, .cb = (void (*)(void))cb, .userdata = userdata},
                   (int)ELEMENTSOF(argv), argv, NULL);
}

int
store_snapshots_delete(struct store_snapshots *s, const char *id, const char *tenant,
                       store_snapshots_cb *cb, void *userdata)
{
    char k[KEY_MAX];
    const char *argv[] = {"EVAL", delete_lua,           "2",      k, s->key_expiry,
                          id,     tenant ? tenant : "", s->prefix};

    if (!store_snapshot_valid_id(id) || key(s, k, "snapshot:", id, "") < 0) {
        return -EINVAL;
    }
    return command(
        s,
        &(struct op){
            .kind = OP_FLAG, .on_zero = -ENOENT, .cb = (void (*)(void))cb, .userdata = userdata},
        (int)ELEMENTSOF(argv), argv, NULL);
}

int
store_snapshots_expired(struct store_snapshots *s, uint64_t now_ms, unsigned max,
                        store_snapshots_recs_cb *cb, void *userdata)
{
    char kp[KEY_MAX], now[24], n[16];
    const char *argv[] = {"EVAL", expired_lua, "1", s->key_expiry, now, n, kp};

    if (key(s, kp, "snapshot:", "", "") < 0) {
        return -EINVAL;
    }
    (void)snprintf(now, sizeof(now), "%llu", (unsigned long long)now_ms);
    (void)snprintf(n, sizeof(n), "%u", max);
    return command(s, &(struct op){.kind = OP_RECS, .cb = (void (*)(void))cb, .userdata = userdata},
                   (int)ELEMENTSOF(argv), argv, NULL);
}
