/* Loop tests for the engine client and hijacked streams against a scripted fake engine on a
 * temporary unix socket: deadlines, exactly-one completion, cancellation, bounded answers, error
 * mapping, and the hijack pitfalls (stream bytes in the same read as the headers, error answers
 * instead of an upgrade, stdin held back until the status line). The real engine is exercised by
 * tests/integration/test-engine.c; the fake is tests/lib/fake-engine.c in its scripted mode. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include <event2/event.h>
#include <jansson.h>

#include "docker/api.h"
#include "docker/client.h"
#include "docker/hijack.h"
#include "lib/fake-engine.h"
#include "lib/loop.h"
#include "tap.h"

/* ---- completion recorders -------------------------------------------------------------------- */

struct done {
    bool fired;
    int calls;
    int r;
    char msg[192];
    char body[256];
};

static void
on_result(int r, json_t *result, const struct err *e, void *userdata)
{
    struct done *d = userdata;

    d->calls++;
    d->fired = true;
    d->r = r;
    (void)snprintf(d->msg, sizeof(d->msg), "%s", e ? e->msg : "");
    if (result != NULL) {
        char *s = json_dumps(result, JSON_COMPACT);

        (void)snprintf(d->body, sizeof(d->body), "%s", s ? s : "");
        free(s);
    }
}

static int fired_synchronously;

static void
on_result_sync_check(int r, json_t *result, const struct err *e, void *userdata)
{
    bool *starting = userdata;

    if (*starting) {
        fired_synchronously++;
    }
}

/* ---- tests ----------------------------------------------------------------------------------- */

TEST(ping_negotiates)
{
    struct event_base *base = event_base_new();
    struct fake_engine *f;
    struct docker_client *c;
    struct done d = {0};
    static const char ok[] = "HTTP/1.1 200 OK\r\nApi-Version: 1.43\r\nContent-Length: 2\r\n"
                             "\r\nOK";

    f = fake_engine_new(base);
    c = docker_client_new(base, fake_engine_socket(f), 2000);
    fake_engine_script(f, ok, 0, false);
    (void)docker_ping(c, on_result, &d);
    ASSERT_TRUE(loop_until(base, &d.fired, 3000));
    ASSERT_EQ_I(d.r, 0);
    ASSERT_EQ_U(docker_client_api_version(c), 1043);
    ASSERT_STREQ(docker_client_prefix(c), "/v1.43");
    ASSERT_TRUE(strstr(fake_engine_last_request(f), "GET /_ping HTTP/1.1") ==
                fake_engine_last_request(f));
    ASSERT_TRUE(strstr(fake_engine_last_request(f), "Host: docker") != NULL);
    docker_client_free(c);
    fake_engine_free(f);
    event_base_free(base);
}

TEST(ping_refuses_old_engine)
{
    struct event_base *base = event_base_new();
    struct fake_engine *f;
    struct docker_client *c;
    struct done d = {0};
    static const char old[] = "HTTP/1.1 200 OK\r\nApi-Version: 1.40\r\nContent-Length: 2\r\n"
                              "\r\nOK";

    f = fake_engine_new(base);
    c = docker_client_new(base, fake_engine_socket(f), 2000);
    fake_engine_script(f, old, 0, false);
    (void)docker_ping(c, on_result, &d);
    ASSERT_TRUE(loop_until(base, &d.fired, 3000));
    ASSERT_EQ_I(d.r, -EPROTONOSUPPORT);
    ASSERT_TRUE(strstr(d.msg, "1.40") != NULL);
    docker_client_free(c);
    fake_engine_free(f);
    event_base_free(base);
}

