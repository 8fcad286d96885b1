/* Unit tests for src/e2b/control.c: the E2B SDK's requests, checked (create, timeout, list, the
 * control-plane routes, paths, process.Process/Start, /execute, MIME keys), and the record an E2B
 * sandbox keeps in its session's ext. Each parser is fed what it accepts, every refusal with the
 * message the client gets, and its bounds on both sides; a refusal leaves *ret as it was. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "e2b/control.h"
#include "store/schema.h"
#include "tap.h"
#include "util/buf.h"
#include "util/macro.h"

#define TOK_A   "0123456789abcdef0123456789abcdef"
#define TOK_B   "fedcba9876543210fedcba9876543210"
#define CTX_1   "00112233445566ff"
#define CTX_2   "ffeeddccbbaa9988"
#define TMPL_64 "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._"
#define TMPL_65 TMPL_64 "-"

/* The error's message holds needle. */
#define ASSERT_MSG(e, needle) \
    TAP_CHECK(strstr((e).msg, (needle)) != NULL, "the message names '%s': %s", (needle), (e).msg)

/* JSON text as a value (any value, NUL allowed in strings, as a caller may load it); the test
 * stops at text that is not JSON: that is a mistake in the test. */
static json_t *
j(const char *text)
{
    json_error_t je;
    json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);

    if (v == NULL) {
        printf("Bail out! not JSON: %s (%s)\n", text, je.text);
        exit(EXIT_FAILURE);
    }
    return v;
}

static void
must(int r)
{
    if (r < 0) {
        abort();
    }
}

/* n hex digits into out (n + 1 bytes), starting at digit seed. */
static void
fill_hex(char *out, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        out[i] = "0123456789abcdef"[(i + seed) % 16];
    }
    out[n] = '\0';
}

/* ---- the record ---------------------------------------------------------------------------- */

static bool
ext_equal(const struct e2b_ext *a, const struct e2b_ext *b)
{
    if (strcmp(a->template_id, b->template_id) != 0 || strcmp(a->envd_token, b->envd_token) != 0 ||
        strcmp(a->traffic_token, b->traffic_token) != 0 || a->n_contexts != b->n_contexts) {
        return false;
    }
    for (unsigned i = 0; i < a->n_contexts; i++) {
        if (strcmp(a->contexts[i], b->contexts[i]) != 0) {
            return false;
        }
    }
    return true;
}

TEST(ext_round_trip)
{
    struct e2b_ext x = {0}, y = {0}, z = {0};
    char text[STORE_EXT_MAX + 1];

    (void)snprintf(x.template_id, sizeof(x.template_id), "%s", "code-interpreter-v1");
    (void)snprintf(x.envd_token, sizeof(x.envd_token), "%s", TOK_A);
    (void)snprintf(x.traffic_token, sizeof(x.traffic_token), "%s", TOK_B);
    ASSERT_OK(e2b_ext_encode(&x, text, sizeof(text)));
    ASSERT_STREQ(text, "{\"e2b\":{\"t\":\"code-interpreter-v1\",\"a\":\"" TOK_A "\",\"b\":\"" TOK_B
                       "\",\"c\":[]}}");
    ASSERT_OK(e2b_ext_decode(text, &y));
    TAP_CHECK(ext_equal(&x, &y), "no contexts: decodes to the record encoded");
    ASSERT_EQ_U(y.n_contexts, 0);

    x.n_contexts = 2;
    (void)snprintf(x.contexts[0], sizeof(x.contexts[0]), "%s", CTX_1);
    (void)snprintf(x.contexts[1], sizeof(x.contexts[1]), "%s", CTX_2);
    ASSERT_OK(e2b_ext_encode(&x, text, sizeof(text)));
    ASSERT_OK(e2b_ext_decode(text, &z));
    TAP_CHECK(ext_equal(&x, &z), "two contexts: decodes to the record encoded");
    ASSERT_STREQ(z.contexts[0], CTX_1);
    ASSERT_STREQ(z.contexts[1], CTX_2);

    /* a template of every character create takes, '/' included (not escaped) */
    (void)snprintf(x.template_id, sizeof(x.template_id), "%s", "team/tmpl:v1.2_a-b");
    ASSERT_OK(e2b_ext_encode(&x, text, sizeof(text)));
    TAP_CHECK(strstr(text, "\"team/tmpl:v1.2_a-b\"") != NULL, "the template as it is: %s", text);
    ASSERT_OK(e2b_ext_decode(text, &z));
    ASSERT_STREQ(z.template_id, "team/tmpl:v1.2_a-b");

    /* members it does not know (a newer daemon's) are ignored */
    ASSERT_OK(e2b_ext_decode("{\"v\":2,\"e2b\":{\"z\":[1],\"c\":[\"" CTX_1 "\"],\"b\":\"" TOK_B
                             "\",\"a\":\"" TOK_A "\",\"t\":\"base\"}}",
                             &z));
    ASSERT_STREQ(z.template_id, "base");
    ASSERT_EQ_U(z.n_contexts, 1);
    ASSERT_STREQ(z.contexts[0], CTX_1);
}

TEST(ext_bounds)
{
    struct e2b_ext x = {0}, y = {0};
    char text[STORE_EXT_MAX + 1], small[16];
    size_t len;

    /* the largest record fits the session's ext */
    (void)snprintf(x.template_id, sizeof(x.template_id), "%s", TMPL_64);
    fill_hex(x.envd_token, E2B_TOKEN_LEN, 0);
    fill_hex(x.traffic_token, E2B_TOKEN_LEN, 7);
    x.n_contexts = E2B_CONTEXTS_MAX;
    for (unsigned i = 0; i < E2B_CONTEXTS_MAX; i++) {
        fill_hex(x.contexts[i], E2B_CONTEXT_ID_LEN, i);
    }
    ASSERT_OK(e2b_ext_encode(&x, text, sizeof(text)));
    len = strlen(text);
    TAP_CHECK(len <= STORE_EXT_MAX, "the largest record is %zu bytes, at most %d", len,
              STORE_EXT_MAX);
    ASSERT_OK(e2b_ext_decode(text, &y));
    TAP_CHECK(ext_equal(&x, &y), "the largest record decodes to itself");
    ASSERT_EQ_U(y.n_contexts, E2B_CONTEXTS_MAX);
    ASSERT_EQ_I(e2b_ext_context(&y, x.contexts[E2B_CONTEXTS_MAX - 1]), E2B_CONTEXTS_MAX - 1);

    /* out too small: the text and its NUL must fit */
    ASSERT_ERR(e2b_ext_encode(&x, small, sizeof(small)), EMSGSIZE);
    ASSERT_ERR(e2b_ext_encode(&x, text, len), EMSGSIZE);
    ASSERT_OK(e2b_ext_encode(&x, text, len + 1));
    ASSERT_EQ_U(strlen(text), len);
}

TEST(ext_context)
{
    struct e2b_ext x = {.n_contexts = 2};

    (void)snprintf(x.contexts[0], sizeof(x.contexts[0]), "%s", CTX_1);
    (void)snprintf(x.contexts[1], sizeof(x.contexts[1]), "%s", CTX_2);
    (void)snprintf(x.contexts[2], sizeof(x.contexts[2]), "%s", "0000000000000000");
    ASSERT_EQ_I(e2b_ext_context(&x, CTX_1), 0);
    ASSERT_EQ_I(e2b_ext_context(&x, CTX_2), 1);
    ASSERT_EQ_I(e2b_ext_context(&x, "0000000000000000"), -1); /* past n_contexts */
    ASSERT_EQ_I(e2b_ext_context(&x, "00112233445566f"), -1);
    ASSERT_EQ_I(e2b_ext_context(&x, ""), -1);
    ASSERT_EQ_I(e2b_ext_context(&x, NULL), -1);
    x.n_contexts = 0;
    ASSERT_EQ_I(e2b_ext_context(&x, CTX_1), -1);
}

