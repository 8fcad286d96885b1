/* Unit tests of the sandbox uid allocator (src/pool/uids.c). */
#include <errno.h>

#include "pool/pool.h"
#include "tap.h"

TEST(take_and_release)
{
    struct pool_uids *u = pool_uids_new(2000000, 6); /* three pairs */
    uint32_t a = 0, b = 0, c = 0, d = 0;

    ASSERT_OK(pool_uids_take(u, &a));
    ASSERT_OK(pool_uids_take(u, &b));
    ASSERT_OK(pool_uids_take(u, &c));
    TAP_CHECK(a == 2000000 && b == 2000002 && c == 2000004, "pairs in order: %u %u %u", a, b, c);
    ASSERT_ERR(pool_uids_take(u, &d), ENOSPC);
    TAP_CHECK(d == 0, "ret_uid untouched on failure");
    pool_uids_release(u, b);
    ASSERT_OK(pool_uids_take(u, &d));
    TAP_CHECK(d == b, "a freed pair is taken again (%u)", d);
    ASSERT_EQ_U(pool_uids_used(u), 3);
    pool_uids_release(u, a);
    pool_uids_release(u, a);       /* twice: once */
    pool_uids_release(u, 2000001); /* a relay's uid: nothing */
    ASSERT_EQ_U(pool_uids_used(u), 2);
    pool_uids_free(u);
}

TEST(next_fit)
{
    struct pool_uids *u = pool_uids_new(100000, 8);
    uint32_t a, b, c;

    ASSERT_OK(pool_uids_take(u, &a));
    pool_uids_release(u, a);
    ASSERT_OK(pool_uids_take(u, &b));
    TAP_CHECK(b != a, "a pair just freed is the last to be reused (%u, then %u)", a, b);
    ASSERT_OK(pool_uids_take(u, &c));
    TAP_CHECK(c != a && c != b, "and the next (%u)", c);
    pool_uids_free(u);
}

TEST(claim)
{
    struct pool_uids *u = pool_uids_new(100000, 8);
    uint32_t a;

    ASSERT_OK(pool_uids_claim(u, 100002));
    ASSERT_ERR(pool_uids_claim(u, 100002), EEXIST);
    ASSERT_ERR(pool_uids_claim(u, 100003), ERANGE); /* a relay's uid */
    ASSERT_ERR(pool_uids_claim(u, 99998), ERANGE);
    ASSERT_ERR(pool_uids_claim(u, 100008), ERANGE); /* past the range */
    ASSERT_ERR(pool_uids_claim(u, 1000), ERANGE);   /* the shared uid of older sandpoolds */
    TAP_CHECK(pool_uids_valid(u, 100006) && !pool_uids_valid(u, 100007), "valid: even, in range");
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(pool_uids_take(u, &a));
        TAP_CHECK(a != 100002, "a claimed pair is never handed out (%u)", a);
    }
    ASSERT_ERR(pool_uids_take(u, &a), ENOSPC);
    pool_uids_free(u);
}

int
main(void)
{
    RUN(take_and_release);
    RUN(next_fit);
    RUN(claim);
    return tap_done();
}
