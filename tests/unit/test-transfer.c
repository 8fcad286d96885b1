/* Loop tests for the libcurl transfer engine (src/util/transfer.c) against the scripted fake
 * engine (tests/lib/fake-engine.h) on a temporary unix socket: exactly one on_done and one
 * on_free whichever way a transfer goes, never from the starting call and never after a cancel
 * (also from inside its own callbacks), the deadline, the bounded answer (failed, or cut for an
 * error answer), header lines and the head, bytes held and resumed both ways, bytes handed over
 * outside libcurl (and a refusal that ends the transfer), and an engine freed with transfers in
 * flight. The three callers are tested through their own suites (test-docker-client, the S3
 * interop suite, the cluster suites). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "lib/fake-engine.h"
#include "lib/loop.h"
#include "tap.h"
#include "util/transfer.h"

#define URL "http://fake/x"

static const char ok_answer[] = "HTTP/1.1 200 OK\r\nApi-Version:   1.43  \r\nContent-Length: 10\r\n"
                                "\r\n0123456789";

/* What a transfer's callbacks saw. */
struct rec {
    struct transfer *t;
    bool starting; /* inside the call that started it */
    bool done;     /* on_done ran */
    int dones;     /* how many times */
    int frees;     /* on_free: how many times */
    int r;         /* on_done's */
    long status;   /* on_done's transfer_status() */
    CURLcode code; /* on_done's transfer_curl_code() */
    int sync;      /* callbacks that ran while starting */
    char answer[64];
    /* headers, head */
    char api_version[16];
    int heads;
    long head_status;
    /* streamed bytes */
    enum transfer_data verdict; /* what on_data answers (HOLD only once) */
    char data[64];
    size_t data_len;
    int holds;
    int buffered_calls;
    int refuse; /* on_buffered answers this */
    bool cancel_in_done, cancel_in_buffered;
    /* the upload */
    const char *body;
    size_t body_off;
    bool body_wait; /* read_body says TRANSFER_BODY_WAIT until cleared */
    int body_waits;
};

static void
on_done(struct transfer *t, int r, void *userdata)
{
    struct rec *k = userdata;
    const struct buf *a = transfer_answer(t);

    k->sync += k->starting;
    k->done = true;
    k->dones++;
    k->r = r;
    k->status = transfer_status(t);
    k->code = transfer_curl_code(t);
    (void)snprintf(k->answer, sizeof(k->answer), "%.*s", (int)a->len, a->buf);
    if (k->cancel_in_done) {
        transfer_cancel(t); /* its own: must not free it twice */
    }
}

static void
on_free(void *userdata)
{
    struct rec *k = userdata;

    k->frees++;
}

static void
on_header(struct transfer *t, const char *name, size_t name_len, const char *v, size_t vlen,
          void *userdata)
{
    struct rec *k = userdata;

    if (name_len == 11 && strncmp(name, "Api-Version", 11) == 0) {
        (void)snprintf(k->api_version, sizeof(k->api_version), "%.*s", (int)vlen, v);
    }
}

static void
on_head(struct transfer *t, long status, void *userdata)
{
    struct rec *k = userdata;

    k->heads++;
    k->head_status = status;
}

static enum transfer_data
on_data(struct transfer *t, const char *data, size_t n, void *userdata)
{
    struct rec *k = userdata;

    if (k->verdict == TRANSFER_DATA_HOLD) {
        k->holds++;
        k->verdict = TRANSFER_DATA_TAKEN;
        return TRANSFER_DATA_HOLD; /* these come again after the resume */
    }
    if (k->verdict == TRANSFER_DATA_BUFFER) {
        return TRANSFER_DATA_BUFFER;
    }
    if (k->data_len + n <= sizeof(k->data)) {
        memcpy(k->data + k->data_len, data, n);
        k->data_len += n;
    }
    return TRANSFER_DATA_TAKEN;
}

static int
on_buffered(struct transfer *t, struct buf *answer, void *userdata)
{
    struct rec *k = userdata;

    k->buffered_calls++;
    if (k->data_len + answer->len <= sizeof(k->data)) {
        memcpy(k->data + k->data_len, answer->buf, answer->len);
        k->data_len += answer->len;
    }
    buf_consume(answer, answer->len);
    if (k->cancel_in_buffered) {
        transfer_cancel(t);
    }
    return k->refuse;
}

