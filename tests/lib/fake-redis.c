/* Fake Redis; see fake-redis.h.
 *
 * The store is a flat list of keys, each a hash, a set, a sorted set or a list of binary-safe
 * strings; linear search (tests hold a handful of keys). Each known script is a C function
 * doing what its Lua does with the same keys and arguments, so the records the daemon reads
 * back are the ones it wrote. Replies are encoded here (writing RESP is trivial); requests are
 * parsed only by hiredis's redisReader. */
#include "fake-redis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <hiredis/hiredis.h>

#include "util/macro.h"
#include "util/parse.h"

enum ktype {
    K_HASH,
    K_SET,
    K_ZSET,
    K_LIST,
    K_STR, /* one item: its value in a */
};

struct str {
    char *p;
    size_t n;
};

struct item {
    struct str a; /* hash field, member, list element */
    struct str b; /* hash value */
    double score; /* zset */
};

struct key {
    char *name;
    enum ktype type;
    struct item *items;
    size_t n;
};

struct rconn {
    struct fake_redis *fr;
    struct bufferevent *bev;
    redisReader *reader;
    TAILQ_ENTRY(rconn) link;
};

struct fake_redis {
    struct event_base *base;
    struct evconnlistener *lis;
    char dir[64];
    char path[108];
    char url[128];
    TAILQ_HEAD(, rconn) conns;
    struct key *keys;
    size_t n_keys;
    bool down, stalled;
    unsigned calls[16];
    unsigned total;
    unsigned plain; /* GET, SET, DEL, PEXPIRE, HMGET answered */
};

/* Script names, in the order they are recognised (the more specific first). */
static const char *const script_names[] = {
    "restore", "create", "touch",   "epoch", "ending",    "delete",     "history_push", "history",
    "claim",   "admit",  "unadmit", "load",  "heartbeat", "nodes_list", "nodes_claim",  NULL};

static void *
xalloc0(size_t n)
{
    void *p = calloc(1, n ? n : 1);

    if (p == NULL) {
        abort();
    }
    return p;
}

static struct str
str_dup(const char *p, size_t n)
{
    struct str s = {xalloc0(n + 1), n};

    memcpy(s.p, p, n);
    return s;
}

static bool
str_is(const struct str *s, const char *p, size_t n)
{
    return s->n == n && memcmp(s->p, p, n) == 0;
}

/* ---- the store --------------------------------------------------------------------------- */

static struct key *
key_find(const struct fake_redis *fr, const char *name)
{
    for (size_t i = 0; i < fr->n_keys; i++) {
        if (strcmp(fr->keys[i].name, name) == 0) {
            return &fr->keys[i];
        }
    }
    return NULL;
}

static struct key *
key_get(struct fake_redis *fr, const char *name, enum ktype type)
{
    struct key *k = key_find(fr, name);

    if (k != NULL) {
        return k;
    }
    fr->keys = realloc(fr->keys, (fr->n_keys + 1) * sizeof(*fr->keys));
    if (fr->keys == NULL) {
        abort();
    }
    k = &fr->keys[fr->n_keys++];
    *k = (struct key){.name = strdup(name), .type = type};
    return k;
}

static void
item_free(struct item *it)
{
    free(it->a.p);
    free(it->b.p);
}

static void
key_del(struct fake_redis *fr, const char *name)
{
    struct key *k = key_find(fr, name);

    if (k == NULL) {
        return;
    }
    for (size_t i = 0; i < k->n; i++) {
        item_free(&k->items[i]);
    }
    free(k->items);
    free(k->name);
    *k = fr->keys[--fr->n_keys];
}

static struct item *
item_find(const struct key *k, const char *a, size_t n)
{
    for (size_t i = 0; k != NULL && i < k->n; i++) {
        if (str_is(&k->items[i].a, a, n)) {
            return &k->items[i];
        }
    }
    return NULL;
}

static struct item *
item_add(struct key *k, const char *a, size_t n)
{
    struct item *it = item_find(k, a, n);

    if (it != NULL) {
        return it;
    }
    k->items = realloc(k->items, (k->n + 1) * sizeof(*k->items));
    if (k->items == NULL) {
        abort();
    }
    it = &k->items[k->n++];
    *it = (struct item){.a = str_dup(a, n)};
    return it;
}

/* Removes a member; a key left empty goes, as in Redis. */
static void
item_rem(struct fake_redis *fr, const char *name, const char *a, size_t n)
{
    struct key *k = key_find(fr, name);
    struct item *it = item_find(k, a, n);

    if (it == NULL) {
        return;
    }
    item_free(it);
    *it = k->items[--k->n];
    if (k->n == 0) {
        key_del(fr, name);
    }
}

