/* Unit tests for src/util: bounded buffers, strict parsers, error records. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "tap.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/errcode.h"
#include "util/hashmap.h"
#include "util/parse.h"
#include "util/random.h"
#include "util/time.h"
#include "util/utf8.h"

TEST(buf_bounds)
{
    struct buf b = BUF_INIT(8);
    char *p;
    size_t n;

    ASSERT_TRUE(b.buf != NULL && b.buf[0] == '\0');
    ASSERT_OK(buf_append(&b, "abcd", 4));
    ASSERT_OK(buf_printf(&b, "%d", 123));
    ASSERT_EQ_U(b.len, 7);
    ASSERT_ERR(buf_append(&b, "xy", 2), EMSGSIZE);
    ASSERT_EQ_U(b.len, 7);
    ASSERT_ERR(buf_printf(&b, "%s", "long"), EMSGSIZE);
    ASSERT_STREQ(b.buf, "abcd123");
    ASSERT_OK(buf_putc(&b, '!'));
    ASSERT_ERR(buf_putc(&b, '?'), EMSGSIZE);
    buf_consume(&b, 2);
    ASSERT_STREQ(b.buf, "cd123!");
    buf_truncate(&b, 2);
    ASSERT_STREQ(b.buf, "cd");
    p = buf_detach(&b, &n);
    ASSERT_STREQ(p, "cd");
    ASSERT_EQ_U(n, 2);
    ASSERT_TRUE(b.len == 0 && b.buf[0] == '\0');
    free(p);
    p = buf_detach(&b, NULL);
    ASSERT_STREQ(p, "");
    free(p);
    buf_done(&b);
}

TEST(buf_binary_and_growth)
{
    struct buf b = BUF_INIT(1 << 20);
    char chunk[1000];
    int failures = 0;

    memset(chunk, 0, sizeof(chunk));
    for (int i = 0; i < 1000; i++) {
        failures += buf_append(&b, chunk, sizeof(chunk)) < 0;
    }
    ASSERT_EQ_I(failures, 0);
    ASSERT_EQ_U(b.len, 1000000);
    ASSERT_TRUE(b.buf[b.len] == '\0');
    buf_consume(&b, 5000000);
    ASSERT_EQ_U(b.len, 0);
    buf_done(&b);
    ASSERT_OK(buf_append(&b, "x", 1)); /* reusable after done */
    buf_done(&b);
}

TEST(parse_numbers)
{
    uint64_t u = 7;
    int i = 7;
    double d = 0;
    unsigned v;
    bool yes;

    ASSERT_OK(parse_u64("18446744073709551615", &u));
    ASSERT_TRUE(u == UINT64_MAX);
    ASSERT_ERR(parse_u64("18446744073709551616", &u), ERANGE);
    ASSERT_ERR(parse_u64("", &u), EINVAL);
    ASSERT_ERR(parse_u64(" 1", &u), EINVAL);
    ASSERT_ERR(parse_u64("+1", &u), EINVAL);
    ASSERT_ERR(parse_u64("1x", &u), EINVAL);
    ASSERT_ERR(parse_u64("0x10", &u), EINVAL);
    ASSERT_TRUE(u == UINT64_MAX); /* untouched on failure */
    ASSERT_OK(parse_int("-5", -10, 10, &i));
    ASSERT_EQ_I(i, -5);
    ASSERT_ERR(parse_int("11", -10, 10, &i), ERANGE);
    ASSERT_ERR(parse_int("-2147483649", INT32_MIN, INT32_MAX, &i), ERANGE);
    ASSERT_OK(parse_int("-2147483648", INT32_MIN, INT32_MAX, &i));
    ASSERT_OK(parse_double("1.5", 0, 10, &d));
    ASSERT_TRUE(d > 1.49 && d < 1.51);
    ASSERT_ERR(parse_double("1.", 0, 10, &d), EINVAL);
    ASSERT_ERR(parse_double("11", 0, 10, &d), ERANGE);
    ASSERT_OK(parse_api_version("1.41", 4, &v));
    ASSERT_EQ_U(v, 1041);
    ASSERT_ERR(parse_api_version("141", 3, &v), EINVAL);
    ASSERT_ERR(parse_api_version("1.x", 3, &v), EINVAL);
    ASSERT_OK(parse_bool("Yes", &yes));
    ASSERT_TRUE(yes);
    ASSERT_ERR(parse_bool("maybe", &yes), EINVAL);
}

