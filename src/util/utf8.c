/* UTF-8 helpers; see utf8.h. The decoder follows the well-formed byte sequence table of the
 * Unicode standard (table 3-7), so every rejected input is rejected for the same reason a
 * strict JSON parser such as jansson would reject it. */
#include "utf8.h"

#include <errno.h>
#include <stdint.h>

static size_t
seq_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    unsigned char lo = 0x80, hi = 0xBF;
    size_t len;

    if (c < 0x80) {
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80; /* no overlongs */
        hi = c == 0xED ? 0x9F : 0xBF; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF; /* nothing above U+10FFFF */
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi) {
        return 0;
    }
    for (size_t i = 2; i < len; i++) {
        if (s[i] < 0x80 || s[i] > 0xBF) {
            return 0;
        }
    }
    return len;
}

size_t
utf8_seq_len(const char *s, size_t n)
{
    return n > 0 ? seq_len((const unsigned char *)s, n) : 0;
}

bool
utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;

    while (n > 0) {
        size_t len = seq_len(p, n);

        if (len == 0) {
            return false;
        }
        p += len;
        n -= len;
    }
    return true;
}

int
utf8_append_sanitized(struct buf *out, const char *s, size_t n)
{
    static const char replacement[] = "\xEF\xBF\xBD";
    const unsigned char *p = (const unsigned char *)s;
    size_t run = 0; /* valid bytes not yet copied */

    while (n > 0) {
        size_t len = seq_len(p + run, n);

        if (len > 0) {
            run += len;
            n -= len;
            continue;
        }
        if (buf_append(out, p, run) < 0 || buf_append(out, replacement, 3) < 0) {
            return -EMSGSIZE;
        }
        p += run + 1; /* skip one byte and resynchronise */
        n -= 1;
        run = 0;
    }
    return buf_append(out, p, run) < 0 ? -EMSGSIZE : 0;
}

size_t
utf8_boundary(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = n, back = 0;

    /* Step back over at most 3 continuation bytes to the lead byte of the last sequence. */
    while (i > 0 && back < 3 && (p[i - 1] & 0xC0) == 0x80) {
        i--;
        back++;
    }
    if (i == 0) {
        return n;
    }
    if (p[i - 1] >= 0xC0) {
        size_t want = p[i - 1] >= 0xF0 ? 4 : p[i - 1] >= 0xE0 ? 3 : 2;

        if (back + 1 < want) {
            return i - 1; /* the last character is incomplete: cut before it */
        }
    }
    return n;
}

size_t
utf8_prefix_chars(const char *s, size_t n, size_t max_chars)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t chars = 0;

    for (size_t i = 0; i < n; i++) {
        /* Every byte that is not a continuation byte starts a character. */
        if ((p[i] & 0xC0) != 0x80 && chars++ == max_chars) {
            return i;
        }
    }
    return n;
}