/* A record of these members t, a, b and c (each as JSON text). */
#define REC(t, a, b, c) "{\"e2b\":{\"t\":" t ",\"a\":" a ",\"b\":" b ",\"c\":" c "}}"
#define QA              "\"" TOK_A "\""
#define QB              "\"" TOK_B "\""

TEST(ext_decode_refused)
{
    static const char *const not_e2b[] = {
        "",
        "{}",
        "{\"mcp\":{\"t\":\"base\"}}",
        "{\"E2B\":{}}",
        "not JSON",
        "{\"e2b\":",
        "[\"e2b\"]",
        "null",
        "\"e2b\"",
    };
    static const char *const damaged[] = {
        "{\"e2b\":null}",
        "{\"e2b\":1}",
        "{\"e2b\":{}}",
        "{\"e2b\":[]}",
        "{\"e2b\":{\"a\":" QA ",\"b\":" QB ",\"c\":[]}}",       /* no t */
        "{\"e2b\":{\"t\":\"base\",\"b\":" QB ",\"c\":[]}}",     /* no a */
        "{\"e2b\":{\"t\":\"base\",\"a\":" QA ",\"c\":[]}}",     /* no b */
        "{\"e2b\":{\"t\":\"base\",\"a\":" QA ",\"b\":" QB "}}", /* no c */
        REC("\"\"", QA, QB, "[]"),                              /* empty template */
        REC("\"" TMPL_65 "\"", QA, QB, "[]"),                   /* template too long */
        REC("7", QA, QB, "[]"),                                 /* template not a string */
        REC("null", QA, QB, "[]"),                              /* template null */
        REC("\"base\"", "\"0123456789abcdef0123456789abcde\"", QB, "[]"),   /* 31 digits */
        REC("\"base\"", "\"0123456789abcdef0123456789abcdef0\"", QB, "[]"), /* 33 digits */
        REC("\"base\"", "\"0123456789ABCDEF0123456789abcdef\"", QB, "[]"),  /* upper case */
        REC("\"base\"", "\"0123456789abcdeg0123456789abcdef\"", QB, "[]"),  /* not hex */
        REC("\"base\"", QA, "\"\"", "[]"),
        REC("\"base\"", QA, "1", "[]"),
        REC("\"base\"", QA, QB, "{}"),
        REC("\"base\"", QA, QB, "\"" CTX_1 "\""),
        REC("\"base\"", QA, QB, "[1]"),
        REC("\"base\"", QA, QB, "[\"00112233445566f\"]"),   /* 15 digits */
        REC("\"base\"", QA, QB, "[\"00112233445566fff\"]"), /* 17 digits */
        REC("\"base\"", QA, QB, "[\"" CTX_1 "\",\"00112233445566FF\"]"),
        REC("\"base\"", QA, QB, "[null]"),
    };
    struct e2b_ext x = {.n_contexts = 99}, ok = {0};
    struct buf many = BUF_INIT(4096);

    ASSERT_ERR(e2b_ext_decode(NULL, &x), ENOENT);
    for (size_t i = 0; i < ELEMENTSOF(not_e2b); i++) {
        int r = e2b_ext_decode(not_e2b[i], &x);

        TAP_CHECK(r == -ENOENT, "no E2B record: '%s' => %d", not_e2b[i], r);
    }
    for (size_t i = 0; i < ELEMENTSOF(damaged); i++) {
        int r = e2b_ext_decode(damaged[i], &x);

        TAP_CHECK(r == -EPROTO, "damaged: '%s' => %d", damaged[i], r);
    }
    ASSERT_EQ_U(x.n_contexts, 99); /* untouched */

    /* contexts: E2B_CONTEXTS_MAX is the most a record holds */
    for (unsigned n = E2B_CONTEXTS_MAX; n <= E2B_CONTEXTS_MAX + 1; n++) {
        buf_reset(&many);
        must(buf_puts(&many, "{\"e2b\":{\"t\":\"base\",\"a\":" QA ",\"b\":" QB ",\"c\":["));
        for (unsigned i = 0; i < n; i++) {
            char id[E2B_CONTEXT_ID_LEN + 1];

            fill_hex(id, E2B_CONTEXT_ID_LEN, i);
            must(buf_printf(&many, "%s\"%s\"", i ? "," : "", id));
        }
        must(buf_puts(&many, "]}}"));
        if (n == E2B_CONTEXTS_MAX) {
            ASSERT_OK(e2b_ext_decode(many.buf, &ok));
            ASSERT_EQ_U(ok.n_contexts, E2B_CONTEXTS_MAX);
        } else {
            ASSERT_ERR(e2b_ext_decode(many.buf, &x), EPROTO);
        }
    }
    /* the template's bounds: 64 characters, and 64 bytes of UTF-8 */
    ASSERT_OK(e2b_ext_decode(REC("\"" TMPL_64 "\"", QA, QB, "[]"), &ok));
    ASSERT_STREQ(ok.template_id, TMPL_64);
    ASSERT_ERR(e2b_ext_decode(REC("\"\\u00e9" TMPL_64 "\"", QA, QB, "[]"), &x), EPROTO);
    buf_done(&many);
}

/* ---- the control plane --------------------------------------------------------------------- */

struct route_row {
    const char *path;
    enum e2b_route want;
    const char *id;
};

#define ID_64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static const struct route_row route_rows[] = {
    {"sandboxes", E2B_ROUTE_SANDBOXES, NULL},
    {"v2/sandboxes", E2B_ROUTE_SANDBOXES, NULL},
    {"sandboxes/0a1b", E2B_ROUTE_SANDBOX, "0a1b"},
    {"v2/sandboxes/0a1b", E2B_ROUTE_SANDBOX, "0a1b"},
    {"sandboxes/f", E2B_ROUTE_SANDBOX, "f"},
    {"sandboxes/" ID_64, E2B_ROUTE_SANDBOX, ID_64},
    {"sandboxes/abc/timeout", E2B_ROUTE_TIMEOUT, "abc"},
    {"v2/sandboxes/abc/timeout", E2B_ROUTE_TIMEOUT, "abc"},
    {"sandboxes/abc/connect", E2B_ROUTE_CONNECT, "abc"},
    {"sandboxes/abc/pause", E2B_ROUTE_PAUSE, "abc"},
    {"v2/sandboxes/" ID_64 "/connect", E2B_ROUTE_CONNECT, ID_64},
    /* refused */
    {"", E2B_ROUTE__INVALID, NULL},
    {"v2", E2B_ROUTE__INVALID, NULL},
    {"v2/", E2B_ROUTE__INVALID, NULL},
    {"v3/sandboxes", E2B_ROUTE__INVALID, NULL},
    {"v2/v2/sandboxes", E2B_ROUTE__INVALID, NULL},
    {"/sandboxes", E2B_ROUTE__INVALID, NULL},
    {"sandbox", E2B_ROUTE__INVALID, NULL},
    {"sandboxesx", E2B_ROUTE__INVALID, NULL},
    {"Sandboxes", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/", E2B_ROUTE__INVALID, NULL},
    {"sandboxes//abc", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/ABC", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/abg", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/-1", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/ab%63", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/abc?x=1", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/abc ", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/" ID_64 "0", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/" ID_64 "0/timeout", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/abc/", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/abc//timeout", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/abc/timeout/", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/abc/timeoutx", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/abc/Timeout", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/abc/connect/x", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/abc/kill", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/abc/metrics", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/abc/pause/x", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/abc/network", E2B_ROUTE_NETWORK, "abc"},
    {"v2/sandboxes/abc/network", E2B_ROUTE_NETWORK, "abc"},
    {"sandboxes/abc/network/x", E2B_ROUTE__INVALID, NULL},
    {"sandboxes/abc/xyz/timeout", E2B_ROUTE__INVALID, NULL},
    {"templates", E2B_ROUTE__INVALID, NULL},
};

TEST(route)
{
    for (size_t i = 0; i < ELEMENTSOF(route_rows); i++) {
        const struct route_row *row = &route_rows[i];
        char id[E2B_ID_MAX + 1] = "untouched";
        enum e2b_route r = e2b_control_route(row->path, id);

        TAP_CHECK(r == row->want, "'%s' => %d, want %d", row->path, (int)r, (int)row->want);
        if (row->id != NULL) {
            TAP_CHECK(strcmp(id, row->id) == 0, "'%s': the id is '%s' ('%s')", row->path, row->id,
                      id);
        }
    }
}

