/* This node in the node registry; see registry.h. */
#define LOG_MODULE "cluster"
#include "cluster/registry.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "config/config.h"
#include "log/log.h"
#include "sandpool/api.h"
#include "util/hashmap.h"
#include "util/macro.h"
#include "util/time.h"

#define HEARTBEATS_TO_LIVE 3u /* a node is lost after this many missed heartbeats */
/* A lost node's live sessions answer 404 node_lost this long (their records' tombstones). */
#define TOMBSTONE_MS 86400000u

enum registry_state {
    REG_IDLE,
    REG_BEATING,
    REG_LISTING,
    REG_CLAIMING,
    REG_STOPPING,
    REG_STOPPED,
    REG__COUNT,
};

struct registry {
    const struct cfg *cfg;     /* borrowed */
    struct store_redis *redis; /* borrowed */
    struct store_nodes *nodes;
    struct registry_self self;
    struct event *timer;
    enum registry_state state;
    bool stop_wanted;
    uint64_t started_at, listed_at; /* wall-clock ms */
    struct store_node_rec *cache;   /* the last list */
    size_t n_cache;
    /* Lost nodes whose claim was tried, by id: the heartbeat it was tried for (boxed). */
    struct hashmap *tried;
    struct registry_stats stats;
    char claiming[65]; /* CLAIMING: whom */
};

static const char *const state_names[REG__COUNT] = {
    [REG_IDLE] = "idle",         [REG_BEATING] = "beating",   [REG_LISTING] = "listing",
    [REG_CLAIMING] = "claiming", [REG_STOPPING] = "stopping", [REG_STOPPED] = "stopped",
};

/* transitions[from][to]: whether from may go to to; any other is a bug (a callback that came
 * twice, or for an operation that was not in flight). */
static const bool transitions[REG__COUNT][REG__COUNT] = {
    /* A beat; a lost node's claim after a list; the last heartbeat (or none: Redis down). */
    [REG_IDLE] =
        {[REG_BEATING] = true, [REG_CLAIMING] = true, [REG_STOPPING] = true, [REG_STOPPED] = true},
    [REG_BEATING] = {[REG_IDLE] = true, [REG_LISTING] = true},
    [REG_LISTING] = {[REG_IDLE] = true},
    [REG_CLAIMING] = {[REG_IDLE] = true},
    [REG_STOPPING] = {[REG_STOPPED] = true},
};

/* The one writer of r->state (REG_IDLE, 0 from xcalloc, is the first: no transition). */
static void
registry_set(struct registry *r, enum registry_state state)
{
    assert(transitions[r->state][state]);
    log_debug("registry: %s -> %s", state_names[r->state], state_names[state]);
    r->state = state;
}

static void cache_free(struct registry *r);

/* ---- heartbeat, then list -------------------------------------------------------------------- */

static void
fill_self(struct registry *r, struct store_node_rec *rec, bool stopped)
{
    json_t *cap = r->self.capacity(r->self.userdata);
    char *text = json_dumps(cap, JSON_COMPACT);

    *rec = (struct store_node_rec){
        .draining = stopped || r->self.draining(r->self.userdata),
        .stopped = stopped,
        .started_at = r->started_at,
        .heartbeat_at = time_wall_ms(),
        .ttl_ms = HEARTBEATS_TO_LIVE * r->cfg->cluster_heartbeat_ms,
        .sessions = r->self.sessions(r->self.userdata),
    };
    (void)snprintf(rec->id, sizeof(rec->id), "%s", r->cfg->node_id);
    (void)snprintf(rec->url, sizeof(rec->url), "%s", r->cfg->cluster_advertise_url);
    (void)snprintf(rec->version, sizeof(rec->version), "%s", SANDPOOL_VERSION);
    if (text == NULL || strlen(text) > STORE_NODE_CAPACITY_MAX) {
        free(text);
        text = xstrdup("{}"); /* too many profiles to say: the node still says it lives */
    }
    rec->capacity = text;
    json_decref(cap);
}

/* ---- lost nodes ------------------------------------------------------------------------------ */

