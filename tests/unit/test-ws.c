/* WebSocket streams hosted by the HTTP core (src/http/ws.c, ws-handshake.c), against the real core
 * (http_new() with the body filter, auth and routing) serving a test protocol on 127.0.0.1:
 *
 *   GET /test/ws?max=N&queue=N&ping=S   upgraded (HTTP_ROUTE_WEBSOCKET); subprotocols "v1.test"
 *                                       and "json"; a tenant's token required
 *
 * Its stream echoes every message, but for text commands: "!close CODE" closes with CODE,
 * "!flood N SIZE" sends N binary messages of SIZE bytes numbered in their first 4 bytes, going on
 * after drained() whenever http_ws_send() refused one (flow control without loss).
 *
 * 1. The handshake's judge, pure (RFC 6455's own example key among the cases).
 * 2. Raw clients on threads of their own (blocking sockets with deadlines): the 101, echo, frames
 *    right behind the head, fragments, ping, both closing handshakes; hostile ones: an unmasked
 *    frame (1002), a message over the bound (1009), text that is not UTF-8 (1007), a client that
 *    vanishes (1006), one that never reads a flood (the queue stays bounded), one that goes silent
 *    (pinged, then closed with 1001); refusals (no token, no Upgrade, version 12, a foreign
 *    Origin), after which no byte that followed the head is read as HTTP.
 * 3. The real client: Node's `ws` package (tests/interop, pinned in its lockfile), through
 *    tests/interop/ws-check.mjs, when tests/interop/node_modules holds it (tests/run.sh installs it
 *    before the unit suites; tests/quick.sh does not, and says so).
 * 4. Not a stream, the other long-lived request: GET /test/wait?ms=N answers after N ms (an
 *    http_pending wait). A client that hangs up meanwhile is seen at once (body.c's hang-up
 *    watch): the handler's gone() runs and nothing is answered; one that waits gets its answer.
 * 5. The core stopping with a stream open: the client gets 1001 and the protocol hears it.
 * The raw clients build their frames by hand: hostile frames are the point of them. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "config/config.h"
#include "http/http-internal.h"
#include "lib/loop.h"
#include "tap.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/parse.h"

#define TOKEN     "ws-test-token-acme"
#define CLIENT_MS 5000u /* a raw client's read deadline */
#define RUN_MS    20000u

/* ---- the test protocol ----------------------------------------------------------------------- */

static struct event_base *base;

struct stream {
    struct http_ws *ws;
    unsigned flood_left, flood_size, flood_seq;
};

/* What the server side saw (the loop thread's; read by the test thread between runs). */
static struct {
    unsigned opened, closed, last_code, drained, refused, messages;
    unsigned waits, waits_gone, waits_answered;
    size_t max_queued, queue_seen;
} seen;

static void flood(struct stream *st);

static void
on_message(struct http_ws *ws, bool binary, const uint8_t *data, size_t n, void *arg)
{
    struct stream *st = arg;
    unsigned a, b;
    char cmd[64];

    seen.messages++;
    if (!binary && n > 1 && n < sizeof(cmd) && data[0] == '!') {
        memcpy(cmd, data, n);
        cmd[n] = '\0';
        if (sscanf(cmd, "!close %u", &a) == 1) {
            http_ws_close(ws, a, "asked to");
            return;
        }
        if (sscanf(cmd, "!flood %u %u", &a, &b) == 2 && b >= 4) {
            st->flood_left = a;
            st->flood_size = b;
            flood(st);
            return;
        }
    }
    (void)http_ws_send(ws, binary, data, n);
}

static void
flood(struct stream *st)
{
    uint8_t *msg = calloc(1, st->flood_size);

    while (msg != NULL && st->flood_left > 0) {
        memcpy(msg, &st->flood_seq, 4);
        if (http_ws_send(st->ws, true, msg, st->flood_size) < 0) {
            seen.refused++;
            break;
        }
        st->flood_seq++;
        st->flood_left--;
        seen.queue_seen = MAX(seen.queue_seen, http_ws_queued(st->ws));
    }
    free(msg);
}

static void
on_drained(struct http_ws *ws, void *arg)
{
    seen.drained++;
    flood(arg);
}

static void
on_closed(struct http_ws *ws, unsigned code, void *arg)
{
    seen.closed++;
    seen.last_code = code;
    free(arg);
}

static unsigned
query_u(struct evkeyvalq *q, const char *name, unsigned dflt)
{
    const char *v = evhttp_find_header(q, name);
    uint64_t u;

    return v != NULL && parse_u64(v, &u) == 0 ? (unsigned)u : dflt;
}

static void
on_ws(struct http *h, struct evhttp_request *req, const char *const *params)
{
    static const char *const protocols[] = {"v1.test", "json", NULL};
    static const char *const origins[] = {"https://console.example", NULL};
    static const struct http_ws_callbacks cb = {on_message, on_drained, on_closed};
    struct evkeyvalq q;
    struct http_ws_options o = {.protocols = protocols, .origins = origins};
    struct stream *st;

    if (http_require_tenant(h, req) == NULL) {
        return;
    }
    (void)evhttp_parse_query_str(evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req)) ?: "",
                                 &q);
    o.max_message = query_u(&q, "max", 1u << 20);
    o.max_queued = query_u(&q, "queue", 1u << 20);
    o.ping_s = query_u(&q, "ping", 0);
    evhttp_clear_headers(&q);
    seen.max_queued = o.max_queued;
    st = xcalloc(1, sizeof(*st));
    st->ws = http_ws_accept(h, req, &o, &cb, st);
    if (st->ws == NULL) {
        free(st);
        return;
    }
    seen.opened++;
}

