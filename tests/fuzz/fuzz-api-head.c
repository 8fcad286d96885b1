/* Fuzz target: the request head scanner under the body filter (src/api/head.c), over what a
 * client sends on one connection. The first byte sets the size of the reads the bytes arrive in
 * (1 + byte % 64: the filter sees whatever the socket gave it); the rest is the stream.
 *
 * Heads are collected the way body.c collects them, within its HEAD_MAX, and each read is
 * checked against a scan of everything so far at once: the incremental end must be the same
 * end. A complete head is judged, and every verdict must be coherent: a NUL or anything not
 * understood holds nothing; a held body is a PUT whose route streams its body; its rewritten
 * head fits the documented bound, is exactly one head again, carries one Content-Length and the
 * marker (so that it would not be held a second time). The body a head announces is skipped
 * as body.c passes it on, and the next head follows. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/api-internal.h"
#include "fuzz.h"
#include "util/buf.h"

#define HEAD_MAX (2u * API_MAX_HEADERS_BYTES + 16u) /* body.c's */

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

static void
check_held(const char *head, size_t len, const struct api_head *h)
{
    const char *sp = memchr(head, ' ', len);
    const char *target = sp != NULL ? sp + 1 : NULL;
    size_t plen = 0, line_start = 0, end = 0;
    struct buf out = BUF_INIT(2 * len + 64);
    struct api_head again;

    CHECK(h->understood && !h->nul && h->length > 0);
    CHECK(len > 4 && memcmp(head, "PUT ", 4) == 0 && target != NULL);
    while (target + plen < head + len && strchr(" ?#", target[plen]) == NULL) {
        plen++;
    }
    CHECK(api_route_flags(EVHTTP_REQ_PUT, target, plen) & API_ROUTE_STREAMED_BODY);
    CHECK(api_head_rewrite(head, len, 7, &out) == 0);
    CHECK(out.len >= 4 && memcmp(out.buf + out.len - 4, "\r\n\r\n", 4) == 0);
    CHECK(api_head_find_end(out.buf, out.len, &line_start, &end) == API_HEAD_COMPLETE);
    CHECK(end == out.len);
    CHECK(count_header(out.buf, out.len, "Content-Length") == 1);
    CHECK(count_header(out.buf, out.len, API_HELD_HEADER) == 1);
    api_head_parse(out.buf, out.len, &again);
    CHECK(!again.understood && !again.held); /* the marker is the filter's own */
    buf_done(&out);
}

static void
check_head(const char *head, size_t len)
{
    struct api_head h;

    api_head_parse(head, len, &h);
    CHECK(!h.nul || !h.understood);
    CHECK(h.understood || (!h.held && h.length == 0 && !h.expect_continue));
    CHECK(!h.expect_continue || h.held);
    if (h.held) {
        check_held(head, len, &h);
    }
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
        enum api_head_end r, once;
        struct api_head h;

        if (take > HEAD_MAX - head.len) {
            take = HEAD_MAX - head.len;
        }
        if (take == 0) {
            break; /* a head past HEAD_MAX: body.c goes blind, evhttp decides */
        }
        CHECK(buf_append(&head, data + pos, take) == 0);
        r = api_head_find_end(head.buf, head.len, &line_start, &head_len);
        once = api_head_find_end(head.buf, head.len, &once_start, &once_len);
        CHECK(r == once && line_start <= head.len);
        if (r == API_HEAD_EMPTY_FIRST) {
            break; /* blind from here on */
        }
        if (r == API_HEAD_MORE) {
            pos += take;
            continue;
        }
        CHECK(head_len == once_len && head_len > before && head_len <= head.len);
        check_head(head.buf, head_len);
        api_head_parse(head.buf, head_len, &h);
        if (!h.understood) {
            break;
        }
        /* What followed the head in this read, then the body it announced. */
        pos += head_len - before;
        pos += h.length < size - pos ? (size_t)h.length : size - pos;
        head.len = 0;
        line_start = 0;
    }
    buf_done(&head);
    return 0;
}