static void
on_claimed(int rc, bool claimed, const struct store_nodes_claimed *c, void *userdata)
{
    struct registry *r = userdata;

    registry_set(r, REG_IDLE);
    if (rc < 0 && !claimed) {
        log_warn("registry: the claim of node '%s' failed: %s", r->claiming, strerror(-rc));
        (void)free(hashmap_remove(r->tried, r->claiming)); /* tried again at the next list */
        return;
    }
    if (!claimed) {
        return; /* another node claimed it, or it came back */
    }
    r->stats.claims_total++;
    r->stats.sessions_lost_total += c->n_ended;
    r->stats.sessions_adopted_total += c->n_adopted;
    if (rc < 0) {
        log_error("registry: node '%s' claimed, but what became of its sessions is unknown: %s",
                  r->claiming, strerror(-rc));
    }
    log_warn("registry: node '%s' was lost (no heartbeat for %u ms, no clean stop): %zu of its "
             "sessions ended (node_lost), %zu hibernated ones are this node's now",
             r->claiming, HEARTBEATS_TO_LIVE * r->cfg->cluster_heartbeat_ms, c->n_ended,
             c->n_adopted);
    r->self.took_over(r->claiming, c, r->self.userdata);
}

/* After a list: the first lost node not tried yet for its last heartbeat is claimed. True when
 * its claim is on its way. */
static bool
claim_lost(struct registry *r, uint64_t now)
{
    for (size_t i = 0; i < r->n_cache; i++) {
        const struct store_node_rec *n = &r->cache[i];
        uint64_t *tried = hashmap_get(r->tried, n->id);

        if (strcmp(n->id, r->cfg->node_id) == 0 || n->stopped || store_node_live(n, now) ||
            (tried != NULL && *tried == n->heartbeat_at)) {
            continue; /* a node that stopped cleanly comes back: it keeps its sessions */
        }
        if (tried == NULL) {
            if (hashmap_size(r->tried) >= (size_t)2 * STORE_NODES_MAX) {
                /* Ids of nodes long gone: forgotten all at once (a claim tried again is only
                 * refused by the marker). */
                hashmap_free_with(r->tried, free);
                r->tried = hashmap_new();
            }
            tried = xcalloc(1, sizeof(*tried));
            hashmap_put(r->tried, n->id, tried);
        }
        *tried = n->heartbeat_at;
        (void)snprintf(r->claiming, sizeof(r->claiming), "%s", n->id);
        if (store_nodes_claim(r->nodes, n->id, n->heartbeat_at, r->cfg->node_id, TOMBSTONE_MS,
                              on_claimed, r) < 0) {
            return false;
        }
        registry_set(r, REG_CLAIMING);
        return true;
    }
    return false;
}

static void
on_listed(int rc, const struct store_node_rec *recs, size_t n, void *userdata)
{
    struct registry *r = userdata;
    uint64_t now = time_wall_ms();

    registry_set(r, REG_IDLE);
    if (rc < 0) {
        return; /* the cache stays: the next beat lists again */
    }
    cache_free(r);
    r->cache = xcalloc(n ? n : 1, sizeof(*r->cache));
    r->n_cache = n;
    r->stats.live = r->stats.down = 0;
    for (size_t i = 0; i < n; i++) {
        r->cache[i] = recs[i];
        r->cache[i].capacity = xstrdup(recs[i].capacity);
        if (store_node_live(&recs[i], now)) {
            r->stats.live++;
        } else {
            r->stats.down++;
        }
    }
    r->listed_at = now;
    if (!r->stop_wanted) {
        (void)claim_lost(r, now);
    }
}

static void
on_beaten(int rc, const char *lost_by, void *userdata)
{
    struct registry *r = userdata;

    if (lost_by != NULL) {
        r->self.declared_lost(lost_by, r->self.userdata);
    }
    if (rc < 0) {
        r->stats.heartbeat_failures_total++;
        log_warn("registry: the heartbeat failed: %s", strerror(-rc));
        registry_set(r, REG_IDLE);
        return;
    }
    r->stats.heartbeats_total++;
    if (r->stop_wanted || store_nodes_list(r->nodes, time_wall_ms(), on_listed, r) < 0) {
        registry_set(r, REG_IDLE);
        return;
    }
    registry_set(r, REG_LISTING);
}