static size_t
read_body(struct transfer *t, char *buf, size_t n, void *userdata)
{
    struct rec *k = userdata;
    size_t left = strlen(k->body) - k->body_off;

    if (k->body_wait) {
        k->body_waits++;
        return TRANSFER_BODY_WAIT;
    }
    n = n < left ? n : left;
    memcpy(buf, k->body + k->body_off, n);
    k->body_off += n;
    return n;
}

static const struct transfer_ops plain_ops = {
    .on_header = on_header,
    .on_head = on_head,
    .on_done = on_done,
    .on_free = on_free,
};

static const struct transfer_ops data_ops = {
    .on_data = on_data,
    .on_done = on_done,
    .on_free = on_free,
};

static const struct transfer_ops buffered_ops = {
    .on_buffered = on_buffered,
    .on_done = on_done,
    .on_free = on_free,
};

static const struct transfer_ops upload_ops = {
    .read_body = read_body,
    .on_done = on_done,
    .on_free = on_free,
};

/* Starts a GET of URL over the fake's socket (or over socket when not NULL). */
static struct transfer *
start(struct transfer_engine *x, const struct fake_engine *f, const struct transfer_ops *ops,
      struct rec *k, size_t max_answer, bool cut_errors, unsigned total_ms)
{
    k->t = transfer_new(x, &(struct transfer_opts){
                               .url = URL,
                               .unix_socket = fake_engine_socket(f),
                               .connect_ms = 2000,
                               .total_ms = total_ms,
                               .max_answer = max_answer,
                               .cut_errors = cut_errors,
                               .ops = ops,
                               .userdata = k,
                           });
    k->starting = true;
    transfer_set_method(k->t, "GET", NULL);
    transfer_start(k->t);
    k->starting = false;
    return k->t;
}

struct fixture {
    struct event_base *base;
    struct fake_engine *f;
    struct transfer_engine *x;
};

static void
setup(struct fixture *fx, const char *answer, bool close_after)
{
    fx->base = event_base_new();
    fx->f = fake_engine_new(fx->base);
    fx->x = transfer_engine_new(fx->base, 4);
    fake_engine_script(fx->f, answer, 0, close_after);
}

static void
teardown(struct fixture *fx)
{
    transfer_engine_free(fx->x);
    fake_engine_free(fx->f);
    event_base_free(fx->base);
}

/* ---- tests ----------------------------------------------------------------------------------- */

TEST(answer_headers_and_one_completion)
{
    struct fixture fx;
    struct rec k = {0};

    setup(&fx, ok_answer, false);
    (void)start(fx.x, fx.f, &plain_ops, &k, 64, false, 2000);
    ASSERT_TRUE(loop_until(fx.base, &k.done, 3000));
    ASSERT_EQ_I(k.r, 0);
    ASSERT_EQ_I(k.status, 200);
    ASSERT_STREQ(k.answer, "0123456789");
    ASSERT_STREQ(k.api_version, "1.43"); /* the blanks around the value are not its */
    ASSERT_EQ_I(k.heads, 1);
    ASSERT_EQ_I(k.head_status, 200);
    loop_for(fx.base, 100);
    ASSERT_EQ_I(k.dones, 1);
    ASSERT_EQ_I(k.frees, 1);
    ASSERT_EQ_I(k.sync, 0);
    teardown(&fx);
}