TEST(parse_listen_forms)
{
    char host[128];
    uint16_t port = 0;

    ASSERT_OK(parse_listen("127.0.0.1:8080", host, sizeof(host), &port));
    ASSERT_STREQ(host, "127.0.0.1");
    ASSERT_EQ_U(port, 8080);
    ASSERT_OK(parse_listen("[::1]:9", host, sizeof(host), &port));
    ASSERT_STREQ(host, "::1");
    ASSERT_OK(parse_listen("unix:/run/x.sock", host, sizeof(host), &port));
    ASSERT_STREQ(host, "/run/x.sock");
    ASSERT_EQ_U(port, 0);
    ASSERT_ERR(parse_listen("::1:80", host, sizeof(host), &port), EINVAL);
    ASSERT_ERR(parse_listen("host:0", host, sizeof(host), &port), EINVAL);
    ASSERT_ERR(parse_listen("host:65536", host, sizeof(host), &port), EINVAL);
    ASSERT_ERR(parse_listen(":80", host, sizeof(host), &port), EINVAL);
    ASSERT_ERR(parse_listen("unix:relative", host, sizeof(host), &port), EINVAL);
}

TEST(err_records)
{
    struct err e = {0};

    ASSERT_ERR(err_set(&e, -ENOENT, "no '%s'", "x"), ENOENT);
    ASSERT_STREQ(e.msg, "no 'x'");
    ASSERT_ERR(err_wrap(&e, -ENOENT, "lookup"), ENOENT);
    ASSERT_STREQ(e.msg, "lookup: no 'x'");
    ASSERT_ERR(err_set(NULL, -EIO, "ignored"), EIO);
    err_clear(&e);
    e.code = -EPERM;
    ASSERT_STREQ(err_msg(&e), strerror(EPERM));
}

TEST(random_ids)
{
    char a[33], b[33];

    random_hex(a, 16);
    random_hex(b, 16);
    ASSERT_EQ_U(strlen(a), 32);
    ASSERT_TRUE(strcmp(a, b) != 0);
    ASSERT_TRUE(strspn(a, "0123456789abcdef") == 32);
}

TEST(time_format)
{
    char out[40];

    ASSERT_STREQ(time_rfc3339(1764405538123ull, out, sizeof(out)), "2025-11-29T08:38:58.123Z");
    ASSERT_TRUE(time_now_ms() > 0);
}

TEST(utf8)
{
    static const struct {
        const char *s;
        size_t n;
        bool valid;
        const char *fixed;
    } cases[] = {
        {"plain", 5, true, "plain"},
        {"caf\xc3\xa9", 5, true, "caf\xc3\xa9"},
        {"\xf0\x9f\x98\x80", 4, true, "\xf0\x9f\x98\x80"},
        {"a\0b", 3, true, "a\0b"},
        {"\xff", 1, false, "\xef\xbf\xbd"},
        {"\xc0\xaf", 2, false, "\xef\xbf\xbd\xef\xbf\xbd"},                 /* overlong */
        {"\xed\xa0\x80", 3, false, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate */
        {"\xf4\x90\x80\x80", 4, false, NULL},                               /* > U+10FFFF */
        {"ab\xe2\x82", 4, false, "ab\xef\xbf\xbd\xef\xbf\xbd"},             /* cut short */
    };
    struct buf b = BUF_INIT(64);

    for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
        ASSERT_TRUE(utf8_valid(cases[i].s, cases[i].n) == cases[i].valid);
        buf_reset(&b);
        ASSERT_OK(utf8_append_sanitized(&b, cases[i].s, cases[i].n));
        ASSERT_TRUE(utf8_valid(b.buf, b.len));
        if (cases[i].fixed != NULL && cases[i].valid) {
            ASSERT_TRUE(b.len == cases[i].n && memcmp(b.buf, cases[i].fixed, b.len) == 0);
        } else if (cases[i].fixed != NULL) {
            ASSERT_STREQ(b.buf, cases[i].fixed);
        }
    }
    ASSERT_EQ_U(utf8_boundary("ab\xe2\x82", 4), 2);
    ASSERT_EQ_U(utf8_boundary("ab\xe2\x82\xac", 5), 5);
    ASSERT_EQ_U(utf8_boundary("ab\xc3", 3), 2);
    ASSERT_EQ_U(utf8_boundary("abc", 3), 3);
    ASSERT_EQ_U(utf8_boundary("\x80\x80\x80\x80", 4), 4);
    /* a full buffer keeps a valid prefix */
    buf_done(&b);
    b = (struct buf)BUF_INIT(4);
    ASSERT_ERR(utf8_append_sanitized(&b, "ab\xff\xff", 4), EMSGSIZE);
    ASSERT_TRUE(utf8_valid(b.buf, b.len));
    buf_done(&b);
}

