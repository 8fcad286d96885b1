/* Fuzz target: the chunked framing scanner (src/util/chunked.c), which the API's body filter
 * (body.c, held.c) and the egress proxy (conn.c, flow.c) frame chunked bodies with. The first
 * byte seeds where the stream is cut and a third set of rules; the rest is what follows a chunked
 * head on a connection. It is judged under the body filter's rules (HTTP_CHUNKED_RULES), the
 * proxy's (EGRESS_CHUNKED_RULES) and the seeded ones.
 *
 * The stream is decoded seven ways: with chunked_feed() whole, in pieces cut where the seed says,
 * a byte at a time, and the way body.c's pass_chunked() follows a body (data skipped unseen with
 * chunked_skip(), in pieces too); with chunked_scan() in pieces, a byte at a time, and the way
 * flow.c drives it (a chunk's data let through unread, the framing scanned in peeks of up to
 * 8 KiB). Every way must give the same verdict (done, failed, more), the same end (the byte after
 * the body, the byte it failed at, or the end of the input) and the same data bytes at the same
 * positions of the input (the scans, the same count). Every call is checked: a feed's span lies
 * inside what it took, `total` grows by the span, a call that returns 0 takes everything unless
 * it ends with a span, a scan takes all of its piece unless the body ends in it, a refusal says
 * why, and after the end nothing more is taken.
 *
 * Two references judge the result. A plain decoder of the grammar in chunked.h under the same
 * rules must agree exactly. A model of evhttp 2.1.12's chunked reading
 * (evhttp_handle_chunked_read(): size lines through strtoll, empty lines skipped; then
 * evhttp_read_trailer()) must end a body the scanner completes at the same byte with the same data,
 * and must not have ended a body the scanner is still in or fails in: the subset promise the body
 * filter's framing rests on (it holds for any rules whose sizes fit evhttp's int64). */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "egress/head.h"
#include "fuzz.h"
#include "http/http-internal.h"
#include "util/buf.h"
#include "util/chunked.h"
#include "util/macro.h"

enum mode {
    M_WHOLE,
    M_PIECES,
    M_BYTES,
    M_SKIP, /* as pass_chunked(): data skipped unseen */
    M_SCAN_PIECES,
    M_SCAN_BYTES,
    M_SCAN_FLOW, /* as flow.c: data let through unread, the framing scanned in 8 KiB peeks */
    M__COUNT,
};

#define PEEK_MAX 8192 /* flow.c's */

/* How a decode ended: 1 done, 0 more, -1 failed; end as above; data and where it was. */
struct result {
    int verdict;
    size_t end;
    struct buf data;
    unsigned char *mark; /* mark[i]: input byte i is body data */
    uint64_t total;      /* the scanner's count of data bytes */
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

    switch (m) {
    case M_WHOLE:
        return left;
    case M_BYTES:
    case M_SCAN_BYTES:
        return 1;
    case M_SCAN_FLOW:
        return MIN((size_t)PEEK_MAX, left);
    default:
        n = rng_next(rng) % 4 == 0 ? 1 + rng_next(rng) % 600 : 1 + rng_next(rng) % 9;
        return MIN(n, left);
    }
}

/* ---- the scanner, seven ways ----------------------------------------------------------------- */

/* Once the body ended (done or failed) nothing more is taken, whatever comes, nor nothing. */
static void
check_ended(struct chunked *c, int verdict, const char *rest, size_t n)
{
    static const char junk[] = "0\r\n\r\n";
    size_t used = 7, off = 7, len = 7;
    uint64_t total = c->total;
    struct err e = {0};
    int want = verdict == 1 ? 1 : -EINVAL, r;

    if (n == 0) {
        rest = junk;
        n = sizeof(junk) - 1;
    }
    r = chunked_feed(c, rest, n, &used, &off, &len, &e);
    CHECK(r == want && used == 0 && len == 0 && c->total == total);
    CHECK(r == 1 || e.msg[0] != '\0');
    used = 7;
    r = chunked_scan(c, junk, 0, &used, NULL);
    CHECK(r == want && used == 0);
    CHECK(c->state == (verdict == 1 ? CHUNKED_DONE : CHUNKED_FAILED));
    CHECK(chunked_data_left(c) == 0);
}

/* One call of chunked_feed() on in[at, at + n): checked, its data recorded. 1 or -1 when the
 * body ended (r->end set), else 0 with *ret_used. */
