/* The MCP server (docs/mcp.md): POST and DELETE of /mcp and of /v1/sessions/{id}/mcp, served by
 * the HTTP core (src/http). Loop context only. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "http/http.h"
#include "mcp/proto.h"

/* Off (no state, every route answers 404) when mcp.max_sessions is 0 or there is no Redis. */
extern const struct http_protocol mcp_protocol;

struct mcp_stats {
    unsigned sessions, calls_waiting, calls_running;
    uint64_t sessions_created, sessions_restored, sessions_deleted, sessions_expired;
    uint64_t tool_calls[MCP_TOOL__COUNT];
    uint64_t results_ok, results_error, cancelled, queue_full;
    uint64_t requests_refused; /* answered with a 4xx or 5xx before any method ran */
};
/* False when MCP is off. */
bool mcp_get_stats(const struct http *h, struct mcp_stats *ret);
