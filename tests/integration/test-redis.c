/* Integration test of the Redis connection against a real redis-server that this test starts,
 * stops and restarts on a temporary unix socket: commands, binary safety, db selection, the
 * per-command deadline (a blocking BLPOP), reconnection after the server dies and comes back, and
 * cancellation on free. */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "config/config.h"
#include "lib/loop.h"
#include "store/redis.h"
#include "tap.h"
#include "util/parse.h"

static struct event_base *base;
static char dir[64], sock[96];
static pid_t server = -1;

static char port[8];

static void
server_start(void)
{
    const char *argv[] = {"redis-server", "--port", port,     "--bind",     "127.0.0.1",
                          "--unixsocket", sock,     "--save", "",           "--appendonly",
                          "no",           "--dir",  dir,      "--loglevel", "warning",
                          "--databases",  "4",      NULL};
    struct stat st;

    if (posix_spawnp(&server, "redis-server", NULL, NULL, (char *const *)argv, environ) != 0) {
        TAP_SKIP_ALL("redis-server is not installed");
    }
    for (int i = 0; i < 100 && stat(sock, &st) != 0; i++) {
        usleep(50000);
    }
}

static void
server_kill(void)
{
    if (server > 0) {
        (void)kill(server, SIGKILL);
        (void)waitpid(server, NULL, 0);
        server = -1;
    }
    (void)unlink(sock);
}

struct res {
    bool fired;
    int r;
    int type;
    char str[64];
    size_t len;
};

static void
on_reply(int r, struct redisReply *reply, void *userdata)
{
    struct res *x = userdata;

    x->fired = true;
    x->r = r;
    if (reply != NULL) {
        x->type = reply->type;
        x->len = reply->len;
        if (reply->str != NULL) {
            memcpy(x->str, reply->str, MIN(reply->len, sizeof(x->str)));
        }
    }
}

static bool state_up;
static int downs;

static void
on_state(bool up, const char *why, void *userdata)
{
    state_up = up;
    downs += !up;
}

