/* The snapshot store's s3 backend against a real S3-compatible server on loopback: s3rver behind
 * the verifying front of tests/interop/s3rver.mjs (SigV4 signatures and payload hashes checked,
 * AbortMultipartUpload and ListMultipartUploads answered, faults on request). Run by
 * test-snapstore-s3.sh, which starts and stops the server:
 *
 *   SNAPSTORE_S3_ENDPOINT=http://127.0.0.1:PORT SNAPSTORE_S3_BUCKET=NAME \
 *   SNAPSTORE_S3_ACCESS=KEY SNAPSTORE_S3_SECRET=SECRET test-snapstore-s3 up|down
 *
 * "up": round trips (one part, multipart), abort (no object, no pending upload), delete,
 * missing, a wrong secret, faults (5xx, an error inside a 200, a deadline), free with an upload
 * in flight, get pause/resume. "down" (the server stopped): an outage, reported quickly.
 * The endpoint must be on 127.0.0.1: this program talks to nothing else. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <event2/event.h>

#include "lib/loop.h"
#include "snapshot/store.h"
#include "tap.h"
#include "util/buf.h"

#define PREFIX "sandpool/"

static struct event_base *base;
static const char *endpoint, *bucket, *access_key, *secret_key;

/* ---- helpers --------------------------------------------------------------------------------- */

static void
fill(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed | 1;

    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

static void
new_id(char id[33], unsigned n)
{
    (void)snprintf(id, 33, "%08x%024x", (unsigned)time_now_ms(), n);
}

static struct snapstore *
s3_store(const char *secret, size_t part_bytes, unsigned timeout_ms)
{
    struct snapstore_cfg cfg = {.kind = SNAPSTORE_S3,
                                .endpoint = endpoint,
                                .bucket = bucket,
                                .access_key = access_key,
                                .secret_key = secret,
                                .prefix = PREFIX,
                                .part_bytes = part_bytes,
                                .timeout_ms = timeout_ms};
    struct err e = {0};
    struct snapstore *st = snapstore_new(base, &cfg, &e);

    if (st == NULL) {
        printf("# snapstore_new: %s\n", e.msg);
    }
    return st;
}

static size_t
on_sync_write(char *data, size_t size, size_t nmemb, void *userp)
{
    return buf_append(userp, data, size * nmemb) < 0 ? 0 : size * nmemb;
}

/* A blocking signed request of the test's own (the store has no list, the front's faults are
 * unsigned): its status, the body in out. */
static long
sync_request(const char *method, const char *path_query, struct buf *out)
{
    char url[512];
    long status = 0;
    struct curl_slist *h = curl_slist_append(
        NULL,
        "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CURL *e = curl_easy_init();

    (void)snprintf(url, sizeof(url), "%s%s", endpoint, path_query);
    (void)curl_easy_setopt(e, CURLOPT_URL, url);
    (void)curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    (void)curl_easy_setopt(e, CURLOPT_AWS_SIGV4, "aws:amz:us-east-1:s3");
    (void)curl_easy_setopt(e, CURLOPT_USERNAME, access_key);
    (void)curl_easy_setopt(e, CURLOPT_PASSWORD, secret_key);
    (void)curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    (void)curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_sync_write);
    (void)curl_easy_setopt(e, CURLOPT_WRITEDATA, out);
    (void)curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 5000L);
    if (curl_easy_perform(e) == CURLE_OK) {
        (void)curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    }
    curl_easy_cleanup(e);
    curl_slist_free_all(h);
    return status;
}

/* Multipart uploads pending for key (ListMultipartUploads), or -1. */
static int
pending_uploads(const char *id)
{
    struct buf b = BUF_INIT(1 << 20);
    char path[128], key[96];
    int n = 0;

    (void)snprintf(path, sizeof(path), "/%s?uploads=", bucket);
    (void)snprintf(key, sizeof(key), "<Key>" PREFIX "%s.tar</Key>", id);
    if (sync_request("GET", path, &b) != 200) {
        buf_done(&b);
        return -1;
    }
    for (const char *s = b.buf; (s = strstr(s, key)) != NULL; s++) {
        n++;
    }
    buf_done(&b);
    return n;
}