TEST(create)
{
    struct e2b_create c = {0};
    struct err e = {0};
    json_t *body;

    body = j("{}");
    ASSERT_OK(e2b_create_parse(body, &c, &e));
    ASSERT_STREQ(c.template_id, "base");
    ASSERT_EQ_U(c.timeout_s, 0);
    ASSERT_TRUE(c.metadata == NULL);
    json_decref(body);

    /* what the SDKs send by default, unknown members among it */
    body = j("{\"templateID\":\"code-interpreter-v1\",\"timeout\":300,\"metadata\":{\"a\":\"b\"},"
             "\"secure\":true,\"allow_internet_access\":true,\"autoPause\":false,"
             "\"autoResume\":{\"enabled\":false},\"envVars\":{},\"mcp\":null,"
             "\"network\":null,\"volumeMounts\":[],\"someday\":{\"x\":1}}");
    ASSERT_OK(e2b_create_parse(body, &c, &e));
    ASSERT_STREQ(c.template_id, "code-interpreter-v1");
    TAP_CHECK(c.template_id == json_string_value(json_object_get(body, "templateID")),
              "the template is borrowed from the body");
    ASSERT_EQ_U(c.timeout_s, 300);
    TAP_CHECK(c.metadata == json_object_get(body, "metadata"), "metadata is borrowed");
    json_decref(body);

    body = j("{\"templateID\":\"" TMPL_64 "\",\"metadata\":null,\"timeout\":null}");
    ASSERT_OK(e2b_create_parse(body, &c, &e));
    ASSERT_STREQ(c.template_id, TMPL_64);
    ASSERT_TRUE(c.metadata == NULL);
    ASSERT_EQ_U(c.timeout_s, 0);
    json_decref(body);

    body = j("{\"templateID\":\"team/tmpl:v1.2_a-b\",\"timeout\":31536000,\"metadata\":{}}");
    ASSERT_OK(e2b_create_parse(body, &c, &e));
    ASSERT_STREQ(c.template_id, "team/tmpl:v1.2_a-b");
    ASSERT_EQ_U(c.timeout_s, 31536000);
    TAP_CHECK(c.metadata != NULL && json_object_size(c.metadata) == 0, "{} metadata is kept");
    json_decref(body);
}

TEST(create_refused)
{
    static const char *const bad_template[] = {
        "{\"templateID\":\"\"}",      "{\"templateID\":\"a b\"}",
        "{\"templateID\":\"a\\nb\"}", "{\"templateID\":\"caf\\u00e9\"}",
        "{\"templateID\":\"a?b\"}",   "{\"templateID\":7}",
        "{\"templateID\":null}",      "{\"templateID\":[\"base\"]}",
    };
    static const char *const bad_timeout[] = {
        "{\"timeout\":-1}",   "{\"timeout\":31536001}", "{\"timeout\":9223372036854775807}",
        "{\"timeout\":1.5}",  "{\"timeout\":300.0}",    "{\"timeout\":\"300\"}",
        "{\"timeout\":true}", "{\"timeout\":{}}",
    };
    static const char *const bad_metadata[] = {
        "{\"metadata\":\"a=b\"}",
        "{\"metadata\":[]}",
        "{\"metadata\":1}",
        "{\"metadata\":true}",
    };
    struct e2b_create c = {.template_id = "sentinel", .timeout_s = 7};
    struct err e = {0};
    json_t *body;
    int r;

    ASSERT_ERR(e2b_create_parse(NULL, &c, &e), EINVAL);
    ASSERT_MSG(e, "must be a JSON object");
    body = j("[]");
    ASSERT_ERR(e2b_create_parse(body, &c, &e), EINVAL);
    json_decref(body);
    body = j("\"base\"");
    ASSERT_ERR(e2b_create_parse(body, &c, &e), EINVAL);
    json_decref(body);

    for (size_t i = 0; i < ELEMENTSOF(bad_template); i++) {
        body = j(bad_template[i]);
        err_clear(&e);
        r = e2b_create_parse(body, &c, &e);
        TAP_CHECK(r == -EINVAL && e.code == -EINVAL && strstr(e.msg, "'templateID' must be") &&
                      strstr(e.msg, "1 to 64 characters"),
                  "%s => %d: %s", bad_template[i], r, e.msg);
        json_decref(body);
    }
    for (size_t i = 0; i < ELEMENTSOF(bad_timeout); i++) {
        body = j(bad_timeout[i]);
        r = e2b_create_parse(body, &c, &e);
        TAP_CHECK(r == -EINVAL && strstr(e.msg, "'timeout' must be an integer of 0 to 31536000"),
                  "%s => %d: %s", bad_timeout[i], r, e.msg);
        json_decref(body);
    }
    for (size_t i = 0; i < ELEMENTSOF(bad_metadata); i++) {
        body = j(bad_metadata[i]);
        r = e2b_create_parse(body, &c, &e);
        TAP_CHECK(r == -EINVAL && strstr(e.msg, "'metadata' must be an object"), "%s => %d: %s",
                  bad_metadata[i], r, e.msg);
        json_decref(body);
    }
    body = j("{\"templateID\":\"" TMPL_65 "\"}");
    ASSERT_ERR(e2b_create_parse(body, &c, &e), EINVAL);
    ASSERT_MSG(e, "1 to 64 characters");
    json_decref(body);
    ASSERT_STREQ(c.template_id, "sentinel");
    ASSERT_EQ_U(c.timeout_s, 7);
}

TEST(create_env_vars)
{
    static const char *const bad[] = {
        "true", "1", "\"x\"", "[1]", "{\"x\":1}", "{\"\":\"1\"}", "{\"A=B\":\"1\"}", "{\"A\":null}",
    };
    struct e2b_create c = {0};
    struct e2b_ext x = {0}, y;
    char text[600], ext[1100];
    struct err e = {0};
    json_t *body;
    int r;

    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        (void)snprintf(text, sizeof(text), "{\"envVars\":%s}", bad[i]);
        body = j(text);
        r = e2b_create_parse(body, &c, &e);
        TAP_CHECK(r == -EINVAL && strstr(e.msg, "'envVars' must map names"), "%s => %d: %s", text,
                  r, e.msg);
        json_decref(body);
    }
    body = j("{\"envVars\":{}}");
    ASSERT_OK(e2b_create_parse(body, &c, &e));
    ASSERT_TRUE(c.env_vars == NULL); /* nothing to keep */
    json_decref(body);
    body = j("{\"envVars\":{\"B\":\"2\",\"A\":\"x y\"}}");
    ASSERT_OK(e2b_create_parse(body, &c, &e));
    ASSERT_TRUE(json_object_size(c.env_vars) == 2);
    /* kept in the record, sorted, and read back */
    ASSERT_OK(e2b_env_text(c.env_vars, x.env, sizeof(x.env)));
    ASSERT_STREQ(x.env, "{\"A\":\"x y\",\"B\":\"2\"}");
    json_decref(body);
    (void)snprintf(x.template_id, sizeof(x.template_id), "base");
    memset(x.envd_token, 'a', E2B_TOKEN_LEN);
    memset(x.traffic_token, 'b', E2B_TOKEN_LEN);
    ASSERT_OK(e2b_ext_encode(&x, ext, sizeof(ext)));
    ASSERT_OK(e2b_ext_decode(ext, &y));
    ASSERT_STREQ(y.env, x.env);
    /* larger than the record keeps: refused, saying the bound */
    (void)snprintf(text, sizeof(text), "{\"envVars\":{\"A\":\"%0400d\"}}", 0);
    body = j(text);
    ASSERT_ERR(e2b_create_parse(body, &c, &e), EINVAL);
    ASSERT_MSG(e, "over 384 bytes");
    json_decref(body);
}

