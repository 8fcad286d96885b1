/* The egress proxy (src/egress/proxy.c, conn.c) end to end without a container: a gate's unix
 * socket in a temporary directory, the proxy and an upstream HTTP server (evhttp on 127.0.0.1, a
 * port of its own) on an event loop in a second thread, and a sandbox's requests sent from the
 * main thread with blocking sockets. No nameserver (egress.resolv_conf ""): names resolve only
 * through the hosts map, so nothing here can reach a real resolver, and traffic goes to
 * 127.0.0.1 only (10.0.0.1 is pinned to prove it is refused before any dial). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>

#include "egress/proxy-internal.h" /* egress_socket_restrict() */
#include "tap.h"

#define EVENTS_MAX     64
#define PATTERN_CHUNKS 48 /* /pattern: 3 MiB */

static struct event_base *base;
static struct egress_proxy *proxy;
static struct egress_gate *gate;
static char sock_path[4200];
static uint16_t up_port;
static struct egress_event events[EVENTS_MAX];
static char event_hosts[EVENTS_MAX][256], event_whys[EVENTS_MAX][192];
static char event_tenants[EVENTS_MAX][65], event_addrs[EVENTS_MAX][64];
static size_t n_events;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int stop_pipe[2], unbind_pipe[2], exec_pipe[2], stats_pipe[2], stats_done[2];
static struct egress_stats seen;  /* the proxy's, copied on the loop's thread (on_stats) */
static struct egress_gate *other; /* a second gate (handoff), made on the loop's thread */
static struct egress_rules test_rules;

static void
on_event(const struct egress_event *ev, void *userdata)
{
    pthread_mutex_lock(&lock);
    if (n_events < EVENTS_MAX) {
        events[n_events] = *ev;
        (void)snprintf(event_hosts[n_events], sizeof(event_hosts[0]), "%s", ev->host);
        (void)snprintf(event_whys[n_events], sizeof(event_whys[0]), "%s", ev->why);
        (void)snprintf(event_tenants[n_events], sizeof(event_tenants[0]), "%s", ev->tenant);
        (void)snprintf(event_addrs[n_events], sizeof(event_addrs[0]), "%s", ev->address);
        n_events++;
    }
    pthread_mutex_unlock(&lock);
}

/* The last event's end, once there are n events (waits up to 5 s). */
static int
wait_events(size_t n)
{
    for (int i = 0; i < 500; i++) {
        size_t got;

        pthread_mutex_lock(&lock);
        got = n_events;
        pthread_mutex_unlock(&lock);
        if (got >= n) {
            return (int)events[n - 1].end;
        }
        usleep(10000);
    }
    return -1;
}

/* ---- the upstream ------------------------------------------------------------------------------
 */

