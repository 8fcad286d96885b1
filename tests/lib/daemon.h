/* The whole daemon in-process for unit tests of the HTTP edge (REST, MCP, E2B, forwarding): the
 * real server object (src/server.h, server_new_on()) on the test's event_base, against a fake
 * engine (whose containers run fake kernels) and a fake Redis (tests/lib/fake-*.h), listening
 * on a unix socket in a temporary directory, node id "self", the admin token TEST_TOKEN_ADM, tenant
 * "a" (token TEST_TOKEN_A, E2B key TEST_E2B_KEY_A) and "b" (TEST_TOKEN_B), one profile "py" (1
 * warm, 4 at most).
 *
 * Clients are libcurl easy handles run on a thread of their own (curl_easy_perform blocks), while
 * the test's thread runs the loop the daemon and the fakes share until the call is over; a call
 * has a deadline of its own (TEST_CALL_MS, or the call's). Nothing here sleeps a fixed time.
 * Loop context: the test's thread. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/fake-engine.h"
#include "lib/fake-redis.h"

#define TEST_TOKEN_A   "tok-a"
#define TEST_TOKEN_B   "tok-b"
#define TEST_TOKEN_ADM "tok-admin"
#define TEST_E2B_KEY_A "e2b_0123456789abcdef0123456789abcdef01234567"
#define TEST_PREFIX    "sandpool:" /* redis.prefix (the default) */
#define TEST_CALL_MS   15000u

struct event_base;
struct server;

struct test_daemon {
    struct event_base *base;
    struct fake_engine *fe;
    struct fake_redis *fr;
    struct server *s;
    char dir[64];
    char sock[108];
};

/* Starts the daemon with extra_json appended to the top level of its configuration (", \"k\":
 * ..." or ""), and waits until /readyz answers 200 (warm pool, Redis, the node registry read).
 * Bails out (exit 1) when it does not come up. */
void test_daemon_start(struct test_daemon *d, const char *extra_json);
void test_daemon_stop(struct test_daemon *d);

struct test_call {
    /* in */
    const char *method; /* "GET" when NULL */
    const char *path;   /* "/v1/..." */
    const char *body;   /* NULL: none */
    const char *headers[8];
    unsigned max_ms; /* 0: TEST_CALL_MS */
    /* out */
    int curl_rc; /* CURLE_OK, or why the call failed (the connection broke, the deadline) */
    long status;
    char *head; /* the answer's header block */
    char *resp; /* its body, NUL-terminated */
    size_t resp_len;
    uint64_t ms; /* how long it took */
    char hdr[512];
};

/* Runs c against d, running d's loop until it is over. Returns c->status (0 when no answer). */
long test_daemon_call(struct test_daemon *d, struct test_call *c);
/* The value of the answer's header name (case-insensitive), or NULL: in a buffer of c's. */
const char *test_call_header(struct test_call *c, const char *name);
void test_call_done(struct test_call *c);
/* Runs the loop until cond(arg) or ms pass. Returns cond(arg). */
bool test_daemon_until(struct test_daemon *d, bool (*cond)(void *arg), void *arg, unsigned ms);
