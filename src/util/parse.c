/* Strict parsers; see parse.h. Written without strtol so that whitespace, signs and base
 * prefixes are rejected rather than silently accepted. */
#include "parse.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <strings.h>

#include "macro.h"

int
parse_u64n(const char *s, size_t n, uint64_t *ret)
{
    uint64_t v = 0;

    if (n == 0) {
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned d;

        if (s[i] < '0' || s[i] > '9') {
            return -EINVAL;
        }
        d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) {
            return -ERANGE;
        }
        v = v * 10 + d;
    }
    *ret = v;
    return 0;
}

int
parse_u64(const char *s, uint64_t *ret)
{
    return parse_u64n(s, strlen(s), ret);
}

int
parse_int(const char *s, int min, int max, int *ret)
{
    bool neg = s[0] == '-';
    uint64_t v;
    int64_t sv;
    int r;

    r = parse_u64(s + (neg ? 1 : 0), &v);
    if (r < 0) {
        return r;
    }
    if (v > (uint64_t)INT_MAX + (neg ? 1 : 0)) {
        return -ERANGE;
    }
    sv = neg ? -(int64_t)v : (int64_t)v;
    if (sv < min || sv > max) {
        return -ERANGE;
    }
    *ret = (int)sv;
    return 0;
}

int
parse_double(const char *s, double min, double max, double *ret)
{
    const char *dot = strchr(s, '.');
    uint64_t ip, fp = 0;
    double v, scale = 1.0;
    size_t flen = 0;
    int r;

    r = parse_u64n(s, dot ? (size_t)(dot - s) : strlen(s), &ip);
    if (r < 0) {
        return r;
    }
    if (dot != NULL) {
        flen = strlen(dot + 1);
        if (flen > 9) {
            return -EINVAL;
        }
        r = parse_u64n(dot + 1, flen, &fp);
        if (r < 0) {
            return r;
        }
    }
    for (size_t i = 0; i < flen; i++) {
        scale *= 10.0;
    }
    v = (double)ip + (double)fp / scale;
    if (v < min || v > max) {
        return -ERANGE;
    }
    *ret = v;
    return 0;
}

int
parse_bool(const char *s, bool *ret)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};

    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *ret = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *ret = false;
            return 0;
        }
    }
    return -EINVAL;
}

int
parse_api_version(const char *s, size_t n, unsigned *ret)
{
    const char *dot = memchr(s, '.', n);
    uint64_t major, minor;

    if (dot == NULL) {
        return -EINVAL;
    }
    if (parse_u64n(s, (size_t)(dot - s), &major) < 0 ||
        parse_u64n(dot + 1, n - (size_t)(dot - s) - 1, &minor) < 0) {
        return -EINVAL;
    }
    if (major > 99 || minor > 999) {
        return -ERANGE;
    }
    *ret = (unsigned)(major * 1000 + minor);
    return 0;
}

bool
strn_case_eq(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && strncasecmp(s, lit, n) == 0;
}

bool
str_startswith(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

int
parse_listen(const char *s, char *host, size_t host_size, uint16_t *ret_port)
{
    const char *colon, *h = s;
    size_t hlen;
    uint64_t port;

    if (str_startswith(s, "unix:")) {
        const char *path = s + strlen("unix:");

        if (path[0] != '/' || strlen(path) >= MIN(host_size, (size_t)108)) {
            return -EINVAL;
        }
        memcpy(host, path, strlen(path) + 1);
        *ret_port = 0;
        return 0;
    }
    colon = strrchr(s, ':');
    if (colon == NULL || parse_u64(colon + 1, &port) < 0 || port == 0 || port > 65535) {
        return -EINVAL;
    }
    hlen = (size_t)(colon - s);
    if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']') {
        h = s + 1;
        hlen -= 2;
    } else if (memchr(s, ':', hlen) != NULL) {
        return -EINVAL; /* a bare IPv6 address needs brackets */
    }
    if (hlen == 0 || hlen >= host_size) {
        return -EINVAL;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *ret_port = (uint16_t)port;
    return 0;
}

bool
str_is_name(const char *s, size_t max)
{
    size_t n = strlen(s);

    if (n == 0 || n > max) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];

        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.')) {
            return false;
        }
    }
    return true;
}
