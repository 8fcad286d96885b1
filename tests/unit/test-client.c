/* The client library's pure parts: the SSE parser (src/client/sse.c: events split at every
 * byte, multi-line data, CR/LF/CRLF line ends with a CRLF split across reads, comments, the
 * default event name, events without data, the size bounds) and sp_client_metric_sum (samples
 * with and without labels, quoted label values, malformed lines). And sandpoolctl's output
 * helpers (cmd/sandpoolctl/util.c, linked in): what a tenant, a sandbox or the engine put in
 * a string reaches the operator's terminal as visible escapes, never as a control sequence
 * (issue 14, item 12). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/sse.h"
#include "ctl.h"
#include "sandpool/client.h"
#include "tap.h"

struct seen {
    char log[4096];
    size_t n;
    int stop_at; /* return -ECANCELED at this event (1-based); 0 never */
};

static int
on_event(const struct client_sse_event *ev, void *userdata)
{
    struct seen *s = userdata;
    size_t used = strlen(s->log);

    s->n++;
    (void)snprintf(s->log + used, sizeof(s->log) - used, "[%s|%s|", ev->event, ev->id);
    for (size_t i = 0; i < ev->data_len; i++) { /* newlines as "\n": TAP lines stay lines */
        used = strlen(s->log);
        (void)snprintf(s->log + used, sizeof(s->log) - used, ev->data[i] == '\n' ? "\\n" : "%c",
                       ev->data[i]);
    }
    used = strlen(s->log);
    (void)snprintf(s->log + used, sizeof(s->log) - used, "]");
    return s->stop_at > 0 && (size_t)s->stop_at == s->n ? -ECANCELED : 0;
}

/* Feeds text in pieces of `step` bytes (0 = all at once). */
static int
feed(struct seen *s, const char *text, size_t step, size_t max)
{
    struct client_sse p;
    size_t n = strlen(text);
    int r = 0;

    client_sse_init(&p, max, on_event, s);
    for (size_t off = 0; off < n && r >= 0;) {
        size_t k = step == 0 ? n : MIN(step, n - off);

        r = client_sse_feed(&p, text + off, k);
        off += k;
    }
    if (r >= 0 && client_sse_pending(&p)) {
        r = 1; /* bytes of an unfinished event remain */
    }
    client_sse_done(&p);
    return r;
}

static const char stream[] = "id: 1\nevent: stdout\ndata: {\"text\":\"0\\n\"}\n\n"
                             ": a comment\r\n"
                             "event: stderr\r\ndata: a\r\ndata:b\r\ndata\r\n\r\n"
                             "data: plain\r\r"
                             "event: nodata\n\n"
                             "id: 7\nevent: done\ndata: {}\n\n";
static const char want[] = "[stdout|1|{\"text\":\"0\\n\"}][stderr|1|a\\nb\\n][message|1|plain]"
                           "[done|7|{}]";

TEST(every_split)
{
    for (size_t step = 0; step <= 7; step++) {
        struct seen s = {0};
        int r = feed(&s, stream, step, 1024);

        TAP_CHECK(r == 0 && strcmp(s.log, want) == 0, "pieces of %zu bytes: r=%d log=%s", step, r,
                  s.log);
    }
}

TEST(cut_stream_is_pending)
{
    struct seen s = {0};

    TAP_CHECK(feed(&s, "event: done\ndata: {\"a\"", 3, 1024) == 1 && s.n == 0,
              "an event without its blank line is not dispatched and is reported pending");
}

TEST(bounds)
{
    struct seen s = {0};
    char big[300];

    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ASSERT_ERR(feed(&s, big, 10, 100), EMSGSIZE);
    ASSERT_ERR(feed(&s, "data: 0123456789\ndata: 0123456789\ndata: 0123456789\n\n", 0, 30),
               EMSGSIZE);
    ASSERT_ERR(feed(&s,
                    "event: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
                    0, 1024),
               EPROTO);
}

TEST(callback_stops)
{
    struct seen s = {.stop_at = 2};

    ASSERT_ERR(feed(&s, stream, 0, 1024), ECANCELED);
    ASSERT_EQ_U(s.n, 2);
}

TEST(metric_sum)
{
    static const char text[] = "# HELP sandpool_executions_total Executions.\n"
                               "# TYPE sandpool_executions_total counter\n"
                               "sandpool_executions_total{status=\"ok\"} 5\n"
                               "sandpool_executions_total{status=\"er} \\\"x\"} 2\n"
                               "sandpool_executions_totally 100\n"
                               "sandpool_executions_started_total 9\n"
                               "sandpool_sessions 3";
    double v = -1;

    ASSERT_OK(sp_client_metric_sum(text, "sandpool_executions_total", &v));
    TAP_CHECK(v > 6.5 && v < 7.5,
              "labelled samples add up (a '}' and an escaped quote in a label): %g", v);
    ASSERT_OK(sp_client_metric_sum(text, "sandpool_sessions", &v));
    TAP_CHECK(v > 2.5 && v < 3.5, "an unlabelled sample on the last line, without a newline: %g",
              v);
    v = -1;
    ASSERT_ERR(sp_client_metric_sum(text, "sandpool_nope", &v), ENOENT);
    TAP_CHECK(v < -0.5, "ret untouched when absent");
    ASSERT_ERR(sp_client_metric_sum("m{a=\"b\" 1\n", "m", &v), EINVAL);
    ASSERT_ERR(sp_client_metric_sum("m one\n", "m", &v), EINVAL);
}

