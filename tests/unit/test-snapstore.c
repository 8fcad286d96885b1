/* The snapshot store (src/snapshot/store.h): its contract through the dir backend on a temporary
 * directory with a real event loop (round trips with the bytes compared, atomic replacement,
 * abort and free leaving nothing, backpressure both ways, ids checked through the callback and
 * never synchronously, stale part files removed at start), and the configuration checks of both
 * backends. The s3 backend against a real S3-compatible server is
 * tests/integration/test-snapstore-s3.sh. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "lib/loop.h"
#include "snapshot/store-internal.h"
#include "snapshot/store.h"
#include "tap.h"
#include "util/buf.h"

#define ID_A "0123456789abcdef0123456789abcdef"
#define ID_B "fedcba9876543210fedcba9876543210"
#define ID_C "00000000000000000000000000000001"

static struct event_base *base;
static char dir[64];

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

static int
count_entries(const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;

    if (d == NULL) {
        return -1;
    }
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, prefix, strlen(prefix)) == 0) {
            n++;
        }
    }
    (void)closedir(d);
    return n;
}

static bool
object_exists(const char *id)
{
    char path[160];
    struct stat sb;

    (void)snprintf(path, sizeof(path), "%s/%s.tar", dir, id);
    return stat(path, &sb) == 0;
}

static struct snapstore *
dir_store(void)
{
    struct snapstore_cfg cfg = {.kind = SNAPSTORE_DIR, .dir = dir};
    struct err e = {0};
    struct snapstore *st = snapstore_new(base, &cfg, &e);

    if (st == NULL) {
        printf("# snapstore_new: %s\n", e.msg);
    }
    return st;
}

/* A put fed in 64 KiB writes, honouring its backpressure, then finished. */
struct writer {
    struct snapstore_put *p;
    const uint8_t *data;
    size_t len, off;
    bool waiting, finished, fired, in_call;
    int drains, r, calls, sync_callbacks;
    char msg[192];
};

static void
on_put_done(int r, const struct err *e, void *userdata)
{
    struct writer *w = userdata;

    w->fired = true;
    w->calls++;
    w->r = r;
    w->sync_callbacks += w->in_call;
    (void)snprintf(w->msg, sizeof(w->msg), "%s", e ? e->msg : "");
}

