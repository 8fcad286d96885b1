/* Unit tests for src/e2b/wire.c: the Connect envelope and the multipart/form-data parser, fed
 * whole and one byte at a time (every split of a body must give the same parts), and through
 * e2b_multipart_feed_some() with callbacks that pause the parse (where it stops, and that the
 * parse resumed with the rest gives the same parts). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "e2b/wire.h"
#include "tap.h"
#include "util/buf.h"
#include "util/macro.h"

TEST(envelope)
{
    struct buf b = BUF_INIT(1024);
    const char *msg = NULL;
    size_t n = 0;
    uint8_t flags = 0xff;
    struct err e = {0};

    ASSERT_OK(e2b_envelope_write(&b, 0, "{\"a\":1}", 7));
    ASSERT_EQ_U(b.len, 12);
    TAP_CHECK(memcmp(b.buf, "\x00\x00\x00\x00\x07{\"a\":1}", 12) == 0,
              "the head is 0, 7 big-endian");
    ASSERT_OK(e2b_envelope_parse(b.buf, b.len, 64, &flags, &msg, &n, &e));
    TAP_CHECK(flags == 0 && n == 7 && memcmp(msg, "{\"a\":1}", 7) == 0, "it reads back");
    buf_reset(&b);
    ASSERT_OK(e2b_envelope_write(&b, E2B_ENVELOPE_END, "{}", 2));
    ASSERT_OK(e2b_envelope_parse(b.buf, b.len, 64, &flags, &msg, &n, &e));
    TAP_CHECK(flags == E2B_ENVELOPE_END && n == 2, "the end-of-stream envelope");
    ASSERT_ERR(e2b_envelope_parse("\x00\x00\x00", 3, 64, &flags, &msg, &n, &e), EINVAL);
    ASSERT_ERR(e2b_envelope_parse("\x00\x00\x00\x00\x03{}", 7, 64, &flags, &msg, &n, &e), EINVAL);
    ASSERT_ERR(e2b_envelope_parse("\x00\x00\x00\x00\x01{}", 7, 64, &flags, &msg, &n, &e), EINVAL);
    ASSERT_ERR(e2b_envelope_parse("\x01\x00\x00\x00\x02{}", 7, 64, &flags, &msg, &n, &e), EINVAL);
    ASSERT_ERR(e2b_envelope_parse("\x80\x00\x00\x00\x02{}", 7, 64, &flags, &msg, &n, &e), EINVAL);
    ASSERT_ERR(e2b_envelope_parse("\x00\x00\x00\x00\x02{}", 7, 1, &flags, &msg, &n, &e), EINVAL);
    TAP_CHECK(strstr(e.msg, "over the limit") != NULL, "the limit is named: %s", e.msg);
    buf_done(&b);
}

TEST(boundary)
{
    char out[E2B_BOUNDARY_MAX + 1];
    struct err e = {0};

    ASSERT_OK(
        e2b_multipart_boundary("multipart/form-data; boundary=abc-123", out, sizeof(out), &e));
    ASSERT_STREQ(out, "abc-123");
    ASSERT_OK(e2b_multipart_boundary("Multipart/Form-Data; charset=utf-8; boundary=\"a b'c\"", out,
                                     sizeof(out), &e));
    ASSERT_STREQ(out, "a b'c");
    ASSERT_ERR(e2b_multipart_boundary("multipart/mixed; boundary=x", out, sizeof(out), &e), EINVAL);
    ASSERT_ERR(e2b_multipart_boundary("multipart/form-data", out, sizeof(out), &e), EINVAL);
    ASSERT_ERR(e2b_multipart_boundary("multipart/form-data; boundary=", out, sizeof(out), &e),
               EINVAL);
    ASSERT_ERR(
        e2b_multipart_boundary("multipart/form-data; boundary=\"a\r\nb\"", out, sizeof(out), &e),
        EINVAL);
    ASSERT_ERR(e2b_multipart_boundary(
                   "multipart/form-data; boundary="
                   "12345678901234567890123456789012345678901234567890123456789012345678901",
                   out, sizeof(out), &e),
               EINVAL);
    ASSERT_ERR(e2b_multipart_boundary(NULL, out, sizeof(out), &e), EINVAL);
}

static void
must(int r)
{
    if (r < 0) {
        abort();
    }
}

/* What a parse reported, as text: "[name|filename]data" per part, "." at each part's end. */
struct seen {
    struct buf log;
    int fail_on_part; /* > 0: the Nth on_part fails with -EFBIG */
    int parts;
    unsigned pause_on; /* the events (P_*) that answer E2B_MP_PAUSE */
    unsigned pauses;
};

enum {
    P_PART = 1,
    P_DATA = 2,
    P_END = 4,
};

