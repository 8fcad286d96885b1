/* The request head scanner under the body filter (body.c): pure functions over the bytes of one
 * connection, before evhttp sees them. Fuzzed by tests/fuzz/fuzz-api-head.c.
 *
 * It finds where a head ends (http_head_find_end()), judges a complete head
 * (http_head_parse()) and writes the head evhttp gets for a held body (http_head_rewrite()).
 * The judge is a follower, not a parser: a head is understood only when every line of it is
 * read by the same rules evhttp applies (a method evhttp serves here, HTTP/1.0 or 1.1, at most
 * one Content-Length of plain digits, or else at most one Transfer-Encoding, "chunked" in
 * HTTP/1.1, at most one Expect and only "100-continue", no folded or malformed line, no stray
 * CR, no NUL). Anything else is not
 * understood, and the connection goes blind (body.c): evhttp then frames it itself, so the two
 * never disagree about where a request ends.
 *
 * Whether a body is streamed to its handler, and whether what follows a head with "Upgrade" is a
 * WebSocket stream, is the route's to say (HTTP_ROUTE_STREAMED_BODY, HTTP_ROUTE_WEBSOCKET in the
 * protocols' tables, asked through http_route_flags()), never a second spelling of the paths
 * here. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/http.h>

#include "http/http-internal.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/parse.h"

struct line {
    const char *p;
    size_t n;
};

/* The next line of [*pos, end): without its LF and an optional CR before it. */
static bool
next_line(const char **pos, const char *end, struct line *ret)
{
    const char *nl = memchr(*pos, '\n', (size_t)(end - *pos));

    if (nl == NULL) {
        return false;
    }
    ret->p = *pos;
    ret->n = (size_t)(nl - *pos);
    if (ret->n > 0 && ret->p[ret->n - 1] == '\r') {
        ret->n--;
    }
    *pos = nl + 1;
    return true;
}

enum http_head_end
http_head_find_end(const char *buf, size_t len, size_t *line_start, size_t *ret_len)
{
    const char *pos = buf + *line_start, *end = buf + len;
    struct line l;

    while (next_line(&pos, end, &l)) {
        if (l.n == 0) {
            if (*line_start == 0) {
                return HTTP_HEAD_EMPTY_FIRST;
            }
            *ret_len = (size_t)(pos - buf);
            return HTTP_HEAD_COMPLETE;
        }
        *line_start = (size_t)(pos - buf);
    }
    return HTTP_HEAD_MORE;
}

/* evhttp's value trimming: leading and trailing blanks. */
static struct line
header_value(const struct line *l, size_t colon)
{
    struct line v = {l->p + colon + 1, l->n - colon - 1};

    while (v.n > 0 && (v.p[0] == ' ' || v.p[0] == '\t')) {
        v.p++;
        v.n--;
    }
    while (v.n > 0 && (v.p[v.n - 1] == ' ' || v.p[v.n - 1] == '\t')) {
        v.n--;
    }
    return v;
}

struct head_scan {
    const struct http_routes *routes; /* which routes hold their bodies */
    bool understood, http11, may_have_body, streamed, streamed_chunked, websocket, get;
    bool upgrade; /* an Upgrade header */
    int n_length, n_expect, n_te;
    uint64_t length;
    bool expect_continue, chunked;
};

/* The path of a request target: up to its query or fragment. */
static size_t
path_len(const char *uri, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (uri[i] == '?' || uri[i] == '#') {
            return i;
        }
    }
    return n;
}

static void
parse_request_line(const struct line *l, struct head_scan *h)
{
    /* The methods http.c allows, which evhttp dispatches; it answers others itself. */
    static const struct {
        const char *name;
        enum evhttp_cmd_type cmd;
    } methods[] = {{"GET", EVHTTP_REQ_GET},
                   {"POST", EVHTTP_REQ_POST},
                   {"PUT", EVHTTP_REQ_PUT},
                   {"DELETE", EVHTTP_REQ_DELETE},
                   {"HEAD", EVHTTP_REQ_HEAD}};
    const char *sp1 = memchr(l->p, ' ', l->n);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(l->p + l->n - sp1 - 1)) : NULL;
    size_t mlen, ulen, vlen;
    const char *uri, *version;

    if (sp1 == NULL || sp2 == NULL || memchr(l->p, '\r', l->n) != NULL) {
        return;
    }
    mlen = (size_t)(sp1 - l->p);
    uri = sp1 + 1;
    ulen = (size_t)(sp2 - uri);
    version = sp2 + 1;
    vlen = (size_t)(l->p + l->n - version);
    h->http11 = vlen == 8 && memcmp(version, "HTTP/1.1", 8) == 0;
    if (!h->http11 && !(vlen == 8 && memcmp(version, "HTTP/1.0", 8) == 0)) {
        return;
    }
    for (size_t i = 0; i < ELEMENTSOF(methods); i++) {
        if (mlen == strlen(methods[i].name) && memcmp(l->p, methods[i].name, mlen) == 0) {
            /* The route of an origin-form target ("/path?query"), as http.c routes it. */
            size_t plen = ulen > 0 && uri[0] == '/' ? path_len(uri, ulen) : 0;

            /* evhttp 2.1.12 reads a body after every method but HEAD and TRACE
             * (evhttp_method_may_have_body). */
            h->may_have_body = methods[i].cmd != EVHTTP_REQ_HEAD;
            unsigned flags = plen > 0 ? http_route_flags(h->routes, methods[i].cmd, uri, plen) : 0;

            h->streamed = (flags & HTTP_ROUTE_STREAMED_BODY) != 0;
            h->streamed_chunked = (flags & HTTP_ROUTE_STREAMED_CHUNKED) != 0;
            h->websocket = (flags & HTTP_ROUTE_WEBSOCKET) != 0;
            h->get = methods[i].cmd == EVHTTP_REQ_GET;
            h->understood = true;
            return;
        }
    }
}