struct wait {
    struct http_pending pending;
    struct event *timer;
};

static void
wait_free(struct wait *w)
{
    event_free(w->timer);
    free(w);
}

static void
on_wait_gone(struct http_pending *p)
{
    seen.waits_gone++;
    wait_free(container_of(p, struct wait, pending));
}

static void
on_wait_timer(evutil_socket_t fd, short what, void *arg)
{
    struct wait *w = arg;
    struct evhttp_request *req = w->pending.req;

    http_pending_end(&w->pending);
    http_reply_json_new(req, 200, json_pack("{s:s}", "answer", "late"));
    seen.waits_answered++;
    wait_free(w);
}

static void
on_wait(struct http *h, struct evhttp_request *req, const char *const *params)
{
    struct evkeyvalq q;
    struct wait *w;
    unsigned ms;

    if (http_require_tenant(h, req) == NULL) {
        return;
    }
    (void)evhttp_parse_query_str(evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req)) ?: "",
                                 &q);
    ms = query_u(&q, "ms", 1000);
    evhttp_clear_headers(&q);
    w = xcalloc(1, sizeof(*w));
    w->timer = OOM_CHECK(evtimer_new(base, on_wait_timer, w));
    http_pending_start(&w->pending, req, on_wait_gone);
    (void)event_add(w->timer, &(struct timeval){ms / 1000, (ms % 1000) * 1000});
    seen.waits++;
}

static const struct http_route routes[] = {
    {EVHTTP_REQ_GET, HTTP_ROUTE_WEBSOCKET, "/test/ws", on_ws},
    {EVHTTP_REQ_GET, 0, "/test/wait", on_wait},
};
static const struct http_protocol test_protocol = {"test", routes, ELEMENTSOF(routes),
                                                   NULL,   NULL,   NULL};

static struct cfg *cfg;
static struct http *core;
static uint16_t port;
static const struct http_backend backend = {0};

static void
server_start(void)
{
    const struct http_protocol *const protocols[] = {&test_protocol};
    unsigned char digest[SHA256_DIGEST_LENGTH];
    char hex[2 * SHA256_DIGEST_LENGTH + 1], json[512];
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    struct err e = {0};
    int fd;

    (void)SHA256((const unsigned char *)TOKEN, strlen(TOKEN), digest);
    for (size_t i = 0; i < sizeof(digest); i++) {
        (void)snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    }
    /* A port the kernel just gave out and took back (the listen address takes no port 0). */
    sa = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        abort();
    }
    (void)close(fd);
    (void)snprintf(json, sizeof(json),
                   "{\"listen\": \"127.0.0.1:%u\", \"tenants\": [{\"id\": \"acme\", "
                   "\"token_sha256\": \"%s\"}]}",
                   ntohs(sa.sin_port), hex);
    base = OOM_CHECK(event_base_new());
    cfg = cfg_new();
    if (cfg_load_json(cfg, json, strlen(json), &e) < 0 ||
        http_new(base, cfg, &backend, protocols, 1, &core, &e) < 0 ||
        getsockname(evhttp_bound_socket_get_fd(core->bound), (struct sockaddr *)&sa,
                    &(socklen_t){sizeof(sa)}) < 0) {
        printf("Bail out! cannot start the core: %s\n", err_msg(&e));
        exit(1);
    }
    port = ntohs(sa.sin_port);
}

/* ---- raw clients ----------------------------------------------------------------------------- */

typedef void client_fn(void *arg);
struct runner {
    client_fn *fn;
    void *arg;
    bool done;
};

static void *
runner_main(void *p)
{
    struct runner *r = p;

    r->fn(r->arg);
    __atomic_store_n(&r->done, true, __ATOMIC_RELEASE);
    return NULL;
}

static void
on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct runner *r = arg;

    if (__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) {
        (void)event_base_loopbreak(base);
    }
}

/* Runs fn(arg) on a thread while the server loop turns; false when it did not finish in RUN_MS. */
static bool
run_client(client_fn *fn, void *arg)
{
    struct runner r = {.fn = fn, .arg = arg};
    struct event *tick = OOM_CHECK(event_new(base, -1, EV_PERSIST, on_tick, &r));
    uint64_t end = time_now_ms() + RUN_MS;
    pthread_t t;

    (void)event_add(tick, &(struct timeval){0, 5000});
    if (pthread_create(&t, NULL, runner_main, &r) != 0) {
        abort();
    }
    while (!__atomic_load_n(&r.done, __ATOMIC_ACQUIRE) && time_now_ms() < end) {
        (void)event_base_loop(base, EVLOOP_ONCE);
    }
    (void)pthread_join(t, NULL); /* the client's own deadlines end it */
    event_free(tick);
    loop_for(base, 50); /* what the client's last bytes start on the server side */
    return r.done;
}

