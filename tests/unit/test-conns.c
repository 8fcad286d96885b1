/* Unit tests of the connection table (src/http/conns.c): standings, the victim a newcomer at the
 * cap closes, per-peer shares. Pure bookkeeping, no loop or socket. */
#include <errno.h>
#include <unistd.h>

#include "http/http-internal.h"
#include "tap.h"

static struct http_conns *
table(unsigned max, unsigned per_peer)
{
    return http_conns_new(&(struct http_conns_limits){.max = max, .per_peer = per_peer});
}

/* Releases every entry (each holds a reference on the table), then the table. */
static void
done(struct http_conns *reg, struct http_conn_entry **all, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        http_conns_release(all[i], false);
    }
    ASSERT_EQ_U(http_conns_live(reg), 0);
    http_conns_free(reg);
}

TEST(victim_is_anonymous_idle_longest_first)
{
    struct http_conns *reg = table(4, 0);
    struct http_conn_entry *a = http_conns_table_add(reg), *b = http_conns_table_add(reg),
                           *c = http_conns_table_add(reg), *d = http_conns_table_add(reg);

    /* a: authenticated and idle (the oldest); b: anonymous busy; c, d: anonymous idle. */
    http_conns_table_set(reg, a, HTTP_CONN_AUTH_IDLE);
    http_conns_table_set(reg, b, HTTP_CONN_ANON_BUSY);
    TAP_CHECK(http_conns_table_victim(reg, NULL) == c, "the anonymous idle longest goes first");
    TAP_CHECK(http_conns_table_victim(reg, c) == d, "never the excluded newcomer");
    /* c turns busy and idle again: it is now the one idle for the shortest time. */
    http_conns_table_set(reg, c, HTTP_CONN_ANON_BUSY);
    http_conns_table_set(reg, c, HTTP_CONN_ANON_IDLE);
    TAP_CHECK(http_conns_table_victim(reg, NULL) == d, "idle order is least recently used");
    http_conns_table_set(reg, c, HTTP_CONN_ANON_BUSY);
    http_conns_table_set(reg, d, HTTP_CONN_AUTH_BUSY);
    TAP_CHECK(http_conns_table_victim(reg, NULL) == NULL,
              "anonymous ones busy: nobody (an authenticated one is not closed for them)");
    http_conns_table_set(reg, b, HTTP_CONN_AUTH_BUSY);
    http_conns_table_set(reg, c, HTTP_CONN_AUTH_BUSY);
    TAP_CHECK(http_conns_table_victim(reg, NULL) == a,
              "with no anonymous connection at all, the authenticated idle longest");
    http_conns_table_set(reg, a, HTTP_CONN_AUTH_BUSY);
    TAP_CHECK(http_conns_table_victim(reg, NULL) == NULL, "busy connections are never victims");
    ASSERT_EQ_U(http_conns_live(reg), 4);
    http_conns_table_set(reg, b, HTTP_CONN_CLOSING);
    ASSERT_EQ_U(http_conns_live(reg), 3);
    http_conns_table_set(reg, b, HTTP_CONN_ANON_IDLE);
    TAP_CHECK(http_conn_standing(b) == HTTP_CONN_CLOSING, "a closing connection stays closing");
    done(reg, (struct http_conn_entry *[]){a, b, c, d}, 4);
}

TEST(authenticated_never_goes_back)
{
    struct http_conns *reg = table(4, 0);
    struct http_conn_entry *a = http_conns_table_add(reg);

    TAP_CHECK(http_conn_standing(a) == HTTP_CONN_ANON_IDLE, "a newcomer is anonymous and idle");
    http_conns_table_set(reg, a, HTTP_CONN_AUTH_BUSY);
    http_conns_table_set(reg, a, HTTP_CONN_AUTH_IDLE);
    TAP_CHECK(http_conn_standing(a) == HTTP_CONN_AUTH_IDLE, "authenticated, idle");
    done(reg, &a, 1);
}