static int
feed_once(struct chunked *c, const char *in, size_t at, size_t n, struct result *r,
          size_t *ret_used)
{
    size_t used = SIZE_MAX, off = SIZE_MAX, len = SIZE_MAX;
    uint64_t total = c->total;
    struct err e = {0};
    int rc = chunked_feed(c, in + at, n, &used, &off, &len, &e);

    CHECK(used <= n && off <= used && len <= used - off);
    CHECK(c->total == total + len);
    if (len > 0) {
        CHECK(rc == 0 && off + len == used); /* one span, and the call ends with it */
        take_data(r, in, at + off, len);
    }
    if (rc == 1) {
        CHECK(c->state == CHUNKED_DONE);
        r->end = at + used;
        return 1;
    }
    if (rc < 0) {
        CHECK(rc == -EINVAL && c->state == CHUNKED_FAILED && used < n && e.msg[0] != '\0');
        r->end = at + used;
        return -1;
    }
    CHECK(rc == 0 && c->state != CHUNKED_DONE && c->state != CHUNKED_FAILED);
    CHECK(used > 0 && (len > 0 || used == n)); /* progress; all of it unless a span ended it */
    *ret_used = used;
    return 0;
}

/* One call of chunked_scan() on in[at, at + n): all of it, unless the body ends in it. */
static int
scan_once(struct chunked *c, const char *in, size_t at, size_t n, struct result *r)
{
    size_t used = SIZE_MAX;
    uint64_t total = c->total;
    struct err e = {0};
    int rc = chunked_scan(c, in + at, n, &used, &e);

    CHECK(used <= n && c->total >= total && c->total - total <= used);
    if (rc == 0) {
        CHECK(used == n && c->state != CHUNKED_DONE && c->state != CHUNKED_FAILED);
        return 0;
    }
    CHECK(rc == 1 || (rc == -EINVAL && used < n && e.msg[0] != '\0'));
    CHECK(c->state == (rc == 1 ? CHUNKED_DONE : CHUNKED_FAILED));
    r->end = at + used;
    return rc == 1 ? 1 : -1;
}

/* In CHUNKED_DATA: skips what in[at, at + n) holds of the chunk, as pass_chunked() and flow.c
 * do. */
static size_t
skip_once(struct chunked *c, const char *in, size_t at, size_t n, struct result *r)
{
    uint64_t total = c->total, left = chunked_data_left(c);
    size_t k = (size_t)MIN((uint64_t)n, left);

    CHECK(left > 0 && left == c->left);
    chunked_skip(c, k);
    CHECK(c->total == total + k && chunked_data_left(c) == (k == left ? 0 : left - k));
    CHECK(c->state == (k == left ? CHUNKED_DATA_END : CHUNKED_DATA));
    take_data(r, in, at, k);
    return k;
}

static void
decode(struct chunked_rules rules, const char *in, size_t n, enum mode m, uint64_t seed,
       struct result *r)
{
    struct chunked c;
    uint64_t rng = seed;
    size_t pos = 0, zero_used = 9, zero_off = 9, zero_len = 9;

