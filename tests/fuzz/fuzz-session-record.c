/* Fuzz target: session records as read back from Redis (HGETALL field/value pairs). The input is
 * split at NUL bytes into fields and values. A record that parses must round-trip. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *kv[64];
    size_t lens[64], n = 0, start = 0;
    struct store_session_rec rec, again;

    for (size_t i = 0; i <= size && n < 64; i++) {
        if (i == size || data[i] == '\0') {
            kv[n] = (const char *)data + start;
            lens[n++] = i - start;
            start = i + 1;
        }
    }
    if (store_session_parse(kv, lens, n, &rec) == 0) {
        char scratch[STORE_SCRATCH][24];
        const char *argv[STORE_FIELDS_ARGV];
        size_t alen[STORE_FIELDS_ARGV];
        int argc = 0;

        store_session_fields(&rec, scratch, argv, alen, &argc);
        if (store_session_parse(argv, alen, (size_t)argc, &again) != 0 ||
            strcmp(again.id, rec.id) != 0 || again.epoch != rec.epoch ||
            strcmp(again.metadata, rec.metadata) != 0 || strcmp(again.ext, rec.ext) != 0 ||
            again.snapshot_size != rec.snapshot_size ||
            strcmp(again.snapshot_sha256, rec.snapshot_sha256) != 0) {
            abort();
        }
        store_session_rec_done(&again);
        store_session_rec_done(&rec);
    }
    return 0;
}
