/* HTTP/1.1 chunked framing (RFC 9112 §7.1), strict: the one scanner of the API's body filter
 * (http/body.c, http/held.c) and the egress proxy (egress/conn.c, egress/flow.c). Pure: over the
 * bytes of one body, fed in pieces of any size; no allocation, no I/O.
 *
 *   chunk = 1*D HEXDIG EOL data EOL      (no sign, blank, "0x" or extension)
 *   last  = 1*D "0" EOL EOL              (no trailer)
 *   EOL   = CRLF, or LF too (bare_lf)
 *
 * with D and the largest size the caller's struct chunked_rules; each user says there why its
 * rules are what they are (http-internal.h, egress/head.h). Anything else is -EINVAL at the byte
 * that leaves the grammar. Unit-tested by tests/unit/test-chunked.c, fuzzed by
 * tests/fuzz/fuzz-chunked.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* How strict a scanner is: a plain value, copied by chunked_init(). */
struct chunked_rules {
    unsigned max_digits; /* a size's hex digits, leading zeros too: 1 to 16 */
    uint64_t max_size;   /* a chunk's size, at most */
    bool bare_lf;        /* a lone LF ends a line as CRLF does */
};

enum chunked_state {
    CHUNKED_SIZE,     /* a chunk-size line's digits */
    CHUNKED_SIZE_LF,  /* its CR came */
    CHUNKED_DATA,     /* `left` data bytes */
    CHUNKED_DATA_END, /* the line end after the data */
    CHUNKED_DATA_LF,  /* ... its CR came */
    CHUNKED_LAST,     /* the empty line after the last chunk */
    CHUNKED_LAST_LF,  /* ... its CR came */
    CHUNKED_DONE,     /* the body is complete */
    CHUNKED_FAILED,   /* outside the grammar */
    CHUNKED__COUNT,
};

struct chunked {
    enum chunked_state state; /* set by chunked.c's chunked_set() only */
    struct chunked_rules rules;
    uint64_t size, left; /* the size line read so far; data left in the chunk */
    uint64_t total;      /* data bytes so far (fed or skipped) */
    unsigned digits;
};

/* Starts c on a body (c may hold anything before). rules.max_digits is 1 to 16. */
void chunked_init(struct chunked *c, struct chunked_rules rules);

/* Takes in[0..n): *ret_used bytes are consumed, and [*ret_off, *ret_off + *ret_len) of them are
 * body data (one span per call at most, and the call ends with it: call again with the rest).
 * 1: the body ended (the bytes after *ret_used are not its own; a body that ended takes nothing
 * more); 0: more; -EINVAL: in[*ret_used] is outside the grammar, or the body failed before
 * (*ret_used 0), with reterr (may be NULL) saying why, safe to show a peer. */
int chunked_feed(struct chunked *c, const char *in, size_t n, size_t *ret_used, size_t *ret_off,
                 size_t *ret_len, struct err *reterr);

/* chunked_feed() until in[0..n) is used up or the body ends or fails, data bytes not looked at:
 * what of in belongs to the body (*ret_used), and the same 1, 0 or -EINVAL. */
int chunked_scan(struct chunked *c, const char *in, size_t n, size_t *ret_used, struct err *reterr);

/* In a chunk's data: how many of its bytes are still to come (they may pass unread); else 0. */
uint64_t chunked_data_left(const struct chunked *c);

/* n of them (at most chunked_data_left()) went by without being looked at. */
void chunked_skip(struct chunked *c, uint64_t n);
