/* The client library: its pure parts, the SSE parser (src/client/sse.c: events split at every
 * byte, multi-line data, CR/LF/CRLF line ends with a CRLF split across reads, comments, the
 * default event name, events without data, the size bounds) and sp_client_metric_sum (samples
 * with and without labels, quoted label values, malformed lines). And sandpoolctl's output
 * helpers (cmd/sandpoolctl/util.c, linked in): what a tenant, a sandbox or the engine put in
 * a string reaches the operator's terminal as visible escapes, never as a control sequence
 * (issue 14, item 12). And the calls no program of the project makes (sp_client_request, the
 * tenant's session calls, file listing and deletion), against a local evhttp server: the method,
 * path, encoding, token and body each sends, and every status read back as util/errcode.c's
 * errno. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>
#include <jansson.h>

#include "client/sse.h"
#include "ctl.h"
#include "lib/http.h"
#include "sandpool/client.h"
#include "tap.h"
#include "util/errcode.h"
#include "util/parse.h"

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

/* ---- the calls against a local evhttp server ------------------------------------------------
 *
 * A child process serves 127.0.0.1:<port> with evhttp (the client blocks; the daemon's loop
 * cannot run beside it in one process). It answers every request with a description of it,
 * {"method", "uri", "auth", "type", "body"} (body: the text received), except:
 *   DELETE ...           204, no body (as the daemon answers deletes)
 *   GET /last            the description of the request before
 *   ANY /status/N        status N with the daemon's error body {"error": {"code", "message"}},
 *                        the code being util/errcode.c's for N
 *   ANY /plain/N         status N with a body that is not that JSON */

static json_t *last_seen;

static void
send_json(struct evhttp_request *req, int status, json_t *j)
{
    struct evbuffer *out = evbuffer_new();
    char *text = json_dumps(j, JSON_COMPACT);

    if (out == NULL || text == NULL || evbuffer_add(out, text, strlen(text)) < 0) {
        abort();
    }
    (void)evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                            "application/json");
    evhttp_send_reply(req, status, "X", out);
    evbuffer_free(out);
    free(text);
    json_decref(j);
}

static void
on_test_request(struct evhttp_request *req, void *arg)
{
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    struct evbuffer *body = evhttp_request_get_input_buffer(req);
    const char *uri = evhttp_request_get_uri(req), *auth = evhttp_find_header(in, "Authorization");
    const char *type = evhttp_find_header(in, "Content-Type");
    size_t n = evbuffer_get_length(body);
    json_t *seen = json_pack("{s:s, s:s, s:s, s:s, s:s%}", "method",
                             test_http_method_name(evhttp_request_get_command(req)), "uri", uri,
                             "auth", auth ? auth : "", "type", type ? type : "", "body",
                             n ? (const char *)evbuffer_pullup(body, -1) : "", n);
    uint64_t status = 0;

    if (seen == NULL) {
        abort();
    }
    if (strcmp(uri, "/last") == 0) {
        send_json(req, 200, last_seen ? json_incref(last_seen) : json_object());
        json_decref(seen);
        return;
    }
    json_decref(last_seen);
    last_seen = json_incref(seen);
    if (str_startswith(uri, "/status/") && parse_u64(uri + 8, &status) == 0) {
        const struct errcode *row = errcode_from_status((int)status);

        send_json(req, (int)status,
                  json_pack("{s:{s:s, s:s}}", "error", "code", row ? row->code : "teapot",
                            "message", "as asked"));
    } else if (str_startswith(uri, "/plain/") && parse_u64(uri + 7, &status) == 0) {
        struct evbuffer *out = evbuffer_new();

        (void)evbuffer_add_printf(out, "<html>%d</html>", (int)status);
        evhttp_send_reply(req, (int)status, "X", out);
        evbuffer_free(out);
    } else if (evhttp_request_get_command(req) == EVHTTP_REQ_DELETE) {
        evhttp_send_reply(req, 204, "No Content", NULL);
    } else {
        send_json(req, 200, json_incref(seen));
    }
    json_decref(seen);
}

