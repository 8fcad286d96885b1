/* The record of an MCP session in Redis: what survives a restart of the daemon (docs/mcp.md,
 * "Crash-only").
 *
 *   P mcp:ID   string: the record as compact JSON text (store_key_mcp()), written with its time
 *              to live by src/mcp/sessions.c; read there after a restart and by
 *              src/cluster/route.c to find the node that serves the session.
 *
 * The store knows the record's shape, not the protocol: the MCP revision the session speaks is
 * kept as its name ("2025-06-18"), and src/mcp/ alone says which revisions it serves
 * (mcp_record_load()). Pure; fuzzed by tests/fuzz/fuzz-mcp-msg.c, unit-tested by
 * tests/unit/test-store-mcp-record.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define STORE_MCP_VERSION_MAX 31 /* a revision's name, at most */

struct store_mcp_rec {
    char tenant[65];
    bool bound;              /* /v1/sessions/{id}/mcp; false: /mcp, a sandbox of its own */
    char sandbox[65];        /* the sandpool session; "" while an own one is not created yet */
    char profile[64];        /* own: the profile asked for ("": the tenant's first) */
    unsigned idle_timeout_s; /* own: asked for (0: the profile's) */
    /* The revision negotiated at initialize, by name (mcp_version_to_string()); never "". */
    char version[STORE_MCP_VERSION_MAX + 1];
    uint64_t epoch; /* the kernel_epoch the client saw last */
    /* The node that serves it (where its own sandbox is made): other nodes forward its requests
     * there (docs/cluster.md#routing). "" in a record written before the field existed. */
    char node[65];
};

/* The record as compact JSON text with sorted keys (malloc'd). */
char *store_mcp_rec_dump(const struct store_mcp_rec *r);
/* Reads what store_mcp_rec_dump() wrote (len bytes): 0, or -EINVAL when it is not such a record
 * (a damaged or foreign value is never trusted: the session is then unknown). *ret is untouched
 * on failure. The version is checked only as a name: whether it is served is MCP's to say. */
int store_mcp_rec_load(const char *data, size_t len, struct store_mcp_rec *ret, struct err *reterr);
