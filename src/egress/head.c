/* The egress proxy's request heads; see head.h. */
#include "egress/head.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util/macro.h"
#include "util/parse.h"

/* RFC 9110's tchar: what a method and a header name are made of. */
static bool
is_tchar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static struct egress_span
span(const char *buf, const char *p, size_t n)
{
    return (struct egress_span){.off = (uint32_t)(p - buf), .len = (uint32_t)n};
}

/* "host:port" (port required: CONNECT) or "host[:port]" (default_port when absent) of n bytes
 * into h. */
static int
authority(const char *s, size_t n, uint16_t default_port, struct egress_head *h, struct err *reterr)
{
    const char *colon = NULL;
    uint64_t port = default_port;
    int kind;

    if (memchr(s, '@', n) != NULL) {
        return err_set(reterr, -EINVAL, "no user information in a proxy's URI");
    }
    for (size_t i = n; i > 0; i--) {
        if (s[i - 1] == ':') {
            colon = s + i - 1;
            break;
        }
        if (s[i - 1] == ']') {
            break;
        }
    }
    if (colon != NULL && s[0] != '[' && memchr(s, ':', (size_t)(colon - s)) != NULL) {
        colon = NULL; /* an IPv6 literal without its brackets: no port */
    }
    if (colon != NULL && (parse_u64n(colon + 1, n - (size_t)(colon - s) - 1, &port) < 0 ||
                          port == 0 || port > 65535)) {
        return err_set(reterr, -EINVAL, "the port must be 1 to 65535");
    }
    if (colon == NULL && default_port == 0) {
        return err_set(reterr, -EINVAL, "CONNECT names host:port");
    }
    kind = egress_host_normalize(s, colon != NULL ? (size_t)(colon - s) : n, h->host, &h->addr);
    if (kind < 0 || (kind == 0 && s[0] == '[')) {
        return err_set(reterr, -EINVAL, "'%.*s' is no host name or address", (int)MIN(n, 80), s);
    }
    h->host_is_addr = kind == 1;
    h->port = (uint16_t)port;
    return 0;
}

/* The request line (n bytes, without its CRLF) into h. */
static int
request_line(const char *buf, const char *line, size_t n, struct egress_head *h, struct err *reterr)
{
    const char *sp1 = memchr(line, ' ', n), *sp2, *target, *end = line + n, *slash;
    size_t tn;

    if (sp1 == NULL || sp1 == line ||
        (sp2 = memchr(sp1 + 1, ' ', (size_t)(end - sp1 - 1))) == NULL) {
        return err_set(reterr, -EINVAL, "malformed request line");
    }
    for (const char *p = line; p < sp1; p++) {
        if (!is_tchar(*p)) {
            return err_set(reterr, -EINVAL, "malformed method");
        }
    }
    h->method = span(buf, line, (size_t)(sp1 - line));
    h->version = span(buf, sp2 + 1, (size_t)(end - sp2 - 1));
    if (h->version.len != 8 ||
        (memcmp(sp2 + 1, "HTTP/1.1", 8) != 0 && memcmp(sp2 + 1, "HTTP/1.0", 8) != 0)) {
        return err_set(reterr, -EINVAL, "not HTTP/1.0 or HTTP/1.1");
    }
    target = sp1 + 1;
    tn = (size_t)(sp2 - target);
    if (tn == 0) {
        return err_set(reterr, -EINVAL, "malformed request line");
    }
    for (size_t i = 0; i < tn; i++) {
        if ((unsigned char)target[i] <= ' ' || target[i] == 0x7f) {
            return err_set(reterr, -EINVAL, "malformed request target");
        }
    }
    if (strn_case_eq(line, h->method.len, "CONNECT")) {
        h->kind = EGRESS_HEAD_CONNECT;
        return authority(target, tn, 0, h, reterr);
    }
    if (tn < 8 || !strn_case_eq(target, 7, "http://")) {
        return err_set(reterr, -EPROTONOSUPPORT,
                       "the proxy takes CONNECT host:port (for https) and http:// URIs only");
    }
    h->kind = EGRESS_HEAD_ABSOLUTE;
    target += 7, tn -= 7;
    if (memchr(target, '#', tn) != NULL) {
        return err_set(reterr, -EINVAL, "no fragment in a request target");
    }
    slash = target;
    while (slash < target + tn && *slash != '/' && *slash != '?') {
        slash++;
    }
    h->path = span(buf, slash, (size_t)(target + tn - slash));
    h->path_needs_slash = h->path.len == 0 || *slash == '?';
    return authority(target, (size_t)(slash - target), 80, h, reterr);
}

