/* Fuzz target: src/e2b/wire.c. The input as one Connect envelope (a parsed message lies inside
 * the input and writes back to the same bytes), and as a multipart/form-data body with the
 * boundary "B", parsed whole and in pieces split where the first byte says: both parses must
 * report the same parts and data, and never more data than came in. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "e2b/wire.h"
#include "fuzz.h"

struct seen {
    struct buf log;
    size_t data_bytes;
};

static int
on_part(const char *name, const char *filename, void *userdata)
{
    struct seen *s = userdata;

    CHECK(name[0] != '\0');
    return buf_printf(&s->log, "[%s|%s]", name, filename) < 0 ? -ENOBUFS : 0;
}

static int
on_data(const char *data, size_t n, void *userdata)
{
    struct seen *s = userdata;

    s->data_bytes += n;
    return buf_append(&s->log, data, n) < 0 ? -ENOBUFS : 0;
}

static int
on_part_end(void *userdata)
{
    struct seen *s = userdata;

    return buf_putc(&s->log, '.') < 0 ? -ENOBUFS : 0;
}

static const struct e2b_mp_events events = {on_part, on_data, on_part_end};

/* Parses in two pieces split at cut; the result code, the log in *log (malloc'd). */
static int
parse(const char *data, size_t size, size_t cut, char **log, size_t *log_len, size_t *data_bytes)
{
    struct seen s = {.log = BUF_INIT(4u * 1024 * 1024)};
    struct e2b_multipart mp;
    struct err e = {0};
    int r;

    e2b_multipart_init(&mp, "B", &events, &s);
    r = e2b_multipart_feed(&mp, data, cut, &e);
    if (r == 0) {
        r = e2b_multipart_feed(&mp, data + cut, size - cut, &e);
    }
    if (r == 0) {
        r = e2b_multipart_finish(&mp, &e);
    }
    CHECK(r == 0 || r == -EINVAL || r == -ENOBUFS);
    CHECK(r != -EINVAL || e.msg[0] != '\0');
    e2b_multipart_done(&mp);
    *data_bytes = s.data_bytes;
    *log = buf_detach(&s.log, log_len);
    return r;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *msg = NULL, *in = (const char *)data;
    size_t n = 0, la = 0, lb = 0, da = 0, db = 0;
    uint8_t flags = 0;
    struct err e = {0};
    char *a, *b;
    int ra, rb;

    if (e2b_envelope_parse(in, size, 1u << 20, &flags, &msg, &n, &e) == 0) {
        struct buf again = BUF_INIT(size);

        CHECK(msg == in + E2B_ENVELOPE_HEAD && n == size - E2B_ENVELOPE_HEAD);
        CHECK(e2b_envelope_write(&again, flags, msg, n) == 0);
        CHECK(again.len == size && memcmp(again.buf, in, size) == 0);
        buf_done(&again);
    } else {
        CHECK(e.msg[0] != '\0');
    }
    ra = parse(in, size, 0, &a, &la, &da);
    rb = parse(in, size, size > 0 ? data[0] % size : 0, &b, &lb, &db);
    CHECK(ra == rb);
    CHECK(ra != 0 || (la == lb && memcmp(a, b, la) == 0));
    CHECK(da <= size && db <= size);
    free(a);
    free(b);
    return 0;
}