/* One case of the network options through parse: want is the narrowing as compact JSON,
 * "null", or "!" and what the refusal says (then *ret is left alone). */
static void
network_case(int (*parse)(json_t *, json_t **, struct err *), const char *tag, const char *text,
             const char *want)
{
    json_t *body = j(text), *net = (json_t *)&net;
    struct err e = {0};
    int r = parse(body, &net, &e);

    if (want[0] == '!') {
        TAP_CHECK(r == -EINVAL && strstr(e.msg, want + 1) != NULL && net == (json_t *)&net,
                  "%s%s refused: %s", tag, text, e.msg);
    } else {
        char *got = net != NULL ? json_dumps(net, JSON_COMPACT) : strdup("null");

        TAP_CHECK(r == 0 && strcmp(got, want) == 0, "%s%s => %s", tag, text, got);
        free(got);
        json_decref(net);
    }
    json_decref(body);
}

/* allow_internet_access and network {allowOut, denyOut}: a narrowing of the profile's egress
 * list (src/e2b/network.c). */
TEST(network)
{
    static const struct {
        const char *body, *want; /* want: the narrowing as compact JSON, "null", or "!" + why */
    } cases[] = {
        {"{}", "null"},
        {"{\"allow_internet_access\":true,\"network\":null}", "null"},
        {"{\"allow_internet_access\":false}", "{\"allow\":[],\"deny\":[]}"},
        {"{\"network\":{\"allowOut\":[\"pypi.org\"],\"denyOut\":[\"0.0.0.0/0\"]}}",
         "{\"allow\":[\"pypi.org\"],\"deny\":[]}"},
        {"{\"allow_internet_access\":false,\"network\":{\"allowOut\":[\"*.example.com\","
         "\"10.1.2.3/32\",\"::1\"]}}",
         "{\"allow\":[\"*.example.com\",\"10.1.2.3\",\"::1\"],\"deny\":[]}"},
        /* allowOut alone widens nothing */
        {"{\"network\":{\"allowOut\":[\"pypi.org\"]}}", "null"},
        /* addresses in denyOut alone: the profile's list less those */
        {"{\"network\":{\"denyOut\":[\"10.1.2.3\",\"fd00::1/128\"]}}",
         "{\"deny\":[\"10.1.2.3\",\"fd00::1\"]}"},
        /* an allowOut entry wins over the same denyOut one */
        {"{\"network\":{\"allowOut\":[\"10.1.2.3\"],\"denyOut\":[\"::/0\",\"10.1.2.3\"]}}",
         "{\"allow\":[\"10.1.2.3\"],\"deny\":[]}"},
        /* a catch-all in allowOut wins over everything denied */
        {"{\"allow_internet_access\":false,\"network\":{\"allowOut\":[\"0.0.0.0/0\"],"
         "\"denyOut\":[\"10.1.2.3\"]}}",
         "null"},
        {"{\"network\":{\"allowPublicTraffic\":false,\"rules\":{},\"egressProxy\":null}}", "null"},
        {"{\"network\":{\"denyOut\":[\"10.0.0.0/8\"]}}", "!a range of more than one address"},
        {"{\"network\":{\"allowOut\":[\"1.2.3.0/24\"]}}", "!a range of more than one address"},
        {"{\"network\":{\"denyOut\":[\"evil.com\"]}}", "!takes no names there"},
        {"{\"network\":{\"allowOut\":[\"a b\"],\"denyOut\":[\"0.0.0.0/0\"]}}", "!'a b' is no name"},
        {"{\"network\":{\"rules\":{\"api.x.com\":[{}]}}}", "!network.rules' is not supported"},
        {"{\"network\":{\"egressProxy\":{\"address\":\"p:1080\"}}}",
         "!network.egressProxy' is not supported"},
        {"{\"network\":[]}", "!'network' must be an object"},
        {"{\"network\":{\"allowOut\":\"pypi.org\"}}", "!must be an array"},
        {"{\"network\":{\"allowOut\":[1]}}", "!must hold strings"},
        {"{\"allow_internet_access\":\"no\"}", "!must be true or false"},
    };

    for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
        network_case(e2b_network_parse, "", cases[i].body, cases[i].want);
    }
}

/* updateNetwork's body: the members at its top level; what it omits is cleared. */
TEST(network_update)
{
    static const struct {
        const char *body, *want; /* as in TEST(network) */
    } cases[] = {
        {"{}", "null"}, /* everything cleared: the profile's list again */
        {"{\"allow_internet_access\":false}", "{\"allow\":[],\"deny\":[]}"},
        {"{\"allowOut\":[\"pypi.org\"],\"denyOut\":[\"0.0.0.0/0\"]}",
         "{\"allow\":[\"pypi.org\"],\"deny\":[]}"},
        {"{\"denyOut\":[\"10.1.2.3\"],\"someday\":1}", "{\"deny\":[\"10.1.2.3\"]}"},
        {"{\"allowOut\":[\"pypi.org\"]}", "null"},
        {"{\"network\":{\"denyOut\":[\"0.0.0.0/0\"]}}", "null"}, /* create's shape: not read */
        {"{\"rules\":{\"api.x.com\":[{}]}}", "!network.rules' is not supported"},
        {"{\"egressProxy\":{\"address\":\"p:1080\"}}", "!network.egressProxy' is not supported"},
        {"{\"denyOut\":[\"10.0.0.0/8\"]}", "!a range of more than one address"},
        {"{\"allowOut\":\"pypi.org\"}", "!must be an array"},
        {"[]", "!must be a JSON object"},
        {"{\"allow_internet_access\":1}", "!must be true or false"},
    };

    for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
        network_case(e2b_network_update_parse, "update ", cases[i].body, cases[i].want);
    }
}

TEST(create_refused_members)
{
    static const char *const names[] = {"autoPause", "autoResume", "volumeMounts", "mcp"};
    static const char *const asks[] = {
        "true", "1", "\"x\"", "{\"enabled\":true}", "{\"enabled\":false,\"x\":1}", "{\"x\":1}",
        "[1]",  "0", "\"\"",
    };
    static const char *const defaults[] = {"false", "null", "{}", "[]", "{\"enabled\":false}"};
    struct e2b_create c = {0};
    struct err e = {0};
    char text[128];
    json_t *body;
    int r;

    for (size_t n = 0; n < ELEMENTSOF(names); n++) {
        for (size_t i = 0; i < ELEMENTSOF(asks); i++) {
            (void)snprintf(text, sizeof(text), "{\"%s\":%s}", names[n], asks[i]);
            body = j(text);
            r = e2b_create_parse(body, &c, &e);
            TAP_CHECK(r == -EINVAL && strstr(e.msg, names[n]) &&
                          strstr(e.msg, "is not supported here: "),
                      "%s => %d: %s", text, r, e.msg);
            json_decref(body);
        }
        for (size_t i = 0; i < ELEMENTSOF(defaults); i++) {
            (void)snprintf(text, sizeof(text), "{\"%s\":%s}", names[n], defaults[i]);
            body = j(text);
            r = e2b_create_parse(body, &c, &e);
            TAP_CHECK(r == 0, "%s, a default, is fine => %d", text, r);
            json_decref(body);
        }
    }
    /* each says why */
    body = j("{\"mcp\":{\"github/x\":{}}}");
    ASSERT_ERR(e2b_create_parse(body, &c, &e), EINVAL);
    ASSERT_MSG(e, "/mcp");
    json_decref(body);
    body = j("{\"autoPause\":true}");
    ASSERT_ERR(e2b_create_parse(body, &c, &e), EINVAL);
    ASSERT_MSG(e, "not paused");
    json_decref(body);
    body = j("{\"volumeMounts\":[{\"name\":\"v\",\"path\":\"/data\"}]}");
    ASSERT_ERR(e2b_create_parse(body, &c, &e), EINVAL);
    ASSERT_MSG(e, "volumes are not mounted");
    json_decref(body);
}

