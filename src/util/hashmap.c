/* Hash map; see hashmap.h. Buckets are singly linked lists; the table doubles when the number
 * of entries passes the number of buckets, so lookups stay O(1) on average. */
#include "hashmap.h"

#include <stdint.h>
#include <string.h>

#include "util/macro.h"

struct entry {
    struct entry *next;
    uint64_t hash;
    void *value;
    char key[];
};

struct hashmap {
    struct entry **buckets;
    size_t n_buckets, n_entries;
};

static uint64_t
fnv1a(const char *s)
{
    uint64_t h = 14695981039346656037ull;

    for (; *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

struct hashmap *
hashmap_new(void)
{
    struct hashmap *m = xcalloc(1, sizeof(*m));

    m->n_buckets = 64;
    m->buckets = xcalloc(m->n_buckets, sizeof(struct entry *));
    return m;
}

struct hashmap *
hashmap_free(struct hashmap *m)
{
    return hashmap_free_with(m, NULL);
}

struct hashmap *
hashmap_free_with(struct hashmap *m, void (*free_value)(void *value))
{
    if (m == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < m->n_buckets; i++) {
        struct entry *e = m->buckets[i], *next;

        for (; e != NULL; e = next) {
            next = e->next;
            if (free_value != NULL) {
                free_value(e->value);
            }
            free(e);
        }
    }
    free(m->buckets);
    free(m);
    return NULL;
}

static void
grow(struct hashmap *m)
{
    size_t n = m->n_buckets * 2;
    struct entry **b = xcalloc(n, sizeof(struct entry *));

    for (size_t i = 0; i < m->n_buckets; i++) {
        struct entry *e = m->buckets[i], *next;

        for (; e != NULL; e = next) {
            next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->n_buckets = n;
}

static struct entry **
find(const struct hashmap *m, const char *key, uint64_t h)
{
    struct entry **pe = &m->buckets[h & (m->n_buckets - 1)];

    for (; *pe != NULL; pe = &(*pe)->next) {
        if ((*pe)->hash == h && strcmp((*pe)->key, key) == 0) {
            return pe;
        }
    }
    return pe;
}

void
hashmap_put(struct hashmap *m, const char *key, void *value)
{
    uint64_t h = fnv1a(key);
    struct entry **pe = find(m, key, h);
    size_t len = strlen(key);
    struct entry *e;

    if (*pe != NULL) {
        (*pe)->value = value;
        return;
    }
    e = xmalloc(sizeof(*e) + len + 1);
    e->hash = h;
    e->value = value;
    memcpy(e->key, key, len + 1);
    e->next = NULL;
    *pe = e;
    if (++m->n_entries > m->n_buckets) {
        grow(m);
    }
}

void *
hashmap_get(const struct hashmap *m, const char *key)
{
    struct entry **pe = find(m, key, fnv1a(key));

    return *pe != NULL ? (*pe)->value : NULL;
}

void *
hashmap_remove(struct hashmap *m, const char *key)
{
    struct entry **pe = find(m, key, fnv1a(key));
    struct entry *e = *pe;
    void *v;

    if (e == NULL) {
        return NULL;
    }
    *pe = e->next;
    v = e->value;
    free(e);
    m->n_entries--;
    return v;
}

size_t
hashmap_size(const struct hashmap *m)
{
    return m->n_entries;
}
