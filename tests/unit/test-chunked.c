/* The chunked framing scanner (src/util/chunked.c) under both its users' rules: the body
 * filter's (HTTP_CHUNKED_RULES: 1 to 15 digits, CRLF or LF) and the egress proxy's
 * (EGRESS_CHUNKED_RULES: 1 to 8 digits below 2^31, CRLF only). Each row is a body and what each
 * set of rules makes of it: the verdict, the byte after the body or the byte refused (the filter
 * goes blind there, a held body fails, the proxy cuts the connection before it), and the data.
 * Every body goes whole, a byte at a time and in pieces of 2 to 7 bytes three ways: its data
 * read (chunked_feed(), held.c), let by unseen (chunked_skip(), body.c and flow.c), or scanned
 * past (chunked_scan(), the proxy); every way must give the same. */
#include <errno.h>
#include <string.h>

#include "egress/head.h"
#include "http/http-internal.h"
#include "tap.h"
#include "util/chunked.h"
#include "util/macro.h"

enum how {
    FEED, /* chunked_feed(): the data handed back */
    SKIP, /* chunked_feed() for the framing, chunked_skip() over the data */
    SCAN, /* chunked_scan(): the data not looked at */
};

/* A decode: 1 done, 0 more, -EINVAL refused; end: the byte after the body, the byte refused, or
 * len; the data (FEED and SKIP). */
struct decoded {
    int r;
    size_t end;
    char data[256];
    size_t data_len;
    uint64_t total;
    bool whole_pieces; /* every call took what it should (all of a piece unless it ended) */
    char why[sizeof(((struct err *)0)->msg)];
};

static void
take_data(struct decoded *ret, const char *data, size_t n)
{
    if (ret->data_len + n <= sizeof(ret->data)) {
        memcpy(ret->data + ret->data_len, data, n);
        ret->data_len += n;
    }
}

/* One piece, how says; 0 with the piece taken, else the verdict with ret->end. */
static int
piece(struct chunked *c, enum how how, const char *in, size_t pos, size_t n, struct decoded *ret)
{
    struct err e = {0};
    size_t off = 0;
    int r = 0;

    while (off < n && r == 0) {
        size_t used = 0, doff = 0, dlen = 0;
        uint64_t left = chunked_data_left(c);

        if (how == SKIP && left > 0) {
            dlen = (size_t)MIN(left, (uint64_t)(n - off));
            chunked_skip(c, dlen);
            take_data(ret, in + pos + off, dlen);
            off += dlen;
            continue;
        }
        if (how == SCAN) {
            r = chunked_scan(c, in + pos + off, n - off, &used, &e);
            ret->whole_pieces = ret->whole_pieces && (r != 0 || used == n - off);
        } else {
            r = chunked_feed(c, in + pos + off, n - off, &used, &doff, &dlen, &e);
            take_data(ret, in + pos + off + doff, dlen);
        }
        off += used;
    }
    ret->end = pos + off;
    memcpy(ret->why, e.msg, sizeof(ret->why));
    return r;
}

/* Decodes body[0, len) under rules in pieces of step bytes (0: whole). */
static void
decode(struct chunked_rules rules, const char *body, size_t len, enum how how, size_t step,
       struct decoded *ret)
{
    struct chunked c;
    size_t pos = 0;

    *ret = (struct decoded){.r = 0, .end = len, .whole_pieces = true};
    chunked_init(&c, rules);
    while (pos < len && ret->r == 0) {
        size_t n = step > 0 ? MIN(step, len - pos) : len - pos;

        ret->r = piece(&c, how, body, pos, n, ret);
        pos += n;
    }
    if (ret->r == 0) {
        ret->end = len;
    }
    ret->total = c.total;
}

static bool
decoded_same(const struct decoded *a, const struct decoded *b, enum how how)
{
    return a->r == b->r && a->end == b->end && a->total == b->total && a->whole_pieces &&
           (how == SCAN ||
            (a->data_len == b->data_len && memcmp(a->data, b->data, a->data_len) == 0));
}

struct want {
    int r;      /* 1 done, 0 more, -EINVAL refused */
    size_t end; /* where; ALL: the end of body */
    const char *data;
    size_t data_len;
};