TEST(timeout)
{
    static const struct {
        const char *body;
        int want;
        unsigned value;
    } rows[] = {
        {"{\"timeout\":0}", 0, 0},
        {"{\"timeout\":1}", 0, 1},
        {"{\"timeout\":300}", 0, 300},
        {"{\"timeout\":31536000}", 0, 31536000},
        {"{\"timeout\":31536001}", -EINVAL, 0},
        {"{\"timeout\":4294967596}", -EINVAL, 0}, /* 2^32 + 300 must not wrap to 300 */
        {"{\"timeout\":-1}", -EINVAL, 0},
        {"{\"timeout\":-9223372036854775807}", -EINVAL, 0},
        {"{\"timeout\":60.0}", -EINVAL, 0},
        {"{\"timeout\":\"60\"}", -EINVAL, 0},
        {"{\"timeout\":false}", -EINVAL, 0},
        {"{\"timeout\":[60]}", -EINVAL, 0},
        {"{\"timeout\":60,\"memory\":false}", 0, 60}, /* connect's other members */
    };
    struct err e = {0};
    unsigned t = 0;
    json_t *body;
    int r;

    for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
        for (int required = 0; required <= 1; required++) {
            body = j(rows[i].body);
            t = 12345;
            r = e2b_timeout_parse(body, required, &t, &e);
            TAP_CHECK(r == rows[i].want && t == (r == 0 ? rows[i].value : 12345u),
                      "%s (required %d) => %d, %u", rows[i].body, required, r, t);
            if (r < 0) {
                ASSERT_MSG(e, "'timeout' must be an integer of 0 to 31536000 seconds");
            }
            json_decref(body);
        }
    }
    /* absent: 0 unless required */
    body = j("{}");
    t = 12345;
    ASSERT_OK(e2b_timeout_parse(body, false, &t, &e));
    ASSERT_EQ_U(t, 0);
    t = 12345;
    ASSERT_ERR(e2b_timeout_parse(body, true, &t, &e), EINVAL);
    ASSERT_MSG(e, "'timeout' (seconds) is required");
    ASSERT_EQ_U(t, 12345);
    json_decref(body);
    body = j("{\"timeout\":null}");
    t = 12345;
    ASSERT_OK(e2b_timeout_parse(body, false, &t, &e));
    ASSERT_EQ_U(t, 0);
    ASSERT_ERR(e2b_timeout_parse(body, true, &t, &e), EINVAL);
    json_decref(body);
    /* no body at all (connect may send none), or one that is not an object */
    t = 12345;
    ASSERT_OK(e2b_timeout_parse(NULL, false, &t, &e));
    ASSERT_EQ_U(t, 0);
    ASSERT_ERR(e2b_timeout_parse(NULL, true, &t, &e), EINVAL);
    body = j("[300]");
    ASSERT_ERR(e2b_timeout_parse(body, true, &t, &e), EINVAL);
    json_decref(body);
}

/* ---- lists --------------------------------------------------------------------------------- */

TEST(list)
{
    static const struct {
        const char *query, *after;
        unsigned limit;
        bool running, paused;
    } ok[] = {
        {NULL, "", 100, true, true},
        {"", "", 100, true, true},
        {"limit=1", "", 1, true, true},
        {"limit=1000", "", 1000, true, true},
        {"limit=0001", "", 1, true, true},
        {"limit=5&limit=7", "", 7, true, true},
        {"nextToken=", "", 100, true, true},
        {"nextToken=" TOK_A, TOK_A, 100, true, true},
        {"limit=2&nextToken=" TOK_B, TOK_B, 2, true, true},
        {"state=running", "", 100, true, false},
        {"state=paused", "", 100, false, true},
        {"state=running,paused", "", 100, true, true},
        {"state=paused&state=running", "", 100, true, true},
        {"state=running&state=paused", "", 100, true, true},
        {"state=", "", 100, false, false},
        {"state=paused&limit=3", "", 3, false, true},
        {"template=base&order=asc&startedAfter=2024-01-01T00%3A00%3A00Z", "", 100, true, true},
        {"metadata=", "", 100, true, true},
        {"a=1&", "", 100, true, true},
    };
    static const struct {
        const char *query, *msg;
    } bad[] = {
        {"limit=0", "'limit' must be 1 to 1000"},
        {"limit=1001", "'limit' must be 1 to 1000"},
        {"limit=-1", "'limit' must be 1 to 1000"},
        {"limit=%2B5", "'limit' must be 1 to 1000"},
        {"limit=+5", "'limit' must be 1 to 1000"},
        {"limit=5x", "'limit' must be 1 to 1000"},
        {"limit=", "'limit' must be 1 to 1000"},
        {"limit=1e2", "'limit' must be 1 to 1000"},
        {"limit=18446744073709551617", "'limit' must be 1 to 1000"},
        {"limit=1&limit=0", "'limit' must be 1 to 1000"},
        {"nextToken=abc", "'nextToken' is not one this server gave"},
        {"nextToken=0123456789abcdef0123456789abcde", "'nextToken' is not one"},
        {"nextToken=0123456789abcdef0123456789abcdef0", "'nextToken' is not one"},
        {"nextToken=0123456789ABCDEF0123456789abcdef", "'nextToken' is not one"},
        {"limit", "the query string is malformed"},
        {"=1", "the query string is malformed"},
        {"limit=1&&state=running", "the query string is malformed"},
        {"metadata=a", "'metadata' must be a URL-encoded key=value list"},
        {"metadata=a%3D1%26b", "'metadata' must be a URL-encoded key=value list"},
        {"metadata=%3D1", "'metadata' must be a URL-encoded key=value list"},
    };
    struct e2b_list l;
    struct err e = {0};
    int r;

    for (size_t i = 0; i < ELEMENTSOF(ok); i++) {
        memset(&l, 0x5a, sizeof(l));
        r = e2b_list_parse(ok[i].query, &l, &e);
        TAP_CHECK(r == 0 && l.limit == ok[i].limit && strcmp(l.after, ok[i].after) == 0 &&
                      l.running == ok[i].running && l.paused == ok[i].paused && l.n_filters == 0,
                  "'%s' => %d: limit %u, after '%s', running %d, paused %d",
                  ok[i].query ? ok[i].query : "(null)", r, l.limit, r == 0 ? l.after : "",
                  l.running, l.paused);
        if (r == 0) {
            e2b_list_done(&l);
        }
    }
    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        memset(&l, 0, sizeof(l));
        l.limit = 7;
        err_clear(&e);
        r = e2b_list_parse(bad[i].query, &l, &e);
        TAP_CHECK(r == -EINVAL && strstr(e.msg, bad[i].msg) != NULL && l.limit == 7,
                  "'%s' => %d: %s", bad[i].query, r, e.msg);
    }
}

/* "metadata=" and n pairs kN=vN, the list URL-encoded once. */
static void
filters_query(struct buf *b, unsigned first, unsigned n)
{
    must(buf_puts(b, "metadata="));
    for (unsigned i = first; i < first + n; i++) {
        must(buf_printf(b, "%sk%u%%3Dv%u", i > first ? "%26" : "", i, i));
    }
}