TEST(headers_sent)
{
    struct fixture fx;
    struct rec k = {0};
    struct buf body = BUF_INIT(16);

    setup(&fx, ok_answer, false);
    ASSERT_OK(buf_puts(&body, "{\"a\":1}"));
    k.t = transfer_new(fx.x, &(struct transfer_opts){
                                 .url = URL,
                                 .unix_socket = fake_engine_socket(fx.f),
                                 .max_answer = 64,
                                 .ops = &plain_ops,
                                 .userdata = &k,
                             });
    transfer_add_header(k.t, "X-Test: yes");
    transfer_add_header(k.t, "Expect:");
    transfer_set_method(k.t, "PUT", &body);
    ASSERT_EQ_U(body.len, 0); /* moved into the transfer */
    transfer_start(k.t);
    ASSERT_TRUE(loop_until(fx.base, &k.done, 3000));
    ASSERT_EQ_I(k.r, 0);
    ASSERT_TRUE(strncmp(fake_engine_last_request(fx.f), "PUT /x HTTP/1.1", 15) == 0);
    ASSERT_TRUE(strstr(fake_engine_last_request(fx.f), "X-Test: yes") != NULL);
    ASSERT_TRUE(strstr(fake_engine_last_request(fx.f), "Content-Length: 7") != NULL);
    ASSERT_TRUE(strstr(fake_engine_last_request(fx.f), "Expect") == NULL);
    buf_done(&body);
    teardown(&fx);
}

TEST(failed_start_ends_on_the_next_turn)
{
    struct fixture fx;
    struct rec k = {0};

    setup(&fx, ok_answer, false);
    k.t = transfer_new(fx.x, &(struct transfer_opts){.ops = &plain_ops, .userdata = &k});
    k.starting = true;
    transfer_fail(k.t, -ENAMETOOLONG);
    k.starting = false;
    ASSERT_TRUE(!k.done);
    ASSERT_TRUE(loop_until(fx.base, &k.done, 1000));
    ASSERT_EQ_I(k.r, -ENAMETOOLONG);
    ASSERT_EQ_I(k.status, 0);
    ASSERT_EQ_I(k.sync, 0);
    ASSERT_EQ_I(k.frees, 1);
    ASSERT_EQ_I(fake_engine_requests(fx.f), 0);
    teardown(&fx);
}

TEST(nobody_listens)
{
    struct event_base *base = event_base_new();
    struct transfer_engine *x = transfer_engine_new(base, 0);
    struct rec k = {0};

    k.t = transfer_new(x, &(struct transfer_opts){
                              .url = URL,
                              .unix_socket = "/nonexistent/engine.sock",
                              .ops = &plain_ops,
                              .userdata = &k,
                          });
    k.starting = true;
    transfer_start(k.t);
    k.starting = false;
    ASSERT_TRUE(loop_until(base, &k.done, 3000));
    ASSERT_EQ_I(k.r, -ECONNREFUSED);
    ASSERT_EQ_I(k.code, CURLE_COULDNT_CONNECT);
    ASSERT_EQ_I(k.sync, 0);
    ASSERT_EQ_I(k.frees, 1);
    transfer_engine_free(x);
    event_base_free(base);
}

TEST(deadline)
{
    struct fixture fx;
    struct rec k = {0};
    uint64_t t0 = time_now_ms();

    setup(&fx, NULL, false); /* accepted, never answered */
    (void)start(fx.x, fx.f, &plain_ops, &k, 64, false, 300);
    ASSERT_TRUE(loop_until(fx.base, &k.done, 3000));
    ASSERT_EQ_I(k.r, -ETIMEDOUT);
    ASSERT_TRUE(time_now_ms() - t0 >= 250);
    loop_for(fx.base, 100);
    ASSERT_EQ_I(k.dones, 1);
    ASSERT_EQ_I(k.frees, 1);
    teardown(&fx);
}

TEST(broken_connection)
{
    struct fixture fx;
    struct rec k = {0};
    static const char cut[] = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part";

    setup(&fx, cut, true);
    (void)start(fx.x, fx.f, &plain_ops, &k, 256, false, 2000);
    ASSERT_TRUE(loop_until(fx.base, &k.done, 3000));
    ASSERT_EQ_I(k.r, -ECONNRESET);
    teardown(&fx);
}