static void
feed(struct writer *w)
{
    w->in_call = true;
    while (w->off < w->len) {
        size_t n = w->len - w->off < 65536 ? w->len - w->off : 65536;
        int r = snapstore_put_write(w->p, w->data + w->off, n);

        w->off += n;
        if (r < 0) {
            break;
        }
        if (r == 1) {
            w->waiting = true;
            w->in_call = false;
            return;
        }
    }
    if (!w->finished) {
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
put_all(struct snapstore *st, const char *id, const uint8_t *data, size_t len)
{
    struct writer w = {.data = data, .len = len};

    w.p = snapstore_put_begin(st, id, on_drain, &w);
    feed(&w);
    if (!loop_until(base, &w.fired, 10000)) {
        return -ETIMEDOUT;
    }
    return w.r;
}

/* A get collecting what it delivers. */
struct reader {
    struct snapstore_get *g;
    struct buf got;
    bool fired, in_call, pause_first, cancel_first;
    int r, calls, chunks, sync_callbacks;
    size_t max_chunk;
    uint64_t total;
};

static void
on_data(const void *data, size_t len, void *userdata)
{
    struct reader *rd = userdata;

    rd->sync_callbacks += rd->in_call;
    if (buf_append(&rd->got, data, len) < 0) {
        abort();
    }
    rd->max_chunk = len > rd->max_chunk ? len : rd->max_chunk;
    if (rd->chunks++ == 0) {
        if (rd->pause_first) {
            snapstore_get_pause(rd->g, true);
        }
        if (rd->cancel_first) {
            snapstore_get_cancel(rd->g);
        }
    }
}

static void
on_get_done(int r, uint64_t total, const struct err *e, void *userdata)
{
    struct reader *rd = userdata;

    rd->sync_callbacks += rd->in_call;
    rd->fired = true;
    rd->calls++;
    rd->r = r;
    rd->total = total;
}

static void
get_begin(struct snapstore *st, const char *id, struct reader *rd)
{
    buf_init(&rd->got, 64u << 20);
    rd->in_call = true;
    rd->g = snapstore_get_begin(st, id, on_data, on_get_done, rd);
    rd->in_call = false;
}

static bool
same(const struct reader *rd, const uint8_t *data, size_t len)
{
    return rd->got.len == len && memcmp(rd->got.buf, data, len) == 0;
}

/* ---- tests ----------------------------------------------------------------------------------- */

TEST(round_trip)
{
    size_t len = (3u << 20) + 12345;
    uint8_t *data = malloc(len);
    struct snapstore *st = dir_store();
    struct writer w = {.data = data, .len = len};
    struct reader rd = {0};

    ASSERT_TRUE(st != NULL);
    ASSERT_STREQ(snapstore_kind_name(st), "dir");
    fill(data, len, 1);
    w.p = snapstore_put_begin(st, ID_A, on_drain, &w);
    feed(&w);
    ASSERT_TRUE(loop_until(base, &w.fired, 10000));
    ASSERT_EQ_I(w.r, 0);
    ASSERT_EQ_I(w.calls, 1);
    ASSERT_TRUE(w.drains > 0); /* the writer was held back and let go again */
    ASSERT_EQ_I(w.sync_callbacks, 0);
    ASSERT_TRUE(object_exists(ID_A));
    ASSERT_EQ_I(count_entries(".part-"), 0);

    get_begin(st, ID_A, &rd);
    ASSERT_TRUE(loop_until(base, &rd.fired, 10000));
    ASSERT_EQ_I(rd.r, 0);
    ASSERT_EQ_U(rd.total, len);
    ASSERT_TRUE(same(&rd, data, len));
    ASSERT_TRUE(rd.max_chunk <= 65536);
    ASSERT_EQ_I(rd.sync_callbacks, 0);
    buf_done(&rd.got);
    snapstore_free(st);
    free(data);
}

TEST(empty_object)
{
    struct snapstore *st = dir_store();
    struct reader rd = {0};

    ASSERT_EQ_I(put_all(st, ID_C, (const uint8_t *)"", 0), 0);
    get_begin(st, ID_C, &rd);
    ASSERT_TRUE(loop_until(base, &rd.fired, 5000));
    ASSERT_EQ_I(rd.r, 0);
    ASSERT_EQ_U(rd.total, 0);
    ASSERT_EQ_I(rd.chunks, 0);
    buf_done(&rd.got);
    snapstore_free(st);
}

TEST(abort_leaves_nothing)
{
    uint8_t data[100000];
    struct snapstore *st = dir_store();
    struct snapstore_put *p;
    int before = count_entries(ID_B);

    fill(data, sizeof(data), 2);
    p = snapstore_put_begin(st, ID_B, NULL, NULL);
    ASSERT_EQ_I(snapstore_put_write(p, data, sizeof(data)), 0);
    loop_for(base, 50); /* the bytes reach the part file */
    ASSERT_EQ_I(count_entries(".part-" ID_B), 1);
    snapstore_put_abort(p);
    ASSERT_EQ_I(count_entries(".part-"), 0);
    ASSERT_EQ_I(count_entries(ID_B), before);
    ASSERT_TRUE(!object_exists(ID_B));
    snapstore_free(st);
}

TEST(replaced_only_on_finish)
{
    size_t len = 1u << 20;
    uint8_t *old = malloc(len), *new = malloc(len);
    struct snapstore *st = dir_store();
    struct writer w = {.data = new, .len = len};
    struct reader during = {0}, after = {0};

    fill(old, len, 3);
    fill(new, len, 4);
    ASSERT_EQ_I(put_all(st, ID_A, old, len), 0);
    /* The new bytes are written, not finished: a get sees the old object, whole. */
    w.p = snapstore_put_begin(st, ID_A, NULL, NULL);
    for (size_t off = 0; off < len; off += 65536) {
        (void)snapstore_put_write(w.p, new + off, 65536);
    }
    loop_for(base, 100);
    ASSERT_EQ_I(count_entries(".part-" ID_A), 1);
    get_begin(st, ID_A, &during);
    ASSERT_TRUE(loop_until(base, &during.fired, 5000));
    ASSERT_EQ_I(during.r, 0);
    ASSERT_TRUE(same(&during, old, len));
    /* A get opened before the finish keeps reading the old object through the rename. */
    buf_done(&during.got);
    during = (struct reader){0};
    get_begin(st, ID_A, &during);
    snapstore_put_finish(w.p, on_put_done, &w);
    ASSERT_TRUE(loop_until(base, &w.fired, 5000));
    ASSERT_EQ_I(w.r, 0);
    ASSERT_TRUE(loop_until(base, &during.fired, 5000));
    ASSERT_TRUE(same(&during, old, len));
    get_begin(st, ID_A, &after);
    ASSERT_TRUE(loop_until(base, &after.fired, 5000));
    ASSERT_TRUE(same(&after, new, len));
    ASSERT_EQ_I(count_entries(".part-"), 0);
    buf_done(&during.got);
    buf_done(&after.got);
    snapstore_free(st);
    free(old);
    free(new);
}

TEST(missing_is_enoent)
{
    struct snapstore *st = dir_store();
    struct reader rd = {0};

    get_begin(st, "ffffffffffffffffffffffffffffffff", &rd);
    ASSERT_TRUE(!rd.fired); /* not from inside snapstore_get_begin() */
    ASSERT_TRUE(loop_until(base, &rd.fired, 5000));
    ASSERT_EQ_I(rd.r, -ENOENT);
    ASSERT_EQ_U(rd.total, 0);
    ASSERT_EQ_I(rd.calls, 1);
    buf_done(&rd.got);
    snapstore_free(st);
}

struct del_done {
    bool fired, in_call;
    int r, calls, sync_callbacks;
};

static void
on_del_done(int r, const struct err *e, void *userdata)
{
    struct del_done *d = userdata;

    d->sync_callbacks += d->in_call;
    d->fired = true;
    d->calls++;
    d->r = r;
}

TEST(invalid_ids_through_the_callback)
{
    static const char *const bad[] = {
        "",
        "0123",
        "0123456789ABCDEF0123456789ABCDEF",
        "0123456789abcdef0123456789abcdef0",
        "../../../../etc/passwd0123456789a",
        "0123456789abcdef0123456789abcde/",
    };
    struct snapstore *st = dir_store();

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct reader rd = {0};
        struct writer w = {0};
        struct del_done d = {0};

        get_begin(st, bad[i], &rd);
        w.p = snapstore_put_begin(st, bad[i], on_drain, &w);
        ASSERT_EQ_I(snapstore_put_write(w.p, "x", 1), -EINVAL);
        w.in_call = true;
        snapstore_put_finish(w.p, on_put_done, &w);
        w.in_call = false;
        d.in_call = true;
        snapstore_delete(st, bad[i], on_del_done, &d);
        d.in_call = false;
        ASSERT_TRUE(!rd.fired && !w.fired && !d.fired);
        ASSERT_TRUE(loop_until(base, &rd.fired, 2000) && loop_until(base, &w.fired, 2000) &&
                    loop_until(base, &d.fired, 2000));
        ASSERT_TRUE(rd.r == -EINVAL && w.r == -EINVAL && d.r == -EINVAL);
        ASSERT_TRUE(rd.sync_callbacks + w.sync_callbacks + d.sync_callbacks == 0);
        buf_done(&rd.got);
    }
    ASSERT_EQ_I(count_entries(".part-"), 0);
    snapstore_free(st);
}

TEST(delete)
{
    struct snapstore *st = dir_store();
    struct del_done d = {0}, missing = {0};

    ASSERT_EQ_I(put_all(st, ID_C, (const uint8_t *)"abc", 3), 0);
    ASSERT_TRUE(object_exists(ID_C));
    snapstore_delete(st, ID_C, on_del_done, &d);
    ASSERT_TRUE(!d.fired);
    ASSERT_TRUE(loop_until(base, &d.fired, 2000));
    ASSERT_EQ_I(d.r, 0);
    ASSERT_TRUE(!object_exists(ID_C));
    snapstore_delete(st, ID_C, on_del_done, &missing); /* a missing one counts as deleted */
    ASSERT_TRUE(loop_until(base, &missing.fired, 2000));
    ASSERT_EQ_I(missing.r, 0);
    snapstore_delete(st, ID_C, NULL, NULL); /* fire and forget */
    loop_for(base, 20);
    snapstore_free(st);
}

TEST(get_pause_resume)
{
    size_t len = 1u << 20;
    uint8_t *data = malloc(len);
    struct snapstore *st = dir_store();
    struct reader rd = {.pause_first = true};
    int chunks;

    fill(data, len, 5);
    ASSERT_EQ_I(put_all(st, ID_B, data, len), 0);
    get_begin(st, ID_B, &rd);
    loop_for(base, 200);
    ASSERT_EQ_I(rd.chunks, 1); /* paused after the first: nothing more, no end */
    ASSERT_TRUE(!rd.fired);
    chunks = rd.chunks;
    snapstore_get_pause(rd.g, false);
    ASSERT_TRUE(loop_until(base, &rd.fired, 5000));
    ASSERT_TRUE(rd.chunks > chunks);
    ASSERT_EQ_I(rd.r, 0);
    ASSERT_TRUE(same(&rd, data, len));
    buf_done(&rd.got);
    snapstore_free(st);
    free(data);
}

TEST(get_cancel_inside_on_data)
{
    size_t len = 1u << 20;
    uint8_t *data = malloc(len);
    struct snapstore *st = dir_store();
    struct reader rd = {.cancel_first = true};

    fill(data, len, 6);
    ASSERT_EQ_I(put_all(st, ID_B, data, len), 0);
    get_begin(st, ID_B, &rd);
    loop_for(base, 100);
    ASSERT_EQ_I(rd.chunks, 1);
    ASSERT_TRUE(!rd.fired);
    buf_done(&rd.got);
    snapstore_free(st);
    free(data);
}

TEST(writer_past_the_limit_fails)
{
    size_t len = 17u << 20;
    uint8_t *data = calloc(1, len);
    struct snapstore *st = dir_store();
    struct writer w = {0};

    w.p = snapstore_put_begin(st, ID_C, NULL, NULL);
    ASSERT_EQ_I(snapstore_put_write(w.p, data, len), -EMSGSIZE);
    ASSERT_EQ_I(snapstore_put_write(w.p, data, 1), -EMSGSIZE);
    snapstore_put_finish(w.p, on_put_done, &w);
    ASSERT_TRUE(loop_until(base, &w.fired, 2000));
    ASSERT_EQ_I(w.r, -EMSGSIZE);
    ASSERT_EQ_I(count_entries(".part-"), 0);
    snapstore_free(st);
    free(data);
}

TEST(free_with_operations_in_flight)
{
    size_t len = 2u << 20;
    uint8_t *data = malloc(len);
    struct snapstore *st = dir_store();
    struct writer finishing = {.data = data, .len = len}, open = {.data = data, .len = len};
    struct reader rd = {0};
    struct del_done d = {0};

    fill(data, len, 7);
    ASSERT_EQ_I(put_all(st, ID_A, data, len), 0);
    /* One put finishing (its bytes in flight to the file, or its fsync on the thread), one
     * still being written, a get and a delete in flight. */
    finishing.p = snapstore_put_begin(st, ID_B, on_drain, &finishing);
    feed(&finishing);
    open.p = snapstore_put_begin(st, ID_C, NULL, NULL);
    (void)snapstore_put_write(open.p, data, 300000);
    get_begin(st, ID_A, &rd);
    snapstore_delete(st, ID_A, on_del_done, &d);
    ASSERT_TRUE(!finishing.fired && !rd.fired && !d.fired); /* none before the loop runs */
    snapstore_free(st);
    ASSERT_EQ_I(count_entries(".part-"), 0);
    loop_for(base, 300);
    ASSERT_TRUE(!finishing.fired && !rd.fired && !d.fired);
    ASSERT_TRUE(rd.chunks == 0 && finishing.drains == 0);
    ASSERT_EQ_I(count_entries(".part-"), 0);
    buf_done(&rd.got);
    free(data);
}

TEST(free_during_fsync)
{
    size_t len = 256u << 10;
    uint8_t *data = malloc(len);
    struct snapstore *st = dir_store();
    struct writer w = {.data = data, .len = len};

    /* Free right after finish, repeatedly: the thread is somewhere in fsync/rename. No
     * callback, no part file; the object is there or not, never a partial one. */
    fill(data, len, 8);
    for (int i = 0; i < 20; i++) {
        memset(&w, 0, sizeof(w));
        w.data = data;
        w.len = len;
        if (st == NULL) {
            st = dir_store();
        }
        w.p = snapstore_put_begin(st, ID_B, NULL, NULL);
        feed(&w);
        for (int k = 0; k < i % 5; k++) {
            event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        }
        st = snapstore_free(st);
        ASSERT_EQ_I(count_entries(".part-"), 0);
    }
    loop_for(base, 200);
    ASSERT_TRUE(!w.fired);
    ASSERT_EQ_I(count_entries(".part-"), 0);
    free(data);
}

static int
touch(const char *name, time_t age_s)
{
    char path[160];
    struct timespec ts[2];
    int fd;

    (void)snprintf(path, sizeof(path), "%s/%s", dir, name);
    fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        return -errno;
    }
    (void)close(fd);
    (void)clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[0].tv_sec -= age_s;
    ts[1] = ts[0];
    return utimensat(AT_FDCWD, path, ts, 0) < 0 ? -errno : 0;
}

