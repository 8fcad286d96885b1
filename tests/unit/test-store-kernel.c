/* Unit tests for the pure parts of the session store (key names, record round trip, parsing of
 * what Redis returns), of the snapshot and node records, and of the kernel protocol (message
 * decoding, a line splitter that must survive garbage written by user code). */
#include <errno.h>

#include <jansson.h>

#include "kernel/proto.h"
#include "store/nodes.h"
#include "store/schema.h"
#include "store/snapshots.h"
#include "tap.h"

static struct store_session_rec
sample(void)
{
    struct store_session_rec r = {0};

    (void)snprintf(r.id, sizeof(r.id), "0123456789abcdef0123456789abcdef");
    (void)snprintf(r.tenant, sizeof(r.tenant), "acme");
    (void)snprintf(r.profile, sizeof(r.profile), "python");
    (void)snprintf(r.container, sizeof(r.container), "c0ffee");
    (void)snprintf(r.node, sizeof(r.node), "node-1");
    r.metadata = xstrdup("{\"k\":\"v\"}");
    r.created_at = 1000;
    r.last_active_at = 2000;
    r.expires_at = 50000;
    r.idle_timeout_s = 30;
    r.epoch = 3;
    r.gen = -1;
    r.state = STORE_SESSION_ACTIVE;
    return r;
}

TEST(keys)
{
    char k[64];

    ASSERT_OK(store_key_session(k, sizeof(k), "sp:", "abc"));
    ASSERT_STREQ(k, "sp:session:abc");
    ASSERT_OK(store_key_node_deadlines(k, sizeof(k), "sp:", "n1"));
    ASSERT_STREQ(k, "sp:node:n1:deadlines");
    ASSERT_OK(store_key_node_sessions(k, sizeof(k), "", "n1"));
    ASSERT_STREQ(k, "node:n1:sessions");
    ASSERT_ERR(store_key_session(k, 8, "sp:", "abc"), ENAMETOOLONG);
}

TEST(record_round_trip)
{
    struct store_session_rec in = sample(), out;
    char scratch[STORE_SCRATCH][24];
    const char *argv[STORE_FIELDS_ARGV];
    size_t lens[STORE_FIELDS_ARGV];
    int n = 0;

    store_session_rec_set(&in.ext, "{\"e2b\":1}");
    in.pause_after_s = 45;
    store_session_fields(&in, scratch, argv, lens, &n);
    ASSERT_EQ_I(n, STORE_FIELDS_ARGV);
    ASSERT_OK(store_session_parse(argv, lens, (size_t)n, &out));
    ASSERT_STREQ(out.id, in.id);
    ASSERT_STREQ(out.tenant, "acme");
    ASSERT_STREQ(out.metadata, "{\"k\":\"v\"}");
    ASSERT_STREQ(out.ext, "{\"e2b\":1}");
    ASSERT_EQ_U(out.expires_at, 50000);
    ASSERT_EQ_U(out.idle_timeout_s, 30);
    ASSERT_EQ_U(out.pause_after_s, 45);
    ASSERT_EQ_U(out.epoch, 3);
    ASSERT_EQ_I(out.gen, -1);
    ASSERT_EQ_I(out.state, STORE_SESSION_ACTIVE);
    ASSERT_EQ_I(out.idle_action, STORE_IDLE_PROFILE);
    ASSERT_STREQ(out.snapshot, "");
    store_session_rec_done(&out);
    /* a hibernated record: its snapshot and its own idle action */
    in.state = STORE_SESSION_HIBERNATED;
    in.idle_action = STORE_IDLE_HIBERNATE;
    (void)snprintf(in.snapshot, sizeof(in.snapshot), "0123456789abcdef0123456789abcdef");
    in.snapshot_size = 123456789012ull;
    (void)snprintf(in.snapshot_sha256, sizeof(in.snapshot_sha256), "%064d", 7);
    in.container[0] = '\0';
    n = 0;
    store_session_fields(&in, scratch, argv, lens, &n);
    ASSERT_OK(store_session_parse(argv, lens, (size_t)n, &out));
    ASSERT_EQ_I(out.state, STORE_SESSION_HIBERNATED);
    ASSERT_EQ_I(out.idle_action, STORE_IDLE_HIBERNATE);
    ASSERT_STREQ(out.snapshot, "0123456789abcdef0123456789abcdef");
    ASSERT_EQ_U(out.snapshot_size, 123456789012ull);
    ASSERT_STREQ(out.snapshot_sha256, in.snapshot_sha256);
    ASSERT_STREQ(out.container, "");
    /* a hibernated session idles at no cost: its deadline is its end of life */
    ASSERT_EQ_U(store_session_deadline(&in, 2000), 50000);
    in.state = STORE_SESSION_ACTIVE;
    /* deadline: idle bound, then the lifetime bound */
    ASSERT_EQ_U(store_session_deadline(&in, 2000), 32000);
    ASSERT_EQ_U(store_session_deadline(&in, 40000), 50000);
    store_session_rec_done(&out);
    store_session_rec_done(&in);
}

