/* Fuzz target: the kernel's output stream as the daemon reads it (written inside the sandbox,
 * where user code can put anything in it): split into lines at arbitrary chunk boundaries, each
 * decoded as a kernel message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kernel/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
on_obj(json_t *obj, void *userdata)
{
    struct kernel_msg m;

    if (kernel_proto_decode(obj, &m) == 0 && m.type == KERNEL_MSG_OUT &&
        (m.text == NULL || m.id == NULL)) {
        abort();
    }
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kernel_splitter sp;
    size_t step = size > 0 ? 1 + data[0] % 97 : 1;

    kernel_splitter_init(&sp);
    for (size_t off = 0; off < size; off += step) {
        size_t n = size - off < step ? size - off : step;

        (void)kernel_splitter_feed(&sp, (const char *)data + off, n, on_obj, NULL);
    }
    kernel_splitter_done(&sp);
    return 0;
}
