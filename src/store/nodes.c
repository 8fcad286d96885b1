/* The node registry in Redis; see nodes.h. */
#include "store/nodes.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "store/schema.h"
#include "util/macro.h"
#include "util/parse.h"
#include "util/utf8.h"

#define KEY_MAX          256
#define NODE_KEEP_MS     86400000ull /* a record outlives its last heartbeat by a day */
#define NODE_FIELDS_ARGV 20

struct store_nodes {
    struct store_redis *redis; /* borrowed */
    char *prefix;
    char key_nodes[KEY_MAX];
};

/* KEYS: info hash, nodes zset, its lost marker. ARGV: id, heartbeat_at, keep_ms, field/value
 * pairs. Returns who declared this node lost ("" when nobody did), and forgets that. */
static const char heartbeat_lua[] = "redis.call('DEL', KEYS[1])\n"
                                    "redis.call('HSET', KEYS[1], unpack(ARGV, 4))\n"
                                    "redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
                                    "redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])\n"
                                    "local lost = redis.call('GET', KEYS[3])\n"
                                    "if not lost then return '' end\n"
                                    "redis.call('DEL', KEYS[3])\n"
                                    "return lost\n";

/* KEYS: nodes zset, the lost node's marker, session set and deadlines, the claimer's session set
 * and deadlines. ARGV: lost id, its heartbeat as listed, claimer id, session key prefix, history
 * key prefix, tombstone ms, tenant key prefix. Claims the node once (the marker, NX) if its last
 * heartbeat is still the one listed (it did not come back meanwhile); then its hibernated sessions
 * become the claimer's and every other one a tombstone ("lost", no container, gone after tombstone
 * ms) that its tenant no longer counts.
 * Returns {0} (not claimed), or {1, {id, tenant, ...} ended, {id...} adopted}. */
static const char claim_lua[] =
    "local hb = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
    "if not hb or tonumber(hb) ~= tonumber(ARGV[2]) then return {0} end\n"
    "if not redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', ARGV[6]) then return {0} end\n"
    "local ended, adopted = {}, {}\n"
    "for _, id in ipairs(redis.call('SMEMBERS', KEYS[3])) do\n"
    "  local k = ARGV[4] .. id\n"
    "  local f = redis.call('HMGET', k, 'state', 'tenant')\n"
    "  if f[1] == 'hibernated' then\n"
    "    redis.call('HSET', k, 'node', ARGV[3])\n"
    "    redis.call('SADD', KEYS[5], id)\n"
    "    local d = redis.call('ZSCORE', KEYS[4], id)\n"
    "    if d then redis.call('ZADD', KEYS[6], d, id) end\n"
    "    adopted[#adopted + 1] = id\n"
    "  elseif f[1] then\n"
    "    if f[2] then redis.call('SREM', ARGV[7] .. f[2] .. ':sessions', id) end\n"
    "    redis.call('HSET', k, 'state', 'lost', 'container', '')\n"
    "    redis.call('PEXPIRE', k, ARGV[6])\n"
    "    redis.call('PEXPIRE', ARGV[5] .. id, ARGV[6])\n"
    "    ended[#ended + 1] = id\n"
    "    ended[#ended + 1] = f[2] or ''\n"
    "  end\n"
    "end\n"
    "redis.call('DEL', KEYS[3], KEYS[4])\n"
    "return {1, ended, adopted}\n";

/* KEYS: nodes zset. ARGV: info key prefix, oldest heartbeat kept, max. Entries older than a day
 * (their records expired) are dropped from the zset. */
static const char list_lua[] =
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2])\n"
    "local out = {}\n"
    "for _, id in ipairs(redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1)) do\n"
    "  local h = redis.call('HGETALL', ARGV[1] .. id .. ':info')\n"
    "  if #h > 0 then out[#out + 1] = h else redis.call('ZREM', KEYS[1], id) end\n"
    "end\n"
    "return out\n";

/* ---- records (pure) -------------------------------------------------------------------------- */

void
store_node_rec_done(struct store_node_rec *rec)
{
    free(rec->capacity);
    rec->capacity = NULL;
}

bool
store_node_live(const struct store_node_rec *rec, uint64_t now_ms)
{
    return !rec->stopped &&
           (now_ms < rec->heartbeat_at || now_ms - rec->heartbeat_at < rec->ttl_ms);
}

static bool
is(const char *k, size_t n, const char *name)
{
    return strlen(name) == n && memcmp(k, name, n) == 0;
}

/* A string field into out (n bytes with the NUL): -EPROTO when too long, holding a NUL or not
 * UTF-8. */
