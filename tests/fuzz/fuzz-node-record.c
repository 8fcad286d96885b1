/* Fuzz target: node registry records as read back from Redis (HGETALL field/value pairs, split at
 * NUL bytes; store/nodes.h). A record that parses has a name for its id, a URL, and a capacity
 * text of bounded length. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/nodes.h"
#include "util/parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *kv[64];
    size_t lens[64], n = 0, start = 0;
    struct store_node_rec rec;

    for (size_t i = 0; i <= size && n < 64; i++) {
        if (i == size || data[i] == '\0') {
            kv[n] = (const char *)data + start;
            lens[n++] = i - start;
            start = i + 1;
        }
    }
    if (store_node_parse(kv, lens, n & ~(size_t)1, &rec) == 0) {
        if (!str_is_name(rec.id, 64) || rec.url[0] == '\0' || rec.capacity == NULL ||
            strlen(rec.capacity) > STORE_NODE_CAPACITY_MAX) {
            abort();
        }
        /* never live once its ttl passed (when that time is representable) */
        if (rec.heartbeat_at <= UINT64_MAX - rec.ttl_ms &&
            store_node_live(&rec, rec.heartbeat_at + rec.ttl_ms)) {
            abort();
        }
        store_node_rec_done(&rec);
    }
    return 0;
}
