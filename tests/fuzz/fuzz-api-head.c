/* Fuzz target: the request head scanner under the body filter (src/http/head.c), over what a
 * client sends on one connection. The first byte sets the size of the reads the bytes arrive in
 * (1 + byte % 64: the filter sees whatever the socket gave it); the rest is the stream.
 *
 * Heads are collected the way body.c collects them, within its HEAD_MAX, and each read is
 * checked against a scan of everything so far at once: the incremental end must be the same
 * end. A complete head is judged, and every verdict must be coherent: a NUL or anything not
 * understood holds nothing; a chunked body comes with exactly one Transfer-Encoding and no
 * Content-Length, in HTTP/1.1, after a method with a body; a held body is one whose route
 * streams it (a PUT or POST of HTTP_ROUTE_STREAMED_BODY, a chunked one only where the route says
 * HTTP_ROUTE_STREAMED_CHUNKED); its rewritten head fits the documented bound, is exactly one head
 * again, carries one Content-Length, no Transfer-Encoding and the marker (so that it would not be
 * held a second time). The body a head announces is skipped as body.c passes it on, a chunked one
 * followed through util/chunked.c as pass_chunked() follows it (its own checks are
 * fuzz-chunked's), and the next head follows. An upgrade is a GET of HTTP/1.1 with an Upgrade
 * header and no body, on a route of HTTP_ROUTE_WEBSOCKET, holding nothing; nothing after it is
 * HTTP, so the stream ends there. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz.h"
#include "http/http-internal.h"
#include "lib/routes.h"
#include "util/buf.h"
#include "util/macro.h"

#define HEAD_MAX (2u * HTTP_MAX_HEADERS_BYTES + 16u) /* body.c's */

/* Lines of head[0..len) whose name is name (case-insensitive), up to the empty line. */
static size_t
count_header(const char *head, size_t len, const char *name)
{
    size_t n = strlen(name), count = 0;

    for (const char *p = head, *end = head + len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));

        if (nl == NULL || nl == p || (nl == p + 1 && p[0] == '\r')) {
            break;
        }
        if ((size_t)(nl - p) > n && p[n] == ':' && strncasecmp(p, name, n) == 0) {
            count++;
        }
        p = nl + 1;
    }
    return count;
}

/* The method of a held head: only PUT and POST routes stream bodies. */
static enum evhttp_cmd_type
held_method(const char *head, size_t len)
{
    if (len > 4 && memcmp(head, "PUT ", 4) == 0) {
        return EVHTTP_REQ_PUT;
    }
    CHECK(len > 5 && memcmp(head, "POST ", 5) == 0);
    return EVHTTP_REQ_POST;
}

static void
check_held(const char *head, size_t len, const struct http_head *h)
{
    const char *sp = memchr(head, ' ', len);
    const char *target = sp != NULL ? sp + 1 : NULL;
    size_t plen = 0, line_start = 0, end = 0;
    struct buf out = BUF_INIT(2 * len + 64);
    enum evhttp_cmd_type method = held_method(head, len);
    struct http_head again;
    unsigned flags;

    CHECK(h->understood && !h->nul && (h->chunked ? h->length == 0 : h->length > 0));
    CHECK(target != NULL);
    while (target + plen < head + len && strchr(" ?#", target[plen]) == NULL) {
        plen++;
    }
    flags = http_route_flags(test_routes(), method, target, plen);
    CHECK(flags & HTTP_ROUTE_STREAMED_BODY);
    CHECK(!h->chunked || (flags & HTTP_ROUTE_STREAMED_CHUNKED));
    CHECK(http_head_rewrite(head, len, 7, &out) == 0);
    CHECK(out.len >= 4 && memcmp(out.buf + out.len - 4, "\r\n\r\n", 4) == 0);
    CHECK(http_head_find_end(out.buf, out.len, &line_start, &end) == HTTP_HEAD_COMPLETE);
    CHECK(end == out.len);
    CHECK(count_header(out.buf, out.len, "Content-Length") == 1);
    CHECK(count_header(out.buf, out.len, "Transfer-Encoding") == 0);
    CHECK(count_header(out.buf, out.len, HTTP_HELD_HEADER) == 1);
    http_head_parse(test_routes(), out.buf, out.len, &again);
    CHECK(!again.understood && !again.held); /* the marker is the filter's own */
    buf_done(&out);
}

