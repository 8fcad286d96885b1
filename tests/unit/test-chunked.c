/* The chunked framing decoder under the body filter (src/api/chunked.c): bodies it reads, fed
 * whole, a byte at a time and in pieces of 2 to 7 bytes (every split must give the same verdict,
 * data and end), and the framings it refuses at the byte where they leave its subset of evhttp's
 * reading (the filter goes blind there; a held body fails). */
#include <errno.h>
#include <string.h>

#include "api/api-internal.h"
#include "tap.h"
#include "util/buf.h"
#include "util/macro.h"

/* A decode: 1 done, 0 more, -EINVAL refused; end: the byte after the body, the byte refused, or
 * len; the data. */
struct decoded {
    int r;
    size_t end;
    char data[256];
    size_t data_len;
    uint64_t total;
};

/* Decodes body[0, len) in pieces of step bytes (0: whole). */
static void
decode(const char *body, size_t len, size_t step, struct decoded *ret)
{
    struct api_chunked d;
    size_t pos = 0;

    *ret = (struct decoded){.r = 0, .end = len};
    api_chunked_init(&d);
    while (pos < len) {
        size_t piece = step > 0 ? MIN(step, len - pos) : len - pos, off = 0;

        while (off < piece) {
            size_t used = 0, doff = 0, dlen = 0;
            int r = api_chunked_feed(&d, body + pos + off, piece - off, &used, &doff, &dlen);

            if (dlen > 0 && ret->data_len + dlen <= sizeof(ret->data)) {
                memcpy(ret->data + ret->data_len, body + pos + off + doff, dlen);
                ret->data_len += dlen;
            }
            off += used;
            if (r != 0) {
                ret->r = r;
                ret->end = pos + off;
                ret->total = d.total;
                return;
            }
        }
        pos += piece;
    }
    ret->total = d.total;
}

static bool
decoded_same(const struct decoded *a, const struct decoded *b)
{
    return a->r == b->r && a->end == b->end && a->data_len == b->data_len &&
           memcmp(a->data, b->data, a->data_len) == 0 && a->total == b->total;
}

struct row {
    const char *name;
    const char *body;
    size_t len; /* 0: strlen(body) */
    int r;      /* 1 done, 0 more, -EINVAL refused */
    size_t end; /* where; SIZE_MAX: the end of body */
    const char *data;
    size_t data_len; /* 0: strlen(data) */
};

#define ALL SIZE_MAX