TEST(answer_bounds)
{
    struct fixture fx;
    struct rec big = {0}, cut = {0}, fail = {0};
    static const char error_answer[] = "HTTP/1.1 500 Oops\r\nContent-Length: 10\r\n\r\n0123456789";

    /* A 2xx answer past the bound fails the transfer. */
    setup(&fx, ok_answer, false);
    (void)start(fx.x, fx.f, &plain_ops, &big, 4, true, 2000);
    ASSERT_TRUE(loop_until(fx.base, &big.done, 3000));
    ASSERT_EQ_I(big.r, -EMSGSIZE);
    ASSERT_EQ_I(big.frees, 1);
    /* An error answer is cut there when asked, and fails when not. */
    fake_engine_script(fx.f, error_answer, 0, false);
    (void)start(fx.x, fx.f, &plain_ops, &cut, 4, true, 2000);
    ASSERT_TRUE(loop_until(fx.base, &cut.done, 3000));
    ASSERT_EQ_I(cut.r, 0);
    ASSERT_EQ_I(cut.status, 500);
    ASSERT_STREQ(cut.answer, "0123");
    (void)start(fx.x, fx.f, &plain_ops, &fail, 4, false, 2000);
    ASSERT_TRUE(loop_until(fx.base, &fail.done, 3000));
    ASSERT_EQ_I(fail.r, -EMSGSIZE);
    teardown(&fx);
}

TEST(cancel)
{
    struct fixture fx;
    struct rec active = {0}, failed = {0}, own = {0};

    setup(&fx, NULL, false);
    /* In flight: no on_done, on_free at once. */
    (void)start(fx.x, fx.f, &plain_ops, &active, 64, false, 0);
    loop_for(fx.base, 50);
    transfer_cancel(active.t);
    ASSERT_EQ_I(active.frees, 1);
    /* Ended but not told yet (a failed start): no on_done either. */
    failed.t = transfer_new(fx.x, &(struct transfer_opts){.ops = &plain_ops, .userdata = &failed});
    transfer_fail(failed.t, -EIO);
    transfer_cancel(failed.t);
    ASSERT_EQ_I(failed.frees, 1);
    /* From inside its own on_done: freed once, after it. */
    fake_engine_script(fx.f, ok_answer, 0, false);
    own.cancel_in_done = true;
    (void)start(fx.x, fx.f, &plain_ops, &own, 64, false, 2000);
    ASSERT_TRUE(loop_until(fx.base, &own.done, 3000));
    loop_for(fx.base, 100);
    ASSERT_EQ_I(active.dones + failed.dones, 0);
    ASSERT_EQ_I(own.dones, 1);
    ASSERT_EQ_I(own.frees, 1);
    transfer_cancel(NULL);
    teardown(&fx);
}

TEST(held_bytes_come_again)
{
    struct fixture fx;
    struct rec k = {0};

    setup(&fx, ok_answer, false);
    k.verdict = TRANSFER_DATA_HOLD;
    (void)start(fx.x, fx.f, &data_ops, &k, 0, false, 2000);
    loop_for(fx.base, 200);
    ASSERT_EQ_I(k.holds, 1);
    ASSERT_TRUE(!k.done); /* paused: nothing more comes */
    transfer_resume(k.t);
    ASSERT_TRUE(loop_until(fx.base, &k.done, 3000));
    ASSERT_EQ_I(k.r, 0);
    ASSERT_EQ_U(k.data_len, 10);
    ASSERT_TRUE(memcmp(k.data, "0123456789", 10) == 0);
    ASSERT_STREQ(k.answer, ""); /* nothing went to the buffer */
    teardown(&fx);
}

TEST(data_to_the_buffer)
{
    struct fixture fx;
    struct rec k = {0};

    setup(&fx, ok_answer, false);
    k.verdict = TRANSFER_DATA_BUFFER;
    (void)start(fx.x, fx.f, &data_ops, &k, 64, false, 2000);
    ASSERT_TRUE(loop_until(fx.base, &k.done, 3000));
    ASSERT_EQ_I(k.r, 0);
    ASSERT_EQ_U(k.data_len, 0);
    ASSERT_STREQ(k.answer, "0123456789");
    teardown(&fx);
}