static void
on_beat(evutil_socket_t fd, short what, void *arg)
{
    struct registry *r = arg;
    struct store_node_rec rec;
    int rc;

    if (r->state != REG_IDLE || r->stop_wanted || !store_redis_is_up(r->redis)) {
        return; /* one at a time; Redis down: the others see the heartbeat age */
    }
    fill_self(r, &rec, false);
    rc = store_nodes_heartbeat(r->nodes, &rec, on_beaten, r);
    store_node_rec_done(&rec);
    if (rc < 0) {
        r->stats.heartbeat_failures_total++;
        return;
    }
    registry_set(r, REG_BEATING);
}

/* ---- stop ------------------------------------------------------------------------------------ */

static void
on_stopped(int rc, const char *lost_by, void *userdata)
{
    struct registry *r = userdata;

    if (rc < 0) {
        log_warn("registry: the last heartbeat failed: %s", strerror(-rc));
    }
    registry_set(r, REG_STOPPED);
}

bool
registry_stop(struct registry *r)
{
    struct store_node_rec rec;
    int rc;

    r->stop_wanted = true;
    if (r->state == REG_STOPPED) {
        return true;
    }
    if (r->state != REG_IDLE) {
        return false; /* a heartbeat or list in flight: the next call goes on */
    }
    if (!store_redis_is_up(r->redis)) {
        registry_set(r, REG_STOPPED);
        return true;
    }
    fill_self(r, &rec, true);
    rc = store_nodes_heartbeat(r->nodes, &rec, on_stopped, r);
    store_node_rec_done(&rec);
    registry_set(r, rc < 0 ? REG_STOPPED : REG_STOPPING);
    return rc < 0;
}

/* A beat at once, the next ones a heartbeat apart from it. Not EV_TIMEOUT: libevent would
 * schedule the next after the pending timeout's, a gap of up to two heartbeats. */
static void
beat_now(struct registry *r)
{
    event_active(r->timer, 0, 0);
}

void
registry_redis_up(struct registry *r)
{
    if (r->state == REG_IDLE && !r->stop_wanted) {
        beat_now(r);
    }
}

/* ---- the view -------------------------------------------------------------------------------- */

bool
registry_listed(const struct registry *r)
{
    return r->listed_at != 0;
}

static json_t *
time_or_null(uint64_t ms)
{
    char t[40];

    return ms == 0 ? json_null() : OOM_CHECK(json_string(time_rfc3339(ms, t, sizeof(t))));
}

static json_t *
node_json(const struct store_node_rec *n, uint64_t now)
{
    json_t *cap = json_loads(n->capacity, 0, NULL);

    return OOM_CHECK(
        json_pack("{s:s, s:s, s:s, s:b, s:b, s:b, s:o, s:o, s:I, s:I, s:o}", "id", n->id, "url",
                  n->url, "version", n->version, "live", store_node_live(n, now), "draining",
                  n->draining, "stopped", n->stopped, "started_at", time_or_null(n->started_at),
                  "heartbeat_at", time_or_null(n->heartbeat_at), "heartbeat_age_ms",
                  (json_int_t)(now > n->heartbeat_at ? now - n->heartbeat_at : 0), "sessions",
                  (json_int_t)n->sessions, "capacity",
                  json_is_object(cap) ? cap : (json_decref(cap), OOM_CHECK(json_object()))));
}

json_t *
registry_to_json(const struct registry *r)
{
    json_t *list = OOM_CHECK(json_array());
    uint64_t now = time_wall_ms();

    for (size_t i = 0; i < r->n_cache; i++) {
        (void)json_array_append_new(list, node_json(&r->cache[i], now));
    }
    return OOM_CHECK(json_pack("{s:s, s:I, s:o, s:o}", "self", r->cfg->node_id, "heartbeat_ms",
                               (json_int_t)r->cfg->cluster_heartbeat_ms, "listed_at",
                               time_or_null(r->listed_at), "nodes", list));
}