static void
hset(struct fake_redis *fr, const char *key, const char *f, size_t fn, const char *v, size_t vn)
{
    struct item *it = item_add(key_get(fr, key, K_HASH), f, fn);

    free(it->b.p);
    it->b = str_dup(v, vn);
}

static const char *
hget(const struct fake_redis *fr, const char *key, const char *field)
{
    struct item *it = item_find(key_find(fr, key), field, strlen(field));

    return it ? it->b.p : NULL;
}

static uint64_t
hget_u64(const struct fake_redis *fr, const char *key, const char *field)
{
    const char *v = hget(fr, key, field);
    uint64_t n = 0;

    if (v != NULL) {
        (void)parse_u64(v, &n);
    }
    return n;
}

/* ---- replies ----------------------------------------------------------------------------- */

static void
out_int(struct evbuffer *o, long long v)
{
    (void)evbuffer_add_printf(o, ":%lld\r\n", v);
}

static void
out_bulk(struct evbuffer *o, const char *p, size_t n)
{
    (void)evbuffer_add_printf(o, "$%zu\r\n", n);
    (void)evbuffer_add(o, p, n);
    (void)evbuffer_add(o, "\r\n", 2);
}

static void
out_err(struct evbuffer *o, const char *msg)
{
    (void)evbuffer_add_printf(o, "-ERR %s\r\n", msg);
}

/* ---- the scripts (src/store/sessions.c) -------------------------------------------------- */

struct eval {
    struct fake_redis *fr;
    struct evbuffer *out;
    const char *keys[8];
    int nkeys;
    redisReply **argv; /* ARGV[1..] */
    int nargs;
};

static const char *
arg(const struct eval *e, int i) /* ARGV[i], 1-based */
{
    return i >= 1 && i <= e->nargs ? e->argv[i - 1]->str : "";
}

static size_t
arglen(const struct eval *e, int i)
{
    return i >= 1 && i <= e->nargs ? e->argv[i - 1]->len : 0;
}

static void
zadd(struct fake_redis *fr, const char *key, const char *score, const char *m, size_t n)
{
    uint64_t v = 0;

    (void)parse_u64(score, &v);
    item_add(key_get(fr, key, K_ZSET), m, n)->score = (double)v;
}

/* KEYS: hash, node set, deadlines, tenant set, tenant admissions. ARGV: id, deadline,
 * field/value pairs. */
static void
script_create(struct eval *e, bool restore)
{
    if (restore && key_find(e->fr, e->keys[0]) != NULL) {
        out_int(e->out, 0);
        return;
    }
    for (int i = 3; i + 1 <= e->nargs; i += 2) {
        hset(e->fr, e->keys[0], arg(e, i), arglen(e, i), arg(e, i + 1), arglen(e, i + 1));
    }
    item_add(key_get(e->fr, e->keys[1], K_SET), arg(e, 1), arglen(e, 1));
    zadd(e->fr, e->keys[2], arg(e, 2), arg(e, 1), arglen(e, 1));
    if (e->nkeys >= 5) {
        item_add(key_get(e->fr, e->keys[3], K_SET), arg(e, 1), arglen(e, 1));
        item_rem(e->fr, e->keys[4], arg(e, 1), arglen(e, 1));
    }
    out_int(e->out, 1);
}

/* KEYS: tenant set, tenant admissions. ARGV: id, max, session key prefix. The real script also
 * drops stale members at the bound; this one counts the set as it is. */
static void
script_admit(struct eval *e)
{
    const struct key *k = key_find(e->fr, e->keys[0]);
    uint64_t max = 0;

    (void)parse_u64(arg(e, 2), &max);
    if (k != NULL && k->n >= max) {
        out_int(e->out, 0);
        return;
    }
    item_add(key_get(e->fr, e->keys[0], K_SET), arg(e, 1), arglen(e, 1));
    zadd(e->fr, e->keys[1], "0", arg(e, 1), arglen(e, 1));
    out_int(e->out, 1);
}

/* KEYS: tenant set, tenant admissions. ARGV: id. */
static void
script_unadmit(struct eval *e)
{
    if (item_find(key_find(e->fr, e->keys[1]), arg(e, 1), arglen(e, 1)) != NULL) {
        item_rem(e->fr, e->keys[1], arg(e, 1), arglen(e, 1));
        item_rem(e->fr, e->keys[0], arg(e, 1), arglen(e, 1));
    }
    out_int(e->out, 1);
}