static bool
no_pending_upload(const char *id)
{
    for (int i = 0; i < 30; i++) {
        if (pending_uploads(id) == 0) {
            return true;
        }
        loop_for(base, 100); /* a clean-up runs on the loop */
    }
    return false;
}

static void
fault(const char *query)
{
    struct buf b = BUF_INIT(4096);
    char path[256];

    (void)snprintf(path, sizeof(path), "/__fault?%s", query);
    if (sync_request("POST", path, &b) != 204) {
        printf("# fault %s not set\n", query);
    }
    buf_done(&b);
}

struct writer {
    struct snapstore_put *p;
    const uint8_t *data;
    size_t len, off, stop_at;
    bool waiting, finished, fired, in_call;
    int drains, r, sync_callbacks, held;
    char msg[192];
};

static void
on_put_done(int r, const struct err *e, void *userdata)
{
    struct writer *w = userdata;

    w->fired = true;
    w->r = r;
    w->sync_callbacks += w->in_call;
    (void)snprintf(w->msg, sizeof(w->msg), "%s", e ? e->msg : "");
    if (r < 0) {
        printf("# put: %d %s\n", r, w->msg);
    }
}

/* Writes in 64 KiB pieces until held back, stop_at (when set) or the end (then finishes). */
static void
feed(struct writer *w)
{
    w->in_call = true;
    while (w->off < w->len && (w->stop_at == 0 || w->off < w->stop_at)) {
        size_t end = w->stop_at != 0 && w->stop_at < w->len ? w->stop_at : w->len;
        size_t n = end - w->off < 65536 ? end - w->off : 65536;
        int r = snapstore_put_write(w->p, w->data + w->off, n);

        w->off += n;
        if (r < 0) {
            break;
        }
        if (r == 1) {
            w->waiting = true;
            w->held++;
            w->in_call = false;
            return;
        }
    }
    if (w->off >= w->len && !w->finished) {
        w->finished = true;
        snapstore_put_finish(w->p, on_put_done, w);
    }
    w->in_call = false;
}

static void
on_drain(void *userdata)
{
    struct writer *w = userdata;

    w->sync_callbacks += w->in_call;
    w->drains++;
    w->waiting = false;
    feed(w);
}

static int
put_all(struct snapstore *st, const char *id, const uint8_t *data, size_t len, struct writer *w)
{
    *w = (struct writer){.data = data, .len = len};
    w->p = snapstore_put_begin(st, id, on_drain, w);
    feed(w);
    if (!loop_until(base, &w->fired, 30000)) {
        return -ETIMEDOUT;
    }
    return w->r;
}

struct reader {
    struct snapstore_get *g;
    struct buf got;
    bool fired, pause_first;
    int r, chunks;
    uint64_t total;
    char msg[192];
};

static void
on_data(const void *data, size_t len, void *userdata)
{
    struct reader *rd = userdata;

    if (buf_append(&rd->got, data, len) < 0) {
        abort();
    }
    if (rd->chunks++ == 0 && rd->pause_first) {
        snapstore_get_pause(rd->g, true);
    }
}

static void
on_get_done(int r, uint64_t total, const struct err *e, void *userdata)
{
    struct reader *rd = userdata;

    rd->fired = true;
    rd->r = r;
    rd->total = total;
    (void)snprintf(rd->msg, sizeof(rd->msg), "%s", e ? e->msg : "");
}

static int
get_all(struct snapstore *st, const char *id, struct reader *rd)
{
    buf_init(&rd->got, 64u << 20);
    rd->g = snapstore_get_begin(st, id, on_data, on_get_done, rd);
    if (!loop_until(base, &rd->fired, 30000)) {
        return -ETIMEDOUT;
    }
    return rd->r;
}

static bool
same(const struct reader *rd, const uint8_t *data, size_t len)
{
    return rd->got.len == len && memcmp(rd->got.buf, data, len) == 0;
}

struct del_done {
    bool fired;
    int r;
};

static void
on_del_done(int r, const struct err *e, void *userdata)
{
    struct del_done *d = userdata;

    d->fired = true;
    d->r = r;
}

/* ---- with the server up ---------------------------------------------------------------------- */