TEST(hashmap)
{
    struct hashmap *m = hashmap_new();
    char key[32];
    int values[2000], wrong = 0;

    for (int i = 0; i < 2000; i++) {
        values[i] = i;
        (void)snprintf(key, sizeof(key), "k%d", i);
        hashmap_put(m, key, &values[i]);
    }
    ASSERT_EQ_U(hashmap_size(m), 2000);
    for (int i = 0; i < 2000; i++) {
        int *v;

        (void)snprintf(key, sizeof(key), "k%d", i);
        v = hashmap_get(m, key);
        wrong += v == NULL || *v != i;
    }
    ASSERT_EQ_I(wrong, 0);
    ASSERT_TRUE(hashmap_get(m, "nope") == NULL);
    hashmap_put(m, "k5", &values[7]);
    ASSERT_TRUE(hashmap_get(m, "k5") == &values[7]);
    ASSERT_EQ_U(hashmap_size(m), 2000);
    for (int i = 0; i < 2000; i += 2) {
        (void)snprintf(key, sizeof(key), "k%d", i);
        wrong += hashmap_remove(m, key) == NULL;
    }
    ASSERT_EQ_I(wrong, 0);
    ASSERT_EQ_U(hashmap_size(m), 1000);
    ASSERT_TRUE(hashmap_get(m, "k2") == NULL && hashmap_get(m, "k3") == &values[3]);
    ASSERT_TRUE(hashmap_remove(m, "k2") == NULL);
    hashmap_free(m);
}

/* The one error table (util/errcode.c): the daemon's rows as http.c answered them before the
 * table moved, and the client's reading of each status as the round trip of its first row. */
TEST(errcode_table)
{
    static const struct {
        int err, status;
        const char *code;
        bool retry;
    } daemon[] = {
        {-EINVAL, 400, "invalid_argument", false},
        {-EACCES, 401, "unauthenticated", false},
        {-EPERM, 403, "forbidden", false},
        {-ENOENT, 404, "not_found", false},
        {-EOPNOTSUPP, 405, "method_not_allowed", false},
        {-EBUSY, 409, "session_busy", false},
        {-EEXIST, 409, "session_busy", false},
        {-ESRCH, 409, "not_running", false},
        {-ESTALE, 409, "conflict", false},
        {-EMSGSIZE, 413, "payload_too_large", false},
        {-EPROTONOSUPPORT, 426, "upgrade_required", false},
        {-EDQUOT, 429, "quota_exceeded", true},
        {-EUSERS, 503, "capacity_exhausted", true},
        {-EAGAIN, 503, "capacity_exhausted", true},
        {-ECONNREFUSED, 503, "unavailable", true},
        {-ENOTCONN, 503, "unavailable", true},
        {-ESHUTDOWN, 503, "unavailable", true},
        {-ETIMEDOUT, 503, "unavailable", true},
        {-EPIPE, 503, "unavailable", true},
        {-EIO, 500, "internal", false},
        {-EPROTO, 500, "internal", false},
        {0, 500, "internal", false},
    };
    static const struct {
        int status, err;
    } client[] = {
        {400, -EINVAL},     {401, -EACCES},    {403, -EPERM},    {404, -ENOENT},
        {405, -EOPNOTSUPP}, {409, -EBUSY},     {413, -EMSGSIZE}, {426, -EPROTONOSUPPORT},
        {429, -EDQUOT},     {500, -EREMOTEIO}, {503, -EAGAIN},   {504, -ETIMEDOUT},
    };

    for (size_t i = 0; i < ELEMENTSOF(daemon); i++) {
        const struct errcode *e = errcode_from_errno(daemon[i].err);

        ASSERT_EQ_I(e->status, daemon[i].status);
        ASSERT_STREQ(e->code, daemon[i].code);
        ASSERT_EQ_I(e->retry_after, daemon[i].retry);
    }
    for (size_t i = 0; i < ELEMENTSOF(client); i++) {
        const struct errcode *e = errcode_from_status(client[i].status);

        ASSERT_TRUE(e != NULL);
        ASSERT_EQ_I(e != NULL ? e->err : 0, client[i].err);
        /* The daemon answers that errno with that very status, a gateway's 504 aside. */
        if (client[i].status != 504) {
            ASSERT_EQ_I(errcode_from_errno(client[i].err)->status, client[i].status);
        }
    }
    ASSERT_TRUE(errcode_from_status(418) == NULL);
    ASSERT_TRUE(errcode_from_status(200) == NULL);
}

int
main(void)
{
    RUN(buf_bounds);
    RUN(buf_binary_and_growth);
    RUN(parse_numbers);
    RUN(parse_listen_forms);
    RUN(err_records);
    RUN(random_ids);
    RUN(time_format);
    RUN(utf8);
    RUN(hashmap);
    RUN(errcode_table);
    return tap_done();
}