/* The Host header's value (n bytes) against an ABSOLUTE head's URI. */
static int
check_host(const char *v, size_t n, const struct egress_head *h, struct err *reterr)
{
    struct egress_head named = {0};
    struct err ignored = {0};

    if (authority(v, n, 80, &named, &ignored) < 0 || strcmp(named.host, h->host) != 0 ||
        named.port != h->port) {
        return err_set(reterr, -EINVAL, "the Host header names another host than the URI");
    }
    return 0;
}

/* Content-Length or Transfer-Encoding (name and value: n and vn bytes) of an ABSOLUTE head: how
 * its body ends, which must be beyond doubt (RFC 9112 §6.3): the proxy sends the upstream that
 * body and nothing after it, and an upstream that read another end would take the rest of the
 * body for a request of its own. */
static int
body_header(const char *buf, const char *name, size_t n, const char *v, size_t vn,
            struct egress_head *h, struct err *reterr)
{
    bool length = strn_case_eq(name, n, "Content-Length");

    if (!length && !strn_case_eq(name, n, "Transfer-Encoding")) {
        return 0;
    }
    if (h->body != EGRESS_BODY_NONE) {
        return err_set(reterr, -EINVAL,
                       "one Content-Length or one Transfer-Encoding, not two of them");
    }
    if (length) {
        if (parse_u64n(v, vn, &h->body_len) < 0) {
            return err_set(reterr, -EINVAL, "Content-Length is no number of bytes");
        }
        h->body = EGRESS_BODY_LENGTH;
        return 0;
    }
    if (!strn_case_eq(v, vn, "chunked")) {
        return err_set(reterr, -EINVAL, "the proxy takes Transfer-Encoding: chunked only");
    }
    if (memcmp(buf + h->version.off, "HTTP/1.0", 8) == 0) {
        return err_set(reterr, -EINVAL, "no Transfer-Encoding in an HTTP/1.0 request");
    }
    h->body = EGRESS_BODY_CHUNKED;
    return 0;
}

/* One header line (n bytes, without its CRLF). */
static int
header_line(const char *buf, const char *line, size_t n, struct egress_head *h, bool *seen_host,
            struct err *reterr)
{
    const char *colon = memchr(line, ':', n), *v, *end = line + n;

    if (colon == NULL || colon == line) {
        return err_set(reterr, -EINVAL, "malformed header line");
    }
    for (const char *p = line; p < colon; p++) {
        if (!is_tchar(*p)) {
            return err_set(reterr, -EINVAL, "malformed header name (or a folded line)");
        }
    }
    for (const char *p = colon + 1; p < end; p++) {
        if ((*p < ' ' && *p != '\t') || *p == 0x7f) {
            return err_set(reterr, -EINVAL, "a control character in a header value");
        }
    }
    v = colon + 1;
    while (v < end && (*v == ' ' || *v == '\t')) {
        v++;
    }
    while (end > v && (end[-1] == ' ' || end[-1] == '\t')) {
        end--;
    }
    if (h->n_headers == EGRESS_HEADERS_MAX) {
        return err_set(reterr, -EMSGSIZE, "more than %d header lines", EGRESS_HEADERS_MAX);
    }
    h->headers[h->n_headers].name = span(buf, line, (size_t)(colon - line));
    h->headers[h->n_headers++].value = span(buf, v, (size_t)(end - v));
    if (strn_case_eq(line, (size_t)(colon - line), "Host")) {
        if (*seen_host) {
            return err_set(reterr, -EINVAL, "two Host headers");
        }
        *seen_host = true;
        if (h->kind == EGRESS_HEAD_ABSOLUTE) {
            return check_host(v, (size_t)(end - v), h, reterr);
        }
    }
    if (h->kind == EGRESS_HEAD_ABSOLUTE) {
        return body_header(buf, line, (size_t)(colon - line), v, (size_t)(end - v), h, reterr);
    }
    return 0;
}

