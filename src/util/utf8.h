/* UTF-8 validation and repair. Everything the API sends is JSON, which must be valid UTF-8;
 * bytes from inside a sandbox are not, so they are repaired (invalid sequences become U+FFFD)
 * rather than rejected. Pure. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "util/buf.h"

/* True when s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF;
 * NUL is allowed). */
bool utf8_valid(const char *s, size_t n);
/* Length of the well-formed sequence at s[0..n) (1..4), or 0 when it is ill-formed, cut short
 * or n is 0. */
size_t utf8_seq_len(const char *s, size_t n);
/* Appends s[0..n) to out with every ill-formed sequence replaced by U+FFFD. Returns 0, or
 * -EMSGSIZE when out's cap is reached (out then holds a valid prefix). */
int utf8_append_sanitized(struct buf *out, const char *s, size_t n);
/* Length of the longest prefix of s[0..n) that does not end inside a multi-byte sequence: where
 * a UTF-8 text may be cut without splitting a character. */
size_t utf8_boundary(const char *s, size_t n);
/* Length in bytes of the first max_chars characters of the UTF-8 text s[0..n) (all of it when it
 * has fewer): a cut by characters that never splits one. */
size_t utf8_prefix_chars(const char *s, size_t n, size_t max_chars);
