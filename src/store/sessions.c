/* Session records; see sessions.h and schema.h for the key layout.
 *
 * The scripts (session-scripts.c) are sent with EVAL (text each time; a few hundred bytes):
 * simpler than EVALSHA with a NOSCRIPT fallback, and Redis caches the compiled script by its hash
 * anyway. Timestamps are the daemon's wall clock: one node writes its own deadline set, so clocks
 * of different daemons never meet in one comparison. */
#include "sessions.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "session-scripts.h"
#include "util/macro.h"

#define KEY_MAX 256

struct store_sessions {
    struct store_redis *redis; /* borrowed */
    char *prefix;
    char *node;
    char key_set[KEY_MAX];
    char key_deadlines[KEY_MAX];
    char key_snapshot_expiry[KEY_MAX];
};

enum op_kind {
    OP_OK,
    OP_TOUCH,
    OP_FLAG, /* 1: 0; 0: -ENOENT; -1: -ESTALE */
    OP_CLAIM,
    OP_LOAD,
    OP_LIST,
};

struct op {
    enum op_kind kind;
    void (*cb)(void);
    void *userdata;
};

static int
reply_error(int r, redisReply *reply)
{
    if (r < 0) {
        return r;
    }
    return reply->type == REDIS_REPLY_ERROR ? -EPROTO : 0;
}

static int
parse_session(const char *const *kv, const size_t *lens, size_t n, void *rec)
{
    return store_session_parse(kv, lens, n, rec);
}

static void
finish_load(struct op *op, int r, redisReply *reply)
{
    store_sessions_load_cb *cb = (store_sessions_load_cb *)op->cb;
    struct store_session_rec *recs = NULL;
    size_t n = 0, malformed = 0;

    if (r == 0 && reply->type != REDIS_REPLY_ARRAY) {
        r = -EPROTO;
    }
    if (r == 0) {
        recs = xcalloc(reply->elements ? reply->elements : 1, sizeof(*recs));
        for (size_t i = 0; i < reply->elements; i++) {
            int pr = store_redis_hash(reply->element[i], parse_session, &recs[n]);

            if (pr == 0) {
                n++;
            } else if (pr != -ENOENT) { /* an empty hash: the set outlived the record */
                malformed++;
            }
        }
    }
    cb(r, recs, n, malformed, op->userdata);
    for (size_t i = 0; i < n; i++) {
        store_session_rec_done(&recs[i]);
    }
    free(recs);
}

static void
finish_claim(struct op *op, int r, redisReply *reply)
{
    store_sessions_claim_cb *cb = (store_sessions_claim_cb *)op->cb;
    const char **ids = NULL;
    size_t n = 0;

    if (r == 0 && reply->type != REDIS_REPLY_ARRAY) {
        r = -EPROTO;
    }
    if (r == 0) {
        ids = xcalloc(reply->elements ? reply->elements : 1, sizeof(*ids));
        for (size_t i = 0; i < reply->elements; i++) {
            redisReply *e = reply->element[i];

            if (e->type == REDIS_REPLY_STRING && e->len <= STORE_ID_MAX &&
                strlen(e->str) == e->len) {
                ids[n++] = e->str;
            }
        }
    }
    cb(r, ids, n, op->userdata);
    free(ids);
}

static void
finish_list(struct op *op, int r, redisReply *reply)
{
    store_sessions_list_cb *cb = (store_sessions_list_cb *)op->cb;
    const char **items = NULL;
    size_t *lens = NULL, n = 0;

    if (r == 0 && reply->type != REDIS_REPLY_ARRAY) {
        r = -EPROTO;
    }
    if (r == 0) {
        items = xcalloc(reply->elements ? reply->elements : 1, sizeof(*items));
        lens = xcalloc(reply->elements ? reply->elements : 1, sizeof(*lens));
        for (size_t i = 0; i < reply->elements; i++) {
            if (reply->element[i]->type == REDIS_REPLY_STRING) {
                items[n] = reply->element[i]->str;
                lens[n++] = reply->element[i]->len;
            }
        }
    }
    cb(r, items, lens, n, op->userdata);
    free(items);
    free(lens);
}

