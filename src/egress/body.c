/* Where an absolute-form request's chunked body ends (head.h): pure, over the bytes after the
 * head, fed in pieces of any size. The proxy sends its upstream the request and exactly its body
 * (conn.c, flow.c); this decides the body's last byte. It is strict where readers differ (a bare
 * LF, extensions, trailers, sizes past 31 bits), so that no upstream ends the body before this
 * does and reads the rest of it as a second request: bytes outside the grammar are -EINVAL, and
 * the connection is cut before them. Data bytes are never looked at (the proxy splices them). */
#include <assert.h>
#include <errno.h>

#include "egress/head.h"
#include "util/macro.h"

#define SIZE_DIGITS 8u
#define SIZE_MAX31  0x7fffffffu

static void
chunked_set(struct egress_chunked *s, enum egress_chunked_state to)
{
    s->state = to;
}

void
egress_chunked_init(struct egress_chunked *s)
{
    *s = (struct egress_chunked){0};
    chunked_set(s, EGRESS_CHUNKED_SIZE);
}

static int
hex(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* One framing byte (not data). 0, or -EINVAL with reterr. */
static int
step(struct egress_chunked *s, char c, struct err *reterr)
{
    switch (s->state) {
    case EGRESS_CHUNKED_SIZE:
        if (hex(c) >= 0) {
            s->size = (s->size << 4) | (uint64_t)hex(c);
            if (++s->digits > SIZE_DIGITS || s->size > SIZE_MAX31) {
                chunked_set(s, EGRESS_CHUNKED_FAILED);
                return err_set(reterr, -EINVAL, "a chunk of 2 GiB or more");
            }
            return 0;
        }
        if (s->digits == 0 || c != '\r') {
            break;
        }
        chunked_set(s, EGRESS_CHUNKED_SIZE_LF);
        return 0;
    case EGRESS_CHUNKED_SIZE_LF:
        if (c != '\n') {
            break;
        }
        s->left = s->size;
        chunked_set(s, s->left == 0 ? EGRESS_CHUNKED_LAST_CR : EGRESS_CHUNKED_DATA);
        return 0;
    case EGRESS_CHUNKED_DATA_CR:
    case EGRESS_CHUNKED_LAST_CR:
        if (c != '\r') {
            break;
        }
        chunked_set(s, s->state == EGRESS_CHUNKED_LAST_CR ? EGRESS_CHUNKED_LAST_LF
                                                          : EGRESS_CHUNKED_DATA_LF);
        return 0;
    case EGRESS_CHUNKED_DATA_LF:
    case EGRESS_CHUNKED_LAST_LF:
        if (c != '\n') {
            break;
        }
        if (s->state == EGRESS_CHUNKED_LAST_LF) {
            chunked_set(s, EGRESS_CHUNKED_DONE);
        } else {
            s->size = 0;
            s->digits = 0;
            chunked_set(s, EGRESS_CHUNKED_SIZE);
        }
        return 0;
    case EGRESS_CHUNKED_DATA:
    case EGRESS_CHUNKED_DONE:
    case EGRESS_CHUNKED_FAILED:
    case EGRESS_CHUNKED__COUNT:
        break;
    }
    chunked_set(s, EGRESS_CHUNKED_FAILED);
    return err_set(reterr, -EINVAL,
                   "a malformed chunked body (sizes in hex, CRLF line ends, no extension or "
                   "trailer)");
}

uint64_t
egress_chunked_data_left(const struct egress_chunked *s)
{
    return s->state == EGRESS_CHUNKED_DATA ? s->left : 0;
}

void
egress_chunked_skip(struct egress_chunked *s, uint64_t n)
{
    assert(s->state == EGRESS_CHUNKED_DATA && n <= s->left);
    s->left -= n;
    if (s->left == 0) {
        chunked_set(s, EGRESS_CHUNKED_DATA_CR);
    }
}

int
egress_chunked_scan(struct egress_chunked *s, const char *in, size_t n, size_t *ret_used,
                    struct err *reterr)
{
    size_t i = 0;

    if (s->state == EGRESS_CHUNKED_FAILED) {
        *ret_used = 0;
        return err_set(reterr, -EINVAL, "a malformed chunked body");
    }
    while (i < n && s->state != EGRESS_CHUNKED_DONE) {
        if (s->state == EGRESS_CHUNKED_DATA) {
            uint64_t take = MIN((uint64_t)(n - i), s->left);

            egress_chunked_skip(s, take);
            i += (size_t)take;
            continue;
        }
        if (step(s, in[i], reterr) < 0) {
            *ret_used = i;
            return -EINVAL;
        }
        i++;
    }
    *ret_used = i;
    return s->state == EGRESS_CHUNKED_DONE ? 1 : 0;
}
