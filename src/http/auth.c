/* Who may make a request: the bearer-token check (auth.h) and, on top of it, the authorization
 * helpers every handler calls first (http-internal.h: http_require_tenant(), http_require_admin(),
 * http_session_for(), http_admin_session_for()). Each of those answers the request itself when
 * it refuses it (401 with the challenge and "Connection: close", 403 for the other role's
 * token, 404 for a session that is not the caller's), so a handler that gets NULL or false just
 * returns. Any valid token marks its connection authenticated (conns.c): it keeps its slot.
 *
 * SHA-256 and the constant-time compare come from OpenSSL's libcrypto (already on every machine
 * that has libcurl with OpenSSL). */
#include "http/auth.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "http/http-internal.h"
#include "session/session.h"
#include "util/macro.h"
#include "util/parse.h"

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
http_auth_token(const struct cfg *cfg, const char *token, size_t len,
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

const struct cfg_tenant *
http_auth_e2b_key(const struct cfg *cfg, const char *key, size_t len)
{
    uint8_t digest[CFG_SHA256_LEN];

    if (len == 0 || len > MAX_TOKEN) {
        return NULL;
    }
    sha256(key, len, digest);
    return cfg_e2b_key_tenant(cfg, digest);
}

enum auth_role
http_auth(const struct cfg *cfg, struct evhttp_request *req, const struct cfg_tenant **ret_tenant)
{
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");

    if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0) {
        return AUTH_NONE;
    }
    h += 7;
    while (*h == ' ') {
        h++;
    }
    return http_auth_token(cfg, h, strlen(h), ret_tenant);
}

/* ---- authorization of requests ---------------------------------------------------------- */

enum auth_role
http_authenticate(struct http *a, struct evhttp_request *req, const struct cfg_tenant **ret_tenant)
{
    enum auth_role r = http_auth(a->cfg, req, ret_tenant);

    if (r != AUTH_NONE) {
        http_conn_authenticated(a->conns, req);
    }
    return r;
}

void
http_authenticate_offered(struct http *a, struct evhttp_request *req)
{
    const struct cfg_tenant *t = NULL;

    if (evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization") != NULL) {
        (void)http_authenticate(a, req, &t);
    }
}

/* 401 with the challenge. The connection closes after it: a client without a valid token
 * keeps no slot for its next guess (conns.c). */
static void
reply_unauthenticated(struct evhttp_request *req)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);

    (void)evhttp_add_header(h, "WWW-Authenticate", "Bearer realm=\"sandpool\"");
    http_reply_close(req);
    http_reply_error(req, -EACCES, "a valid 'Authorization: Bearer <token>' header is required");
}

/* Authenticates req as role want (AUTH_TENANT or AUTH_ADMIN): true, with *ret_tenant for a
 * tenant; else replies 401, or 403 for the other role's token, and returns false. */
static bool
require_role(struct http *a, struct evhttp_request *req, enum auth_role want,
             const struct cfg_tenant **ret_tenant)
{
    enum auth_role got = http_authenticate(a, req, ret_tenant);

    if (got == want) {
        return true;
    }
    if (got == AUTH_NONE || got == AUTH_METRICS) {
        reply_unauthenticated(req);
    } else {
        http_reply_error(req, -EPERM, "%s",
                         want == AUTH_ADMIN ? "this endpoint needs the admin token"
                                            : "the admin token cannot act as a tenant");
    }
    return false;
}

const struct cfg_tenant *
http_require_tenant(struct http *a, struct evhttp_request *req)
{
    const struct cfg_tenant *t = NULL;

    return require_role(a, req, AUTH_TENANT, &t) ? t : NULL;
}

bool
http_require_admin(struct http *a, struct evhttp_request *req)
{
    const struct cfg_tenant *t = NULL;

    return require_role(a, req, AUTH_ADMIN, &t);
}

/* The session id of tenant (NULL: any tenant's), or NULL after replying 404: an id that is no
 * name at all is exactly as absent as an unknown one. A session this node does not hold may be
 * another node's: the request is then routed there (forward.c), and answered later. */
static struct session *
find_session(struct http *a, struct evhttp_request *req, const char *tenant, const char *id)
{
    bool name = str_is_name(id, 64);
    struct session *s = name ? session_find(a->backend->sessions, tenant, id) : NULL;

    if (s == NULL && name && a->forwarder != NULL) {
        http_forward_session(a, req, id, tenant, NULL);
    } else if (s == NULL) {
        http_reply_error(req, -ENOENT, "no such session");
    }
    return s;
}

struct session *
http_session_for(struct http *a, struct evhttp_request *req, const char *id, struct http_actor *ret)
{
    const struct cfg_tenant *t = NULL;

    switch (http_authenticate(a, req, &t)) {
    case AUTH_TENANT:
        ret->admin = false;
        (void)snprintf(ret->name, sizeof(ret->name), "tenant:%s", t->id);
        break;
    case AUTH_ADMIN:
        ret->admin = true;
        (void)snprintf(ret->name, sizeof(ret->name), "admin");
        break;
    case AUTH_NONE:
    case AUTH_METRICS:
        reply_unauthenticated(req);
        return NULL;
    }
    /* The admin reaches every tenant's session; a tenant only its own. */
    return find_session(a, req, ret->admin ? NULL : t->id, id);
}

struct session *
http_admin_session_for(struct http *a, struct evhttp_request *req, const char *id,
                       struct http_actor *ret)
{
    if (!http_require_admin(a, req)) {
        return NULL;
    }
    ret->admin = true;
    (void)snprintf(ret->name, sizeof(ret->name), "admin");
    return find_session(a, req, NULL, id);
}
