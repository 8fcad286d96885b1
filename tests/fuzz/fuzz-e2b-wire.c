/* Fuzz target: src/e2b/wire.c. The input as one Connect envelope (a parsed message lies inside
 * the input and writes back to the same bytes), and as a multipart/form-data body with the
 * boundary "B", parsed whole and in pieces split where the first byte says: both parses must
 * report the same parts and data, and never more data than came in. A third parse goes through
 * e2b_multipart_feed_some() with callbacks that answer E2B_MP_PAUSE at pseudo-random events (the
 * input's last byte seeds them), resuming with the bytes the pause left: the same result and the
 * same events as the parse that never paused; a pause stops the parse right after its event (no
 * event follows before feed_some() returns), *ret_used never passes what was fed, and data
 * handed to on_data lies inside what was fed or is the delimiter's withheld prefix. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "e2b/wire.h"
#include "fuzz.h"

struct seen {
    struct buf log;
    size_t data_bytes;
    /* the pausing parse */
    uint64_t rng;    /* 0: never pause */
    bool paused;     /* a callback answered E2B_MP_PAUSE, feed_some() has not returned */
    const char *fed; /* what the current feed_some() call got */
    size_t fed_n;
    const struct e2b_multipart *mp;
};

/* Whether this event pauses the parse (checked: no event after a pause). */
static int
answer(struct seen *s, int r)
{
    CHECK(!s->paused);
    if (r != 0 || s->rng == 0) {
        return r;
    }
    s->rng = s->rng * 6364136223846793005u + 1442695040888963407u;
    s->paused = (s->rng >> 61) == 0; /* one event in 8 */
    return s->paused ? E2B_MP_PAUSE : 0;
}

static int
on_part(const char *name, const char *filename, void *userdata)
{
    struct seen *s = userdata;

    CHECK(name[0] != '\0');
    return answer(s, buf_printf(&s->log, "[%s|%s]", name, filename) < 0 ? -ENOBUFS : 0);
}

static int
on_data(const char *data, size_t n, void *userdata)
{
    struct seen *s = userdata;

    s->data_bytes += n;
    if (s->mp != NULL) {
        bool in_fed = data >= s->fed && data + n <= s->fed + s->fed_n;
        bool withheld = data == s->mp->delim && n < s->mp->delim_len;

        CHECK(n > 0 && (in_fed || withheld));
    }
    return answer(s, buf_append(&s->log, data, n) < 0 ? -ENOBUFS : 0);
}

static int
on_part_end(void *userdata)
{
    struct seen *s = userdata;

    return answer(s, buf_putc(&s->log, '.') < 0 ? -ENOBUFS : 0);
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
    s.mp = &mp;
    s.fed = data;
    s.fed_n = cut;
    r = e2b_multipart_feed(&mp, data, cut, &e);
    if (r == 0) {
        s.fed = data + cut;
        s.fed_n = size - cut;
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

/* Feeds data[0, n) through e2b_multipart_feed_some(), resuming after every pause. */
static int
feed_pausing(struct e2b_multipart *mp, struct seen *s, const char *data, size_t n, struct err *e)
{
    size_t calls = 0, max_calls = 2 * n + 2;

    while (n > 0) {
        size_t used = SIZE_MAX;
        int r;

        s->fed = data;
        s->fed_n = n;
        r = e2b_multipart_feed_some(mp, data, n, &used, e);
        CHECK(used <= n);
        CHECK(s->paused == (r == E2B_MP_PAUSE));
        s->paused = false;
        if (r < 0) {
            return r;
        }
        CHECK(r == 0 || r == E2B_MP_PAUSE);
        CHECK(r != 0 || used == n);
        CHECK(++calls <= max_calls); /* a pause that takes nothing is followed by progress */
        data += used;
        n -= used;
    }
    return 0;
}

/* parse() through feed_pausing(), in two pieces split at cut. */
static int
parse_pausing(const char *data, size_t size, size_t cut, uint64_t seed, char **log, size_t *log_len)
{
    struct seen s = {.log = BUF_INIT(4u * 1024 * 1024), .rng = seed | 1};
    struct e2b_multipart mp;
    struct err e = {0};
    int r;

    e2b_multipart_init(&mp, "B", &events, &s);
    s.mp = &mp;
    r = feed_pausing(&mp, &s, data, cut, &e);
    if (r == 0) {
        r = feed_pausing(&mp, &s, data + cut, size - cut, &e);
    }
    if (r == 0) {
        r = e2b_multipart_finish(&mp, &e);
    }
    e2b_multipart_done(&mp);
    *log = buf_detach(&s.log, log_len);
    return r;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *msg = NULL, *in = (const char *)data;
    size_t n = 0, la = 0, lb = 0, lc = 0, da = 0, db = 0;
    uint8_t flags = 0;
    struct err e = {0};
    char *a, *b, *c;
    int ra, rb, rc;

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
    /* Pauses change nothing, not even where a failed parse stopped. */
    rc = parse_pausing(in, size, size > 0 ? data[0] % size : 0,
                       size > 0 ? data[size - 1] * 0x9e3779b97f4a7c15u : 1, &c, &lc);
    CHECK(rc == rb && lc == lb && memcmp(c, b, lb) == 0);
    free(a);
    free(b);
    free(c);
    return 0;
}