/* KEYS: hash, deadlines. ARGV: id, now. */
static void
script_touch(struct eval *e)
{
    const char *state = hget(e->fr, e->keys[0], "state");
    uint64_t now = 0, d;
    char v[24];

    if (state == NULL || strcmp(state, "active") != 0 ||
        item_find(key_find(e->fr, e->keys[1]), arg(e, 1), arglen(e, 1)) == NULL) {
        out_int(e->out, 0);
        return;
    }
    (void)parse_u64(arg(e, 2), &now);
    d = now + hget_u64(e->fr, e->keys[0], "idle_timeout_s") * 1000;
    d = MIN(d, hget_u64(e->fr, e->keys[0], "expires_at"));
    hset(e->fr, e->keys[0], "last_active_at", 14, arg(e, 2), arglen(e, 2));
    (void)snprintf(v, sizeof(v), "%llu", (unsigned long long)d);
    zadd(e->fr, e->keys[1], v, arg(e, 1), arglen(e, 1));
    out_int(e->out, 1);
}

static void
script_epoch(struct eval *e)
{
    if (key_find(e->fr, e->keys[0]) == NULL) {
        out_int(e->out, 0);
        return;
    }
    hset(e->fr, e->keys[0], "epoch", 5, arg(e, 1), arglen(e, 1));
    hset(e->fr, e->keys[0], "gen", 3, arg(e, 2), arglen(e, 2));
    out_int(e->out, 1);
}

/* The session of KEYS[1] leaves its tenant's set (ARGV[2]: the tenant key prefix). */
static void
tenant_leave(struct eval *e)
{
    const char *tenant = hget(e->fr, e->keys[0], "tenant");
    char tset[256];

    if (tenant != NULL) {
        (void)snprintf(tset, sizeof(tset), "%s%s:sessions", arg(e, 2), tenant);
        item_rem(e->fr, tset, arg(e, 1), arglen(e, 1));
    }
}

static void
script_ending(struct eval *e)
{
    tenant_leave(e);
    item_rem(e->fr, e->keys[1], arg(e, 1), arglen(e, 1));
    if (key_find(e->fr, e->keys[0]) != NULL) {
        hset(e->fr, e->keys[0], "state", 5, "ending", 6);
    }
    out_int(e->out, 1);
}

static void
script_delete(struct eval *e)
{
    tenant_leave(e);
    item_rem(e->fr, e->keys[2], arg(e, 1), arglen(e, 1));
    item_rem(e->fr, e->keys[1], arg(e, 1), arglen(e, 1));
    key_del(e->fr, e->keys[0]);
    key_del(e->fr, e->keys[3]);
    out_int(e->out, 1);
}

/* KEYS: hash, history. ARGV: entry, max. LPUSH then LTRIM 0 max-1. */
static void
script_history_push(struct eval *e)
{
    struct key *k;
    uint64_t max = 0;

    if (key_find(e->fr, e->keys[0]) == NULL) {
        out_int(e->out, 0);
        return;
    }
    (void)parse_u64(arg(e, 2), &max);
    k = key_get(e->fr, e->keys[1], K_LIST);
    k->items = realloc(k->items, (k->n + 1) * sizeof(*k->items));
    if (k->items == NULL) {
        abort();
    }
    memmove(k->items + 1, k->items, k->n * sizeof(*k->items));
    k->items[0] = (struct item){.a = str_dup(arg(e, 1), arglen(e, 1))};
    k->n++;
    while (k->n > max && k->n > 0) {
        item_free(&k->items[--k->n]);
    }
    out_int(e->out, 1);
}

static void
script_history(struct eval *e)
{
    const struct key *k = key_find(e->fr, e->keys[0]);
    uint64_t max = 0;
    size_t n;

    (void)parse_u64(arg(e, 1), &max);
    n = k ? (size_t)MIN((uint64_t)k->n, max) : 0;
    (void)evbuffer_add_printf(e->out, "*%zu\r\n", n);
    for (size_t i = 0; i < n; i++) {
        out_bulk(e->out, k->items[i].a.p, k->items[i].a.n);
    }
}

