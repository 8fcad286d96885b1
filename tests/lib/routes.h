/* The daemon's route table, as server_new() hands it to the HTTP core, and one WebSocket route of
 * the tests' own (GET /test/ws: no protocol of the daemon upgrades yet): for the tests of what the
 * body filter holds (head.c asks the table which routes stream their bodies, and which upgrade).
 * Built once, kept for the life of the test process. */
#pragma once

#include <string.h>

#include "http/http-internal.h"
#include "server.h"

static inline const struct http_routes *
test_routes(void)
{
    static struct http_routes *rt;

    if (rt == NULL) {
        static const struct http_route ws[] = {
            {EVHTTP_REQ_GET, HTTP_ROUTE_WEBSOCKET, "/test/ws", NULL}};
        static const struct http_protocol test = {"test-ws", ws, 1, NULL, NULL, NULL};
        const struct http_protocol *all[HTTP_PROTOCOLS_MAX];
        size_t n;
        const struct http_protocol *const *p = server_protocols(&n);

        memcpy(all, p, n * sizeof(*p));
        all[n] = &test;
        rt = http_routes_new(all, n + 1);
    }
    return rt;
}
