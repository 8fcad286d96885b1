/* Unit tests for the Docker multiplexed-stream parser: byte by byte, random split points, every
 * kind of malformed header, truncation and consumer-requested stops. */
#include <errno.h>
#include <stdint.h>

#include "docker/frames.h"
#include "tap.h"
#include "util/buf.h"

struct sink {
    struct buf out, err, sys;
    int calls;
    int fail_after; /* return -EIO at this call, 0 = never */
};

static int
on_data(enum docker_stream s, const char *data, size_t n, void *userdata)
{
    struct sink *k = userdata;
    struct buf *b = s == DOCKER_STREAM_STDOUT   ? &k->out
                    : s == DOCKER_STREAM_STDERR ? &k->err
                                                : &k->sys;

    k->calls++;
    if (n == 0) {
        return -EINVAL; /* the parser must never deliver empty payload */
    }
    if (k->fail_after && k->calls >= k->fail_after) {
        return -EIO;
    }
    return buf_append(b, data, n);
}

static void
sink_init(struct sink *k)
{
    memset(k, 0, sizeof(*k));
    buf_init(&k->out, 1 << 24);
    buf_init(&k->err, 1 << 24);
    buf_init(&k->sys, 1 << 24);
}

static void
sink_done(struct sink *k)
{
    buf_done(&k->out);
    buf_done(&k->err);
    buf_done(&k->sys);
}

static void
add_frame(struct buf *wire, enum docker_stream s, const void *data, uint32_t n)
{
    uint8_t h[8];

    docker_frames_header(h, s, n);
    if (buf_append(wire, h, 8) < 0 || buf_append(wire, data, n) < 0) {
        abort();
    }
}

/* A stream with stdin-echo, stdout, stderr, system error and empty frames. */
static void
sample(struct buf *wire)
{
    add_frame(wire, DOCKER_STREAM_STDOUT, "hello ", 6);
    add_frame(wire, DOCKER_STREAM_STDERR, "oops\n", 5);
    add_frame(wire, DOCKER_STREAM_STDOUT, "", 0);
    add_frame(wire, DOCKER_STREAM_STDIN, "world\n", 6);
    add_frame(wire, DOCKER_STREAM_SYSTEMERR, "exec failed\r\n", 13);
    add_frame(wire, DOCKER_STREAM_STDERR, "\0\xff", 2);
}

static void
check_sample(struct sink *k)
{
    ASSERT_EQ_U(k->out.len, 12);
    ASSERT_TRUE(memcmp(k->out.buf, "hello world\n", 12) == 0);
    ASSERT_EQ_U(k->err.len, 7);
    ASSERT_TRUE(memcmp(k->err.buf, "oops\n\0\xff", 7) == 0);
    ASSERT_EQ_U(k->sys.len, 13);
}

TEST(whole)
{
    struct buf wire = BUF_INIT(1 << 20);
    struct docker_frames f;
    struct sink k;

    sample(&wire);
    sink_init(&k);
    docker_frames_init(&f);
    ASSERT_OK(docker_frames_feed(&f, wire.buf, wire.len, on_data, &k));
    ASSERT_OK(docker_frames_finish(&f));
    check_sample(&k);
    ASSERT_EQ_U(f.frames, 6);
    sink_done(&k);
    buf_done(&wire);
}

TEST(byte_by_byte)
{
    struct buf wire = BUF_INIT(1 << 20);
    struct docker_frames f;
    struct sink k;

    sample(&wire);
    sink_init(&k);
    docker_frames_init(&f);
    for (size_t i = 0; i < wire.len; i++) {
        if (docker_frames_feed(&f, wire.buf + i, 1, on_data, &k) < 0) {
            TAP_CHECK(0, "feed failed at byte %zu", i);
            break;
        }
        /* finish must fail at every point except frame boundaries */
    }
    ASSERT_OK(docker_frames_finish(&f));
    check_sample(&k);
    sink_done(&k);
    buf_done(&wire);
}

