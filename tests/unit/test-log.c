/* The log sink (src/log/log.c) against hostile text (issue 14, item 11): whatever reaches a
 * message (sandbox stderr, file paths, tenant metadata, engine errors) must yield exactly one
 * line with no terminal control in it, and, in JSON lines, must never supply a field of its own.
 * Records are captured the way the daemon writes them: log_emit() into a pipe that stands in for
 * stderr. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "log/log.h"
#include "tap.h"

static int capture_fd[2] = {-1, -1}, saved_stderr = -1;

static void
capture_begin(void)
{
    if (pipe2(capture_fd, O_CLOEXEC) < 0 || (saved_stderr = dup(STDERR_FILENO)) < 0 ||
        dup2(capture_fd[1], STDERR_FILENO) < 0) {
        perror("capture");
        exit(EXIT_FAILURE);
    }
}

/* Ends the capture; out gets what was written (NUL-terminated), the length is returned. */
static size_t
capture_end(char *out, size_t cap)
{
    size_t n = 0;
    ssize_t r;

    (void)dup2(saved_stderr, STDERR_FILENO);
    (void)close(saved_stderr);
    (void)close(capture_fd[1]);
    while (n + 1 < cap && (r = read(capture_fd[0], out + n, cap - 1 - n)) > 0) {
        n += (size_t)r;
    }
    (void)close(capture_fd[0]);
    out[n] = '\0';
    return n;
}

static size_t
count_char(const char *s, size_t n, char c)
{
    size_t k = 0;

    for (size_t i = 0; i < n; i++) {
        k += s[i] == c;
    }
    return k;
}

/* One record through log_emit in the given format; returns its length. */
#define EMIT(out, fmt_, ...)                         \
    ({                                               \
        log_setup(LOG_DEBUG, (fmt_));                \
        capture_begin();                             \
        log_emit(LOG_INFO, "api", __VA_ARGS__);      \
        size_t _n = capture_end((out), sizeof(out)); \
        log_setup(LOG_INFO, LOG_FORMAT_TEXT);        \
        _n;                                          \
    })

TEST(text_forged_line_stays_one_line)
{
    char out[8192];
    const char *forged = "oops\n2026-11-29T08:38:58.123Z info  api forged line\r\n";
    size_t n = EMIT(out, LOG_FORMAT_TEXT, "files helper failed session=%s: %s", "s1", forged);

    ASSERT_EQ_U(count_char(out, n, '\n'), 1);
    TAP_CHECK(n > 0 && out[n - 1] == '\n', "the one newline ends the record");
    TAP_CHECK(strstr(out, " info  api files helper failed session=s1: oops\\n2026-11-29T08:38:58"
                          ".123Z info  api forged line\\r\\n\n") != NULL,
              "escaped in place: %.*s", (int)(n > 0 ? n - 1 : 0), out);
    TAP_CHECK(!tap_has_terminal_control(out, n), "no control byte");
}

TEST(text_escapes_terminal_sequences)
{
    char out[8192];
    size_t n = EMIT(out, LOG_FORMAT_TEXT, "stderr: %s",
                    "\x1b[2J clear \x1b]0;title\x07 osc52 \x1b]52;c;SGVsbG8=\x1b\\ "
                    "csi \xc2\x9b"
                    "31m del \x7f tab\t nul-ish \x01 st \xc2\x9c");

    ASSERT_EQ_U(count_char(out, n, '\n'), 1);
    TAP_CHECK(!tap_has_terminal_control(out, n), "no control byte");
    TAP_CHECK(strstr(out, "stderr: \\x1b[2J clear \\x1b]0;title\\x07 osc52 \\x1b]52;c;SGVsbG8="
                          "\\x1b\\\\ csi \\u009b31m del \\x7f tab\\t nul-ish \\x01 st \\u009c\n") !=
                  NULL,
              "ESC, BEL, C1, DEL, tab as visible escapes, the backslash doubled: %.*s",
              (int)(n > 0 ? n - 1 : 0), out);
}