static int
cli_open(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    struct timeval tv = {.tv_sec = CLIENT_MS / 1000};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        abort();
    }
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static bool
cli_write(int fd, const void *p, size_t n)
{
    return send(fd, p, n, MSG_NOSIGNAL) == (ssize_t)n;
}

static bool
cli_read_exact(int fd, void *p, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = recv(fd, (char *)p + got, n - got, 0);

        if (r <= 0) {
            return false;
        }
        got += (size_t)r;
    }
    return true;
}

/* An answer's head, into out (NUL-terminated); false on EOF or the deadline. */
static bool
cli_read_head(int fd, char *out, size_t n)
{
    size_t len = 0;

    while (len + 1 < n) {
        if (!cli_read_exact(fd, out + len, 1)) {
            return false;
        }
        out[++len] = '\0';
        if (len >= 4 && memcmp(out + len - 4, "\r\n\r\n", 4) == 0) {
            return true;
        }
    }
    return false;
}

/* Bytes until EOF (or the deadline: false). */
static bool
cli_read_eof(int fd, size_t *ret_n)
{
    char tmp[4096];
    ssize_t r;

    *ret_n = 0;
    while ((r = recv(fd, tmp, sizeof(tmp), 0)) > 0) {
        *ret_n += (size_t)r;
    }
    return r == 0;
}

#define KEY    "dGhlIHNhbXBsZSBub25jZQ=="
#define ACCEPT "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

/* A handshake head for /test/ws with query and extra header lines. */
static void
handshake(char *out, size_t n, const char *query, const char *extra)
{
    (void)snprintf(out, n,
                   "GET /test/ws%s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Key: " KEY "\r\n"
                   "Sec-WebSocket-Version: 13\r\nAuthorization: Bearer " TOKEN "\r\n%s\r\n",
                   query, port, extra);
}

/* A client frame: FIN as given, masked unless `unmasked` (the hostile case). */
static size_t
frame(uint8_t *out, bool fin, unsigned opcode, const void *payload, size_t n, bool unmasked)
{
    static const uint8_t mask[4] = {0x37, 0xfa, 0x21, 0x3d};
    size_t h = 0;

    out[h++] = (uint8_t)((fin ? 0x80 : 0) | opcode);
    if (n < 126) {
        out[h++] = (uint8_t)((unmasked ? 0 : 0x80) | n);
    } else if (n < 65536) {
        out[h++] = (uint8_t)((unmasked ? 0 : 0x80) | 126);
        out[h++] = (uint8_t)(n >> 8);
        out[h++] = (uint8_t)n;
    } else {
        out[h++] = (uint8_t)((unmasked ? 0 : 0x80) | 127);
        for (int i = 7; i >= 0; i--) {
            out[h++] = (uint8_t)((uint64_t)n >> (8 * i));
        }
    }
    if (!unmasked) {
        memcpy(out + h, mask, 4);
        h += 4;
    }
    for (size_t i = 0; i < n; i++) {
        out[h + i] = (uint8_t)(((const uint8_t *)payload)[i] ^ (unmasked ? 0 : mask[i % 4]));
    }
    return h + n;
}

/* A server frame (never masked); payload into out (at most cap bytes). */
static bool
read_frame(int fd, unsigned *opcode, uint8_t *out, size_t cap, size_t *ret_n)
{
    uint8_t h[2], ext[8];
    uint64_t n;

    if (!cli_read_exact(fd, h, 2) || (h[1] & 0x80) != 0) {
        return false;
    }
    *opcode = h[0] & 0x0f;
    n = h[1] & 0x7f;
    if (n == 126 || n == 127) {
        size_t k = n == 126 ? 2 : 8;

        if (!cli_read_exact(fd, ext, k)) {
            return false;
        }
        n = 0;
        for (size_t i = 0; i < k; i++) {
            n = n << 8 | ext[i];
        }
    }
    *ret_n = (size_t)n;
    return n <= cap && cli_read_exact(fd, out, (size_t)n);
}

/* What a client saw. */
struct result {
    const char *query, *extra;
    char head[2048];
    bool head_ok;
    unsigned ops[8];
    size_t lens[8];
    uint8_t payloads[8][256];
    unsigned n_frames;
    unsigned close_code;
    bool eof;
    size_t bytes_after;
    unsigned flood_got, flood_bad;
};

/* Reads server frames into r until a close frame (its code kept), EOF or max frames. */
static void
read_frames(int fd, struct result *r, unsigned max)
{
    static uint8_t big[1u << 20];

    while (r->n_frames < max) {
        unsigned op;
        size_t n;

        if (!read_frame(fd, &op, big, sizeof(big), &n)) {
            return;
        }
        r->ops[r->n_frames] = op;
        r->lens[r->n_frames] = n;
        memcpy(r->payloads[r->n_frames], big, MIN(n, sizeof(r->payloads[0])));
        r->n_frames++;
        if (op == 8) {
            r->close_code = n >= 2 ? (unsigned)(big[0] << 8 | big[1]) : 1005u;
            return;
        }
    }
}

