/* Unit tests of the connection table (src/api/conns.c): standings, the victim a newcomer at the
 * cap closes, per-peer shares. Pure bookkeeping, no loop or socket. */
#include <errno.h>
#include <unistd.h>

#include "api/api-internal.h"
#include "tap.h"

static struct api_conns *
table(unsigned max, unsigned per_peer)
{
    return api_conns_new(&(struct api_conns_limits){.max = max, .per_peer = per_peer});
}

/* Releases every entry (each holds a reference on the table), then the table. */
static void
done(struct api_conns *reg, struct api_conn_entry **all, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        api_conns_release(all[i], false);
    }
    ASSERT_EQ_U(api_conns_live(reg), 0);
    api_conns_free(reg);
}

TEST(victim_is_anonymous_idle_longest_first)
{
    struct api_conns *reg = table(4, 0);
    struct api_conn_entry *a = api_conns_table_add(reg), *b = api_conns_table_add(reg),
                          *c = api_conns_table_add(reg), *d = api_conns_table_add(reg);

    /* a: authenticated and idle (the oldest); b: anonymous busy; c, d: anonymous idle. */
    api_conns_table_set(reg, a, API_CONN_AUTH_IDLE);
    api_conns_table_set(reg, b, API_CONN_ANON_BUSY);
    TAP_CHECK(api_conns_table_victim(reg, NULL) == c, "the anonymous idle longest goes first");
    TAP_CHECK(api_conns_table_victim(reg, c) == d, "never the excluded newcomer");
    /* c turns busy and idle again: it is now the one idle for the shortest time. */
    api_conns_table_set(reg, c, API_CONN_ANON_BUSY);
    api_conns_table_set(reg, c, API_CONN_ANON_IDLE);
    TAP_CHECK(api_conns_table_victim(reg, NULL) == d, "idle order is least recently used");
    api_conns_table_set(reg, c, API_CONN_ANON_BUSY);
    api_conns_table_set(reg, d, API_CONN_AUTH_BUSY);
    TAP_CHECK(api_conns_table_victim(reg, NULL) == NULL,
              "anonymous ones busy: nobody (an authenticated one is not closed for them)");
    api_conns_table_set(reg, b, API_CONN_AUTH_BUSY);
    api_conns_table_set(reg, c, API_CONN_AUTH_BUSY);
    TAP_CHECK(api_conns_table_victim(reg, NULL) == a,
              "with no anonymous connection at all, the authenticated idle longest");
    api_conns_table_set(reg, a, API_CONN_AUTH_BUSY);
    TAP_CHECK(api_conns_table_victim(reg, NULL) == NULL, "busy connections are never victims");
    ASSERT_EQ_U(api_conns_live(reg), 4);
    api_conns_table_set(reg, b, API_CONN_CLOSING);
    ASSERT_EQ_U(api_conns_live(reg), 3);
    api_conns_table_set(reg, b, API_CONN_ANON_IDLE);
    TAP_CHECK(api_conn_standing(b) == API_CONN_CLOSING, "a closing connection stays closing");
    done(reg, (struct api_conn_entry *[]){a, b, c, d}, 4);
}

TEST(authenticated_never_goes_back)
{
    struct api_conns *reg = table(4, 0);
    struct api_conn_entry *a = api_conns_table_add(reg);

    TAP_CHECK(api_conn_standing(a) == API_CONN_ANON_IDLE, "a newcomer is anonymous and idle");
    api_conns_table_set(reg, a, API_CONN_AUTH_BUSY);
    api_conns_table_set(reg, a, API_CONN_AUTH_IDLE);
    TAP_CHECK(api_conn_standing(a) == API_CONN_AUTH_IDLE, "authenticated, idle");
    done(reg, &a, 1);
}