static void
on_reply(int r, redisReply *reply, void *userdata)
{
    struct op *op = userdata;

    r = reply_error(r, reply);
    switch (op->kind) {
    case OP_OK:
        ((store_sessions_cb *)op->cb)(r, op->userdata);
        break;
    case OP_TOUCH:
        if (r == 0 && (reply->type != REDIS_REPLY_INTEGER || reply->integer == 0)) {
            r = reply->type == REDIS_REPLY_INTEGER ? -ENOENT : -EPROTO;
        }
        ((store_sessions_cb *)op->cb)(r, op->userdata);
        break;
    case OP_FLAG:
        if (r == 0 && reply->type != REDIS_REPLY_INTEGER) {
            r = -EPROTO;
        } else if (r == 0 && reply->integer != 1) {
            r = reply->integer == 0 ? -ENOENT : -ESTALE;
        }
        ((store_sessions_cb *)op->cb)(r, op->userdata);
        break;
    case OP_CLAIM:
        finish_claim(op, r, reply);
        break;
    case OP_LOAD:
        finish_load(op, r, reply);
        break;
    case OP_LIST:
        finish_list(op, r, reply);
        break;
    }
    free(op);
}

/* EVAL script with keys and args (all NUL-terminated except where lens says otherwise). */
static int
eval(struct store_sessions *s, enum op_kind kind, void (*cb)(void), void *userdata,
     const char *script, int nkeys, const char **args, const size_t *lens, int nargs)
{
    const char *argv[64];
    size_t argvlen[64];
    char nk[8];
    struct op *op;
    int argc = 0, r;

    if (nargs + 3 > (int)ELEMENTSOF(argv)) {
        return -E2BIG;
    }
    (void)snprintf(nk, sizeof(nk), "%d", nkeys);
    argv[argc] = "EVAL";
    argvlen[argc++] = 4;
    argv[argc] = script;
    argvlen[argc++] = strlen(script);
    argv[argc] = nk;
    argvlen[argc++] = strlen(nk);
    for (int i = 0; i < nargs; i++) {
        argv[argc] = args[i];
        argvlen[argc++] = lens != NULL ? lens[i] : strlen(args[i]);
    }
    op = xcalloc(1, sizeof(*op));
    op->kind = kind;
    op->cb = cb;
    op->userdata = userdata;
    r = store_redis_command(s->redis, on_reply, op, argc, argv, argvlen);
    if (r < 0) {
        free(op);
    }
    return r;
}

static int
session_key(struct store_sessions *s, const char *id, char *out)
{
    return store_key_session(out, KEY_MAX, s->prefix, id);
}

/* KEYS: hash, node set, deadlines, tenant set, tenant admissions (and store_lua_restore's two: the
 * snapshot's hash and its tenant's bytes). */