TEST(record_rejects)
{
    struct store_session_rec in = sample(), out = {0};
    char scratch[STORE_SCRATCH][24];
    const char *argv[STORE_FIELDS_ARGV];
    size_t lens[STORE_FIELDS_ARGV];
    int n = 0;

    store_session_fields(&in, scratch, argv, lens, &n);
    /* odd count */
    ASSERT_ERR(store_session_parse(argv, lens, 3, &out), EPROTO);
    /* a required field missing: drop "id" (first pair) */
    ASSERT_ERR(store_session_parse(argv + 2, lens + 2, (size_t)n - 2, &out), EPROTO);
    /* bad number, bad state, invalid UTF-8, unknown fields ignored */
    {
        const char *bad[] = {"epoch", "x1"};
        size_t bl[] = {5, 2};
        const char *kv[STORE_FIELDS_ARGV + 2];
        size_t kl[STORE_FIELDS_ARGV + 2];

        memcpy(kv, argv, sizeof(argv[0]) * (size_t)n);
        memcpy(kl, lens, sizeof(lens[0]) * (size_t)n);
        kv[n] = bad[0];
        kl[n] = bl[0];
        kv[n + 1] = bad[1];
        kl[n + 1] = bl[1];
        ASSERT_ERR(store_session_parse(kv, kl, (size_t)n + 2, &out), EPROTO);
        kv[n] = "state";
        kl[n] = 5;
        kv[n + 1] = "gone";
        kl[n + 1] = 4;
        ASSERT_ERR(store_session_parse(kv, kl, (size_t)n + 2, &out), EPROTO);
        kv[n] = "tenant";
        kl[n] = 6;
        kv[n + 1] = "\xff";
        kl[n + 1] = 1;
        ASSERT_ERR(store_session_parse(kv, kl, (size_t)n + 2, &out), EPROTO);
        kv[n] = "future_field";
        kl[n] = 12;
        kv[n + 1] = "whatever";
        kl[n + 1] = 8;
        ASSERT_OK(store_session_parse(kv, kl, (size_t)n + 2, &out));
    }
    ASSERT_STREQ(out.tenant, "acme");
    store_session_rec_done(&out);
    store_session_rec_done(&in);
}

TEST(snapshot_record)
{
    const char *kv[] = {"id",         "0123456789abcdef0123456789abcdef",
                        "tenant",     "acme",
                        "state",      "ready",
                        "created_at", "1700",
                        "size",       "42",
                        "sha256",     "ab",
                        "future",     "ignored"};
    size_t lens[ELEMENTSOF(kv)];
    struct store_snapshot_rec rec;

    for (size_t i = 0; i < ELEMENTSOF(kv); i++) {
        lens[i] = strlen(kv[i]);
    }
    ASSERT_OK(store_snapshot_parse(kv, lens, ELEMENTSOF(kv), &rec));
    ASSERT_EQ_U(rec.size, 42);
    ASSERT_EQ_I(rec.state, STORE_SNAPSHOT_READY);
    ASSERT_STREQ(rec.manifest, "{}"); /* none stored: an empty manifest */
    store_snapshot_rec_done(&rec);
    /* a required field missing (created_at), a bad id, a bad state, an odd count */
    ASSERT_ERR(store_snapshot_parse(kv, lens, 6, &rec), EPROTO);
    kv[1] = "0123456789ABCDEF0123456789abcdef";
    lens[1] = strlen(kv[1]);
    ASSERT_ERR(store_snapshot_parse(kv, lens, ELEMENTSOF(kv), &rec), EPROTO);
    kv[1] = "0123456789abcdef0123456789abcdef";
    kv[5] = "gone";
    lens[5] = 4;
    ASSERT_ERR(store_snapshot_parse(kv, lens, ELEMENTSOF(kv), &rec), EPROTO);
    ASSERT_ERR(store_snapshot_parse(kv, lens, 3, &rec), EPROTO);
    ASSERT_TRUE(!store_snapshot_valid_id("0123"));
}