struct row {
    const char *name;
    const char *body;
    size_t len;
    struct want api, egress; /* under HTTP_CHUNKED_RULES, EGRESS_CHUNKED_RULES */
};

/* clang-format off */
#define ALL                          SIZE_MAX
#define W(r, end, data)              {r, end, data, sizeof(data) - 1}
#define ROW(name, body, api, egress) {name, body, sizeof(body) - 1, api, egress}
/* clang-format on */

static const struct row rows[] = {
    /* read */
    ROW("one chunk", "5\r\nhello\r\n0\r\n\r\n", W(1, ALL, "hello"), W(1, ALL, "hello")),
    ROW("LF-only line ends", "5\nhello\n0\n\n", W(1, ALL, "hello"), W(-EINVAL, 1, "")),
    ROW("mixed line ends", "5\r\nhello\n0\n\r\n", W(1, ALL, "hello"), W(-EINVAL, 8, "hello")),
    ROW("uppercase hex", "A\r\n0123456789\r\n0\r\n\r\n", W(1, ALL, "0123456789"),
        W(1, ALL, "0123456789")),
    ROW("mixed-case hex", "1b\r\nabcdefghijklmnopqrstuvwxyz!\r\n0\r\n\r\n",
        W(1, ALL, "abcdefghijklmnopqrstuvwxyz!"), W(1, ALL, "abcdefghijklmnopqrstuvwxyz!")),
    ROW("15 digits", "00000000000000F\r\nfifteen bytes!!\r\n000000000000000\r\n\r\n",
        W(1, ALL, "fifteen bytes!!"), W(-EINVAL, 8, "")),
    ROW("multiple chunks", "3\r\nabc\r\n1\r\nd\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n",
        W(1, ALL, "abcd0123456789abcdef"), W(1, ALL, "abcd0123456789abcdef")),
    ROW("empty body", "0\r\n\r\n", W(1, ALL, ""), W(1, ALL, "")),
    ROW("empty body, LF only", "0\n\n", W(1, ALL, ""), W(-EINVAL, 1, "")),
    ROW("framing-like data", "f\r\n0\r\n\r\nGET / \r\n\r\n\r\n0\r\n\r\n",
        W(1, ALL, "0\r\n\r\nGET / \r\n\r\n"), W(1, ALL, "0\r\n\r\nGET / \r\n\r\n")),
    ROW("NUL and CR in data", "4\r\n\0\r\r\0\r\n0\r\n\r\n", W(1, ALL, "\0\r\r\0"),
        W(1, ALL, "\0\r\r\0")),
    ROW("the next request after it", "2\r\nok\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n", W(1, 12, "ok"),
        W(1, 12, "ok")),
    ROW("one chunk, then a request", "5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n",
        W(1, 15, "hello"), W(1, 15, "hello")),
    /* incomplete */
    ROW("nothing yet", "", W(0, ALL, ""), W(0, ALL, "")),
    ROW("cut in the data", "5\r\nhel", W(0, ALL, "hel"), W(0, ALL, "hel")),
    ROW("cut in the size line", "5", W(0, ALL, ""), W(0, ALL, "")),
    ROW("cut after the last chunk", "0\r\n", W(0, ALL, ""), W(0, ALL, "")),
    ROW("cut after the last chunk's CR", "0\r\n\r", W(0, ALL, ""), W(0, ALL, "")),
    ROW("15 f: 2^60 - 1 bytes", "fffffffffffffff\r\nabc", W(0, ALL, "abc"), W(-EINVAL, 7, "")),
    /* refused, at the byte that leaves the grammar */
    ROW("16 digits", "0000000000000005\r\nhello\r\n0\r\n\r\n", W(-EINVAL, 15, ""),
        W(-EINVAL, 8, "")),
    ROW("sign +", "+5\r\nhello\r\n0\r\n\r\n", W(-EINVAL, 0, ""), W(-EINVAL, 0, "")),
    ROW("sign -", "-0\r\n\r\n", W(-EINVAL, 0, ""), W(-EINVAL, 0, "")),
    ROW("blank before the size", " 5\r\nhello\r\n0\r\n\r\n", W(-EINVAL, 0, ""), W(-EINVAL, 0, "")),
    ROW("blank after the size", "5 \r\nhello\r\n0\r\n\r\n", W(-EINVAL, 1, ""), W(-EINVAL, 1, "")),
    ROW("tab after the size", "5\t\r\nhello\r\n0\r\n\r\n", W(-EINVAL, 1, ""), W(-EINVAL, 1, "")),
    ROW("junk after a blank", "5 junk\r\nhello\r\n0\r\n\r\n", W(-EINVAL, 1, ""), W(-EINVAL, 1, "")),
    ROW("0x prefix", "0x5\r\nhello\r\n0\r\n\r\n", W(-EINVAL, 1, ""), W(-EINVAL, 1, "")),
    ROW("extension", "5;x\r\nhello\r\n0\r\n\r\n", W(-EINVAL, 1, ""), W(-EINVAL, 1, "")),
    ROW("extension with a value", "5;x=y\r\nhello\r\n0\r\n\r\n", W(-EINVAL, 1, ""),
        W(-EINVAL, 1, "")),
    ROW("extension on the last chunk", "5\r\nhello\r\n0;x=1\r\n\r\n", W(-EINVAL, 11, "hello"),
        W(-EINVAL, 11, "hello")),
    ROW("trailer after the last chunk", "5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n",
        W(-EINVAL, 13, "hello"), W(-EINVAL, 13, "hello")),
    ROW("trailer, the last chunk alone", "0\r\nX-Trailer: 1\r\n\r\n", W(-EINVAL, 3, ""),
        W(-EINVAL, 3, "")),
    ROW("trailer, LF only", "0\nX: 1\n\n", W(-EINVAL, 2, ""), W(-EINVAL, 1, "")),
    ROW("missing CRLF after the data", "5\r\nhelloX\r\n0\r\n\r\n", W(-EINVAL, 8, "hello"),
        W(-EINVAL, 8, "hello")),
    ROW("the next size right after the data", "5\r\nhello5\r\nworld\r\n0\r\n\r\n",
        W(-EINVAL, 8, "hello"), W(-EINVAL, 8, "hello")),
    ROW("an empty line between chunks", "5\r\nhello\r\n\r\n0\r\n\r\n", W(-EINVAL, 10, "hello"),
        W(-EINVAL, 10, "hello")),
    ROW("an empty size line", "\r\n5\r\nhello\r\n0\r\n\r\n", W(-EINVAL, 0, ""), W(-EINVAL, 0, "")),
    ROW("an empty line for the body", "\r\n", W(-EINVAL, 0, ""), W(-EINVAL, 0, "")),
    ROW("NUL in the size line", "5\0\r\nhello\r\n0\r\n\r\n", W(-EINVAL, 1, ""), W(-EINVAL, 1, "")),
    ROW("NUL for the size", "\0", W(-EINVAL, 0, ""), W(-EINVAL, 0, "")),
    ROW("CR without LF after the size", "5\rhello\r\n0\r\n\r\n", W(-EINVAL, 2, ""),
        W(-EINVAL, 2, "")),
    ROW("CR CR LF after the size", "5\r\r\nhello\r\n0\r\n\r\n", W(-EINVAL, 2, ""),
        W(-EINVAL, 2, "")),
    ROW("CR without LF after the data", "5\r\nhello\rX0\r\n\r\n", W(-EINVAL, 9, "hello"),
        W(-EINVAL, 9, "hello")),
    ROW("CR without LF at the end", "0\r\n\rX", W(-EINVAL, 4, ""), W(-EINVAL, 4, "")),
    ROW("a letter for the size", "g\r\n", W(-EINVAL, 0, ""), W(-EINVAL, 0, "")),
    /* the proxy's own limits: 1 to 8 digits, below 2^31, CRLF only */
    ROW("8 digits", "A\r\n0123456789\r\n00000000\r\n\r\nX", W(1, 27, "0123456789"),
        W(1, 27, "0123456789")),
    ROW("7fffffff: 2^31 - 1 bytes", "7fffffff\r\nabc", W(0, ALL, "abc"), W(0, ALL, "abc")),
    ROW("80000000: 2^31", "80000000\r\n", W(0, ALL, ""), W(-EINVAL, 7, "")),
    ROW("nine digits", "000000001\r\n", W(0, ALL, ""), W(-EINVAL, 8, "")),
    ROW("100000005: 5 in 32 bits", "100000005\r\nhello", W(0, ALL, "hello"), W(-EINVAL, 8, "")),
    ROW("bare LF after the size", "5\nhello\r\n0\r\n\r\n", W(1, ALL, "hello"), W(-EINVAL, 1, "")),
    ROW("bare LF after the data", "5\r\nhello\n0\r\n\r\n", W(1, ALL, "hello"),
        W(-EINVAL, 8, "hello")),
    ROW("bare LF after the last chunk", "0\r\n\n", W(1, ALL, ""), W(-EINVAL, 3, "")),
};