static int
write_record(struct store_sessions *s, const char *script, const struct store_session_rec *rec,
             store_sessions_cb *cb, void *userdata)
{
    char key[KEY_MAX], skey[KEY_MAX], bkey[KEY_MAX], tset[KEY_MAX], tadm[KEY_MAX], deadline[24],
        scratch[STORE_SCRATCH][24];
    const char *args[9 + STORE_FIELDS_ARGV];
    size_t lens[9 + STORE_FIELDS_ARGV];
    int n = 0, nkeys = script == store_lua_restore ? 7 : 5;

    if (session_key(s, rec->id, key) < 0 ||
        store_key_tenant_sessions(tset, KEY_MAX, s->prefix, rec->tenant) < 0 ||
        store_key_tenant_admitted(tadm, KEY_MAX, s->prefix, rec->tenant) < 0 ||
        (nkeys == 7 &&
         (store_key_snapshot(skey, KEY_MAX, s->prefix, rec->snapshot) < 0 ||
          store_key_tenant_snapshot_bytes(bkey, KEY_MAX, s->prefix, rec->tenant) < 0))) {
        return -ENAMETOOLONG;
    }
    (void)snprintf(deadline, sizeof(deadline), "%llu",
                   (unsigned long long)store_session_deadline(rec, rec->last_active_at));
    args[n] = key;
    lens[n++] = strlen(key);
    args[n] = s->key_set;
    lens[n++] = strlen(s->key_set);
    args[n] = s->key_deadlines;
    lens[n++] = strlen(s->key_deadlines);
    args[n] = tset;
    lens[n++] = strlen(tset);
    args[n] = tadm;
    lens[n++] = strlen(tadm);
    if (nkeys == 7) {
        args[n] = skey;
        lens[n++] = strlen(skey);
        args[n] = bkey;
        lens[n++] = strlen(bkey);
    }
    args[n] = rec->id;
    lens[n++] = strlen(rec->id);
    args[n] = deadline;
    lens[n++] = strlen(deadline);
    store_session_fields(rec, scratch, args, lens, &n);
    return eval(s, OP_OK, (void (*)(void))cb, userdata, script, nkeys, args, lens, n);
}

int
store_sessions_create(struct store_sessions *s, const struct store_session_rec *rec,
                      store_sessions_cb *cb, void *userdata)
{
    return write_record(s, store_lua_create, rec, cb, userdata);
}

int
store_sessions_restore(struct store_sessions *s, const struct store_session_rec *rec,
                       store_sessions_cb *cb, void *userdata)
{
    return write_record(s, store_lua_restore, rec, cb, userdata);
}

/* KEYS: tenant set, tenant admissions; argv[0] the id (store_lua_admit's and store_lua_unadmit's).
 */
static int
tenant_keys(struct store_sessions *s, const char *tenant, char tset[KEY_MAX], char tadm[KEY_MAX])
{
    return store_key_tenant_sessions(tset, KEY_MAX, s->prefix, tenant) < 0 ||
                   store_key_tenant_admitted(tadm, KEY_MAX, s->prefix, tenant) < 0
               ? -ENAMETOOLONG
               : 0;
}

int
store_sessions_admit(struct store_sessions *s, const char *tenant, const char *id, unsigned max,
                     store_sessions_cb *cb, void *userdata)
{
    char tset[KEY_MAX], tadm[KEY_MAX], prefix[KEY_MAX], m[16];
    const char *args[5] = {tset, tadm, id, m, prefix};

    if (tenant_keys(s, tenant, tset, tadm) < 0 || session_key(s, "", prefix) < 0) {
        return -ENAMETOOLONG;
    }
    (void)snprintf(m, sizeof(m), "%u", max);
    return eval(s, OP_FLAG, (void (*)(void))cb, userdata, store_lua_admit, 2, args, NULL, 5);
}

int
store_sessions_unadmit(struct store_sessions *s, const char *tenant, const char *id,
                       store_sessions_cb *cb, void *userdata)
{
    char tset[KEY_MAX], tadm[KEY_MAX];
    const char *args[3] = {tset, tadm, id};

    if (tenant_keys(s, tenant, tset, tadm) < 0) {
        return -ENAMETOOLONG;
    }
    return eval(s, OP_OK, (void (*)(void))cb, userdata, store_lua_unadmit, 2, args, NULL, 3);
}

int
store_sessions_touch(struct store_sessions *s, const char *id, uint64_t now_ms,
                     store_sessions_cb *cb, void *userdata)
{
    char key[KEY_MAX], now[24];
    const char *args[4] = {key, s->key_deadlines, id, now};

    if (session_key(s, id, key) < 0) {
        return -ENAMETOOLONG;
    }
    (void)snprintf(now, sizeof(now), "%llu", (unsigned long long)now_ms);
    return eval(s, OP_TOUCH, (void (*)(void))cb, userdata, store_lua_touch, 2, args, NULL, 4);
}