TEST(list_filters)
{
    struct buf q = BUF_INIT(8192);
    struct e2b_list l = {0};
    struct err e = {0};
    json_t *md;

    ASSERT_OK(e2b_list_parse("metadata=suite%3Dt1%26n%3D2&limit=1", &l, &e));
    ASSERT_EQ_U(l.n_filters, 2);
    ASSERT_STREQ(l.keys[0], "suite");
    ASSERT_STREQ(l.values[0], "t1");
    ASSERT_STREQ(l.keys[1], "n");
    ASSERT_STREQ(l.values[1], "2");
    ASSERT_EQ_U(l.limit, 1);
    e2b_list_done(&l);
    ASSERT_EQ_U(l.n_filters, 0);
    e2b_list_done(&l); /* twice is harmless */

    /* what the SDKs send for {"my key/ü": "a=b&c d%"}: each key and value percent-encoded, the
     * list URL-encoded, and that as a query parameter (E2B's API decodes the same three times) */
    ASSERT_OK(e2b_list_parse("metadata=my%252520key%252F%2525C3%2525BC%3Da%25253Db%252526c%252520d"
                             "%252525",
                             &l, &e));
    ASSERT_EQ_U(l.n_filters, 1);
    ASSERT_STREQ(l.keys[0], "my key/\xc3\xbc");
    ASSERT_STREQ(l.values[0], "a=b&c d%");
    md = j("{\"my key/\\u00fc\":\"a=b&c d%\"}");
    ASSERT_TRUE(e2b_list_matches(&l, md));
    json_decref(md);
    e2b_list_done(&l);
    ASSERT_OK(e2b_list_parse("metadata=my%252520key%25252F%2525C3%2525BC%3Da%25253Db%252526c"
                             "%252520d%252525",
                             &l, &e)); /* the JS SDK's, which encodes '/' once more */
    ASSERT_EQ_U(l.n_filters, 1);
    ASSERT_STREQ(l.keys[0], "my key/\xc3\xbc");
    ASSERT_STREQ(l.values[0], "a=b&c d%");
    e2b_list_done(&l);
    /* '+' is a space at every level */
    ASSERT_OK(e2b_list_parse("metadata=a+b%3Dc+d", &l, &e));
    ASSERT_STREQ(l.keys[0], "a b");
    ASSERT_STREQ(l.values[0], "c d");
    e2b_list_done(&l);

    /* E2B_FILTER_MAX pairs, in one parameter or several; one more is refused */
    filters_query(&q, 0, E2B_FILTER_MAX);
    ASSERT_OK(e2b_list_parse(q.buf, &l, &e));
    ASSERT_EQ_U(l.n_filters, E2B_FILTER_MAX);
    ASSERT_STREQ(l.keys[E2B_FILTER_MAX - 1], "k15");
    ASSERT_STREQ(l.values[E2B_FILTER_MAX - 1], "v15");
    e2b_list_done(&l);
    buf_reset(&q);
    filters_query(&q, 0, E2B_FILTER_MAX + 1);
    l.n_filters = 0;
    ASSERT_ERR(e2b_list_parse(q.buf, &l, &e), EINVAL);
    ASSERT_MSG(e, "'metadata' filters on at most 16 keys");
    buf_reset(&q);
    filters_query(&q, 0, E2B_FILTER_MAX / 2);
    must(buf_puts(&q, "&"));
    filters_query(&q, E2B_FILTER_MAX / 2, E2B_FILTER_MAX / 2);
    ASSERT_OK(e2b_list_parse(q.buf, &l, &e));
    ASSERT_EQ_U(l.n_filters, E2B_FILTER_MAX);
    e2b_list_done(&l);
    must(buf_puts(&q, "&metadata=x%3Dy"));
    ASSERT_ERR(e2b_list_parse(q.buf, &l, &e), EINVAL);
    ASSERT_MSG(e, "at most 16 keys");

    /* a refusal after filters were read frees them (ASan builds check) */
    ASSERT_ERR(e2b_list_parse("metadata=a%3D1%26b%3D2&limit=0", &l, &e), EINVAL);
    ASSERT_ERR(e2b_list_parse("metadata=a%3D1&metadata=b", &l, &e), EINVAL);
    buf_done(&q);
}

TEST(list_matches)
{
    static const struct {
        const char *metadata;
        bool want;
    } rows[] = {
        {"{\"a\":\"1\",\"b\":\"\"}", true},
        {"{\"c\":\"3\",\"b\":\"\",\"a\":\"1\"}", true},
        {"{\"a\":\"1\"}", false},
        {"{\"a\":\"1\",\"b\":\"x\"}", false},
        {"{\"a\":\"10\",\"b\":\"\"}", false},
        {"{\"a\":1,\"b\":\"\"}", false},
        {"{\"a\":\"1\",\"b\":null}", false},
        {"{\"A\":\"1\",\"b\":\"\"}", false},
        {"{}", false},
        {"[\"a\",\"1\"]", false},
        {"\"a=1\"", false},
    };
    struct e2b_list none = {0}, l = {0};
    struct err e = {0};
    json_t *md;

    ASSERT_OK(e2b_list_parse("limit=5", &none, &e));
    ASSERT_TRUE(e2b_list_matches(&none, NULL));
    md = j("{\"x\":\"y\"}");
    ASSERT_TRUE(e2b_list_matches(&none, md));
    json_decref(md);
    e2b_list_done(&none);

    ASSERT_OK(e2b_list_parse("metadata=a%3D1%26b%3D", &l, &e));
    ASSERT_EQ_U(l.n_filters, 2);
    ASSERT_TRUE(!e2b_list_matches(&l, NULL));
    for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
        md = j(rows[i].metadata);
        TAP_CHECK(e2b_list_matches(&l, md) == rows[i].want, "a=1, b='' on %s: %d", rows[i].metadata,
                  rows[i].want);
        json_decref(md);
    }
    e2b_list_done(&l);
}

/* ---- envd ---------------------------------------------------------------------------------- */

TEST(path_map)
{
    static const struct {
        const char *path, *want;
    } ok[] = {
        {"/home/user", ""},
        {"/home/user/", ""},
        {"/home/user/x", "x"},
        {"/home/user/a/b.txt", "a/b.txt"},
        {"/home/user//x", "x"},
        {"/home/user///a//b", "a//b"},
        {"/workspace", ""},
        {"/workspace/", ""},
        {"/workspace/x", "x"},
        {"/workspace//x", "x"},
        {"/home/user/workspace/x", "workspace/x"},
        {"x", "x"},
        {"a/b/", "a/b/"},
        {"./a", "./a"},
        {"../x", "../x"}, /* files_normalize() refuses '..' */
        {"", ""},
        {"home/user/x", "home/user/x"},
    };
    static const char *const bad[] = {
        "/",           "//home/user",   "/home",       "/home/", "/home/use",
        "/home/userx", "/home/user2/x", "/home/users", "/etc",   "/etc/passwd",
        "/workspacex", "/workspaces/x", "/tmp/x",      "/root",  "/HOME/user",
    };
    char out[64], tiny[4];
    struct err e = {0};
    int r;

    for (size_t i = 0; i < ELEMENTSOF(ok); i++) {
        (void)snprintf(out, sizeof(out), "%s", "untouched");
        r = e2b_path_map(ok[i].path, out, sizeof(out), &e);
        TAP_CHECK(r == 0 && strcmp(out, ok[i].want) == 0, "'%s' => %d, '%s' (want '%s')",
                  ok[i].path, r, out, ok[i].want);
        TAP_CHECK(out[0] != '/', "'%s' maps to no absolute path", ok[i].path);
    }
    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        (void)snprintf(out, sizeof(out), "%s", "untouched");
        err_clear(&e);
        r = e2b_path_map(bad[i], out, sizeof(out), &e);
        TAP_CHECK(r == -EINVAL && strstr(e.msg, "is outside the workspace") &&
                      strncmp(e.msg + 1, bad[i], strlen(bad[i])) == 0 &&
                      strcmp(out, "untouched") == 0,
                  "'%s' => %d: %s", bad[i], r, e.msg);
    }
    ASSERT_ERR(e2b_path_map("/etc/passwd", out, sizeof(out), &e), EINVAL);
    ASSERT_MSG(e, "only /home/user and /workspace");

    /* out's size: the path and its NUL */
    ASSERT_OK(e2b_path_map("/home/user/abc", tiny, sizeof(tiny), &e));
    ASSERT_STREQ(tiny, "abc");
    ASSERT_ERR(e2b_path_map("/home/user/abcd", tiny, sizeof(tiny), &e), EINVAL);
    ASSERT_MSG(e, "the path is too long");
    ASSERT_OK(e2b_path_map("abc", tiny, sizeof(tiny), &e));
    ASSERT_ERR(e2b_path_map("abcd", tiny, sizeof(tiny), &e), EINVAL);
    ASSERT_OK(e2b_path_map("/workspace", tiny, 1, &e));
    ASSERT_STREQ(tiny, "");
    ASSERT_ERR(e2b_path_map("", tiny, 0, &e), EINVAL);
    {
        /* a long refused path is cut in the message, which still fits */
        char longp[400];

        memset(longp, 'a', sizeof(longp) - 1);
        longp[0] = '/';
        longp[sizeof(longp) - 1] = '\0';
        ASSERT_ERR(e2b_path_map(longp, out, sizeof(out), &e), EINVAL);
        TAP_CHECK(strlen(e.msg) < sizeof(e.msg) && strncmp(e.msg, "'/aaa", 5) == 0, "%s", e.msg);
    }
}

