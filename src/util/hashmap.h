/* String-keyed hash map with chaining (FNV-1a), growing at load factor 1. Keys are copied;
 * values are borrowed pointers. Not ordered. */
#pragma once

#include <stddef.h>

struct hashmap;

struct hashmap *hashmap_new(void);
/* Frees the map (not the values). Accepts NULL. */
struct hashmap *hashmap_free(struct hashmap *m);
/* Frees the map and passes every value to free_value (NULL: none). Accepts NULL. */
struct hashmap *hashmap_free_with(struct hashmap *m, void (*free_value)(void *value));
/* Inserts or replaces. */
void hashmap_put(struct hashmap *m, const char *key, void *value);
void *hashmap_get(const struct hashmap *m, const char *key);
/* Removes key; returns its value or NULL. */
void *hashmap_remove(struct hashmap *m, const char *key);
size_t hashmap_size(const struct hashmap *m);
