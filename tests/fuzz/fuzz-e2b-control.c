/* Fuzz target: src/e2b/control.c. The input as every request it checks: as JSON, loaded as the
 * daemon loads bodies and once more with NUL allowed in strings, for the create, timeout,
 * process.Process/Start and /execute parsers; up to its first NUL as a string for the list
 * query, the control-plane route, the path mapping, the MIME key and the ext record. What a
 * parser accepts must hold what control.h promises, a refusal must carry a message and leave
 * *ret as it was, and every owned result is released:
 * - a decoded ext record is well-formed, encodes in no more bytes than it came in (so a record
 *   read from a session's ext fits one again) and decodes back to itself;
 * - a route's id is 1 to E2B_ID_MAX lowercase hex digits, and route and id spell the path again;
 * - a mapped path is relative, the end of the path it came from, and fits out exactly when the
 *   mapping's size allows it;
 * - a list's filters are at most E2B_FILTER_MAX and match the metadata they name. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "e2b/control.h"
#include "egress/rules.h"
#include "fuzz.h"
#include "store/schema.h"

#define HEX           "0123456789abcdef"
#define TIMEOUT_MAX_S 31536000u
#define ARGV_MAX      4096u

static bool
is_hex(const char *s, size_t len)
{
    return strlen(s) == len && strspn(s, HEX) == len;
}

/* ---- JSON ------------------------------------------------------------------------------------ */

/* The network options (parse: at a create, or updateNetwork's body): a refusal says why and
 * leaves *ret; a narrowing is one the session's parser takes (never wider than "nothing
 * narrowed" can be: it only has allow and deny). */
static void
check_network(json_t *body, int (*parse)(json_t *, json_t **, struct err *))
{
    json_t *sentinel = json_object(), *net = sentinel;
    struct egress_narrowing n;
    struct err e = {0};
    int r = parse(body, &net, &e);

    if (r < 0) {
        CHECK(r == -EINVAL && e.msg[0] != '\0' && net == sentinel);
    } else if (net != NULL) {
        CHECK(json_is_object(net) && json_object_size(net) <= 2);
        CHECK(egress_narrowing_from_json(net, "network", &n, &e) == 0);
        egress_narrowing_done(&n);
        json_decref(net);
    }
    json_decref(sentinel);
}

static void
check_create(json_t *body)
{
    static const char sentinel[] = "sentinel";
    struct e2b_create c = {.template_id = sentinel, .timeout_s = 12345};
    struct err e = {0};
    unsigned t = 0;
    int r = e2b_create_parse(body, &c, &e);

    if (r < 0) {
        CHECK(r == -EINVAL && e.code == -EINVAL && e.msg[0] != '\0');
        CHECK(c.template_id == sentinel && c.timeout_s == 12345 && c.metadata == NULL);
        return;
    }
    CHECK(r == 0 && c.template_id != NULL);
    CHECK(strlen(c.template_id) >= 1 && strlen(c.template_id) <= E2B_TEMPLATE_MAX);
    CHECK(strspn(c.template_id,
                 "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-:/") ==
          strlen(c.template_id));
    CHECK(c.timeout_s <= TIMEOUT_MAX_S);
    CHECK(c.metadata == NULL ||
          (json_is_object(c.metadata) && c.metadata == json_object_get(body, "metadata")));
    /* the timeout is the one e2b_timeout_parse() reads */
    CHECK(e2b_timeout_parse(body, false, &t, &e) == 0 && t == c.timeout_s);
}

static void
check_timeout(json_t *body)
{
    struct err e = {0};
    unsigned opt = 12345, req = 12345;
    int ro = e2b_timeout_parse(body, false, &opt, &e);
    int rr = e2b_timeout_parse(body, true, &req, &e);

    CHECK(ro == 0 || ro == -EINVAL);
    CHECK(rr == 0 || rr == -EINVAL);
    CHECK(ro == 0 ? opt <= TIMEOUT_MAX_S : opt == 12345);
    CHECK(rr == 0 ? req <= TIMEOUT_MAX_S : req == 12345);
    CHECK(rr < 0 || (ro == 0 && opt == req)); /* required only refuses more */
    CHECK(rr == 0 || e.msg[0] != '\0');
}

static void
check_envs(json_t *envs)
{
    const char *key;
    json_t *v;

    CHECK(json_is_object(envs) && json_object_size(envs) > 0);
    json_object_foreach (envs, key, v) {
        CHECK(key[0] != '\0' && strchr(key, '=') == NULL && json_is_string(v));
    }
}