TEST(deadline_and_single_completion)
{
    struct event_base *base = event_base_new();
    struct fake_engine *f;
    struct docker_client *c;
    struct done d = {0};
    uint64_t t0;

    f = fake_engine_new(base);
    c = docker_client_new(base, fake_engine_socket(f), 300);
    fake_engine_script(f, NULL, 0, false); /* a wedged engine: accepts, never answers */
    t0 = time_now_ms();
    (void)docker_container_inspect(c, "abc", on_result, &d);
    ASSERT_TRUE(loop_until(base, &d.fired, 5000));
    ASSERT_EQ_I(d.r, -ETIMEDOUT);
    ASSERT_TRUE(time_now_ms() - t0 >= 250);
    loop_for(base, 200);
    ASSERT_EQ_I(d.calls, 1);
    docker_client_free(c);
    fake_engine_free(f);
    event_base_free(base);
}

TEST(no_engine)
{
    struct event_base *base = event_base_new();
    struct docker_client *c = docker_client_new(base, "/nonexistent/docker.sock", 2000);
    struct done d = {0};
    bool starting = true;

    fired_synchronously = 0;
    (void)docker_ping(c, on_result_sync_check, &starting);
    starting = false;
    (void)docker_ping(c, on_result, &d);
    ASSERT_TRUE(loop_until(base, &d.fired, 3000));
    ASSERT_TRUE(d.r == -ECONNREFUSED || d.r == -EIO);
    ASSERT_EQ_I(fired_synchronously, 0);
    docker_client_free(c);
    event_base_free(base);
}

TEST(errors_map_and_invalid_ids)
{
    struct event_base *base = event_base_new();
    struct fake_engine *f;
    struct docker_client *c;
    struct done d = {0}, bad = {0};
    static const char nf[] =
        "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
        "Content-Length: 39\r\n\r\n{\"message\":\"No such container: abc\"}\n\n\n";
    bool starting = true;

    f = fake_engine_new(base);
    c = docker_client_new(base, fake_engine_socket(f), 2000);
    fake_engine_script(f, nf, 0, false);
    (void)docker_container_inspect(c, "abc", on_result, &d);
    ASSERT_TRUE(loop_until(base, &d.fired, 3000));
    ASSERT_EQ_I(d.r, -ENOENT);
    ASSERT_STREQ(d.msg, "engine answered 404: No such container: abc");
    ASSERT_TRUE(strstr(fake_engine_last_request(f), "GET /v1.41/containers/abc/json") != NULL);

    fired_synchronously = 0;
    (void)docker_container_inspect(c, "../../etc", on_result_sync_check, &starting);
    (void)docker_container_remove(c, "a/b", on_result, &bad);
    starting = false;
    ASSERT_TRUE(loop_until(base, &bad.fired, 3000));
    ASSERT_EQ_I(bad.r, -EINVAL);
    ASSERT_EQ_I(fired_synchronously, 0);
    docker_client_free(c);
    fake_engine_free(f);
    event_base_free(base);
}

TEST(remove_is_idempotent)
{
    struct event_base *base = event_base_new();
    struct fake_engine *f;
    struct docker_client *c;
    struct done d = {0};
    static const char nf[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}";

    f = fake_engine_new(base);
    c = docker_client_new(base, fake_engine_socket(f), 2000);
    fake_engine_script(f, nf, 0, false);
    (void)docker_container_remove(c, "gone", on_result, &d);
    ASSERT_TRUE(loop_until(base, &d.fired, 3000));
    ASSERT_EQ_I(d.r, 0);
    ASSERT_TRUE(strstr(fake_engine_last_request(f), "DELETE /v1.41/containers/gone?force=1&v=1") !=
                NULL);
    docker_client_free(c);
    fake_engine_free(f);
    event_base_free(base);
}

