/* Session records; see sessions.h and schema.h for the key layout.
 *
 * Scripts are sent with EVAL (text each time; a few hundred bytes): simpler than EVALSHA with a
 * NOSCRIPT fallback, and Redis caches the compiled script by its hash anyway. Timestamps are
 * the daemon's wall clock: one node writes its own deadline set, so clocks of different daemons
 * never meet in one comparison. */
#include "sessions.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

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

/* KEYS: hash, node set, deadlines, tenant set, tenant admissions. ARGV: id, deadline,
 * field/value pairs. The session joins its tenant's set (store_sessions_admit() may have put it
 * there already) and is no longer an admission in flight. */
static const char create_lua[] = "redis.call('HSET', KEYS[1], unpack(ARGV, 3))\n"
                                 "redis.call('SADD', KEYS[2], ARGV[1])\n"
                                 "redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])\n"
                                 "redis.call('SADD', KEYS[4], ARGV[1])\n"
                                 "redis.call('ZREM', KEYS[5], ARGV[1])\n"
                                 "return 1\n";

/* KEYS: hash, node set, deadlines, tenant set, tenant admissions, its snapshot's hash, its
 * tenant's snapshot bytes. ARGV: id, deadline, field/value pairs. A hibernated record whose
 * snapshot record Redis lost too gets that back from what the session keeps of it (the bytes are
 * in the store; the sweep removes them with the session). The tenant's set gets it back too: a
 * Redis that restarted empty counts the tenant's sessions again as their nodes restore them. */
static const char restore_lua[] =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
    "redis.call('HSET', KEYS[1], unpack(ARGV, 3))\n"
    "redis.call('SADD', KEYS[2], ARGV[1])\n"
    "redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])\n"
    "redis.call('SADD', KEYS[4], ARGV[1])\n"
    "local f = {}\n"
    "for i = 3, #ARGV - 1, 2 do f[ARGV[i]] = ARGV[i + 1] end\n"
    "if f.state == 'hibernated' and f.snapshot ~= '' and f.snapshot_sha256 ~= '' and\n"
    "   redis.call('EXISTS', KEYS[6]) == 0 then\n"
    "  redis.call('HSET', KEYS[6], 'id', f.snapshot, 'tenant', f.tenant, 'session', ARGV[1],\n"
    "             'state', 'ready', 'size', f.snapshot_size, 'sha256', f.snapshot_sha256,\n"
    "             'created_at', f.last_active_at, 'expires_at', '0', 'manifest', '{}',\n"
    "             'hibernation', '1', 'charge', f.snapshot_size)\n"
    "  redis.call('INCRBY', KEYS[7], f.snapshot_size)\n"
    "  return 2\n"
    "end\n"
    "return 1\n";

/* A tenant's sessions across the cluster: the set of their ids (P tenant:T:sessions), kept by
 * the scripts that create, restore, delete and declare lost a session; the ids admitted but not
 * written yet are also in P tenant:T:admitted with the time of their admission (Redis's clock: no
 * two daemons' clocks meet). An admission past ADMIT_STALE_MS, whose node never wrote the record
 * (it crashed, or its create failed and the release was lost), goes at the next admission; a
 * member whose record is gone, lost or ending goes when the count reaches the bound (the scripts
 * that end, delete and declare lost a session take it out at once). KEYS: tenant set,
 * tenant admissions. ARGV: id, max, session key prefix. 1: admitted; 0: at max. */
#define ADMIT_STALE_MS "60000"
static const char admit_lua[] =
    "local now = redis.call('TIME')\n"
    "local t = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)\n"
    "for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', t - " ADMIT_STALE_MS ")) do\n"
    "  redis.call('ZREM', KEYS[2], id)\n"
    "  if redis.call('EXISTS', ARGV[3] .. id) == 0 then redis.call('SREM', KEYS[1], id) end\n"
    "end\n"
    "local max = tonumber(ARGV[2])\n"
    "if redis.call('SCARD', KEYS[1]) >= max then\n"
    "  for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do\n"
    "    local st = redis.call('HGET', ARGV[3] .. id, 'state')\n"
    "    if (not st and not redis.call('ZSCORE', KEYS[2], id)) or st == 'lost' or\n"
    "       st == 'ending' then\n"
    "      redis.call('SREM', KEYS[1], id)\n"
    "    end\n"
    "  end\n"
    "  if redis.call('SCARD', KEYS[1]) >= max then return 0 end\n"
    "end\n"
    "redis.call('SADD', KEYS[1], ARGV[1])\n"
    "redis.call('ZADD', KEYS[2], t, ARGV[1])\n"
    "return 1\n";

/* KEYS: tenant set, tenant admissions. ARGV: id. An admission whose create failed. */
static const char unadmit_lua[] = "if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then\n"
                                  "  redis.call('SREM', KEYS[1], ARGV[1])\n"
                                  "end\n"
                                  "return 1\n";

/* KEYS: hash, deadlines. ARGV: id, now. A session the reaper has claimed (no longer in the
 * deadline set) is never brought back. */