static int
open_stream(struct result *r)
{
    char head[1024];
    int fd = cli_open();

    handshake(head, sizeof(head), r->query ? r->query : "", r->extra ? r->extra : "");
    r->head_ok = cli_write(fd, head, strlen(head)) && cli_read_head(fd, r->head, sizeof(r->head));
    return fd;
}

static void
close_and_drain(int fd, struct result *r)
{
    uint8_t f[16], code[2] = {0x03, 0xe8}; /* 1000 */

    (void)cli_write(fd, f, frame(f, true, 8, code, 2, false));
    read_frames(fd, r, 8);
    r->eof = cli_read_eof(fd, &r->bytes_after);
    (void)close(fd);
}

/* ---- 1. the judge ---------------------------------------------------------------------------- */

TEST(judge)
{
    static const char *const sup[] = {"v1.test", "json", NULL};
    static const char *const origins[] = {"https://console.example", NULL};
    const struct {
        struct http_ws_head h;
        int r;
        const char *protocol;
    } cases[] = {
        {{"websocket", "Upgrade", "13", KEY, NULL, NULL, "h:1", 1}, 0, ""},
        {{"WebSocket", "keep-alive, Upgrade", "13", KEY, "x, json ,v1.test", NULL, "h", 1},
         0,
         "json"},
        {{"websocket", "Upgrade", "13", KEY, "V1.TEST", NULL, "h", 1}, 0, ""},
        {{"websocket", "Upgrade", "13", KEY, "a b", NULL, "h", 1}, -EINVAL, NULL},
        {{NULL, "Upgrade", "13", KEY, NULL, NULL, "h", 1}, -EINVAL, NULL},
        {{"h2c", "Upgrade", "13", KEY, NULL, NULL, "h", 1}, -EINVAL, NULL},
        {{"websocket", "keep-alive", "13", KEY, NULL, NULL, "h", 1}, -EINVAL, NULL},
        {{"websocket", "Upgrade", NULL, KEY, NULL, NULL, "h", 1}, -EINVAL, NULL},
        {{"websocket", "Upgrade", "8", KEY, NULL, NULL, "h", 1}, -EPROTONOSUPPORT, NULL},
        {{"websocket", "Upgrade", "13", NULL, NULL, NULL, "h", 0}, -EINVAL, NULL},
        {{"websocket", "Upgrade", "13", "dGhlIHNhbXBsZSBub25jZQ=", NULL, NULL, "h", 1},
         -EINVAL,
         NULL},
        {{"websocket", "Upgrade", "13", "dGhlIHNhbXBsZSBub25jZ!==", NULL, NULL, "h", 1},
         -EINVAL,
         NULL},
        {{"websocket", "Upgrade", "13", KEY ", " KEY, NULL, NULL, "h", 2}, -EINVAL, NULL},
        {{"websocket", "Upgrade", "13", KEY, NULL, "http://h:1", "h:1", 1}, 0, ""},
        {{"websocket", "Upgrade", "13", KEY, NULL, "https://H:1", "h:1", 1}, 0, ""},
        {{"websocket", "Upgrade", "13", KEY, NULL, "http://evil:1", "h:1", 1}, -EPERM, NULL},
        {{"websocket", "Upgrade", "13", KEY, NULL, "http://h:1.evil", "h:1", 1}, -EPERM, NULL},
        {{"websocket", "Upgrade", "13", KEY, NULL, "null", "h:1", 1}, -EPERM, NULL},
        {{"websocket", "Upgrade", "13", KEY, NULL, "ftp://h:1", "h:1", 1}, -EPERM, NULL},
        {{"websocket", "Upgrade", "13", KEY, NULL, "http://h:1", NULL, 1}, -EPERM, NULL},
        {{"websocket", "Upgrade", "13", KEY, NULL, "https://console.example", "h", 1}, 0, ""},
    };

    for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
        struct http_ws_answer a = {{0}};
        struct err e = {0};
        int r = http_ws_judge(&cases[i].h, sup, origins, &a, &e);

        TAP_CHECK(r == cases[i].r, "case %zu: %d (want %d): %s", i, r, cases[i].r, e.msg);
        if (r == 0 && cases[i].r == 0) {
            ASSERT_STREQ(a.protocol, cases[i].protocol);
            ASSERT_STREQ(a.accept, ACCEPT); /* RFC 6455 §1.3's example */
        }
    }
}

/* ---- 2. raw clients -------------------------------------------------------------------------- */

static void
client_echo(void *arg)
{
    struct result *r = arg;
    uint8_t f[512];
    int fd = open_stream(r);

    if (!r->head_ok) {
        (void)close(fd);
        return;
    }
    (void)cli_write(fd, f, frame(f, true, 1, "hello", 5, false));
    (void)cli_write(fd, f, frame(f, true, 2, "\x00\x01\x02", 3, false));
    (void)cli_write(fd, f, frame(f, false, 1, "frag", 4, false)); /* a fragmented message */
    (void)cli_write(fd, f, frame(f, true, 0, "ment", 4, false));
    (void)cli_write(fd, f, frame(f, true, 9, "p1", 2, false)); /* a ping */
    read_frames(fd, r, 4);
    close_and_drain(fd, r);
}