TEST(create_warnings_fail_closed)
{
    struct event_base *base = event_base_new();
    struct fake_engine *f;
    struct docker_client *c;
    struct done d = {0};
    static const char wbody[] =
        "{\"Id\":\"abc123\",\"Warnings\":[\"Your kernel does not support pids limit capabilities.\"]}";
    char warn[512];

    (void)snprintf(warn, sizeof(warn),
                   "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\n\r\n%s",
                   strlen(wbody), wbody);
    json_t *body = json_pack("{s:s}", "Image", "x");

    f = fake_engine_new(base);
    c = docker_client_new(base, fake_engine_socket(f), 2000);
    fake_engine_script(f, warn, 0, false);
    (void)docker_container_create(c, "n1", body, on_result, &d);
    ASSERT_TRUE(loop_until(base, &d.fired, 3000));
    ASSERT_EQ_I(d.r, -EOPNOTSUPP);
    ASSERT_TRUE(strstr(d.msg, "pids limit") != NULL);
    ASSERT_TRUE(strstr(fake_engine_last_request(f), "Content-Type: application/json") != NULL);
    /* ...and the client removes the container it did not want. */
    loop_for(base, 300);
    ASSERT_TRUE(strstr(fake_engine_last_request(f), "DELETE /v1.41/containers/abc123") != NULL);
    json_decref(body);
    docker_client_free(c);
    fake_engine_free(f);
    event_base_free(base);
}