const struct store_node_rec *
registry_node(const struct registry *r, const char *id)
{
    for (size_t i = 0; i < r->n_cache; i++) {
        if (strcmp(r->cache[i].id, id) == 0) {
            return &r->cache[i];
        }
    }
    return NULL;
}

/* The profile's ready and room (max - bound) counts in node n's capacity; false without it. */
static bool
capacity_of(const struct store_node_rec *n, const char *profile, unsigned *ready, unsigned *room)
{
    json_t *cap = json_loads(n->capacity, 0, NULL);
    json_int_t rd = -1, bound = -1, max = -1;
    bool ok = json_unpack(json_object_get(cap, profile), "{s:I, s:I, s:I}", "ready", &rd, "bound",
                          &bound, "max", &max) == 0 &&
              rd >= 0 && bound >= 0 && max >= 0 && max <= (json_int_t)UINT32_MAX;

    json_decref(cap);
    if (ok) {
        *ready = (unsigned)MIN(rd, max);
        *room = max > bound ? (unsigned)(max - bound) : 0;
    }
    return ok;
}

const struct store_node_rec *
registry_place(const struct registry *r, const char *profile, unsigned self_free)
{
    const struct store_node_rec *most_ready = NULL, *most_free = NULL;
    unsigned best_ready = 0, best_room = self_free;
    uint64_t now = time_wall_ms();

    for (size_t i = 0; i < r->n_cache; i++) {
        const struct store_node_rec *n = &r->cache[i];
        unsigned ready, room;

        if (strcmp(n->id, r->cfg->node_id) == 0 || n->draining || !store_node_live(n, now) ||
            strncmp(n->url, "http://", 7) != 0 ||
            strcmp(n->url, r->cfg->cluster_advertise_url) == 0 ||
            !capacity_of(n, profile, &ready, &room) || room == 0) {
            continue;
        }
        if (ready > best_ready) {
            best_ready = ready;
            most_ready = n;
        }
        if (room > best_room) {
            best_room = room;
            most_free = n;
        }
    }
    return most_ready != NULL ? most_ready : most_free;
}

size_t
registry_peers(const struct registry *r)
{
    size_t n = 0;

    for (size_t i = 0; i < r->n_cache; i++) {
        n += strcmp(r->cache[i].id, r->cfg->node_id) != 0;
    }
    return n;
}

const struct store_node_rec *
registry_peer(const struct registry *r, size_t i)
{
    for (size_t k = 0; k < r->n_cache; k++) {
        if (strcmp(r->cache[k].id, r->cfg->node_id) != 0 && i-- == 0) {
            return &r->cache[k];
        }
    }
    return NULL;
}

void
registry_get_stats(const struct registry *r, struct registry_stats *ret)
{
    *ret = r->stats;
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

static void
cache_free(struct registry *r)
{
    for (size_t i = 0; i < r->n_cache; i++) {
        store_node_rec_done(&r->cache[i]);
    }
    free(r->cache);
    r->cache = NULL;
    r->n_cache = 0;
}

struct registry *
registry_new(struct event_base *base, const struct cfg *cfg, struct store_redis *redis,
             const struct registry_self *self)
{
    struct registry *r = xcalloc(1, sizeof(*r));
    struct timeval tv;

    r->cfg = cfg;
    r->redis = redis;
    r->self = *self;
    r->nodes = store_nodes_new(redis, cfg->redis_prefix);
    r->tried = hashmap_new();
    r->started_at = time_wall_ms();
    r->timer = OOM_CHECK(event_new(base, -1, EV_PERSIST, on_beat, r));
    time_tv_from_ms(&tv, cfg->cluster_heartbeat_ms);
    (void)event_add(r->timer, &tv);
    beat_now(r); /* the first beat at once (when Redis is up by then) */
    return r;
}

struct registry *
registry_free(struct registry *r)
{
    if (r == NULL) {
        return NULL;
    }
    if (r->timer != NULL) {
        event_free(r->timer);
    }
    cache_free(r);
    hashmap_free_with(r->tried, free);
    store_nodes_free(r->nodes);
    free(r);
    return NULL;
}