int
egress_head_parse(const char *buf, size_t n, struct egress_head *ret, struct err *reterr)
{
    struct egress_head *h = ret;
    const char *p = buf, *end, *eol;
    bool seen_host = false;
    size_t limit = MIN(n, (size_t)EGRESS_HEAD_MAX);
    int r;

    end = memmem(buf, limit, "\r\n\r\n", 4);
    if (end == NULL) {
        return n >= EGRESS_HEAD_MAX ? err_set(reterr, -EMSGSIZE,
                                              "the request head is over %d bytes", EGRESS_HEAD_MAX)
                                    : -EAGAIN;
    }
    if (memchr(buf, '\0', (size_t)(end - buf)) != NULL) {
        return err_set(reterr, -EINVAL, "a NUL byte in the request head");
    }
    memset(h, 0, sizeof(*h));
    h->len = (size_t)(end - buf) + 4;
    eol = memmem(p, (size_t)(end + 2 - p), "\r\n", 2);
    r = request_line(buf, p, (size_t)(eol - p), h, reterr);
    while (r == 0 && eol < end) {
        p = eol + 2;
        eol = memmem(p, (size_t)(end + 2 - p), "\r\n", 2);
        if (memchr(p, '\n', (size_t)(eol - p)) != NULL || memchr(p, '\r', (size_t)(eol - p))) {
            r = err_set(reterr, -EINVAL, "a bare CR or LF in the request head");
            break;
        }
        r = header_line(buf, p, (size_t)(eol - p), h, &seen_host, reterr);
    }
    return r;
}

/* Whether the client's header (name, n bytes) stays off the upstream's request. */
static bool
hop_by_hop(const char *name, size_t n)
{
    static const char *const skip[] = {
        "Connection",         "Keep-Alive", "Proxy-Connection", "Proxy-Authorization",
        "Proxy-Authenticate", "TE",         "Trailer",          "Upgrade"};

    for (size_t i = 0; i < ELEMENTSOF(skip); i++) {
        if (strn_case_eq(name, n, skip[i])) {
            return true;
        }
    }
    return false;
}

int
egress_head_upstream(const struct egress_head *h, const char *buf, struct buf *out)
{
    bool has_host = false;
    int r;

    r = buf_printf(out, "%.*s %s%.*s %.*s\r\n", (int)h->method.len, buf + h->method.off,
                   h->path_needs_slash ? "/" : "", (int)h->path.len, buf + h->path.off,
                   (int)h->version.len, buf + h->version.off);
    for (size_t i = 0; r == 0 && i < h->n_headers; i++) {
        const char *name = buf + h->headers[i].name.off;
        size_t nn = h->headers[i].name.len;

        if (hop_by_hop(name, nn)) {
            continue;
        }
        has_host |= strn_case_eq(name, nn, "Host");
        r = buf_printf(out, "%.*s: %.*s\r\n", (int)nn, name, (int)h->headers[i].value.len,
                       buf + h->headers[i].value.off);
    }
    if (r == 0 && !has_host) {
        bool v6 = h->host_is_addr && h->addr.family != AF_INET;

        r = h->port == 80
                ? buf_printf(out, "Host: %s%s%s\r\n", v6 ? "[" : "", h->host, v6 ? "]" : "")
                : buf_printf(out, "Host: %s%s%s:%u\r\n", v6 ? "[" : "", h->host, v6 ? "]" : "",
                             h->port);
    }
    return r == 0 ? buf_puts(out, "Connection: close\r\n\r\n") : r;
}
