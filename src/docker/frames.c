/* Docker stdout/stderr multiplexing parser.
 *
 * Wire format (api/swagger.yaml "Stream format", moby stdcopy.go): each frame is an 8-byte header
 * [STREAM, 0, 0, 0, SIZE big-endian uint32] followed by SIZE payload bytes. STREAM is 0 (stdin,
 * shown as stdout), 1 (stdout), 2 (stderr) or 3 (daemon system error).
 *
 * State machine: HEADER (hdr_len < 8) -> PAYLOAD (remaining > 0) -> HEADER. A zero-size frame is
 * legal and goes straight back to HEADER. Anything but a valid header is -EPROTO and sticky: the
 * bytes are not Docker framing (a TTY stream, an HTTP error body) and nothing after them can be
 * trusted. The parser never buffers payload, so a peer cannot make it allocate. */
#include "frames.h"

#include <errno.h>
#include <string.h>

#include "util/macro.h"

void
docker_frames_init(struct docker_frames *f)
{
    memset(f, 0, sizeof(*f));
}

void
docker_frames_header(uint8_t out[8], enum docker_stream stream, uint32_t len)
{
    out[0] = (uint8_t)stream;
    out[1] = out[2] = out[3] = 0;
    out[4] = (uint8_t)(len >> 24);
    out[5] = (uint8_t)(len >> 16);
    out[6] = (uint8_t)(len >> 8);
    out[7] = (uint8_t)len;
}

/* Validates the collected header and enters PAYLOAD. */
static int
frames_take_header(struct docker_frames *f)
{
    const uint8_t *h = f->hdr;

    if (h[0] >= DOCKER_STREAM__COUNT || h[1] != 0 || h[2] != 0 || h[3] != 0) {
        return -EPROTO;
    }
    f->stream = h[0] == DOCKER_STREAM_STDIN ? DOCKER_STREAM_STDOUT : h[0];
    f->remaining = (uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 | (uint32_t)h[6] << 8 | h[7];
    f->hdr_len = 0;
    f->frames++;
    return 0;
}

int
docker_frames_feed(struct docker_frames *f, const void *data, size_t n, docker_frames_cb *cb,
                   void *userdata)
{
    const char *p = data;
    int r;

    if (f->failed) {
        return -EPROTO;
    }
    while (n > 0) {
        if (f->remaining == 0) {
            size_t take = MIN(sizeof(f->hdr) - f->hdr_len, n);

            memcpy(f->hdr + f->hdr_len, p, take);
            f->hdr_len = (uint8_t)(f->hdr_len + take);
            p += take;
            n -= take;
            if (f->hdr_len < sizeof(f->hdr)) {
                break;
            }
            r = frames_take_header(f);
            if (r < 0) {
                f->failed = true;
                return r;
            }
            continue;
        }
        size_t take = MIN((size_t)f->remaining, n);

        f->remaining -= (uint32_t)take;
        r = cb((enum docker_stream)f->stream, p, take, userdata);
        if (r < 0) {
            f->failed = true;
            return r;
        }
        p += take;
        n -= take;
    }
    return 0;
}

int
docker_frames_finish(const struct docker_frames *f)
{
    if (f->failed || f->hdr_len != 0 || f->remaining != 0) {
        return -EPROTO;
    }
    return 0;
}