TEST(node_record)
{
    const char *kv[] = {"id",           "node-a",
                        "url",          "http://10.0.0.5:8080",
                        "version",      "0.1.0",
                        "draining",     "1",
                        "started_at",   "1000",
                        "heartbeat_at", "5000",
                        "ttl_ms",       "3000",
                        "sessions",     "12",
                        "capacity",     "{\"python\":{\"ready\":3}}",
                        "future",       "ignored"};
    size_t lens[ELEMENTSOF(kv)];
    struct store_node_rec rec;

    for (size_t i = 0; i < ELEMENTSOF(kv); i++) {
        lens[i] = strlen(kv[i]);
    }
    ASSERT_OK(store_node_parse(kv, lens, ELEMENTSOF(kv), &rec));
    ASSERT_STREQ(rec.id, "node-a");
    ASSERT_STREQ(rec.url, "http://10.0.0.5:8080");
    ASSERT_TRUE(rec.draining && !rec.stopped);
    ASSERT_EQ_U(rec.sessions, 12);
    ASSERT_STREQ(rec.capacity, "{\"python\":{\"ready\":3}}");
    /* live while its last heartbeat is younger than its ttl (and a clock behind it is no loss) */
    ASSERT_TRUE(store_node_live(&rec, 5000) && store_node_live(&rec, 7999));
    ASSERT_TRUE(!store_node_live(&rec, 8000) && store_node_live(&rec, 10));
    rec.stopped = true;
    ASSERT_TRUE(!store_node_live(&rec, 5000)); /* a clean stop is not live at once */
    store_node_rec_done(&rec);
    /* the required fields (id, url, started_at, heartbeat_at, ttl_ms), a bad id, a bad flag */
    ASSERT_ERR(store_node_parse(kv + 2, lens + 2, ELEMENTSOF(kv) - 2, &rec), EPROTO);
    ASSERT_ERR(store_node_parse(kv, lens, 12, &rec), EPROTO);
    kv[1] = "node a";
    lens[1] = 6;
    ASSERT_ERR(store_node_parse(kv, lens, ELEMENTSOF(kv), &rec), EPROTO);
    kv[1] = "node-a";
    kv[7] = "yes";
    lens[7] = 3;
    ASSERT_ERR(store_node_parse(kv, lens, ELEMENTSOF(kv), &rec), EPROTO);
    kv[7] = "0";
    lens[7] = 1;
    ASSERT_OK(store_node_parse(kv, lens, 14, &rec)); /* no capacity: "{}" */
    ASSERT_STREQ(rec.capacity, "{}");
    store_node_rec_done(&rec);
    ASSERT_ERR(store_node_parse(kv, lens, 3, &rec), EPROTO);
}

static int seen_msgs;
static char last_type[16];

static int
on_obj(json_t *obj, void *userdata)
{
    struct kernel_msg m;

    if (kernel_proto_decode(obj, &m) == 0) {
        seen_msgs++;
        (void)snprintf(last_type, sizeof(last_type), "%s",
                       json_string_value(json_object_get(obj, "t")));
    }
    return 0;
}