TEST(text_invalid_utf8_and_separators)
{
    char out[8192];
    size_t n = EMIT(out, LOG_FORMAT_TEXT, "path '%s'",
                    "caf\xc3\xa9 \xff\xfe \xc3 \xe2\x82 \xed\xa0\x80 \xc0\xaf ls\xe2\x80\xa8ps"
                    "\xe2\x80\xa9 \xe2\x82\xac");

    TAP_CHECK(strstr(out,
                     "path 'caf\xc3\xa9 \\xff\\xfe \\xc3 \\xe2\\x82 \\xed\\xa0\\x80 \\xc0\\xaf "
                     "ls\\u2028ps\\u2029 \xe2\x82\xac'\n") != NULL,
              "valid characters as they are, stray bytes as \\xHH, line separators escaped: %.*s",
              (int)(n > 0 ? n - 1 : 0), out);
    ASSERT_EQ_U(count_char(out, n, '\n'), 1);
}

TEST(text_cut_keeps_escapes_whole)
{
    char msg[2048], line[LOG_LINE_MAX];
    size_t n;

    memset(msg, '\x1b', sizeof(msg) - 1); /* 4 bytes each once escaped: far past the line */
    msg[sizeof(msg) - 1] = '\0';
    n = log_render(line, sizeof(line), LOG_FORMAT_TEXT, "T", LOG_INFO, "m", msg);
    TAP_CHECK(n <= sizeof(line) && line[n - 1] == '\n', "cut to one line (%zu bytes)", n);
    ASSERT_EQ_U(count_char(line, n, '\n'), 1);
    TAP_CHECK((n - 1 - strlen("T info  m ")) % 4 == 0 && memcmp(line + n - 5, "\\x1b", 4) == 0,
              "only whole escapes: ...%.12s", line + n - 13);
    n = log_render(line, sizeof(line), LOG_FORMAT_TEXT, "T", LOG_WARN, "api", "m session=1");
    TAP_CHECK(n == strlen("T warn  api m session=1\n") &&
                  memcmp(line, "T warn  api m session=1\n", n) == 0,
              "plain text unchanged: %.*s", (int)(n - 1), line);
}

static json_t *
parse_line(const char *out, size_t n)
{
    json_t *o = n > 0 ? json_loadb(out, n - 1, 0, NULL) : NULL;

    TAP_CHECK(o != NULL && count_char(out, n, '\n') == 1, "one valid JSON line: %.*s",
              (int)(n > 0 ? n - 1 : 0), out);
    return o;
}

