/* Fuzz target: the chunked framing decoder under the body filter (src/api/chunked.c). The first
 * byte seeds where the stream is cut; the rest is what follows a chunked head on a connection.
 *
 * The stream is decoded four ways: whole (api_chunked_feed() on what is left until it ends), in
 * pieces cut where the seed says, a byte at a time, and the way body.c's pass_chunked() follows a
 * body (data skipped unseen with api_chunked_skip(), in pieces too). Every way must give the same
 * verdict (done, failed, more), the same data bytes at the same positions of the input and the
 * same end (the byte after the body, the byte it failed at, or the end of the input). Every call
 * is checked: its span lies inside what it took, `total` grows by the span, a call that returns 0
 * takes everything unless it ends with a span, and after the end nothing more is taken.
 *
 * Two references judge the result. A plain decoder of the grammar in chunked.c's opening comment
 * must agree exactly. A model of evhttp 2.1.12's chunked reading (evhttp_handle_chunked_read():
 * size lines through strtoll, empty lines skipped; then evhttp_read_trailer()) must end a body
 * the decoder completes at the same byte with the same data, and must not have ended a body the
 * decoder is still in or fails in: the subset promise the filter's framing rests on. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "api/api-internal.h"
#include "fuzz.h"
#include "util/buf.h"
#include "util/macro.h"

enum mode {
    M_WHOLE,
    M_PIECES,
    M_BYTES,
    M_SKIP, /* as pass_chunked(): data skipped unseen */
    M__COUNT,
};

/* How a decode ended: 1 done, 0 more, -1 failed; end as above; data and where it was. */
struct result {
    int verdict;
    size_t end;
    struct buf data;
    unsigned char *mark; /* mark[i]: input byte i is body data */
};

static void
result_init(struct result *r, size_t n)
{
    *r = (struct result){.data = BUF_INIT(n + 1), .mark = calloc(n + 1, 1)};
    CHECK(r->mark != NULL);
}

static void
result_done(struct result *r)
{
    buf_done(&r->data);
    free(r->mark);
}

static void
take_data(struct result *r, const char *in, size_t at, size_t n)
{
    CHECK(buf_append(&r->data, in + at, n) == 0);
    for (size_t i = 0; i < n; i++) {
        CHECK(r->mark[at + i] == 0);
        r->mark[at + i] = 1;
    }
}

static uint64_t
rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static size_t
piece_len(enum mode m, uint64_t *rng, size_t left)
{
    size_t n;

    if (m == M_WHOLE) {
        return left;
    }
    if (m == M_BYTES) {
        return 1;
    }
    n = rng_next(rng) % 4 == 0 ? 1 + rng_next(rng) % 600 : 1 + rng_next(rng) % 9;
    return MIN(n, left);
}

/* Once the body ended (done or failed) nothing more is taken, whatever comes. */
static void
check_ended(struct api_chunked *d, int verdict, const char *rest, size_t n)
{
    static const char junk[] = "0\r\n\r\n";
    size_t used = 7, off = 7, len = 7;
    uint64_t total = d->total;
    int r;

    if (n == 0) {
        rest = junk;
        n = sizeof(junk) - 1;
    }
    r = api_chunked_feed(d, rest, n, &used, &off, &len);
    CHECK(r == (verdict == 1 ? 1 : -EINVAL));
    CHECK(used == 0 && len == 0 && d->total == total);
    CHECK(d->state == (verdict == 1 ? API_CHUNKED_DONE : API_CHUNKED_FAILED));
}

/* One call of api_chunked_feed() on in[at, at + n): checked, its data recorded. 1 or -1 when the
 * body ended (r->end set), else 0 with *ret_used. */
static int
feed_once(struct api_chunked *d, const char *in, size_t at, size_t n, struct result *r,
          size_t *ret_used)
{
    size_t used = SIZE_MAX, off = SIZE_MAX, len = SIZE_MAX;
    uint64_t total = d->total;
    int rc = api_chunked_feed(d, in + at, n, &used, &off, &len);

    CHECK(used <= n && off <= used && len <= used - off);
    CHECK(d->total == total + len);
    if (len > 0) {
        CHECK(rc == 0 && off + len == used); /* one span, and the call ends with it */
        take_data(r, in, at + off, len);
    }
    if (rc == 1) {
        CHECK(d->state == API_CHUNKED_DONE);
        r->end = at + used;
        return 1;
    }
    if (rc < 0) {
        CHECK(rc == -EINVAL && d->state == API_CHUNKED_FAILED && used < n);
        r->end = at + used;
        return -1;
    }
    CHECK(rc == 0 && d->state != API_CHUNKED_DONE && d->state != API_CHUNKED_FAILED);
    CHECK(used > 0 && (len > 0 || used == n)); /* progress; all of it unless a span ended it */
    *ret_used = used;
    return 0;
}