static void
on_upstream(struct evhttp_request *req, void *arg)
{
    struct evbuffer *b = evbuffer_new();
    const char *uri = evhttp_request_get_uri(req);

    if (strcmp(uri, "/big") == 0 || strcmp(uri, "/pattern") == 0) {
        static char chunk[65536];

        for (size_t i = 0; i < sizeof(chunk); i++) { /* 65536 is a multiple of 256 */
            chunk[i] = uri[1] == 'b' ? 'x' : (char)(i * 7 + 3);
        }
        for (int i = 0; i < (uri[1] == 'b' ? 128 : PATTERN_CHUNKS); i++) {
            evbuffer_add(b, chunk, sizeof(chunk));
        }
    } else {
        evbuffer_add_printf(b, "hello %s host=%s", uri,
                            evhttp_find_header(evhttp_request_get_input_headers(req), "Host"));
    }
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

static void
on_stop(evutil_socket_t fd, short what, void *arg)
{
    event_base_loopbreak(base);
}

static void *
loop_thread(void *arg)
{
    event_base_dispatch(base);
    return NULL;
}

/* ---- the sandbox's side ------------------------------------------------------------------------
 */

static int
dial_path(const char *path)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    struct timeval tv = {.tv_sec = 5};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    memcpy(sun.sun_path, path, strlen(path) + 1);
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int
dial(void)
{
    return dial_path(sock_path);
}

/* Reads until the peer closes (or n - 1 bytes); returns the count. */
static size_t
read_all(int fd, char *out, size_t n)
{
    size_t got = 0;
    ssize_t r;

    while (got + 1 < n && (r = read(fd, out + got, n - 1 - got)) > 0) {
        got += (size_t)r;
    }
    out[got] = '\0';
    return got;
}

/* Sends req on a new connection and reads the whole answer into out. */
static void
ask(const char *req, char *out, size_t n)
{
    int fd = dial();

    out[0] = '\0';
    if (fd < 0) {
        return;
    }
    if (write(fd, req, strlen(req)) == (ssize_t)strlen(req)) {
        (void)read_all(fd, out, n);
    }
    close(fd);
}

static bool
starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* ---- the tests ---------------------------------------------------------------------------------
 */

TEST(allowed)
{
    char req[512], out[4096];
    size_t before = n_events;

    (void)snprintf(req, sizeof(req),
                   "GET http://pinned.test:%u/hello HTTP/1.1\r\nHost: pinned.test:%u\r\n"
                   "Proxy-Connection: keep-alive\r\n\r\n",
                   up_port, up_port);
    ask(req, out, sizeof(out));
    TAP_CHECK(starts(out, "HTTP/1.1 200") && strstr(out, "hello /hello host=pinned.test") != NULL,
              "an absolute-form GET to an allowed, pinned name reaches the upstream: %.80s", out);
    ASSERT_EQ_I(wait_events(before + 1), EGRESS_END_DONE);
    ASSERT_STREQ(event_hosts[before], "pinned.test");
    ASSERT_STREQ(event_addrs[before], "127.0.0.1");
    ASSERT_STREQ(event_tenants[before], "tenant-a");
    TAP_CHECK(events[before].bytes_down > 0 && events[before].bytes_up > 0,
              "bytes counted: %llu down, %llu up (%s)",
              (unsigned long long)events[before].bytes_down,
              (unsigned long long)events[before].bytes_up, event_whys[before]);

    /* A CONNECT tunnel, then a request through it. */
    {
        int fd = dial();
        char line[256];
        ssize_t r;

        (void)snprintf(req, sizeof(req), "CONNECT pinned.test:%u HTTP/1.1\r\n\r\n", up_port);
        ASSERT_TRUE(fd >= 0 && write(fd, req, strlen(req)) == (ssize_t)strlen(req));
        r = read(fd, line, sizeof(line) - 1);
        line[r > 0 ? r : 0] = '\0';
        TAP_CHECK(strcmp(line, "HTTP/1.1 200 Connection established\r\n\r\n") == 0,
                  "CONNECT to an allowed name: 200 (%s)", line);
        (void)snprintf(req, sizeof(req),
                       "GET /tunnel HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        ASSERT_TRUE(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
        (void)read_all(fd, out, sizeof(out));
        TAP_CHECK(strstr(out, "hello /tunnel host=t") != NULL, "... bytes flow through it: %.60s",
                  out);
        close(fd);
        ASSERT_EQ_I(wait_events(before + 2), EGRESS_END_DONE);
    }
}

TEST(refused)
{
    /* Each request: pre, the upstream's port, post. */
    static const struct {
        const char *pre, *post;
        const char *status;
        const char *says;
        enum egress_end end;
    } cases[] = {
        {"CONNECT evil.pinned.test:", " HTTP/1.1\r\n\r\n", "HTTP/1.1 403", "denied by name",
         EGRESS_END_DENIED},
        {"CONNECT other.test:443 HTTP/1.1\r\nX-Port: ", "\r\n\r\n", "HTTP/1.1 403",
         "not in the profile", EGRESS_END_NOT_ALLOWED},
        {"CONNECT pinned.test:443 HTTP/1.1\r\nX-Port: ", "\r\n\r\n", "HTTP/1.1 403",
         "not in the profile", EGRESS_END_NOT_ALLOWED}, /* its port only */
        {"CONNECT private.test:", " HTTP/1.1\r\n\r\n", "HTTP/1.1 403", "private address",
         EGRESS_END_REFUSED_ADDRESS},
        {"CONNECT 127.0.0.2:", " HTTP/1.1\r\n\r\n", "HTTP/1.1 403", "not in the profile",
         EGRESS_END_NOT_ALLOWED},
        {"CONNECT unpinned.test:", " HTTP/1.1\r\n\r\n", "HTTP/1.1 502", "no address",
         EGRESS_END_UNRESOLVED},
        {"GET http://pinned.test:", "/ HTTP/1.1\r\nHost: other.test\r\n\r\n", "HTTP/1.1 400",
         "another host", EGRESS_END_MALFORMED},
        {"GET https://pinned.test:", "/ HTTP/1.1\r\n\r\n", "HTTP/1.1 400", "CONNECT",
         EGRESS_END_MALFORMED},
    };

    for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
        char req[256], out[1024];
        size_t before = n_events;

        (void)snprintf(req, sizeof(req), "%s%u%s", cases[i].pre, up_port, cases[i].post);
        ask(req, out, sizeof(out));
        TAP_CHECK(starts(out, cases[i].status) && strstr(out, cases[i].says) != NULL,
                  "%.50s -> %.60s", req, out);
        TAP_CHECK(wait_events(before + 1) == (int)cases[i].end, "... its event says %s (%s)",
                  egress_end_to_string(cases[i].end), event_whys[before]);
    }
    /* An address literal the rules name, in allow_cidrs: reached. */
    {
        char req[256], out[1024];

        (void)snprintf(req, sizeof(req), "GET http://127.0.0.1:%u/lit HTTP/1.1\r\n\r\n", up_port);
        ask(req, out, sizeof(out));
        TAP_CHECK(strstr(out, "hello /lit host=127.0.0.1") != NULL,
                  "an address literal the list names, in egress.allow_cidrs: reached (%.40s)", out);
    }
}

static void
on_exec(evutil_socket_t fd, short what, void *arg)
{
    char x;

    if (read(fd, &x, 1) == 1) {
        egress_gate_execution(gate);
    }
}

static void
on_stats(evutil_socket_t fd, short what, void *arg)
{
    char x;

    if (read(fd, &x, 1) == 1) {
        egress_proxy_get_stats(proxy, &seen);
        if (write(stats_done[1], "x", 1) != 1) {
            abort(); /* the main thread would wait for ever */
        }
    }
}

/* The proxy's stats now, read on the loop's thread. */
static struct egress_stats
stats(void)
{
    char x;

    ASSERT_TRUE(write(stats_pipe[1], "x", 1) == 1 && read(stats_done[0], &x, 1) == 1);
    return seen;
}

/* Reads until the peer closes; returns the count (buf holds the first n bytes). */
static size_t
count_all(int fd, char *buf, size_t n)
{
    static char scratch[1 << 16];
    size_t got = 0;
    ssize_t r;

    while ((r = read(fd, got < n ? buf + got : scratch, got < n ? n - got : sizeof(scratch))) > 0) {
        got += (size_t)r;
    }
    return got;
}

/* ---- one request per upstream connection: a raw upstream that shows what it was sent ------- */

static int raw_listener = -1; /* 127.0.0.1:raw_port, accepted on the main thread */
static uint16_t raw_port;

/* Appends to got (NUL-terminated, at most n - 1 bytes in all) what fd reads until it has been
 * quiet for 300 ms or closed; returns the count read now. */
static size_t
raw_read(int fd, char *got, size_t n)
{
    size_t had = strlen(got), now = 0;
    ssize_t r;

    while (had + now + 1 < n && (r = read(fd, got + had + now, n - 1 - had - now)) > 0) {
        now += (size_t)r;
    }
    got[had + now] = '\0';
    return now;
}

/* The raw upstream's next connection (its reads time out after 300 ms), or -1. */
static int
raw_accept(void)
{
    struct timeval tv = {.tv_sec = 5}, quiet = {.tv_usec = 300000};
    int fd;

    (void)setsockopt(raw_listener, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    fd = accept4(raw_listener, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) {
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &quiet, sizeof(quiet));
    }
    return fd;
}

/* The count of events once the earlier connections ended (and sent theirs). */
static size_t
quiet(void)
{
    for (int i = 0; i < 500 && stats().open > 0; i++) {
        usleep(10000);
    }
    return n_events;
}

static bool
send_str(int fd, const char *s)
{
    return write(fd, s, strlen(s)) == (ssize_t)strlen(s);
}

/* A request to the raw upstream into out: "<line> http://raw.test:<port><path> HTTP/1.1", its
 * Host, headers (each line with its CRLF), the empty line, then rest. */
static const char *
raw_req(char *out, size_t n, const char *method, const char *path, const char *headers,
        const char *rest)
{
    (void)snprintf(out, n, "%s http://raw.test:%u%s HTTP/1.1\r\nHost: raw.test:%u\r\n%s\r\n%s",
                   method, raw_port, path, raw_port, headers, rest);
    return out;
}

/* A request through the proxy to the raw upstream: first sent, what the upstream reads read
 * into got; then then sent (may be NULL) and what the upstream reads after it appended; then
 * the upstream answers and closes, and the sandbox reads the answer into answer. Returns what
 * the upstream read after then (-1: no upstream connection). */
static ssize_t
raw_exchange(const char *first, const char *then, char *got, size_t n, char *answer, size_t an)
{
    int fd = dial(), up = -1;
    size_t later = 0;

    got[0] = answer[0] = '\0';
    if (fd < 0 || !send_str(fd, first) || (up = raw_accept()) < 0) {
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    (void)raw_read(up, got, n);
    if (then != NULL && send_str(fd, then)) {
        later = raw_read(up, got, n);
    }
    (void)send_str(up, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
    close(up);
    (void)read_all(fd, answer, an);
    close(fd);
    return (ssize_t)later;
}

/* An absolute-form request reaches its upstream alone: what the sandbox sends after it (a
 * second request, pipelined, in another host's name) is not delivered, whether it came with the
 * head or later; a body goes with its request (Content-Length, or chunked up to its last chunk);
 * a chunked body outside the grammar cuts the connection at its first bad byte. */
TEST(one_request)
{
    static const char evil[] = "GET http://evil.test/two HTTP/1.1\r\nHost: evil.test\r\n\r\n";
    static const char evil_origin[] = "GET /two HTTP/1.1\r\nHost: evil.test\r\n\r\n";
    char req[1024], then[256], got[8192], answer[1024];
    ssize_t later;
    size_t before = quiet();

    /* Pipelined in one write, with the head. */
    later = raw_exchange(raw_req(req, sizeof(req), "GET", "/one", "", evil_origin), NULL, got,
                         sizeof(got), answer, sizeof(answer));
    TAP_CHECK(later == 0 && strstr(got, "GET /one HTTP/1.1\r\n") == got &&
                  strstr(got, "evil") == NULL && strstr(got, "/two") == NULL,
              "a second request sent with the first's head does not reach the upstream: %s", got);
    TAP_CHECK(starts(answer, "HTTP/1.1 200") && strstr(answer, "\r\n\r\nok") != NULL,
              "... the first is answered: %.40s", answer);
    ASSERT_EQ_I(wait_events(before + 1), EGRESS_END_DONE);
    TAP_CHECK(strstr(event_whys[before], "dropped") != NULL, "... its event says so: %s",
              event_whys[before]);

    /* Pipelined later, once the upstream has the first (in absolute and in origin form). */
    for (int i = 0; i < 2; i++) {
        before = quiet();
        later = raw_exchange(raw_req(req, sizeof(req), "GET", "/one", "", ""),
                             i == 0 ? evil : evil_origin, got, sizeof(got), answer, sizeof(answer));
        TAP_CHECK(later == 0 && strstr(got, "GET /one") == got && strstr(got, "evil") == NULL,
                  "a second request sent later does not reach the upstream (%zd bytes did)", later);
        TAP_CHECK(starts(answer, "HTTP/1.1 200"), "... the first is answered: %.40s", answer);
        ASSERT_EQ_I(wait_events(before + 1), EGRESS_END_DONE);
        TAP_CHECK(strstr(event_whys[before], "dropped") != NULL, "... its event says so: %s",
                  event_whys[before]);
    }

    /* A body of Content-Length bytes goes on, in two pieces; the request after it does not. */
    (void)snprintf(then, sizeof(then), "lo%s", evil_origin);
    later = raw_exchange(raw_req(req, sizeof(req), "POST", "/post", "Content-Length: 5\r\n", "hel"),
                         then, got, sizeof(got), answer, sizeof(answer));
    TAP_CHECK(later == 2 && strstr(got, "\r\n\r\nhello") == got + strlen(got) - 9,
              "a Content-Length body goes on whole, then nothing (%zd bytes after): %s", later,
              got);

    /* A chunked body: its data passed unread, its last chunk scanned; nothing after it. */
    (void)snprintf(then, sizeof(then), "lo\r\n0\r\n\r\n%s", evil_origin);
    later = raw_exchange(
        raw_req(req, sizeof(req), "POST", "/post", "Transfer-Encoding: chunked\r\n", "5\r\nhel"),
        then, got, sizeof(got), answer, sizeof(answer));
    TAP_CHECK(later == 9 &&
                  strstr(got, "\r\n\r\n5\r\nhello\r\n0\r\n\r\n") == got + strlen(got) - 19,
              "a chunked body goes on to its end, then nothing (%zd bytes after): %s", later, got);
    TAP_CHECK(starts(answer, "HTTP/1.1 200"), "... and is answered: %.40s", answer);

    /* A chunked body with a bare LF: the connection is cut there. */
    before = quiet();
    later = raw_exchange(
        raw_req(req, sizeof(req), "POST", "/post", "Transfer-Encoding: chunked\r\n", ""),
        "5\nhello\r\n0\r\n\r\n", got, sizeof(got), answer, sizeof(answer));
    TAP_CHECK(later == 0 && answer[0] == '\0',
              "a chunk size line ended by a bare LF: nothing of it goes on (%zd), the sandbox "
              "gets no answer",
              later);
    ASSERT_EQ_I(wait_events(before + 1), EGRESS_END_MALFORMED);
    TAP_CHECK(strstr(event_whys[before], "chunk") != NULL, "... its event says why: %s",
              event_whys[before]);
}

TEST(limits)
{
    static char out[1 << 21];
    char req[256];
    int fds[3];
    size_t before;

    /* max_connections 2: a third one at once is refused. */
    (void)snprintf(req, sizeof(req), "CONNECT pinned.test:%u HTTP/1.1\r\n\r\n", up_port);
    for (int i = 0; i < 2; i++) {
        char line[128];

        fds[i] = dial();
        ASSERT_TRUE(write(fds[i], req, strlen(req)) == (ssize_t)strlen(req));
        ASSERT_TRUE(read(fds[i], line, sizeof(line)) > 0);
    }
    before = n_events;
    ask(req, out, sizeof(out));
    TAP_CHECK(starts(out, "HTTP/1.1 429"), "a third connection at once: 429 (%.60s)", out);
    ASSERT_EQ_I(wait_events(before + 1), EGRESS_END_LIMIT);
    close(fds[0]);
    close(fds[1]);
    ASSERT_TRUE(wait_events(before + 3) >= 0);

    /* max_exec_bytes 4 MiB: an 8 MiB answer is cut, and the event says why. */
    before = n_events;
    ASSERT_TRUE(write(exec_pipe[1], "x", 1) == 1);
    (void)snprintf(req, sizeof(req), "GET http://pinned.test:%u/big HTTP/1.1\r\n\r\n", up_port);
    {
        int fd = dial();
        size_t got = 0;

        if (fd >= 0 && write(fd, req, strlen(req)) == (ssize_t)strlen(req)) {
            got = count_all(fd, out, sizeof(out));
        }
        close(fd);
        TAP_CHECK(got > (2u << 20) && got < (8u << 20),
                  "an 8 MiB answer over the execution's bytes is cut (%zu)", got);
    }
    ASSERT_EQ_I(wait_events(before + 1), EGRESS_END_LIMIT);
    TAP_CHECK(strstr(event_whys[before], "max_exec_bytes") != NULL, "... saying so: %s",
              event_whys[before]);
}

/* ---- handoffs: a forwarder passes the sandbox's connection itself --------------------------- */

/* A TCP connection on 127.0.0.1: *client is the sandbox's end; returns the other (the one a
 * forwarder accepted), or -1. */
static int
tcp_pair(int *client)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    struct timeval tv = {.tv_sec = 5};
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), accepted = -1;

    *client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l >= 0 && *client >= 0 && bind(l, (struct sockaddr *)&sin, sizeof(sin)) == 0 &&
        listen(l, 1) == 0 && getsockname(l, (struct sockaddr *)&sin, &len) == 0 &&
        connect(*client, (struct sockaddr *)&sin, sizeof(sin)) == 0) {
        accepted = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    }
    (void)setsockopt(*client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    close(l);
    return accepted;
}

/* Sends byte with n_fds descriptors on gate connection u and closes those descriptors (as the
 * forwarder does); false when it could not. */
static bool
send_fds(int u, char byte, const int *fds, size_t n_fds)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctl = {0};
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};

    if (n_fds > 0) {
        m.msg_control = ctl.buf;
        m.msg_controllen = CMSG_SPACE(n_fds * sizeof(int));
        ctl.h.cmsg_level = SOL_SOCKET;
        ctl.h.cmsg_type = SCM_RIGHTS;
        ctl.h.cmsg_len = CMSG_LEN(n_fds * sizeof(int));
        memcpy(CMSG_DATA(&ctl.h), fds, n_fds * sizeof(int));
    }
    if (sendmsg(u, &m, MSG_NOSIGNAL) != 1) {
        return false;
    }
    for (size_t i = 0; i < n_fds; i++) {
        close(fds[i]);
    }
    return true;
}