/* KEYS: deadlines. ARGV: now, max. Lowest scores first, as ZRANGEBYSCORE. */
static void
script_claim(struct eval *e)
{
    struct key *k = key_find(e->fr, e->keys[0]);
    uint64_t now = 0, max = 0;
    struct str ids[64];
    size_t n = 0;

    (void)parse_u64(arg(e, 1), &now);
    (void)parse_u64(arg(e, 2), &max);
    while (k != NULL && n < MIN(max, (uint64_t)ELEMENTSOF(ids))) {
        struct item *low = NULL;

        for (size_t i = 0; i < k->n; i++) {
            if (k->items[i].score <= (double)now &&
                (low == NULL || k->items[i].score < low->score)) {
                low = &k->items[i];
            }
        }
        if (low == NULL) {
            break;
        }
        ids[n] = str_dup(low->a.p, low->a.n);
        item_rem(e->fr, e->keys[0], ids[n].p, ids[n].n);
        n++;
        k = key_find(e->fr, e->keys[0]);
    }
    (void)evbuffer_add_printf(e->out, "*%zu\r\n", n);
    for (size_t i = 0; i < n; i++) {
        out_bulk(e->out, ids[i].p, ids[i].n);
        free(ids[i].p);
    }
}

/* KEYS: node set, deadlines. ARGV: session key prefix. */
static void
script_load(struct eval *e)
{
    const struct key *set = key_find(e->fr, e->keys[0]);
    size_t n = set ? set->n : 0;
    struct str *ids = xalloc0(n * sizeof(*ids));

    for (size_t i = 0; i < n; i++) { /* zadd below may move the key table */
        ids[i] = str_dup(set->items[i].a.p, set->items[i].a.n);
    }
    (void)evbuffer_add_printf(e->out, "*%zu\r\n", n);
    for (size_t i = 0; i < n; i++) {
        char name[512], d[24];
        const struct key *h;
        const char *state;
        uint64_t dl;

        (void)snprintf(name, sizeof(name), "%s%.*s", arg(e, 1), (int)ids[i].n, ids[i].p);
        state = hget(e->fr, name, "state");
        if (state != NULL && strcmp(state, "active") == 0 &&
            item_find(key_find(e->fr, e->keys[1]), ids[i].p, ids[i].n) == NULL) {
            dl = hget_u64(e->fr, name, "last_active_at") +
                 hget_u64(e->fr, name, "idle_timeout_s") * 1000;
            dl = MIN(dl, hget_u64(e->fr, name, "expires_at"));
            (void)snprintf(d, sizeof(d), "%llu", (unsigned long long)dl);
            zadd(e->fr, e->keys[1], d, ids[i].p, ids[i].n);
        }
        h = key_find(e->fr, name);
        (void)evbuffer_add_printf(e->out, "*%zu\r\n", h ? h->n * 2 : 0);
        for (size_t j = 0; h != NULL && j < h->n; j++) {
            out_bulk(e->out, h->items[j].a.p, h->items[j].a.n);
            out_bulk(e->out, h->items[j].b.p, h->items[j].b.n);
        }
        free(ids[i].p);
    }
    free(ids);
}

/* ---- the node registry's scripts (src/store/nodes.c) ------------------------------------- */

static void
str_set(struct fake_redis *fr, const char *name, const char *v, size_t n)
{
    struct key *k;

    key_del(fr, name);
    k = key_get(fr, name, K_STR);
    item_add(k, v, n);
}

static const struct str *
str_get(const struct fake_redis *fr, const char *name)
{
    const struct key *k = key_find(fr, name);

    return k != NULL && k->type == K_STR && k->n == 1 ? &k->items[0].a : NULL;
}

/* KEYS: info hash, nodes zset, lost marker. ARGV: id, heartbeat_at, keep_ms, field/value pairs.
 * The record's expiry (keep_ms, a day) is not kept: no test lasts that long. */
static void
script_heartbeat(struct eval *e)
{
    const struct str *lost;

    key_del(e->fr, e->keys[0]);
    for (int i = 4; i + 1 <= e->nargs; i += 2) {
        hset(e->fr, e->keys[0], arg(e, i), arglen(e, i), arg(e, i + 1), arglen(e, i + 1));
    }
    zadd(e->fr, e->keys[1], arg(e, 2), arg(e, 1), arglen(e, 1));
    lost = str_get(e->fr, e->keys[2]);
    if (lost == NULL) {
        out_bulk(e->out, "", 0);
        return;
    }
    out_bulk(e->out, lost->p, lost->n);
    key_del(e->fr, e->keys[2]);
}