int
store_sessions_set_epoch(struct store_sessions *s, const char *id, uint64_t epoch, int64_t gen,
                         store_sessions_cb *cb, void *userdata)
{
    static const char lua[] = "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end\n"
                              "redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'gen', ARGV[2])\n"
                              "return 1\n";
    char key[KEY_MAX], e[24], g[24];
    const char *args[3] = {key, e, g};

    if (session_key(s, id, key) < 0) {
        return -ENAMETOOLONG;
    }
    (void)snprintf(e, sizeof(e), "%llu", (unsigned long long)epoch);
    (void)snprintf(g, sizeof(g), "%lld", (long long)gen);
    return eval(s, OP_OK, (void (*)(void))cb, userdata, lua, 1, args, NULL, 3);
}

int
store_sessions_set_expiry(struct store_sessions *s, const char *id, uint64_t expires_at,
                          store_sessions_cb *cb, void *userdata)
{
    /* KEYS: hash, deadlines. ARGV: id, expiry. Like touch: only an active session still in the
     * deadline set (one the reaper claimed is never brought back). */
    static const char lua[] =
        "if redis.call('HGET', KEYS[1], 'state') ~= 'active' then return 0 end\n"
        "if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end\n"
        "local d = tonumber(redis.call('HGET', KEYS[1], 'last_active_at')) +\n"
        "          tonumber(redis.call('HGET', KEYS[1], 'idle_timeout_s')) * 1000\n"
        "local exp = tonumber(ARGV[2])\n"
        "if exp < d then d = exp end\n"
        "redis.call('HSET', KEYS[1], 'expires_at', ARGV[2])\n"
        "redis.call('ZADD', KEYS[2], d, ARGV[1])\n"
        "return 1\n";
    char key[KEY_MAX], exp[24];
    const char *args[4] = {key, s->key_deadlines, id, exp};

    if (session_key(s, id, key) < 0) {
        return -ENAMETOOLONG;
    }
    (void)snprintf(exp, sizeof(exp), "%llu", (unsigned long long)expires_at);
    return eval(s, OP_TOUCH, (void (*)(void))cb, userdata, lua, 2, args, NULL, 4);
}

/* One field of id's record set to value by lua (KEYS[1] the record, ARGV[1] the value; 1 when
 * written, 0 when the record's state refuses it: -ENOENT). */
static int
set_field(struct store_sessions *s, const char *id, const char *lua, const char *value,
          store_sessions_cb *cb, void *userdata)
{
    char key[KEY_MAX];
    const char *args[2] = {key, value};

    if (session_key(s, id, key) < 0) {
        return -ENAMETOOLONG;
    }
    return eval(s, OP_TOUCH, (void (*)(void))cb, userdata, lua, 1, args, NULL, 2);
}

int
store_sessions_set_ext(struct store_sessions *s, const char *id, const char *ext,
                       store_sessions_cb *cb, void *userdata)
{
    static const char lua[] = "if redis.call('HGET', KEYS[1], 'state') ~= 'active' then\n"
                              "  return 0\n"
                              "end\n"
                              "redis.call('HSET', KEYS[1], 'ext', ARGV[1])\n"
                              "return 1\n";

    return set_field(s, id, lua, ext, cb, userdata);
}

int
store_sessions_set_egress(struct store_sessions *s, const char *id, const char *egress,
                          store_sessions_cb *cb, void *userdata)
{
    static const char lua[] = "local st = redis.call('HGET', KEYS[1], 'state')\n"
                              "if st ~= 'active' and st ~= 'hibernated' then\n"
                              "  return 0\n"
                              "end\n"
                              "redis.call('HSET', KEYS[1], 'egress', ARGV[1])\n"
                              "return 1\n";

    return set_field(s, id, lua, egress, cb, userdata);
}