static int
str_field(char *out, size_t n, const char *v, size_t len)
{
    if (len >= n || memchr(v, '\0', len) != NULL || !utf8_valid(v, len)) {
        return -EPROTO;
    }
    memcpy(out, v, len);
    out[len] = '\0';
    return 0;
}

static int
uint_field(unsigned *out, const char *v, size_t len)
{
    uint64_t u;

    if (parse_u64n(v, len, &u) < 0 || u > UINT32_MAX) {
        return -EPROTO;
    }
    *out = (unsigned)u;
    return 0;
}

/* One pair into r; *seen gets a bit for each required field. */
static int
parse_pair(struct store_node_rec *r, const char *k, size_t kn, const char *v, size_t vn,
           unsigned *seen)
{
    if (is(k, kn, "id")) {
        *seen |= 1u;
        return str_field(r->id, sizeof(r->id), v, vn);
    }
    if (is(k, kn, "url")) {
        *seen |= 2u;
        return str_field(r->url, sizeof(r->url), v, vn);
    }
    if (is(k, kn, "started_at")) {
        *seen |= 4u;
        return parse_u64n(v, vn, &r->started_at) < 0 ? -EPROTO : 0;
    }
    if (is(k, kn, "heartbeat_at")) {
        *seen |= 8u;
        return parse_u64n(v, vn, &r->heartbeat_at) < 0 ? -EPROTO : 0;
    }
    if (is(k, kn, "ttl_ms")) {
        *seen |= 16u;
        return uint_field(&r->ttl_ms, v, vn);
    }
    if (is(k, kn, "version")) {
        return str_field(r->version, sizeof(r->version), v, vn);
    }
    if (is(k, kn, "draining") || is(k, kn, "stopped")) {
        if (!is(v, vn, "0") && !is(v, vn, "1")) {
            return -EPROTO;
        }
        *(is(k, kn, "draining") ? &r->draining : &r->stopped) = is(v, vn, "1");
        return 0;
    }
    if (is(k, kn, "sessions")) {
        return uint_field(&r->sessions, v, vn);
    }
    if (is(k, kn, "capacity")) {
        if (vn > STORE_NODE_CAPACITY_MAX || memchr(v, '\0', vn) != NULL || !utf8_valid(v, vn)) {
            return -EPROTO;
        }
        free(r->capacity);
        r->capacity = xstrndup(v, vn);
    }
    return 0; /* unknown fields: a newer daemon's */
}

int
store_node_parse(const char *const *kv, const size_t *lens, size_t n, struct store_node_rec *rec)
{
    struct store_node_rec r = {0};
    unsigned seen = 0;

    if (n % 2 != 0) {
        return -EPROTO;
    }
    for (size_t i = 0; i < n; i += 2) {
        if (parse_pair(&r, kv[i], lens[i], kv[i + 1], lens[i + 1], &seen) < 0) {
            store_node_rec_done(&r);
            return -EPROTO;
        }
    }
    if (seen != 31u || !str_is_name(r.id, 64) || r.url[0] == '\0') {
        store_node_rec_done(&r);
        return -EPROTO;
    }
    if (r.capacity == NULL) {
        r.capacity = xstrdup("{}");
    }
    *rec = r;
    return 0;
}

/* ---- scripts --------------------------------------------------------------------------------- */

enum op_kind {
    OP_BEAT,
    OP_LIST,
    OP_CLAIM,
};

struct op {
    enum op_kind kind;
    void (*cb)(void);
    void *userdata;
};

static int
parse_rec(const char *const *kv, const size_t *lens, size_t n, void *rec)
{
    return store_node_parse(kv, lens, n, rec);
}

/* One HGETALL reply into recs[*n] when it parses. */
static void
take_hash(const redisReply *h, struct store_node_rec *recs, size_t *n)
{
    if (store_redis_hash(h, parse_rec, &recs[*n]) == 0) {
        (*n)++;
    }
}

static void claim_reply(int r, const redisReply *reply, struct op *op);