TEST(single_part_round_trip)
{
    size_t len = (1u << 20) + 777;
    uint8_t *data = malloc(len);
    struct snapstore *st = s3_store(secret_key, 0, 0);
    struct writer w;
    struct reader rd = {0};
    char id[33];

    new_id(id, 1);
    fill(data, len, 1);
    ASSERT_STREQ(snapstore_kind_name(st), "s3");
    ASSERT_EQ_I(put_all(st, id, data, len, &w), 0);
    ASSERT_EQ_I(w.sync_callbacks, 0);
    ASSERT_EQ_I(get_all(st, id, &rd), 0);
    ASSERT_EQ_U(rd.total, len);
    ASSERT_TRUE(same(&rd, data, len));
    buf_done(&rd.got);
    snapstore_free(st);
    free(data);
}

TEST(multipart_round_trip)
{
    size_t len = 12u << 20, part = 5u << 20;
    uint8_t *data = malloc(len);
    struct snapstore *st = s3_store(secret_key, part, 0);
    struct writer w = {0};
    struct reader rd = {0};
    char id[33];

    new_id(id, 2);
    fill(data, len, 2);
    w.data = data;
    w.len = len;
    w.p = snapstore_put_begin(st, id, on_drain, &w);
    feed(&w);
    /* Held back at once: a part uploads and the next is full (two parts in memory at most). */
    ASSERT_TRUE(w.waiting && w.off <= 2 * part + 65536);
    ASSERT_TRUE(loop_until(base, &w.fired, 30000));
    ASSERT_EQ_I(w.r, 0);
    ASSERT_TRUE(w.drains >= 1);
    ASSERT_EQ_I(w.sync_callbacks, 0);
    ASSERT_EQ_I(pending_uploads(id), 0); /* completed: nothing pending */
    ASSERT_EQ_I(get_all(st, id, &rd), 0);
    ASSERT_EQ_U(rd.total, len);
    ASSERT_TRUE(same(&rd, data, len));
    buf_done(&rd.got);
    snapstore_free(st);
    free(data);
}

TEST(abort_leaves_nothing)
{
    size_t len = 12u << 20, part = 5u << 20;
    uint8_t *data = malloc(len);
    struct snapstore *st = s3_store(secret_key, part, 0);
    struct writer w = {0};
    struct reader rd = {0};
    char id[33];
    int pending = 0;

    new_id(id, 3);
    fill(data, len, 3);
    w.data = data;
    w.len = len;
    w.stop_at = 8u << 20; /* a part or more uploaded, never finished */
    w.p = snapstore_put_begin(st, id, on_drain, &w);
    feed(&w);
    for (int i = 0; i < 50 && pending < 1; i++) {
        loop_for(base, 100);
        pending = pending_uploads(id);
    }
    ASSERT_EQ_I(pending, 1); /* an upload in progress */
    snapstore_put_abort(w.p);
    ASSERT_TRUE(no_pending_upload(id));
    ASSERT_EQ_I(get_all(st, id, &rd), -ENOENT);
    ASSERT_TRUE(!w.fired);
    buf_done(&rd.got);

    /* A put that never left memory: nothing to undo, nothing there. */
    new_id(id, 4);
    rd = (struct reader){0};
    w = (struct writer){.data = data, .len = 1000, .stop_at = 999};
    w.p = snapstore_put_begin(st, id, NULL, NULL);
    feed(&w);
    loop_for(base, 50);
    snapstore_put_abort(w.p);
    ASSERT_EQ_I(get_all(st, id, &rd), -ENOENT);
    buf_done(&rd.got);
    snapstore_free(st);
    free(data);
}

TEST(delete_and_missing)
{
    struct snapstore *st = s3_store(secret_key, 0, 0);
    struct del_done d = {0}, again = {0};
    struct reader rd = {0}, missing = {0};
    struct writer w;
    char id[33];

    new_id(id, 5);
    ASSERT_EQ_I(put_all(st, id, (const uint8_t *)"snapshot", 8, &w), 0);
    snapstore_delete(st, id, on_del_done, &d);
    ASSERT_TRUE(!d.fired);
    ASSERT_TRUE(loop_until(base, &d.fired, 5000));
    ASSERT_EQ_I(d.r, 0);
    ASSERT_EQ_I(get_all(st, id, &rd), -ENOENT);
    ASSERT_STREQ(rd.msg, "no such snapshot");
    snapstore_delete(st, id, on_del_done, &again);
    ASSERT_TRUE(loop_until(base, &again.fired, 5000));
    ASSERT_EQ_I(again.r, 0); /* a missing one counts as deleted */
    ASSERT_EQ_I(get_all(st, "0123456789abcdef0123456789abcdef", &missing), -ENOENT);
    ASSERT_EQ_U(missing.total, 0);
    buf_done(&rd.got);
    buf_done(&missing.got);
    snapstore_free(st);
}

