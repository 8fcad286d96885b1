/* The daemon's route table, as server_new() hands it to the HTTP core: for the tests of what the
 * body filter holds (head.c asks the table which routes stream their bodies). Built once, kept
 * for the life of the test process. */
#pragma once

#include "http/http-internal.h"
#include "server.h"

static inline const struct http_routes *
test_routes(void)
{
    static struct http_routes *rt;

    if (rt == NULL) {
        size_t n;
        const struct http_protocol *const *p = server_protocols(&n);

        rt = http_routes_new(p, n);
    }
    return rt;
}
