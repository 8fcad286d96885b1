/* Unit tests for egress by name (src/egress/): the rules and their matching, host names and
 * address literals, the refused address ranges, egress.allow_cidrs and egress.hosts, and the
 * proxy's request heads (CONNECT and absolute-form), including the ones a proxy can be fooled
 * with. Where a chunked body ends (EGRESS_CHUNKED_RULES) is tests/unit/test-chunked.c's. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "egress/head.h"
#include "egress/rules.h"
#include "tap.h"

/* The rules of a JSON text; aborts the test on a parse error. */
static struct egress_rules
rules_of(const char *text)
{
    struct egress_rules r = {0};
    struct err e = {0};
    json_t *j = json_loads(text, 0, NULL);

    TAP_CHECK(j != NULL && egress_rules_from_json(j, "egress", &r, &e) == 0, "rules %s: %s", text,
              e.msg);
    json_decref(j);
    return r;
}

static enum egress_verdict
check(const struct egress_rules *r, const char *host, uint16_t port)
{
    char norm[EGRESS_NAME_MAX + 1];

    if (egress_host_normalize(host, strlen(host), norm, NULL) < 0) {
        return EGRESS__COUNT;
    }
    return egress_rules_check(r, norm, port);
}

TEST(rules)
{
    struct egress_rules r = rules_of(
        "{\"allow\": [\"pypi.org\", \"*.pythonhosted.org\", \"api.example.com:8443\", \"10.1.2.3\","
        " \"[fd00::1]:8080\"], \"deny\": [\"evil.pythonhosted.org\", \"*.internal.example.com\"]}");

    ASSERT_EQ_U(check(&r, "pypi.org", 443), EGRESS_ALLOWED);
    ASSERT_EQ_U(check(&r, "PyPI.org.", 80), EGRESS_ALLOWED);         /* case and the final dot */
    ASSERT_EQ_U(check(&r, "pypi.org", 8080), EGRESS_NOT_ALLOWED);    /* default ports only */
    ASSERT_EQ_U(check(&r, "www.pypi.org", 443), EGRESS_NOT_ALLOWED); /* exact: no subdomains */
    ASSERT_EQ_U(check(&r, "files.pythonhosted.org", 443), EGRESS_ALLOWED);
    ASSERT_EQ_U(check(&r, "a.b.pythonhosted.org", 443), EGRESS_ALLOWED);
    ASSERT_EQ_U(check(&r, "pythonhosted.org", 443), EGRESS_NOT_ALLOWED); /* *. is under it */
    ASSERT_EQ_U(check(&r, "xpythonhosted.org", 443), EGRESS_NOT_ALLOWED);
    ASSERT_EQ_U(check(&r, "evil.pythonhosted.org", 443), EGRESS_DENIED);  /* deny wins */
    ASSERT_EQ_U(check(&r, "evil.pythonhosted.org", 9999), EGRESS_DENIED); /* on every port */
    ASSERT_EQ_U(check(&r, "api.example.com", 8443), EGRESS_ALLOWED);
    ASSERT_EQ_U(check(&r, "api.example.com", 443), EGRESS_NOT_ALLOWED); /* its port only */
    ASSERT_EQ_U(check(&r, "db.internal.example.com", 443), EGRESS_DENIED);
    ASSERT_EQ_U(check(&r, "10.1.2.3", 80), EGRESS_ALLOWED);
    ASSERT_EQ_U(check(&r, "10.1.2.4", 80), EGRESS_NOT_ALLOWED);
    ASSERT_EQ_U(check(&r, "[fd00:0::1]", 8080), EGRESS_ALLOWED); /* canonical text compared */
    ASSERT_EQ_U(check(&r, "fd00::1", 80), EGRESS_NOT_ALLOWED);
    egress_rules_done(&r);

    r = rules_of("{\"allow\": []}");
    ASSERT_EQ_U(check(&r, "pypi.org", 443), EGRESS_NOT_ALLOWED);
    egress_rules_done(&r);
}

