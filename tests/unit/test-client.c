/* The client library's pure parts: the SSE parser (src/client/sse.c: events split at every
 * byte, multi-line data, CR/LF/CRLF line ends with a CRLF split across reads, comments, the
 * default event name, events without data, the size bounds) and sp_client_metric_sum (samples
 * with and without labels, quoted label values, malformed lines). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "client/sse.h"
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

int
main(void)
{
    RUN(every_split);
    RUN(cut_stream_is_pending);
    RUN(bounds);
    RUN(callback_stops);
    RUN(metric_sum);
    return tap_done();
}