/* KEYS: nodes zset. ARGV: info key prefix, oldest heartbeat kept, max. Newest first. */
static void
script_nodes_list(struct eval *e)
{
    struct key *z = key_find(e->fr, e->keys[0]);
    uint64_t oldest = 0, max = 0;
    size_t n = 0;
    struct evbuffer *body = evbuffer_new();
    bool *done;

    (void)parse_u64(arg(e, 2), &oldest);
    (void)parse_u64(arg(e, 3), &max);
    if (body == NULL) {
        abort();
    }
    for (size_t i = 0; z != NULL && i < z->n;) { /* ZREMRANGEBYSCORE -inf (oldest */
        if (z->items[i].score < (double)oldest) {
            item_free(&z->items[i]);
            z->items[i] = z->items[--z->n];
        } else {
            i++;
        }
    }
    done = xalloc0((z != NULL ? z->n : 0) * sizeof(*done));
    while (z != NULL && n < max) {
        const struct item *top = NULL;
        const struct key *h;
        char name[512];
        size_t ti = 0;

        for (size_t i = 0; i < z->n; i++) {
            if (!done[i] && (top == NULL || z->items[i].score > top->score)) {
                top = &z->items[i];
                ti = i;
            }
        }
        if (top == NULL) {
            break;
        }
        done[ti] = true;
        (void)snprintf(name, sizeof(name), "%s%.*s:info", arg(e, 1), (int)top->a.n, top->a.p);
        h = key_find(e->fr, name);
        if (h == NULL) {
            continue; /* the real script drops the id from the zset too */
        }
        (void)evbuffer_add_printf(body, "*%zu\r\n", h->n * 2);
        for (size_t j = 0; j < h->n; j++) {
            out_bulk(body, h->items[j].a.p, h->items[j].a.n);
            out_bulk(body, h->items[j].b.p, h->items[j].b.n);
        }
        n++;
    }
    free(done);
    (void)evbuffer_add_printf(e->out, "*%zu\r\n", n);
    (void)evbuffer_add_buffer(e->out, body);
    evbuffer_free(body);
}

/* One session of a lost node, claimed: a hibernated one becomes the claimer's, any other a
 * tombstone. Appends its id (and tenant) to adopted or ended. */
static void
claim_one(struct eval *e, const struct str *id, struct evbuffer *ended, size_t *n_ended,
          struct evbuffer *adopted, size_t *n_adopted)
{
    char k[512], tset[512];
    const char *state, *tenant;
    const struct item *d;

    (void)snprintf(k, sizeof(k), "%s%.*s", arg(e, 4), (int)id->n, id->p);
    state = hget(e->fr, k, "state");
    tenant = hget(e->fr, k, "tenant");
    if (state != NULL && strcmp(state, "hibernated") == 0) {
        hset(e->fr, k, "node", 4, arg(e, 3), arglen(e, 3));
        item_add(key_get(e->fr, e->keys[4], K_SET), id->p, id->n);
        d = item_find(key_find(e->fr, e->keys[3]), id->p, id->n);
        if (d != NULL) {
            item_add(key_get(e->fr, e->keys[5], K_ZSET), id->p, id->n)->score = d->score;
        }
        out_bulk(adopted, id->p, id->n);
        (*n_adopted)++;
    } else if (state != NULL) {
        if (tenant != NULL) {
            (void)snprintf(tset, sizeof(tset), "%s%s:sessions", arg(e, 7), tenant);
            item_rem(e->fr, tset, id->p, id->n);
        }
        out_bulk(ended, id->p, id->n);
        out_bulk(ended, tenant != NULL ? tenant : "", tenant != NULL ? strlen(tenant) : 0);
        hset(e->fr, k, "state", 5, "lost", 4);
        hset(e->fr, k, "container", 9, "", 0);
        *n_ended += 2;
    }
}

/* KEYS: nodes zset, the lost node's marker, its session set and deadlines, the claimer's set
 * and deadlines. ARGV: lost id, its heartbeat as listed, claimer, session key prefix, history
 * key prefix, tombstone ms, tenant key prefix. Tombstones do not expire here. */