static const char touch_lua[] =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'active' then return 0 end\n"
    "if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end\n"
    "local idle = tonumber(redis.call('HGET', KEYS[1], 'idle_timeout_s')) * 1000\n"
    "local exp = tonumber(redis.call('HGET', KEYS[1], 'expires_at'))\n"
    "local d = tonumber(ARGV[2]) + idle\n"
    "if exp < d then d = exp end\n"
    "redis.call('HSET', KEYS[1], 'last_active_at', ARGV[2])\n"
    "redis.call('ZADD', KEYS[2], d, ARGV[1])\n"
    "return 1\n";

/* A hibernated session's snapshot goes to the snapshot sweep when its record ends or goes
 * (KEYS[n]: the sweep's zset). */
#define DROP_SNAPSHOT_LUA(n)                               \
    "local sn = redis.call('HGET', KEYS[1], 'snapshot')\n" \
    "if sn and sn ~= '' then redis.call('ZADD', KEYS[" n "], 0, sn) end\n"

/* The session leaves its tenant's count (KEYS[1]: its hash; ARGV[n]: the tenant key prefix). */
#define TENANT_LEAVE_LUA(n)                             \
    "local t = redis.call('HGET', KEYS[1], 'tenant')\n" \
    "if t then redis.call('SREM', ARGV[" n "] .. t .. ':sessions', ARGV[1]) end\n"

/* KEYS: hash, deadlines, snapshot expiry. ARGV: id, tenant key prefix. An ending session no
 * longer counts towards its tenant's max_sessions (nor does it on its node). */
static const char ending_lua[] = "redis.call('ZREM', KEYS[2], ARGV[1])\n"
                                 "if redis.call('EXISTS', KEYS[1]) == 1 then\n"
                                 "  redis.call('HSET', KEYS[1], 'state', 'ending')\n"
                                 "end\n" TENANT_LEAVE_LUA("2") DROP_SNAPSHOT_LUA("3") "return 1\n";

/* KEYS: hash, node set, deadlines, history, snapshot expiry. ARGV: id, tenant key prefix (the
 * tenant's set is named after the record's tenant). */
static const char delete_lua[] =
    DROP_SNAPSHOT_LUA("5") "redis.call('ZREM', KEYS[3], ARGV[1])\n"
                           "redis.call('SREM', KEYS[2], ARGV[1])\n" TENANT_LEAVE_LUA(
                               "2") "redis.call('DEL', KEYS[1], KEYS[4])\n"
                                    "return 1\n";

/* KEYS: hash, deadlines, snapshot hash, snapshot expiry. ARGV: id, container, snapshot id. The
 * live session (still active on that container) becomes hibernated on its ready snapshot, which
 * loses its own expiry (the session's end hands it to the sweep); its deadline is its end of
 * life. 0: the session is no longer that live one; -1: the snapshot is not ready. */
static const char hibernate_lua[] =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'active' or\n"
    "   redis.call('HGET', KEYS[1], 'container') ~= ARGV[2] then return 0 end\n"
    "if redis.call('HGET', KEYS[3], 'state') ~= 'ready' then return -1 end\n"
    "redis.call('HSET', KEYS[1], 'state', 'hibernated', 'snapshot', ARGV[3], 'container', '',\n"
    "           'snapshot_size', redis.call('HGET', KEYS[3], 'size'),\n"
    "           'snapshot_sha256', redis.call('HGET', KEYS[3], 'sha256'))\n"
    "redis.call('ZADD', KEYS[2], redis.call('HGET', KEYS[1], 'expires_at'), ARGV[1])\n"
    "redis.call('HSET', KEYS[3], 'expires_at', '0')\n"
    "redis.call('ZREM', KEYS[4], ARGV[3])\n"
    "return 1\n";

/* KEYS: hash, deadlines, snapshot expiry. ARGV: id, container, epoch, gen, now, snapshot id, this
 * node. The hibernated session is live again on container; its snapshot goes to the sweep. 0: it
 * is no longer hibernated on that snapshot (ended meanwhile), or no longer this node's (a node
 * that was declared lost cannot wake what the claimer adopted). */
static const char wake_lua[] =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'hibernated' or\n"
    "   redis.call('HGET', KEYS[1], 'snapshot') ~= ARGV[6] or\n"
    "   redis.call('HGET', KEYS[1], 'node') ~= ARGV[7] then return 0 end\n"
    "redis.call('HSET', KEYS[1], 'state', 'active', 'container', ARGV[2], 'epoch', ARGV[3],\n"
    "           'gen', ARGV[4], 'last_active_at', ARGV[5], 'snapshot', '', 'snapshot_size', '0',\n"
    "           'snapshot_sha256', '')\n"
    "local d = tonumber(ARGV[5]) + tonumber(redis.call('HGET', KEYS[1], 'idle_timeout_s')) * 1000\n"
    "local exp = tonumber(redis.call('HGET', KEYS[1], 'expires_at'))\n"
    "if exp < d then d = exp end\n"
    "redis.call('ZADD', KEYS[2], d, ARGV[1])\n"
    "redis.call('ZADD', KEYS[3], 0, ARGV[6])\n"
    "return 1\n";