static void
check_start(json_t *msg)
{
    json_t *sentinel = json_array();
    struct e2b_start st = {.argv = sentinel};
    struct err e = {0};
    char mapped[4097];
    size_t i;
    json_t *v;
    int r = e2b_start_parse(msg, &st, &e);

    CHECK(sentinel != NULL);
    if (r < 0) {
        CHECK(r == -EINVAL && e.msg[0] != '\0');
        CHECK(st.argv == sentinel && st.envs == NULL && st.cwd == NULL);
        json_decref(sentinel);
        return;
    }
    json_decref(sentinel);
    CHECK(r == 0 && json_is_array(st.argv) && st.argv->refcount == 1);
    CHECK(json_array_size(st.argv) >= 1 && json_array_size(st.argv) <= ARGV_MAX);
    json_array_foreach (st.argv, i, v) {
        /* a command line of C strings: none cut short at a NUL */
        CHECK(json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v));
    }
    CHECK(json_string_value(json_array_get(st.argv, 0))[0] != '\0');
    if (st.envs != NULL) {
        check_envs(st.envs);
    }
    if (st.cwd != NULL) {
        /* what the daemon does with it next */
        r = e2b_path_map(st.cwd, mapped, sizeof(mapped), &e);
        CHECK(r == 0 ? mapped[0] != '/' : r == -EINVAL);
    }
    json_decref(st.argv);
}

static void
check_execute(json_t *body)
{
    struct e2b_execute ex = {.code = "sentinel"};
    struct err e = {0};
    int r = e2b_execute_parse(body, &ex, &e);
    json_t *code;

    if (r < 0) {
        CHECK(r == -EINVAL && e.msg[0] != '\0' && strcmp(ex.code, "sentinel") == 0);
        return;
    }
    code = json_object_get(body, "code");
    CHECK(r == 0 && ex.code == json_string_value(code) && ex.code_len == json_string_length(code));
    CHECK(ex.context_id == NULL ||
          ex.context_id == json_string_value(json_object_get(body, "context_id")));
    CHECK(ex.context_id == NULL || !json_is_string(json_object_get(body, "language")));
}

static void
check_json(json_t *v)
{
    check_create(v);
    check_network(v, e2b_network_parse);
    check_network(v, e2b_network_update_parse);
    check_timeout(v);
    check_start(v);
    check_execute(v);
}

/* ---- strings --------------------------------------------------------------------------------- */

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

static void
check_ext(const char *s, size_t len)
{
    struct e2b_ext x, y;
    char *text;
    int r;

    memset(&x, 0x5a, sizeof(x));
    r = e2b_ext_decode(s, &x);
    CHECK(r == 0 || r == -ENOENT || r == -EPROTO);
    if (r < 0) {
        CHECK(x.n_contexts == 0x5a5a5a5au); /* untouched */
        return;
    }
    CHECK(strlen(x.template_id) >= 1 && strlen(x.template_id) <= E2B_TEMPLATE_MAX);
    CHECK(is_hex(x.envd_token, E2B_TOKEN_LEN) && is_hex(x.traffic_token, E2B_TOKEN_LEN));
    CHECK(x.n_contexts <= E2B_CONTEXTS_MAX);
    for (unsigned i = 0; i < x.n_contexts; i++) {
        CHECK(is_hex(x.contexts[i], E2B_CONTEXT_ID_LEN));
        CHECK(e2b_ext_context(&x, x.contexts[i]) >= 0);
        CHECK(strcmp(x.contexts[e2b_ext_context(&x, x.contexts[i])], x.contexts[i]) == 0);
    }
    CHECK(e2b_ext_context(&x, s) < 0 || is_hex(s, E2B_CONTEXT_ID_LEN));
    /* compact text is never longer than the text it came from */
    text = malloc(len + 1);
    CHECK(text != NULL);
    CHECK(e2b_ext_encode(&x, text, len + 1) == 0);
    CHECK(strlen(text) <= len);
    memset(&y, 0, sizeof(y));
    CHECK(e2b_ext_decode(text, &y) == 0 && ext_equal(&x, &y));
    free(text);
}

