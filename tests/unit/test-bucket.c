/* Unit tests of the token buckets of what a tenant asks of the engine at will (src/http/bucket.c:
 * pauses, hibernations, snapshots) and of the limit on audit lines a client can repeat
 * (src/audit/audit.c, audit_log_limited()). Pure bookkeeping, no loop; the audit file is a
 * temporary one. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit/audit.h"
#include "http/http-internal.h"
#include "tap.h"

TEST(burst_then_rate)
{
    struct http_buckets *b = http_buckets_new(2, 5);
    struct http_buckets_stats st;
    unsigned ok = 0;

    for (int i = 0; i < 100; i++) {
        ok += http_buckets_take(b, "a", 1000) == 0;
    }
    ASSERT_EQ_U(ok, 5); /* the burst, at once */
    ASSERT_ERR(http_buckets_take(b, "a", 1000), EDQUOT);
    ASSERT_ERR(http_buckets_take(b, "a", 1499), EDQUOT); /* 2 a second: not one token yet */
    ASSERT_OK(http_buckets_take(b, "a", 1500));
    ASSERT_ERR(http_buckets_take(b, "a", 1500), EDQUOT);
    ok = 0;
    for (uint64_t t = 1500; t <= 11500; t += 10) { /* 10 s of asking every 10 ms */
        ok += http_buckets_take(b, "a", t) == 0;
    }
    ASSERT_EQ_U(ok, 20); /* 2 a second, no more */
    http_buckets_get_stats(b, &st);
    ASSERT_EQ_U(st.taken_total, 5 + 1 + 20);
    ASSERT_EQ_U(st.refused_total, 100 - 5 + 3 + 1001 - 20);
    http_buckets_free(b);
}

TEST(tenants_apart_and_refill_capped)
{
    struct http_buckets *b = http_buckets_new(1, 3);
    unsigned ok = 0;

    for (int i = 0; i < 10; i++) {
        ok += http_buckets_take(b, "a", 0) == 0;
    }
    ASSERT_EQ_U(ok, 3);
    ASSERT_OK(http_buckets_take(b, "b", 0)); /* a's storm leaves b's bucket full */
    ASSERT_OK(http_buckets_take(b, "b", 0));
    ASSERT_OK(http_buckets_take(b, "b", 0));
    ASSERT_ERR(http_buckets_take(b, "b", 0), EDQUOT);
    ok = 0;
    for (int i = 0; i < 10; i++) { /* a day later: the burst again, not a day's worth */
        ok += http_buckets_take(b, "a", 86400000) == 0;
    }
    ASSERT_EQ_U(ok, 3);
    ASSERT_ERR(http_buckets_take(b, "a", 86399000), EDQUOT); /* the clock never goes back here */
    http_buckets_free(b);
}

/* Every bucket stays while BUCKETS_MAX (8192) ids are held, an empty one too; the next new id
 * has them all forgotten at once (not only the oldest), and each starts full again. */
static unsigned
takes(struct http_buckets *b, const char *tenant)
{
    unsigned ok = 0;

    while (ok < 100 && http_buckets_take(b, tenant, 0) == 0) {
        ok++;
    }
    return ok;
}

TEST(kept_then_all_forgotten)
{
    struct http_buckets *b = http_buckets_new(1, 3);
    char id[32];
    unsigned ok = 0;

    ASSERT_EQ_U(takes(b, "a"), 3);
    for (unsigned i = 1; i < 8192; i++) { /* 8192 ids held: a's and 8191 others */
        (void)snprintf(id, sizeof(id), "t%u", i);
        ok += http_buckets_take(b, id, 0) == 0;
    }
    ASSERT_EQ_U(ok, 8191);
    ASSERT_EQ_U(takes(b, "a"), 0);             /* kept, still empty */
    ASSERT_EQ_U(takes(b, "t1"), 2);            /* kept: 3 - 1 */
    ASSERT_OK(http_buckets_take(b, "new", 0)); /* the 8193rd id: all forgotten */
    ASSERT_EQ_U(takes(b, "a"), 3);
    ASSERT_EQ_U(takes(b, "t2"), 3); /* not only the oldest: t2 had 2 left */
    http_buckets_free(b);
}

/* The lines of path holding needle: written ones (*ret_lines), and the sum of the "suppressed"
 * of the count lines among them (*ret_sup). */
static void
count_lines(const char *path, const char *needle, unsigned *ret_lines, unsigned long *ret_sup)
{
    char line[1024];
    FILE *f = fopen(path, "r");

    *ret_lines = 0;
    *ret_sup = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        const char *sup = strstr(line, "\"suppressed\":");

        if (strstr(line, needle) == NULL) {
            continue;
        }
        if (sup != NULL) {
            *ret_sup += strtoul(sup + strlen("\"suppressed\":"), NULL, 10);
        } else {
            (*ret_lines)++;
        }
    }
    if (f != NULL) {
        (void)fclose(f);
    }
}

TEST(audit_lines_limited_and_counted)
{
    char path[] = "/tmp/test-bucket-audit-XXXXXX";
    int fd = mkstemp(path);
    unsigned lines;
    unsigned long sup;
    unsigned long long before = audit_limited_suppressed_total();

    ASSERT_TRUE(fd >= 0);
    (void)close(fd);
    ASSERT_OK(audit_open(path, NULL));
    for (int i = 0; i < 500; i++) {
        audit_log_limited("session.paused", "tenant:a", "a",
                          json_pack("{s:s, s:i}", "tenant", "a", "i", i));
    }
    audit_log_limited("session.paused", "tenant:b", "b", json_pack("{s:s}", "tenant", "b"));
    audit_log_limited("session.resumed", "daemon", "a", json_pack("{s:s}", "tenant", "a"));
    audit_limited_flush(); /* a's second may go on: nothing is lost either way */
    audit_close();         /* writes the counts still due */
    count_lines(path, "\"action\":\"session.paused\",\"actor\":\"tenant:a\"", &lines, &sup);
    /* One or two seconds went by: 20 lines in each at most, every other one counted. */
    TAP_CHECK(lines >= AUDIT_LIMITED_PER_S && lines <= 2 * AUDIT_LIMITED_PER_S,
              "a's pauses: %u lines written, %lu counted", lines, sup);
    ASSERT_EQ_U(lines + sup, 500);
    ASSERT_EQ_U(audit_limited_suppressed_total() - before, sup);
    count_lines(path, "\"actor\":\"tenant:b\"", &lines, &sup);
    TAP_CHECK(lines == 1 && sup == 0, "b's one pause is written whatever a did (%u, %lu)", lines,
              sup);
    count_lines(path, "\"action\":\"session.resumed\"", &lines, &sup);
    TAP_CHECK(lines == 1 && sup == 0, "a's resume is counted apart from its pauses (%u, %lu)",
              lines, sup);
    (void)unlink(path);
}

int
main(void)
{
    RUN(burst_then_rate);
    RUN(tenants_apart_and_refill_capped);
    RUN(kept_then_all_forgotten);
    RUN(audit_lines_limited_and_counted);
    return tap_done();
}