static bool
frame_is(const struct result *r, unsigned i, unsigned op, const char *payload, size_t n)
{
    return i < r->n_frames && r->ops[i] == op && r->lens[i] == n &&
           memcmp(r->payloads[i], payload, n) == 0;
}

/* The stream's end reached the server: closed() once more, with code; nothing left open. */
static void
check_ended(unsigned closed_before, unsigned code)
{
    struct http_stats st;
    bool ended;

    for (int i = 0; i < 100 && seen.closed == closed_before; i++) {
        loop_for(base, 20);
    }
    ended = seen.closed == closed_before + 1;
    TAP_CHECK(ended, "the protocol heard the end once (%u)", seen.closed - closed_before);
    TAP_CHECK(!ended || seen.last_code == code, "... with code %u (want %u)", seen.last_code, code);
    loop_for(base, 30); /* the connection's finalizer */
    http_get_stats(core, &st);
    ASSERT_EQ_U(st.websockets, 0);
    ASSERT_EQ_U(st.conns_busy, 0);
}

TEST(echo)
{
    struct result r = {.extra = "Sec-WebSocket-Protocol: x, v1.test\r\n"};
    unsigned closed = seen.closed;

    ASSERT_TRUE(run_client(client_echo, &r));
    TAP_CHECK(strncmp(r.head, "HTTP/1.1 101 Switching Protocols\r\n", 34) == 0, "101: %.60s",
              r.head);
    ASSERT_TRUE(strstr(r.head, "\r\nSec-WebSocket-Accept: " ACCEPT "\r\n") != NULL);
    ASSERT_TRUE(strstr(r.head, "\r\nSec-WebSocket-Protocol: v1.test\r\n") != NULL);
    ASSERT_TRUE(strcasestr(r.head, "\r\nUpgrade: websocket\r\n") != NULL);
    /* The messages in order; the pong anywhere among them (wslay sends a control frame before
     * the data frames it has queued, and frames go out as they are read). */
    struct result data = {0};
    bool pong = false;

    for (unsigned i = 0; i < r.n_frames; i++) {
        if (r.ops[i] == 10) {
            pong = pong || frame_is(&r, i, 10, "p1", 2); /* the ping's payload */
        } else if (r.ops[i] != 8 && data.n_frames < ELEMENTSOF(data.ops)) {
            data.ops[data.n_frames] = r.ops[i];
            data.lens[data.n_frames] = r.lens[i];
            memcpy(data.payloads[data.n_frames++], r.payloads[i], sizeof(r.payloads[i]));
        }
    }
    ASSERT_TRUE(pong);
    ASSERT_EQ_U(data.n_frames, 3);
    ASSERT_TRUE(frame_is(&data, 0, 1, "hello", 5));
    ASSERT_TRUE(frame_is(&data, 1, 2, "\x00\x01\x02", 3));
    ASSERT_TRUE(frame_is(&data, 2, 1, "fragment", 8));
    ASSERT_EQ_U(r.close_code, 1000); /* the server answered our close */
    ASSERT_TRUE(r.eof);
    ASSERT_EQ_U(r.bytes_after, 0);
    check_ended(closed, 1000);
}

/* Frames sent in the same write as the head: held back from evhttp, read by the stream. */
static void
client_pipelined(void *arg)
{
    struct result *r = arg;
    char buf[2048];
    size_t n;
    int fd = cli_open();

    handshake(buf, sizeof(buf), "", "");
    n = strlen(buf);
    n += frame((uint8_t *)buf + n, true, 1, "GET / HTTP/1.1", 14, false);
    r->head_ok = cli_write(fd, buf, n) && cli_read_head(fd, r->head, sizeof(r->head));
    read_frames(fd, r, 1);
    close_and_drain(fd, r);
}

TEST(pipelined_frames)
{
    struct result r = {0};
    unsigned closed = seen.closed;

    ASSERT_TRUE(run_client(client_pipelined, &r));
    ASSERT_TRUE(r.head_ok && strstr(r.head, " 101 ") != NULL);
    ASSERT_TRUE(frame_is(&r, 0, 1, "GET / HTTP/1.1", 14));
    ASSERT_EQ_U(r.close_code, 1000);
    check_ended(closed, 1000);
}

/* One hostile message (or none), then the frames until the server's close and EOF. */
struct hostile {
    struct result r;
    unsigned op;
    const char *payload;
    size_t n;
    bool unmasked, vanish, answer_close;
};

static void
client_hostile(void *arg)
{
    struct hostile *h = arg;
    static uint8_t f[4096];
    int fd = open_stream(&h->r);

    if (h->payload != NULL) {
        (void)cli_write(fd, f, frame(f, true, h->op, h->payload, h->n, h->unmasked));
    }
    if (h->vanish) {
        read_frames(fd, &h->r, 1);
        (void)close(fd); /* no close frame: gone */
        return;
    }
    read_frames(fd, &h->r, 4);
    if (h->answer_close) {
        uint8_t code[2] = {(uint8_t)(h->r.close_code >> 8), (uint8_t)h->r.close_code};

        (void)cli_write(fd, f, frame(f, true, 8, code, 2, false));
    }
    h->r.eof = cli_read_eof(fd, &h->r.bytes_after);
    (void)close(fd);
}