/* One row under one set of rules: whole, then every other way against it. */
static void
check_row(const struct row *w, const char *rules_name, struct chunked_rules rules,
          const struct want *want)
{
    size_t len = w->len, end = want->end == ALL ? len : want->end, dlen = want->data_len;
    struct decoded whole, other;
    bool same = true;

    decode(rules, w->body, len, FEED, 0, &whole);
    TAP_CHECK(whole.r == want->r && whole.end == end, "%s, %s: verdict %d at %zu (want %d at %zu)",
              rules_name, w->name, whole.r, whole.end, want->r, end);
    TAP_CHECK(whole.data_len == dlen && memcmp(whole.data, want->data, dlen) == 0 &&
                  whole.total == dlen,
              "%s, %s: %zu data bytes, total %llu (want %zu)", rules_name, w->name, whole.data_len,
              (unsigned long long)whole.total, dlen);
    TAP_CHECK((whole.r < 0) == (whole.why[0] != '\0'), "%s, %s: why '%s'", rules_name, w->name,
              whole.why);
    for (enum how how = FEED; how <= SCAN; how++) {
        for (size_t step = how == FEED ? 1 : 0; step <= 7; step++) {
            decode(rules, w->body, len, how, step, &other);
            same = same && decoded_same(&other, &whole, how) && strcmp(other.why, whole.why) == 0;
        }
    }
    TAP_CHECK(same,
              "%s, %s: the same byte by byte and in pieces of 2 to 7, data read, skipped or "
              "scanned",
              rules_name, w->name);
}

