/* The request head scanner (src/http/head.c) and the route flag it asks (http_route_flags() in
 * src/http/http.c): where a head ends, fed at once and a byte at a time; which heads are
 * understood by evhttp's rules and which bodies are held for their handler; the head evhttp
 * gets for a held body. */
#include <errno.h>
#include <string.h>

#include "http/http-internal.h"
#include "lib/routes.h"
#include "tap.h"
#include "util/buf.h"

TEST(route_flags)
{
    static const struct {
        enum evhttp_cmd_type method;
        const char *path;
        bool streamed;
    } cases[] = {
        {EVHTTP_REQ_PUT, "/v1/sessions/s1/files/a", true},
        {EVHTTP_REQ_PUT, "/v1/sessions/s1/files/dir/a%20b", true},
        {EVHTTP_REQ_PUT, "/v1/sessions/s1/files/", false}, /* "**" is never empty */
        {EVHTTP_REQ_PUT, "/v1/sessions/s1/files", false},
        {EVHTTP_REQ_PUT, "/v1/sessions//files/a", false},
        {EVHTTP_REQ_PUT, "/v1/sessions/s1/x/files/a", false},
        {EVHTTP_REQ_GET, "/v1/sessions/s1/files/a", false},
        {EVHTTP_REQ_DELETE, "/v1/sessions/s1/files/a", false},
        {EVHTTP_REQ_POST, "/v1/sessions", false},
        {EVHTTP_REQ_PUT, "/v1/admin/pools/python", false},
    };

    for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
        unsigned f =
            http_route_flags(test_routes(), cases[i].method, cases[i].path, strlen(cases[i].path));

        TAP_CHECK(((f & HTTP_ROUTE_STREAMED_BODY) != 0) == cases[i].streamed, "%s streamed: %d",
                  cases[i].path, cases[i].streamed);
    }
}

TEST(find_end)
{
    static const char text[] = "PUT /x HTTP/1.1\r\nA: b\nC: d\r\n\r\nbody";
    size_t n = strlen(text), line_start = 0, len = 0, at = 0;
    enum http_head_end r = HTTP_HEAD_MORE;

    ASSERT_EQ_I(http_head_find_end(text, n, &line_start, &len), HTTP_HEAD_COMPLETE);
    ASSERT_EQ_U(len, n - 4);
    line_start = 0;
    for (at = 1; at <= n && r == HTTP_HEAD_MORE; at++) {
        r = http_head_find_end(text, at, &line_start, &len);
    }
    ASSERT_EQ_I(r, HTTP_HEAD_COMPLETE);
    ASSERT_EQ_U(len, n - 4);
    ASSERT_EQ_U(at - 1, n - 4); /* found at the byte that completed it */
    line_start = 0;
    ASSERT_EQ_I(http_head_find_end("\r\nGET / HTTP/1.1\r\n\r\n", 20, &line_start, &len),
                HTTP_HEAD_EMPTY_FIRST);
    line_start = 0;
    ASSERT_EQ_I(http_head_find_end("GET / HTTP/1.1\r\nA: b", 20, &line_start, &len),
                HTTP_HEAD_MORE);
    ASSERT_EQ_U(line_start, 16);
}

