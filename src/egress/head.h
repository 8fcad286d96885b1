/* The head of a request to the egress proxy (docs/egress.md): "CONNECT host:port HTTP/1.1" (a
 * tunnel: HTTPS, any TCP protocol) or an absolute-form HTTP request ("GET http://host/path
 * HTTP/1.1", plain HTTP), as HTTP_PROXY-aware clients send them.
 *
 * A request proxies can be fooled with is refused: userinfo in the URI, a Host header naming
 * another host than the URI (or two of them), a folded or unnamed header line, a head over
 * EGRESS_HEAD_MAX, bytes that are no HTTP/1.x, a body whose end is ambiguous (two
 * Content-Length, Content-Length with Transfer-Encoding, a coding but chunked). The upstream's
 * request is rebuilt from what was checked (egress_head_upstream()), and gets that request's body
 * and nothing after it: an absolute-form request is the only one its upstream connection
 * carries (util/chunked.c under EGRESS_CHUNKED_RULES finds where a chunked body ends). evhttp
 * cannot serve CONNECT tunnels, hence this parser of our own: bounded, pure (no I/O), unit-tested
 * (tests/unit/test-egress.c) and fuzzed (fuzz-egress-head; the chunked rules: test-chunked,
 * fuzz-chunked). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egress/rules.h"
#include "util/buf.h"
#include "util/chunked.h"
#include "util/err.h"

#define EGRESS_HEAD_MAX    16384 /* a request's head, at most */
#define EGRESS_HEADERS_MAX 100   /* its header lines, at most */

enum egress_head_kind {
    EGRESS_HEAD_CONNECT,  /* a tunnel: the proxy answers 200, then pipes bytes */
    EGRESS_HEAD_ABSOLUTE, /* http://: the proxy sends the request on, in origin form */
};

/* How an ABSOLUTE request's body ends (RFC 9112 §6.3, for a request). */
enum egress_body {
    EGRESS_BODY_NONE,    /* neither Content-Length nor Transfer-Encoding: no body */
    EGRESS_BODY_LENGTH,  /* Content-Length: body_len bytes */
    EGRESS_BODY_CHUNKED, /* Transfer-Encoding: chunked (HTTP/1.1), to its last chunk */
};

struct egress_span {
    uint32_t off, len; /* into the parsed bytes */
};

struct egress_head {
    enum egress_head_kind kind;
    char host[EGRESS_NAME_MAX + 1]; /* egress_host_normalize()'s form */
    bool host_is_addr;              /* an address literal: addr */
    struct egress_addr addr;
    uint16_t port;
    struct egress_span method, version;
    struct egress_span path; /* ABSOLUTE: the target's path and query ("" for the root) */
    bool path_needs_slash;   /* ABSOLUTE: the target had none before its query ("?x") */
    enum egress_body body;   /* ABSOLUTE: how its body ends */
    uint64_t body_len;       /* EGRESS_BODY_LENGTH: its bytes */
    size_t len;              /* the head's bytes, its empty line included */
    size_t n_headers;
    struct {
        struct egress_span name, value;
    } headers[EGRESS_HEADERS_MAX];
};

/* Parses the head at the start of buf (n bytes read so far). 0 with *ret when it is complete;
 * -EAGAIN when it is not yet (and n < EGRESS_HEAD_MAX); -EMSGSIZE past EGRESS_HEAD_MAX; -EINVAL
 * for a malformed or misleading head, -EPROTONOSUPPORT for a request that is neither CONNECT
 * nor an absolute http:// URI; reterr says why (safe to show the sandbox). */
int egress_head_parse(const char *buf, size_t n, struct egress_head *ret, struct err *reterr);

/* The request an ABSOLUTE head stands for, as the upstream gets it, into out: the request line
 * in origin form, the client's headers but the hop-by-hop ones and Proxy-*, Host (the client's,
 * or the URI's when it sent none), and "Connection: close" (one request per connection: the
 * proxy sends nothing after this request's body, and asks the upstream to close after its
 * answer). buf is what was parsed. */
int egress_head_upstream(const struct egress_head *h, const char *buf, struct buf *out);

/* ---- a chunked request body's end (util/chunked.h) ----
 *
 * Where an EGRESS_BODY_CHUNKED body ends decides what of the sandbox's bytes reach its upstream
 * (conn.c, flow.c: the data is spliced unread, the framing scanned). Strict where readers differ,
 * so that no upstream ends the body before the proxy does and reads the rest of it as a second
 * request (RFC 9112 §7.1 with neither extension nor trailer):
 *
 *   chunk = 1*8HEXDIG CRLF data CRLF     (a size below 2^31: no sign, blank, "0x", ";ext")
 *   last  = 1*8"0" CRLF CRLF
 *
 * No bare LF, and a size of 2^31 or more is refused: an upstream that read sizes into 32 bits
 * would end the chunk elsewhere. */
#define EGRESS_CHUNKED_RULES \
    ((struct chunked_rules){.max_digits = 8, .max_size = 0x7fffffffu, .bare_lf = false})