static void
script_nodes_claim(struct eval *e)
{
    const struct item *hb = item_find(key_find(e->fr, e->keys[0]), arg(e, 1), arglen(e, 1));
    const struct key *set;
    struct evbuffer *ended, *adopted;
    size_t n_ended = 0, n_adopted = 0, n;
    struct str *ids;
    uint64_t beat = 0;

    (void)parse_u64(arg(e, 2), &beat);
    if (hb == NULL || (uint64_t)hb->score != beat || str_get(e->fr, e->keys[1]) != NULL) {
        (void)evbuffer_add_printf(e->out, "*1\r\n:0\r\n");
        return;
    }
    str_set(e->fr, e->keys[1], arg(e, 3), arglen(e, 3));
    ended = evbuffer_new();
    adopted = evbuffer_new();
    if (ended == NULL || adopted == NULL) {
        abort();
    }
    set = key_find(e->fr, e->keys[2]);
    n = set != NULL ? set->n : 0;
    ids = xalloc0(n * sizeof(*ids));
    for (size_t i = 0; i < n; i++) { /* hset below may move the key table */
        ids[i] = str_dup(set->items[i].a.p, set->items[i].a.n);
    }
    for (size_t i = 0; i < n; i++) {
        claim_one(e, &ids[i], ended, &n_ended, adopted, &n_adopted);
        free(ids[i].p);
    }
    free(ids);
    key_del(e->fr, e->keys[2]);
    key_del(e->fr, e->keys[3]);
    (void)evbuffer_add_printf(e->out, "*3\r\n:1\r\n*%zu\r\n", n_ended);
    (void)evbuffer_add_buffer(e->out, ended);
    (void)evbuffer_add_printf(e->out, "*%zu\r\n", n_adopted);
    (void)evbuffer_add_buffer(e->out, adopted);
    evbuffer_free(ended);
    evbuffer_free(adopted);
}

/* ---- plain commands (the route's lookups, src/cluster/route.c; MCP's records, src/mcp/) -- */

/* HMGET key field...: each field's value or nil. */
static void
cmd_hmget(struct fake_redis *fr, struct evbuffer *out, const redisReply *cmd)
{
    const struct key *k = key_find(fr, cmd->element[1]->str);

    (void)evbuffer_add_printf(out, "*%zu\r\n", cmd->elements - 2);
    for (size_t i = 2; i < cmd->elements; i++) {
        const struct item *it = k != NULL && k->type == K_HASH
                                    ? item_find(k, cmd->element[i]->str, cmd->element[i]->len)
                                    : NULL;

        if (it == NULL) {
            (void)evbuffer_add_printf(out, "$-1\r\n");
        } else {
            out_bulk(out, it->b.p, it->b.n);
        }
    }
}

/* SET key value [PX ms] [NX]: the expiry is not kept (no test outlives one). */
static void
cmd_set(struct fake_redis *fr, struct evbuffer *out, const redisReply *cmd)
{
    bool nx = false;

    for (size_t i = 3; i < cmd->elements; i++) {
        nx = nx || strcasecmp(cmd->element[i]->str, "NX") == 0;
    }
    if (nx && key_find(fr, cmd->element[1]->str) != NULL) {
        (void)evbuffer_add_printf(out, "$-1\r\n");
        return;
    }
    str_set(fr, cmd->element[1]->str, cmd->element[2]->str, cmd->element[2]->len);
    (void)evbuffer_add_printf(out, "+OK\r\n");
}

/* GET, SET, DEL, PEXPIRE (kept as no expiry: 1 when the key exists), HMGET. False: not one of
 * these. */
static bool
run_plain(struct fake_redis *fr, struct evbuffer *out, const redisReply *cmd)
{
    const char *name = cmd->element[0]->str;

    if (strcasecmp(name, "GET") == 0 && cmd->elements == 2) {
        const struct str *v = str_get(fr, cmd->element[1]->str);

        if (v == NULL) {
            (void)evbuffer_add_printf(out, "$-1\r\n");
        } else {
            out_bulk(out, v->p, v->n);
        }
    } else if (strcasecmp(name, "SET") == 0 && cmd->elements >= 3) {
        cmd_set(fr, out, cmd);
    } else if (strcasecmp(name, "DEL") == 0 && cmd->elements >= 2) {
        long long n = 0;

        for (size_t i = 1; i < cmd->elements; i++) {
            n += key_find(fr, cmd->element[i]->str) != NULL;
            key_del(fr, cmd->element[i]->str);
        }
        out_int(out, n);
    } else if (strcasecmp(name, "PEXPIRE") == 0 && cmd->elements == 3) {
        out_int(out, key_find(fr, cmd->element[1]->str) != NULL);
    } else if (strcasecmp(name, "HMGET") == 0 && cmd->elements >= 3) {
        cmd_hmget(fr, out, cmd);
    } else {
        return false;
    }
    fr->plain++;
    return true;
}