TEST(parse)
{
    static const struct {
        const char *head;
        bool understood, held, cont;
        uint64_t length;
    } cases[] = {
        {"PUT /v1/sessions/s/files/a HTTP/1.1\r\nContent-Length: 5\r\n\r\n", true, true, false, 5},
        {"PUT /v1/sessions/s/files/a?x=/y HTTP/1.1\r\nExpect: 100-continue\r\n"
         "Content-Length: 5\r\n\r\n",
         true, true, true, 5},
        /* HTTP/1.0 clients wait for no "100 Continue" (evhttp's rule). */
        {"PUT /v1/sessions/s/files/a HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
         true, true, false, 5},
        {"PUT /v1/sessions/s/files/a HTTP/1.1\r\nContent-Length: 0\r\n\r\n", true, false, false, 0},
        /* The old prefix-and-"/files/" test held these; no route streams them. */
        {"PUT /v1/sessions/s/files?d=/files/ HTTP/1.1\r\nContent-Length: 5\r\n\r\n", true, false,
         false, 5},
        {"PUT /v1/sessions/s/x/files/a HTTP/1.1\r\nContent-Length: 5\r\n\r\n", true, false, false,
         5},
        {"POST /v1/sessions HTTP/1.1\r\nContent-Length: 2\r\n\r\n", true, false, false, 2},
        {"HEAD /v1/sessions/s/files/a HTTP/1.1\r\nContent-Length: 9\r\n\r\n", true, false, false,
         0},
        /* chunked: followed (its route does not stream chunked bodies) */
        {"PUT /v1/sessions/s/files/a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", true, false,
         false, 0},
        /* ... held where the route streams them (E2B uploads) */
        {"POST /e2b/sbx/files?path=a HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n", true, true,
         false, 0},
        {"POST /e2b/sbx/files HTTP/1.1\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n"
         "\r\n",
         true, true, true, 0},
        {"POST /e2b/sbx/files HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", false, false, false,
         0},
        {"POST /e2b/sbx/files HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", false, false,
         false, 0},
        {"POST /e2b/sbx/files HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
         "chunked\r\n\r\n",
         false, false, false, 0},
        {"POST /e2b/sbx/files HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n",
         false, false, false, 0},
        /* evhttp reads a body after GET and DELETE too (not after HEAD) */
        {"GET /v1/sessions HTTP/1.1\r\nContent-Length: 5\r\n\r\n", true, false, false, 5},
        {"DELETE /v1/sessions/s HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", true, false, false,
         0},
        {"HEAD /v1/sessions/s HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", true, false, false,
         0},
        {"PUT /v1/sessions/s/files/a HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
         false, false, false, 0},
        {"PUT /v1/sessions/s/files/a HTTP/1.1\r\nContent-Length: +1\r\n\r\n", false, false, false,
         0},
        {"PUT /v1/sessions/s/files/a HTTP/1.1\r\nX-Sandpool-Held: 1\r\nContent-Length: 1\r\n\r\n",
         false, false, false, 0},
        {"PUT /v1/sessions/s/files/a HTTP/1.1\r\nExpect: bogus\r\nContent-Length: 1\r\n\r\n", false,
         false, false, 0},
        {"PUT /v1/sessions/s/files/a HTTP/1.1\r\n folded\r\n\r\n", false, false, false, 0},
        {"PUT /v1/sessions/s/files/a HTTP/2\r\nContent-Length: 1\r\n\r\n", false, false, false, 0},
        {"PATCH /v1/sessions/s/files/a HTTP/1.1\r\nContent-Length: 1\r\n\r\n", false, false, false,
         0},
    };

    for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
        struct http_head h;

        http_head_parse(test_routes(), cases[i].head, strlen(cases[i].head), &h);
        TAP_CHECK(h.understood == cases[i].understood && h.held == cases[i].held &&
                      h.expect_continue == cases[i].cont && h.length == cases[i].length,
                  "case %zu: understood %d held %d continue %d length %llu", i, h.understood,
                  h.held, h.expect_continue, (unsigned long long)h.length);
    }
}

TEST(nul_and_rewrite)
{
    static const char nul[] = "GET / HTTP/1.1\r\nAuthorization: Bearer a\0b\r\n\r\n";
    static const char put[] = "PUT /v1/sessions/s/files/a HTTP/1.1\nHost: h\n"
                              "content-length: 5\nX-A: b\n\n";
    struct buf out = BUF_INIT(4096), tiny = BUF_INIT(8);
    struct http_head h;

    http_head_parse(test_routes(), nul, sizeof(nul) - 1, &h);
    ASSERT_TRUE(h.nul && !h.understood && !h.held);
    ASSERT_OK(http_head_rewrite(put, strlen(put), 3, &out));
    ASSERT_STREQ(out.buf, "PUT /v1/sessions/s/files/a HTTP/1.1\r\nHost: h\r\nX-A: b\r\n"
                          "Content-Length: 0\r\nX-Sandpool-Held: 3\r\n\r\n");
    ASSERT_ERR(http_head_rewrite(put, strlen(put), 3, &tiny), EMSGSIZE);
    buf_done(&out);
    buf_done(&tiny);
}

/* A head that asks a WebSocket route for an upgrade: passed on, and what follows it is held back
 * (body.c's CONN_UPGRADED); only a GET of HTTP/1.1 without a body, on a route that upgrades. */
TEST(upgrade)
{
    static const struct {
        const char *head;
        bool understood, upgrade;
    } cases[] = {
        {"GET /test/ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", true, true},
        {"GET /test/ws?a=1 HTTP/1.1\r\nupgrade: anything\r\n\r\n", true, true},
        {"GET /test/ws HTTP/1.1\r\nConnection: Upgrade\r\n\r\n", true, false},
        {"GET /test/ws HTTP/1.0\r\nUpgrade: websocket\r\n\r\n", true, false},
        {"GET /test/ws HTTP/1.1\r\nUpgrade: websocket\r\nContent-Length: 3\r\n\r\n", true, false},
        {"GET /test/ws HTTP/1.1\r\nUpgrade: websocket\r\nTransfer-Encoding: chunked\r\n\r\n", true,
         false},
        {"GET /test/ws HTTP/1.1\r\nUpgrade: websocket\r\nContent-Length: 0\r\n\r\n", true, true},
        {"HEAD /test/ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n", true, false},
        {"POST /test/ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n", true, false},
        {"GET /v1/sessions HTTP/1.1\r\nUpgrade: websocket\r\n\r\n", true, false},
        {"GET /test/ws HTTP/1.1\r\nUpgrade: websocket\r\n folded\r\n\r\n", false, false},
    };

    for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
        struct http_head h;

        http_head_parse(test_routes(), cases[i].head, strlen(cases[i].head), &h);
        TAP_CHECK(h.understood == cases[i].understood && h.upgrade == cases[i].upgrade && !h.held,
                  "case %zu: understood %d upgrade %d", i, h.understood, h.upgrade);
    }
}

int
main(void)
{
    RUN(route_flags);
    RUN(find_end);
    RUN(parse);
    RUN(nul_and_rewrite);
    RUN(upgrade);
    return tap_done();
}