/* In API_CHUNKED_DATA: skips what the piece holds of the chunk, as pass_chunked() does. */
static size_t
skip_once(struct api_chunked *d, const char *in, size_t at, size_t n, struct result *r)
{
    size_t k = (size_t)MIN((uint64_t)n, d->left);
    uint64_t total = d->total, left = d->left;

    CHECK(left > 0);
    api_chunked_skip(d, k);
    CHECK(d->total == total + k && d->left == left - k);
    CHECK(d->state == (d->left == 0 ? API_CHUNKED_DATA_END : API_CHUNKED_DATA));
    take_data(r, in, at, k);
    return k;
}

static void
decode(const char *in, size_t n, enum mode m, uint64_t seed, struct result *r)
{
    struct api_chunked d;
    uint64_t rng = seed;
    size_t pos = 0, zero_used = 9, zero_off = 9, zero_len = 9;

    result_init(r, n);
    api_chunked_init(&d);
    CHECK(d.state == API_CHUNKED_SIZE && d.total == 0);
    CHECK(api_chunked_feed(&d, in, 0, &zero_used, &zero_off, &zero_len) == 0);
    CHECK(zero_used == 0 && zero_len == 0 && d.state == API_CHUNKED_SIZE);
    while (pos < n) {
        size_t piece = piece_len(m, &rng, n - pos), off = 0;

        while (off < piece) {
            size_t used = 0;
            int rc;

            if (m == M_SKIP && d.state == API_CHUNKED_DATA) {
                off += skip_once(&d, in, pos + off, piece - off, r);
                continue;
            }
            rc = feed_once(&d, in, pos + off, piece - off, r, &used);
            if (rc != 0) {
                r->verdict = rc;
                check_ended(&d, rc, in + r->end, n - r->end);
                CHECK(d.total == r->data.len);
                return;
            }
            off += used;
        }
        pos += piece;
    }
    r->verdict = 0;
    r->end = n;
    CHECK(d.total == r->data.len);
}

/* ---- the references -------------------------------------------------------------------------- */

static int
hex(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') {
        return (c | 0x20) - 'a' + 10;
    }
    return -1;
}

/* A line end at in[*pos] (CRLF or LF): 1 taken, 0 the input ends first, -1 none (*pos at the
 * offending byte). */
static int
eol(const char *in, size_t n, size_t *pos)
{
    if (*pos == n) {
        return 0;
    }
    if (in[*pos] == '\n') {
        ++*pos;
        return 1;
    }
    if (in[*pos] != '\r') {
        return -1;
    }
    if (++*pos == n) {
        return 0;
    }
    if (in[*pos] != '\n') {
        return -1;
    }
    ++*pos;
    return 1;
}

/* chunk = 1*15HEXDIG EOL data EOL, last = 1*15"0" EOL EOL: straight over the whole input. */
static void
reference(const char *in, size_t n, struct result *r)
{
    size_t pos = 0;
    int e;

    result_init(r, n);
    for (;;) {
        uint64_t size = 0;
        size_t digits = 0, take;

        while (pos < n && digits < 15 && hex(in[pos]) >= 0) {
            size = size << 4 | (uint64_t)hex(in[pos++]);
            digits++;
        }
        if (pos == n) {
            break;
        }
        if (digits == 0 || (e = eol(in, n, &pos)) < 0) {
            r->verdict = -1;
            r->end = pos;
            return;
        }
        if (e == 0) {
            break;
        }
        if (size > 0) {
            take = (size_t)MIN(size, (uint64_t)(n - pos));
            take_data(r, in, pos, take);
            pos += take;
            if (take < size) {
                break;
            }
        }
        if ((e = eol(in, n, &pos)) <= 0) {
            r->verdict = e;
            r->end = e < 0 ? pos : n;
            return;
        }
        if (size == 0) {
            r->verdict = 1;
            r->end = pos;
            return;
        }
    }
    r->verdict = 0;
    r->end = n;
}