TEST(rows)
{
    for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
        check_row(&rows[i], "api", HTTP_CHUNKED_RULES, &rows[i].api);
        check_row(&rows[i], "egress", EGRESS_CHUNKED_RULES, &rows[i].egress);
    }
}

/* What a refusal says (the proxy's reach the sandbox and the audit log). */
TEST(why)
{
    static const struct {
        const char *body;
        bool egress;
        const char *why;
    } cases[] = {
        {"80000000\r\n", true, "a chunk of 2 GiB or more"},
        {"000000001\r\n", true, "a chunk of 2 GiB or more"},
        {"5\nhello", true,
         "a malformed chunked body (sizes in hex, CRLF line ends, no extension or trailer)"},
        {"5;x", false,
         "a malformed chunked body (sizes in hex, CRLF or LF line ends, no extension or "
         "trailer)"},
        {"0000000000000005\r\n", false, "a chunk of 1073741824 GiB or more"},
    };
    struct decoded d;

    for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
        decode(cases[i].egress ? EGRESS_CHUNKED_RULES : HTTP_CHUNKED_RULES, cases[i].body,
               strlen(cases[i].body), SCAN, 0, &d);
        TAP_CHECK(d.r == -EINVAL && strcmp(d.why, cases[i].why) == 0, "%s: '%s'", cases[i].body,
                  d.why);
    }
}

