/* Fuzz target: the Docker multiplexed-stream parser. The first byte picks a split size, so the
 * same input is also fed in pieces; both runs must agree byte for byte. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "docker/frames.h"
#include "util/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct sink {
    struct buf out[DOCKER_STREAM__COUNT];
};

static int
on_data(enum docker_stream s, const char *d, size_t n, void *userdata)
{
    struct sink *k = userdata;

    if (n == 0 || s < 0 || s >= DOCKER_STREAM__COUNT) {
        abort();
    }
    if (buf_append(&k->out[s], d, n) < 0) {
        return 0; /* over the cap: dropped; both runs drop alike */
    }
    return 0;
}

static int
run(const uint8_t *data, size_t size, size_t step, struct sink *k)
{
    struct docker_frames f;
    int r = 0;

    docker_frames_init(&f);
    for (size_t off = 0; off < size && r == 0; off += step) {
        r = docker_frames_feed(&f, data + off, size - off < step ? size - off : step, on_data, k);
    }
    return r < 0 ? r : docker_frames_finish(&f);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sink a, b;
    size_t step;
    int ra, rb;

    if (size < 1) {
        return 0;
    }
    step = 1 + data[0] % 17;
    for (int i = 0; i < DOCKER_STREAM__COUNT; i++) {
        buf_init(&a.out[i], 1 << 20);
        buf_init(&b.out[i], 1 << 20);
    }
    ra = run(data + 1, size - 1, size, &a);
    rb = run(data + 1, size - 1, step, &b);
    if (ra != rb) {
        abort();
    }
    for (int i = 0; i < DOCKER_STREAM__COUNT; i++) {
        if (a.out[i].len != b.out[i].len || memcmp(a.out[i].buf, b.out[i].buf, a.out[i].len)) {
            abort();
        }
        buf_done(&a.out[i]);
        buf_done(&b.out[i]);
    }
    return 0;
}