/* r, or E2B_MP_PAUSE when it is 0 and the event pauses. */
static int
pause_if(struct seen *s, unsigned event, int r)
{
    if (r != 0 || (s->pause_on & event) == 0) {
        return r;
    }
    s->pauses++;
    return E2B_MP_PAUSE;
}

static int
on_part(const char *name, const char *filename, void *userdata)
{
    struct seen *s = userdata;

    if (++s->parts == s->fail_on_part) {
        return -EFBIG;
    }
    return pause_if(s, P_PART, buf_printf(&s->log, "[%s|%s]", name, filename));
}

static int
on_data(const char *data, size_t n, void *userdata)
{
    struct seen *s = userdata;

    return pause_if(s, P_DATA, buf_append(&s->log, data, n));
}

static int
on_part_end(void *userdata)
{
    struct seen *s = userdata;

    return pause_if(s, P_END, buf_putc(&s->log, '.'));
}

static const struct e2b_mp_events events = {on_part, on_data, on_part_end};

/* Parses body (len bytes) in pieces of step bytes (0: whole); the log, or "ERR <code>". */
static char *
parse(const char *boundary, const char *body, size_t len, size_t step, int fail_on_part)
{
    struct seen s = {.log = BUF_INIT(1u << 20), .fail_on_part = fail_on_part};
    struct e2b_multipart mp;
    struct err e = {0};
    int r = 0;

    e2b_multipart_init(&mp, boundary, &events, &s);
    for (size_t off = 0; off < len && r == 0; off += step ? step : len) {
        r = e2b_multipart_feed(&mp, body + off, MIN(step ? step : len, len - off), &e);
    }
    if (r == 0) {
        r = e2b_multipart_finish(&mp, &e);
    }
    e2b_multipart_done(&mp);
    if (r < 0) {
        buf_reset(&s.log);
        must(buf_printf(&s.log, "ERR %d", -r));
    }
    return buf_detach(&s.log, NULL);
}

struct mp_row {
    const char *body;
    const char *want;
};

static const struct mp_row mp_rows[] = {
    {"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/a.txt\"\r\n"
     "Content-Type: text/plain\r\n\r\nhello\r\n--B--\r\n",
     "[file|/home/user/a.txt]hello."},
    /* a preamble, two parts, data that almost looks like the delimiter, an empty part */
    {"preamble\r\n--B\r\ncontent-disposition: form-data; name=a\r\n\r\nx\r\n-\r\n--\r\n--C\r\n"
     "--B\r\nContent-Disposition: form-data; name=\"b\"; filename=\"q\\\"uote\"\r\n\r\n\r\n--B--",
     "[a|]x\r\n-\r\n--\r\n--C.[b|q\"uote]."},
    /* binary bytes, CR and LF inside */
    {"--B\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n\r\r\n\n\r\n-\r\n--\r\n--B \t\r\n"
     "Content-Disposition: form-data; name=\"g\"\r\n\r\nz\r\n--B--epilogue",
     "[f|]\r\r\n\n\r\n-\r\n--.[g|]z."},
    /* refused */
    {"--B\r\n\r\nno head\r\n--B--", "ERR 22"},
    {"--B\r\nContent-Disposition: attachment; name=\"f\"\r\n\r\nx\r\n--B--", "ERR 22"},
    {"--B\r\nContent-Disposition: form-data\r\n\r\nx\r\n--B--", "ERR 22"},
    /* an empty name (fuzz-e2b-wire found it passed) */
    {"--B\r\nContent-Disposition: form-data;; name= ext/plain\r\n\r\nx\r\n--B--", "ERR 22"},
    {"--B\r\nContent-Disposition: form-data; name=\"\"\r\n\r\nx\r\n--B--", "ERR 22"},
    {"--B\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nx\r\n--B", "ERR 22"},
    {"--B\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\ncut", "ERR 22"},
    {"--Bx\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nx\r\n--B--", "ERR 22"},
    {"", "ERR 22"},
};

TEST(multipart)
{
    for (size_t i = 0; i < ELEMENTSOF(mp_rows); i++) {
        size_t len = strlen(mp_rows[i].body);
        char *whole = parse("B", mp_rows[i].body, len, 0, 0);

        TAP_CHECK(strcmp(whole, mp_rows[i].want) == 0, "row %zu parsed whole as expected", i);
        for (size_t step = 1; step <= 7; step++) {
            char *bytes = parse("B", mp_rows[i].body, len, step, 0);

            TAP_CHECK(strcmp(bytes, whole) == 0, "row %zu in pieces of %zu: the same", i, step);
            free(bytes);
        }
        free(whole);
    }
}