static void
hostile(const char *what, struct hostile *h, unsigned want_close, unsigned want_code)
{
    unsigned closed = seen.closed;

    printf("# %s\n", what);
    ASSERT_TRUE(run_client(client_hostile, h));
    ASSERT_TRUE(h->r.head_ok && strstr(h->r.head, " 101 ") != NULL);
    if (want_close != 0) {
        ASSERT_EQ_U(h->r.close_code, want_close);
        ASSERT_TRUE(h->r.eof);
    }
    check_ended(closed, want_code);
}

TEST(hostile)
{
    static char big[2000];
    struct hostile h;

    h = (struct hostile){.op = 1, .payload = "x", .n = 1, .unmasked = true};
    hostile("an unmasked frame: 1002", &h, 1002, 1002);
    h = (struct hostile){.r.query = "?max=1024", .op = 2, .payload = big, .n = sizeof(big)};
    hostile("a message over max: 1009", &h, 1009, 1009);
    h = (struct hostile){.op = 1, .payload = "\xff\xfe", .n = 2};
    hostile("text that is not UTF-8: 1007", &h, 1007, 1007);
    h = (struct hostile){.op = 3, .payload = "x", .n = 1};
    hostile("a reserved opcode: 1002", &h, 1002, 1002);
    h = (struct hostile){.op = 1, .payload = "x", .n = 1, .vanish = true};
    hostile("a client that vanishes: 1006", &h, 0, HTTP_WS_ABNORMAL);
    ASSERT_TRUE(frame_is(&h.r, 0, 1, "x", 1));
    h = (struct hostile){.op = 1, .payload = "!close 4000", .n = 11, .answer_close = true};
    hostile("the server closes (4000), the client answers", &h, 4000, 4000);
    h = (struct hostile){.r.query = "?ping=1"};
    hostile("a client that goes silent: pinged, then 1001", &h, 1001, 1001);
    ASSERT_TRUE(h.r.n_frames == 2 && h.r.ops[0] == 9);
}

/* A flood the client does not read for a while: the queue stays within its bound, and once the
 * client reads, every message comes, in order (drained() resumed the producer). */
static void
client_flood(void *arg)
{
    struct result *r = arg;
    static uint8_t big[1u << 20];
    uint8_t f[64];
    int rcv = 4096, fd;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    struct timeval tv = {.tv_sec = CLIENT_MS / 1000};
    char head[1024];

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        abort();
    }
    handshake(head, sizeof(head), r->query, "");
    r->head_ok = cli_write(fd, head, strlen(head)) && cli_read_head(fd, r->head, sizeof(r->head));
    (void)cli_write(fd, f, frame(f, true, 1, "!flood 512 16384", 16, false));
    (void)usleep(400 * 1000); /* not reading */
    while (r->flood_got < 512) {
        unsigned op, seq;
        size_t n;

        if (!read_frame(fd, &op, big, sizeof(big), &n)) {
            break;
        }
        memcpy(&seq, big, 4);
        r->flood_bad += op != 2 || n != 16384 || seq != r->flood_got;
        r->flood_got++;
    }
    close_and_drain(fd, r);
}

TEST(flood)
{
    struct result r = {.query = "?queue=65536"};
    unsigned closed = seen.closed;

    seen.refused = seen.drained = 0;
    seen.queue_seen = 0;
    ASSERT_TRUE(run_client(client_flood, &r));
    ASSERT_EQ_U(r.flood_got, 512);
    ASSERT_EQ_U(r.flood_bad, 0);
    TAP_CHECK(seen.refused > 0 && seen.drained > 0,
              "the producer was refused (%u) and resumed (%u)", seen.refused, seen.drained);
    TAP_CHECK(seen.queue_seen <= 65536 + 16384 + 64, "the queue held %zu bytes at most",
              seen.queue_seen);
    check_ended(closed, 1000);
}

/* Refused handshakes: the status, and nothing after the head read as a request. */
struct refusal {
    const char *head;
    const char *status;
    const char *header; /* an answer header expected, or NULL */
    bool keep_alive;    /* the connection stays (a request that asked for no upgrade) */
    char answer[4096];
    size_t n;
    bool eof;
};

/* The answer after the first in a (its head's end and Content-Length), or NULL. */
static const char *
answer_after(const char *a)
{
    const char *end = strstr(a, "\r\n\r\n"), *cl = strcasestr(a, "\r\nContent-Length: ");

    if (end == NULL || cl == NULL || cl > end) {
        return NULL;
    }
    end += 4 + strtoul(cl + 18, NULL, 10);
    return end < a + strlen(a) && strncmp(end, "HTTP/1.1 ", 9) == 0 ? end : NULL;
}

static void
client_refused(void *arg)
{
    struct refusal *t = arg;
    char req[2048];
    int fd = cli_open();
    ssize_t got;

    (void)snprintf(req, sizeof(req), "%s", t->head);
    (void)strcat(req,
                 "GET /test/ws HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " TOKEN "\r\n\r\n");
    (void)cli_write(fd, req, strlen(req));
    (void)usleep(100 * 1000);
    while ((got = recv(fd, t->answer + t->n, sizeof(t->answer) - 1 - t->n, 0)) > 0) {
        t->n += (size_t)got;
        t->answer[t->n] = '\0';
        if (t->keep_alive && answer_after(t->answer) != NULL) {
            break; /* the second answer came */
        }
    }
    t->eof = got == 0;
    (void)close(fd);
}

