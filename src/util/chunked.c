/* HTTP/1.1 chunked framing under the rules of its caller (chunked.h has the grammar). A byte at a
 * time through one state machine: the framing bytes go through step(), data bytes are counted
 * and handed back as spans (chunked_feed()) or let by unread (chunked_skip()), so that a body fed
 * whole, in pieces or a byte at a time, data read or skipped, ends or fails at the same byte.
 *
 * Invariants: `state` is written by chunked_set() only; CHUNKED_DATA always has left > 0 (a size
 * of 0 is the last chunk); DONE and FAILED are final, and take no byte. The size is checked at
 * every digit: the digit that takes it past max_digits or max_size fails (so a kept size never
 * wrapped: at most 16 digits). Never looks past in[n). */
#include "chunked.h"

#include <assert.h>
#include <errno.h>

#include "macro.h"

#define GIB (UINT64_C(1) << 30)

static void
chunked_set(struct chunked *c, enum chunked_state to)
{
    c->state = to;
}

void
chunked_init(struct chunked *c, struct chunked_rules rules)
{
    assert(rules.max_digits >= 1 && rules.max_digits <= 16);
    *c = (struct chunked){.rules = rules};
    chunked_set(c, CHUNKED_SIZE);
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

/* A size past the rules: in GiB when the bound is a whole number of them (2 GiB, the proxy's). */
static int
too_big(struct chunked *c, struct err *reterr)
{
    uint64_t max = c->rules.max_size;

    chunked_set(c, CHUNKED_FAILED);
    if (max < UINT64_MAX && (max + 1) % GIB == 0) {
        return err_set(reterr, -EINVAL, "a chunk of %llu GiB or more",
                       (unsigned long long)((max + 1) / GIB));
    }
    return err_set(reterr, -EINVAL, "a chunk of more than %llu bytes", (unsigned long long)max);
}

/* A line ended (its LF came): a size line's (data follows, or the last chunk's empty line), the
 * one after a chunk's data (the next size line) or the last one (the end). */
static void
line_done(struct chunked *c)
{
    if (c->state == CHUNKED_SIZE || c->state == CHUNKED_SIZE_LF) {
        c->left = c->size;
        c->size = 0;
        c->digits = 0;
        chunked_set(c, c->left == 0 ? CHUNKED_LAST : CHUNKED_DATA);
    } else if (c->state == CHUNKED_DATA_END || c->state == CHUNKED_DATA_LF) {
        chunked_set(c, CHUNKED_SIZE);
    } else {
        assert(c->state == CHUNKED_LAST || c->state == CHUNKED_LAST_LF);
        chunked_set(c, CHUNKED_DONE);
    }
}

/* A line's end is due (after a size's digits, a chunk's data, the last chunk): its CR, then its
 * LF in the state after; or a bare LF where the rules take one. 0, or -1 for any other byte. */
static int
line_end(struct chunked *c, char ch)
{
    if (ch == '\r') {
        chunked_set(c, c->state == CHUNKED_SIZE   ? CHUNKED_SIZE_LF
                       : c->state == CHUNKED_LAST ? CHUNKED_LAST_LF
                                                  : CHUNKED_DATA_LF);
        return 0;
    }
    if (ch != '\n' || !c->rules.bare_lf) {
        return -1;
    }
    line_done(c);
    return 0;
}

/* One framing byte (not data). 0, or -EINVAL with reterr. */
static int
step(struct chunked *c, char ch, struct err *reterr)
{
    switch (c->state) {
    case CHUNKED_SIZE:
        if (hex(ch) >= 0) {
            c->size = (c->size << 4) | (uint64_t)hex(ch);
            if (++c->digits > c->rules.max_digits || c->size > c->rules.max_size) {
                return too_big(c, reterr);
            }
            return 0;
        }
        if (c->digits > 0 && line_end(c, ch) == 0) {
            return 0;
        }
        break;
    case CHUNKED_DATA_END:
    case CHUNKED_LAST:
        if (line_end(c, ch) == 0) {
            return 0;
        }
        break;
    case CHUNKED_SIZE_LF:
    case CHUNKED_DATA_LF:
    case CHUNKED_LAST_LF:
        if (ch != '\n') {
            break;
        }
        line_done(c);
        return 0;
    case CHUNKED_DATA:
    case CHUNKED_DONE:
    case CHUNKED_FAILED:
    case CHUNKED__COUNT:
        break;
    }
    chunked_set(c, CHUNKED_FAILED);
    return err_set(reterr, -EINVAL,
                   "a malformed chunked body (sizes in hex, %s line ends, no extension or trailer)",
                   c->rules.bare_lf ? "CRLF or LF" : "CRLF");
}

uint64_t
chunked_data_left(const struct chunked *c)
{
    return c->state == CHUNKED_DATA ? c->left : 0;
}

void
chunked_skip(struct chunked *c, uint64_t n)
{
    assert(c->state == CHUNKED_DATA && n <= c->left);
    c->left -= n;
    c->total += n;
    if (c->left == 0) {
        chunked_set(c, CHUNKED_DATA_END);
    }
}

int
chunked_feed(struct chunked *c, const char *in, size_t n, size_t *ret_used, size_t *ret_off,
             size_t *ret_len, struct err *reterr)
{
    size_t i = 0;

    *ret_off = *ret_len = 0;
    if (c->state == CHUNKED_FAILED) {
        *ret_used = 0;
        return err_set(reterr, -EINVAL, "a malformed chunked body");
    }
    while (i < n && c->state != CHUNKED_DONE) {
        if (c->state == CHUNKED_DATA) {
            uint64_t take = MIN((uint64_t)(n - i), c->left);

            *ret_off = i;
            *ret_len = (size_t)take;
            chunked_skip(c, take);
            *ret_used = i + (size_t)take;
            return 0; /* one span per call */
        }
        if (step(c, in[i], reterr) < 0) {
            *ret_used = i;
            return -EINVAL;
        }
        i++;
    }
    *ret_used = i;
    return c->state == CHUNKED_DONE ? 1 : 0;
}

int
chunked_scan(struct chunked *c, const char *in, size_t n, size_t *ret_used, struct err *reterr)
{
    size_t at = 0;
    int r;

    do {
        size_t used, off, len;

        r = chunked_feed(c, in + at, n - at, &used, &off, &len, reterr);
        at += used;
    } while (r == 0 && at < n);
    *ret_used = at;
    return r;
}