static void
parse_header_line(const struct line *l, struct head_scan *h)
{
    const char *colon = memchr(l->p, ':', l->n);
    size_t c = colon ? (size_t)(colon - l->p) : 0;
    struct line v;

    if (l->p[0] == ' ' || l->p[0] == '\t' || colon == NULL || memchr(l->p, '\r', l->n) != NULL) {
        h->understood = false; /* folded, malformed, or a CR evhttp may judge otherwise */
        return;
    }
    v = header_value(l, c);
    if (strn_case_eq(l->p, c, "Transfer-Encoding")) {
        /* Exactly "chunked" (evhttp's test, case-insensitive): anything else goes blind. */
        h->n_te++;
        h->chunked = strn_case_eq(v.p, v.n, "chunked");
        if (!h->chunked) {
            h->understood = false;
        }
    } else if (strn_case_eq(l->p, c, "Upgrade")) {
        h->upgrade = true;
    } else if (strn_case_eq(l->p, c, HTTP_HELD_HEADER)) {
        h->understood = false;
    } else if (strn_case_eq(l->p, c, "Content-Length")) {
        /* Plain digits only (evhttp also takes a sign and blanks: blind then). */
        if (v.n > 18 || parse_u64n(v.p, v.n, &h->length) < 0) {
            h->understood = false;
            return;
        }
        h->n_length++;
    } else if (strn_case_eq(l->p, c, "Expect")) {
        /* evhttp answers any other expectation with 417, but only for a body it reads. */
        h->n_expect++;
        h->expect_continue = strn_case_eq(v.p, v.n, "100-continue");
        if (!h->expect_continue) {
            h->understood = false;
        }
    }
}

void
http_head_parse(const struct http_routes *rt, const char *head, size_t len, struct http_head *ret)
{
    const char *pos = head, *end = head + len;
    struct head_scan h = {.routes = rt};
    struct line l;
    bool first = true;

    while (next_line(&pos, end, &l) && l.n > 0) {
        if (first) {
            parse_request_line(&l, &h);
            first = false;
        } else if (h.understood) {
            parse_header_line(&l, &h);
        }
    }
    *ret = (struct http_head){.nul = memchr(head, '\0', len) != NULL};
    if (ret->nul || !h.understood || h.n_length > 1 || h.n_expect > 1 || h.n_te > 1 ||
        /* both framings (a smuggling classic), or chunked in HTTP/1.0: blind */
        (h.chunked && (h.n_length > 0 || !h.http11))) {
        return;
    }
    ret->understood = true;
    ret->chunked = h.chunked && h.may_have_body;
    ret->length = h.may_have_body && !h.chunked ? h.length : 0;
    ret->held = h.streamed && (ret->length > 0 || (ret->chunked && h.streamed_chunked));
    ret->expect_continue = ret->held && h.expect_continue && h.http11; /* evhttp's rule too */
    /* An upgrade holds back all that follows, so only a head evhttp dispatches at once: no body. */
    ret->upgrade =
        h.websocket && h.get && h.http11 && h.upgrade && !ret->chunked && ret->length == 0;
}

int
http_head_rewrite(const char *head, size_t len, uint64_t seq, struct buf *out)
{
    const char *pos = head, *end = head + len;
    struct line l;

    while (next_line(&pos, end, &l) && l.n > 0) {
        const char *colon = memchr(l.p, ':', l.n);

        if (colon != NULL && (strn_case_eq(l.p, (size_t)(colon - l.p), "Content-Length") ||
                              strn_case_eq(l.p, (size_t)(colon - l.p), "Transfer-Encoding"))) {
            continue;
        }
        if (buf_append(out, l.p, l.n) < 0 || buf_append(out, "\r\n", 2) < 0) {
            return -EMSGSIZE;
        }
    }
    return buf_printf(out, "Content-Length: 0\r\n" HTTP_HELD_HEADER ": %llu\r\n\r\n",
                      (unsigned long long)seq);
}