static void
on_reply(int r, redisReply *reply, void *userdata)
{
    struct op *op = userdata;
    struct store_node_rec *recs = NULL;
    size_t n = 0;

    if (r == 0 && reply->type == REDIS_REPLY_ERROR) {
        r = -EPROTO;
    }
    if (op->kind == OP_CLAIM) {
        claim_reply(r, reply, op);
        return;
    }
    if (op->kind == OP_BEAT) {
        const char *lost = NULL;

        if (r == 0 && reply->type == REDIS_REPLY_STRING && strlen(reply->str) == reply->len) {
            lost = reply->str;
        } else if (r == 0) {
            r = -EPROTO;
        }
        ((store_nodes_beat_cb *)op->cb)(r, lost != NULL && lost[0] != '\0' ? lost : NULL,
                                        op->userdata);
        free(op);
        return;
    }
    if (r == 0 && reply->type != REDIS_REPLY_ARRAY) {
        r = -EPROTO;
    }
    if (r == 0) {
        recs = xcalloc(reply->elements ? reply->elements : 1, sizeof(*recs));
        for (size_t i = 0; i < reply->elements; i++) {
            take_hash(reply->element[i], recs, &n);
        }
    }
    ((store_nodes_list_cb *)op->cb)(r, recs, n, op->userdata);
    for (size_t i = 0; i < n; i++) {
        store_node_rec_done(&recs[i]);
    }
    free(recs);
    free(op);
}

static int
command(struct store_nodes *s, enum op_kind kind, void (*cb)(void), void *userdata, int argc,
        const char **argv)
{
    size_t lens[9 + NODE_FIELDS_ARGV];
    struct op *op;
    int r;

    for (int i = 0; i < argc; i++) {
        lens[i] = strlen(argv[i]);
    }
    op = xcalloc(1, sizeof(*op));
    op->kind = kind;
    op->cb = cb;
    op->userdata = userdata;
    r = store_redis_command(s->redis, on_reply, op, argc, argv, lens);
    if (r < 0) {
        free(op);
    }
    return r;
}

static int
info_key(const struct store_nodes *s, char out[KEY_MAX], const char *id)
{
    int n = snprintf(out, KEY_MAX, "%snode:%s:info", s->prefix, id);

    return n < 0 || n >= KEY_MAX ? -ENAMETOOLONG : 0;
}

struct store_nodes *
store_nodes_new(struct store_redis *redis, const char *prefix)
{
    struct store_nodes *s = xcalloc(1, sizeof(*s));

    s->redis = redis;
    s->prefix = xstrdup(prefix);
    (void)snprintf(s->key_nodes, sizeof(s->key_nodes), "%snodes", prefix);
    return s;
}

struct store_nodes *
store_nodes_free(struct store_nodes *s)
{
    if (s != NULL) {
        free(s->prefix);
        free(s);
    }
    return NULL;
}

static int
lost_key(const struct store_nodes *s, char out[KEY_MAX], const char *id)
{
    int n = snprintf(out, KEY_MAX, "%snode:%s:lost", s->prefix, id);

    return n < 0 || n >= KEY_MAX ? -ENAMETOOLONG : 0;
}

int
store_nodes_heartbeat(struct store_nodes *s, const struct store_node_rec *rec,
                      store_nodes_beat_cb *cb, void *userdata)
{
    char k[KEY_MAX], lk[KEY_MAX], started[24], beat[24], ttl[16], sessions[16], keep[24];
    const char *argv[] = {"EVAL",
                          heartbeat_lua,
                          "3",
                          k,
                          s->key_nodes,
                          lk,
                          rec->id,
                          beat,
                          keep,
                          "id",
                          rec->id,
                          "url",
                          rec->url,
                          "version",
                          rec->version,
                          "draining",
                          rec->draining ? "1" : "0",
                          "stopped",
                          rec->stopped ? "1" : "0",
                          "started_at",
                          started,
                          "heartbeat_at",
                          beat,
                          "ttl_ms",
                          ttl,
                          "sessions",
                          sessions,
                          "capacity",
                          rec->capacity != NULL ? rec->capacity : "{}"};

    _Static_assert(ELEMENTSOF(argv) <= 9 + NODE_FIELDS_ARGV, "command()'s lengths hold argv");
    if (!str_is_name(rec->id, 64) || info_key(s, k, rec->id) < 0 || lost_key(s, lk, rec->id) < 0) {
        return -EINVAL;
    }
    (void)snprintf(started, sizeof(started), "%llu", (unsigned long long)rec->started_at);
    (void)snprintf(beat, sizeof(beat), "%llu", (unsigned long long)rec->heartbeat_at);
    (void)snprintf(ttl, sizeof(ttl), "%u", rec->ttl_ms);
    (void)snprintf(sessions, sizeof(sessions), "%u", rec->sessions);
    (void)snprintf(keep, sizeof(keep), "%llu", NODE_KEEP_MS);
    return command(s, OP_BEAT, (void (*)(void))cb, userdata, (int)ELEMENTSOF(argv), argv);
}

