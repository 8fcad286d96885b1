/* Forwarding between nodes (src/http/forward.c, over src/cluster/route.c, registry.c and
 * peer.c), in-process: the real daemon (tests/lib/daemon.h) on a fake engine and a fake Redis,
 * and fake peer nodes (tests/lib/fake-peer.h) that join the node registry through the same
 * Redis and hold sessions there. A request for a peer's session goes to that peer as the client
 * sent it, plus the hop marker and the request id, and its answer comes back unchanged; a peer
 * that answers late is waited for, one that drops the connection or stops answering (and its
 * heartbeats) is a 503 unavailable with Retry-After (docs/cluster.md#routing), one that is lost
 * ends its sessions (404 node_lost), one that stopped cleanly is "restarting", and one the
 * registry never had is a 503 too.
 *
 * Deadlines are the configuration's (cluster.heartbeat_ms 100: a node is lost 300 ms after its
 * last heartbeat; the forwarder's watch is 0.5 s): the tests wait for conditions, with bounds
 * far above them, and assert no durations. */
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "lib/daemon.h"
#include "lib/fake-peer.h"
#include "lib/loop.h"
#include "tap.h"

#define HB_MS    100u
#define BOUND_MS 8000u
#define CLUSTER  ", \"cluster\": {\"heartbeat_ms\": 100, \"advertise_url\": \"http://127.0.0.1:1\"}"
#define AUTH_A   "Authorization: Bearer " TEST_TOKEN_A
#define SID1     "0123456789abcdef0123456789abcd01"
#define SID2     "0123456789abcdef0123456789abcd02"
#define SID3     "0123456789abcdef0123456789abcd03"
#define SID4     "0123456789abcdef0123456789abcd04"
#define SID5     "0123456789abcdef0123456789abcd05"
#define SID6     "0123456789abcdef0123456789abcd06"

static struct test_daemon d;

/* The node registry as the daemon last read it says node id is live (GET /v1/admin/nodes). */
static bool
listed_live(const char *id)
{
    struct test_call c = {.path = "/v1/admin/nodes",
                          .headers = {"Authorization: Bearer " TEST_TOKEN_ADM}};
    json_t *doc, *n;
    size_t i;
    bool live = false;

    if (test_daemon_call(&d, &c) == 200 && (doc = json_loads(c.resp, 0, NULL)) != NULL) {
        json_array_foreach (json_object_get(doc, "nodes"), i, n) {
            if (strcmp(json_string_value(json_object_get(n, "id")) ?: "", id) == 0) {
                live = json_is_true(json_object_get(n, "live"));
            }
        }
        json_decref(doc);
    }
    test_call_done(&c);
    return live;
}

static bool
is_listed(void *id)
{
    return listed_live(id);
}

static bool
is_unlisted(void *id)
{
    return !listed_live(id);
}

/* A peer node that the daemon knows live, holding session sid of tenant a. */
static struct fake_peer *
peer_up(const char *id, const char *sid)
{
    struct fake_peer *fp = fake_peer_new(d.base, fake_redis_url(d.fr), TEST_PREFIX, id, HB_MS);

    ASSERT_OK(fake_peer_own_session(fp, sid, "a", "py"));
    TAP_CHECK(test_daemon_until(&d, is_listed, (void *)id, BOUND_MS),
              "the daemon lists peer %s as live", id);
    return fp;
}

/* POST /v1/sessions/SID/execute with body, as tenant a. */
static long
execute(struct test_call *c, const char *sid, const char *body)
{
    static char path[128];

    (void)snprintf(path, sizeof(path), "/v1/sessions/%s/execute", sid);
    *c = (struct test_call){.method = "POST",
                            .path = path,
                            .body = body,
                            .headers = {AUTH_A, "Content-Type: application/json",
                                        "X-Client-Header: kept", "X-Request-Id: fwd-req-1"}};
    return test_daemon_call(&d, c);
}

/* The answer is REST's 503 unavailable with Retry-After: 1, its message containing what. */
static void
check_unavailable(struct test_call *c, const char *what)
{
    json_t *doc = json_loads(c->resp, 0, NULL);
    const char *code = json_string_value(json_object_get(json_object_get(doc, "error"), "code"));
    const char *msg = json_string_value(json_object_get(json_object_get(doc, "error"), "message"));

    ASSERT_EQ_U(c->status, 503);
    ASSERT_STREQ(code, "unavailable");
    TAP_CHECK(msg != NULL && strstr(msg, what) != NULL, "the message says '%s' ('%s')", what,
              msg ? msg : c->resp);
    ASSERT_STREQ(test_call_header(c, "Retry-After"), "1");
    json_decref(doc);
}