int
store_sessions_mark_ending(struct store_sessions *s, const char *id, store_sessions_cb *cb,
                           void *userdata)
{
    char key[KEY_MAX], tprefix[KEY_MAX];
    const char *args[5] = {key, s->key_deadlines, s->key_snapshot_expiry, id, tprefix};

    if (session_key(s, id, key) < 0 || store_key_tenant_prefix(tprefix, KEY_MAX, s->prefix) < 0) {
        return -ENAMETOOLONG;
    }
    return eval(s, OP_OK, (void (*)(void))cb, userdata, store_lua_ending, 3, args, NULL, 5);
}

int
store_sessions_delete(struct store_sessions *s, const char *id, store_sessions_cb *cb,
                      void *userdata)
{
    char key[KEY_MAX], hkey[KEY_MAX], tprefix[KEY_MAX];
    const char *args[7] = {key, s->key_set, s->key_deadlines, hkey, s->key_snapshot_expiry,
                           id,  tprefix};

    if (session_key(s, id, key) < 0 ||
        store_key_session_history(hkey, KEY_MAX, s->prefix, id) < 0 ||
        store_key_tenant_prefix(tprefix, KEY_MAX, s->prefix) < 0) {
        return -ENAMETOOLONG;
    }
    return eval(s, OP_OK, (void (*)(void))cb, userdata, store_lua_delete, 5, args, NULL, 7);
}

int
store_sessions_hibernate(struct store_sessions *s, const char *id, const char *container,
                         const char *snapshot, store_sessions_cb *cb, void *userdata)
{
    char key[KEY_MAX], skey[KEY_MAX];
    const char *args[7] = {key, s->key_deadlines, skey,    s->key_snapshot_expiry,
                           id,  container,        snapshot};

    if (session_key(s, id, key) < 0 || store_key_snapshot(skey, KEY_MAX, s->prefix, snapshot) < 0) {
        return -ENAMETOOLONG;
    }
    return eval(s, OP_FLAG, (void (*)(void))cb, userdata, store_lua_hibernate, 4, args, NULL, 7);
}

int
store_sessions_wake(struct store_sessions *s, const char *id, const char *container, uint64_t epoch,
                    int64_t gen, uint64_t now_ms, const char *snapshot, store_sessions_cb *cb,
                    void *userdata)
{
    char key[KEY_MAX], e[24], g[24], now[24];
    const char *args[10] = {
        key, s->key_deadlines, s->key_snapshot_expiry, id, container, e, g, now, snapshot, s->node};

    if (session_key(s, id, key) < 0) {
        return -ENAMETOOLONG;
    }
    (void)snprintf(e, sizeof(e), "%llu", (unsigned long long)epoch);
    (void)snprintf(g, sizeof(g), "%lld", (long long)gen);
    (void)snprintf(now, sizeof(now), "%llu", (unsigned long long)now_ms);
    return eval(s, OP_FLAG, (void (*)(void))cb, userdata, store_lua_wake, 3, args, NULL, 10);
}

int
store_sessions_drop_snapshot(struct store_sessions *s, const char *snapshot, store_sessions_cb *cb,
                             void *userdata)
{
    static const char lua[] = "if redis.call('EXISTS', KEYS[1]) == 1 then\n"
                              "  redis.call('ZADD', KEYS[2], 0, ARGV[1])\n"
                              "end\n"
                              "return 1\n";
    char skey[KEY_MAX];
    const char *args[3] = {skey, s->key_snapshot_expiry, snapshot};

    if (store_key_snapshot(skey, KEY_MAX, s->prefix, snapshot) < 0) {
        return -ENAMETOOLONG;
    }
    return eval(s, OP_OK, (void (*)(void))cb, userdata, lua, 2, args, NULL, 3);
}