/* Which script this is, by what only it does; -1 for none. */
static int
script_of(const char *s)
{
    static const char restore_mark[] = "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
                                       "redis.call('HSET', KEYS[1], unpack(ARGV, 3))";
    static const char *const marks[] = {
        restore_mark,
        "redis.call('HSET', KEYS[1], unpack(ARGV, 3))",
        "redis.call('HSET', KEYS[1], 'last_active_at', ARGV[2])",
        "redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'gen', ARGV[2])",
        "redis.call('HSET', KEYS[1], 'state', 'ending')",
        "redis.call('DEL', KEYS[1], KEYS[4])",
        "redis.call('LPUSH', KEYS[2], ARGV[1])",
        "return redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)",
        "redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])",
        "if redis.call('SCARD', KEYS[1]) >= max then",
        "if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then",
        "redis.call('SMEMBERS', KEYS[1])",
        /* src/store/nodes.c */
        "local lost = redis.call('GET', KEYS[3])",
        "redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1)",
        "if not redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', ARGV[6])",
    };

    for (size_t i = 0; i < ELEMENTSOF(marks); i++) {
        if (strstr(s, marks[i]) != NULL) {
            return (int)i;
        }
    }
    return -1;
}

static void
run_eval(struct fake_redis *fr, struct evbuffer *out, redisReply *cmd)
{
    struct eval e = {.fr = fr, .out = out};
    uint64_t nk = 0;
    int which;
    char msg[160];

    if (cmd->elements < 3 || parse_u64(cmd->element[2]->str, &nk) < 0 || nk > 8 ||
        cmd->elements < 3 + nk) {
        out_err(out, "wrong number of arguments for 'eval' command");
        return;
    }
    which = script_of(cmd->element[1]->str);
    if (which < 0) {
        (void)snprintf(msg, sizeof(msg), "fake-redis: unknown script '%.60s'",
                       cmd->element[1]->str);
        for (char *p = msg; *p; p++) {
            if (*p == '\n' || *p == '\r') {
                *p = ' ';
            }
        }
        out_err(out, msg);
        return;
    }
    fr->calls[which]++;
    e.nkeys = (int)nk;
    for (uint64_t i = 0; i < nk; i++) {
        e.keys[i] = cmd->element[3 + i]->str;
    }
    e.argv = cmd->element + 3 + nk;
    e.nargs = (int)(cmd->elements - 3 - nk);
    switch (which) {
    case 0:
    case 1:
        script_create(&e, which == 0);
        break;
    case 2:
        script_touch(&e);
        break;
    case 3:
        script_epoch(&e);
        break;
    case 4:
        script_ending(&e);
        break;
    case 5:
        script_delete(&e);
        break;
    case 6:
        script_history_push(&e);
        break;
    case 7:
        script_history(&e);
        break;
    case 8:
        script_claim(&e);
        break;
    case 9:
        script_admit(&e);
        break;
    case 10:
        script_unadmit(&e);
        break;
    case 11:
        script_load(&e);
        break;
    case 12:
        script_heartbeat(&e);
        break;
    case 13:
        script_nodes_list(&e);
        break;
    default:
        script_nodes_claim(&e);
        break;
    }
}

static void
run_command(struct fake_redis *fr, struct evbuffer *out, redisReply *cmd)
{
    const char *name;

    if (cmd->type != REDIS_REPLY_ARRAY || cmd->elements == 0) {
        out_err(out, "protocol error: expected an array of bulk strings");
        return;
    }
    for (size_t i = 0; i < cmd->elements; i++) {
        if (cmd->element[i]->type != REDIS_REPLY_STRING) {
            out_err(out, "protocol error: expected bulk strings");
            return;
        }
    }
    fr->total++;
    name = cmd->element[0]->str;
    if (strcasecmp(name, "PING") == 0) {
        (void)evbuffer_add_printf(out, "+PONG\r\n");
    } else if (strcasecmp(name, "SELECT") == 0) {
        (void)evbuffer_add_printf(out, "+OK\r\n");
    } else if (strcasecmp(name, "EVAL") == 0) {
        run_eval(fr, out, cmd);
    } else if (!run_plain(fr, out, cmd)) {
        char msg[128];

        (void)snprintf(msg, sizeof(msg), "fake-redis: command '%.40s' is not faked", name);
        out_err(out, msg);
    }
}

/* ---- connections ------------------------------------------------------------------------- */

static void
rconn_free(struct rconn *c)
{
    TAILQ_REMOVE(&c->fr->conns, c, link);
    redisReaderFree(c->reader);
    bufferevent_free(c->bev);
    free(c);
}