TEST(stale_parts_removed_at_start)
{
    struct snapstore *st;

    ASSERT_OK(touch(".part-" ID_A "-0000000000000000", 2 * 3600));
    ASSERT_OK(touch(".part-" ID_B "-1111111111111111", 60));
    ASSERT_OK(touch("keep-old.txt", 2 * 3600));
    ASSERT_EQ_I(count_entries(".part-"), 2);
    st = dir_store();
    ASSERT_TRUE(st != NULL);
    /* The old one is a crashed writer's; the young one may be another node's, in progress. */
    ASSERT_EQ_I(count_entries(".part-" ID_A), 0);
    ASSERT_EQ_I(count_entries(".part-" ID_B), 1);
    ASSERT_EQ_I(count_entries("keep-old.txt"), 1);
    snapstore_free(st);
    {
        char path[160];

        (void)snprintf(path, sizeof(path), "%s/.part-" ID_B "-1111111111111111", dir);
        ASSERT_OK(unlink(path));
    }
}

TEST(config_checked)
{
    struct snapstore_cfg cfg = {.kind = SNAPSTORE_DIR, .dir = "relative/dir"};
    struct snapstore *st;
    struct err e = {0};
    char sub[128];

    ASSERT_TRUE(snapstore_new(base, &cfg, &e) == NULL);
    ASSERT_EQ_I(e.code, -EINVAL);
    (void)snprintf(sub, sizeof(sub), "%s/made/on/demand", dir);
    cfg.dir = sub;
    st = snapstore_new(base, &cfg, &e);
    ASSERT_TRUE(st != NULL);
    snapstore_free(st);
    {
        struct stat sb;

        ASSERT_TRUE(stat(sub, &sb) == 0 && S_ISDIR(sb.st_mode) && (sb.st_mode & 0777) == 0700);
    }
    cfg = (struct snapstore_cfg){.kind = SNAPSTORE_S3,
                                 .endpoint = "http://127.0.0.1:1",
                                 .access_key = "a",
                                 .secret_key = "s"};
    err_clear(&e);
    ASSERT_TRUE(snapstore_new(base, &cfg, &e) == NULL); /* no bucket */
    ASSERT_EQ_I(e.code, -EINVAL);
    cfg.bucket = "snaps";
    cfg.part_bytes = 1u << 20;
    ASSERT_TRUE(snapstore_new(base, &cfg, &e) == NULL); /* below S3's 5 MiB */
    ASSERT_EQ_I(e.code, -EINVAL);
    cfg.part_bytes = 0;
    cfg.endpoint = "ftp://127.0.0.1";
    ASSERT_TRUE(snapstore_new(base, &cfg, &e) == NULL);
    cfg.endpoint = "http://127.0.0.1:1";
    cfg.prefix = "../x";
    ASSERT_TRUE(snapstore_new(base, &cfg, &e) == NULL);
    ASSERT_TRUE(strstr(e.msg, "prefix") != NULL);
    cfg.prefix = "sandpool/";
    st = snapstore_new(base, &cfg, &e);
    ASSERT_TRUE(st != NULL);
    ASSERT_STREQ(snapstore_kind_name(st), "s3");
    snapstore_free(st);
}