TEST(splitter_survives_garbage)
{
    struct kernel_splitter sp;
    static const char stream[] =
        "{\"t\":\"hello\",\"v\":1,\"gen\":1,\"busy\":null,\"session\":null,\"used\":false}\n"
        "not json at all\n"
        "[1,2,3]\n"
        "\n"
        "{\"t\":\"out\",\"id\":\"e1\",\"s\":\"o\",\"d\":\"a\\u0000b\"}\n"
        "{\"t\":\"out\",\"id\":\"e1\"}\n" /* no data: not a valid message */
        "{\"t\":\"done\",\"id\":\"e1\",\"status\":\"ok\",\"gen\":1}\n";

    seen_msgs = 0;
    kernel_splitter_init(&sp);
    /* byte by byte */
    int errors = 0;

    for (size_t i = 0; i < sizeof(stream) - 1; i++) {
        errors += kernel_splitter_feed(&sp, stream + i, 1, on_obj, NULL) != 0;
    }
    ASSERT_EQ_I(errors, 0);
    ASSERT_EQ_I(seen_msgs, 3); /* hello, out (with a NUL), done; the out without data fails */
    ASSERT_STREQ(last_type, "done");
    ASSERT_EQ_U(sp.garbage, 2); /* "not json" and the array */
    kernel_splitter_done(&sp);
}

TEST(splitter_long_line)
{
    struct kernel_splitter sp;
    size_t n = KERNEL_MAX_LINE + 100;
    char *big = malloc(n);

    memset(big, 'x', n);
    seen_msgs = 0;
    kernel_splitter_init(&sp);
    ASSERT_OK(kernel_splitter_feed(&sp, big, n, on_obj, NULL));
    ASSERT_OK(kernel_splitter_feed(&sp, "\n{\"t\":\"pong\",\"gen\":2}\n", 22, on_obj, NULL));
    ASSERT_EQ_I(seen_msgs, 1); /* resynchronised after the over-long line */
    ASSERT_EQ_U(sp.garbage, 1);
    ASSERT_TRUE(sp.line.alloc <= KERNEL_MAX_LINE + 1); /* never held more than the cap */
    kernel_splitter_done(&sp);
    free(big);
}

/* A long line that fits is delivered, and its buffer given back after it (a session must not
 * keep a forged line's high-water mark). */
TEST(splitter_shrinks)
{
    struct kernel_splitter sp;
    size_t n = KERNEL_MAX_LINE - 100;
    char *big = malloc(n);

    memcpy(big, "{\"t\":\"pong\",\"pad\":\"", 19);
    memset(big + 19, 'x', n - 21);
    memcpy(big + n - 2, "\"}", 2);
    seen_msgs = 0;
    kernel_splitter_init(&sp);
    ASSERT_OK(kernel_splitter_feed(&sp, big, n, on_obj, NULL));
    TAP_CHECK(sp.line.alloc >= n, "the line is held while it comes (%zu bytes)", sp.line.alloc);
    ASSERT_OK(kernel_splitter_feed(&sp, "\n", 1, on_obj, NULL));
    ASSERT_EQ_I(seen_msgs, 1);
    TAP_CHECK(sp.line.alloc <= KERNEL_LINE_KEEP, "and freed after it (%zu bytes kept)",
              sp.line.alloc);
    kernel_splitter_done(&sp);
    free(big);
}