/* send_fds(), then the first byte of the answer (-1: none). */
static int
offer(int u, char byte, const int *fds, size_t n_fds)
{
    unsigned char answer;

    return send_fds(u, byte, fds, n_fds) && read(u, &answer, 1) == 1 ? answer : -1;
}

/* Whether the proxy closed its copy of a pipe's write end: its read end r sees the end. */
static bool
closed_by_proxy(int r)
{
    char x;
    struct timeval tv = {.tv_sec = 5};
    fd_set set;

    FD_ZERO(&set);
    FD_SET(r, &set);
    return select(r + 1, &set, NULL, NULL, &tv) == 1 && read(r, &x, 1) == 0;
}

/* Whether a process of uid may connect to the unix socket at path (a child of this one, which
 * must be root); -errno of its connect. */
static int
connect_as(const char *path, uid_t uid)
{
    pid_t pid = fork();
    int status;

    if (pid == 0) {
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);

        memcpy(sun.sun_path, path, strlen(path) + 1);
        if (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 ||
            setresuid(uid, uid, uid) < 0) {
            _exit(100);
        }
        _exit(connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0 ? 0 : errno);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
        return -EIO;
    }
    return -WEXITSTATUS(status);
}

/* A listening unix socket at dir/name; its path into out. */
static int
listen_at(const char *dir, const char *name, char *out, size_t n)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    (void)snprintf(out, n, "%s/%s", dir, name);
    memcpy(sun.sun_path, out, strlen(out) + 1);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 || listen(fd, 4) < 0) {
        return -1;
    }
    return fd;
}

