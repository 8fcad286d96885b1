/* The daemon in-process; see daemon.h.
 *
 * The client thread touches only its struct test_call and its own curl handle; the loop's
 * thread waits for its flag (atomic) between loop turns, then joins it. */
#include "daemon.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <curl/curl.h>
#include <event2/event.h>

#include "config/config.h"
#include "lib/loop.h"
#include "server.h"
#include "util/time.h"

#define START_MS 10000u

/* sha256("tok-a"), sha256("tok-b"), sha256("tok-admin"), sha256(TEST_E2B_KEY_A) */
#define SHA_TOKEN_A "4f66a4283f8bc9768c3cb97fd06d267b79315aee941c9c1727b9354509242ffe"
#define SHA_TOKEN_B "efa1cd32d437a4dd30463a379503cadfb2b13481660f6345110f3bde01f2e773"
#define SHA_ADMIN   "df6adb0b23fa33235f4aee6a0d62c118b00d71c07c81be87067b4f5892e66dbc"
#define SHA_E2B_A   "285c79b208f1b809feed44bd1339b85da6a5f0a9c2e0fb5a95792d7989af7232"

struct run {
    struct test_call *c;
    const char *sock;
    atomic_bool done;
};

static size_t
on_body(char *p, size_t size, size_t n, void *arg)
{
    struct test_call *c = arg;
    char *np = realloc(c->resp, c->resp_len + n + 1);

    if (np == NULL) {
        abort();
    }
    c->resp = np;
    memcpy(c->resp + c->resp_len, p, n);
    c->resp_len += n;
    c->resp[c->resp_len] = '\0';
    return n;
}

static size_t
on_head(char *p, size_t size, size_t n, void *arg)
{
    struct test_call *c = arg;
    size_t have = c->head != NULL ? strlen(c->head) : 0;
    char *np = realloc(c->head, have + n + 1);

    if (np == NULL) {
        abort();
    }
    c->head = np;
    memcpy(c->head + have, p, n);
    c->head[have + n] = '\0';
    return n;
}

static void *
client_main(void *arg)
{
    struct run *r = arg;
    struct test_call *c = r->c;
    CURL *h = curl_easy_init();
    struct curl_slist *hl = NULL;
    char url[2048];
    uint64_t t0 = time_now_ms();

    if (h == NULL) {
        abort();
    }
    (void)snprintf(url, sizeof(url), "http://localhost%s", c->path);
    (void)curl_easy_setopt(h, CURLOPT_URL, url);
    (void)curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, r->sock);
    (void)curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, c->method != NULL ? c->method : "GET");
    if (c->method != NULL && strcmp(c->method, "HEAD") == 0) {
        (void)curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    }
    if (c->body != NULL) {
        (void)curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->body);
        (void)curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(c->body));
    }
    hl = curl_slist_append(hl, "Expect:"); /* no 100-continue round trip */
    for (size_t i = 0; i < sizeof(c->headers) / sizeof(c->headers[0]) && c->headers[i]; i++) {
        hl = curl_slist_append(hl, c->headers[i]);
    }
    (void)curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    (void)curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    (void)curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
    (void)curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_head);
    (void)curl_easy_setopt(h, CURLOPT_HEADERDATA, c);
    (void)curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(c->max_ms ? c->max_ms : TEST_CALL_MS));
    (void)curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    c->curl_rc = (int)curl_easy_perform(h);
    (void)curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &c->status);
    c->ms = time_now_ms() - t0;
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    atomic_store(&r->done, true);
    return NULL;
}

long
test_daemon_call(struct test_daemon *d, struct test_call *c)
{
    struct run r = {.c = c, .sock = d->sock};
    pthread_t t;

    c->status = 0;
    c->resp_len = 0;
    free(c->resp);
    free(c->head);
    c->resp = calloc(1, 1);
    c->head = calloc(1, 1);
    if (c->resp == NULL || c->head == NULL) {
        abort();
    }
    atomic_init(&r.done, false);
    if (pthread_create(&t, NULL, client_main, &r) != 0) {
        abort();
    }
    while (!atomic_load(&r.done)) {
        loop_for(d->base, 2);
    }
    (void)pthread_join(t, NULL);
    return c->status;
}