static const char *
field(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

TEST(json_fields_only_from_the_format)
{
    char out[8192];
    json_t *o;
    size_t n;

    /* A quoted user string that looks like fields: none of it becomes one. */
    n = EMIT(out, LOG_FORMAT_JSON, "helper said '%s'",
             "x session=forged tenant='evil' request=r9 ctr=c");
    o = parse_line(out, n);
    TAP_CHECK(json_object_get(o, "session") == NULL && json_object_get(o, "tenant") == NULL &&
                  json_object_get(o, "request") == NULL && json_object_get(o, "ctr") == NULL,
              "no field from quoted text: %.*s", (int)(n - 1), out);
    ASSERT_STREQ(field(o, "msg"), "helper said 'x session=forged tenant='evil' request=r9 ctr=c'");
    json_decref(o);

    /* The real field comes first; the forged one in the detail after it changes nothing. */
    n = EMIT(out, LOG_FORMAT_JSON, "session %s session=%s tenant='%s': %s", "ended", "real", "t 1",
             "helper: session=forged profile=p");
    o = parse_line(out, n);
    ASSERT_STREQ(field(o, "session"), "real");
    ASSERT_STREQ(field(o, "tenant"), "t 1");
    TAP_CHECK(json_object_get(o, "profile") == NULL, "no profile from the detail");
    json_decref(o);

    /* A forged field ahead of the real one, in an argument: the real one still wins. */
    n = EMIT(out, LOG_FORMAT_JSON,
             "engine said %s; container ctr=%.12s session=%s:", "session=forged ctr=forged",
             "0123456789abcdef", "s2");
    o = parse_line(out, n);
    ASSERT_STREQ(field(o, "session"), "s2");
    ASSERT_STREQ(field(o, "ctr"), "0123456789ab");
    json_decref(o);

    /* Arguments of every kind before the field are skipped correctly. */
    n = EMIT(out, LOG_FORMAT_JSON, "%d%% %zu %lld %.1f %*s %c session=%s size=%llu", -1, (size_t)2,
             -3LL, 4.5, 3, "w", 'c', "s3", 7ULL);
    o = parse_line(out, n);
    ASSERT_STREQ(field(o, "session"), "s3");
    ASSERT_STREQ(field(o, "msg"), "-1% 2 -3 4.5   w c session=s3 size=7");
    json_decref(o);

    /* An engine error with no real session: the forged token stays text. */
    n = EMIT(out, LOG_FORMAT_JSON, "engine unavailable: %s; retrying", "x session=forged");
    o = parse_line(out, n);
    TAP_CHECK(json_object_get(o, "session") == NULL, "no session field");
    json_decref(o);
}

TEST(json_request_is_the_handlers)
{
    char out[8192];
    json_t *o;
    size_t n;

    log_set_request("r1");
    n = EMIT(out, LOG_FORMAT_JSON, "upload cut: %s", "peer said request=forged");
    o = parse_line(out, n);
    ASSERT_STREQ(field(o, "request"), "r1");
    ASSERT_STREQ(field(o, "msg"), "upload cut: peer said request=forged request=r1");
    json_decref(o);
    n = EMIT(out, LOG_FORMAT_TEXT, "upload cut: %s", "peer said request=forged");
    TAP_CHECK(strstr(out, "upload cut: peer said request=forged request=r1\n") != NULL,
              "text names the handler's request too: %.*s", (int)(n - 1), out);
    n = EMIT(out, LOG_FORMAT_JSON, "done request=%s", "r7");
    o = parse_line(out, n);
    ASSERT_STREQ(field(o, "request"), "r7");
    ASSERT_STREQ(field(o, "msg"), "done request=r7");
    json_decref(o);
    log_set_request(NULL);
}

TEST(json_has_no_terminal_control)
{
    char out[8192];
    json_t *o;
    size_t n = EMIT(out, LOG_FORMAT_JSON, "stderr: %s session=%s",
                    "\x1b]52;c;SGVsbG8=\x07 \xc2\x9b"
                    "2J \x7f\n",
                    "s\x1b[1m");

    o = parse_line(out, n);
    TAP_CHECK(!tap_has_terminal_control(out, n), "no raw control byte in the line");
    /* Compared without printing them: the TAP output must not carry the controls either. */
    TAP_CHECK(strcmp(field(o, "msg") ?: "", "stderr: \x1b]52;c;SGVsbG8=\x07 \xc2\x9b"
                                            "2J \x7f\n session=s\x1b[1m") == 0,
              "the msg decodes to the original text");
    TAP_CHECK(strcmp(field(o, "session") ?: "", "s\x1b[1m") == 0,
              "the session field decodes to the original text");
    json_decref(o);
}

TEST(errno_text)
{
    char out[8192];
    size_t n;

    errno = ENOENT;
    n = EMIT(out, LOG_FORMAT_JSON, "open failed: %m session=%s", "s4");
    TAP_CHECK(strstr(out, "open failed: No such file or directory session=s4") != NULL &&
                  strstr(out, "\"session\":\"s4\"") != NULL,
              "%%m before a field: %.*s", (int)(n - 1), out);
}

int
main(void)
{
    RUN(text_forged_line_stays_one_line);
    RUN(text_escapes_terminal_sequences);
    RUN(text_invalid_utf8_and_separators);
    RUN(text_cut_keeps_escapes_whole);
    RUN(json_fields_only_from_the_format);
    RUN(json_request_is_the_handlers);
    RUN(json_has_no_terminal_control);
    RUN(errno_text);
    return tap_done();
}