/* argv's strings, joined with '|'. */
static const char *
argv_text(json_t *argv, char *out, size_t n)
{
    size_t i, o = 0;
    json_t *v;

    out[0] = '\0';
    json_array_foreach (argv, i, v) {
        int w = snprintf(out + o, n - o, "%s%s", i ? "|" : "", json_string_value(v));

        if (w < 0 || (size_t)w >= n - o) {
            break;
        }
        o += (size_t)w;
    }
    return out;
}

TEST(start)
{
    struct e2b_start st = {0};
    struct err e = {0};
    char text[256];
    json_t *msg, *args;

    msg = j("{\"process\":{\"cmd\":\"ls\"}}");
    ASSERT_OK(e2b_start_parse(msg, &st, &e));
    ASSERT_STREQ(argv_text(st.argv, text, sizeof(text)), "ls");
    ASSERT_TRUE(st.envs == NULL && st.cwd == NULL);
    json_decref(st.argv);
    json_decref(msg);

    /* what the SDK sends for commands.run("ls -l 'a b'", envs, cwd) */
    msg = j("{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"ls -l 'a b'\"],"
            "\"envs\":{\"A\":\"1\",\"B\":\"\"},\"cwd\":\"/home/user/src\"},\"stdin\":false,"
            "\"tag\":\"t1\",\"pty\":null}");
    ASSERT_OK(e2b_start_parse(msg, &st, &e));
    ASSERT_STREQ(argv_text(st.argv, text, sizeof(text)), "/bin/bash|-l|-c|ls -l 'a b'");
    TAP_CHECK(st.envs == json_object_get(json_object_get(msg, "process"), "envs"),
              "envs are borrowed");
    ASSERT_STREQ(st.cwd, "/home/user/src");
    TAP_CHECK(st.cwd == json_string_value(json_object_get(json_object_get(msg, "process"), "cwd")),
              "cwd is borrowed");
    /* argv is a new array sharing the args' strings: it outlives the message */
    args = json_object_get(json_object_get(msg, "process"), "args");
    ASSERT_EQ_U(st.argv->refcount, 1);
    ASSERT_EQ_U(json_array_get(args, 0)->refcount, 2);
    TAP_CHECK(json_array_get(st.argv, 1) == json_array_get(args, 0), "args are shared");
    json_incref(args);
    json_decref(msg);
    ASSERT_STREQ(json_string_value(json_array_get(st.argv, 3)), "ls -l 'a b'");
    json_decref(st.argv);
    ASSERT_EQ_U(json_array_get(args, 0)->refcount, 1); /* argv's reference is released */
    json_decref(args);

    /* empty or null members are absent ones */
    msg = j("{\"process\":{\"cmd\":\"true\",\"args\":[],\"envs\":{},\"cwd\":null}}");
    ASSERT_OK(e2b_start_parse(msg, &st, &e));
    ASSERT_EQ_U(json_array_size(st.argv), 1);
    ASSERT_TRUE(st.envs == NULL && st.cwd == NULL);
    json_decref(st.argv);
    json_decref(msg);
    msg = j("{\"process\":{\"cmd\":\"true\",\"envs\":null,\"cwd\":\"\"}}");
    ASSERT_OK(e2b_start_parse(msg, &st, &e));
    ASSERT_TRUE(st.envs == NULL);
    ASSERT_STREQ(st.cwd, "");
    json_decref(st.argv);
    json_decref(msg);
    /* args of any strings, empty ones and non-ASCII among them */
    msg = j("{\"process\":{\"cmd\":\"echo\",\"args\":[\"\",\"\\u00e9\",\"a=b\",\"-\"]}}");
    ASSERT_OK(e2b_start_parse(msg, &st, &e));
    ASSERT_STREQ(argv_text(st.argv, text, sizeof(text)), "echo||\xc3\xa9|a=b|-");
    json_decref(st.argv);
    json_decref(msg);
    /* an env value may hold '=' and be empty; the name may not */
    msg = j("{\"process\":{\"cmd\":\"env\",\"envs\":{\"X\":\"a=b\"}}}");
    ASSERT_OK(e2b_start_parse(msg, &st, &e));
    ASSERT_STREQ(json_string_value(json_object_get(st.envs, "X")), "a=b");
    json_decref(st.argv);
    json_decref(msg);
}

static json_t *
start_with_args(size_t n)
{
    json_t *args = OOM_CHECK(json_array());

    for (size_t i = 0; i < n; i++) {
        must(json_array_append_new(args, OOM_CHECK(json_string("x"))));
    }
    return OOM_CHECK(json_pack("{s:{s:s, s:o}}", "process", "cmd", "echo", "args", args));
}

TEST(start_refused)
{
    static const struct {
        const char *msg, *why;
    } rows[] = {
        {"{}", "'process.cmd' must be a non-empty string"},
        {"[]", "'process.cmd' must be"},
        {"{\"process\":null}", "'process.cmd' must be"},
        {"{\"process\":\"ls\"}", "'process.cmd' must be"},
        {"{\"process\":{}}", "'process.cmd' must be"},
        {"{\"process\":{\"cmd\":\"\"}}", "'process.cmd' must be"},
        {"{\"process\":{\"cmd\":7}}", "'process.cmd' must be"},
        {"{\"process\":{\"cmd\":[\"ls\"]}}", "'process.cmd' must be"},
        {"{\"cmd\":\"ls\"}", "'process.cmd' must be"},
        {"{\"process\":{\"cmd\":\"ls\",\"args\":\"-l\"}}", "'process.args' must be an array"},
        {"{\"process\":{\"cmd\":\"ls\",\"args\":{}}}", "'process.args' must be"},
        {"{\"process\":{\"cmd\":\"ls\",\"args\":[1]}}", "'process.args' must be"},
        {"{\"process\":{\"cmd\":\"ls\",\"args\":[\"a\",null]}}", "'process.args' must be"},
        {"{\"process\":{\"cmd\":\"ls\",\"args\":[\"a\",[\"b\"]]}}", "'process.args' must be"},
        {"{\"process\":{\"cmd\":\"ls\",\"args\":[\"a\\u0000b\"]}}", "'process.args' must be"},
        {"{\"process\":{\"cmd\":\"ls\",\"args\":[\"ok\",\"\\u0000\"]}}", "'process.args' must be"},
        {"{\"process\":{\"cmd\":\"ls\",\"envs\":{\"A\":1}}}", "'process.envs' must map names"},
        {"{\"process\":{\"cmd\":\"ls\",\"envs\":{\"A\":\"1\",\"B\":null}}}", "'process.envs'"},
        {"{\"process\":{\"cmd\":\"ls\",\"envs\":{\"A\":[\"1\"]}}}", "'process.envs'"},
        {"{\"process\":{\"cmd\":\"ls\",\"envs\":{\"A=B\":\"1\"}}}", "'process.envs'"},
        {"{\"process\":{\"cmd\":\"ls\",\"envs\":{\"=\":\"1\"}}}", "'process.envs'"},
        {"{\"process\":{\"cmd\":\"ls\",\"envs\":{\"\":\"1\"}}}", "'process.envs'"},
        {"{\"process\":{\"cmd\":\"ls\",\"envs\":\"A=1\"}}", "'process.envs'"},
        {"{\"process\":{\"cmd\":\"ls\",\"envs\":[\"A=1\"]}}", "'process.envs'"},
        {"{\"process\":{\"cmd\":\"ls\",\"cwd\":1}}", "'process.cwd' must be a string"},
        {"{\"process\":{\"cmd\":\"ls\",\"cwd\":[\"/\"]}}", "'process.cwd' must be a string"},
        {"{\"process\":{\"cmd\":\"ls\"},\"pty\":{\"size\":{\"cols\":80,\"rows\":24}}}",
         "a PTY is not supported here"},
        {"{\"process\":{\"cmd\":\"ls\"},\"pty\":{}}", "a PTY is not supported here"},
        {"{\"process\":{\"cmd\":\"ls\"},\"pty\":true}", "a PTY is not supported here"},
    };
    json_t *sentinel = OOM_CHECK(json_array());
    struct e2b_start st = {.argv = sentinel, .cwd = "sentinel"};
    struct err e = {0};
    json_t *msg;
    int r;

    ASSERT_ERR(e2b_start_parse(NULL, &st, &e), EINVAL);
    for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
        msg = j(rows[i].msg);
        err_clear(&e);
        r = e2b_start_parse(msg, &st, &e);
        TAP_CHECK(r == -EINVAL && strstr(e.msg, rows[i].why) != NULL, "%s => %d: %s", rows[i].msg,
                  r, e.msg);
        json_decref(msg);
    }
    TAP_CHECK(st.argv == sentinel && strcmp(st.cwd, "sentinel") == 0, "*ret is untouched");

    /* at most START_ARGS_MAX - 1 args besides the command */
    msg = start_with_args(4095);
    ASSERT_OK(e2b_start_parse(msg, &st, &e));
    ASSERT_EQ_U(json_array_size(st.argv), 4096);
    json_decref(st.argv);
    json_decref(msg);
    msg = start_with_args(4096);
    st.argv = sentinel;
    ASSERT_ERR(e2b_start_parse(msg, &st, &e), EINVAL);
    ASSERT_MSG(e, "'process.args' must be an array of strings");
    TAP_CHECK(st.argv == sentinel, "*ret is untouched");
    json_decref(msg);
    json_decref(sentinel);
}