TEST(refusals)
{
#define WS_HEAD(extra)                                                                          \
    "GET /test/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" \
    "Sec-WebSocket-Key: " KEY "\r\n" extra "\r\n"
    struct refusal cases[] = {
        {WS_HEAD("Sec-WebSocket-Version: 13\r\n"), "HTTP/1.1 401 ", NULL, false},
        {WS_HEAD("Sec-WebSocket-Version: 12\r\nAuthorization: Bearer " TOKEN "\r\n"),
         "HTTP/1.1 426 ", "Sec-WebSocket-Version: 13", false},
        {WS_HEAD("Sec-WebSocket-Version: 13\r\nOrigin: https://evil.example\r\n"
                 "Authorization: Bearer " TOKEN "\r\n"),
         "HTTP/1.1 403 ", NULL, false},
        {"GET /test/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " TOKEN "\r\n\r\n",
         "HTTP/1.1 400 ", NULL, true},
    };

    for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
        struct refusal *t = &cases[i];
        const char *second;

        ASSERT_TRUE(run_client(client_refused, t));
        TAP_CHECK(strncmp(t->answer, t->status, strlen(t->status)) == 0, "case %zu: %.40s", i,
                  t->answer);
        if (t->header != NULL) {
            ASSERT_TRUE(strstr(t->answer, t->header) != NULL);
        }
        second = answer_after(t->answer);
        if (t->keep_alive) {
            /* no upgrade asked: an ordinary request, and the next one on the connection is read */
            TAP_CHECK(second != NULL && strncmp(second, "HTTP/1.1 400 ", 13) == 0,
                      "case %zu: the connection stays for the next request", i);
        } else {
            /* what followed the upgrade head is never read as a request; the connection ends */
            TAP_CHECK(second == NULL && t->eof, "case %zu: one answer, then the end", i);
            ASSERT_TRUE(strcasestr(t->answer, "\r\nConnection: close\r\n") != NULL);
        }
    }
#undef WS_HEAD
}

TEST(origins)
{
    char own[128];
    struct hostile h;

    (void)snprintf(own, sizeof(own), "Origin: http://127.0.0.1:%u\r\n", port);
    h = (struct hostile){
        .r.extra = own, .op = 1, .payload = "!close 1000", .n = 11, .answer_close = true};
    hostile("the daemon's own origin", &h, 1000, 1000);
    h = (struct hostile){.r.extra = "Origin: https://console.example\r\n",
                         .op = 1,
                         .payload = "!close 1000",
                         .n = 11,
                         .answer_close = true};
    hostile("an origin the route allows", &h, 1000, 1000);
}

/* ---- 3. the real client ---------------------------------------------------------------------- */

struct child_out {
    struct buf out;
    bool eof;
};

static void
on_child_out(evutil_socket_t fd, short what, void *arg)
{
    struct child_out *c = arg;
    char tmp[4096];
    ssize_t n = read(fd, tmp, sizeof(tmp));

    if (n <= 0 || buf_append(&c->out, tmp, (size_t)n) < 0) {
        c->eof = true;
    }
}

TEST(node_ws)
{
    const char *dir = getenv("SANDPOOL_INTEROP_DIR");
    char script[512], portarg[16], ws_pkg[512];
    struct child_out c = {.out = BUF_INIT(1u << 20)};
    struct event *ev;
    int pipefd[2], status = 0;
    unsigned closed = seen.closed;
    pid_t pid;

    (void)snprintf(ws_pkg, sizeof(ws_pkg), "%s/node_modules/ws/package.json", dir ? dir : ".");
    if (dir == NULL || access(ws_pkg, R_OK) != 0) {
        printf("ok %d - # SKIP the ws client is not installed (npm ci in tests/interop)\n",
               ++tap_n);
        return;
    }
    (void)snprintf(script, sizeof(script), "%s/ws-check.mjs", dir);
    (void)snprintf(portarg, sizeof(portarg), "%u", port);
    if (pipe2(pipefd, O_CLOEXEC) < 0) {
        abort();
    }
    pid = fork();
    if (pid == 0) {
        (void)dup2(pipefd[1], STDOUT_FILENO);
        execlp("node", "node", script, portarg, TOKEN, (char *)NULL);
        _exit(127);
    }
    (void)close(pipefd[1]);
    ev = OOM_CHECK(event_new(base, pipefd[0], EV_READ | EV_PERSIST, on_child_out, &c));
    (void)event_add(ev, NULL);
    /* SANDPOOL_WS_IDLE_S adds ws-check.mjs's long check (off by default): its time too. */
    ASSERT_TRUE(loop_until(base, &c.eof,
                           60000u + 1000u * (unsigned)atoi(getenv("SANDPOOL_WS_IDLE_S") ?: "0")));
    event_free(ev);
    (void)close(pipefd[0]);
    if (!c.eof) {
        (void)kill(pid, SIGKILL);
    }
    (void)waitpid(pid, &status, 0);
    TAP_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "node ws-check.mjs exited %d",
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    /* Its lines: "ok NAME" or "not ok NAME: why", one per check, then "done N". */
    unsigned checks = 0;
    for (char *line = c.out.buf, *nl; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
        *nl = '\0';
        if (strncmp(line, "ok ", 3) == 0 || strncmp(line, "not ok ", 7) == 0) {
            TAP_CHECK(line[0] == 'o', "ws: %s", line + (line[0] == 'o' ? 3 : 7));
            checks++;
        } else if (strncmp(line, "done ", 5) == 0) {
            TAP_CHECK(strtoul(line + 5, NULL, 10) == checks, "ws: all %u checks reported", checks);
        }
    }
    TAP_CHECK(checks >= 8, "ws: %u checks ran", checks);
    buf_done(&c.out);
    for (int i = 0; i < 100 && seen.closed < closed + 5; i++) {
        loop_for(base, 20);
    }
    TAP_CHECK(seen.closed >= closed + 5, "the server heard each of its streams end (%u)",
              seen.closed - closed);
}