/* glibc's strtoll(p, &end, 16) over the C string p[0, n) (n: up to its first NUL). */
static long long
strtoll16(const char *p, size_t n, size_t *ret_end)
{
    size_t i = 0, start;
    bool neg = false, over = false;
    unsigned long long v = 0;

    while (i < n && strchr(" \t\n\v\f\r", p[i]) != NULL) {
        i++;
    }
    if (i < n && (p[i] == '+' || p[i] == '-')) {
        neg = p[i++] == '-';
    }
    if (i + 2 < n && p[i] == '0' && (p[i + 1] | 0x20) == 'x' && hex(p[i + 2]) >= 0) {
        i += 2; /* "0x" with no digit after it is the number 0, ending at the x */
    }
    start = i;
    for (; i < n && hex(p[i]) >= 0; i++) {
        over = over || v > (ULLONG_MAX >> 4);
        v = v << 4 | (unsigned long long)hex(p[i]);
    }
    if (i == start) {
        *ret_end = 0; /* no digits: end is the string itself */
        return 0;
    }
    *ret_end = i;
    if (neg && (over || v > (unsigned long long)LLONG_MAX)) {
        return LLONG_MIN; /* LLONG_MIN itself too */
    }
    if (neg) {
        return -(long long)v;
    }
    return over || v > (unsigned long long)LLONG_MAX ? LLONG_MAX : (long long)v;
}

/* evbuffer_readln(EVBUFFER_EOL_CRLF) at *pos: the line, without its LF and a CR before it. */
static bool
readln(const char *in, size_t n, size_t *pos, const char **ret_line, size_t *ret_len)
{
    const char *nl = memchr(in + *pos, '\n', n - *pos);
    size_t len;

    if (nl == NULL) {
        return false;
    }
    len = (size_t)(nl - (in + *pos));
    *ret_line = in + *pos;
    *ret_len = len > 0 && in[*pos + len - 1] == '\r' ? len - 1 : len;
    *pos += len + 1;
    return true;
}

/* evhttp_read_trailer(): header lines up to an empty one (evhttp_parse_headers_()); a
 * continuation line joins the trailer's last header (the installed 2.1.12 refuses one first). */
static int
evhttp_trailer(const char *in, size_t n, size_t *pos)
{
    const char *line;
    size_t len;
    bool any = false;

    while (readln(in, n, pos, &line, &len)) {
        len = strnlen(line, len); /* a C string */
        if (len == 0) {
            return 1;
        }
        if (line[0] == ' ' || line[0] == '\t' ? !any : memchr(line, ':', len) == NULL) {
            return -1;
        }
        any = true;
    }
    return 0;
}

/* evhttp 2.1.12 reading a chunked request body (no body size limit): 1 ended at *ret_end, 0
 * more, -1 corrupted. */
static int
evhttp_model(const char *in, size_t n, struct result *r)
{
    size_t pos = 0;
    const char *line;
    size_t len;

    result_init(r, n);
    r->end = n;
    while (readln(in, n, &pos, &line, &len)) {
        size_t end = 0;
        long long size;

        len = strnlen(line, len);
        if (len == 0) {
            continue; /* "the last chunk is on a new line?" */
        }
        size = strtoll16(line, len, &end);
        if ((end < len && line[end] != ' ') || size < 0) {
            return r->verdict = -1;
        }
        if (size == 0) {
            r->verdict = evhttp_trailer(in, n, &pos);
            r->end = r->verdict == 1 ? pos : n;
            return r->verdict;
        }
        if ((uint64_t)size > n - pos) {
            return r->verdict = 0;
        }
        take_data(r, in, pos, (size_t)size);
        pos += (size_t)size;
    }
    return r->verdict = 0;
}

static bool
same(const struct result *a, const struct result *b, size_t n)
{
    return a->verdict == b->verdict && a->end == b->end && a->data.len == b->data.len &&
           memcmp(a->data.buf, b->data.buf, a->data.len) == 0 && memcmp(a->mark, b->mark, n) == 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = (const char *)data + 1;
    size_t n = size > 0 ? size - 1 : 0;
    struct result ref, r, ev;
    uint64_t seed;

    if (size == 0) {
        return 0;
    }
    seed = data[0] * 0x100000001b3u;
    reference(in, n, &ref);
    CHECK(ref.end <= n && (ref.verdict != 0 || ref.end == n));
    for (int m = 0; m < M__COUNT; m++) {
        decode(in, n, (enum mode)m, seed + (uint64_t)m, &r);
        CHECK(same(&r, &ref, n));
        result_done(&r);
    }
    /* evhttp ends a body the decoder completes at the same byte, with the same data; it has not
     * ended one the decoder is still reading or fails in. */
    (void)evhttp_model(in, ref.verdict == 1 ? n : ref.end, &ev);
    if (ref.verdict == 1) {
        CHECK(ev.verdict == 1 && ev.end == ref.end && ev.data.len == ref.data.len &&
              memcmp(ev.data.buf, ref.data.buf, ref.data.len) == 0);
    } else {
        CHECK(ev.verdict == 0);
    }
    result_done(&ev);
    result_done(&ref);
    return 0;
}
