/* Fuzz target: the WebSocket handshake's judge (src/http/ws-handshake.c). The input is the head's
 * values, one per line (Upgrade, Connection, Sec-WebSocket-Version, Sec-WebSocket-Key,
 * Sec-WebSocket-Protocol, Origin, Host; a missing line is an absent header, "\x01" alone one
 * too); the first byte gives the key's line count (byte % 3). Every verdict must be one of the
 * documented four; an accepted handshake has version 13, one well-formed key, a 28-character
 * base64 accept, a subprotocol the route speaks and the client offered (or none), and an Origin
 * that is absent, listed, or the request's own host. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz.h"
#include "http/ws.h"

#define FIELDS 7

static bool
offered(const char *list, const char *p)
{
    size_t n = strlen(p);

    for (const char *s = list; s != NULL && (s = strstr(s, p)) != NULL; s++) {
        bool starts = s == list || s[-1] == ',' || s[-1] == ' ' || s[-1] == '\t';
        char after = s[n];

        if (starts && (after == '\0' || after == ',' || after == ' ' || after == '\t')) {
            return true;
        }
    }
    return false;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const supported[] = {"v1.kernel.websocket.jupyter.org", "json", NULL};
    static const char *const origins[] = {"https://console.example", NULL};
    char *copy, *field[FIELDS] = {NULL}, *p;
    struct http_ws_answer a;
    struct http_ws_head h;
    struct err e = {0};
    size_t nf = 0;
    int r;

    if (size == 0) {
        return 0;
    }
    copy = malloc(size);
    CHECK(copy != NULL);
    memcpy(copy, data + 1, size - 1);
    copy[size - 1] = '\0';
    for (p = copy; nf < FIELDS && p != NULL; nf++) {
        char *nl = strchr(p, '\n');

        if (nl != NULL) {
            *nl = '\0';
        }
        field[nf] = strcmp(p, "\x01") == 0 ? NULL : p;
        p = nl != NULL ? nl + 1 : NULL;
    }
    h = (struct http_ws_head){field[0], field[1], field[2], field[3],
                              field[4], field[5], field[6], data[0] % 3u};
    r = http_ws_judge(&h, supported, origins, &a, &e);
    CHECK(r == 0 || r == -EINVAL || r == -EPROTONOSUPPORT || r == -EPERM);
    CHECK(r == 0 || e.msg[0] != '\0');
    if (r == 0) {
        CHECK(h.version != NULL && strcmp(h.version, "13") == 0);
        CHECK(h.key != NULL && h.key_lines == 1 && strlen(h.key) == 24);
        CHECK(strlen(a.accept) == 28 && a.accept[27] == '=');
        CHECK(a.protocol[0] == '\0' ||
              ((strcmp(a.protocol, supported[0]) == 0 || strcmp(a.protocol, supported[1]) == 0) &&
               offered(h.protocols, a.protocol)));
        CHECK(h.origin == NULL || strcasecmp(h.origin, origins[0]) == 0 ||
              (h.host != NULL && strstr(h.origin, h.host) != NULL));
    }
    free(copy);
    return 0;
}