TEST(per_peer_share)
{
    struct api_conns *reg = table(100, 2);
    struct api_conn_entry *p1 = api_conns_table_add(reg), *p2 = api_conns_table_add(reg),
                          *p3 = api_conns_table_add(reg), *q1 = api_conns_table_add(reg),
                          *u = api_conns_table_add(reg), *p4 = api_conns_table_add(reg),
                          *p5 = api_conns_table_add(reg), *victim = NULL;

    ASSERT_OK(api_conns_table_admit(reg, p1, "192.0.2.1", &victim));
    TAP_CHECK(victim == NULL, "first of its peer: nothing to close");
    ASSERT_OK(api_conns_table_admit(reg, p2, "192.0.2.1", &victim));
    TAP_CHECK(victim == NULL, "second: within the share of 2");
    ASSERT_OK(api_conns_table_admit(reg, q1, "192.0.2.2", &victim));
    TAP_CHECK(victim == NULL, "another peer has a share of its own");
    ASSERT_OK(api_conns_table_admit(reg, u, "", &victim));
    TAP_CHECK(victim == NULL, "a unix-socket peer is exempt");
    ASSERT_OK(api_conns_table_admit(reg, p3, "192.0.2.1", &victim));
    TAP_CHECK(victim == p1, "third of a peer: that peer's anonymous connection idle longest");
    api_conns_table_set(reg, victim, API_CONN_CLOSING);

    /* Its share all busy: the next one of that peer is refused. */
    api_conns_table_set(reg, p2, API_CONN_ANON_BUSY);
    api_conns_table_set(reg, p3, API_CONN_ANON_BUSY);
    ASSERT_ERR(api_conns_table_admit(reg, p4, "192.0.2.1", &victim), EUSERS);
    TAP_CHECK(victim == NULL, "refused, nothing closed for it");
    api_conns_table_set(reg, p4, API_CONN_CLOSING);
    /* Once one of them authenticates, it leaves the peer's count. */
    api_conns_table_set(reg, p2, API_CONN_AUTH_BUSY);
    ASSERT_OK(api_conns_table_admit(reg, p5, "192.0.2.1", &victim));
    TAP_CHECK(victim == NULL, "an authenticated connection frees its peer's share");
    done(reg, (struct api_conn_entry *[]){p1, p2, p3, p4, p5, q1, u}, 7);
}

TEST(admission_is_once)
{
    struct api_conns *reg = table(100, 1);
    struct api_conn_entry *a = api_conns_table_add(reg), *b = api_conns_table_add(reg),
                          *victim = NULL;

    ASSERT_OK(api_conns_table_admit(reg, a, "198.51.100.7", &victim));
    ASSERT_OK(api_conns_table_admit(reg, a, "198.51.100.7", &victim));
    TAP_CHECK(victim == NULL, "admitting twice counts once");
    api_conns_table_set(reg, b, API_CONN_AUTH_BUSY);
    ASSERT_OK(api_conns_table_admit(reg, b, "198.51.100.7", &victim));
    TAP_CHECK(victim == NULL, "authenticated before its admission came round: not counted");
    done(reg, (struct api_conn_entry *[]){a, b}, 2);
}

TEST(anonymous_reply_not_taken)
{
    struct api_conns *reg = api_conns_new(&(struct api_conns_limits){.max = 3, .anon_busy_ms = 20});
    struct api_conn_entry *a = api_conns_table_add(reg), *b = api_conns_table_add(reg),
                          *c = api_conns_table_add(reg);

    /* a: authenticated, idle; b, c: anonymous, busy (b longest). */
    api_conns_table_set(reg, a, API_CONN_AUTH_IDLE);
    api_conns_table_set(reg, b, API_CONN_ANON_BUSY);
    api_conns_table_set(reg, c, API_CONN_ANON_BUSY);
    TAP_CHECK(api_conns_table_victim(reg, NULL) == NULL,
              "anonymous replies just begun: nobody, not the authenticated one either");
    (void)usleep(40 * 1000);
    TAP_CHECK(api_conns_table_victim(reg, NULL) == b,
              "an anonymous reply untaken past anon_busy_ms: the one busy longest");
    TAP_CHECK(api_conns_table_victim(reg, b) == c, "then the next one");
    api_conns_table_set(reg, b, API_CONN_ANON_IDLE);
    TAP_CHECK(api_conns_table_victim(reg, NULL) == b, "an idle anonymous one comes first");
    api_conns_table_set(reg, b, API_CONN_AUTH_BUSY);
    api_conns_table_set(reg, c, API_CONN_AUTH_BUSY);
    TAP_CHECK(api_conns_table_victim(reg, NULL) == a,
              "an authenticated busy connection is never one; its idle neighbour is");
    done(reg, (struct api_conn_entry *[]){a, b, c}, 3);
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
