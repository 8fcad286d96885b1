/* Fuzz target: the client library's server-sent events parser (src/client/sse.c), which reads
 * what a daemon (or anything answering on its URL) streams. The first byte picks a split size;
 * the rest is fed whole and in pieces of that size, and both runs must see the same events (a
 * digest of names, ids and data) and the same result. A small event bound makes the -EMSGSIZE
 * paths reachable. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/sse.h"
#include "util/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
on_event(const struct client_sse_event *ev, void *userdata)
{
    struct buf *log = userdata;

    if (ev->event[0] == '\0' || strlen(ev->id) > 63 || ev->data[ev->data_len] != '\0') {
        abort(); /* the parser's promises: a name, a bounded id, NUL-terminated data */
    }
    /* Over the cap the log stops growing; both runs stop alike. */
    if (buf_printf(log, "%s|%s|%zu|", ev->event, ev->id, ev->data_len) < 0 ||
        buf_append(log, ev->data, ev->data_len) < 0) {
        return 0;
    }
    return 0;
}

static int
run(const uint8_t *data, size_t size, size_t step, struct buf *log)
{
    struct client_sse p;
    int r = 0;

    client_sse_init(&p, 256, on_event, log);
    for (size_t off = 0; off < size && r == 0; off += step) {
        r = client_sse_feed(&p, (const char *)data + off, MIN(step, size - off));
    }
    if (r == 0 && client_sse_pending(&p)) {
        r = 1;
    }
    client_sse_done(&p);
    return r;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct buf a = BUF_INIT(1 << 20), b = BUF_INIT(1 << 20);
    size_t step;

    if (size < 1) {
        return 0;
    }
    step = 1 + data[0] % 17;
    if (run(data + 1, size - 1, size, &a) != run(data + 1, size - 1, step, &b) || a.len != b.len ||
        memcmp(a.buf, b.buf, a.len) != 0) {
        abort();
    }
    buf_done(&a);
    buf_done(&b);
    return 0;
}