static pid_t server_pid = -1;
static char server_url[64];

/* Starts the server child; false when the machine gives no loopback socket. */
static bool
server_start(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        return false;
    }
    (void)snprintf(server_url, sizeof(server_url), "http://127.0.0.1:%u/", ntohs(sa.sin_port));
    fflush(stdout);
    server_pid = fork();
    if (server_pid == 0) {
        struct event_base *base = event_base_new();
        struct evhttp *http = base ? evhttp_new(base) : NULL;

        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (http == NULL || evutil_make_socket_nonblocking(fd) < 0 ||
            evhttp_accept_socket(http, fd) < 0) {
            _exit(1);
        }
        evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                             EVHTTP_REQ_DELETE);
        evhttp_set_gencb(http, on_test_request, NULL);
        (void)event_base_dispatch(base);
        _exit(0);
    }
    (void)close(fd);
    return server_pid > 0;
}

static void
server_stop(void)
{
    if (server_pid > 0) {
        (void)kill(server_pid, SIGTERM);
        (void)waitpid(server_pid, NULL, 0);
        server_pid = -1;
    }
}

/* What the server saw: field of the echo j (borrowed), or "". */
static const char *
seen_field(const json_t *j, const char *field)
{
    const char *v = json_string_value(json_object_get(j, field));

    return v ? v : "";
}

/* The server's description of the request before this one (for 204 answers). */
static json_t *
last_request(struct sp_client *c)
{
    json_t *j = NULL;
    struct sp_error e = {0};

    ASSERT_OK(sp_client_request(c, "GET", "/last", NULL, &j, &e));
    return j;
}

static void
check_seen(json_t *j, const char *method, const char *uri, const char *body)
{
    ASSERT_STREQ(seen_field(j, "method"), method);
    ASSERT_STREQ(seen_field(j, "uri"), uri);
    ASSERT_STREQ(seen_field(j, "auth"), "Bearer tok-1");
    ASSERT_STREQ(seen_field(j, "body"), body);
    json_decref(j);
}

TEST(calls_send_what_they_say)
{
    struct sp_client *c = NULL;
    struct sp_error e = {0};
    json_t *j = NULL, *body = json_pack("{s:s}", "profile", "python");

    ASSERT_OK(sp_client_new(server_url, "tok-1", &c, &e));
    ASSERT_OK(sp_client_request(c, "GET", "/v1/anything?x=1", NULL, &j, &e));
    check_seen(j, "GET", "/v1/anything?x=1", "");
    j = NULL;
    ASSERT_OK(sp_client_request(c, "PUT", "/v1/admin/pools/p", body, &j, &e));
    ASSERT_STREQ(seen_field(j, "type"), "application/json");
    check_seen(j, "PUT", "/v1/admin/pools/p", "{\"profile\":\"python\"}");
    j = NULL;
    ASSERT_OK(sp_client_session_create(c, body, &j, &e));
    check_seen(j, "POST", "/v1/sessions", "{\"profile\":\"python\"}");
    j = NULL;
    ASSERT_OK(sp_client_session_create(c, NULL, &j, &e)); /* an empty POST, no form */
    ASSERT_STREQ(seen_field(j, "type"), "");
    check_seen(j, "POST", "/v1/sessions", "");
    j = NULL;
    ASSERT_OK(sp_client_session_list(c, &j, &e));
    check_seen(j, "GET", "/v1/sessions", "");
    j = NULL;
    ASSERT_OK(sp_client_session_get(c, "s 1/x", &j, &e)); /* an id is one segment */
    check_seen(j, "GET", "/v1/sessions/s%201%2Fx", "");
    j = NULL;
    ASSERT_OK(sp_client_session_restart(c, "abc", &j, &e));
    check_seen(j, "POST", "/v1/sessions/abc/restart", "");
    ASSERT_OK(sp_client_session_delete(c, "abc", &e));
    check_seen(last_request(c), "DELETE", "/v1/sessions/abc", "");
    j = NULL;
    ASSERT_OK(sp_client_file_list(c, "abc", NULL, &j, &e));
    check_seen(j, "GET", "/v1/sessions/abc/files", "");
    j = NULL;
    ASSERT_OK(sp_client_file_list(c, "abc", "dir/a b", &j, &e)); /* slashes stay in a dir */
    check_seen(j, "GET", "/v1/sessions/abc/files?dir=dir/a%20b", "");
    ASSERT_OK(sp_client_file_delete(c, "abc", "/workspace/d/x.txt", &e));
    check_seen(last_request(c), "DELETE", "/v1/sessions/abc/files/d/x.txt", "");
    ASSERT_OK(sp_client_file_delete(c, "abc", "d/y", &e));
    check_seen(last_request(c), "DELETE", "/v1/sessions/abc/files/d/y", "");
    json_decref(body);
    (void)sp_client_free(c);
}