/* Port 1 on loopback: nothing listens there, so the s3 backend's outage mapping holds without a
 * server. */
TEST(s3_unreachable_is_econnrefused)
{
    struct snapstore_cfg cfg = {.kind = SNAPSTORE_S3,
                                .endpoint = "http://127.0.0.1:1",
                                .bucket = "snaps",
                                .access_key = "a",
                                .secret_key = "s",
                                .timeout_ms = 2000};
    struct snapstore *st = snapstore_new(base, &cfg, NULL);
    struct reader rd = {0};
    struct writer w = {.data = (const uint8_t *)"abc", .len = 3};
    uint64_t t0 = time_now_ms();

    get_begin(st, ID_A, &rd);
    w.p = snapstore_put_begin(st, ID_A, NULL, NULL);
    feed(&w);
    ASSERT_TRUE(!rd.fired && !w.fired);
    ASSERT_TRUE(loop_until(base, &rd.fired, 3000) && loop_until(base, &w.fired, 3000));
    ASSERT_EQ_I(rd.r, -ECONNREFUSED);
    ASSERT_EQ_I(w.r, -ECONNREFUSED);
    ASSERT_TRUE(time_now_ms() - t0 < 1000);
    ASSERT_TRUE(strstr(w.msg, "unreachable") != NULL && strstr(w.msg, "127.0.0.1") == NULL);
    buf_done(&rd.got);
    snapstore_free(st);
}

