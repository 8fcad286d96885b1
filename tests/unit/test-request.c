/* Unit tests for API request validation (src/http/request.c): the errno and the exact message a
 * client gets for each kind of bad body, path or query (tests/integration/test-api.sh relies on
 * some of them), and the outputs of accepted ones. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "files/files.h"
#include "http/http-internal.h"
#include "session/session.h"
#include "tap.h"

enum which {
    CREATE,
    EXEC,
};

/* Decodes body (allow_empty for a create) and runs the parser; the decoder's or the parser's
 * result, with its message in e. */
static int
check(enum which w, const char *body, struct err *e)
{
    json_t *root = NULL;
    int r = http_request_json(body, strlen(body), w == CREATE, &root, e);

    if (r == 0 && w == CREATE) {
        struct http_create_body cb;

        r = http_request_create(root, &cb, e);
        if (r == 0) {
            http_create_body_done(&cb);
        }
    } else if (r == 0) {
        struct exec_req er;

        r = http_request_exec(root, &er, e);
    }
    json_decref(root);
    return r;
}

TEST(refusals)
{
    static const struct {
        enum which w;
        int code;
        const char *body;
        const char *msg;
    } cases[] = {
        {CREATE, -EINVAL, "[]", "the body must be a JSON object"},
        {CREATE, -EINVAL, "{",
         "the body is not valid JSON: string or '}' expected near end of file (line 1 column 1)"},
        {CREATE, -EINVAL, "{\"a\":1,\"a\":2}",
         "the body is not valid JSON: duplicate object key near '\"a\"' (line 1 column 10)"},
        {CREATE, -EINVAL, "{\"profil\":\"x\"}", "unknown field 'profil'"},
        {CREATE, -EINVAL, "{\"idle_timeout_s\":0}", "'idle_timeout_s' must be a positive integer"},
        {CREATE, -EINVAL, "{\"idle_timeout_s\":31536001}",
         "'idle_timeout_s' must be a positive integer"},
        {CREATE, -EINVAL, "{\"metadata\":[]}",
         "'metadata' must be an object of at most 32 strings"},
        {CREATE, -EINVAL, "{\"metadata\":{\"k\":1}}", "'metadata.k' must be a string"},
        {CREATE, -EINVAL, "{\"profile\":1}", "'profile' must be a string"},
        {EXEC, -EINVAL, "", "a JSON object body is required"},
        {EXEC, -EINVAL, "{}", "give exactly one of 'code' and 'command'"},
        {EXEC, -EINVAL, "{\"cod\":\"1\"}", "unknown field 'cod'"},
        {EXEC, -EINVAL, "{\"code\":\"1\",\"command\":[\"ls\"]}",
         "give exactly one of 'code' and 'command'"},
        {EXEC, -EINVAL, "{\"code\":1}", "'code' must be a string"},
        {EXEC, -EINVAL, "{\"code\":\"1\",\"timeout_s\":\"5\"}",
         "'timeout_s' must be a positive integer"},
        {EXEC, -EINVAL, "{\"command\":[]}", "'command' must be a non-empty array of strings"},
        {EXEC, -EINVAL, "{\"command\":\"ls\"}", "'command' must be a non-empty array of strings"},
        {EXEC, -EINVAL, "{\"command\":[\"ls\",2]}", "'command[1]' must be a string without NUL"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct err e = {0};

        ASSERT_EQ_I(check(cases[i].w, cases[i].body, &e), cases[i].code);
        ASSERT_STREQ(e.msg, cases[i].msg);
    }
}

TEST(null_body)
{
    json_t *root = NULL;
    struct err e = {0};

    /* An empty evbuffer pulls up NULL: the client is told a body is needed. */
    ASSERT_ERR(http_request_json(NULL, 0, false, &root, &e), EINVAL);
    ASSERT_STREQ(e.msg, "a JSON object body is required");
    ASSERT_TRUE(root == NULL);
    ASSERT_OK(http_request_json(NULL, 0, true, &root, &e));
    ASSERT_TRUE(json_is_object(root) && json_object_size(root) == 0);
    json_decref(root);
}

TEST(metadata)
{
    char body[8192];
    size_t n = 0;
    json_t *root = NULL;
    struct http_create_body cb;
    struct err e = {0};

    ASSERT_OK(http_request_json("{\"metadata\":{\"b\":\"2\",\"a\":\"1\"},\"profile\":\"py\"}", 45,
                                true, &root, &e));
    ASSERT_OK(http_request_create(root, &cb, &e));
    ASSERT_STREQ(cb.metadata_json, "{\"a\":\"1\",\"b\":\"2\"}");
    ASSERT_STREQ(cb.profile, "py");
    ASSERT_EQ_U(cb.idle_timeout_s, 0);
    http_create_body_done(&cb);
    json_decref(root);

    n += (size_t)snprintf(body, sizeof(body), "{\"metadata\":{\"big\":\"");
    memset(body + n, 'x', 4100);
    n += 4100;
    (void)snprintf(body + n, sizeof(body) - n, "\"}}");
    ASSERT_ERR(check(CREATE, body, &e), EMSGSIZE);
    ASSERT_STREQ(e.msg, "'metadata' is larger than 4096 bytes");

    n = (size_t)snprintf(body, sizeof(body), "{\"metadata\":{");
    for (int i = 0; i < 33; i++) {
        n += (size_t)snprintf(body + n, sizeof(body) - n, "%s\"k%d\":\"v\"", i ? "," : "", i);
    }
    (void)snprintf(body + n, sizeof(body) - n, "}}");
    ASSERT_ERR(check(CREATE, body, &e), EINVAL);
    ASSERT_STREQ(e.msg, "'metadata' must be an object of at most 32 strings");
}

/* A session's narrowing of its profile's egress list: checked, kept as compact text. */
TEST(egress)
{
    const char *ok = "{\"egress\": {\"allow\": [\"pypi.org\", \"*.pythonhosted.org:443\"]}}";
    json_t *root = NULL;
    struct http_create_body cb;
    struct err e = {0};
    char body[8192];
    size_t n;

    ASSERT_OK(http_request_json(ok, strlen(ok), true, &root, &e));
    ASSERT_OK(http_request_create(root, &cb, &e));
    ASSERT_STREQ(cb.egress_json, "{\"allow\":[\"pypi.org\",\"*.pythonhosted.org:443\"]}");
    http_create_body_done(&cb);
    json_decref(root);
    ASSERT_OK(check(CREATE, "{\"egress\": null}", &e));
    ASSERT_OK(check(CREATE, "{\"egress\": {\"deny\": [\"a.example\"]}}", &e));
    ASSERT_ERR(check(CREATE, "{\"egress\": [\"pypi.org\"]}", &e), EINVAL);
    ASSERT_STREQ(e.msg, "egress must be an object with \"allow\" and/or \"deny\"");
    ASSERT_ERR(check(CREATE, "{\"egress\": {\"allow\": [\"a..b\"]}}", &e), EINVAL);
    TAP_CHECK(strstr(e.msg, "'a..b'") != NULL, "the bad entry is named: %s", e.msg);
    ASSERT_ERR(check(CREATE, "{\"egress\": {\"allow\": [], \"widen\": true}}", &e), EINVAL);
    n = (size_t)snprintf(body, sizeof(body), "{\"egress\": {\"allow\": [");
    for (int i = 0; i < 128; i++) {
        n += (size_t)snprintf(body + n, sizeof(body) - n,
                              "%s\"host-%03d.a-longer-subdomain.example.com\"", i ? "," : "", i);
    }
    (void)snprintf(body + n, sizeof(body) - n, "]}}");
    ASSERT_ERR(check(CREATE, body, &e), EMSGSIZE);
    ASSERT_STREQ(e.msg, "'egress' is larger than 4096 bytes");
}

TEST(exec_accepts)
{
    json_t *root = NULL;
    struct exec_req er = {0};
    struct err e = {0};

    ASSERT_OK(http_request_json("{\"code\":\"print(1)\",\"timeout_s\":7}", 33, false, &root, &e));
    ASSERT_OK(http_request_exec(root, &er, &e));
    ASSERT_STREQ(er.code, "print(1)");
    ASSERT_EQ_U(er.code_len, 8);
    ASSERT_TRUE(er.argv == NULL);
    ASSERT_EQ_U(er.timeout_s, 7);
    json_decref(root);

    ASSERT_OK(http_request_json("{\"command\":[\"ls\",\"-l\"]}", 23, false, &root, &e));
    ASSERT_OK(http_request_exec(root, &er, &e));
    ASSERT_TRUE(er.code == NULL);
    ASSERT_EQ_U(json_array_size(er.argv), 2);
    ASSERT_EQ_U(er.timeout_s, 0);
    json_decref(root);
}

TEST(files_params)
{
    char out[FILES_PATH_MAX + 1];
    char *s = NULL;
    size_t len = 0;
    struct err e = {0};

    ASSERT_OK(http_request_path("a%2Fb%20c", &s, &len, &e));
    ASSERT_STREQ(s, "a/b c");
    ASSERT_EQ_U(len, 5);
    free(s);

    ASSERT_OK(http_request_file_path("/workspace/./a//b", 17, false, out, sizeof(out), &e));
    ASSERT_STREQ(out, "a/b");
    ASSERT_ERR(http_request_file_path("caf\xe9", 4, false, out, sizeof(out), &e), EINVAL);
    ASSERT_STREQ(e.msg, "the path is not valid UTF-8");
    ASSERT_ERR(http_request_file_path("a/../b", 6, false, out, sizeof(out), &e), EINVAL);
    ASSERT_STREQ(e.msg, "'..' is not allowed in a path");
    ASSERT_OK(http_request_dir(NULL, &s, &e));
    ASSERT_TRUE(s == NULL);
    ASSERT_OK(http_request_dir("x=1", &s, &e));
    ASSERT_TRUE(s == NULL);
    ASSERT_OK(http_request_dir("dir=%2Fworkspace%2Fdata&x=1", &s, &e));
    ASSERT_STREQ(s, "/workspace/data");
    free(s);
    s = NULL;
    ASSERT_ERR(http_request_dir("dir", &s, &e), EINVAL);
    ASSERT_STREQ(e.msg, "the query string is malformed");
    ASSERT_ERR(http_request_dir("dir=a%00b", &s, &e), EINVAL);
    ASSERT_STREQ(e.msg, "the path holds a NUL or control character");
    ASSERT_TRUE(s == NULL);
}

int
main(void)
{
    RUN(refusals);
    RUN(null_body);
    RUN(metadata);
    RUN(egress);
    RUN(exec_accepts);
    RUN(files_params);
    return tap_done();
}
