/* Observability helpers: histogram buckets and exposition, label escaping, character cuts, JSON
 * log fields and audit lines. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "audit/audit.h"
#include "log/log.h"
#include "metrics/metrics.h"
#include "tap.h"
#include "util/err.h"
#include "util/utf8.h"

TEST(hist_buckets_are_cumulative)
{
    struct metrics_hist h = {0};
    struct buf b = BUF_INIT(1 << 16);

    metrics_hist_observe(&h, 10000);    /* exactly 10 ms: le="0.01" */
    metrics_hist_observe(&h, 10001);    /* just above: le="0.025" */
    metrics_hist_observe(&h, 90000000); /* 90 s: only +Inf */
    ASSERT_OK(metrics_hist_write(&b, "x_seconds", "profile=\"p\"", &h));
    TAP_CHECK(strstr(b.buf, "x_seconds_bucket{profile=\"p\",le=\"0.005\"} 0\n") != NULL, "0.005");
    TAP_CHECK(strstr(b.buf, "x_seconds_bucket{profile=\"p\",le=\"0.01\"} 1\n") != NULL, "0.01");
    TAP_CHECK(strstr(b.buf, "x_seconds_bucket{profile=\"p\",le=\"0.025\"} 2\n") != NULL, "0.025");
    TAP_CHECK(strstr(b.buf, "x_seconds_bucket{profile=\"p\",le=\"60\"} 2\n") != NULL, "60");
    TAP_CHECK(strstr(b.buf, "x_seconds_bucket{profile=\"p\",le=\"+Inf\"} 3\n") != NULL, "+Inf");
    TAP_CHECK(strstr(b.buf, "x_seconds_sum{profile=\"p\"} 90.020001\n") != NULL, "sum");
    TAP_CHECK(strstr(b.buf, "x_seconds_count{profile=\"p\"} 3\n") != NULL, "count");
    buf_reset(&b);
    ASSERT_OK(metrics_hist_write(&b, "y", "", &h));
    TAP_CHECK(strstr(b.buf, "y_bucket{le=\"+Inf\"} 3\ny_sum 90.020001\ny_count 3\n") != NULL,
              "no labels");
    buf_done(&b);
}

TEST(hist_write_is_bounded)
{
    struct metrics_hist h = {0};
    struct buf b = BUF_INIT(100);

    ASSERT_ERR(metrics_hist_write(&b, "x_seconds", "", &h), ENOBUFS);
    TAP_CHECK(b.len <= 100, "the cap holds (%zu)", b.len);
    buf_done(&b);
}

TEST(label_escape)
{
    struct buf b = BUF_INIT(64);

    ASSERT_OK(metrics_label_escape(&b, "a\"b\\c\nd"));
    TAP_CHECK(b.len == 10 && memcmp(b.buf, "a\\\"b\\\\c\\nd", 10) == 0, "escaped: %.*s", (int)b.len,
              b.buf);
    buf_done(&b);
}

TEST(prefix_chars)
{
    const char *s = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z"; /* a é € 😀 z */

    ASSERT_EQ_U(utf8_prefix_chars(s, strlen(s), 0), 0);
    ASSERT_EQ_U(utf8_prefix_chars(s, strlen(s), 2), 3);
    ASSERT_EQ_U(utf8_prefix_chars(s, strlen(s), 4), 10);
    ASSERT_EQ_U(utf8_prefix_chars(s, strlen(s), 200), strlen(s));
}

TEST(log_json_fields)
{
    char line[LOG_LINE_MAX];
    size_t n = log_render(line, sizeof(line), LOG_FORMAT_JSON, "T", LOG_INFO, "api",
                          "session ending session=abc123: tenant='x y' request=r1, ctr=");
    json_t *o;

    TAP_CHECK(n > 0 && line[n - 1] == '\n', "one line");
    o = json_loadb(line, n - 1, 0, NULL);
    TAP_CHECK(o != NULL, "valid JSON: %.*s", (int)(n - 1), line);
    TAP_CHECK(strcmp(json_string_value(json_object_get(o, "session")) ?: "", "abc123") == 0,
              "session field without the colon");
    TAP_CHECK(strcmp(json_string_value(json_object_get(o, "tenant")) ?: "", "x y") == 0,
              "quoted tenant");
    TAP_CHECK(strcmp(json_string_value(json_object_get(o, "request")) ?: "", "r1") == 0,
              "request without the comma");
    TAP_CHECK(json_object_get(o, "ctr") == NULL, "an empty value is no field");
    json_decref(o);
    n = log_render(line, sizeof(line), LOG_FORMAT_TEXT, "T", LOG_WARN, "api", "m session=1");
    TAP_CHECK(n == strlen("T warn  api m session=1\n") && memcmp(line, "T warn  api m", 13) == 0,
              "text unchanged: %.*s", (int)(n - 1), line);
}

