/* Bearer-token authentication. Tokens are never stored: the config holds SHA-256 hashes, the
 * presented token is hashed and compared with every tenant's hash in constant time (no early
 * exit), so neither timing nor the order of tenants says anything about a near miss. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"

struct evhttp_request;

enum auth_role {
    AUTH_NONE,    /* missing or wrong token */
    AUTH_TENANT,  /* a tenant's token: *ret_tenant is set */
    AUTH_ADMIN,   /* the admin token */
    AUTH_METRICS, /* the metrics token (GET /metrics only) */
};

/* Checks the Authorization header of req against cfg (borrowed). ret_tenant (borrowed from cfg)
 * is written for AUTH_TENANT. The whole header value counts: a request head holding a NUL byte,
 * after which evhttp would cut the value, never gets here (body.c refuses it). */
enum auth_role http_auth(const struct cfg *cfg, struct evhttp_request *req,
                         const struct cfg_tenant **ret_tenant);
/* Same, for a token given directly (tests, CLI). */
enum auth_role http_auth_token(const struct cfg *cfg, const char *token, size_t len,
                               const struct cfg_tenant **ret_tenant);
/* The tenant an E2B API key (X-API-KEY) belongs to, or NULL; hashed and compared like a token. */
const struct cfg_tenant *http_auth_e2b_key(const struct cfg *cfg, const char *key, size_t len);