TEST(forwarded_as_sent)
{
    struct fake_peer *fp = peer_up("peer1", SID1);
    const char *answer = "{\"status\": \"ok\", \"stdout\": \"hello from the peer\\n\"}";
    const char *body = "{\"code\": \"print('hello')\"}";
    const struct fake_peer_request *r;
    struct test_call c;

    fake_peer_answer(fp, 200, "application/json", answer);
    ASSERT_EQ_U(execute(&c, SID1, body), 200);
    ASSERT_EQ_U(fake_peer_requests(fp), 1);
    r = fake_peer_request(fp, 0);
    if (r == NULL) {
        TAP_CHECK(false, "the peer got the request");
        fake_peer_free(fp);
        return;
    }
    ASSERT_STREQ(r->method, "POST");
    ASSERT_STREQ(r->uri, "/v1/sessions/" SID1 "/execute");
    ASSERT_STREQ(r->body, body);
    ASSERT_STREQ(fake_peer_header(fp, 0, "Authorization"), "Bearer " TEST_TOKEN_A);
    ASSERT_STREQ(fake_peer_header(fp, 0, "X-Sandpool-Forwarded"), "self");
    ASSERT_STREQ(fake_peer_header(fp, 0, "X-Request-Id"), "fwd-req-1");
    ASSERT_STREQ(fake_peer_header(fp, 0, "X-Client-Header"), "kept");
    ASSERT_STREQ(fake_peer_header(fp, 0, "Content-Type"), "application/json");
    ASSERT_STREQ(fake_peer_header(fp, 0, "Content-Length"), "26");
    /* the answer, unchanged, with the owner named */
    ASSERT_STREQ(c.resp, answer);
    ASSERT_STREQ(test_call_header(&c, "Content-Type"), "application/json");
    ASSERT_STREQ(test_call_header(&c, "X-Fake-Peer"), "peer1");
    ASSERT_STREQ(test_call_header(&c, "X-Sandpool-Node"), "peer1");
    ASSERT_STREQ(test_call_header(&c, "X-Request-Id"), "fwd-req-1");
    test_call_done(&c);

    /* A GET goes as a GET, without a body; the peer's 5xx comes back as it was. */
    fake_peer_fault(fp, FAKE_PEER_FAIL, 1, 500);
    c = (struct test_call){.path = "/v1/sessions/" SID1, .headers = {AUTH_A}};
    ASSERT_EQ_U(test_daemon_call(&d, &c), 500);
    ASSERT_EQ_U(fake_peer_requests(fp), 2);
    r = fake_peer_request(fp, 1);
    ASSERT_STREQ(r ? r->method : NULL, "GET");
    ASSERT_STREQ(r ? r->uri : NULL, "/v1/sessions/" SID1);
    ASSERT_EQ_U(r ? r->body_len : 99, 0);
    ASSERT_STREQ(c.resp, "{\"error\": {\"code\": \"internal\", \"message\": \"fake peer 500\"}}");
    ASSERT_STREQ(test_call_header(&c, "X-Sandpool-Node"), "peer1");
    test_call_done(&c);

    /* A request already forwarded once is never forwarded again. */
    c = (struct test_call){.path = "/v1/sessions/" SID1,
                           .headers = {AUTH_A, "X-Sandpool-Forwarded: elsewhere"}};
    (void)test_daemon_call(&d, &c);
    check_unavailable(&c, "is not on this node");
    ASSERT_EQ_U(fake_peer_requests(fp), 2);
    test_call_done(&c);

    /* Another tenant's session is not found, and costs the peer nothing. */
    c = (struct test_call){.path = "/v1/sessions/" SID1,
                           .headers = {"Authorization: Bearer " TEST_TOKEN_B}};
    ASSERT_EQ_U(test_daemon_call(&d, &c), 404);
    ASSERT_EQ_U(fake_peer_requests(fp), 2);
    test_call_done(&c);
    fake_peer_free(fp);
}

TEST(late_answer)
{
    struct fake_peer *fp = peer_up("peer4", SID4);
    struct test_call c;

    fake_peer_answer(fp, 201, "application/json", "{\"late\": true}");
    fake_peer_fault(fp, FAKE_PEER_LATE, 1, 1200); /* beyond the forwarder's 0.5 s watch */
    ASSERT_EQ_U(execute(&c, SID4, "{\"code\": \"1\"}"), 201);
    ASSERT_STREQ(c.resp, "{\"late\": true}");
    ASSERT_EQ_U(fake_peer_requests(fp), 1);
    ASSERT_EQ_U(fake_peer_held(fp), 0);
    test_call_done(&c);
    fake_peer_free(fp);
}