/* KEYS: hash, deadlines. ARGV: id, at. An active session the reaper claimed gets a deadline
 * again (its idle hibernation failed for now: it is tried again at). */
static const char requeue_lua[] =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'active' then return 0 end\n"
    "redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])\n"
    "return 1\n";

/* KEYS: hash, history. ARGV: entry, max. Only while the record exists: an execution that ends
 * with its session (answered after the delete went out) must not leave a list behind. */
static const char history_lua[] = "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end\n"
                                  "redis.call('LPUSH', KEYS[2], ARGV[1])\n"
                                  "redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[2]) - 1)\n"
                                  "return 1\n";

/* KEYS: deadlines. ARGV: now, max. */
static const char claim_lua[] =
    "local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])\n"
    "for _, id in ipairs(ids) do redis.call('ZREM', KEYS[1], id) end\n"
    "return ids\n";

/* KEYS: node set, deadlines. ARGV: session key prefix. An active or hibernated record that lost
 * its deadline (a daemon died between claiming it and ending or hibernating the session) gets it
 * back, so it is reaped (a hibernated one at its end of life). */
static const char load_lua[] =
    "local out = {}\n"
    "for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do\n"
    "  local k = ARGV[1] .. id\n"
    "  local st = redis.call('HGET', k, 'state')\n"
    "  if (st == 'active' or st == 'hibernated') and not redis.call('ZSCORE', KEYS[2], id) then\n"
    "    local exp = tonumber(redis.call('HGET', k, 'expires_at'))\n"
    "    local d = exp\n"
    "    if st == 'active' then\n"
    "      d = tonumber(redis.call('HGET', k, 'last_active_at')) +\n"
    "          tonumber(redis.call('HGET', k, 'idle_timeout_s')) * 1000\n"
    "      if exp < d then d = exp end\n"
    "    end\n"
    "    redis.call('ZADD', KEYS[2], d, id)\n"
    "  end\n"
    "  out[#out + 1] = redis.call('HGETALL', k)\n"
    "end\n"
    "return out\n";

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

/* KEYS: hash, node set, deadlines, tenant set, tenant admissions (and restore_lua's two: the
 * snapshot's hash and its tenant's bytes). */
static int
write_record(struct store_sessions *s, const char *script, const struct store_session_rec *rec,
             store_sessions_cb *cb, void *userdata)
{
    char key[KEY_MAX], skey[KEY_MAX], bkey[KEY_MAX], tset[KEY_MAX], tadm[KEY_MAX], deadline[24],
        scratch[STORE_SCRATCH][24];
    const char *args[9 + STORE_FIELDS_ARGV];
    size_t lens[9 + STORE_FIELDS_ARGV];
    int n = 0, nkeys = script == restore_lua ? 7 : 5;

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
    return write_record(s, create_lua, rec, cb, userdata);
}

int
store_sessions_restore(struct store_sessions *s, const struct store_session_rec *rec,
                       store_sessions_cb *cb, void *userdata)
{
    return write_record(s, restore_lua, rec, cb, userdata);
}

/* KEYS: tenant set, tenant admissions; argv[0] the id (admit_lua's and unadmit_lua's). */
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
    return eval(s, OP_FLAG, (void (*)(void))cb, userdata, admit_lua, 2, args, NULL, 5);
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
    return eval(s, OP_OK, (void (*)(void))cb, userdata, unadmit_lua, 2, args, NULL, 3);
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
    return eval(s, OP_TOUCH, (void (*)(void))cb, userdata, touch_lua, 2, args, NULL, 4);
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
    return eval(s, OP_OK, (void (*)(void))cb, userdata, ending_lua, 3, args, NULL, 5);
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
    return eval(s, OP_OK, (void (*)(void))cb, userdata, delete_lua, 5, args, NULL, 7);
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
    return eval(s, OP_FLAG, (void (*)(void))cb, userdata, hibernate_lua, 4, args, NULL, 7);
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
    return eval(s, OP_FLAG, (void (*)(void))cb, userdata, wake_lua, 3, args, NULL, 10);
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
    return eval(s, OP_TOUCH, (void (*)(void))cb, userdata, requeue_lua, 2, args, NULL, 4);
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
    return eval(s, OP_OK, (void (*)(void))cb, userdata, history_lua, 2, args, lens, 4);
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
    return eval(s, OP_CLAIM, (void (*)(void))cb, userdata, claim_lua, 1, args, NULL, 3);
}

int
store_sessions_load_all(struct store_sessions *s, store_sessions_load_cb *cb, void *userdata)
{
    char prefix[KEY_MAX];
    const char *args[3] = {s->key_set, s->key_deadlines, prefix};

    if (store_key_session(prefix, sizeof(prefix), s->prefix, "") < 0) {
        return -ENAMETOOLONG;
    }
    return eval(s, OP_LOAD, (void (*)(void))cb, userdata, load_lua, 2, args, NULL, 3);
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