/* A session's narrowing takes away from its profile's list, never adds to it. */
TEST(narrowing)
{
    static const struct {
        const char *narrowing, *host;
        uint16_t port;
        enum egress_verdict want;
        const char *by;
    } cases[] = {
        /* an allow list: what both allow */
        {"{\"allow\": [\"pypi.org\"]}", "pypi.org", 443, EGRESS_ALLOWED, "session"},
        {"{\"allow\": [\"pypi.org\"]}", "files.pythonhosted.org", 443, EGRESS_NOT_ALLOWED,
         "session"},
        /* naming what the profile does not allow adds nothing */
        {"{\"allow\": [\"pypi.org\", \"evil.com\", \"pypi.org:8080\"]}", "evil.com", 443,
         EGRESS_NOT_ALLOWED, "profile"},
        {"{\"allow\": [\"pypi.org:8080\"]}", "pypi.org", 8080, EGRESS_NOT_ALLOWED, "profile"},
        /* nor does a suffix wider than the profile's */
        {"{\"allow\": [\"*.org\"]}", "pypi.org", 443, EGRESS_ALLOWED, "session"},
        {"{\"allow\": [\"*.org\"]}", "x.example.org", 443, EGRESS_NOT_ALLOWED, "profile"},
        /* deny only: the profile's list, less those */
        {"{\"deny\": [\"*.pythonhosted.org\"]}", "files.pythonhosted.org", 443, EGRESS_DENIED,
         "session"},
        {"{\"deny\": [\"*.pythonhosted.org\"]}", "pypi.org", 443, EGRESS_ALLOWED, "session"},
        /* the profile's deny stays */
        {"{\"deny\": []}", "evil.pythonhosted.org", 443, EGRESS_DENIED, "profile"},
        /* an empty allow list: nothing */
        {"{\"allow\": []}", "pypi.org", 443, EGRESS_NOT_ALLOWED, "session"},
    };
    struct egress_rules profile =
        rules_of("{\"allow\": [\"pypi.org\", \"*.pythonhosted.org\"], \"deny\": "
                 "[\"evil.pythonhosted.org\"]}");
    struct egress_narrowing n;
    struct err e = {0};
    const char *by = NULL;
    json_t *j;

    for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
        j = json_loads(cases[i].narrowing, 0, NULL);
        ASSERT_OK(egress_narrowing_from_json(j, "egress", &n, &e));
        json_decref(j);

        enum egress_verdict v =
            egress_narrowed_check(&profile, &n, cases[i].host, cases[i].port, &by);

        TAP_CHECK(v == cases[i].want && strcmp(by, cases[i].by) == 0,
                  "the profile narrowed by %s: %s:%u %s by the %s (%s by the %s)",
                  cases[i].narrowing, cases[i].host, cases[i].port,
                  egress_verdict_to_string(cases[i].want), cases[i].by, egress_verdict_to_string(v),
                  by);
        egress_narrowing_done(&n);
    }
    ASSERT_EQ_U(egress_narrowed_check(&profile, NULL, "pypi.org", 443, &by), EGRESS_ALLOWED);
    ASSERT_STREQ(by, "profile");
    /* refused shapes, with the entry named */
    for (const char *const *t =
             (const char *const[]){"[]", "{\"allow\": \"pypi.org\"}", "{\"allow\": [\"a b\"]}",
                                   "{\"x\": []}", NULL};
         *t != NULL; t++) {
        j = json_loads(*t, 0, NULL);
        e = (struct err){0};
        TAP_CHECK(egress_narrowing_from_json(j, "egress", &n, &e) == -EINVAL && e.msg[0] != '\0',
                  "narrowing %s refused: %s", *t, e.msg);
        json_decref(j);
    }
    egress_rules_done(&profile);
}

TEST(rules_refused)
{
    static const char *const bad[] = {
        "[]",
        "{}",
        "{\"deny\": [\"a.com\"]}",
        "{\"allow\": \"a.com\"}",
        "{\"allow\": [1]}",
        "{\"allow\": [\"\"]}",
        "{\"allow\": [\"*\"]}",
        "{\"allow\": [\"*.\"]}",
        "{\"allow\": [\"a..com\"]}",
        "{\"allow\": [\"-a.com\"]}",
        "{\"allow\": [\"a-.com\"]}",
        "{\"allow\": [\"a.com:0\"]}",
        "{\"allow\": [\"a.com:65536\"]}",
        "{\"allow\": [\"a.com:\"]}",
        "{\"allow\": [\"a com\"]}",
        "{\"allow\": [\"*.10.0.0.1\"]}",
        "{\"allow\": [\"1.2.3\"]}",
        "{\"allow\": [\"a.com/x\"]}",
        "{\"allow\": [\"http://a.com\"]}",
        "{\"allow\": [\"a.com\"], \"other\": []}",
    };

    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        struct egress_rules r = {0};
        struct err e = {0};
        json_t *j = json_loads(bad[i], 0, NULL);

        TAP_CHECK(j != NULL && egress_rules_from_json(j, "egress", &r, &e) == -EINVAL &&
                      e.msg[0] != '\0' && r.allow == NULL,
                  "refused: %s (%s)", bad[i], e.msg);
        json_decref(j);
    }
}