/* ---- 4. a client that hangs up while its request waits -----------------------------------------
 */

struct waiter {
    bool hang_up;
    char answer[1024];
};

static void
client_wait(void *arg)
{
    struct waiter *w = arg;
    char req[512];
    size_t n = 0;
    ssize_t got;
    int fd = cli_open();

    (void)snprintf(req, sizeof(req),
                   "GET /test/wait?ms=%u HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " TOKEN
                   "\r\n\r\n",
                   w->hang_up ? 3000u : 300u);
    (void)cli_write(fd, req, strlen(req));
    if (w->hang_up) {
        (void)usleep(100 * 1000); /* dispatched: it waits */
        (void)close(fd);
        return;
    }
    while (n + 1 < sizeof(w->answer) &&
           (got = recv(fd, w->answer + n, sizeof(w->answer) - 1 - n, 0)) > 0) {
        n += (size_t)got;
        w->answer[n] = '\0';
        if (strstr(w->answer, "late") != NULL) {
            break;
        }
    }
    (void)close(fd);
}

TEST(hang_up)
{
    struct waiter w = {.hang_up = true};
    unsigned waits = seen.waits, gone = seen.waits_gone, answered = seen.waits_answered;
    uint64_t t0 = time_now_ms();
    struct http_stats st;

    ASSERT_TRUE(run_client(client_wait, &w));
    for (int i = 0; i < 100 && seen.waits_gone == gone; i++) {
        loop_for(base, 20);
    }
    ASSERT_EQ_U(seen.waits, waits + 1);
    ASSERT_EQ_U(seen.waits_gone, gone + 1);
    ASSERT_EQ_U(seen.waits_answered, answered);
    /* Seen before the answer was due (3 s), the only deadline this test names. */
    TAP_CHECK(time_now_ms() - t0 < 3000, "the hang-up was seen before the answer was due");
    loop_for(base, 30);
    http_get_stats(core, &st);
    ASSERT_EQ_U(st.conns_busy + st.conns_idle, 0);

    w = (struct waiter){.hang_up = false};
    ASSERT_TRUE(run_client(client_wait, &w));
    ASSERT_TRUE(strncmp(w.answer, "HTTP/1.1 200 ", 13) == 0 && strstr(w.answer, "late") != NULL);
    ASSERT_EQ_U(seen.waits_answered, answered + 1);
    ASSERT_EQ_U(seen.waits_gone, gone + 1);
}

/* ---- 5. the core stops ----------------------------------------------------------------------- */

static void
client_stopped(void *arg)
{
    struct result *r = arg;
    int fd = open_stream(r);

    read_frames(fd, r, 2);
    r->eof = cli_read_eof(fd, &r->bytes_after);
    (void)close(fd);
}

TEST(core_stops)
{
    struct result r = {0};
    struct runner run = {.fn = client_stopped, .arg = &r};
    unsigned opened = seen.opened, closed = seen.closed;
    bool up = false;
    pthread_t t;

    if (pthread_create(&t, NULL, runner_main, &run) != 0) {
        abort();
    }
    for (int i = 0; i < 250 && !up; i++) {
        loop_for(base, 20);
        up = seen.opened > opened;
    }
    ASSERT_TRUE(up);
    core = http_free(core); /* the stream ends with 1001, its protocol told */
    loop_for(base, 100);
    (void)pthread_join(t, NULL);
    ASSERT_TRUE(r.head_ok && strstr(r.head, " 101 ") != NULL);
    ASSERT_EQ_U(r.close_code, 1001);
    ASSERT_TRUE(r.eof);
    ASSERT_EQ_U(seen.closed, closed + 1);
    ASSERT_EQ_U(seen.last_code, 1001);
}

int
main(void)
{
    (void)signal(SIGPIPE, SIG_IGN);
    RUN(judge);
    server_start();
    RUN(echo);
    RUN(pipelined_frames);
    RUN(hostile);
    RUN(flood);
    RUN(refusals);
    RUN(origins);
    RUN(node_ws);
    RUN(hang_up);
    RUN(core_stops);
    loop_for(base, 50);
    event_base_free(base);
    cfg_free(cfg);
    return tap_done();
}
