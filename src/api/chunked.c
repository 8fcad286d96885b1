/* HTTP/1.1 chunked framing (RFC 9112 §7.1) for the body filter (body.c, held.c): pure, over the
 * bytes of one body, fed in pieces of any size. Fuzzed by tests/fuzz/fuzz-api-head.c.
 *
 * Strict on purpose, a subset of what evhttp 2.1 reads (http.c, evhttp_handle_chunked_read: a
 * size line through strtoll, then a blank and anything; empty lines skipped between chunks;
 * header-like trailer lines after the last chunk):
 *
 *   chunk    = 1*15HEXDIG EOL data EOL       (no sign, blank, "0x" or extension)
 *   last     = 1*15"0" EOL EOL               (no trailer)
 *   EOL      = CRLF / LF
 *
 * 15 digits keep every size below 2^60, inside evhttp's int64. Anything else is -EINVAL. The
 * filter passes a chunked body on to evhttp unchanged while it reads it so, and goes blind at the
 * first byte it does not (evhttp frames the rest itself: the two never disagree); a body it holds
 * for its handler evhttp never sees, and that one must be well formed. */
#include <errno.h>
#include <string.h>

#include "api/api-internal.h"
#include "util/macro.h"

#define SIZE_DIGITS 15u

static void
chunked_set(struct api_chunked *d, enum api_chunked_state to)
{
    d->state = to;
}

void
api_chunked_init(struct api_chunked *d)
{
    *d = (struct api_chunked){0};
    chunked_set(d, API_CHUNKED_SIZE);
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

/* The size line ended: data follows, or the last chunk's empty line. */
static void
size_done(struct api_chunked *d)
{
    d->left = d->size;
    d->size = 0;
    d->digits = 0;
    chunked_set(d, d->left == 0 ? API_CHUNKED_LAST : API_CHUNKED_DATA);
}

/* One framing byte (not data). 0, or -EINVAL. */
static int
step(struct api_chunked *d, char c)
{
    switch (d->state) {
    case API_CHUNKED_SIZE:
        if (hex(c) >= 0 && d->digits < SIZE_DIGITS) {
            d->size = (d->size << 4) | (uint64_t)hex(c);
            d->digits++;
            return 0;
        }
        if (d->digits == 0 || (c != '\r' && c != '\n')) {
            break;
        }
        if (c == '\r') {
            chunked_set(d, API_CHUNKED_SIZE_LF);
        } else {
            size_done(d);
        }
        return 0;
    case API_CHUNKED_SIZE_LF:
        if (c != '\n') {
            break;
        }
        size_done(d);
        return 0;
    case API_CHUNKED_DATA_END:
    case API_CHUNKED_LAST:
        if (c == '\r') {
            chunked_set(d,
                        d->state == API_CHUNKED_LAST ? API_CHUNKED_LAST_LF : API_CHUNKED_DATA_LF);
            return 0;
        }
        if (c != '\n') {
            break;
        }
        chunked_set(d, d->state == API_CHUNKED_LAST ? API_CHUNKED_DONE : API_CHUNKED_SIZE);
        return 0;
    case API_CHUNKED_DATA_LF:
    case API_CHUNKED_LAST_LF:
        if (c != '\n') {
            break;
        }
        chunked_set(d, d->state == API_CHUNKED_LAST_LF ? API_CHUNKED_DONE : API_CHUNKED_SIZE);
        return 0;
    case API_CHUNKED_DATA:
    case API_CHUNKED_DONE:
    case API_CHUNKED_FAILED:
    case API_CHUNKED__COUNT:
    case API_CHUNKED__INVALID:
        break;
    }
    chunked_set(d, API_CHUNKED_FAILED);
    return -EINVAL;
}

void
api_chunked_skip(struct api_chunked *d, size_t n)
{
    d->left -= MIN((uint64_t)n, d->left);
    d->total += n;
    if (d->left == 0) {
        chunked_set(d, API_CHUNKED_DATA_END);
    }
}

int
api_chunked_feed(struct api_chunked *d, const char *in, size_t n, size_t *ret_used, size_t *ret_off,
                 size_t *ret_len)
{
    size_t i = 0;

    *ret_off = *ret_len = 0;
    while (i < n && d->state != API_CHUNKED_DONE) {
        if (d->state == API_CHUNKED_DATA) {
            size_t take = (size_t)MIN((uint64_t)(n - i), d->left);

            *ret_off = i;
            *ret_len = take;
            d->left -= take;
            d->total += take;
            if (d->left == 0) {
                chunked_set(d, API_CHUNKED_DATA_END);
            }
            *ret_used = i + take;
            return 0; /* one span per call */
        }
        if (d->state == API_CHUNKED_FAILED || step(d, in[i]) < 0) {
            *ret_used = i;
            return -EINVAL;
        }
        i++;
    }
    *ret_used = i;
    return d->state == API_CHUNKED_DONE ? 1 : 0;
}
