/* Demultiplexer for Docker's 8-byte framed stdout/stderr stream (non-TTY exec and attach).
 *
 * Pure: no I/O, no allocation, no event loop. Bytes go in through docker_frames_feed() in pieces
 * of any size; payload comes out through the callback as it arrives, possibly split across calls,
 * so memory use does not depend on frame size. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum docker_stream {
    DOCKER_STREAM_STDIN = 0, /* echoed stdin; Docker documents it as "written on stdout" */
    DOCKER_STREAM_STDOUT = 1,
    DOCKER_STREAM_STDERR = 2,
    DOCKER_STREAM_SYSTEMERR = 3, /* daemon-side error text */
    DOCKER_STREAM__COUNT,
    DOCKER_STREAM__INVALID = -22,
};

struct docker_frames {
    uint8_t hdr[8];
    uint8_t hdr_len;    /* header bytes collected so far */
    uint32_t remaining; /* payload bytes still due for the current frame */
    uint8_t stream;     /* stream of the current frame */
    bool failed;        /* a protocol error was seen; every later feed fails */
    uint64_t frames;    /* complete headers parsed, for tests and metrics */
};

/* Receives n > 0 payload bytes of `stream` (STDIN is folded into STDOUT). Return 0 to go on, or a
 * negative errno to stop: docker_frames_feed() then returns that value. */
typedef int docker_frames_cb(enum docker_stream stream, const char *data, size_t n, void *userdata);

void docker_frames_init(struct docker_frames *f);

/* Feeds n bytes. Returns 0, -EPROTO for a malformed header (the stream is not Docker framing:
 * a TTY stream or an error body), or the callback's negative return. After any failure the
 * parser stays failed. */
int docker_frames_feed(struct docker_frames *f, const void *data, size_t n, docker_frames_cb *cb,
                       void *userdata);

/* Called at end of stream. Returns 0 when the stream ended on a frame boundary, -EPROTO when it
 * was cut inside a header or payload (or the parser had failed). */
int docker_frames_finish(const struct docker_frames *f);

/* Encodes a frame header for `stream` and `len` into out[8] (used by tests and the fuzzer). */
void docker_frames_header(uint8_t out[8], enum docker_stream stream, uint32_t len);