/* Only hello and restarted carry a generation the daemon believes. */
TEST(decode_gen_and_done_types)
{
    static const char *const bad_done[] = {
        "{\"t\":\"done\",\"id\":\"e\",\"status\":\"forged\"}",
        "{\"t\":\"done\",\"id\":\"e\",\"status\":\"ok\",\"result\":5}",
        "{\"t\":\"done\",\"id\":\"e\",\"status\":\"error\",\"error\":5}",
        "{\"t\":\"done\",\"id\":\"e\",\"status\":\"error\",\"error\":{\"name\":\"E\"}}",
        ("{\"t\":\"done\",\"id\":\"e\",\"status\":\"error\",\"error\":{\"name\":\"E\",\"value\":"
         "\"v\",\"traceback\":[1]}}"),
        "{\"t\":\"done\",\"id\":\"e\",\"status\":\"ok\",\"exit_code\":100000}",
        "{\"t\":\"done\",\"id\":\"e\",\"status\":\"died\",\"oom\":\"yes\"}",
    };
    struct kernel_msg m;
    json_t *o;

    o = json_loads(
        "{\"t\":\"done\",\"id\":\"e\",\"status\":\"died\",\"gen\":9,\"oom\":true,"
        "\"result\":null,\"error\":{\"name\":\"E\",\"value\":\"v\",\"traceback\":[\"a\"]}}",
        0, NULL);
    ASSERT_OK(kernel_proto_decode(o, &m));
    TAP_CHECK(m.gen == -1, "a done's generation is not read (%lld)", (long long)m.gen);
    json_decref(o);
    o = json_loads("{\"t\":\"pong\",\"gen\":9}", 0, NULL);
    ASSERT_OK(kernel_proto_decode(o, &m));
    TAP_CHECK(m.gen == -1, "nor a pong's");
    json_decref(o);
    o = json_loads("{\"t\":\"restarted\",\"gen\":9}", 0, NULL);
    ASSERT_OK(kernel_proto_decode(o, &m));
    TAP_CHECK(m.gen == 9, "a restarted's is");
    json_decref(o);
    for (size_t i = 0; i < ELEMENTSOF(bad_done); i++) {
        o = json_loads(bad_done[i], 0, NULL);
        TAP_CHECK(o != NULL && kernel_proto_decode(o, &m) == -EPROTO, "refused: %s", bad_done[i]);
        json_decref(o);
    }
}

TEST(decode)
{
    struct kernel_msg m;
    json_t *o;

    o = json_loads("{\"t\":\"out\",\"id\":\"e1\",\"s\":\"e\",\"d\":\"x\"}", 0, NULL);
    ASSERT_OK(kernel_proto_decode(o, &m));
    ASSERT_TRUE(m.type == KERNEL_MSG_OUT && m.to_stderr && m.text_len == 1);
    json_decref(o);
    o = json_loads("{\"t\":\"hello\",\"gen\":4,\"session\":\"s\",\"used\":true,\"busy\":\"e\"}", 0,
                   NULL);
    ASSERT_OK(kernel_proto_decode(o, &m));
    ASSERT_TRUE(m.gen == 4 && m.used && strcmp(m.session, "s") == 0 && strcmp(m.busy, "e") == 0);
    json_decref(o);
    o = json_loads("{\"t\":\"hello\"}", 0, NULL); /* no generation */
    ASSERT_ERR(kernel_proto_decode(o, &m), EPROTO);
    json_decref(o);
    o = json_loads("{\"t\":\"done\",\"id\":\"e\\u0000x\",\"status\":\"ok\"}", 0, NULL);
    ASSERT_ERR(kernel_proto_decode(o, &m), EPROTO); /* NUL in an id */
    json_decref(o);
    o = json_loads("{\"t\":\"nope\"}", 0, NULL);
    ASSERT_ERR(kernel_proto_decode(o, &m), EPROTO);
    json_decref(o);
}