static void
check_route(const char *s)
{
    static const char *const suffix[] = {
        [E2B_ROUTE_SANDBOX] = "",         [E2B_ROUTE_TIMEOUT] = "/timeout",
        [E2B_ROUTE_CONNECT] = "/connect", [E2B_ROUTE_PAUSE] = "/pause",
        [E2B_ROUTE_NETWORK] = "/network",
    };
    char id[E2B_ID_MAX + 1], want[E2B_ID_MAX + 32];
    const char *p = strncmp(s, "v2/", 3) == 0 ? s + 3 : s;
    enum e2b_route r;
    size_t n;

    memset(id, 'X', sizeof(id));
    r = e2b_control_route(s, id);
    switch (r) {
    case E2B_ROUTE_SANDBOXES:
        CHECK(strcmp(p, "sandboxes") == 0);
        break;
    case E2B_ROUTE_SANDBOX:
    case E2B_ROUTE_TIMEOUT:
    case E2B_ROUTE_CONNECT:
    case E2B_ROUTE_PAUSE:
    case E2B_ROUTE_NETWORK:
        n = strnlen(id, sizeof(id));
        CHECK(n >= 1 && n <= E2B_ID_MAX && strspn(id, HEX) == n);
        CHECK(snprintf(want, sizeof(want), "sandboxes/%s%s", id, suffix[r]) > 0);
        CHECK(strcmp(p, want) == 0);
        break;
    case E2B_ROUTE__INVALID:
        break;
    default:
        CHECK(false);
    }
}

static void
check_path(const char *s, size_t small)
{
    char out[4097], cut[64];
    struct err e = {0};
    size_t n = strlen(s), m;
    int r = e2b_path_map(s, out, sizeof(out), &e), rc;

    if (r < 0) {
        CHECK(r == -EINVAL && e.msg[0] != '\0');
    } else {
        m = strlen(out);
        CHECK(out[0] != '/');
        CHECK(m <= n && strcmp(s + n - m, out) == 0);
        CHECK(s[0] == '/' || strcmp(out, s) == 0);
    }
    /* a smaller out: the same answer, when what it maps to fits */
    rc = e2b_path_map(s, cut, small, &e);
    CHECK(rc == ((r == 0 && strlen(out) < small) ? 0 : -EINVAL));
    CHECK(rc < 0 || strcmp(cut, out) == 0);
}

static void
check_list(const char *s)
{
    struct e2b_list l;
    struct err e = {0};
    json_t *md;
    bool want = true;
    int r;

    memset(&l, 0, sizeof(l));
    l.limit = 7;
    r = e2b_list_parse(s, &l, &e);
    if (r < 0) {
        CHECK(r == -EINVAL && e.msg[0] != '\0' && l.limit == 7 && l.n_filters == 0);
        return;
    }
    CHECK(l.limit >= 1 && l.limit <= E2B_LIST_MAX);
    CHECK(l.after[0] == '\0' || is_hex(l.after, E2B_TOKEN_LEN));
    CHECK(l.n_filters <= E2B_FILTER_MAX);
    /* the metadata the filters name passes them (unless a key asks for two values) */
    md = json_object();
    CHECK(md != NULL);
    for (size_t i = 0; i < l.n_filters; i++) {
        CHECK(l.keys[i] != NULL && l.values[i] != NULL);
        CHECK(json_object_set_new_nocheck(md, l.keys[i], json_string_nocheck(l.values[i])) == 0);
    }
    for (size_t i = 0; i < l.n_filters; i++) {
        want = want && strcmp(json_string_value(json_object_get(md, l.keys[i])), l.values[i]) == 0;
    }
    CHECK(e2b_list_matches(&l, md) == want);
    CHECK(e2b_list_matches(&l, NULL) == (l.n_filters == 0));
    json_decref(md);
    e2b_list_done(&l);
    CHECK(l.n_filters == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    const char *key;
    json_t *v;

    CHECK(s != NULL);
    memcpy(s, data, size);
    s[size] = '\0';

    /* as the daemon loads a body, and with NUL allowed in strings (a caller may) */
    v = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (v != NULL) {
        check_json(v);
        json_decref(v);
    }
    v = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (v != NULL) {
        check_json(v);
        json_decref(v);
    }

    check_ext(s, strlen(s));
    check_route(s);
    check_path(s, size > 0 ? data[0] % 64 : 0);
    check_list(s);
    key = e2b_result_key(s);
    CHECK(key != NULL && (key == s || strcmp(key, s) != 0));
    free(s);
    return 0;
}