static const struct row rows[] = {
    /* read */
    {"one chunk", "5\r\nhello\r\n0\r\n\r\n", 0, 1, ALL, "hello"},
    {"LF-only line ends", "5\nhello\n0\n\n", 0, 1, ALL, "hello"},
    {"mixed line ends", "5\r\nhello\n0\n\r\n", 0, 1, ALL, "hello"},
    {"uppercase hex", "A\r\n0123456789\r\n0\r\n\r\n", 0, 1, ALL, "0123456789"},
    {"mixed-case hex", "1b\r\nabcdefghijklmnopqrstuvwxyz!\r\n0\r\n\r\n", 0, 1, ALL,
     "abcdefghijklmnopqrstuvwxyz!"},
    {"15 digits", "00000000000000F\r\nfifteen bytes!!\r\n000000000000000\r\n\r\n", 0, 1, ALL,
     "fifteen bytes!!"},
    {"multiple chunks", "3\r\nabc\r\n1\r\nd\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n", 0, 1, ALL,
     "abcd0123456789abcdef"},
    {"empty body", "0\r\n\r\n", 0, 1, ALL, ""},
    {"empty body, LF only", "0\n\n", 0, 1, ALL, ""},
    {"framing-like data", "f\r\n0\r\n\r\nGET / \r\n\r\n\r\n0\r\n\r\n", 0, 1, ALL,
     "0\r\n\r\nGET / \r\n\r\n"},
    {"NUL and CR in data", "4\r\n\0\r\r\0\r\n0\r\n\r\n", 14, 1, ALL, "\0\r\r\0", 4},
    {"the next request after it", "2\r\nok\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n", 0, 1, 12, "ok"},
    /* incomplete */
    {"cut in the data", "5\r\nhel", 0, 0, ALL, "hel"},
    {"cut in the size line", "5", 0, 0, ALL, ""},
    {"cut after the last chunk", "0\r\n", 0, 0, ALL, ""},
    {"cut after the last chunk's CR", "0\r\n\r", 0, 0, ALL, ""},
    {"15 f: 2^60 - 1 bytes", "fffffffffffffff\r\nabc", 0, 0, ALL, "abc"},
    /* refused, at the byte that leaves the subset */
    {"16 digits", "0000000000000005\r\nhello\r\n0\r\n\r\n", 0, -EINVAL, 15, ""},
    {"sign +", "+5\r\nhello\r\n0\r\n\r\n", 0, -EINVAL, 0, ""},
    {"sign -", "-0\r\n\r\n", 0, -EINVAL, 0, ""},
    {"blank before the size", " 5\r\nhello\r\n0\r\n\r\n", 0, -EINVAL, 0, ""},
    {"blank after the size", "5 \r\nhello\r\n0\r\n\r\n", 0, -EINVAL, 1, ""},
    {"tab after the size", "5\t\r\nhello\r\n0\r\n\r\n", 0, -EINVAL, 1, ""},
    {"junk after a blank", "5 junk\r\nhello\r\n0\r\n\r\n", 0, -EINVAL, 1, ""},
    {"0x prefix", "0x5\r\nhello\r\n0\r\n\r\n", 0, -EINVAL, 1, ""},
    {"extension", "5;x\r\nhello\r\n0\r\n\r\n", 0, -EINVAL, 1, ""},
    {"extension on the last chunk", "5\r\nhello\r\n0;x=1\r\n\r\n", 0, -EINVAL, 11, "hello"},
    {"trailer after the last chunk", "5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n", 0, -EINVAL, 13,
     "hello"},
    {"trailer, LF only", "0\nX: 1\n\n", 0, -EINVAL, 2, ""},
    {"missing CRLF after the data", "5\r\nhelloX\r\n0\r\n\r\n", 0, -EINVAL, 8, "hello"},
    {"the next size right after the data", "5\r\nhello5\r\nworld\r\n0\r\n\r\n", 0, -EINVAL, 8,
     "hello"},
    {"an empty line between chunks", "5\r\nhello\r\n\r\n0\r\n\r\n", 0, -EINVAL, 10, "hello"},
    {"an empty size line", "\r\n5\r\nhello\r\n0\r\n\r\n", 0, -EINVAL, 0, ""},
    {"NUL in the size line", "5\0\r\nhello\r\n0\r\n\r\n", 18, -EINVAL, 1, ""},
    {"NUL for the size", "\0", 1, -EINVAL, 0, ""},
    {"CR without LF after the size", "5\rhello\r\n0\r\n\r\n", 0, -EINVAL, 2, ""},
    {"CR CR LF after the size", "5\r\r\nhello\r\n0\r\n\r\n", 0, -EINVAL, 2, ""},
    {"CR without LF after the data", "5\r\nhello\rX0\r\n\r\n", 0, -EINVAL, 9, "hello"},
    {"CR without LF at the end", "0\r\n\rX", 0, -EINVAL, 4, ""},
    {"a letter for the size", "g\r\n", 0, -EINVAL, 0, ""},
};

