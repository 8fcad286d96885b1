/* Fuzz target: where the egress proxy ends an absolute-form request's chunked body (src/egress/
 * body.c), which decides what of the sandbox's bytes reach an upstream. The first byte seeds
 * where the stream is cut; the rest is what follows a chunked request's head.
 *
 * The stream is scanned four ways: whole, in pieces cut where the seed says, a byte at a time,
 * and the way flow.c does (a chunk's data let through unread with egress_chunked_skip(), the
 * framing scanned in peeks of up to 8 KiB). Every way must give the same verdict (done, failed,
 * more) and the same end (the byte after the body, the byte it failed at, or the end of the
 * input) as a plain decoder of the grammar in head.h; a call takes no byte past the body's end;
 * once ended, nothing more is taken. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "egress/head.h"
#include "fuzz.h"
#include "util/macro.h"

enum mode {
    M_WHOLE,
    M_PIECES,
    M_BYTES,
    M_FLOW,
    M__COUNT,
};

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
        return 1;
    case M_FLOW:
        return MIN((size_t)8192, left);
    default:
        n = rng_next(rng) % 4 == 0 ? 1 + rng_next(rng) % 600 : 1 + rng_next(rng) % 9;
        return MIN(n, left);
    }
}

/* ---- the reference: the grammar of head.h, read whole ---------------------------------------- */

static int
hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* in[*i] is c: 1 (past it); the input ended: 0; else -1. */
static int
expect(const char *in, size_t n, size_t *i, char c)
{
    if (*i == n) {
        return 0;
    }
    if (in[*i] != c) {
        return -1;
    }
    (*i)++;
    return 1;
}

/* 1 done, 0 more, -1 failed; *end as the scanner's. */
static int
reference(const char *in, size_t n, size_t *end)
{
    size_t i = 0;
    int r = 1;

    for (;;) {
        uint64_t size = 0;
        unsigned digits = 0;

        while (i < n && hexval(in[i]) >= 0) {
            size = size * 16 + (uint64_t)hexval(in[i]);
            if (++digits > 8 || size > 0x7fffffffu) {
                *end = i;
                return -1;
            }
            i++;
        }
        if (i < n && digits == 0) {
            *end = i;
            return -1;
        }
        if ((r = expect(in, n, &i, '\r')) <= 0 || (r = expect(in, n, &i, '\n')) <= 0) {
            break;
        }
        if (size == 0) {
            if ((r = expect(in, n, &i, '\r')) <= 0 || (r = expect(in, n, &i, '\n')) <= 0) {
                break;
            }
            *end = i;
            return 1;
        }
        if (n - i < size) {
            *end = n;
            return 0;
        }
        i += (size_t)size;
        if ((r = expect(in, n, &i, '\r')) <= 0 || (r = expect(in, n, &i, '\n')) <= 0) {
            break;
        }
    }
    *end = r == 0 ? n : i;
    return r;
}

/* ---- the scanner, four ways ----------------------------------------------------------------- */

/* Once the body ended (done or failed), nothing more is taken, whatever comes. */
static void
check_ended(struct egress_chunked *s, int verdict)
{
    static const char junk[] = "0\r\n\r\n";
    struct err e = {0};
    size_t used = 7;
    int r = egress_chunked_scan(s, junk, sizeof(junk) - 1, &used, &e);

    CHECK(r == (verdict == 1 ? 1 : -EINVAL) && used == 0);
    used = 7;
    r = egress_chunked_scan(s, junk, 0, &used, &e); /* nothing at all: the same verdict */
    CHECK(r == (verdict == 1 ? 1 : -EINVAL) && used == 0);
    CHECK(s->state == (verdict == 1 ? EGRESS_CHUNKED_DONE : EGRESS_CHUNKED_FAILED));
    CHECK(egress_chunked_data_left(s) == 0);
}

static int
scan(const char *in, size_t n, enum mode m, uint64_t seed, size_t *end)
{
    struct egress_chunked s;
    uint64_t rng = seed;
    size_t pos = 0;

    egress_chunked_init(&s);
    while (pos < n) {
        size_t piece = piece_len(m, &rng, n - pos), used = SIZE_MAX;
        uint64_t left = egress_chunked_data_left(&s);
        struct err e = {0};
        int r;

        if (m == M_FLOW && left > 0) { /* flow.c: the data goes unread */
            uint64_t k = MIN(left, (uint64_t)(n - pos));

            egress_chunked_skip(&s, k);
            CHECK(egress_chunked_data_left(&s) == left - k);
            pos += (size_t)k;
            continue;
        }
        r = egress_chunked_scan(&s, in + pos, piece, &used, &e);
        CHECK(used <= piece);
        if (r != 0) {
            CHECK(r == 1 || (r == -EINVAL && used < piece && e.msg[0] != '\0'));
            *end = pos + used;
            check_ended(&s, r == 1 ? 1 : -1);
            return r == 1 ? 1 : -1;
        }
        CHECK(used == piece); /* all of it, when the body goes on */
        pos += piece;
    }
    *end = n;
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = (const char *)data + 1;
    size_t n = size > 0 ? size - 1 : 0, ref_end = 0;
    int ref;

    if (size == 0) {
        return 0;
    }
    ref = reference(in, n, &ref_end);
    for (enum mode m = 0; m < M__COUNT; m++) {
        size_t end = SIZE_MAX;
        int r = scan(in, n, m, data[0], &end);

        CHECK(r == ref && end == ref_end);
    }
    if (ref == 1) { /* a body ends with its last chunk's empty line */
        CHECK(ref_end >= 5 && memcmp(in + ref_end - 4, "\r\n\r\n", 4) == 0);
    }
    return 0;
}