/* Only a gate's relay may connect to it: no other uid can hand the daemon a descriptor (one set
 * to linger on close would stall the daemon when it let go of it). */
TEST(restricted)
{
    const char *dir = egress_gate_dir(gate);
    struct stat st;
    char path[4200];
    int fd, r;

    r = stat(sock_path, &st);
    TAP_CHECK(r == 0 && (st.st_mode & 0777) == 0600 && st.st_uid == getuid(),
              "the gate's socket is its relay's alone: mode %o, uid %u", st.st_mode & 0777,
              (unsigned)st.st_uid);
    r = stat(dir, &st);
    TAP_CHECK(r == 0 && (st.st_mode & 0777) == 0711,
              "its directory lets the forwarder through under a umask of 077: %o",
              st.st_mode & 0777);
    if (getuid() != 0) {
        tap_skip(4, "not root: no other uid to connect as");
        return;
    }
    fd = listen_at(dir, "chowned.sock", path, sizeof(path));
    ASSERT_TRUE(fd >= 0 && egress_socket_restrict(path, 54321, true) == 0);
    r = stat(path, &st);
    TAP_CHECK(r == 0 && st.st_uid == 54321 && (st.st_mode & 0777) == 0600,
              "chowned: the relay's, mode 0600 (uid %u, %o)", (unsigned)st.st_uid,
              st.st_mode & 0777);
    TAP_CHECK(connect_as(path, 54321) == 0 && connect_as(path, 54320) == -EACCES,
              "... its relay connects, the sandbox's user code's uid gets EACCES");
    close(fd);
    (void)unlink(path);
    fd = listen_at(dir, "acl.sock", path, sizeof(path));
    ASSERT_TRUE(fd >= 0);
    r = egress_socket_restrict(path, 54321, false); /* as a daemon without CAP_CHOWN */
    if (r == -EOPNOTSUPP) {
        tap_skip(1, "no POSIX ACLs on this file system");
    } else {
        TAP_CHECK(r == 0 && connect_as(path, 54321) == 0 && connect_as(path, 54320) == -EACCES &&
                      connect_as(path, 65534) == -EACCES,
                  "an ACL entry instead (%d): its relay connects, other uids get EACCES", r);
    }
    close(fd);
    (void)unlink(path);
}