TEST(hosts)
{
    char out[EGRESS_NAME_MAX + 1];
    struct egress_addr a;
    char long_label[80];

    ASSERT_EQ_I(egress_host_normalize("Files.PythonHosted.org", 22, out, NULL), 0);
    ASSERT_STREQ(out, "files.pythonhosted.org");
    ASSERT_EQ_I(egress_host_normalize("127.0.0.1", 9, out, &a), 1);
    ASSERT_TRUE(a.family == AF_INET && a.bytes[0] == 127 && a.bytes[3] == 1);
    ASSERT_EQ_I(egress_host_normalize("[::ffff:10.0.0.1]", 17, out, &a), 1);
    ASSERT_STREQ(out, "::ffff:10.0.0.1");
    ASSERT_EQ_I(egress_host_normalize("0x7f.1", 6, out, NULL), 0); /* a name, never 127.0.0.1 */
    ASSERT_ERR(egress_host_normalize("2130706433", 10, out, NULL), EINVAL); /* 127.0.0.1 */
    ASSERT_ERR(egress_host_normalize("127.1", 5, out, NULL), EINVAL);
    ASSERT_ERR(egress_host_normalize("[a.com]", 7, out, NULL), EINVAL);
    ASSERT_ERR(egress_host_normalize("a\0b", 3, out, NULL), EINVAL);
    ASSERT_ERR(egress_host_normalize("", 0, out, NULL), EINVAL);
    memset(long_label, 'a', 64);
    memcpy(long_label + 64, ".com", 5);
    ASSERT_ERR(egress_host_normalize(long_label, strlen(long_label), out, NULL), EINVAL);
}

static const char *
refused(const char *addr)
{
    struct egress_addr a;

    return egress_addr_parse(addr, &a) == 0 ? egress_addr_refused_range(&a) : "unparsed";
}

TEST(ranges)
{
    static const char *const bad[] = {
        "127.0.0.1",
        "10.2.3.4",
        "172.31.255.255",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fd00:ec2::254",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "64:ff9b::a00:1",
        "2001:db8::1",
    };
    static const char *const good[] = {"1.1.1.1", "151.101.0.223", "172.32.0.1", "2a04:4e42::223",
                                       "::ffff:1.1.1.1"};

    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        const char *why = refused(bad[i]);

        TAP_CHECK(why != NULL && strcmp(why, "unparsed") != 0, "%s is refused (%s)", bad[i],
                  why ? why : "not");
    }
    for (size_t i = 0; i < ELEMENTSOF(good); i++) {
        TAP_CHECK(refused(good[i]) == NULL, "%s is not refused", good[i]);
    }
    ASSERT_STREQ(refused("169.254.169.254"), "link-local");
    ASSERT_STREQ(refused("127.0.0.53"), "loopback");
}

TEST(cidrs)
{
    struct egress_cidr c[4];
    struct egress_addr a;
    struct err e = {0};

    ASSERT_EQ_I(egress_cidrs_parse(" 127.0.0.1/32, 10.0.0.0/8,fd00::/8 ", c, 4, &e), 3);
    ASSERT_OK(egress_addr_parse("127.0.0.1", &a));
    ASSERT_TRUE(egress_cidrs_contain(c, 3, &a));
    ASSERT_OK(egress_addr_parse("127.0.0.2", &a));
    ASSERT_TRUE(!egress_cidrs_contain(c, 3, &a));
    ASSERT_OK(egress_addr_parse("10.255.0.1", &a));
    ASSERT_TRUE(egress_cidrs_contain(c, 3, &a));
    ASSERT_OK(egress_addr_parse("fdff::1", &a));
    ASSERT_TRUE(egress_cidrs_contain(c, 3, &a));
    ASSERT_EQ_I(egress_cidrs_parse("", c, 4, &e), 0);
    ASSERT_ERR(egress_cidrs_parse("10.0.0.1/8", c, 4, &e), EINVAL); /* host bits */
    ASSERT_ERR(egress_cidrs_parse("10.0.0.0/33", c, 4, &e), EINVAL);
    ASSERT_ERR(egress_cidrs_parse("10.0.0.0", c, 4, &e), EINVAL);
    ASSERT_ERR(egress_cidrs_parse("a/8", c, 4, &e), EINVAL);
    ASSERT_ERR(egress_cidrs_parse("1.0.0.0/8,2.0.0.0/8", c, 1, &e), E2BIG);
}