    result_init(r, n);
    chunked_init(&c, rules);
    CHECK(c.state == CHUNKED_SIZE && c.total == 0);
    CHECK(chunked_feed(&c, in, 0, &zero_used, &zero_off, &zero_len, NULL) == 0);
    CHECK(zero_used == 0 && zero_len == 0 && c.state == CHUNKED_SIZE);
    while (pos < n) {
        size_t piece = piece_len(m, &rng, n - pos), off = 0;

        if (m == M_SCAN_FLOW && chunked_data_left(&c) > 0) { /* flow.c: the data goes unread */
            pos += skip_once(&c, in, pos, n - pos, r);
            continue;
        }
        while (off < piece) {
            size_t used = piece - off;
            int rc;

            if (m == M_SKIP && c.state == CHUNKED_DATA) {
                off += skip_once(&c, in, pos + off, piece - off, r);
                continue;
            }
            if (m >= M_SCAN_PIECES) {
                rc = scan_once(&c, in, pos + off, piece - off, r);
            } else {
                rc = feed_once(&c, in, pos + off, piece - off, r, &used);
            }
            if (rc != 0) {
                r->verdict = rc;
                r->total = c.total;
                check_ended(&c, rc, in + r->end, n - r->end);
                CHECK(m >= M_SCAN_PIECES || c.total == r->data.len);
                return;
            }
            off += used;
        }
        pos += piece;
    }
    r->verdict = 0;
    r->end = n;
    r->total = c.total;
    CHECK(m >= M_SCAN_PIECES || c.total == r->data.len);
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

/* A line end at in[*pos] (CRLF, or LF under bare_lf): 1 taken, 0 the input ends first, -1 none
 * (*pos at the offending byte). */
static int
eol(const char *in, size_t n, size_t *pos, bool bare_lf)
{
    if (*pos == n) {
        return 0;
    }
    if (in[*pos] == '\n' && bare_lf) {
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

/* chunk = 1*D HEXDIG EOL data EOL, last = 1*D "0" EOL EOL, sizes up to max_size: straight over
 * the whole input. */
static void
reference(struct chunked_rules rules, const char *in, size_t n, struct result *r)
{
    size_t pos = 0;
    int e;

    result_init(r, n);
    for (;;) {
        uint64_t size = 0;
        size_t digits = 0, take;

        for (; pos < n && hex(in[pos]) >= 0; pos++) {
            size = size << 4 | (uint64_t)hex(in[pos]);
            if (++digits > rules.max_digits || size > rules.max_size) {
                r->verdict = -1;
                r->end = pos;
                return;
            }
        }
        if (pos == n) {
            break;
        }
        if (digits == 0 || (e = eol(in, n, &pos, rules.bare_lf)) < 0) {
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
        if ((e = eol(in, n, &pos, rules.bare_lf)) <= 0) {
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
same(const struct result *a, const struct result *b, size_t n, enum mode m)
{
    if (a->verdict != b->verdict || a->end != b->end || a->total != b->data.len) {
        return false;
    }
    if (m >= M_SCAN_PIECES) { /* the data not looked at; what flow.c skipped, where it was */
        for (size_t i = 0; i < n; i++) {
            if (a->mark[i] && !b->mark[i]) {
                return false;
            }
        }
        return true;
    }
    return a->data.len == b->data.len && memcmp(a->data.buf, b->data.buf, a->data.len) == 0 &&
           memcmp(a->mark, b->mark, n) == 0;
}

/* Rules from the seed: 1 to 16 digits, a bound within them (often a small one), bare LF or not. */
static struct chunked_rules
seeded_rules(uint64_t seed)
{
    uint64_t rng = seed, v = rng_next(&rng);
    unsigned digits = 1 + (unsigned)(v % 16);
    uint64_t most = digits == 16 ? UINT64_MAX : (UINT64_C(1) << (4 * digits)) - 1;
    uint64_t max;

    switch ((v >> 8) % 3) {
    case 0:
        max = most;
        break;
    case 1:
        max = rng_next(&rng) % 300;
        break;
    default:
        max = most == UINT64_MAX ? rng_next(&rng) : rng_next(&rng) % (most + 1);
        break;
    }
    return (struct chunked_rules){.max_digits = digits, .max_size = max, .bare_lf = (v >> 16) & 1};
}

/* One input under one set of rules. */
static void
judge(struct chunked_rules rules, const char *in, size_t n, uint64_t seed)
{
    struct result ref, r, ev;

    reference(rules, in, n, &ref);
    CHECK(ref.end <= n && (ref.verdict != 0 || ref.end == n));
    for (int m = 0; m < M__COUNT; m++) {
        decode(rules, in, n, (enum mode)m, seed + (uint64_t)m, &r);
        CHECK(same(&r, &ref, n, (enum mode)m));
        result_done(&r);
    }
    if (ref.verdict == 1) { /* a body ends with its last chunk's empty line */
        CHECK(ref.end >= 3 && in[ref.end - 1] == '\n');
        CHECK(rules.bare_lf || (ref.end >= 5 && memcmp(in + ref.end - 4, "\r\n\r\n", 4) == 0));
    }
    /* evhttp ends a body the scanner completes at the same byte, with the same data; it has not
     * ended one the scanner is still reading or fails in. */
    if (rules.max_size <= (uint64_t)LLONG_MAX) {
        (void)evhttp_model(in, ref.verdict == 1 ? n : ref.end, &ev);
        if (ref.verdict == 1) {
            CHECK(ev.verdict == 1 && ev.end == ref.end && ev.data.len == ref.data.len &&
                  memcmp(ev.data.buf, ref.data.buf, ref.data.len) == 0);
        } else {
            CHECK(ev.verdict == 0);
        }
        result_done(&ev);
    }
    result_done(&ref);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = (const char *)data + 1;
    size_t n = size > 0 ? size - 1 : 0;
    uint64_t seed;

    if (size == 0) {
        return 0;
    }
    seed = data[0] * 0x100000001b3u;
    judge(HTTP_CHUNKED_RULES, in, n, seed);
    judge(EGRESS_CHUNKED_RULES, in, n, seed);
    judge(seeded_rules(seed), in, n, seed);
    return 0;
}
