/* Authentication; see auth.h. SHA-256 and the constant-time compare come from OpenSSL's
 * libcrypto (already on every machine that has libcurl with OpenSSL). */
#include "auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <string.h>
#include <strings.h>

#include <event2/http.h>

#include "util/macro.h"

#define MAX_TOKEN 512

static void
sha256(const char *data, size_t len, uint8_t out[CFG_SHA256_LEN])
{
    unsigned int n = 0;

    if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1 || n != CFG_SHA256_LEN) {
        oom(); /* only fails when OpenSSL cannot allocate */
    }
}

enum auth_role
api_auth_token(const struct cfg *cfg, const char *token, size_t len,
               const struct cfg_tenant **ret_tenant)
{
    uint8_t digest[CFG_SHA256_LEN], admin[CFG_SHA256_LEN], metrics[CFG_SHA256_LEN];
    const struct cfg_tenant *found = NULL;
    bool is_admin = false, is_metrics = false;

    if (len == 0 || len > MAX_TOKEN) {
        return AUTH_NONE;
    }
    sha256(token, len, digest);
    for (size_t i = 0; i < cfg->n_tenants; i++) {
        /* No early exit: every hash is compared whatever matched before. */
        if (CRYPTO_memcmp(digest, cfg->tenants[i].token_sha256, CFG_SHA256_LEN) == 0) {
            found = &cfg->tenants[i];
        }
    }
    if (cfg->admin_token_sha256[0] != '\0' &&
        cfg_parse_sha256_hex(cfg->admin_token_sha256, admin) == 0) {
        is_admin = CRYPTO_memcmp(digest, admin, CFG_SHA256_LEN) == 0;
    }
    if (cfg->metrics_token_sha256[0] != '\0' &&
        cfg_parse_sha256_hex(cfg->metrics_token_sha256, metrics) == 0) {
        is_metrics = CRYPTO_memcmp(digest, metrics, CFG_SHA256_LEN) == 0;
    }
    if (found != NULL) {
        *ret_tenant = found;
        return AUTH_TENANT;
    }
    return is_admin ? AUTH_ADMIN : is_metrics ? AUTH_METRICS : AUTH_NONE;
}

enum auth_role
api_auth(const struct cfg *cfg, struct evhttp_request *req, const struct cfg_tenant **ret_tenant)
{
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");

    if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0) {
        return AUTH_NONE;
    }
    h += 7;
    while (*h == ' ') {
        h++;
    }
    return api_auth_token(cfg, h, strlen(h), ret_tenant);
}