TEST(answer_too_large)
{
    struct event_base *base = event_base_new();
    struct fake_engine *f;
    struct docker_client *c;
    struct done d = {0};
    size_t n = 5u << 20;
    char *big = malloc(n + 128);
    int hl = snprintf(big, 128, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", n);

    memset(big + hl, ' ', n);
    f = fake_engine_new(base);
    c = docker_client_new(base, fake_engine_socket(f), 5000);
    fake_engine_script(f, big, (size_t)hl + n, false);
    (void)docker_container_inspect(c, "abc", on_result, &d);
    ASSERT_TRUE(loop_until(base, &d.fired, 5000));
    ASSERT_EQ_I(d.r, -EMSGSIZE);
    docker_client_free(c);
    fake_engine_free(f);
    free(big);
    event_base_free(base);
}

TEST(cancel_suppresses_callback)
{
    struct event_base *base = event_base_new();
    struct fake_engine *f;
    struct docker_client *c;
    struct done d = {0}, d2 = {0};
    struct docker_call *call;
    static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";

    f = fake_engine_new(base);
    c = docker_client_new(base, fake_engine_socket(f), 2000);
    fake_engine_script(f, ok, 0, false);
    call = docker_container_inspect(c, "abc", on_result, &d);
    docker_call_cancel(call);
    call = docker_container_inspect(c, "../x", on_result, &d); /* failing start, then cancel */
    docker_call_cancel(call);
    (void)docker_container_inspect(c, "abc", on_result, &d2);
    ASSERT_TRUE(loop_until(base, &d2.fired, 3000));
    loop_for(base, 100);
    ASSERT_EQ_I(d.calls, 0);
    ASSERT_EQ_I(d2.calls, 1);
    /* Freeing the client with calls in flight runs no callback either. */
    fake_engine_script(f, NULL, 0, false);
    (void)docker_container_inspect(c, "abc", on_result, &d);
    loop_for(base, 50);
    docker_client_free(c);
    ASSERT_EQ_I(d.calls, 0);
    fake_engine_free(f);
    event_base_free(base);
}

/* ---- hijack ---------------------------------------------------------------------------------- */

struct stream {
    bool open, closed;
    int r;
    char msg[192];
    struct buf out, err;
    struct docker_hijack *h;
    bool free_in_callback;
};

static int
on_hdata(struct docker_hijack *h, enum docker_stream s, const char *data, size_t n, void *ud)
{
    struct stream *st = ud;

    return buf_append(s == DOCKER_STREAM_STDERR ? &st->err : &st->out, data, n);
}

static void
on_hevent(struct docker_hijack *h, enum docker_hijack_event ev, int r, const struct err *e,
          void *ud)
{
    struct stream *st = ud;

    if (ev == DOCKER_HIJACK_OPEN) {
        st->open = true;
    } else if (ev == DOCKER_HIJACK_CLOSED) {
        st->closed = true;
        st->r = r;
        (void)snprintf(st->msg, sizeof(st->msg), "%s", e ? e->msg : "");
        if (st->free_in_callback) {
            st->h = docker_hijack_free(st->h);
        }
    }
}

static int
hijack_open(struct event_base *base, struct fake_engine *f, struct stream *st, unsigned timeout_ms)
{
    struct err e = {0};
    struct docker_hijack_opts o = {
        .socket_path = fake_engine_socket(f),
        .path = "/v1.41/exec/abc/start",
        .body = "{\"Detach\":false,\"Tty\":false}",
        .handshake_timeout_ms = timeout_ms,
        .on_data = on_hdata,
        .on_event = on_hevent,
        .userdata = st,
    };

    buf_init(&st->out, 1 << 20);
    buf_init(&st->err, 1 << 20);
    return docker_hijack_new(base, &o, &st->h, &e);
}

static void
stream_done(struct stream *st)
{
    docker_hijack_free(st->h);
    buf_done(&st->out);
    buf_done(&st->err);
}

TEST(hijack_bytes_with_headers)
{
    struct event_base *base = event_base_new();
    struct fake_engine *f;
    struct stream st = {0};
    /* Status line, headers and two frames in one write: the frames must not be lost. */
    static const char ans[] =
        "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
        "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
        "\x01\0\0\0\0\0\0\x03out\x02\0\0\0\0\0\0\x03"
        "err";

    f = fake_engine_new(base);
    fake_engine_script(f, ans, sizeof(ans) - 1, true);
    ASSERT_OK(hijack_open(base, f, &st, 2000));
    ASSERT_OK(docker_hijack_write(st.h, "early stdin", 11)); /* before the status line */
    ASSERT_TRUE(loop_until(base, &st.closed, 3000));
    ASSERT_TRUE(st.open);
    TAP_CHECK(st.r == 0, "clean end: %d '%s'", st.r, st.msg);
    ASSERT_STREQ(st.out.buf, "out");
    ASSERT_STREQ(st.err.buf, "err");
    ASSERT_EQ_U(fake_engine_stdin_before_answer(f), 0);
    ASSERT_TRUE(strstr(fake_engine_last_request(f), "POST /v1.41/exec/abc/start HTTP/1.1\r\n") !=
                NULL);
    ASSERT_TRUE(strstr(fake_engine_last_request(f), "Host: docker\r\n") != NULL);
    ASSERT_TRUE(strstr(fake_engine_last_request(f), "Upgrade: tcp\r\n") != NULL);
    ASSERT_TRUE(strstr(fake_engine_last_request(f), "Connection: Upgrade\r\n") != NULL);
    ASSERT_TRUE(strstr(fake_engine_last_request(f), "Content-Type: application/json\r\n") != NULL);
    stream_done(&st);
    fake_engine_free(f);
    event_base_free(base);
}

TEST(hijack_error_answer)
{
    struct event_base *base = event_base_new();
    struct fake_engine *f;
    struct stream st = {0};
    static const char ans[] = "HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\n"
                              "Content-Length: 53\r\n\r\n"
                              "{\"message\":\"Container abc is not running\"}          \n";

    f = fake_engine_new(base);
    fake_engine_script(f, ans, sizeof(ans) - 1, false);
    ASSERT_OK(hijack_open(base, f, &st, 2000));
    st.free_in_callback = true;
    ASSERT_TRUE(loop_until(base, &st.closed, 3000));
    ASSERT_TRUE(!st.open);
    ASSERT_EQ_I(st.r, -EBUSY);
    ASSERT_STREQ(st.msg, "engine answered 409: Container abc is not running");
    ASSERT_TRUE(st.h == NULL);
    stream_done(&st);
    fake_engine_free(f);
    event_base_free(base);
}

TEST(hijack_error_without_length)
{
    struct event_base *base = event_base_new();
    struct fake_engine *f;
    struct stream st = {0};
    /* An error answer delimited by the end of the connection still yields its message. */
    static const char ans[] = "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n\r\n"
                              "{\"message\":\"No such exec instance: abc\"}\n";

    f = fake_engine_new(base);
    fake_engine_script(f, ans, sizeof(ans) - 1, true);
    ASSERT_OK(hijack_open(base, f, &st, 2000));
    ASSERT_TRUE(loop_until(base, &st.closed, 3000));
    ASSERT_EQ_I(st.r, -ENOENT);
    ASSERT_STREQ(st.msg, "engine answered 404: No such exec instance: abc");
    stream_done(&st);
    fake_engine_free(f);
    event_base_free(base);
}

TEST(hijack_truncated_and_garbage)
{
    struct event_base *base = event_base_new();
    struct fake_engine *f;
    struct stream st = {0}, st2 = {0};
    static const char cut[] = "HTTP/1.1 101 UPGRADED\r\n\r\n\x01\0\0\0\0\0\0\x09"
                              "abc";
    static const char tty[] = "HTTP/1.1 101 UPGRADED\r\n\r\nhello from a tty stream\n";

    f = fake_engine_new(base);
    fake_engine_script(f, cut, sizeof(cut) - 1, true);
    ASSERT_OK(hijack_open(base, f, &st, 2000));
    ASSERT_TRUE(loop_until(base, &st.closed, 3000));
    ASSERT_EQ_I(st.r, -EPROTO);
    ASSERT_STREQ(st.out.buf, "abc");
    fake_engine_script(f, tty, sizeof(tty) - 1, false);
    ASSERT_OK(hijack_open(base, f, &st2, 2000));
    ASSERT_TRUE(loop_until(base, &st2.closed, 3000));
    ASSERT_EQ_I(st2.r, -EPROTO);
    stream_done(&st);
    stream_done(&st2);
    fake_engine_free(f);
    event_base_free(base);
}

TEST(hijack_handshake_deadline)
{
    struct event_base *base = event_base_new();
    struct fake_engine *f;
    struct stream st = {0};
    struct err e = {0};
    struct docker_hijack *h = NULL;
    struct docker_hijack_opts o = {.socket_path = "/nonexistent/x.sock", .path = "/x"};

    f = fake_engine_new(base);
    fake_engine_script(f, NULL, 0, false);
    ASSERT_OK(hijack_open(base, f, &st, 300));
    ASSERT_TRUE(loop_until(base, &st.closed, 3000));
    ASSERT_EQ_I(st.r, -ETIMEDOUT);
    ASSERT_ERR(docker_hijack_write(st.h, "x", 1), EPIPE);
    /* A socket that does not exist fails at once, with no callback. */
    o.on_data = on_hdata;
    o.on_event = on_hevent;
    ASSERT_TRUE(docker_hijack_new(base, &o, &h, &e) < 0);
    ASSERT_TRUE(h == NULL && strstr(e.msg, "/nonexistent/x.sock") != NULL);
    stream_done(&st);
    fake_engine_free(f);
    event_base_free(base);
}

int
main(void)
{
    (void)signal(SIGPIPE, SIG_IGN); /* as the daemon does: a closed peer is an error, not death */
    RUN(ping_negotiates);
    RUN(ping_refuses_old_engine);
    RUN(deadline_and_single_completion);
    RUN(no_engine);
    RUN(errors_map_and_invalid_ids);
    RUN(remove_is_idempotent);
    RUN(create_warnings_fail_closed);
    RUN(answer_too_large);
    RUN(cancel_suppresses_callback);
    RUN(hijack_bytes_with_headers);
    RUN(hijack_error_answer);
    RUN(hijack_error_without_length);
    RUN(hijack_truncated_and_garbage);
    RUN(hijack_handshake_deadline);
    return tap_done();
}
