/* The session owner cache; see owners.h. */
#include "cluster/owners.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "util/hashmap.h"
#include "util/macro.h"

struct entry {
    TAILQ_ENTRY(entry) link; /* most recently used first */
    char id[OWNER_ID_MAX + 1];
    struct owner owner;
};

struct owners {
    struct hashmap *by_id; /* id -> entry */
    TAILQ_HEAD(entry_list, entry) lru;
    size_t max;
};

struct owners *
owners_new(size_t max)
{
    struct owners *o = xcalloc(1, sizeof(*o));

    o->by_id = hashmap_new();
    TAILQ_INIT(&o->lru);
    o->max = MAX(max, (size_t)1);
    return o;
}

static void
entry_drop(struct owners *o, struct entry *e)
{
    (void)hashmap_remove(o->by_id, e->id);
    TAILQ_REMOVE(&o->lru, e, link);
    free(e);
}

struct owners *
owners_free(struct owners *o)
{
    if (o == NULL) {
        return NULL;
    }
    while (!TAILQ_EMPTY(&o->lru)) {
        entry_drop(o, TAILQ_FIRST(&o->lru));
    }
    hashmap_free(o->by_id);
    free(o);
    return NULL;
}

const struct owner *
owners_get(struct owners *o, const char *id)
{
    struct entry *e = hashmap_get(o->by_id, id);

    if (e == NULL) {
        return NULL;
    }
    TAILQ_REMOVE(&o->lru, e, link);
    TAILQ_INSERT_HEAD(&o->lru, e, link);
    return &e->owner;
}

int
owners_put(struct owners *o, const char *id, const char *node, const char *tenant)
{
    struct entry *e;

    if (strlen(id) > OWNER_ID_MAX || strlen(node) > OWNER_ID_MAX || strlen(tenant) > OWNER_ID_MAX) {
        return -ENAMETOOLONG;
    }
    e = hashmap_get(o->by_id, id);
    if (e == NULL) {
        if (hashmap_size(o->by_id) >= o->max) {
            entry_drop(o, TAILQ_LAST(&o->lru, entry_list));
        }
        e = xcalloc(1, sizeof(*e));
        (void)snprintf(e->id, sizeof(e->id), "%s", id);
        hashmap_put(o->by_id, e->id, e);
    } else {
        TAILQ_REMOVE(&o->lru, e, link);
    }
    TAILQ_INSERT_HEAD(&o->lru, e, link);
    (void)snprintf(e->owner.node, sizeof(e->owner.node), "%s", node);
    (void)snprintf(e->owner.tenant, sizeof(e->owner.tenant), "%s", tenant);
    return 0;
}

void
owners_forget(struct owners *o, const char *id)
{
    struct entry *e = hashmap_get(o->by_id, id);

    if (e != NULL) {
        entry_drop(o, e);
    }
}

size_t
owners_size(const struct owners *o)
{
    return hashmap_size(o->by_id);
}