TEST(hosts_map)
{
    struct egress_host h[4];
    struct err e = {0};

    ASSERT_EQ_I(egress_hosts_parse("pypi.org=127.0.0.1, Files.Example.com=::1", h, 4, &e), 2);
    ASSERT_STREQ(h[0].name, "pypi.org");
    ASSERT_STREQ(h[1].name, "files.example.com");
    ASSERT_TRUE(h[1].addr.family == AF_INET6);
    ASSERT_ERR(egress_hosts_parse("pypi.org", h, 4, &e), EINVAL);
    ASSERT_ERR(egress_hosts_parse("pypi.org=nowhere", h, 4, &e), EINVAL);
    ASSERT_ERR(egress_hosts_parse("1.2.3.4=1.2.3.4", h, 4, &e), EINVAL);
}

/* ---- heads ------------------------------------------------------------------------------------
 */

static int
parse(const char *text, struct egress_head *h, struct err *e)
{
    return egress_head_parse(text, strlen(text), h, e);
}

TEST(head_connect)
{
    struct egress_head h;
    struct err e = {0};
    const char *req = "CONNECT files.pythonhosted.org:443 HTTP/1.1\r\nHost: x\r\n\r\nTLS...";

    ASSERT_OK(parse(req, &h, &e));
    ASSERT_TRUE(h.kind == EGRESS_HEAD_CONNECT && h.port == 443 && !h.host_is_addr);
    ASSERT_STREQ(h.host, "files.pythonhosted.org");
    ASSERT_EQ_U(h.len, strlen(req) - 6); /* the tunnel's bytes follow the head */
    ASSERT_OK(parse("CONNECT [::1]:8443 HTTP/1.0\r\n\r\n", &h, &e));
    ASSERT_TRUE(h.host_is_addr && h.port == 8443);
    ASSERT_STREQ(h.host, "::1");
    ASSERT_ERR(parse("CONNECT a.com HTTP/1.1\r\n\r\n", &h, &e), EINVAL); /* no port */
    ASSERT_ERR(parse("CONNECT a.com:0 HTTP/1.1\r\n\r\n", &h, &e), EINVAL);
    ASSERT_ERR(parse("CONNECT user@a.com:443 HTTP/1.1\r\n\r\n", &h, &e), EINVAL);
    ASSERT_ERR(parse("CONNECT a.com:443 HTTP/1.1\r\n", &h, &e), EAGAIN);
}

