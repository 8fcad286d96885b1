/* The head of a request to the egress proxy (docs/egress.md): "CONNECT host:port HTTP/1.1" (a
 * tunnel: HTTPS, any TCP protocol) or an absolute-form HTTP request ("GET http://host/path
 * HTTP/1.1", plain HTTP), as HTTP_PROXY-aware clients send them.
 *
 * A request proxies can be fooled with is refused: userinfo in the URI, a Host header naming
 * another host than the URI (or two of them), a folded or unnamed header line, a head over
 * EGRESS_HEAD_MAX, bytes that are no HTTP/1.x. The upstream's request is rebuilt from what was
 * checked (egress_head_upstream()). evhttp cannot serve CONNECT tunnels, hence this parser of our
 * own: bounded, pure (no I/O), unit-tested (tests/unit/test-egress.c) and fuzzed
 * (fuzz-egress-head). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egress/rules.h"
#include "util/buf.h"
#include "util/err.h"

#define EGRESS_HEAD_MAX    16384 /* a request's head, at most */
#define EGRESS_HEADERS_MAX 100   /* its header lines, at most */

enum egress_head_kind {
    EGRESS_HEAD_CONNECT,  /* a tunnel: the proxy answers 200, then pipes bytes */
    EGRESS_HEAD_ABSOLUTE, /* http://: the proxy sends the request on, in origin form */
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
 * or the URI's when it sent none), and "Connection: close" (one request per connection: a second
 * one on it would reach this upstream whatever host it named). buf is what was parsed. */
int egress_head_upstream(const struct egress_head *h, const char *buf, struct buf *out);
