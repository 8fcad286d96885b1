/* S3's small XML answers, for the s3 backend (store-s3.c, store-s3-http.c): a bounded extractor
 * of one element's text, and the mapping of an error answer to an errno. Pure (no loop, no
 * allocation), so it is unit-tested (tests/unit/test-snapstore.c) and fuzzed
 * (tests/fuzz/fuzz-s3-xml.c) directly.
 *
 * Not an XML parser, on purpose: the answers the store reads are flat and tiny
 * (InitiateMultipartUploadResult's UploadId, CompleteMultipartUploadResult, Error's Code and
 * Message), and the first element of a name is all it needs. Anything unexpected inside that
 * element (markup, a NUL, an unknown entity) makes it unreadable (-EPROTO), never misread. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "snapshot/store-internal.h"
#include "util/macro.h"

/* Past the '>' of the first start tag <tag> (or <tag attributes>, or <tag/>: *empty), or NULL. */
static const char *
xml_open(const char *xml, size_t len, const char *tag, bool *empty)
{
    const char *end = xml + len, *s = xml;
    size_t tl = strlen(tag);

    while (tl > 0 && s < end && (s = memchr(s, '<', (size_t)(end - s))) != NULL) {
        const char *n = ++s;

        if ((size_t)(end - n) <= tl || memcmp(n, tag, tl) != 0) {
            continue;
        }
        n += tl;
        if (*n == '>') {
            *empty = false;
            return n + 1;
        }
        if (*n == '/' || *n == ' ' || *n == '\t' || *n == '\r' || *n == '\n') {
            const char *gt = memchr(n, '>', (size_t)(end - n));

            if (gt == NULL) {
                return NULL;
            }
            *empty = gt[-1] == '/';
            return gt + 1;
        }
    }
    return NULL;
}

bool
snapstore_s3_xml_has(const char *xml, size_t len, const char *tag)
{
    bool empty;

    return xml_open(xml, len, tag, &empty) != NULL;
}

/* Decodes the entity at s ('&' ... ';', at most 8 bytes) into *ret; returns its length or 0. */
static size_t
xml_entity(const char *s, const char *end, char *ret)
{
    static const struct {
        const char *name;
        char c;
    } named[] = {{"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
    const char *semi = memchr(s, ';', (size_t)MIN(end - s, 10));
    size_t n;
    unsigned v = 0;

    if (semi == NULL || semi - s < 2) {
        return 0;
    }
    n = (size_t)(semi - s - 1);
    for (size_t i = 0; i < ELEMENTSOF(named); i++) {
        if (n == strlen(named[i].name) && memcmp(s + 1, named[i].name, n) == 0) {
            *ret = named[i].c;
            return n + 2;
        }
    }
    if (s[1] != '#' || n < 2) {
        return 0;
    }
    bool hex = s[2] == 'x';
    for (const char *d = s + 2 + hex; d < semi; d++) {
        int digit = *d >= '0' && *d <= '9'          ? *d - '0'
                    : hex && *d >= 'a' && *d <= 'f' ? *d - 'a' + 10
                    : hex && *d >= 'A' && *d <= 'F' ? *d - 'A' + 10
                                                    : -1;

        if (digit < 0 || v > 127) {
            return 0;
        }
        v = v * (hex ? 16 : 10) + (unsigned)digit;
    }
    if (v == 0 || v > 127 || semi == s + 2 + hex) {
        return 0;
    }
    *ret = (char)v;
    return n + 2;
}

int
snapstore_s3_xml_text(const char *xml, size_t len, const char *tag, char *out, size_t size)
{
    const char *end = xml + len, *s;
    size_t tl = strlen(tag), n = 0;
    bool empty;

    if (size == 0) {
        return -EMSGSIZE;
    }
    out[0] = '\0';
    s = xml_open(xml, len, tag, &empty);
    if (s == NULL) {
        return -ENOENT;
    }
    while (!empty && s < end) {
        char c = *s;

        if (c == '<') {
            const char *q = s + 2 + tl;

            if ((size_t)(end - s) <= 2 + tl || s[1] != '/' || memcmp(s + 2, tag, tl) != 0) {
                break;
            }
            while (q < end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n')) {
                q++;
            }
            if (q >= end || *q != '>') {
                break;
            }
            out[n] = '\0';
            return (int)MIN(n, (size_t)S3_XML_MAX);
        }
        if (c == '\0') {
            break;
        }
        if (c == '&') {
            size_t k = xml_entity(s, end, &c);

            if (k == 0) {
                break;
            }
            s += k;
        } else {
            s++;
        }
        if (n + 1 >= size || n >= S3_XML_MAX) {
            out[0] = '\0';
            return -EMSGSIZE;
        }
        out[n++] = c;
    }
    out[0] = '\0';
    return empty ? 0 : -EPROTO;
}

/* Keeps the printable ASCII of s (a message from the store goes to API clients and logs). */
static void
printable(char *s)
{
    for (; *s != '\0'; s++) {
        if (*s < 0x20 || *s > 0x7e) {
            *s = '?';
        }
    }
}

static bool
code_is(const char *code, const char *const *list)
{
    for (; *list != NULL; list++) {
        if (strcmp(code, *list) == 0) {
            return true;
        }
    }
    return false;
}

int
snapstore_s3_error(long status, const char *body, size_t len, struct err *reterr)
{
    static const char *const full[] = {"QuotaExceeded",       "XMinioStorageFull", "StorageFull",
                                       "InsufficientStorage", "EntityTooLarge",    NULL};
    char code[64] = "", msg[120] = "";
    int r;

    if (body != NULL && snapstore_s3_xml_has(body, len, "Error")) {
        if (snapstore_s3_xml_text(body, len, "Code", code, sizeof(code)) < 0) {
            code[0] = '\0';
        }
        if (snapstore_s3_xml_text(body, len, "Message", msg, sizeof(msg)) < 0) {
            msg[0] = '\0';
        }
        printable(code);
        printable(msg);
    }
    if (strcmp(code, "NoSuchKey") == 0 || (status == 404 && len == 0)) {
        r = -ENOENT;
    } else if (code_is(code, full) || status == 507) {
        r = -ENOSPC;
    } else if (status == 401 || status == 403) {
        r = -EACCES;
    } else if (strcmp(code, "RequestTimeout") == 0 || status == 408) {
        r = -ETIMEDOUT;
    } else if (status >= 500 || (status >= 200 && status < 300) ||
               strcmp(code, "NoSuchBucket") == 0) {
        r = -EIO; /* the store failed, or is not set up: not the snapshot's fault */
    } else {
        r = -EPROTO;
    }
    if (code[0] == '\0') {
        return err_set(reterr, r, "snapshot store: s3 answered %ld", status);
    }
    return err_set(reterr, r, "snapshot store: s3 answered %ld %s%s%s", status, code,
                   msg[0] ? ": " : "", msg);
}