TEST(head_absolute)
{
    struct egress_head h;
    struct err e = {0};
    struct buf up = BUF_INIT(65536);
    const char *req = "GET http://Pypi.org/simple/x/?a=1 HTTP/1.1\r\nHost: pypi.org\r\n"
                      "Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\n"
                      "Accept: */*\r\nConnection: keep-alive\r\n\r\n";

    ASSERT_OK(parse(req, &h, &e));
    ASSERT_TRUE(h.kind == EGRESS_HEAD_ABSOLUTE && h.port == 80);
    ASSERT_STREQ(h.host, "pypi.org");
    ASSERT_OK(egress_head_upstream(&h, req, &up));
    ASSERT_STREQ(up.buf, "GET /simple/x/?a=1 HTTP/1.1\r\nHost: pypi.org\r\nAccept: */*\r\n"
                         "Connection: close\r\n\r\n");
    buf_reset(&up);
    req = "POST http://10.0.0.1:8080?q HTTP/1.0\r\nContent-Length: 2\r\n\r\nhi";
    ASSERT_OK(parse(req, &h, &e));
    ASSERT_TRUE(h.host_is_addr && h.port == 8080);
    ASSERT_OK(egress_head_upstream(&h, req, &up));
    ASSERT_STREQ(up.buf, "POST /?q HTTP/1.0\r\nContent-Length: 2\r\nHost: 10.0.0.1:8080\r\n"
                         "Connection: close\r\n\r\n");
    ASSERT_TRUE(h.body == EGRESS_BODY_LENGTH && h.body_len == 2);
    buf_done(&up);
    ASSERT_OK(parse("GET http://a.com/ HTTP/1.1\r\n\r\n", &h, &e));
    ASSERT_TRUE(h.body == EGRESS_BODY_NONE);
    ASSERT_OK(parse("PUT http://a.com/ HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n", &h, &e));
    ASSERT_TRUE(h.body == EGRESS_BODY_CHUNKED);
    /* a tunnel's head says nothing of what follows it */
    ASSERT_OK(parse("CONNECT a.com:443 HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                    &h, &e));
    ASSERT_OK(parse("GET http://a.com:80/ HTTP/1.1\r\nHost: A.com\r\n\r\n", &h, &e));
}

TEST(head_refused)
{
    static const struct {
        const char *text;
        int err;
    } bad[] = {
        {"GET http://a.com/ HTTP/1.1\r\nHost: b.com\r\n\r\n", EINVAL},    /* Host mismatch */
        {"GET http://a.com/ HTTP/1.1\r\nHost: a.com:81\r\n\r\n", EINVAL}, /* its port */
        {"GET http://a.com/ HTTP/1.1\r\nHost: a.com\r\nHost: a.com\r\n\r\n", EINVAL},
        {"GET http://u:p@a.com/ HTTP/1.1\r\n\r\n", EINVAL},
        {"GET https://a.com/ HTTP/1.1\r\n\r\n", EPROTONOSUPPORT},
        {"GET /local HTTP/1.1\r\n\r\n", EPROTONOSUPPORT},
        {"GET http://a.com/ HTTP/2.0\r\n\r\n", EINVAL},
        {"GET http://a.com/#f HTTP/1.1\r\n\r\n", EINVAL},
        {"GET http://a.com/ HTTP/1.1\r\nX: 1\r\n folded\r\n\r\n", EINVAL},
        {"GET http://a.com/ HTTP/1.1\r\nX\r\n\r\n", EINVAL},
        {"GET http://a.com/ HTTP/1.1\r\nX: a\nHost: b.com\r\n\r\n", EINVAL}, /* bare LF */
        {"GET http://a.com/ HTTP/1.1\r\nX: a\rb\r\n\r\n", EINVAL},
        {"G(T http://a.com/ HTTP/1.1\r\n\r\n", EINVAL},
        {"GET  http://a.com/ HTTP/1.1\r\n\r\n", EINVAL},
        {"GET http://[a.com]/ HTTP/1.1\r\n\r\n", EINVAL},
        {"GET http://127.1/ HTTP/1.1\r\n\r\n", EINVAL},
        {"\r\n\r\n", EINVAL},
        /* a body whose end is in doubt */
        {"POST http://a.com/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", EINVAL},
        {"POST http://a.com/ HTTP/1.1\r\nContent-Length: 1\r\n"
         "Transfer-Encoding: chunked\r\n\r\n",
         EINVAL},
        {"POST http://a.com/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n",
         EINVAL},
        {"POST http://a.com/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
         "Transfer-Encoding: chunked\r\n\r\n",
         EINVAL},
        {"POST http://a.com/ HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\n", EINVAL},
        {"POST http://a.com/ HTTP/1.1\r\nContent-Length: +1\r\n\r\n", EINVAL},
        {"POST http://a.com/ HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", EINVAL},
        {"POST http://a.com/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", EINVAL},
        {"POST http://a.com/ HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n", EINVAL},
        {"POST http://a.com/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", EINVAL},
    };
    struct egress_head h;
    struct err e = {0};
    char big[EGRESS_HEAD_MAX + 64];

    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        e = (struct err){0};
        TAP_CHECK(parse(bad[i].text, &h, &e) == -bad[i].err && e.msg[0] != '\0',
                  "refused (%s): %.60s", e.msg, bad[i].text);
    }
    memset(big, 'a', sizeof(big));
    memcpy(big, "GET http://a.com/ HTTP/1.1\r\nX: ", 31);
    ASSERT_ERR(egress_head_parse(big, sizeof(big), &h, &e), EMSGSIZE);
    ASSERT_ERR(egress_head_parse(big, 100, &h, &e), EAGAIN);
}

int
main(void)
{
    RUN(rules);
    RUN(narrowing);
    RUN(rules_refused);
    RUN(hosts);
    RUN(ranges);
    RUN(cidrs);
    RUN(hosts_map);
    RUN(head_connect);
    RUN(head_absolute);
    RUN(head_refused);
    return tap_done();
}
