/* What calls waiting for a busy sandbox hold (waiting.c): MCP tool calls queued behind another
 * call of their sandbox and E2B executions waiting for the running one keep their code (up to
 * http.max_body_bytes each) until they run. Their bytes are bounded per tenant
 * (queue.max_bytes_per_tenant) and in all (queue.max_bytes), and the calls waiting for one
 * sandbox by a count the caller gives (MCP: mcp.queue_max, whatever the number of MCP sessions
 * bound to the sandbox). Loop context only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* A call's claim, held from http_waiting_enter() to http_waiting_leave(). */
struct http_waiting {
    size_t bytes;
    bool held;
    char tenant[65], sandbox[72];
};

struct http_waiting_stats {
    uint64_t bytes, calls;    /* held now */
    uint64_t refused_total;   /* over a byte budget */
    uint64_t refused_sandbox; /* over a sandbox's count */
};

struct http_waiting_budget;

struct http_waiting_budget *http_waiting_new(uint64_t max_bytes, uint64_t max_bytes_per_tenant);
void http_waiting_free(struct http_waiting_budget *b);
/* Claims bytes for tenant and one call for sandbox (max_per_sandbox 0: no count). 0, or -EDQUOT
 * with a message naming the bound; *w untouched then. */
int http_waiting_enter(struct http_waiting_budget *b, struct http_waiting *w, const char *tenant,
                       const char *sandbox, size_t bytes, unsigned max_per_sandbox,
                       struct err *reterr);
/* Gives the claim back (nothing when none is held). */
void http_waiting_leave(struct http_waiting_budget *b, struct http_waiting *w);
/* The calls waiting for sandbox now. */
unsigned http_waiting_of_sandbox(const struct http_waiting_budget *b, const char *sandbox);
void http_waiting_get_stats(const struct http_waiting_budget *b, struct http_waiting_stats *ret);
