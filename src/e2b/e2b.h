/* The E2B front end (docs/e2b.md): the control plane under /e2b/api, sandbox traffic under
 * /e2b/sbx, served by the HTTP core (src/http). Loop context only. */
#pragma once

#include <stdint.h>

#include "http/http.h"

extern const struct http_protocol e2b_protocol;

enum e2b_plane {
    E2B_PLANE_CONTROL, /* /e2b/api */
    E2B_PLANE_ENVD,    /* /e2b/sbx, port 49983 */
    E2B_PLANE_CODE,    /* /e2b/sbx, port 49999 */
    E2B_PLANE__COUNT,
};
struct e2b_stats {
    uint64_t requests[E2B_PLANE__COUNT];
    uint64_t created, killed, leases_set, paused;
    uint64_t refused_key;   /* control-plane requests without a valid key (401) */
    uint64_t refused_token; /* sandbox requests without their port's credential (401) */
    uint64_t runs_process, runs_code;
    unsigned running, waiting; /* E2B executions now: running, or waiting for a busy sandbox */
};
void e2b_get_stats(const struct http *h, struct e2b_stats *ret);