static void on_loop(char cmd);

TEST(handoff)
{
    static char out[1 << 22];
    char req[256], path2[4200];
    struct egress_stats st0 = stats(), st1;
    size_t before = n_events;
    int client, accepted, u, p1[2], p2[2], a;

    ASSERT_TRUE(write(exec_pipe[1], "x", 1) == 1);
    /* Taken: the proxy answers TAKEN, and the sandbox's own connection carries the request. */
    accepted = tcp_pair(&client);
    u = dial();
    ASSERT_TRUE(accepted >= 0 && u >= 0);
    a = offer(u, EGRESS_HANDOFF, &accepted, 1);
    TAP_CHECK(a == EGRESS_HANDOFF_TAKEN, "a handoff from the gate's relay uid is taken (%d)", a);
    TAP_CHECK(read(u, out, 1) == 0, "... and the gate's connection closed");
    close(u);
    (void)snprintf(req, sizeof(req), "CONNECT pinned.test:%u HTTP/1.1\r\n\r\n", up_port);
    ASSERT_TRUE(write(client, req, strlen(req)) == (ssize_t)strlen(req));
    ASSERT_TRUE(read(client, out, 39) == 39);
    TAP_CHECK(starts(out, "HTTP/1.1 200 Connection established\r\n\r\n"),
              "CONNECT on the handed-over connection: 200 (%.30s)", out);
    (void)snprintf(req, sizeof(req),
                   "GET /pattern HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    ASSERT_TRUE(write(client, req, strlen(req)) == (ssize_t)strlen(req));
    {
        size_t got = count_all(client, out, sizeof(out)), body = (size_t)PATTERN_CHUNKS << 16;
        const char *b = got > body ? out + got - body : NULL;
        bool same = b != NULL;

        for (size_t i = 0; same && i < body; i++) {
            same = b[i] == (char)((i % 65536) * 7 + 3);
        }
        TAP_CHECK(same, "... 3 MiB through it arrive whole and in order (%zu bytes)", got);
    }
    close(client);
    ASSERT_EQ_I(wait_events(before + 1), EGRESS_END_DONE);
    TAP_CHECK(events[before].bytes_down > (3u << 20), "... counted: %llu bytes down",
              (unsigned long long)events[before].bytes_down);
    st1 = stats();
    TAP_CHECK(st1.handoffs == st0.handoffs + 1 && st1.handoffs_refused == st0.handoffs_refused,
              "... one handoff counted (%llu)", (unsigned long long)st1.handoffs);

    /* Not a TCP socket (a pipe's end), or two descriptors: closed, RELAY answered, and the head
     * is read from the gate's connection. */
    ASSERT_TRUE(pipe2(p1, O_CLOEXEC) == 0 && pipe2(p2, O_CLOEXEC) == 0);
    u = dial();
    a = offer(u, EGRESS_HANDOFF, &p1[1], 1);
    TAP_CHECK(a == EGRESS_HANDOFF_RELAY && closed_by_proxy(p1[0]),
              "a pipe handed over: RELAY answered (%d), the pipe closed", a);
    (void)snprintf(req, sizeof(req), "GET http://pinned.test:%u/relayed HTTP/1.1\r\n\r\n", up_port);
    ASSERT_TRUE(write(u, req, strlen(req)) == (ssize_t)strlen(req));
    (void)read_all(u, out, 4096);
    TAP_CHECK(strstr(out, "hello /relayed") != NULL, "... then its head relayed: %.40s", out);
    close(u);
    accepted = tcp_pair(&client);
    u = dial();
    {
        int two[2] = {accepted, p2[1]};

        a = offer(u, EGRESS_HANDOFF, two, 2);
    }
    TAP_CHECK(a == EGRESS_HANDOFF_RELAY && closed_by_proxy(p2[0]) && read(client, out, 1) == 0,
              "two descriptors: RELAY (%d), both closed", a);
    close(u);
    close(client);
    close(p1[0]);
    close(p2[0]);

    /* A head's first byte with a descriptor: the descriptor is closed, the head read. */
    ASSERT_TRUE(pipe2(p1, O_CLOEXEC) == 0);
    u = dial();
    (void)snprintf(req, sizeof(req), "ET http://pinned.test:%u/g HTTP/1.1\r\n\r\n", up_port);
    a = send_fds(u, 'G', &p1[1], 1) ? (int)write(u, req, strlen(req)) : -1;
    (void)read_all(u, out, 4096);
    TAP_CHECK(a > 0 && closed_by_proxy(p1[0]) && strstr(out, "hello /g") != NULL,
              "a head's first byte with a descriptor: the descriptor closed, the head read (%.40s)",
              out);
    close(u);
    close(p1[0]);

    /* A gate whose relay is another uid: its offers are refused; unbound, it answers 403. */
    on_loop('n');
    ASSERT_TRUE(other != NULL);
    (void)snprintf(path2, sizeof(path2), "%s/proxy.sock", egress_gate_dir(other));
    accepted = tcp_pair(&client);
    u = dial_path(path2);
    a = offer(u, EGRESS_HANDOFF, &accepted, 1);
    (void)read_all(u, out + 1, 4096);
    out[0] = (char)a;
    TAP_CHECK(starts(out, "HTTP/1.1 403") && strstr(out, "no session") != NULL &&
                  read(client, out + 8192, 1) == 0,
              "an offer to an unbound gate: its 403 is the answer, the connection closed (%.40s)",
              out);
    close(u);
    close(client);
    st0 = stats();
    on_loop('b');
    accepted = tcp_pair(&client);
    u = dial_path(path2);
    a = offer(u, EGRESS_HANDOFF, &accepted, 1);
    st1 = stats();
    TAP_CHECK(a == EGRESS_HANDOFF_RELAY && read(client, out, 1) == 0 &&
                  st1.handoffs_refused == st0.handoffs_refused + 1,
              "an offer from another uid than the gate's relay: RELAY (%d), the connection closed",
              a);
    close(u);
    close(client);
    on_loop('f');
    ASSERT_TRUE(wait_events(before + 6) >= 0);
}

static void
on_unbind(evutil_socket_t fd, short what, void *arg)
{
    struct err e = {0};
    char x;

    if (read(fd, &x, 1) != 1) {
        return;
    }
    switch (x) {
    case 'x':
        egress_gate_unbind(gate);
        return; /* nobody waits */
    case 'n':   /* a second gate, whose relay is another uid than this process's */
        if (egress_gate_new(proxy, "slot-2", getuid() + 1, &other, &e) < 0) {
            other = NULL;
        }
        break;
    case 'b':
        egress_gate_bind(other, "tenant-b", "session-2", &test_rules, NULL, 0);
        break;
    default:
        egress_gate_free(other, true);
        other = NULL;
        break;
    }
    if (write(stats_done[1], "x", 1) != 1) {
        abort(); /* the main thread would wait for ever */
    }
}

/* Has the loop's thread do cmd to the second gate (on_unbind), and waits until it is done. */
static void
on_loop(char cmd)
{
    char x;

    ASSERT_TRUE(write(unbind_pipe[1], &cmd, 1) == 1 && read(stats_done[0], &x, 1) == 1);
}

/* Bytes that wait for a side wait in a pipe; none is held once they went, nor by an idle
 * connection; every byte arrives, in order. (Not with the sandbox's side shut after its
 * request: evhttp, the upstream here, drops a request whose client half-closed.) */
TEST(flows)
{
    static char body[(PATTERN_CHUNKS << 16) + 4096];
    char req[256], line[256];
    const char *start;
    size_t before, got, bad = 0;
    int fd, idle;
    ssize_t r;

    for (int i = 0; i < 500 && stats().open > 0; i++) {
        usleep(10000); /* the earlier tests' last connections end (and send their events) */
    }
    before = n_events;
    fd = dial();
    idle = dial();

    ASSERT_TRUE(write(exec_pipe[1], "x", 1) == 1); /* a new execution: its budget afresh */
    (void)snprintf(req, sizeof(req), "CONNECT pinned.test:%u HTTP/1.1\r\n\r\n", up_port);
    ASSERT_TRUE(write(idle, req, strlen(req)) == (ssize_t)strlen(req));
    ASSERT_TRUE(read(idle, line, sizeof(line)) > 0); /* open, and idle from now on */
    (void)snprintf(req, sizeof(req),
                   "GET http://pinned.test:%u/pattern HTTP/1.1\r\nHost: pinned.test:%u\r\n"
                   "Connection: close\r\n\r\n",
                   up_port, up_port);
    ASSERT_TRUE(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
    usleep(300000); /* the answer comes, and nobody reads it */
    TAP_CHECK(stats().pipes == 1, "an answer nobody reads waits in one pipe (%u)", stats().pipes);
    got = count_all(fd, body, sizeof(body));
    close(fd);
    start = strstr(body, "\r\n\r\n");
    ASSERT_TRUE(start != NULL);
    start += 4;
    TAP_CHECK(got - (size_t)(start - body) == (size_t)PATTERN_CHUNKS << 16,
              "then every byte arrives (%zu of %u)", got - (size_t)(start - body),
              PATTERN_CHUNKS << 16);
    for (size_t i = 0; i < ((size_t)PATTERN_CHUNKS << 16) && start + i < body + got; i++) {
        bad += start[i] != (char)((i & 0xffff) * 7 + 3);
    }
    TAP_CHECK(bad == 0, "... in order (%zu differ)", bad);
    ASSERT_EQ_I(wait_events(before + 1), EGRESS_END_DONE);
    TAP_CHECK(events[before].bytes_down >= (uint64_t)PATTERN_CHUNKS << 16, "... and counted (%llu)",
              (unsigned long long)events[before].bytes_down);
    TAP_CHECK(stats().pipes == 0 && stats().open == 1,
              "then no pipe is held, the idle tunnel holds none (%u pipes, %u open)", stats().pipes,
              stats().open);
    (void)snprintf(req, sizeof(req), "GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    r = write(idle, req, strlen(req));
    TAP_CHECK(r == (ssize_t)strlen(req) && count_all(idle, body, sizeof(body)) > 0 &&
                  strstr(body, "hello /x"),
              "the idle tunnel still carries a request");
    close(idle);
    ASSERT_EQ_I(wait_events(before + 2), EGRESS_END_DONE);
    TAP_CHECK(egress_descriptor_budget(0, 16) == 0 &&
                  egress_descriptor_budget(10, 16) == 10 + 320 + 5 * 160 + 32 &&
                  egress_descriptor_budget(10000, 16) == 10000 + 4096 + 5 * 4096 + 32,
              "the descriptor budget: a listener per gate, the connections within the proxy's "
              "bound");
}

TEST(unbound)
{
    char req[256], out[1024], line[128];
    int fd;
    size_t before = n_events;

    (void)snprintf(req, sizeof(req), "CONNECT pinned.test:%u HTTP/1.1\r\n\r\n", up_port);
    fd = dial();
    ASSERT_TRUE(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
    ASSERT_TRUE(read(fd, line, sizeof(line)) > 0);
    ASSERT_TRUE(write(unbind_pipe[1], "x", 1) == 1); /* on_unbind, on the loop's thread */
    TAP_CHECK(read(fd, line, sizeof(line)) == 0, "the session unbound: its open tunnel closes");
    close(fd);
    ASSERT_EQ_I(wait_events(before + 1), EGRESS_END_NO_SESSION);
    ask(req, out, sizeof(out));
    TAP_CHECK(starts(out, "HTTP/1.1 403") && strstr(out, "no session") != NULL,
              "then a new connection: 403 no session (%.60s)", out);
}

int
main(void)
{
    char dir[] = "/tmp/sandpool-test-egress.XXXXXX";
    struct egress_host hosts[4];
    struct egress_cidr cidrs[2];
    struct egress_rules rules = {0};
    struct egress_proxy_config cfg = {0};
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    struct event *stop, *unbind, *exec, *stat;
    pthread_t thread;
    struct err e = {0};
    char rules_text[512];
    json_t *j;
    int n_hosts, n_cidrs;
    mode_t old_umask;

    (void)signal(SIGPIPE, SIG_IGN); /* as in sandpoold: a closed peer is an error, not a death */
    base = event_base_new();
    http = evhttp_new(base);
    evhttp_set_gencb(http, on_upstream, NULL);
    bound = evhttp_bind_socket_with_handle(http, "127.0.0.1", 0);
    if (bound == NULL || mkdtemp(dir) == NULL || chmod(dir, 0711) < 0 || pipe(stop_pipe) < 0 ||
        pipe(unbind_pipe) < 0 || pipe(exec_pipe) < 0 || pipe(stats_pipe) < 0 ||
        pipe(stats_done) < 0) {
        TAP_SKIP_ALL("no loopback listener or temporary directory");
    }
    {
        struct sockaddr_in sin;
        socklen_t len = sizeof(sin);

        getsockname(evhttp_bound_socket_get_fd(bound), (struct sockaddr *)&sin, &len);
        up_port = ntohs(sin.sin_port);
        sin.sin_port = 0;
        raw_listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (raw_listener < 0 || bind(raw_listener, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
            listen(raw_listener, 4) < 0 ||
            getsockname(raw_listener, (struct sockaddr *)&sin, &len) < 0) {
            TAP_SKIP_ALL("no second loopback listener");
        }
        raw_port = ntohs(sin.sin_port);
    }
    n_hosts = egress_hosts_parse("pinned.test=127.0.0.1,evil.pinned.test=127.0.0.1,"
                                 "private.test=10.0.0.1,raw.test=127.0.0.1",
                                 hosts, 4, &e);
    n_cidrs = egress_cidrs_parse("127.0.0.1/32", cidrs, 2, &e);
    cfg = (struct egress_proxy_config){.dir = dir,
                                       .resolv_conf = "",
                                       .hosts = hosts,
                                       .n_hosts = (size_t)n_hosts,
                                       .cidrs = cidrs,
                                       .n_cidrs = (size_t)n_cidrs,
                                       .max_connections = 2,
                                       .max_bytes = 64u << 20,
                                       .max_exec_bytes = 4u << 20,
                                       .connect_timeout_ms = 3000,
                                       .head_timeout_ms = 3000};
    ASSERT_OK(egress_proxy_new(base, &cfg, on_event, NULL, &proxy, &e));
    old_umask = umask(077); /* the systemd unit's */
    ASSERT_OK(egress_gate_new(proxy, "slot-1", getuid(), &gate, &e));
    (void)umask(old_umask);
    (void)snprintf(sock_path, sizeof(sock_path), "%s/proxy.sock", egress_gate_dir(gate));
    (void)snprintf(rules_text, sizeof(rules_text),
                   "{\"allow\": [\"*.pinned.test:%u\", \"pinned.test:%u\", \"private.test:%u\","
                   " \"unpinned.test:%u\", \"127.0.0.1:%u\", \"raw.test:%u\"],"
                   " \"deny\": [\"evil.pinned.test\"]}",
                   up_port, up_port, up_port, up_port, up_port, raw_port);
    j = json_loads(rules_text, 0, NULL);
    ASSERT_OK(egress_rules_from_json(j, "egress", &rules, &e));
    json_decref(j);
    egress_gate_bind(gate, "tenant-a", "session-1", &rules, NULL, 0);
    test_rules = rules; /* for the second gate (handoff), done at the end */
    stop = event_new(base, stop_pipe[0], EV_READ, on_stop, NULL);
    event_add(stop, NULL);
    unbind = event_new(base, unbind_pipe[0], EV_READ | EV_PERSIST, on_unbind, NULL);
    event_add(unbind, NULL);
    exec = event_new(base, exec_pipe[0], EV_READ | EV_PERSIST, on_exec, NULL);
    event_add(exec, NULL);
    stat = event_new(base, stats_pipe[0], EV_READ | EV_PERSIST, on_stats, NULL);
    event_add(stat, NULL);
    pthread_create(&thread, NULL, loop_thread, NULL);

    RUN(allowed);
    RUN(refused);
    RUN(one_request);
    RUN(flows);
    RUN(handoff);
    RUN(restricted);
    RUN(limits);
    RUN(unbound);

    ASSERT_TRUE(write(stop_pipe[1], "x", 1) == 1);
    pthread_join(thread, NULL);
    egress_gate_free(gate, true);
    egress_rules_done(&test_rules);
    /* Its connections' bufferevents are freed from the loop (their callbacks are deferred): a
     * turn of it, as the daemon's loop goes on after a gate is freed. */
    (void)event_base_loop(base, EVLOOP_NONBLOCK);
    egress_proxy_free(proxy);
    TAP_CHECK(access(sock_path, F_OK) < 0 && rmdir(dir) == 0,
              "the gate's socket and directory are removed with it");
    event_free(stop);
    event_free(unbind);
    event_free(exec);
    event_free(stat);
    close(raw_listener);
    evhttp_free(http);
    event_base_free(base);
    return tap_done();
}