TEST(rows)
{
    for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
        const struct row *w = &rows[i];
        size_t len = w->len > 0 ? w->len : strlen(w->body);
        size_t end = w->end == ALL ? len : w->end;
        size_t dlen = w->data_len > 0 ? w->data_len : strlen(w->data);
        struct decoded whole, piece;
        bool pieces_same = true;

        decode(w->body, len, 0, &whole);
        TAP_CHECK(whole.r == w->r && whole.end == end, "%s: verdict %d at %zu (want %d at %zu)",
                  w->name, whole.r, whole.end, w->r, end);
        TAP_CHECK(whole.data_len == dlen && memcmp(whole.data, w->data, dlen) == 0 &&
                      whole.total == dlen,
                  "%s: %zu data bytes, total %llu (want %zu)", w->name, whole.data_len,
                  (unsigned long long)whole.total, dlen);
        for (size_t step = 1; step <= 7; step++) {
            decode(w->body, len, step, &piece);
            pieces_same = pieces_same && decoded_same(&piece, &whole);
        }
        TAP_CHECK(pieces_same, "%s: the same byte by byte and in pieces of 2 to 7", w->name);
    }
}

/* After the end nothing more is taken; a refused decoder stays refused. */
TEST(after_the_end)
{
    static const char body[] = "1\r\nx\r\n0\r\n\r\nGET";
    struct api_chunked d;
    size_t used = 9, off = 9, len = 9;

    api_chunked_init(&d);
    ASSERT_EQ_I(api_chunked_feed(&d, body, 3, &used, &off, &len), 0);
    ASSERT_EQ_U(used, 3);
    ASSERT_EQ_I(d.state, API_CHUNKED_DATA);
    ASSERT_EQ_I(api_chunked_feed(&d, body + 3, sizeof(body) - 4, &used, &off, &len), 0);
    TAP_CHECK(used == 1 && off == 0 && len == 1, "one span per call, the call ends with it");
    ASSERT_EQ_I(api_chunked_feed(&d, body + 4, sizeof(body) - 5, &used, &off, &len), 1);
    TAP_CHECK(used == 7 && len == 0, "done after the last chunk's empty line (used %zu)", used);
    ASSERT_EQ_I(api_chunked_feed(&d, "GET", 3, &used, &off, &len), 1);
    TAP_CHECK(used == 0 && len == 0 && d.total == 1, "nothing more is taken after done");

    api_chunked_init(&d);
    ASSERT_EQ_I(api_chunked_feed(&d, "1;", 2, &used, &off, &len), -EINVAL);
    ASSERT_EQ_U(used, 1);
    ASSERT_EQ_I(d.state, API_CHUNKED_FAILED);
    ASSERT_EQ_I(api_chunked_feed(&d, "\r\n", 2, &used, &off, &len), -EINVAL);
    TAP_CHECK(used == 0 && len == 0, "a refused body takes nothing more");
}

/* Data skipped unseen (body.c's pass_chunked()) frames the same body. */
TEST(skip)
{
    struct api_chunked d;
    size_t used = 0, off = 0, len = 0;

    api_chunked_init(&d);
    ASSERT_EQ_I(api_chunked_feed(&d, "5\r\n", 3, &used, &off, &len), 0);
    TAP_CHECK(d.state == API_CHUNKED_DATA && d.left == 5 && len == 0, "in the data, 5 left");
    api_chunked_skip(&d, 2);
    TAP_CHECK(d.state == API_CHUNKED_DATA && d.left == 3 && d.total == 2, "skipped 2: 3 left");
    api_chunked_skip(&d, 3);
    TAP_CHECK(d.state == API_CHUNKED_DATA_END && d.left == 0 && d.total == 5,
              "skipped the rest: the line end is due");
    ASSERT_EQ_I(api_chunked_feed(&d, "\r\n10\r\n", 6, &used, &off, &len), 0);
    TAP_CHECK(used == 6 && d.state == API_CHUNKED_DATA && d.left == 16, "the next chunk: 16");
    api_chunked_skip(&d, 16);
    ASSERT_EQ_I(api_chunked_feed(&d, "\n0\n\nrest", 8, &used, &off, &len), 1);
    TAP_CHECK(used == 4 && d.total == 21, "done with 21 bytes (used %zu, total %llu)", used,
              (unsigned long long)d.total);
}

int
main(void)
{
    RUN(rows);
    RUN(after_the_end);
    RUN(skip);
    return tap_done();
}