TEST(commands_and_deadline)
{
    struct cfg_redis_addr a = {0};
    struct store_redis *s;
    struct res set = {0}, get = {0}, slow = {0}, behind = {0}, after = {0}, sel = {0};
    const char *argv[] = {"SET", "k", "a\0b"};
    const size_t lens[] = {3, 1, 3};
    struct store_redis_stats st;

    (void)snprintf(a.path, sizeof(a.path), "%s", sock);
    a.db = 2;
    s = store_redis_new(base, &a, 300, on_state, NULL);
    ASSERT_TRUE(loop_until(base, &state_up, 5000));
    ASSERT_OK(store_redis_command(s, on_reply, &set, 3, argv, lens));
    ASSERT_OK(store_redis_commandv(s, on_reply, &get, "GET", "k", NULL));
    ASSERT_TRUE(loop_until(base, &get.fired, 3000));
    ASSERT_EQ_I(set.r, 0);
    ASSERT_EQ_I(get.type, REDIS_REPLY_STRING);
    ASSERT_TRUE(get.len == 3 && memcmp(get.str, "a\0b", 3) == 0);
    /* Selected db 2: the key is not in db 0. */
    {
        redisContext *c = redisConnectUnix(sock);
        redisReply *r = c ? redisCommand(c, "EXISTS k") : NULL;

        ASSERT_TRUE(r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 0);
        freeReplyObject(r);
        r = c ? redisCommand(c, "SELECT 2") : NULL;
        freeReplyObject(r);
        r = c ? redisCommand(c, "EXISTS k") : NULL;
        ASSERT_TRUE(r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
        freeReplyObject(r);
        redisFree(c);
    }
    /* A command that outlives its deadline fails with -ETIMEDOUT, the one queued behind it with
     * -ENOTCONN (the wedged link is dropped), and the store reconnects by itself. */
    ASSERT_OK(store_redis_commandv(s, on_reply, &slow, "BLPOP", "nothing", "1", NULL));
    loop_for(base, 50); /* the second command's deadline is later */
    ASSERT_OK(store_redis_commandv(s, on_reply, &behind, "PING", NULL));
    ASSERT_TRUE(loop_until(base, &behind.fired, 3000));
    ASSERT_ERR(slow.r, ETIMEDOUT);
    ASSERT_ERR(behind.r, ENOTCONN);
    ASSERT_TRUE(strstr(store_redis_why(s), "timed out") != NULL);
    state_up = false;
    ASSERT_TRUE(loop_until(base, &state_up, 5000));
    ASSERT_OK(store_redis_commandv(s, on_reply, &after, "GET", "k", NULL));
    ASSERT_TRUE(loop_until(base, &after.fired, 3000));
    ASSERT_EQ_I(after.type, REDIS_REPLY_STRING); /* still on db 2 after the reconnect */
    ASSERT_OK(store_redis_commandv(s, on_reply, &sel, "NOSUCHCOMMAND", NULL));
    ASSERT_TRUE(loop_until(base, &sel.fired, 3000));
    ASSERT_EQ_I(sel.r, 0);
    ASSERT_EQ_I(sel.type, REDIS_REPLY_ERROR);
    store_redis_get_stats(s, &st);
    ASSERT_EQ_U(st.timeouts, 1);
    ASSERT_EQ_U(st.pending, 0);
    store_redis_free(s);
}

TEST(server_restart)
{
    struct cfg_redis_addr a = {0};
    struct store_redis *s;
    struct res pending = {0}, later = {0}, cancelled = {0};
    int downs_before;

    (void)snprintf(a.path, sizeof(a.path), "%s", sock);
    state_up = false;
    s = store_redis_new(base, &a, 2000, on_state, NULL);
    ASSERT_TRUE(loop_until(base, &state_up, 5000));
    ASSERT_OK(store_redis_commandv(s, on_reply, &pending, "BLPOP", "nothing", "10", NULL));
    downs_before = downs;
    server_kill();
    ASSERT_TRUE(loop_until(base, &pending.fired, 3000));
    ASSERT_ERR(pending.r, ENOTCONN);
    ASSERT_EQ_I(downs, downs_before + 1);
    ASSERT_TRUE(!store_redis_is_up(s));
    ASSERT_ERR(store_redis_commandv(s, on_reply, &later, "PING", NULL), ENOTCONN);
    loop_for(base, 500); /* a few failed reconnect attempts */
    server_start();
    ASSERT_TRUE(loop_until(base, &state_up, 8000));
    ASSERT_OK(store_redis_commandv(s, on_reply, &later, "PING", NULL));
    ASSERT_TRUE(loop_until(base, &later.fired, 3000));
    ASSERT_EQ_I(later.type, REDIS_REPLY_STATUS);
    /* Freeing with a command in flight answers it -ECANCELED, synchronously, once. */
    ASSERT_OK(store_redis_commandv(s, on_reply, &cancelled, "BLPOP", "nothing", "10", NULL));
    loop_for(base, 50);
    store_redis_free(s);
    ASSERT_TRUE(cancelled.fired);
    ASSERT_ERR(cancelled.r, ECANCELED);
}

TEST(tcp_by_name_and_bad_db)
{
    struct cfg_redis_addr a = {0};
    struct store_redis *s;
    struct res ping = {0};

    /* A host name is resolved without blocking the loop (evdns), then TCP on loopback. */
    (void)snprintf(a.host, sizeof(a.host), "localhost");
    {
        uint64_t v = 0;

        (void)parse_u64(port, &v);
        a.port = (uint16_t)v;
    }
    state_up = false;
    s = store_redis_new(base, &a, 2000, on_state, NULL);
    ASSERT_TRUE(loop_until(base, &state_up, 5000));
    ASSERT_OK(store_redis_commandv(s, on_reply, &ping, "PING", NULL));
    ASSERT_TRUE(loop_until(base, &ping.fired, 3000));
    ASSERT_EQ_I(ping.type, REDIS_REPLY_STATUS);
    store_redis_free(s);
    /* A database the server does not have: the link never comes up and says why. */
    (void)snprintf(a.path, sizeof(a.path), "%s", sock);
    a.db = 9;
    state_up = false;
    s = store_redis_new(base, &a, 2000, on_state, NULL);
    loop_for(base, 500);
    ASSERT_TRUE(!store_redis_is_up(s) && !state_up);
    TAP_CHECK(strstr(store_redis_why(s), "SELECT 9") != NULL, "why: '%s'", store_redis_why(s));
    ASSERT_ERR(store_redis_commandv(s, on_reply, &ping, "PING", NULL), ENOTCONN);
    store_redis_free(s);
}

TEST(nothing_listening)
{
    struct cfg_redis_addr a = {0};
    struct store_redis *s;

    (void)snprintf(a.path, sizeof(a.path), "%s/none.sock", dir);
    s = store_redis_new(base, &a, 200, on_state, NULL);
    loop_for(base, 300);
    ASSERT_TRUE(!store_redis_is_up(s));
    ASSERT_TRUE(strstr(store_redis_why(s), "cannot connect") != NULL);
    store_redis_free(s);
}

int
main(void)
{
    (void)signal(SIGPIPE, SIG_IGN);
    (void)snprintf(dir, sizeof(dir), "/tmp/sandpool-test-redis.XXXXXX");
    if (mkdtemp(dir) == NULL) {
        return 1;
    }
    (void)snprintf(sock, sizeof(sock), "%s/redis.sock", dir);
    (void)snprintf(port, sizeof(port), "%d", 20000 + (int)(getpid() % 20000));
    base = event_base_new();
    server_start();
    RUN(commands_and_deadline);
    RUN(server_restart);
    RUN(tcp_by_name_and_bad_db);
    RUN(nothing_listening);
    server_kill();
    event_base_free(base);
    (void)rmdir(dir);
    return tap_done();
}
