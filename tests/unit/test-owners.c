/* Unit tests for the session owner cache (src/cluster/owners.c): hits, replacement, the least
 * recently used entry going first at the bound, forgetting, and names that are too long. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cluster/owners.h"
#include "tap.h"

TEST(hit_and_replace)
{
    struct owners *o = owners_new(4);
    const struct owner *w;

    ASSERT_TRUE(owners_get(o, "s1") == NULL);
    ASSERT_OK(owners_put(o, "s1", "node-a", "acme"));
    w = owners_get(o, "s1");
    ASSERT_TRUE(w != NULL);
    ASSERT_STREQ(w->node, "node-a");
    ASSERT_STREQ(w->tenant, "acme");
    /* A session woken elsewhere: the same id, another node. */
    ASSERT_OK(owners_put(o, "s1", "node-b", "acme"));
    ASSERT_STREQ(owners_get(o, "s1")->node, "node-b");
    ASSERT_EQ_U(owners_size(o), 1);
    owners_free(o);
}

TEST(least_recently_used_goes_first)
{
    struct owners *o = owners_new(3);

    ASSERT_OK(owners_put(o, "s1", "n", "t"));
    ASSERT_OK(owners_put(o, "s2", "n", "t"));
    ASSERT_OK(owners_put(o, "s3", "n", "t"));
    ASSERT_TRUE(owners_get(o, "s1") != NULL); /* s1 used: s2 is the oldest now */
    ASSERT_OK(owners_put(o, "s4", "n", "t"));
    ASSERT_EQ_U(owners_size(o), 3);
    ASSERT_TRUE(owners_get(o, "s2") == NULL);
    ASSERT_TRUE(owners_get(o, "s1") != NULL);
    ASSERT_TRUE(owners_get(o, "s3") != NULL);
    ASSERT_TRUE(owners_get(o, "s4") != NULL);
    /* A replacement refreshes too: s1 is kept, s3 (used before s4 and s1) goes. */
    ASSERT_OK(owners_put(o, "s1", "m", "t"));
    ASSERT_OK(owners_put(o, "s5", "n", "t"));
    ASSERT_TRUE(owners_get(o, "s3") == NULL);
    ASSERT_STREQ(owners_get(o, "s1")->node, "m");
    owners_free(o);
}

TEST(bound_holds_under_churn)
{
    struct owners *o = owners_new(100);
    char id[32];
    int failed = 0;

    for (int i = 0; i < 10000; i++) {
        (void)snprintf(id, sizeof(id), "session-%d", i);
        failed += owners_put(o, id, "node", "tenant") != 0;
    }
    ASSERT_EQ_I(failed, 0);
    ASSERT_EQ_U(owners_size(o), 100);
    ASSERT_TRUE(owners_get(o, "session-9999") != NULL);
    ASSERT_TRUE(owners_get(o, "session-9900") != NULL);
    ASSERT_TRUE(owners_get(o, "session-9899") == NULL);
    owners_free(o);
}

TEST(forget)
{
    struct owners *o = owners_new(2);

    ASSERT_OK(owners_put(o, "s1", "n", "t"));
    owners_forget(o, "s1");
    owners_forget(o, "never-there");
    ASSERT_TRUE(owners_get(o, "s1") == NULL);
    ASSERT_EQ_U(owners_size(o), 0);
    /* A bound of 0 is taken as 1. */
    owners_free(o);
    o = owners_new(0);
    ASSERT_OK(owners_put(o, "s1", "n", "t"));
    ASSERT_OK(owners_put(o, "s2", "n", "t"));
    ASSERT_EQ_U(owners_size(o), 1);
    ASSERT_TRUE(owners_get(o, "s2") != NULL);
    owners_free(o);
}

TEST(too_long)
{
    struct owners *o = owners_new(4);
    char longer[OWNER_ID_MAX + 2];

    memset(longer, 'x', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    ASSERT_ERR(owners_put(o, longer, "n", "t"), ENAMETOOLONG);
    ASSERT_ERR(owners_put(o, "s", longer, "t"), ENAMETOOLONG);
    ASSERT_ERR(owners_put(o, "s", "n", longer), ENAMETOOLONG);
    ASSERT_EQ_U(owners_size(o), 0);
    longer[OWNER_ID_MAX] = '\0'; /* exactly the bound: taken */
    ASSERT_OK(owners_put(o, longer, longer, longer));
    ASSERT_STREQ(owners_get(o, longer)->node, longer);
    owners_free(o);
}

int
main(void)
{
    RUN(hit_and_replace);
    RUN(least_recently_used_goes_first);
    RUN(bound_holds_under_churn);
    RUN(forget);
    RUN(too_long);
    return tap_done();
}
