/* Which node owns a session: a bounded cache of what the session records in Redis said
 * (cluster/route.h asks it first). Least recently used entries go first once max are held.
 * Pure: no event base, no I/O; unit-tested in tests/unit/test-owners.c. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define OWNER_ID_MAX 64 /* session ids, node ids and tenant ids: at most this many bytes */

struct owner {
    char node[OWNER_ID_MAX + 1];
    char tenant[OWNER_ID_MAX + 1];
};

struct owners;

/* max >= 1. */
struct owners *owners_new(size_t max);
struct owners *owners_free(struct owners *o);
/* The cached owner of session id (now the most recently used), or NULL. */
const struct owner *owners_get(struct owners *o, const char *id);
/* Caches (or replaces) id's owner; the least recently used entry goes when max are held.
 * -ENAMETOOLONG (nothing cached) when id, node or tenant is longer than OWNER_ID_MAX. */
int owners_put(struct owners *o, const char *id, const char *node, const char *tenant);
void owners_forget(struct owners *o, const char *id);
size_t owners_size(const struct owners *o);