TEST(log_json_long_message_stays_valid)
{
    char msg[2048], line[LOG_LINE_MAX];
    size_t n;
    json_t *o;

    memset(msg, '"', sizeof(msg) - 20);
    (void)snprintf(msg + sizeof(msg) - 20, 20, " session=s");
    n = log_render(line, sizeof(line), LOG_FORMAT_JSON, "T", LOG_INFO, "m", msg);
    o = json_loadb(line, n - 1, 0, NULL);
    TAP_CHECK(n <= sizeof(line) && o != NULL, "a message of quotes is cut into valid JSON");
    json_decref(o);
}

TEST(log_json_utf8_cut_stays_valid)
{
    char msg[LOG_LINE_MAX], line[LOG_LINE_MAX];
    json_t *o;

    /* Multi-byte characters up to and past the cut at half the line, at every alignment, and
     * stray bytes: each line must still parse (jansson refuses ill-formed UTF-8). */
    for (size_t shift = 0; shift < 4; shift++) {
        size_t n = 0, len;

        memset(msg, 'a', shift);
        n = shift;
        while (n + 5 < sizeof(msg) - 1) {
            memcpy(msg + n, "\xf0\x9f\x98\x80", 4); /* U+1F600 */
            n += 4;
        }
        msg[n] = '\0';
        len = log_render(line, sizeof(line), LOG_FORMAT_JSON, "T", LOG_INFO, "m", msg);
        o = json_loadb(line, len - 1, 0, NULL);
        TAP_CHECK(o != NULL, "a line of 4-byte characters cut at alignment %zu is valid JSON",
                  shift);
        json_decref(o);
    }
    {
        size_t len = log_render(line, sizeof(line), LOG_FORMAT_JSON, "T", LOG_INFO, "m",
                                "bad \xff\xc3 and \xe2\x82 end session=s1");

        o = json_loadb(line, len - 1, 0, NULL);
        TAP_CHECK(o != NULL && strstr(json_string_value(json_object_get(o, "msg")) ?: "",
                                      "\xef\xbf\xbd") != NULL,
                  "stray bytes become U+FFFD: %.*s", (int)(len - 1), line);
        json_decref(o);
    }
}

TEST(audit_lines)
{
    char path[] = "/tmp/test-audit-XXXXXX", text[8192];
    struct err e = {0};
    int fd = mkstemp(path);
    ssize_t n;
    char big[AUDIT_LINE_MAX];

    TAP_CHECK(fd >= 0, "temporary file");
    (void)close(fd);
    ASSERT_OK(audit_open(path, &e));
    TAP_CHECK(audit_enabled(), "enabled");
    audit_log("a.one", "tenant:t",
              json_pack("{s:s, s:i, s:s}", "session", "s1", "size", 5, "ts", "forged"));
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    audit_log("a.two", "daemon", json_pack("{s:s}", "path", big));
    audit_log("a.three", "admin", NULL);
    audit_close();
    audit_log("a.four", "admin", json_object()); /* closed: nothing, fields freed */
    fd = open(path, O_RDONLY);
    n = read(fd, text, sizeof(text) - 1);
    (void)close(fd);
    (void)unlink(path);
    text[n > 0 ? n : 0] = '\0';
    TAP_CHECK(
        strstr(text,
               "\"action\":\"a.one\",\"actor\":\"tenant:t\",\"session\":\"s1\",\"size\":5}\n") !=
                NULL &&
            strstr(text, "forged") == NULL,
        "fields follow ts, action, actor; a forged ts is ignored");
    TAP_CHECK(strstr(text, "\"action\":\"a.two\",\"actor\":\"daemon\",\"truncated\":true}\n") !=
                  NULL,
              "an over-long line keeps its action");
    TAP_CHECK(strstr(text, "a.three") != NULL && strstr(text, "a.four") == NULL, "open and closed");
    ASSERT_ERR(audit_open("/nonexistent/dir/audit", &e), ENOENT);
    TAP_CHECK(!audit_enabled(), "a failed open leaves it off");
    ASSERT_OK(audit_open("", &e));
    TAP_CHECK(!audit_enabled(), "\"\" is off");
}

int
main(void)
{
    RUN(hist_buckets_are_cumulative);
    RUN(hist_write_is_bounded);
    RUN(label_escape);
    RUN(prefix_chars);
    RUN(log_json_fields);
    RUN(log_json_long_message_stays_valid);
    RUN(log_json_utf8_cut_stays_valid);
    RUN(audit_lines);
    return tap_done();
}
