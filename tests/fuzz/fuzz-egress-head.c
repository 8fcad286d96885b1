/* Fuzz target: a request head as a sandbox sends it to the egress proxy (src/egress/head.c),
 * and the same bytes as an egress rule list's entry (src/egress/rules.c). A head that parses
 * has a host in normal form (egress_host_normalize() gives it back unchanged), a port, spans
 * inside the input, and an upstream request that parses again as an origin-form head of the
 * same host; its body's end comes from one Content-Length or one "Transfer-Encoding: chunked"
 * line, never both; an entry that parses matches what it names. */
#include <errno.h>
#include <string.h>

#include <jansson.h>

#include "egress/head.h"
#include "egress/rules.h"
#include "fuzz.h"
#include "util/parse.h"

static void
check_span(struct egress_span s, size_t size)
{
    CHECK((size_t)s.off + s.len <= size);
}

/* The lines that say where an absolute-form head's body ends: exactly the one h's body says. */
static void
check_body(const struct egress_head *h, const char *data)
{
    size_t lengths = 0, codings = 0;

    for (size_t i = 0; i < h->n_headers; i++) {
        const char *name = data + h->headers[i].name.off;

        lengths += strn_case_eq(name, h->headers[i].name.len, "Content-Length");
        codings += strn_case_eq(name, h->headers[i].name.len, "Transfer-Encoding");
    }
    CHECK(lengths + codings <= 1);
    CHECK((h->body == EGRESS_BODY_LENGTH) == (lengths == 1));
    CHECK((h->body == EGRESS_BODY_CHUNKED) == (codings == 1));
    CHECK(h->body != EGRESS_BODY_CHUNKED || memcmp(data + h->version.off, "HTTP/1.1", 8) == 0);
}

static void
check_head(const char *data, size_t size)
{
    struct egress_head h;
    struct err e = {0};
    char again[EGRESS_NAME_MAX + 1];
    struct buf up = BUF_INIT(2 * EGRESS_HEAD_MAX);
    int r = egress_head_parse(data, size, &h, &e);

    if (r != 0) {
        CHECK(r == -EAGAIN || e.msg[0] != '\0');
        return;
    }
    CHECK(h.len <= size && h.len <= EGRESS_HEAD_MAX && h.port != 0);
    CHECK(egress_host_normalize(h.host, strlen(h.host), again, NULL) == (h.host_is_addr ? 1 : 0));
    CHECK(strcmp(again, h.host) == 0);
    check_span(h.method, size);
    check_span(h.version, size);
    check_span(h.path, size);
    for (size_t i = 0; i < h.n_headers; i++) {
        check_span(h.headers[i].name, size);
        check_span(h.headers[i].value, size);
    }
    if (h.kind == EGRESS_HEAD_ABSOLUTE) {
        check_body(&h, data);
        CHECK(egress_head_upstream(&h, data, &up) == 0);
        CHECK(memmem(up.buf, up.len, "\r\n\r\n", 4) == up.buf + up.len - 4);
        CHECK(up.buf[h.method.len + 1] == '/'); /* origin form */
    }
    buf_done(&up);
}

static void
check_rule(const char *data, size_t size)
{
    json_t *entry = json_stringn(data, size), *obj;
    struct egress_rules r = {0};
    struct err e = {0};

    if (entry == NULL) {
        return; /* not UTF-8 */
    }
    obj = json_pack("{s:[o]}", "allow", entry);
    if (egress_rules_from_json(obj, "egress", &r, &e) == 0) {
        CHECK(r.n_allow == 1 && r.allow[0].name[0] != '\0');
        /* an exact entry allows what it names, on its port or the default ones */
        if (!r.allow[0].suffix) {
            CHECK(egress_rules_check(&r, r.allow[0].name,
                                     r.allow[0].port ? r.allow[0].port : 443) == EGRESS_ALLOWED);
        }
        egress_rules_done(&r);
    } else {
        CHECK(e.msg[0] != '\0');
    }
    json_decref(obj);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_head((const char *)data, size);
    check_rule((const char *)data, size);
    return 0;
}