TEST(buffered_bytes_outside_libcurl)
{
    struct fixture fx;
    struct rec k = {0}, refused = {0}, cancelled = {0};

    setup(&fx, ok_answer, false);
    (void)start(fx.x, fx.f, &buffered_ops, &k, 64, false, 2000);
    ASSERT_TRUE(loop_until(fx.base, &k.done, 3000));
    ASSERT_EQ_I(k.r, 0);
    ASSERT_TRUE(k.buffered_calls >= 1);
    ASSERT_EQ_U(k.data_len, 10);
    ASSERT_STREQ(k.answer, ""); /* all consumed before the end */
    /* The consumer's refusal ends the transfer with its errno. */
    refused.refuse = -EPROTO;
    (void)start(fx.x, fx.f, &buffered_ops, &refused, 64, false, 2000);
    ASSERT_TRUE(loop_until(fx.base, &refused.done, 3000));
    ASSERT_EQ_I(refused.r, -EPROTO);
    ASSERT_EQ_I(refused.frees, 1);
    /* A cancel from inside on_buffered: no on_done, freed once. */
    cancelled.cancel_in_buffered = true;
    (void)start(fx.x, fx.f, &buffered_ops, &cancelled, 64, false, 2000);
    loop_for(fx.base, 300);
    ASSERT_TRUE(cancelled.buffered_calls >= 1);
    ASSERT_EQ_I(cancelled.dones, 0);
    ASSERT_EQ_I(cancelled.frees, 1);
    teardown(&fx);
}

TEST(upload_waits_for_its_body)
{
    struct fixture fx;
    struct rec k = {0};

    setup(&fx, ok_answer, false);
    k.body = "hello";
    k.body_wait = true;
    k.t = transfer_new(fx.x, &(struct transfer_opts){
                                 .url = URL,
                                 .unix_socket = fake_engine_socket(fx.f),
                                 .max_answer = 64,
                                 .ops = &upload_ops,
                                 .userdata = &k,
                             });
    transfer_add_header(k.t, "Expect:");
    transfer_upload(k.t, "POST", 5);
    transfer_start(k.t);
    loop_for(fx.base, 200);
    ASSERT_TRUE(k.body_waits >= 1);
    ASSERT_TRUE(!k.done);
    ASSERT_EQ_I(fake_engine_requests(fx.f), 0); /* the body is not whole yet */
    k.body_wait = false;
    transfer_body_ready(k.t);
    ASSERT_TRUE(loop_until(fx.base, &k.done, 3000));
    ASSERT_EQ_I(k.r, 0);
    ASSERT_EQ_I(fake_engine_requests(fx.f), 1);
    ASSERT_TRUE(strncmp(fake_engine_last_request(fx.f), "POST /x HTTP/1.1", 16) == 0);
    ASSERT_TRUE(strstr(fake_engine_last_request(fx.f), "Content-Length: 5") != NULL);
    teardown(&fx);
}

TEST(engine_freed_in_flight)
{
    struct fixture fx;
    struct rec a = {0}, b = {0}, c = {0};

    setup(&fx, NULL, false);
    (void)start(fx.x, fx.f, &plain_ops, &a, 64, false, 0);
    (void)start(fx.x, fx.f, &plain_ops, &b, 64, false, 0);
    transfer_last_words(b.t); /* a few turns to be sent; its answer is never read */
    c.t = transfer_new(fx.x, &(struct transfer_opts){.ops = &plain_ops, .userdata = &c});
    transfer_fail(c.t, -EIO);
    ASSERT_TRUE(loop_until(fx.base, &c.done, 1000)); /* ends on the next turn */
    ASSERT_EQ_I(c.dones, 1);
    transfer_engine_free(fx.x);
    fx.x = NULL;
    ASSERT_EQ_I(a.dones + b.dones, 0);
    ASSERT_EQ_I(a.frees, 1);
    ASSERT_EQ_I(b.frees, 1);
    ASSERT_EQ_I(c.frees, 1);
    teardown(&fx);
}

int
main(void)
{
    (void)signal(SIGPIPE, SIG_IGN);
    RUN(answer_headers_and_one_completion);
    RUN(headers_sent);
    RUN(failed_start_ends_on_the_next_turn);
    RUN(nobody_listens);
    RUN(deadline);
    RUN(broken_connection);
    RUN(answer_bounds);
    RUN(cancel);
    RUN(held_bytes_come_again);
    RUN(data_to_the_buffer);
    RUN(buffered_bytes_outside_libcurl);
    RUN(upload_waits_for_its_body);
    RUN(engine_freed_in_flight);
    return tap_done();
}