TEST(wrong_secret_is_refused)
{
    struct snapstore *good = s3_store(secret_key, 0, 0);
    struct snapstore *bad = s3_store("not-the-secret", 0, 0);
    struct writer w;
    struct reader rd = {0};
    char id[33];

    new_id(id, 6);
    ASSERT_EQ_I(put_all(good, id, (const uint8_t *)"kept", 4, &w), 0);
    /* The front checks the signature itself (s3rver does not): a wrong secret fails. */
    ASSERT_EQ_I(put_all(bad, id, (const uint8_t *)"replaced", 8, &w), -EACCES);
    ASSERT_TRUE(strstr(w.msg, "403 SignatureDoesNotMatch") != NULL);
    ASSERT_TRUE(strstr(w.msg, "not-the-secret") == NULL);
    ASSERT_EQ_I(get_all(bad, id, &rd), -EACCES);
    buf_done(&rd.got);
    rd = (struct reader){0};
    ASSERT_EQ_I(get_all(good, id, &rd), 0);
    ASSERT_TRUE(same(&rd, (const uint8_t *)"kept", 4));
    buf_done(&rd.got);
    snapstore_free(bad);
    snapstore_free(good);
}

TEST(server_errors)
{
    size_t len = 12u << 20, part = 5u << 20;
    uint8_t *data = malloc(len);
    struct snapstore *st = s3_store(secret_key, part, 0);
    struct writer w;
    struct reader rd = {0};
    char id[33], q[128];

    new_id(id, 7);
    fill(data, len, 7);
    ASSERT_EQ_I(put_all(st, id, data, 1000, &w), 0);
    fault("status=503&count=1&method=GET");
    ASSERT_EQ_I(get_all(st, id, &rd), -EIO);
    ASSERT_TRUE(strstr(rd.msg, "503 SlowDown") != NULL);
    buf_done(&rd.got);

    /* A part that fails: the put fails, the store aborts the upload. */
    new_id(id, 8);
    (void)snprintf(q, sizeof(q), "status=500&code=InternalError&count=1&match=partNumber=2");
    fault(q);
    ASSERT_EQ_I(put_all(st, id, data, len, &w), -EIO);
    ASSERT_TRUE(no_pending_upload(id));
    rd = (struct reader){0};
    ASSERT_EQ_I(get_all(st, id, &rd), -ENOENT);
    buf_done(&rd.got);

    /* CompleteMultipartUpload answering 200 with an error inside. */
    new_id(id, 9);
    (void)snprintf(q, sizeof(q),
                   "status=200&code=InternalError&count=1&method=POST&match=%s.tar?uploadId=", id);
    fault(q);
    ASSERT_EQ_I(put_all(st, id, data, len, &w), -EIO);
    ASSERT_TRUE(strstr(w.msg, "InternalError") != NULL);
    ASSERT_TRUE(no_pending_upload(id));
    snapstore_free(st);
    free(data);
}

TEST(deadline)
{
    struct snapstore *st = s3_store(secret_key, 0, 1000);
    struct writer w;
    char id[33], q[128];
    uint64_t t0;

    new_id(id, 10);
    (void)snprintf(q, sizeof(q), "delay_ms=2500&count=1&match=%s", id);
    fault(q);
    t0 = time_now_ms();
    ASSERT_EQ_I(put_all(st, id, (const uint8_t *)"late", 4, &w), -ETIMEDOUT);
    ASSERT_TRUE(time_now_ms() - t0 < 2000);
    snapstore_free(st);
    loop_for(base, 1600); /* the late answer lands after this test */
}