int
store_sessions_requeue(struct store_sessions *s, const char *id, uint64_t at_ms,
                       store_sessions_cb *cb, void *userdata)
{
    char key[KEY_MAX], at[24];
    const char *args[4] = {key, s->key_deadlines, id, at};

    if (session_key(s, id, key) < 0) {
        return -ENAMETOOLONG;
    }
    (void)snprintf(at, sizeof(at), "%llu", (unsigned long long)at_ms);
    return eval(s, OP_TOUCH, (void (*)(void))cb, userdata, store_lua_requeue, 2, args, NULL, 4);
}

int
store_sessions_history_push(struct store_sessions *s, const char *id, const char *entry, size_t len,
                            store_sessions_cb *cb, void *userdata)
{
    char key[KEY_MAX], hkey[KEY_MAX], max[16];
    const char *args[4] = {key, hkey, entry, max};
    size_t lens[4];

    if (session_key(s, id, key) < 0 ||
        store_key_session_history(hkey, KEY_MAX, s->prefix, id) < 0) {
        return -ENAMETOOLONG;
    }
    (void)snprintf(max, sizeof(max), "%u", STORE_HISTORY_MAX);
    lens[0] = strlen(key);
    lens[1] = strlen(hkey);
    lens[2] = len;
    lens[3] = strlen(max);
    return eval(s, OP_OK, (void (*)(void))cb, userdata, store_lua_history, 2, args, lens, 4);
}

int
store_sessions_history(struct store_sessions *s, const char *id, store_sessions_list_cb *cb,
                       void *userdata)
{
    static const char lua[] = "return redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)\n";
    char hkey[KEY_MAX], max[16];
    const char *args[2] = {hkey, max};

    if (store_key_session_history(hkey, KEY_MAX, s->prefix, id) < 0) {
        return -ENAMETOOLONG;
    }
    (void)snprintf(max, sizeof(max), "%u", STORE_HISTORY_MAX);
    return eval(s, OP_LIST, (void (*)(void))cb, userdata, lua, 1, args, NULL, 2);
}

int
store_sessions_claim_expired(struct store_sessions *s, uint64_t now_ms, unsigned max,
                             store_sessions_claim_cb *cb, void *userdata)
{
    char now[24], lim[16];
    const char *args[3] = {s->key_deadlines, now, lim};

    (void)snprintf(now, sizeof(now), "%llu", (unsigned long long)now_ms);
    (void)snprintf(lim, sizeof(lim), "%u", max);
    return eval(s, OP_CLAIM, (void (*)(void))cb, userdata, store_lua_claim, 1, args, NULL, 3);
}

int
store_sessions_load_all(struct store_sessions *s, store_sessions_load_cb *cb, void *userdata)
{
    char prefix[KEY_MAX];
    const char *args[3] = {s->key_set, s->key_deadlines, prefix};

    if (store_key_session(prefix, sizeof(prefix), s->prefix, "") < 0) {
        return -ENAMETOOLONG;
    }
    return eval(s, OP_LOAD, (void (*)(void))cb, userdata, store_lua_load, 2, args, NULL, 3);
}

struct store_sessions *
store_sessions_new(struct store_redis *redis, const char *prefix, const char *node)
{
    struct store_sessions *s = xcalloc(1, sizeof(*s));

    s->redis = redis;
    s->prefix = xstrdup(prefix);
    s->node = xstrdup(node);
    /* prefix <= 64 and node <= 64 bytes (cfg_validate): these always fit. */
    (void)store_key_node_sessions(s->key_set, sizeof(s->key_set), prefix, node);
    (void)store_key_node_deadlines(s->key_deadlines, sizeof(s->key_deadlines), prefix, node);
    (void)store_key_snapshots_expiry(s->key_snapshot_expiry, sizeof(s->key_snapshot_expiry),
                                     prefix);
    return s;
}

struct store_sessions *
store_sessions_free(struct store_sessions *s)
{
    if (s != NULL) {
        free(s->prefix);
        free(s->node);
        free(s);
    }
    return NULL;
}
