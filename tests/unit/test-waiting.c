/* Unit tests for src/http/waiting.c: the byte budgets of calls waiting for a busy sandbox (per
 * tenant, in all) and the count of calls waiting for one sandbox. */
#include <errno.h>
#include <string.h>

#include "http/waiting.h"
#include "tap.h"

TEST(budgets)
{
    struct http_waiting_budget *b = http_waiting_new(100, 40);
    struct http_waiting w[6] = {0};
    struct http_waiting_stats st;
    struct err e = {0};

    ASSERT_OK(http_waiting_enter(b, &w[0], "a", "s1", 20, 0, &e));
    ASSERT_OK(http_waiting_enter(b, &w[1], "a", "s2", 20, 0, &e));
    ASSERT_ERR(http_waiting_enter(b, &w[2], "a", "s3", 1, 0, &e), EDQUOT);
    TAP_CHECK(strstr(e.msg, "queue.max_bytes_per_tenant") != NULL, "the refusal names the option");
    TAP_CHECK(!w[2].held, "a refused claim holds nothing");
    ASSERT_OK(http_waiting_enter(b, &w[2], "b", "s3", 40, 0, &e));
    ASSERT_OK(http_waiting_enter(b, &w[3], "c", "s4", 20, 0, &e));
    ASSERT_ERR(http_waiting_enter(b, &w[4], "d", "s5", 1, 0, &e), EDQUOT);
    TAP_CHECK(strstr(e.msg, "queue.max_bytes (100)") != NULL, "past the node's budget: named");
    http_waiting_get_stats(b, &st);
    ASSERT_EQ_U(st.bytes, 100);
    ASSERT_EQ_U(st.calls, 4);
    ASSERT_EQ_U(st.refused_total, 2);
    http_waiting_leave(b, &w[0]);
    http_waiting_leave(b, &w[0]); /* twice: nothing more */
    ASSERT_OK(http_waiting_enter(b, &w[4], "a", "s1", 20, 0, &e));
    http_waiting_get_stats(b, &st);
    ASSERT_EQ_U(st.bytes, 100);
    for (int i = 0; i < 5; i++) {
        http_waiting_leave(b, &w[i]);
    }
    http_waiting_get_stats(b, &st);
    TAP_CHECK(st.bytes == 0 && st.calls == 0, "all given back: nothing held");
    http_waiting_free(b);
}

TEST(per_sandbox)
{
    struct http_waiting_budget *b = http_waiting_new(1000, 1000);
    struct http_waiting w[4] = {0};
    struct err e = {0};

    ASSERT_OK(http_waiting_enter(b, &w[0], "a", "s", 1, 2, &e));
    ASSERT_OK(http_waiting_enter(b, &w[1], "a", "s", 1, 2, &e));
    ASSERT_ERR(http_waiting_enter(b, &w[2], "a", "s", 1, 2, &e), EDQUOT);
    TAP_CHECK(strstr(e.msg, "2 calls wait for this sandbox") != NULL,
              "the sandbox's queue is full");
    ASSERT_OK(http_waiting_enter(b, &w[2], "a", "s", 1, 0, &e)); /* no count asked: counted */
    ASSERT_EQ_U(http_waiting_of_sandbox(b, "s"), 3);
    ASSERT_OK(http_waiting_enter(b, &w[3], "a", "t", 1, 2, &e)); /* another sandbox */
    for (int i = 0; i < 4; i++) {
        http_waiting_leave(b, &w[i]);
    }
    ASSERT_EQ_U(http_waiting_of_sandbox(b, "s"), 0);
    http_waiting_free(b);
}

int
main(void)
{
    RUN(budgets);
    RUN(per_sandbox);
    return tap_done();
}