static void
check_upgrade(const char *head, size_t len, const struct http_head *h)
{
    const char *target = head + 4;
    const char *nl = memchr(head, '\n', len);
    size_t plen = 0, n = nl != NULL ? (size_t)(nl - head) : 0;

    CHECK(h->understood && !h->held && !h->chunked && h->length == 0 && !h->expect_continue);
    CHECK(len > 4 && memcmp(head, "GET ", 4) == 0);
    n -= n > 0 && head[n - 1] == '\r';
    CHECK(n > 9 && memcmp(head + n - 9, " HTTP/1.1", 9) == 0);
    CHECK(count_header(head, len, "Upgrade") >= 1);
    while (target + plen < head + len && strchr(" ?#", target[plen]) == NULL) {
        plen++;
    }
    CHECK(http_route_flags(test_routes(), EVHTTP_REQ_GET, target, plen) & HTTP_ROUTE_WEBSOCKET);
}

static void
check_head(const char *head, size_t len)
{
    struct http_head h;

    http_head_parse(test_routes(), head, len, &h);
    CHECK(!h.nul || !h.understood);
    CHECK(h.understood || (!h.held && !h.chunked && h.length == 0 && !h.expect_continue));
    CHECK(!h.expect_continue || h.held);
    if (h.chunked) {
        /* The request line ends in its version: HTTP/1.1 (the line end may be a bare LF). */
        const char *nl = memchr(head, '\n', len);
        size_t n = nl != NULL ? (size_t)(nl - head) : 0;

        n -= n > 0 && head[n - 1] == '\r';
        CHECK(n > 9 && memcmp(head + n - 9, " HTTP/1.1", 9) == 0);
        CHECK(memcmp(head, "HEAD ", 5) != 0 && h.length == 0);
        CHECK(count_header(head, len, "Transfer-Encoding") == 1);
        CHECK(count_header(head, len, "Content-Length") == 0);
    }
    if (h.held) {
        check_held(head, len, &h);
    }
    if (h.upgrade) {
        check_upgrade(head, len, &h);
    }
}

/* A chunked body from data[pos], passed on in reads of step bytes as pass_chunked() passes it
 * (data skipped unseen). Where the next head starts; size (*ret_ended false) when the body did not
 * end or failed: the connection is blind from there, evhttp frames the rest. */
static size_t
follow_chunked(const uint8_t *data, size_t size, size_t pos, size_t step, bool *ret_ended)
{
    struct chunked d;

    chunked_init(&d, HTTP_CHUNKED_RULES);
    *ret_ended = false;
    while (pos < size) {
        size_t take = MIN(size - pos, step), off = 0;

        while (off < take) {
            size_t used = 0, doff = 0, dlen = 0;
            int r;

            if (d.state == CHUNKED_DATA) {
                size_t k = (size_t)MIN((uint64_t)(take - off), d.left);

                chunked_skip(&d, k);
                off += k;
                continue;
            }
            r = chunked_feed(&d, (const char *)data + pos + off, take - off, &used, &doff, &dlen,
                             NULL);
            CHECK(used <= take - off && doff + dlen <= used);
            if (r < 0) {
                return size;
            }
            off += used;
            if (r == 1) {
                *ret_ended = true;
                return pos + off;
            }
        }
        pos += take;
    }
    return size;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct buf head = BUF_INIT(HEAD_MAX);
    size_t step, pos = 1, line_start = 0;

    if (size == 0) {
        return 0;
    }
    step = 1 + data[0] % 64;
    while (pos < size) {
        size_t take = size - pos < step ? size - pos : step, head_len = 0, once_len = 0;
        size_t before = head.len, once_start = 0;
        enum http_head_end r, once;
        struct http_head h;

        if (take > HEAD_MAX - head.len) {
            take = HEAD_MAX - head.len;
        }
        if (take == 0) {
            break; /* a head past HEAD_MAX: body.c goes blind, evhttp decides */
        }
        CHECK(buf_append(&head, data + pos, take) == 0);
        r = http_head_find_end(head.buf, head.len, &line_start, &head_len);
        once = http_head_find_end(head.buf, head.len, &once_start, &once_len);
        CHECK(r == once && line_start <= head.len);
        if (r == HTTP_HEAD_EMPTY_FIRST) {
            break; /* blind from here on */
        }
        if (r == HTTP_HEAD_MORE) {
            pos += take;
            continue;
        }
        CHECK(head_len == once_len && head_len > before && head_len <= head.len);
        check_head(head.buf, head_len);
        http_head_parse(test_routes(), head.buf, head_len, &h);
        if (!h.understood || h.upgrade) {
            break; /* blind, or a WebSocket stream from here on */
        }
        /* What followed the head in this read, then the body it announced. */
        pos += head_len - before;
        pos += h.length < size - pos ? (size_t)h.length : size - pos;
        if (h.chunked) {
            bool ended = false;

            pos = follow_chunked(data, size, pos, step, &ended);
            if (!ended) {
                break;
            }
        }
        head.len = 0;
        line_start = 0;
    }
    buf_done(&head);
    return 0;
}