static void
on_read(struct bufferevent *bev, void *arg)
{
    struct rconn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    void *reply;

    if (c->fr->stalled) {
        return; /* left in the buffer: answered once unstalled and more comes */
    }
    while (evbuffer_get_length(in) > 0) {
        size_t n = evbuffer_get_length(in);
        char *data = xalloc0(n);

        (void)evbuffer_remove(in, data, n);
        if (redisReaderFeed(c->reader, data, n) != REDIS_OK) {
            free(data);
            rconn_free(c);
            return;
        }
        free(data);
    }
    for (;;) {
        reply = NULL;
        if (redisReaderGetReply(c->reader, &reply) != REDIS_OK) {
            rconn_free(c); /* the reader saw a protocol error */
            return;
        }
        if (reply == NULL) {
            return;
        }
        run_command(c->fr, bufferevent_get_output(bev), reply);
        freeReplyObject(reply);
    }
}

static void
on_event(struct bufferevent *bev, short what, void *arg)
{
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        rconn_free(arg);
    }
}

static void
on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len, void *arg)
{
    struct fake_redis *fr = arg;
    struct rconn *c;

    if (fr->down) {
        (void)close(fd);
        return;
    }
    c = xalloc0(sizeof(*c));
    c->fr = fr;
    c->reader = redisReaderCreate();
    c->bev = bufferevent_socket_new(fr->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (c->reader == NULL || c->bev == NULL) {
        abort();
    }
    TAILQ_INSERT_TAIL(&fr->conns, c, link);
    bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
    (void)bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

struct fake_redis *
fake_redis_new(struct event_base *base)
{
    struct fake_redis *fr = xalloc0(sizeof(*fr));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};

    fr->base = base;
    TAILQ_INIT(&fr->conns);
    (void)snprintf(fr->dir, sizeof(fr->dir), "/tmp/sandpool-fake-redis-XXXXXX");
    if (mkdtemp(fr->dir) == NULL) {
        abort();
    }
    (void)snprintf(fr->path, sizeof(fr->path), "%s/redis.sock", fr->dir);
    (void)snprintf(fr->url, sizeof(fr->url), "unix://%s", fr->path);
    memcpy(sa.sun_path, fr->path, strlen(fr->path) + 1);
    fr->lis =
        evconnlistener_new_bind(base, on_accept, fr, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
                                16, (struct sockaddr *)&sa, sizeof(sa));
    if (fr->lis == NULL) {
        abort();
    }
    return fr;
}

struct fake_redis *
fake_redis_free(struct fake_redis *fr)
{
    if (fr == NULL) {
        return NULL;
    }
    while (!TAILQ_EMPTY(&fr->conns)) {
        rconn_free(TAILQ_FIRST(&fr->conns));
    }
    while (fr->n_keys > 0) {
        key_del(fr, fr->keys[0].name);
    }
    free(fr->keys);
    evconnlistener_free(fr->lis);
    (void)unlink(fr->path);
    (void)rmdir(fr->dir);
    free(fr);
    return NULL;
}

const char *
fake_redis_url(const struct fake_redis *fr)
{
    return fr->url;
}

void
fake_redis_set_down(struct fake_redis *fr, bool down)
{
    fr->down = down;
    while (down && !TAILQ_EMPTY(&fr->conns)) {
        rconn_free(TAILQ_FIRST(&fr->conns));
    }
}

void
fake_redis_set_stalled(struct fake_redis *fr, bool stalled)
{
    struct rconn *c, *next;

    fr->stalled = stalled;
    for (c = TAILQ_FIRST(&fr->conns); !stalled && c != NULL; c = next) {
        next = TAILQ_NEXT(c, link);
        on_read(c->bev, c); /* what came meanwhile */
    }
}

const char *
fake_redis_hget(const struct fake_redis *fr, const char *key, const char *field)
{
    return hget(fr, key, field);
}

bool
fake_redis_exists(const struct fake_redis *fr, const char *key)
{
    return key_find(fr, key) != NULL;
}

size_t
fake_redis_size(const struct fake_redis *fr, const char *key)
{
    const struct key *k = key_find(fr, key);

    return k ? k->n : 0;
}

size_t
fake_redis_count_keys(const struct fake_redis *fr, const char *prefix)
{
    size_t n = 0;

    for (size_t i = 0; i < fr->n_keys; i++) {
        n += strncmp(fr->keys[i].name, prefix, strlen(prefix)) == 0;
    }
    return n;
}

unsigned
fake_redis_calls(const struct fake_redis *fr, const char *name)
{
    if (strcmp(name, "*") == 0) {
        return fr->total;
    }
    if (strcmp(name, "plain") == 0) {
        return fr->plain;
    }
    for (size_t i = 0; script_names[i] != NULL; i++) {
        if (strcmp(script_names[i], name) == 0) {
            return fr->calls[i];
        }
    }
    return 0;
}