TEST(free_with_an_upload_in_flight)
{
    size_t len = 12u << 20, part = 5u << 20;
    uint8_t *data = malloc(len);
    struct snapstore *st = s3_store(secret_key, part, 0);
    struct writer w = {0};
    char id[33];
    int pending = 0;

    new_id(id, 11);
    fill(data, len, 11);
    w.data = data;
    w.len = len;
    w.stop_at = 11u << 20;
    w.p = snapstore_put_begin(st, id, on_drain, &w);
    feed(&w);
    for (int i = 0; i < 50 && pending < 1; i++) {
        loop_for(base, 50);
        pending = pending_uploads(id);
    }
    ASSERT_EQ_I(pending, 1);
    /* The rest: a part (or the completion) is in flight when the store goes. */
    w.stop_at = 0;
    feed(&w);
    snapstore_free(st); /* its abort is sent on the way out (best effort) */
    ASSERT_TRUE(no_pending_upload(id));
    ASSERT_TRUE(!w.fired);
    free(data);
}

TEST(get_pause_resume)
{
    size_t len = 2u << 20;
    uint8_t *data = malloc(len);
    struct snapstore *st = s3_store(secret_key, 0, 1000);
    struct writer w;
    struct reader rd = {.pause_first = true};
    char id[33];

    new_id(id, 12);
    fill(data, len, 12);
    ASSERT_EQ_I(put_all(st, id, data, len, &w), 0);
    buf_init(&rd.got, 64u << 20);
    rd.g = snapstore_get_begin(st, id, on_data, on_get_done, &rd);
    /* Paused past the store's deadline (1 s): a paused transfer is no stalled one. */
    loop_for(base, 2500);
    ASSERT_EQ_I(rd.chunks, 1); /* paused: no more bytes, no end */
    ASSERT_TRUE(!rd.fired);
    snapstore_get_pause(rd.g, false);
    ASSERT_TRUE(loop_until(base, &rd.fired, 10000));
    ASSERT_EQ_I(rd.r, 0);
    ASSERT_TRUE(rd.chunks > 1);
    ASSERT_TRUE(same(&rd, data, len));
    buf_done(&rd.got);
    snapstore_free(st);
    free(data);
}

/* ---- with the server stopped ----------------------------------------------------------------- */

TEST(outage_is_econnrefused)
{
    struct snapstore *st = s3_store(secret_key, 0, 5000);
    struct writer w;
    struct reader rd = {0};
    struct del_done d = {0};
    uint64_t t0 = time_now_ms();

    ASSERT_EQ_I(put_all(st, "0123456789abcdef0123456789abcdef", (const uint8_t *)"x", 1, &w),
                -ECONNREFUSED);
    ASSERT_EQ_I(get_all(st, "0123456789abcdef0123456789abcdef", &rd), -ECONNREFUSED);
    snapstore_delete(st, "0123456789abcdef0123456789abcdef", on_del_done, &d);
    ASSERT_TRUE(loop_until(base, &d.fired, 5000));
    ASSERT_EQ_I(d.r, -ECONNREFUSED);
    ASSERT_TRUE(time_now_ms() - t0 < 1000); /* quickly: not the 5 s deadline */
    buf_done(&rd.got);
    snapstore_free(st);
}

int
main(int argc, char **argv)
{
    const char *phase = argc > 1 ? argv[1] : "";

    endpoint = getenv("SNAPSTORE_S3_ENDPOINT");
    bucket = getenv("SNAPSTORE_S3_BUCKET");
    access_key = getenv("SNAPSTORE_S3_ACCESS");
    secret_key = getenv("SNAPSTORE_S3_SECRET");
    if (endpoint == NULL || bucket == NULL || access_key == NULL || secret_key == NULL) {
        TAP_SKIP_ALL("run by test-snapstore-s3.sh (SNAPSTORE_S3_* not set)");
    }
    if (strncmp(endpoint, "http://127.0.0.1:", 17) != 0) {
        printf("Bail out! only http://127.0.0.1:PORT, not %s\n", endpoint);
        return 1;
    }
    base = event_base_new();
    if (strcmp(phase, "up") == 0) {
        RUN(single_part_round_trip);
        RUN(multipart_round_trip);
        RUN(abort_leaves_nothing);
        RUN(delete_and_missing);
        RUN(wrong_secret_is_refused);
        RUN(server_errors);
        RUN(deadline);
        RUN(free_with_an_upload_in_flight);
        RUN(get_pause_resume);
    } else if (strcmp(phase, "down") == 0) {
        RUN(outage_is_econnrefused);
    } else {
        printf("Bail out! phase 'up' or 'down', not '%s'\n", phase);
        return 1;
    }
    event_base_free(base);
    curl_global_cleanup();
    return tap_done();
}
