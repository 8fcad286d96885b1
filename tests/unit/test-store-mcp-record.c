/* Unit tests for src/store/mcp-record.c: an MCP session's Redis record reads back as written,
 * its text is the one running daemons write and read, and nothing else is trusted. Whether its
 * revision is served is MCP's (test-mcp-proto.c, record_revision). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/mcp-record.h"
#include "tap.h"
#include "util/macro.h"

/* What is dumped reads back, and nothing else is trusted. */
TEST(round_trip_and_refusals)
{
    struct store_mcp_rec r = {.bound = true, .idle_timeout_s = 0, .epoch = 3};
    struct store_mcp_rec back;
    struct err e = {0};
    char *text;
    static const char *const bad[] = {
        "",
        "[]",
        "{\"tenant\":\"a\"}",
        /* a bound record names its sandbox */
        "{\"tenant\":\"a\",\"mount\":\"bound\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":0,\"version\":\"2025-11-25\",\"epoch\":0}",
        "{\"tenant\":\"a b\",\"mount\":\"own\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":0,\"version\":\"2025-11-25\",\"epoch\":0}",
        "{\"tenant\":\"a\",\"mount\":\"mine\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":0,\"version\":\"2025-11-25\",\"epoch\":0}",
        "{\"tenant\":\"a\",\"mount\":\"own\",\"sandbox\":\"../x\",\"profile\":\"\","
        "\"idle_timeout_s\":0,\"version\":\"2025-11-25\",\"epoch\":0}",
        "{\"tenant\":\"a\",\"mount\":\"own\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":-1,\"version\":\"2025-11-25\",\"epoch\":0}",
        "{\"tenant\":\"a\",\"mount\":\"own\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":31536001,\"version\":\"2025-11-25\",\"epoch\":0}",
        "{\"tenant\":\"a\",\"mount\":\"own\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":0,\"version\":\"2025-11-25\",\"epoch\":-1}",
        "{\"tenant\":\"a\",\"mount\":\"own\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":0,\"version\":\"2025-11-25\",\"epoch\":0,\"epoch\":1}",
        "{\"tenant\":\"a\",\"mount\":\"own\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":0,\"version\":\"2025-11-25\",\"epoch\":0,\"node\":\"a/b\"}",
        "{\"tenant\":\"a\",\"mount\":\"own\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":0,\"version\":\"2025-11-25\",\"epoch\":0,\"node\":1}",
        /* the revision: a name, never empty, never a number */
        "{\"tenant\":\"a\",\"mount\":\"own\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":0,\"version\":\"\",\"epoch\":0}",
        "{\"tenant\":\"a\",\"mount\":\"own\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":0,\"version\":\"2025 11 25\",\"epoch\":0}",
        "{\"tenant\":\"a\",\"mount\":\"own\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":0,\"version\":20251125,\"epoch\":0}",
        "{\"tenant\":\"a\",\"mount\":\"own\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":0,\"version\":\"0123456789abcdef0123456789abcdef\",\"epoch\":0}",
    };
    static const char old[] = /* written before records named their node */
        "{\"tenant\":\"a\",\"mount\":\"own\",\"sandbox\":\"\",\"profile\":\"\","
        "\"idle_timeout_s\":0,\"version\":\"2025-11-25\",\"epoch\":0}";

    memcpy(r.tenant, "tenant-a", 9);
    memcpy(r.sandbox, "0123456789abcdef", 17);
    memcpy(r.profile, "python", 7);
    memcpy(r.version, "2025-06-18", 11);
    memcpy(r.node, "node-1", 7);
    text = store_mcp_rec_dump(&r);
    ASSERT_OK(store_mcp_rec_load(text, strlen(text), &back, &e));
    TAP_CHECK(strcmp(back.tenant, r.tenant) == 0 && strcmp(back.sandbox, r.sandbox) == 0 &&
                  strcmp(back.profile, r.profile) == 0 && strcmp(back.node, "node-1") == 0 &&
                  back.bound && back.epoch == 3 && strcmp(back.version, "2025-06-18") == 0 &&
                  back.idle_timeout_s == 0,
              "a bound record reads back as written");
    free(text);
    r.bound = false;
    r.sandbox[0] = '\0';
    r.idle_timeout_s = 120;
    text = store_mcp_rec_dump(&r);
    ASSERT_OK(store_mcp_rec_load(text, strlen(text), &back, &e));
    TAP_CHECK(!back.bound && back.sandbox[0] == '\0' && back.idle_timeout_s == 120,
              "an own record without its sandbox yet reads back");
    free(text);
    ASSERT_OK(store_mcp_rec_load(old, strlen(old), &back, &e));
    TAP_CHECK(back.node[0] == '\0', "a record without its node reads back (served where it is)");
    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        e.msg[0] = '\0';
        TAP_CHECK(store_mcp_rec_load(bad[i], strlen(bad[i]), &back, &e) == -EINVAL &&
                      e.msg[0] != '\0',
                  "damaged record %zu is refused, with why", i);
    }
}

/* The text is the one running daemons have written (src/mcp/proto.c's before the record moved
 * to the store): the same record dumps to the same bytes, and such a text dumps back to itself. */
TEST(format_unchanged)
{
    static const char own[] =
        "{\"epoch\":2,\"idle_timeout_s\":0,\"mount\":\"own\",\"node\":\"node-a\",\"profile\":"
        "\"python\",\"sandbox\":\"0123456789abcdef0123456789abcdef\",\"tenant\":\"t1\","
        "\"version\":\"2025-06-18\"}";
    static const char bound[] =
        "{\"epoch\":9223372036854775807,\"idle_timeout_s\":31536000,\"mount\":\"bound\",\"node\":"
        "\"\",\"profile\":\"\",\"sandbox\":\"s-1\",\"tenant\":\"t_2.x\",\"version\":"
        "\"2025-11-25\"}";
    struct store_mcp_rec r = {.bound = true, .idle_timeout_s = 31536000, .epoch = UINT64_MAX};
    struct store_mcp_rec back;
    struct err e = {0};
    char *text;

    ASSERT_OK(store_mcp_rec_load(own, strlen(own), &back, &e));
    text = store_mcp_rec_dump(&back);
    ASSERT_STREQ(text, own);
    free(text);
    memcpy(r.tenant, "t_2.x", 6);
    memcpy(r.sandbox, "s-1", 4);
    memcpy(r.version, "2025-11-25", 11);
    text = store_mcp_rec_dump(&r); /* an epoch past JSON's integers is written as the largest */
    ASSERT_STREQ(text, bound);
    free(text);
}

int
main(void)
{
    RUN(round_trip_and_refusals);
    RUN(format_unchanged);
    return tap_done();
}