TEST(refused_before_sending)
{
    struct sp_client *c = NULL;
    struct sp_error e = {0};
    json_t *j = NULL;

    ASSERT_OK(sp_client_new(server_url, "tok-1", &c, &e));
    ASSERT_OK(sp_client_request(c, "GET", "/first", NULL, &j, &e));
    json_decref(j);
    ASSERT_ERR(sp_client_file_delete(c, "abc", "/etc/passwd", &e), EINVAL);
    ASSERT_TRUE(strstr(e.message, "outside the workspace") != NULL);
    ASSERT_ERR(sp_client_session_get(c, "", &j, &e), EINVAL);
    ASSERT_ERR(sp_client_session_delete(c, "", &e), EINVAL);
    ASSERT_ERR(sp_client_file_list(c, "", "d", &j, &e), EINVAL);
    ASSERT_EQ_I(e.http_status, 0);
    j = last_request(c); /* none of them reached the server */
    ASSERT_STREQ(seen_field(j, "uri"), "/first");
    json_decref(j);
    (void)sp_client_free(c);
}

/* Each status reads back through util/errcode.c: the errno of its first row, the daemon's code
 * and message when the body is its error JSON, the status line otherwise. */
TEST(statuses_read_back)
{
    static const struct {
        int status, err;
    } cases[] = {
        {400, -EINVAL},     {401, -EACCES}, {403, -EPERM},     {404, -ENOENT},
        {405, -EOPNOTSUPP}, {409, -EBUSY},  {413, -EMSGSIZE},  {429, -EDQUOT},
        {500, -EREMOTEIO},  {503, -EAGAIN}, {504, -ETIMEDOUT}, {418, -EREMOTEIO},
    };
    struct sp_client *c = NULL;
    struct sp_error e = {0};
    json_t *j = NULL;

    ASSERT_OK(sp_client_new(server_url, NULL, &c, &e));
    for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
        const struct errcode *row = errcode_from_status(cases[i].status);
        char path[32];

        (void)snprintf(path, sizeof(path), "/status/%d", cases[i].status);
        ASSERT_EQ_I(sp_client_request(c, "POST", path, NULL, &j, &e), cases[i].err);
        ASSERT_EQ_I(e.http_status, cases[i].status);
        ASSERT_STREQ(e.code, row ? row->code : "teapot");
        ASSERT_TRUE(strstr(e.message, "as asked") != NULL);
    }
    ASSERT_EQ_I(sp_client_request(c, "GET", "/plain/503", NULL, &j, &e), -EAGAIN);
    ASSERT_STREQ(e.code, "");
    TAP_CHECK(strstr(e.message, "answered HTTP 503 (Service Unavailable)") != NULL, "%s",
              e.message);
    (void)sp_client_free(c);
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
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || !server_start()) {
        TAP_CHECK(false, "a curl and a server on 127.0.0.1 for the calls' tests");
        return tap_done();
    }
    RUN(calls_send_what_they_say);
    RUN(refused_before_sending);
    RUN(statuses_read_back);
    server_stop();
    curl_global_cleanup();
    return tap_done();
}