/* The s3 backend's answer parsers (pure; also fuzzed: tests/fuzz/fuzz-s3-xml.c). */
TEST(s3_answers)
{
    static const char init[] = "<?xml version=\"1.0\"?>\n<InitiateMultipartUploadResult "
                               "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>b"
                               "</Bucket><UploadId>abc.DEF-123_~</UploadId></InitiateMultipart"
                               "UploadResult>";
    static const char etag[] = "<ETag>&quot;3858f622-9&quot;</ETag><Code/><Message a='1' >m &amp; "
                               "&lt;&#65;&#x42;&gt;</Message ><Bad>a<b>c</b></Bad><Amp>&bogus;"
                               "</Amp><Open>never closed";
    static const char sig[] = "<Error><Code>SignatureDoesNotMatch</Code><Message>bad\x01sig"
                              "</Message></Error>";
    char out[64];
    struct err e = {0};

    ASSERT_EQ_I(snapstore_s3_xml_text(init, strlen(init), "UploadId", out, sizeof(out)), 13);
    ASSERT_STREQ(out, "abc.DEF-123_~");
    ASSERT_EQ_I(snapstore_s3_xml_text(etag, strlen(etag), "ETag", out, sizeof(out)), 12);
    ASSERT_STREQ(out, "\"3858f622-9\"");
    ASSERT_EQ_I(snapstore_s3_xml_text(etag, strlen(etag), "Code", out, sizeof(out)), 0);
    ASSERT_EQ_I(snapstore_s3_xml_text(etag, strlen(etag), "Message", out, sizeof(out)), 8);
    ASSERT_STREQ(out, "m & <AB>");
    ASSERT_EQ_I(snapstore_s3_xml_text(etag, strlen(etag), "Bad", out, sizeof(out)), -EPROTO);
    ASSERT_EQ_I(snapstore_s3_xml_text(etag, strlen(etag), "Amp", out, sizeof(out)), -EPROTO);
    ASSERT_EQ_I(snapstore_s3_xml_text(etag, strlen(etag), "Open", out, sizeof(out)), -EPROTO);
    ASSERT_EQ_I(snapstore_s3_xml_text(etag, strlen(etag), "Missing", out, sizeof(out)), -ENOENT);
    ASSERT_EQ_I(snapstore_s3_xml_text(init, strlen(init), "UploadId", out, 8), -EMSGSIZE);
    ASSERT_STREQ(out, "");
    /* <UploadIdX> is another element; a cut input is not read past. */
    ASSERT_EQ_I(snapstore_s3_xml_text("<UploadIdX>1</UploadIdX>", 24, "UploadId", out, 64),
                -ENOENT);
    ASSERT_EQ_I(snapstore_s3_xml_text("<Code>abc</Code>", 12, "Code", out, 64), -EPROTO);
    ASSERT_TRUE(snapstore_s3_xml_has(sig, strlen(sig), "Error"));

    ASSERT_EQ_I(snapstore_s3_error(403, sig, strlen(sig), &e), -EACCES);
    ASSERT_STREQ(e.msg, "snapshot store: s3 answered 403 SignatureDoesNotMatch: bad?sig");
    ASSERT_EQ_I(snapstore_s3_error(404, "<Error><Code>NoSuchKey</Code></Error>", 37, &e), -ENOENT);
    ASSERT_EQ_I(snapstore_s3_error(404, "", 0, &e), -ENOENT);
    /* A missing bucket is the store's trouble, not a lost snapshot. */
    ASSERT_EQ_I(snapstore_s3_error(404, "<Error><Code>NoSuchBucket</Code></Error>", 40, &e), -EIO);
    ASSERT_EQ_I(snapstore_s3_error(404, "<html>not found</html>", 22, &e), -EPROTO);
    ASSERT_EQ_I(snapstore_s3_error(503, "", 0, &e), -EIO);
    ASSERT_STREQ(e.msg, "snapshot store: s3 answered 503");
    ASSERT_EQ_I(snapstore_s3_error(507, "", 0, &e), -ENOSPC);
    ASSERT_EQ_I(snapstore_s3_error(403, "<Error><Code>QuotaExceeded</Code></Error>", 41, &e),
                -ENOSPC);
    ASSERT_EQ_I(snapstore_s3_error(400, "<Error><Code>RequestTimeout</Code></Error>", 42, &e),
                -ETIMEDOUT);
    ASSERT_EQ_I(snapstore_s3_error(200, "<Error><Code>InternalError</Code></Error>", 41, &e), -EIO);
    ASSERT_EQ_I(snapstore_s3_error(400, "<Error><Code>InvalidArgument</Code></Error>", 43, &e),
                -EPROTO);
}

static int
rm_tree(const char *path)
{
    char cmd[200];

    (void)snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    return system(cmd);
}

int
main(void)
{
    (void)snprintf(dir, sizeof(dir), "/tmp/test-snapstore.XXXXXX");
    if (mkdtemp(dir) == NULL) {
        TAP_SKIP_ALL("no temporary directory");
    }
    base = event_base_new();
    RUN(round_trip);
    RUN(empty_object);
    RUN(abort_leaves_nothing);
    RUN(replaced_only_on_finish);
    RUN(missing_is_enoent);
    RUN(invalid_ids_through_the_callback);
    RUN(delete);
    RUN(get_pause_resume);
    RUN(get_cancel_inside_on_data);
    RUN(writer_past_the_limit_fails);
    RUN(free_with_operations_in_flight);
    RUN(free_during_fsync);
    RUN(stale_parts_removed_at_start);
    RUN(config_checked);
    RUN(s3_unreachable_is_econnrefused);
    RUN(s3_answers);
    event_base_free(base);
    if (rm_tree(dir) != 0) {
        printf("# could not remove %s\n", dir);
    }
    return tap_done();
}
