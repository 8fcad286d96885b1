/* Fuzz target: engine answers. The input is split like an events stream (newline-delimited,
 * arbitrary chunking), each object goes through the state and label extractors, and the whole
 * input is also tried as an error body for the status mapper. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "docker/client.h"
#include "docker/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
on_obj(json_t *obj, void *userdata)
{
    struct docker_state st;
    const char *l;

    (void)docker_parse_state(obj, &st);
    l = docker_label(obj, "sandpool.slot");
    if (l != NULL && strlen(l) > (size_t)-2) {
        abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct buf b = BUF_INIT(1 << 20);
    struct err e = {0};
    size_t step = size > 0 ? 1 + data[0] % 64 : 1;

    for (size_t off = 0; off < size; off += step) {
        size_t n = size - off < step ? size - off : step;

        if (buf_append(&b, data + off, n) < 0 ||
            docker_json_split_lines(&b, 4096, on_obj, NULL) < 0) {
            break;
        }
    }
    buf_done(&b);
    (void)docker_status_to_errno(404, (const char *)data, size, &e);
    if (strlen(e.msg) >= sizeof(e.msg)) {
        abort();
    }
    return 0;
}
