/* The WebSocket opening handshake's judge (RFC 6455 §4.2): pure, no loop and no evhttp. Fuzzed by
 * tests/fuzz/fuzz-ws-handshake.c, unit-tested by tests/unit/test-ws.c. ws.h says what it takes and
 * answers. */
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "http/ws.h"
#include "util/macro.h"
#include "util/parse.h"

/* RFC 6455 §1.3: what the key is hashed with. */
#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

struct span {
    const char *p;
    size_t n;
};

static bool
ows(char c)
{
    return c == ' ' || c == '\t';
}

/* The next element of a comma-separated list at *pos, blanks trimmed; false at its end. Empty
 * elements are skipped (RFC 9110 §5.6.1: a recipient accepts them). */
static bool
next_element(const char **pos, struct span *ret)
{
    for (;;) {
        const char *s = *pos, *e;

        if (*s == '\0') {
            return false;
        }
        e = strchr(s, ',');
        if (e == NULL) {
            e = s + strlen(s);
        }
        *pos = *e == ',' ? e + 1 : e;
        while (s < e && ows(*s)) {
            s++;
        }
        while (e > s && ows(e[-1])) {
            e--;
        }
        if (e > s) {
            *ret = (struct span){s, (size_t)(e - s)};
            return true;
        }
    }
}

/* list (NULL: absent) holds the token tok, case-insensitively. */
static bool
list_has(const char *list, const char *tok)
{
    struct span el;

    while (list != NULL && next_element(&list, &el)) {
        if (strn_case_eq(el.p, el.n, tok)) {
            return true;
        }
    }
    return false;
}

/* RFC 9110's tchar: what a subprotocol name is made of. */
static bool
tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* A Sec-WebSocket-Key: the base64 of 16 bytes, so 22 characters of the alphabet and "==". */
static bool
valid_key(const char *k)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    if (strlen(k) != 24 || strcmp(k + 22, "==") != 0) {
        return false;
    }
    for (size_t i = 0; i < 22; i++) {
        if (k[i] == '\0' || strchr(alphabet, k[i]) == NULL) {
            return false;
        }
    }
    return true;
}

static int
choose_protocol(const char *offered, const char *const *supported, char *out, size_t out_n,
                struct err *reterr)
{
    struct span el;
    bool chosen = false;

    out[0] = '\0';
    while (offered != NULL && next_element(&offered, &el)) {
        for (size_t i = 0; i < el.n; i++) {
            if (!tchar((unsigned char)el.p[i])) {
                return err_set(reterr, -EINVAL, "Sec-WebSocket-Protocol: not a list of tokens");
            }
        }
        for (size_t i = 0; !chosen && supported != NULL && supported[i] != NULL; i++) {
            if (el.n < out_n && strlen(supported[i]) == el.n &&
                memcmp(supported[i], el.p, el.n) == 0) { /* subprotocols are case-sensitive */
                memcpy(out, el.p, el.n);
                out[el.n] = '\0';
                chosen = true;
            }
        }
    }
    return 0;
}

/* origin is the request's own host's ("scheme://" + Host), or one of origins. */
static bool
origin_allowed(const char *origin, const char *host, const char *const *origins)
{
    const char *authority = strstr(origin, "://");

    for (size_t i = 0; origins != NULL && origins[i] != NULL; i++) {
        if (strcasecmp(origin, origins[i]) == 0) {
            return true;
        }
    }
    if (authority == NULL || host == NULL || host[0] == '\0') {
        return false; /* "null" (an opaque origin: a sandboxed frame, a file) is no host's */
    }
    return (strn_case_eq(origin, (size_t)(authority - origin), "http") ||
            strn_case_eq(origin, (size_t)(authority - origin), "https")) &&
           strcasecmp(authority + 3, host) == 0;
}

static void
accept_key(const char *key, char out[29])
{
    char in[24 + sizeof(WS_GUID)];
    unsigned char digest[SHA_DIGEST_LENGTH];

    (void)snprintf(in, sizeof(in), "%s%s", key, WS_GUID);
    (void)SHA1((const unsigned char *)in, strlen(in), digest);
    (void)EVP_EncodeBlock((unsigned char *)out, digest, SHA_DIGEST_LENGTH); /* 28 + NUL */
}

int
http_ws_judge(const struct http_ws_head *h, const char *const *supported,
              const char *const *origins, struct http_ws_answer *ret, struct err *reterr)
{
    struct http_ws_answer a = {{0}};
    int r;

    if (!list_has(h->upgrade, "websocket") || !list_has(h->connection, "upgrade")) {
        return err_set(reterr, -EINVAL,
                       "not a WebSocket handshake: this route takes \"Upgrade: websocket\" "
                       "with \"Connection: Upgrade\"");
    }
    if (h->version == NULL) {
        return err_set(reterr, -EINVAL, "Sec-WebSocket-Version is missing");
    }
    if (strcmp(h->version, "13") != 0) {
        return err_set(reterr, -EPROTONOSUPPORT, "Sec-WebSocket-Version: only 13 is spoken here");
    }
    if (h->key == NULL || h->key_lines != 1 || !valid_key(h->key)) {
        return err_set(reterr, -EINVAL,
                       "Sec-WebSocket-Key: one key, the base64 of 16 bytes, is required");
    }
    if (h->origin != NULL && !origin_allowed(h->origin, h->host, origins)) {
        return err_set(reterr, -EPERM, "Origin: a page of another site may not open this stream");
    }
    r = choose_protocol(h->protocols, supported, a.protocol, sizeof(a.protocol), reterr);
    if (r < 0) {
        return r;
    }
    accept_key(h->key, a.accept);
    *ret = a;
    return 0;
}