int
store_nodes_list(struct store_nodes *s, uint64_t now_ms, store_nodes_list_cb *cb, void *userdata)
{
    char kp[KEY_MAX], oldest[24], max[16];
    const char *argv[] = {"EVAL", list_lua, "1", s->key_nodes, kp, oldest, max};
    int n = snprintf(kp, sizeof(kp), "%snode:", s->prefix);

    if (n < 0 || n >= (int)sizeof(kp)) {
        return -ENAMETOOLONG;
    }
    (void)snprintf(oldest, sizeof(oldest), "%llu",
                   (unsigned long long)(now_ms > NODE_KEEP_MS ? now_ms - NODE_KEEP_MS : 0));
    (void)snprintf(max, sizeof(max), "%u", STORE_NODES_MAX);
    return command(s, OP_LIST, (void (*)(void))cb, userdata, (int)ELEMENTSOF(argv), argv);
}

/* ---- claiming a lost node -------------------------------------------------------------------- */

/* An array reply's string elements (NULL when one is no string). */
static const char **
strings_of(const redisReply *a, size_t *n)
{
    const char **out = xcalloc(a->elements ? a->elements : 1, sizeof(*out));

    for (size_t i = 0; i < a->elements; i++) {
        const redisReply *e = a->element[i];

        if (e->type != REDIS_REPLY_STRING || strlen(e->str) != e->len) {
            free(out);
            return NULL;
        }
        out[i] = e->str;
    }
    *n = a->elements;
    return out;
}

static void
claim_reply(int r, const redisReply *reply, struct op *op)
{
    const char **ended = NULL, **adopted = NULL;
    size_t n_ended = 0, n_adopted = 0;
    bool claimed = false;

    if (r == 0 && (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 ||
                   reply->element[0]->type != REDIS_REPLY_INTEGER)) {
        r = -EPROTO;
    }
    if (r == 0 && reply->element[0]->integer == 1) {
        claimed = true;
        if (reply->elements != 3 || reply->element[1]->type != REDIS_REPLY_ARRAY ||
            reply->element[2]->type != REDIS_REPLY_ARRAY ||
            (ended = strings_of(reply->element[1], &n_ended)) == NULL || n_ended % 2 != 0 ||
            (adopted = strings_of(reply->element[2], &n_adopted)) == NULL) {
            r = -EPROTO; /* claimed all the same: the caller says so */
            n_ended = n_adopted = 0;
        }
    }
    ((store_nodes_claim_cb *)op->cb)(
        r, claimed,
        &(struct store_nodes_claimed){
            .ended = ended, .n_ended = n_ended / 2, .adopted = adopted, .n_adopted = n_adopted},
        op->userdata);
    free(ended);
    free(adopted);
    free(op);
}

int
store_nodes_claim(struct store_nodes *s, const char *lost, uint64_t heartbeat_at,
                  const char *claimer, unsigned tombstone_ms, store_nodes_claim_cb *cb,
                  void *userdata)
{
    char lk[KEY_MAX], ls[KEY_MAX], ld[KEY_MAX], cs[KEY_MAX], cd[KEY_MAX], sp[KEY_MAX], hp[KEY_MAX],
        tp[KEY_MAX], beat[24], keep[16];
    const char *argv[] = {"EVAL", claim_lua, "6",  s->key_nodes, lk, ls, ld,   cs,
                          cd,     lost,      beat, claimer,      sp, hp, keep, tp};

    if (!str_is_name(lost, 64) || !str_is_name(claimer, 64) || lost_key(s, lk, lost) < 0 ||
        store_key_node_sessions(ls, KEY_MAX, s->prefix, lost) < 0 ||
        store_key_node_deadlines(ld, KEY_MAX, s->prefix, lost) < 0 ||
        store_key_node_sessions(cs, KEY_MAX, s->prefix, claimer) < 0 ||
        store_key_node_deadlines(cd, KEY_MAX, s->prefix, claimer) < 0 ||
        store_key_session(sp, KEY_MAX, s->prefix, "") < 0 ||
        store_key_session_history(hp, KEY_MAX, s->prefix, "") < 0 ||
        store_key_tenant_prefix(tp, KEY_MAX, s->prefix) < 0) {
        return -EINVAL;
    }
    (void)snprintf(beat, sizeof(beat), "%llu", (unsigned long long)heartbeat_at);
    (void)snprintf(keep, sizeof(keep), "%u", tombstone_ms);
    return command(s, OP_CLAIM, (void (*)(void))cb, userdata, (int)ELEMENTSOF(argv), argv);
}