TEST(per_peer_share)
{
    struct http_conns *reg = table(100, 2);
    struct http_conn_entry *p1 = http_conns_table_add(reg), *p2 = http_conns_table_add(reg),
                           *p3 = http_conns_table_add(reg), *q1 = http_conns_table_add(reg),
                           *u = http_conns_table_add(reg), *p4 = http_conns_table_add(reg),
                           *p5 = http_conns_table_add(reg), *victim = NULL;

    ASSERT_OK(http_conns_table_admit(reg, p1, "192.0.2.1", &victim));
    TAP_CHECK(victim == NULL, "first of its peer: nothing to close");
    ASSERT_OK(http_conns_table_admit(reg, p2, "192.0.2.1", &victim));
    TAP_CHECK(victim == NULL, "second: within the share of 2");
    ASSERT_OK(http_conns_table_admit(reg, q1, "192.0.2.2", &victim));
    TAP_CHECK(victim == NULL, "another peer has a share of its own");
    ASSERT_OK(http_conns_table_admit(reg, u, "", &victim));
    TAP_CHECK(victim == NULL, "a unix-socket peer is exempt");
    ASSERT_OK(http_conns_table_admit(reg, p3, "192.0.2.1", &victim));
    TAP_CHECK(victim == p1, "third of a peer: that peer's anonymous connection idle longest");
    http_conns_table_set(reg, victim, HTTP_CONN_CLOSING);

    /* Its share all busy: the next one of that peer is refused. */
    http_conns_table_set(reg, p2, HTTP_CONN_ANON_BUSY);
    http_conns_table_set(reg, p3, HTTP_CONN_ANON_BUSY);
    ASSERT_ERR(http_conns_table_admit(reg, p4, "192.0.2.1", &victim), EUSERS);
    TAP_CHECK(victim == NULL, "refused, nothing closed for it");
    http_conns_table_set(reg, p4, HTTP_CONN_CLOSING);
    /* Once one of them authenticates, it leaves the peer's count. */
    http_conns_table_set(reg, p2, HTTP_CONN_AUTH_BUSY);
    ASSERT_OK(http_conns_table_admit(reg, p5, "192.0.2.1", &victim));
    TAP_CHECK(victim == NULL, "an authenticated connection frees its peer's share");
    done(reg, (struct http_conn_entry *[]){p1, p2, p3, p4, p5, q1, u}, 7);
}

TEST(admission_is_once)
{
    struct http_conns *reg = table(100, 1);
    struct http_conn_entry *a = http_conns_table_add(reg), *b = http_conns_table_add(reg),
                           *victim = NULL;

    ASSERT_OK(http_conns_table_admit(reg, a, "198.51.100.7", &victim));
    ASSERT_OK(http_conns_table_admit(reg, a, "198.51.100.7", &victim));
    TAP_CHECK(victim == NULL, "admitting twice counts once");
    http_conns_table_set(reg, b, HTTP_CONN_AUTH_BUSY);
    ASSERT_OK(http_conns_table_admit(reg, b, "198.51.100.7", &victim));
    TAP_CHECK(victim == NULL, "authenticated before its admission came round: not counted");
    done(reg, (struct http_conn_entry *[]){a, b}, 2);
}

TEST(anonymous_reply_not_taken)
{
    struct http_conns *reg =
        http_conns_new(&(struct http_conns_limits){.max = 3, .anon_busy_ms = 20});
    struct http_conn_entry *a = http_conns_table_add(reg), *b = http_conns_table_add(reg),
                           *c = http_conns_table_add(reg);

    /* a: authenticated, idle; b, c: anonymous, busy (b longest). */
    http_conns_table_set(reg, a, HTTP_CONN_AUTH_IDLE);
    http_conns_table_set(reg, b, HTTP_CONN_ANON_BUSY);
    http_conns_table_set(reg, c, HTTP_CONN_ANON_BUSY);
    TAP_CHECK(http_conns_table_victim(reg, NULL) == NULL,
              "anonymous replies just begun: nobody, not the authenticated one either");
    (void)usleep(40 * 1000);
    TAP_CHECK(http_conns_table_victim(reg, NULL) == b,
              "an anonymous reply untaken past anon_busy_ms: the one busy longest");
    TAP_CHECK(http_conns_table_victim(reg, b) == c, "then the next one");
    http_conns_table_set(reg, b, HTTP_CONN_ANON_IDLE);
    TAP_CHECK(http_conns_table_victim(reg, NULL) == b, "an idle anonymous one comes first");
    http_conns_table_set(reg, b, HTTP_CONN_AUTH_BUSY);
    http_conns_table_set(reg, c, HTTP_CONN_AUTH_BUSY);
    TAP_CHECK(http_conns_table_victim(reg, NULL) == a,
              "an authenticated busy connection is never one; its idle neighbour is");
    done(reg, (struct http_conn_entry *[]){a, b, c}, 3);
}

int
main(void)
{
    RUN(victim_is_anonymous_idle_longest_first);
    RUN(authenticated_never_goes_back);
    RUN(per_peer_share);
    RUN(admission_is_once);
    RUN(anonymous_reply_not_taken);
    return tap_done();
}
