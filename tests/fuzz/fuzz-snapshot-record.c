/* Fuzz target: snapshot records as read back from Redis (HGETALL field/value pairs, split at NUL
 * bytes). A record that parses has a valid id, a tenant and a manifest of bounded length. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/snapshots.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *kv[64];
    size_t lens[64], n = 0, start = 0;
    struct store_snapshot_rec rec;

    for (size_t i = 0; i <= size && n < 64; i++) {
        if (i == size || data[i] == '\0') {
            kv[n] = (const char *)data + start;
            lens[n++] = i - start;
            start = i + 1;
        }
    }
    if (store_snapshot_parse(kv, lens, n & ~(size_t)1, &rec) == 0) {
        if (!store_snapshot_valid_id(rec.id) || rec.tenant[0] == '\0' || rec.manifest == NULL ||
            strlen(rec.manifest) > STORE_SNAPSHOT_MANIFEST_MAX) {
            abort();
        }
        store_snapshot_rec_done(&rec);
    }
    return 0;
}
