/* Unit tests for the engine answer helpers: status mapping, NDJSON splitting, state parsing. */
#include <errno.h>

#include <jansson.h>

#include "docker/api.h"
#include "docker/client.h"
#include "docker/json.h"
#include "tap.h"

TEST(status_mapping)
{
    struct err e = {0};
    const char *body = "{\"message\":\"No such container: abc\"}";

    ASSERT_OK(docker_status_to_errno(200, "", 0, &e));
    ASSERT_OK(docker_status_to_errno(204, "", 0, &e));
    ASSERT_ERR(docker_status_to_errno(404, body, strlen(body), &e), ENOENT);
    ASSERT_STREQ(e.msg, "engine answered 404: No such container: abc");
    ASSERT_ERR(docker_status_to_errno(409, "x", 1, &e), EBUSY);
    ASSERT_STREQ(e.msg, "engine answered 409");
    ASSERT_ERR(docker_status_to_errno(400, "", 0, &e), EINVAL);
    ASSERT_ERR(docker_status_to_errno(500, "", 0, &e), EIO);
    ASSERT_ERR(docker_status_to_errno(304, "", 0, &e), EALREADY);
    ASSERT_ERR(docker_status_to_errno(418, "", 0, &e), EPROTO);
}

struct seen {
    int n;
    char last[64];
};

static void
on_obj(json_t *obj, void *userdata)
{
    struct seen *s = userdata;
    const char *a = json_string_value(json_object_get(obj, "Action"));

    s->n++;
    (void)snprintf(s->last, sizeof(s->last), "%s", a ? a : "");
}

TEST(split_lines)
{
    struct buf b = BUF_INIT(1 << 20);
    struct seen s = {0};

    ASSERT_OK(buf_puts(&b, "{\"Action\":\"die\"}\n\n{\"Action\":\"destroy\"}\r\n{\"Act"));
    ASSERT_OK(docker_json_split_lines(&b, 1024, on_obj, &s));
    ASSERT_EQ_I(s.n, 2);
    ASSERT_STREQ(s.last, "destroy");
    ASSERT_STREQ(b.buf, "{\"Act"); /* partial line kept */
    ASSERT_OK(buf_puts(&b, "ion\":\"oom\"}\n"));
    ASSERT_OK(docker_json_split_lines(&b, 1024, on_obj, &s));
    ASSERT_EQ_I(s.n, 3);
    ASSERT_STREQ(s.last, "oom");
    ASSERT_EQ_U(b.len, 0);
    ASSERT_OK(buf_puts(&b, "[1]\n"));
    ASSERT_ERR(docker_json_split_lines(&b, 1024, on_obj, &s), EPROTO);
    buf_reset(&b);
    ASSERT_OK(buf_puts(&b, "{\"no newline yet, and too long\""));
    ASSERT_ERR(docker_json_split_lines(&b, 8, on_obj, &s), EMSGSIZE);
    buf_done(&b);
}

TEST(parse_state)
{
    const char *ok = "{\"Id\":\"abc\",\"State\":{\"Status\":\"running\",\"Running\":true,"
                     "\"OOMKilled\":false,\"ExitCode\":0,\"Pid\":42},"
                     "\"Config\":{\"Labels\":{\"sandpool.slot\":\"s1\"}}}";
    struct docker_state st = {0};
    json_t *j = json_loads(ok, 0, NULL);

    ASSERT_OK(docker_parse_state(j, &st));
    ASSERT_STREQ(st.id, "abc");
    ASSERT_STREQ(st.status, "running");
    ASSERT_TRUE(st.running && !st.oom_killed && st.pid == 42);
    ASSERT_STREQ(docker_label(j, "sandpool.slot"), "s1");
    ASSERT_TRUE(docker_label(j, "nope") == NULL);
    json_decref(j);
    j = json_loads("{\"Id\":\"abc\",\"State\":{\"Status\":1}}", 0, NULL);
    ASSERT_ERR(docker_parse_state(j, &st), EPROTO);
    ASSERT_STREQ(st.id, "abc"); /* untouched */
    json_decref(j);
}

TEST(valid_ids)
{
    ASSERT_TRUE(docker_valid_id("0123abcdef"));
    ASSERT_TRUE(docker_valid_id("sandpool-1f2e"));
    ASSERT_TRUE(!docker_valid_id(""));
    ASSERT_TRUE(!docker_valid_id("../etc"));
    ASSERT_TRUE(!docker_valid_id("a/b"));
    ASSERT_TRUE(!docker_valid_id("a?b"));
    ASSERT_TRUE(!docker_valid_id("-rf"));
}

int
main(void)
{
    RUN(status_mapping);
    RUN(split_lines);
    RUN(parse_state);
    RUN(valid_ids);
    return tap_done();
}