TEST(random_splits)
{
    struct buf wire = BUF_INIT(1 << 24);
    char big[70000];
    unsigned seed = 12345;
    int bad = 0;

    for (size_t i = 0; i < sizeof(big); i++) {
        big[i] = (char)(i * 7);
    }
    sample(&wire);
    add_frame(&wire, DOCKER_STREAM_STDOUT, big, sizeof(big));
    add_frame(&wire, DOCKER_STREAM_STDERR, big, 1);
    for (int round = 0; round < 500; round++) {
        struct docker_frames f;
        struct sink k;
        size_t off = 0;

        sink_init(&k);
        docker_frames_init(&f);
        while (off < wire.len) {
            size_t n;

            seed = seed * 1103515245u + 12345u;
            n = 1 + (seed >> 8) % (round % 2 ? 9 : 40000);
            n = MIN(n, wire.len - off);
            if (docker_frames_feed(&f, wire.buf + off, n, on_data, &k) < 0) {
                bad++;
                break;
            }
            off += n;
        }
        if (docker_frames_finish(&f) < 0 || k.out.len != 12 + sizeof(big) ||
            memcmp(k.out.buf + 12, big, sizeof(big)) != 0 || k.err.len != 8) {
            bad++;
        }
        sink_done(&k);
    }
    ASSERT_EQ_I(bad, 0);
    buf_done(&wire);
}

TEST(truncation)
{
    struct buf wire = BUF_INIT(1 << 20);
    struct docker_frames f;
    struct sink k;
    int wrong = 0;

    add_frame(&wire, DOCKER_STREAM_STDOUT, "abcdef", 6);
    add_frame(&wire, DOCKER_STREAM_STDERR, "xyz", 3);
    /* Every prefix that is not a frame boundary must be reported as truncated. */
    for (size_t cut = 0; cut <= wire.len; cut++) {
        bool boundary = cut == 0 || cut == 14 || cut == wire.len;
        int r;

        sink_init(&k);
        docker_frames_init(&f);
        (void)docker_frames_feed(&f, wire.buf, cut, on_data, &k);
        r = docker_frames_finish(&f);
        if ((r == 0) != boundary) {
            wrong++;
        }
        sink_done(&k);
    }
    ASSERT_EQ_I(wrong, 0);
    buf_done(&wire);
}

TEST(bad_headers)
{
    static const uint8_t cases[][8] = {
        {4, 0, 0, 0, 0, 0, 0, 1},                 /* unknown stream */
        {1, 1, 0, 0, 0, 0, 0, 1},                 /* reserved byte set */
        {1, 0, 0, 9, 0, 0, 0, 1},                 /* reserved byte set */
        {'{', '"', 'm', 'e', 's', 's', 'a', 'g'}, /* a JSON error body */
        {'H', 'T', 'T', 'P', '/', '1', '.', '1'}, /* an HTTP answer */
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct docker_frames f;
        struct sink k;

        sink_init(&k);
        docker_frames_init(&f);
        ASSERT_ERR(docker_frames_feed(&f, cases[i], 8, on_data, &k), EPROTO);
        ASSERT_ERR(docker_frames_feed(&f, "\1\0\0\0\0\0\0\0", 8, on_data, &k), EPROTO);
        ASSERT_ERR(docker_frames_finish(&f), EPROTO);
        ASSERT_EQ_I(k.calls, 0);
        sink_done(&k);
    }
}

TEST(consumer_stop)
{
    struct buf wire = BUF_INIT(1 << 20);
    struct docker_frames f;
    struct sink k;

    sample(&wire);
    sink_init(&k);
    k.fail_after = 2;
    docker_frames_init(&f);
    ASSERT_ERR(docker_frames_feed(&f, wire.buf, wire.len, on_data, &k), EIO);
    ASSERT_EQ_I(k.calls, 2);
    ASSERT_ERR(docker_frames_feed(&f, wire.buf, 1, on_data, &k), EPROTO); /* sticky */
    sink_done(&k);
    buf_done(&wire);
}

TEST(max_frame)
{
    uint8_t h[8];
    struct docker_frames f;
    struct sink k;

    /* A 4 GiB - 1 frame header is legal and costs no memory: payload streams through. */
    docker_frames_header(h, DOCKER_STREAM_STDOUT, UINT32_MAX);
    sink_init(&k);
    docker_frames_init(&f);
    ASSERT_OK(docker_frames_feed(&f, h, 8, on_data, &k));
    ASSERT_EQ_U(f.remaining, UINT32_MAX);
    ASSERT_OK(docker_frames_feed(&f, "abc", 3, on_data, &k));
    ASSERT_EQ_U(f.remaining, UINT32_MAX - 3);
    ASSERT_ERR(docker_frames_finish(&f), EPROTO);
    sink_done(&k);
}

int
main(void)
{
    RUN(whole);
    RUN(byte_by_byte);
    RUN(random_splits);
    RUN(truncation);
    RUN(bad_headers);
    RUN(consumer_stop);
    RUN(max_frame);
    return tap_done();
}