/* ---- the code interpreter ------------------------------------------------------------------ */

TEST(execute)
{
    static const struct {
        const char *body, *ctx;
    } ok[] = {
        {"{\"code\":\"1+1\"}", NULL},
        {"{\"code\":\"1+1\",\"language\":\"python\"}", NULL},
        {"{\"code\":\"1+1\",\"language\":null,\"context_id\":null,\"env_vars\":null}", NULL},
        {"{\"code\":\"1+1\",\"context_id\":\"" CTX_1 "\"}", CTX_1},
        {"{\"code\":\"1+1\",\"context_id\":\"" CTX_1 "\",\"language\":null}", CTX_1},
        {"{\"code\":\"1+1\",\"context_id\":\"\"}", ""}, /* the caller looks it up */
        {"{\"code\":\"1+1\",\"env_vars\":{}}", NULL},
        {"{\"code\":\"1+1\",\"timeout\":30,\"someday\":[1]}", NULL},
    };
    static const struct {
        const char *body, *why;
    } bad[] = {
        {"{}", "'code' must be a string"},
        {"[]", "'code' must be a string"},
        {"{\"code\":null}", "'code' must be a string"},
        {"{\"code\":1}", "'code' must be a string"},
        {"{\"code\":[\"1\"]}", "'code' must be a string"},
        {"{\"code\":\"1\",\"context_id\":1}", "'context_id' must be a string"},
        {"{\"code\":\"1\",\"context_id\":{}}", "'context_id' must be a string"},
        {"{\"code\":\"1\",\"language\":\"r\"}", "only 'python' code runs here"},
        {"{\"code\":\"1\",\"language\":\"javascript\"}", "only 'python' code runs here"},
        {"{\"code\":\"1\",\"language\":\"Python\"}", "only 'python' code runs here"},
        {"{\"code\":\"1\",\"language\":\"python3\"}", "only 'python' code runs here"},
        {"{\"code\":\"1\",\"language\":\"\"}", "only 'python' code runs here"},
        {"{\"code\":\"1\",\"language\":1}", "only 'python' code runs here"},
        {"{\"code\":\"1\",\"language\":\"python\",\"context_id\":\"" CTX_1 "\"}",
         "give 'context_id' or 'language', not both"},
        {"{\"code\":\"1\",\"env_vars\":{\"A\":\"1\"}}", "'env_vars' is not supported here"},
        {"{\"code\":\"1\",\"env_vars\":[]}", "'env_vars' is not supported here"},
        {"{\"code\":\"1\",\"env_vars\":\"A=1\"}", "'env_vars' is not supported here"},
        {"{\"code\":\"1\",\"env_vars\":false}", "'env_vars' is not supported here"},
    };
    struct e2b_execute ex = {0};
    struct err e = {0};
    json_t *body;
    int r;

    for (size_t i = 0; i < ELEMENTSOF(ok); i++) {
        body = j(ok[i].body);
        memset(&ex, 0, sizeof(ex));
        r = e2b_execute_parse(body, &ex, &e);
        TAP_CHECK(r == 0 && ex.code != NULL && strcmp(ex.code, "1+1") == 0 && ex.code_len == 3 &&
                      (ok[i].ctx == NULL ? ex.context_id == NULL
                                         : ex.context_id && strcmp(ex.context_id, ok[i].ctx) == 0),
                  "%s => %d", ok[i].body, r);
        json_decref(body);
    }
    /* the code as it came: NUL bytes and all, borrowed */
    body = j("{\"code\":\"a\\u0000b\\n\"}");
    ASSERT_OK(e2b_execute_parse(body, &ex, &e));
    TAP_CHECK(ex.code_len == 4 && memcmp(ex.code, "a\0b\n", 4) == 0, "code_len %zu", ex.code_len);
    TAP_CHECK(ex.code == json_string_value(json_object_get(body, "code")), "the code is borrowed");
    json_decref(body);
    body = j("{\"code\":\"\"}");
    ASSERT_OK(e2b_execute_parse(body, &ex, &e));
    ASSERT_EQ_U(ex.code_len, 0);
    json_decref(body);

    ASSERT_ERR(e2b_execute_parse(NULL, &ex, &e), EINVAL);
    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        body = j(bad[i].body);
        ex = (struct e2b_execute){.code = "sentinel"};
        err_clear(&e);
        r = e2b_execute_parse(body, &ex, &e);
        TAP_CHECK(r == -EINVAL && strstr(e.msg, bad[i].why) != NULL &&
                      strcmp(ex.code, "sentinel") == 0,
                  "%s => %d: %s", bad[i].body, r, e.msg);
        json_decref(body);
    }
}

TEST(result_key)
{
    static const char *const renamed[][2] = {
        {"text/plain", "text"},        {"text/html", "html"},
        {"text/markdown", "markdown"}, {"image/svg+xml", "svg"},
        {"image/png", "png"},          {"image/jpeg", "jpeg"},
        {"application/pdf", "pdf"},    {"text/latex", "latex"},
        {"application/json", "json"},  {"application/javascript", "javascript"},
    };
    static const char *const kept[] = {
        "image/gif", "text/plain; charset=utf-8",      "TEXT/HTML", "text/htm", "text", "png",
        "",          "application/vnd.plotly.v1+json",
    };

    for (size_t i = 0; i < ELEMENTSOF(renamed); i++) {
        ASSERT_STREQ(e2b_result_key(renamed[i][0]), renamed[i][1]);
    }
    for (size_t i = 0; i < ELEMENTSOF(kept); i++) {
        TAP_CHECK(e2b_result_key(kept[i]) == kept[i], "'%s' is its own key", kept[i]);
    }
}

int
main(void)
{
    RUN(ext_round_trip);
    RUN(ext_bounds);
    RUN(ext_context);
    RUN(ext_decode_refused);
    RUN(route);
    RUN(create);
    RUN(create_refused);
    RUN(create_env_vars);
    RUN(network);
    RUN(network_update);
    RUN(create_refused_members);
    RUN(timeout);
    RUN(list);
    RUN(list_filters);
    RUN(list_matches);
    RUN(path_map);
    RUN(start);
    RUN(start_refused);
    RUN(execute);
    RUN(result_key);
    return tap_done();
}