/* After the end nothing more is taken; a refused body stays refused. */
TEST(after_the_end)
{
    static const char body[] = "1\r\nx\r\n0\r\n\r\nGET";
    struct chunked d;
    struct err e = {0};
    size_t used = 9, off = 9, len = 9;

    chunked_init(&d, HTTP_CHUNKED_RULES);
    ASSERT_EQ_I(chunked_feed(&d, body, 3, &used, &off, &len, NULL), 0);
    ASSERT_EQ_U(used, 3);
    ASSERT_EQ_I(d.state, CHUNKED_DATA);
    ASSERT_EQ_I(chunked_feed(&d, body + 3, sizeof(body) - 4, &used, &off, &len, NULL), 0);
    TAP_CHECK(used == 1 && off == 0 && len == 1, "one span per call, the call ends with it");
    ASSERT_EQ_I(chunked_feed(&d, body + 4, sizeof(body) - 5, &used, &off, &len, NULL), 1);
    TAP_CHECK(used == 7 && len == 0, "done after the last chunk's empty line (used %zu)", used);
    ASSERT_EQ_I(chunked_feed(&d, "GET", 3, &used, &off, &len, NULL), 1);
    TAP_CHECK(used == 0 && len == 0 && d.total == 1, "nothing more is taken after done");
    ASSERT_EQ_I(chunked_scan(&d, "GET", 3, &used, NULL), 1);
    ASSERT_EQ_U(used, 0);

    chunked_init(&d, HTTP_CHUNKED_RULES);
    ASSERT_EQ_I(chunked_feed(&d, "1;", 2, &used, &off, &len, NULL), -EINVAL);
    ASSERT_EQ_U(used, 1);
    ASSERT_EQ_I(d.state, CHUNKED_FAILED);
    ASSERT_EQ_I(chunked_feed(&d, "\r\n", 2, &used, &off, &len, NULL), -EINVAL);
    TAP_CHECK(used == 0 && len == 0, "a refused body takes nothing more");
    ASSERT_EQ_I(chunked_scan(&d, "", 0, &used, &e), -EINVAL); /* nothing at all: refused still */
    TAP_CHECK(used == 0 && strcmp(e.msg, "a malformed chunked body") == 0, "refused still: '%s'",
              e.msg);
}

/* Data let by unseen (body.c's pass_chunked(), flow.c) frames the same body. */
TEST(skip)
{
    struct chunked d;
    struct err e = {0};
    size_t used = 0, off = 0, len = 0;

    chunked_init(&d, HTTP_CHUNKED_RULES);
    ASSERT_EQ_I(chunked_feed(&d, "5\r\n", 3, &used, &off, &len, NULL), 0);
    TAP_CHECK(d.state == CHUNKED_DATA && d.left == 5 && len == 0, "in the data, 5 left");
    chunked_skip(&d, 2);
    TAP_CHECK(d.state == CHUNKED_DATA && d.left == 3 && d.total == 2, "skipped 2: 3 left");
    chunked_skip(&d, 3);
    TAP_CHECK(d.state == CHUNKED_DATA_END && d.left == 0 && d.total == 5,
              "skipped the rest: the line end is due");
    ASSERT_EQ_I(chunked_feed(&d, "\r\n10\r\n", 6, &used, &off, &len, NULL), 0);
    TAP_CHECK(used == 6 && d.state == CHUNKED_DATA && d.left == 16, "the next chunk: 16");
    chunked_skip(&d, 16);
    ASSERT_EQ_I(chunked_feed(&d, "\n0\n\nrest", 8, &used, &off, &len, NULL), 1);
    TAP_CHECK(used == 4 && d.total == 21, "done with 21 bytes (used %zu, total %llu)", used,
              (unsigned long long)d.total);

    /* The proxy's way: only the framing is scanned. */
    chunked_init(&d, EGRESS_CHUNKED_RULES);
    ASSERT_EQ_I(chunked_scan(&d, "10\r\n", 4, &used, &e), 0);
    ASSERT_EQ_U(chunked_data_left(&d), 16);
    chunked_skip(&d, 10);
    ASSERT_EQ_U(chunked_data_left(&d), 6);
    chunked_skip(&d, 6);
    ASSERT_EQ_U(chunked_data_left(&d), 0);
    ASSERT_EQ_I(chunked_scan(&d, "\r\n0\r\n\r\nnext", 11, &used, &e), 1);
    ASSERT_EQ_U(used, 7);
    ASSERT_EQ_I(chunked_scan(&d, "more", 4, &used, &e), 1); /* done stays done */
    ASSERT_EQ_U(used, 0);
}

int
main(void)
{
    RUN(rows);
    RUN(why);
    RUN(after_the_end);
    RUN(skip);
    return tap_done();
}
