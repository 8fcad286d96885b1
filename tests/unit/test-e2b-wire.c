/* Unit tests for src/e2b/wire.c: the Connect envelope and the multipart/form-data parser, fed
 * whole and one byte at a time (every split of a body must give the same parts). */
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
};

static int
on_part(const char *name, const char *filename, void *userdata)
{
    struct seen *s = userdata;

    if (++s->parts == s->fail_on_part) {
        return -EFBIG;
    }
    return buf_printf(&s->log, "[%s|%s]", name, filename);
}

static int
on_data(const char *data, size_t n, void *userdata)
{
    struct seen *s = userdata;

    return buf_append(&s->log, data, n);
}

static int
on_part_end(void *userdata)
{
    struct seen *s = userdata;

    return buf_putc(&s->log, '.');
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

int
main(void)
{
    RUN(envelope);
    RUN(boundary);
    RUN(multipart);
    RUN(multipart_limits);
    return tap_done();
}