/* A done decoded completely into its typed members. */
TEST(decode_done_complete)
{
    struct kernel_msg m;
    const struct kernel_done *d = &m.done;
    json_t *o;

    o = json_loads("{\"t\":\"done\",\"id\":\"e1\",\"status\":\"error\",\"result\":\"a\\u0000b\","
                   "\"error\":{\"name\":\"SyntaxError\",\"value\":\"bad\",\"traceback\":[\"l1\"],"
                   "\"line\":3,\"column\":7},\"exit_code\":-9,\"oom\":false,"
                   "\"truncated\":{\"o\":[100,40],\"e\":[-1,5]},"
                   "\"resources\":{\"cpu_ms\":12,\"peak_memory_bytes\":\"x\"}}",
                   JSON_ALLOW_NUL, NULL);
    ASSERT_OK(kernel_proto_decode(o, &m));
    ASSERT_TRUE(m.type == KERNEL_MSG_DONE && strcmp(m.id, "e1") == 0);
    ASSERT_EQ_I(d->status, KERNEL_DONE_ERROR);
    ASSERT_STREQ(kernel_done_status_to_string(d->status), "error");
    ASSERT_TRUE(d->result != NULL && d->result_len == 3 && memcmp(d->result, "a\0b", 3) == 0);
    ASSERT_TRUE(d->has_error && d->error.name_len == 11 && strcmp(d->error.value, "bad") == 0);
    ASSERT_EQ_U(json_array_size(d->error.traceback), 1);
    ASSERT_EQ_I(d->error.line, 3);
    ASSERT_EQ_I(d->error.column, 7);
    ASSERT_TRUE(d->has_exit_code);
    ASSERT_EQ_I(d->exit_code, -9);
    ASSERT_TRUE(!d->oom && d->reason == NULL);
    ASSERT_EQ_U(d->truncated[0].total, 100);
    ASSERT_EQ_U(d->truncated[0].dropped, 40);
    ASSERT_EQ_U(d->truncated[1].total, 0); /* a negative count is no count */
    ASSERT_EQ_U(d->truncated[1].dropped, 0);
    ASSERT_TRUE(d->has_resources);
    ASSERT_EQ_I(d->cpu_ms, 12);
    ASSERT_EQ_I(d->peak_memory_bytes, -1); /* not an integer: not reported */
    json_decref(o);

    o = json_loads("{\"t\":\"done\",\"id\":\"e2\",\"status\":\"died\",\"oom\":true,"
                   "\"reason\":\"killed\",\"truncated\":5,\"resources\":[]}",
                   0, NULL);
    ASSERT_OK(kernel_proto_decode(o, &m));
    ASSERT_EQ_I(d->status, KERNEL_DONE_DIED);
    ASSERT_TRUE(d->oom && strcmp(d->reason, "killed") == 0);
    ASSERT_TRUE(d->result == NULL && !d->has_error && !d->has_exit_code && !d->has_resources);
    ASSERT_TRUE(d->truncated[0].total == 0 && d->truncated[1].dropped == 0);
    ASSERT_TRUE(d->cpu_ms == -1 && d->peak_memory_bytes == -1);
    json_decref(o);

    o = json_loads("{\"t\":\"done\",\"id\":\"e3\",\"status\":\"ok\",\"error\":null,"
                   "\"result\":null}",
                   0, NULL);
    ASSERT_OK(kernel_proto_decode(o, &m));
    ASSERT_TRUE(d->status == KERNEL_DONE_OK && !d->has_error && d->result == NULL);
    ASSERT_TRUE(kernel_done_status_to_string(KERNEL_DONE__COUNT) == NULL);
    json_decref(o);
}

TEST(encode)
{
    char *line = kernel_proto_exec("e1", "print(1)\n", 9, 4096, NULL);
    json_t *o;

    ASSERT_TRUE(line[strlen(line) - 1] == '\n' && strchr(line, '\n') == line + strlen(line) - 1);
    o = json_loads(line, 0, NULL);
    ASSERT_STREQ(json_string_value(json_object_get(o, "code")), "print(1)\n");
    ASSERT_EQ_I(json_integer_value(json_object_get(o, "max_output")), 4096);
    ASSERT_TRUE(json_object_get(o, "snapshot") == NULL);
    json_decref(o);
    free(line);
    /* a snapshot save: no code to run, the member names the operation */
    line = kernel_proto_exec("e2", "", 0, 4096, &(struct kernel_exec_opts){.snapshot = "save"});
    o = json_loads(line, 0, NULL);
    ASSERT_STREQ(json_string_value(json_object_get(o, "snapshot")), "save");
    ASSERT_STREQ(json_string_value(json_object_get(o, "t")), "exec");
    ASSERT_TRUE(json_object_get(o, "code") == NULL);
    json_decref(o);
    free(line);
}

int
main(void)
{
    RUN(keys);
    RUN(record_round_trip);
    RUN(record_rejects);
    RUN(snapshot_record);
    RUN(node_record);
    RUN(splitter_survives_garbage);
    RUN(splitter_long_line);
    RUN(splitter_shrinks);
    RUN(decode_gen_and_done_types);
    RUN(decode);
    RUN(decode_done_complete);
    RUN(encode);
    return tap_done();
}