static const char hostile[] = "t\x1b]0;pwned\x07 c\x1b]52;c;SGVsbG8=\x07 \x1b[2J"
                              "\nx\xc2\x9b"
                              "1m\x7f\\ \xc3\xa9\xff\xe2\x80\xa8";

TEST(escape_cell)
{
    char out[256];
    size_t n = ctl_text_escape(out, sizeof(out), hostile, strlen(hostile), CTL_TEXT_CELL);

    ASSERT_STREQ(out,
                 "t\\x1b]0;pwned\\x07 c\\x1b]52;c;SGVsbG8=\\x07 \\x1b[2J\\nx\\u009b1m\\x7f\\\\ "
                 "\xc3\xa9\\xff\\u2028");
    ASSERT_EQ_U(n, strlen(out));
    TAP_CHECK(!tap_has_terminal_control(out, n) && strchr(out, '\n') == NULL,
              "one line, no control");
    ASSERT_EQ_U(ctl_text_escape(out, sizeof(out), "plain text: caf\xc3\xa9", 17, CTL_TEXT_CELL),
                17);
    ASSERT_STREQ(out, "plain text: caf\xc3\xa9");
}

TEST(escape_lines)
{
    char out[256];
    static const char text[] = "a\tb\r\nc\\d \x1b[31mred\x1b[0m \xc2\x85\n\x08";

    (void)ctl_text_escape(out, sizeof(out), text, strlen(text), CTL_TEXT_LINES);
    /* Compared without printing: the TAP output must stay one line per check. */
    TAP_CHECK(strcmp(out, "a\tb\r\nc\\d \\x1b[31mred\\x1b[0m \\u0085\n\\x08") == 0,
              "newline, tab and CR kept, the backslash as it is, ESC, C1 and BS escaped");
}

TEST(escape_cut)
{
    char out[9];

    /* Only whole escapes and characters fit; the result is always terminated. */
    ASSERT_EQ_U(ctl_text_escape(out, sizeof(out), "ab\x1b\x1b", 4, CTL_TEXT_CELL), 6);
    ASSERT_STREQ(out, "ab\\x1b");
    ASSERT_EQ_U(ctl_text_escape(out, sizeof(out), "abcdefg\xc3\xa9", 9, CTL_TEXT_CELL), 7);
    ASSERT_STREQ(out, "abcdefg");
    ASSERT_EQ_U(ctl_text_escape(out, 1, "abc", 3, CTL_TEXT_CELL), 0);
    ASSERT_STREQ(out, "");
    ASSERT_EQ_U(ctl_text_escape(out, sizeof(out), "a\xe2\x82", 3, CTL_TEXT_CELL), 5);
    ASSERT_STREQ(out, "a\\xe2");
}

/* Terminal columns from a to b: characters, not bytes (continuation bytes do not count). */
static size_t
columns(const char *a, const char *b)
{
    size_t n = 0;

    for (; a < b; a++) {
        n += ((unsigned char)*a & 0xC0) != 0x80;
    }
    return n;
}

TEST(table_cells_are_escaped)
{
    static const char *const headers[] = {"ID", "META", "END"};
    const char *row[] = {"s1", hostile, "e"};
    struct ctl_table *t = ctl_table_new(3, headers);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    const char *line2;

    ctl_table_add(t, row);
    ctl_table_print(t, f, 0, 0);
    (void)fclose(f);
    TAP_CHECK(!tap_has_terminal_control(text, len), "no control byte in the table");
    TAP_CHECK(strstr(text, "t\\x1b]0;pwned\\x07 c\\x1b]52;c;SGVsbG8=\\x07 \\x1b[2J\\nx\\u009b") !=
                  NULL,
              "visible escapes");
    line2 = strchr(text, '\n');
    TAP_CHECK(line2 != NULL && strchr(line2 + 1, '\n') == text + len - 1, "two lines");
    /* "END" and "e" start in the same column: widths are those of the escaped text. */
    TAP_CHECK(line2 != NULL && columns(text, strstr(text, "END")) ==
                                   columns(line2 + 1, strstr(line2, "  e") + 2),
              "aligned");
    (void)ctl_table_free(t);
    free(text);
}

TEST(println_escapes)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    ctl_println(f, "  %s=%s", "k\x1b]52;c;SGVsbG8=\x07", "v\n\x1b[2J");
    (void)fclose(f);
    TAP_CHECK(strcmp(text, "  k\\x1b]52;c;SGVsbG8=\\x07=v\\n\\x1b[2J\n") == 0,
              "arguments escaped, one newline at the end: %.*s", (int)(len - 1), text);
    free(text);
}

int
main(void)
{
    RUN(every_split);
    RUN(cut_stream_is_pending);
    RUN(bounds);
    RUN(callback_stops);
    RUN(metric_sum);
    RUN(escape_cell);
    RUN(escape_lines);
    RUN(escape_cut);
    RUN(table_cells_are_escaped);
    RUN(println_escapes);
    return tap_done();
}