const char *
test_call_header(struct test_call *c, const char *name)
{
    size_t n = strlen(name);

    for (const char *p = c->head; p != NULL && *p != '\0';) {
        const char *eol = strchr(p, '\n');
        size_t len = eol != NULL ? (size_t)(eol - p) : strlen(p);

        if (len > n + 1 && strncasecmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1;

            while (*v == ' ') {
                v++;
            }
            len -= (size_t)(v - p);
            while (len > 0 && (v[len - 1] == '\r' || v[len - 1] == '\n')) {
                len--;
            }
            (void)snprintf(c->hdr, sizeof(c->hdr), "%.*s", (int)len, v);
            return c->hdr;
        }
        p = eol != NULL ? eol + 1 : NULL;
    }
    return NULL;
}

void
test_call_done(struct test_call *c)
{
    free(c->resp);
    free(c->head);
    c->resp = c->head = NULL;
}

bool
test_daemon_until(struct test_daemon *d, bool (*cond)(void *arg), void *arg, unsigned ms)
{
    for (uint64_t end = time_now_ms() + ms; time_now_ms() < end;) {
        if (cond(arg)) {
            return true;
        }
        loop_for(d->base, 5);
    }
    return cond(arg);
}

void
test_daemon_start(struct test_daemon *d, const char *extra_json)
{
    struct cfg *cfg = cfg_new();
    struct err e = {0};
    char doc[4096];
    char listen[160];
    bool ready = false;

    memset(d, 0, sizeof(*d));
    (void)curl_global_init(CURL_GLOBAL_DEFAULT);
    d->base = event_base_new();
    d->fe = fake_engine_new(d->base);
    d->fr = fake_redis_new(d->base);
    (void)snprintf(d->dir, sizeof(d->dir), "/tmp/sandpool-test-daemon-XXXXXX");
    if (mkdtemp(d->dir) == NULL) {
        abort();
    }
    (void)snprintf(d->sock, sizeof(d->sock), "%s/d.sock", d->dir);
    (void)snprintf(listen, sizeof(listen), "unix:%s", d->sock);
    (void)snprintf(doc, sizeof(doc),
                   "{\"node_id\": \"self\", \"listen\": \"%s\", \"shutdown_delay_s\": 0,"
                   " \"admin_token_sha256\": \"" SHA_ADMIN "\","
                   " \"engine\": {\"socket\": \"%s\", \"timeout_ms\": 2000},"
                   " \"redis\": {\"url\": \"%s\", \"timeout_ms\": 1000},"
                   " \"log\": {\"level\": \"warn\"},"
                   " \"sandbox\": {\"seccomp_profile\": \"\", \"uid_count\": 64},"
                   " \"tenants\": [{\"id\": \"a\", \"token_sha256\": \"" SHA_TOKEN_A "\","
                   " \"e2b_keys_sha256\": [\"" SHA_E2B_A "\"]},"
                   " {\"id\": \"b\", \"token_sha256\": \"" SHA_TOKEN_B "\"}],"
                   " \"profiles\": {\"py\": {\"image\": \"img:1\", \"warm\": 1, \"max\": 4,"
                   " \"exec_timeout_s\": 5, \"interrupt_grace_ms\": 200}}%s}",
                   listen, fake_engine_socket(d->fe), fake_redis_url(d->fr), extra_json);
    if (cfg_load_json(cfg, doc, strlen(doc), &e) < 0 || cfg_validate(cfg, &e) < 0 ||
        server_new_on(d->base, cfg, &d->s, &e) < 0) {
        printf("Bail out! the daemon: %s\n", e.msg);
        exit(1);
    }
    server_begin(d->s);
    for (uint64_t end = time_now_ms() + START_MS; !ready && time_now_ms() < end;) {
        struct test_call c = {.path = "/readyz", .max_ms = 2000};

        ready = test_daemon_call(d, &c) == 200;
        if (!ready) {
            loop_for(d->base, 20);
        }
        test_call_done(&c);
    }
    if (!ready) {
        printf("Bail out! the daemon did not get ready\n");
        exit(1);
    }
}

void
test_daemon_stop(struct test_daemon *d)
{
    server_free(d->s);
    fake_redis_free(d->fr);
    fake_engine_free(d->fe);
    event_base_free(d->base);
    (void)unlink(d->sock);
    (void)rmdir(d->dir);
    curl_global_cleanup();
}