TEST(multipart_limits)
{
    struct buf body = BUF_INIT(1u << 20);
    char *got;

    /* a head past 8 KiB */
    must(buf_puts(&body, "--B\r\nContent-Disposition: form-data; name=\"f\"\r\nX-Pad: "));
    for (int i = 0; i < 9000; i++) {
        must(buf_putc(&body, 'p'));
    }
    must(buf_puts(&body, "\r\n\r\nx\r\n--B--"));
    got = parse("B", body.buf, body.len, 0, 0);
    ASSERT_STREQ(got, "ERR 22");
    free(got);
    /* a NUL in a head */
#define NUL_HEAD "--B\r\nContent-Disposition: form-data; name=\"f\0\"\r\n\r\nx\r\n--B--"
    got = parse("B", NUL_HEAD, sizeof(NUL_HEAD) - 1, 0, 0);
    ASSERT_STREQ(got, "ERR 22");
    free(got);
    /* a callback's error stops the parse and is what the parse returns */
#define TWO_PARTS                                                           \
    "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n--B\r\n" \
    "Content-Disposition: form-data; name=\"b\"\r\n\r\ny\r\n--B--"
    got = parse("B", TWO_PARTS, sizeof(TWO_PARTS) - 1, 0, 2);
    ASSERT_STREQ(got, "ERR 27");
    free(got);
    buf_done(&body);
}

/* ---- pauses (e2b_multipart_feed_some()) ------------------------------------------------------ */

/* Parses body in pieces of step bytes (0: whole) with feed_some(), pausing at the events of
 * pause_on and resuming each time with the rest; the log (as parse() gives it) in *ret, and the
 * number of pauses. */
static unsigned
parse_paused(const char *body, size_t len, size_t step, unsigned pause_on, char **ret)
{
    struct seen s = {.log = BUF_INIT(1u << 20), .pause_on = pause_on};
    struct e2b_multipart mp;
    struct err e = {0};
    int r = 0;

    e2b_multipart_init(&mp, "B", &events, &s);
    for (size_t off = 0; off < len && r >= 0; off += step ? step : len) {
        const char *p = body + off;
        size_t left = MIN(step ? step : len, len - off);

        while (left > 0 && r >= 0) {
            size_t used = SIZE_MAX;

            r = e2b_multipart_feed_some(&mp, p, left, &used, &e);
            if (r >= 0 && used <= left) {
                p += used;
                left -= used;
            } else if (r >= 0) {
                r = -ERANGE; /* used past what was fed */
            }
        }
    }
    if (r >= 0) {
        r = e2b_multipart_finish(&mp, &e);
    }
    e2b_multipart_done(&mp);
    if (r < 0) {
        buf_reset(&s.log);
        must(buf_printf(&s.log, "ERR %d", -r));
    }
    *ret = buf_detach(&s.log, NULL);
    return s.pauses;
}

#define ONE_PART "--B\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n"

/* One feed_some() call from where the last stopped: its answer, and where it stopped. */
struct step {
    struct e2b_multipart mp;
    struct seen s;
    const char *body;
    size_t at;
};

static void
step_init(struct step *t, const char *body, unsigned pause_on)
{
    t->s = (struct seen){.log = BUF_INIT(4096), .pause_on = pause_on};
    t->body = body;
    t->at = 0;
    e2b_multipart_init(&t->mp, "B", &events, &t->s);
}

/* Feeds body[at, at + n) (n 0: to the end): the answer; t->at moves past what was used. */
static int
step_feed(struct step *t, size_t n)
{
    struct err e = {0};
    size_t used = 0;
    int r = e2b_multipart_feed_some(&t->mp, t->body + t->at, n ? n : strlen(t->body + t->at), &used,
                                    &e);

    t->at += used;
    return r;
}

static void
step_done(struct step *t)
{
    e2b_multipart_done(&t->mp);
    buf_done(&t->s.log);
}