TEST(dropped_connection)
{
    struct fake_peer *fp = peer_up("peer5", SID5);
    struct test_call c;

    fake_peer_fault(fp, FAKE_PEER_DROP, 1, 0);
    (void)execute(&c, SID5, "{\"code\": \"1\"}");
    ASSERT_EQ_U(c.curl_rc, CURLE_OK);
    check_unavailable(&c, "the session's node did not answer");
    TAP_CHECK(strstr(c.resp, "peer5") == NULL && strstr(c.resp, "127.0.0.1") == NULL,
              "the answer names no node ('%s')", c.resp);
    ASSERT_EQ_U(fake_peer_requests(fp), 1);
    test_call_done(&c);

    /* The next request reaches the peer again (a new connection). */
    ASSERT_EQ_U(execute(&c, SID5, "{\"code\": \"2\"}"), 200);
    ASSERT_STREQ(c.resp, "{\"peer\": \"peer5\"}");
    ASSERT_EQ_U(fake_peer_requests(fp), 2);
    test_call_done(&c);
    fake_peer_free(fp);
}

static bool
peer_saw_client_go(void *fp)
{
    return fake_peer_gone(fp) == 1;
}

/* A frozen node: it takes the request, never answers, and its heartbeats stop. */
TEST(never_answers)
{
    struct fake_peer *fp = peer_up("peer2", SID2);
    struct test_call c;
    json_t *doc;

    /* Frozen once it has the request: a route looked up before that finds it live. */
    fake_peer_fault(fp, FAKE_PEER_FREEZE, 1, 0);
    (void)execute(&c, SID2, "{\"code\": \"1\"}");
    ASSERT_EQ_U(c.curl_rc, CURLE_OK);
    check_unavailable(&c, "the session's node stopped answering");
    ASSERT_EQ_U(fake_peer_requests(fp), 1);
    TAP_CHECK(test_daemon_until(&d, peer_saw_client_go, fp, BOUND_MS),
              "the peer saw the call's connection close");
    ASSERT_EQ_U(fake_peer_held(fp), 0);
    test_call_done(&c);

    /* The daemon claims the lost node: its session ended (404 node_lost), not forwarded. */
    TAP_CHECK(test_daemon_until(&d, is_unlisted, (void *)"peer2", BOUND_MS),
              "peer2 is no longer live");
    for (uint64_t end = time_now_ms() + BOUND_MS; time_now_ms() < end;) {
        c = (struct test_call){.path = "/v1/sessions/" SID2, .headers = {AUTH_A}};
        if (test_daemon_call(&d, &c) == 404) {
            break;
        }
        test_call_done(&c);
        loop_for(d.base, 50);
    }
    doc = json_loads(c.resp, 0, NULL);
    ASSERT_EQ_U(c.status, 404);
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(doc, "error"), "reason")),
                 "node_lost");
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(doc, "error"), "node")),
                 "peer2");
    ASSERT_STREQ(fake_redis_hget(d.fr, TEST_PREFIX "session:" SID2, "state"), "lost");
    ASSERT_EQ_U(fake_peer_requests(fp), 1);
    json_decref(doc);
    test_call_done(&c);
    fake_peer_free(fp);
}

/* A node that stopped cleanly keeps its sessions: "restarting", 503, nothing sent to it. */
TEST(peer_left)
{
    struct fake_peer *fp = peer_up("peer3", SID3);
    struct test_call c;

    ASSERT_EQ_U(execute(&c, SID3, "{\"code\": \"1\"}"), 200);
    test_call_done(&c);
    ASSERT_OK(fake_peer_leave(fp));
    TAP_CHECK(test_daemon_until(&d, is_unlisted, (void *)"peer3", BOUND_MS),
              "peer3 is no longer live");
    (void)execute(&c, SID3, "{\"code\": \"2\"}");
    check_unavailable(&c, "the session's node is restarting");
    ASSERT_EQ_U(fake_peer_requests(fp), 1);
    ASSERT_STREQ(fake_redis_hget(d.fr, TEST_PREFIX "session:" SID3, "state"), "active");
    test_call_done(&c);
    fake_peer_free(fp);
}

/* A session whose record names a node the registry never had: 503, never a 404. */
TEST(owner_not_in_registry)
{
    struct fake_peer *fp = fake_peer_new(d.base, fake_redis_url(d.fr), TEST_PREFIX, "ghost", HB_MS);
    struct test_call c;

    fake_peer_set_beating(fp, false); /* before its first heartbeat: it never joins */
    ASSERT_OK(fake_peer_own_session(fp, SID6, "a", "py"));
    ASSERT_EQ_U(fake_peer_heartbeats(fp), 0);
    (void)execute(&c, SID6, "{\"code\": \"1\"}");
    check_unavailable(&c, "the session's node is not in the node registry");
    ASSERT_EQ_U(fake_peer_requests(fp), 0);
    test_call_done(&c);
    fake_peer_free(fp);
}

int
main(void)
{
    test_daemon_start(&d, CLUSTER);
    RUN(forwarded_as_sent);
    RUN(late_answer);
    RUN(dropped_connection);
    RUN(never_answers);
    RUN(peer_left);
    RUN(owner_not_in_registry);
    test_daemon_stop(&d);
    return tap_done();
}
