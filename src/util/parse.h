/* Strict number parsing (systemd safe_atou family): the whole string must be a number, with no
 * sign where none is allowed, no junk and no overflow. Replaces the banned atoi/strtol. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Parses a decimal uint64 from s. Returns 0 and writes *ret, or -EINVAL (not a number, empty,
 * sign, junk) or -ERANGE (overflow); *ret is untouched on failure. */
int parse_u64(const char *s, uint64_t *ret);
/* Same for a bounded byte range [s, s+n) that need not be NUL-terminated. */
int parse_u64n(const char *s, size_t n, uint64_t *ret);
/* Parses a decimal int (optional leading '-') within [min, max]: -EINVAL or -ERANGE. */
int parse_int(const char *s, int min, int max, int *ret);
/* Parses a non-negative decimal with an optional fraction ("1.5") as a double in [min, max]. */
int parse_double(const char *s, double min, double max, double *ret);
/* Parses "true"/"false"/"1"/"0"/"yes"/"no"/"on"/"off". */
int parse_bool(const char *s, bool *ret);
/* Parses an API version "MAJOR.MINOR" into major*1000+minor (e.g. "1.41" -> 1041). */
int parse_api_version(const char *s, size_t n, unsigned *ret);
/* Case-insensitive ASCII compare of a length-bounded string against a C string. */
bool strn_case_eq(const char *s, size_t n, const char *lit);
/* True when s is 1..max characters of [A-Za-z0-9._-]: the names that end up in container
 * labels, URL paths and Redis keys. */
bool str_is_name(const char *s, size_t max);
/* True when s starts with prefix. */
bool str_startswith(const char *s, const char *prefix);
/* Parses a listen address: "HOST:PORT", "[V6]:PORT" (host written without brackets) or
 * "unix:/path" (host = the path, port = 0). -EINVAL when malformed or the host does not fit. */
int parse_listen(const char *s, char *host, size_t host_size, uint16_t *ret_port);