TEST(pause_events)
{
    static const char one[] = ONE_PART "hello\r\n--B--";
    static const char split[] = ONE_PART "ab\r\n-xy\r\n--B--";
    size_t head = strlen(ONE_PART);
    struct step t;

    step_init(&t, one, P_PART);
    ASSERT_EQ_I(step_feed(&t, 0), E2B_MP_PAUSE);
    TAP_CHECK(t.at == head && strcmp(t.s.log.buf, "[f|]") == 0 && t.mp.state == E2B_MP_BODY,
              "on_part pauses right after the head (at %zu)", t.at);
    ASSERT_EQ_I(step_feed(&t, 0), 0);
    TAP_CHECK(t.at == strlen(one) && strcmp(t.s.log.buf, "[f|]hello.") == 0,
              "resumed: the rest of the part");
    step_done(&t);

    step_init(&t, one, P_DATA);
    ASSERT_EQ_I(step_feed(&t, 0), E2B_MP_PAUSE);
    TAP_CHECK(t.at == head + 5 && strcmp(t.s.log.buf, "[f|]hello") == 0,
              "on_data pauses before the delimiter's first byte (at %zu)", t.at);
    ASSERT_EQ_I(step_feed(&t, 0), 0);
    TAP_CHECK(strcmp(t.s.log.buf, "[f|]hello.") == 0 && t.mp.state == E2B_MP_EPILOGUE,
              "resumed: the part ends, then the body");
    step_done(&t);

    step_init(&t, one, P_END);
    ASSERT_EQ_I(step_feed(&t, 0), E2B_MP_PAUSE);
    TAP_CHECK(t.at == strlen(one) - 2 && strcmp(t.s.log.buf, "[f|]hello.") == 0 &&
                  t.mp.state == E2B_MP_AFTER,
              "on_part_end pauses right after the delimiter (at %zu)", t.at);
    ASSERT_EQ_I(step_feed(&t, 0), 0);
    TAP_CHECK(t.mp.state == E2B_MP_EPILOGUE, "resumed: the closing \"--\"");
    step_done(&t);

    /* "\r\n-" begins the delimiter, the x ends the match: the withheld bytes are data. */
    step_init(&t, split, P_DATA);
    ASSERT_EQ_I(step_feed(&t, 0), E2B_MP_PAUSE);
    TAP_CHECK(t.at == head + 2 && strcmp(t.s.log.buf, "[f|]ab") == 0, "paused after 'ab'");
    ASSERT_EQ_I(step_feed(&t, 0), E2B_MP_PAUSE);
    TAP_CHECK(t.at == head + 5 && strcmp(t.s.log.buf, "[f|]ab\r\n-") == 0,
              "paused after the withheld prefix, at the byte that ended the match (at %zu)", t.at);
    ASSERT_EQ_I(step_feed(&t, 0), E2B_MP_PAUSE);
    TAP_CHECK(t.at == head + 7 && strcmp(t.s.log.buf, "[f|]ab\r\n-xy") == 0, "paused after 'xy'");
    ASSERT_EQ_I(step_feed(&t, 0), 0);
    TAP_CHECK(strcmp(t.s.log.buf, "[f|]ab\r\n-xy.") == 0, "resumed: the part ends");
    step_done(&t);

    /* ... the same with the feed cut inside the partial match: the pause takes nothing */
    step_init(&t, split, P_DATA);
    ASSERT_EQ_I(step_feed(&t, head + 5), E2B_MP_PAUSE);
    ASSERT_EQ_I(step_feed(&t, 3), 0);
    TAP_CHECK(t.at == head + 5 && strcmp(t.s.log.buf, "[f|]ab") == 0,
              "a partial delimiter at the end of a feed is withheld");
    ASSERT_EQ_I(step_feed(&t, 0), E2B_MP_PAUSE);
    TAP_CHECK(t.at == head + 5 && strcmp(t.s.log.buf, "[f|]ab\r\n-") == 0,
              "the next feed's first byte ends the match: paused having used 0 bytes");
    ASSERT_EQ_I(step_feed(&t, 0), E2B_MP_PAUSE);
    ASSERT_EQ_I(step_feed(&t, 0), 0);
    TAP_CHECK(strcmp(t.s.log.buf, "[f|]ab\r\n-xy.") == 0, "resumed: the same part");
    step_done(&t);
}

/* Every row, pausing at every event and at each kind alone, whole and in pieces: parse()'s log. */
TEST(pause_rows)
{
    static const unsigned masks[] = {P_PART, P_DATA, P_END, P_PART | P_DATA | P_END};

    for (size_t i = 0; i < ELEMENTSOF(mp_rows); i++) {
        size_t len = strlen(mp_rows[i].body);
        char *want = parse("B", mp_rows[i].body, len, 0, 0);
        bool same = true;
        unsigned pauses = 0;

        for (size_t m = 0; m < ELEMENTSOF(masks); m++) {
            for (size_t step = 0; step <= 7; step++) {
                char *got = NULL;

                pauses += parse_paused(mp_rows[i].body, len, step, masks[m], &got);
                same = same && strcmp(got, want) == 0;
                free(got);
            }
        }
        TAP_CHECK(same, "row %zu: pausing at its events (%u pauses) changes nothing", i, pauses);
        free(want);
    }
}

int
main(void)
{
    RUN(envelope);
    RUN(boundary);
    RUN(multipart);
    RUN(multipart_limits);
    RUN(pause_events);
    RUN(pause_rows);
    return tap_done();
}
