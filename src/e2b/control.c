/* The E2B SDK's requests, checked; the sandbox's record (see control.h). */
#include "control.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "util/macro.h"
#include "util/parse.h"

#define LIST_DEFAULT   100u
#define TIMEOUT_MAX_S  31536000u
#define START_ARGS_MAX 4096u
#define CODE_LANGUAGES "python"

static bool
is_hex(const char *s, size_t len)
{
    return s != NULL && strlen(s) == len && strspn(s, "0123456789abcdef") == len;
}

/* ---- the record ------------------------------------------------------------------------------ */

int
e2b_ext_encode(const struct e2b_ext *x, char *out, size_t n)
{
    json_t *ctx = OOM_CHECK(json_array()), *root;
    char *text;
    int r = 0;

    for (unsigned i = 0; i < x->n_contexts; i++) {
        (void)json_array_append_new(ctx, OOM_CHECK(json_string(x->contexts[i])));
    }
    root = OOM_CHECK(json_pack("{s:{s:s, s:s, s:s, s:o}}", "e2b", "t", x->template_id, "a",
                               x->envd_token, "b", x->traffic_token, "c", ctx));
    if (x->env[0] != '\0') {
        json_t *env = json_loads(x->env, 0, NULL);

        if (!json_is_object(env)) {
            json_decref(env);
            json_decref(root);
            return -EINVAL;
        }
        (void)json_object_set_new(json_object_get(root, "e2b"), "e", env);
    }
    text = OOM_CHECK(json_dumps(root, JSON_COMPACT));
    if (strlen(text) >= n) {
        r = -EMSGSIZE;
    } else {
        memcpy(out, text, strlen(text) + 1);
    }
    free(text);
    json_decref(root);
    return r;
}

int
e2b_ext_decode(const char *text, struct e2b_ext *ret)
{
    struct e2b_ext x = {0};
    const char *t = NULL, *a = NULL, *b = NULL;
    json_t *root, *ctx = NULL, *env, *v;
    size_t i;
    int r = -EPROTO;

    if (text == NULL || text[0] == '\0') {
        return -ENOENT;
    }
    root = json_loads(text, 0, NULL);
    if (json_object_get(root, "e2b") == NULL) {
        json_decref(root);
        return -ENOENT;
    }
    if (json_unpack(root, "{s:{s:s, s:s, s:s, s:o}}", "e2b", "t", &t, "a", &a, "b", &b, "c", &ctx) <
            0 ||
        strlen(t) == 0 || strlen(t) > E2B_TEMPLATE_MAX || !is_hex(a, E2B_TOKEN_LEN) ||
        !is_hex(b, E2B_TOKEN_LEN) || !json_is_array(ctx) ||
        json_array_size(ctx) > E2B_CONTEXTS_MAX) {
        goto out;
    }
    json_array_foreach (ctx, i, v) {
        if (!is_hex(json_string_value(v), E2B_CONTEXT_ID_LEN)) {
            goto out;
        }
        memcpy(x.contexts[i], json_string_value(v), E2B_CONTEXT_ID_LEN + 1);
    }
    x.n_contexts = (unsigned)json_array_size(ctx);
    env = json_object_get(json_object_get(root, "e2b"), "e");
    if (env != NULL && e2b_env_text(env, x.env, sizeof(x.env)) < 0) {
        goto out;
    }
    memcpy(x.template_id, t, strlen(t) + 1);
    memcpy(x.envd_token, a, E2B_TOKEN_LEN + 1);
    memcpy(x.traffic_token, b, E2B_TOKEN_LEN + 1);
    *ret = x;
    r = 0;
out:
    json_decref(root);
    return r;
}

int
e2b_env_text(json_t *env, char *out, size_t n)
{
    const char *key;
    json_t *v;
    char *text;
    int r = 0;

    if (!json_is_object(env)) {
        return -EINVAL;
    }
    json_object_foreach (env, key, v) {
        if (key[0] == '\0' || strchr(key, '=') != NULL || !json_is_string(v) ||
            memchr(json_string_value(v), '\0', json_string_length(v)) != NULL) {
            return -EINVAL;
        }
    }
    text = OOM_CHECK(json_dumps(env, JSON_COMPACT | JSON_SORT_KEYS));
    if (strlen(text) >= n) {
        r = -EMSGSIZE;
    } else {
        memcpy(out, text, strlen(text) + 1);
    }
    free(text);
    return r;
}

int
e2b_ext_context(const struct e2b_ext *x, const char *id)
{
    for (unsigned i = 0; id != NULL && i < x->n_contexts; i++) {
        if (strcmp(x->contexts[i], id) == 0) {
            return (int)i;
        }
    }
    return -1;
}

/* ---- the control plane ----------------------------------------------------------------------- */

enum e2b_route
e2b_control_route(const char *path, char id[E2B_ID_MAX + 1])
{
    static const char pre[] = "sandboxes";
    size_t n;

    if (strncmp(path, "v2/", 3) == 0) {
        path += 3;
    }
    if (strncmp(path, pre, sizeof(pre) - 1) != 0) {
        return E2B_ROUTE__INVALID;
    }
    path += sizeof(pre) - 1;
    if (*path == '\0') {
        return E2B_ROUTE_SANDBOXES;
    }
    if (*path++ != '/') {
        return E2B_ROUTE__INVALID;
    }
    n = strspn(path, "0123456789abcdef");
    if (n == 0 || n > E2B_ID_MAX || (path[n] != '\0' && path[n] != '/')) {
        return E2B_ROUTE__INVALID;
    }
    memcpy(id, path, n);
    id[n] = '\0';
    path += n;
    if (*path == '\0') {
        return E2B_ROUTE_SANDBOX;
    }
    if (strcmp(path, "/timeout") == 0) {
        return E2B_ROUTE_TIMEOUT;
    }
    if (strcmp(path, "/pause") == 0) {
        return E2B_ROUTE_PAUSE;
    }
    if (strcmp(path, "/network") == 0) {
        return E2B_ROUTE_NETWORK;
    }
    return strcmp(path, "/connect") == 0 ? E2B_ROUTE_CONNECT : E2B_ROUTE__INVALID;
}

static bool
template_ok(const char *t)
{
    size_t n = strlen(t);

    return n > 0 && n <= E2B_TEMPLATE_MAX &&
           strspn(t, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-:/") == n;
}

/* A member that asks for what sandboxes here do not have is refused, saying so; false and
 * null (what the SDKs send by default) are fine. */
static int
refuse_member(json_t *body, const char *name, const char *why, struct err *reterr)
{
    json_t *v = json_object_get(body, name);

    if (v == NULL || json_is_null(v) || json_is_false(v) ||
        (json_is_object(v) && json_object_size(v) == 0) ||
        (json_is_array(v) && json_array_size(v) == 0) ||
        /* {"enabled": false} (autoResume, sent so by default since e2b 2.39) */
        (json_is_object(v) && json_object_size(v) == 1 &&
         json_is_false(json_object_get(v, "enabled")))) {
        return 0;
    }
    return err_set(reterr, -EINVAL, "'%s' is not supported here: %s", name, why);
}

int
e2b_create_parse(json_t *body, struct e2b_create *ret, struct err *reterr)
{
    static const struct {
        const char *name, *why;
    } refused[] = {
        {"autoPause", "a sandbox is not paused at its timeout here, it ends (pause() it before)"},
        {"autoResume", "a paused sandbox here resumes on any call: nothing to enable"},
        {"mcp", "MCP is served by the daemon itself at /mcp"},
        {"volumeMounts", "volumes are not mounted into sandboxes"},
    };
    struct e2b_create c = {.template_id = "base"};
    json_t *v;
    int r;

    if (!json_is_object(body)) {
        return err_set(reterr, -EINVAL, "the body must be a JSON object");
    }
    for (size_t i = 0; i < ELEMENTSOF(refused); i++) {
        r = refuse_member(body, refused[i].name, refused[i].why, reterr);
        if (r < 0) {
            return r;
        }
    }
    v = json_object_get(body, "templateID");
    if (v != NULL && (!json_is_string(v) || !template_ok(json_string_value(v)))) {
        return err_set(reterr, -EINVAL,
                       "'templateID' must be a string of 1 to %u characters of "
                       "[A-Za-z0-9._:/-]",
                       E2B_TEMPLATE_MAX);
    }
    if (v != NULL) {
        c.template_id = json_string_value(v);
    }
    r = e2b_timeout_parse(body, false, &c.timeout_s, reterr);
    if (r < 0) {
        return r;
    }
    v = json_object_get(body, "metadata");
    if (v != NULL && !json_is_null(v) && !json_is_object(v)) {
        return err_set(reterr, -EINVAL, "'metadata' must be an object of strings");
    }
    c.metadata = json_is_object(v) ? v : NULL;
    v = json_object_get(body, "envVars");
    if (v != NULL && !json_is_null(v)) {
        char text[E2B_ENV_MAX + 1];

        r = e2b_env_text(v, text, sizeof(text));
        if (r < 0) {
            return err_set(reterr, -EINVAL,
                           r == -EMSGSIZE ? "'envVars' over %u bytes of JSON are not "
                                            "supported here"
                                          : "'envVars' must map names (without '=') to "
                                            "strings",
                           E2B_ENV_MAX);
        }
        c.env_vars = json_object_size(v) > 0 ? v : NULL;
    }
    *ret = c;
    return 0;
}

int
e2b_timeout_parse(json_t *body, bool required, unsigned *ret, struct err *reterr)
{
    json_t *v = json_is_object(body) ? json_object_get(body, "timeout") : NULL;

    if (v == NULL || json_is_null(v)) {
        if (required) {
            return err_set(reterr, -EINVAL, "'timeout' (seconds) is required");
        }
        *ret = 0;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > (json_int_t)TIMEOUT_MAX_S) {
        return err_set(reterr, -EINVAL, "'timeout' must be an integer of 0 to %u seconds",
                       TIMEOUT_MAX_S);
    }
    *ret = (unsigned)json_integer_value(v);
    return 0;
}

void
e2b_list_done(struct e2b_list *l)
{
    for (size_t i = 0; i < l->n_filters; i++) {
        free(l->keys[i]);
        free(l->values[i]);
    }
    l->n_filters = 0;
}

/* metadata=: itself a query string, URL-encoded once more, of keys and values each
 * percent-encoded first (the SDKs: encodeURIComponent, urllib.parse.quote). Decoded as E2B's API
 * does: the list, then each key and value (libevent decodes a value, never a key). */
static int
list_filters(const char *text, struct e2b_list *l, struct err *reterr)
{
    char *list = OOM_CHECK(evhttp_uridecode(text, 1, NULL));
    struct evkeyvalq q;
    struct evkeyval *kv;
    int r = 0;

    TAILQ_INIT(&q);
    if (evhttp_parse_query_str(list, &q) < 0) {
        evhttp_clear_headers(&q);
        free(list);
        return err_set(reterr, -EINVAL, "'metadata' must be a URL-encoded key=value list");
    }
    TAILQ_FOREACH (kv, &q, next) {
        if (l->n_filters == E2B_FILTER_MAX) {
            r = err_set(reterr, -EINVAL, "'metadata' filters on at most %u keys", E2B_FILTER_MAX);
            break;
        }
        l->keys[l->n_filters] = OOM_CHECK(evhttp_uridecode(kv->key, 1, NULL));
        l->values[l->n_filters++] = xstrdup(kv->value);
    }
    evhttp_clear_headers(&q);
    free(list);
    return r;
}

static int
list_param(struct e2b_list *l, const char *key, const char *value, struct err *reterr)
{
    uint64_t n;

    if (strcmp(key, "limit") == 0) {
        if (parse_u64(value, &n) < 0 || n == 0 || n > E2B_LIST_MAX) {
            return err_set(reterr, -EINVAL, "'limit' must be 1 to %u", E2B_LIST_MAX);
        }
        l->limit = (unsigned)n;
    } else if (strcmp(key, "nextToken") == 0) {
        if (value[0] != '\0' && !is_hex(value, E2B_TOKEN_LEN)) {
            return err_set(reterr, -EINVAL, "'nextToken' is not one this server gave");
        }
        memcpy(l->after, value, strlen(value) + 1);
    } else if (strcmp(key, "metadata") == 0) {
        return list_filters(value, l, reterr);
    } else if (strcmp(key, "state") == 0) {
        /* "running", "paused" or both, as repeated parameters or a comma-separated list */
        l->running = l->running || strstr(value, "running") != NULL;
        l->paused = l->paused || strstr(value, "paused") != NULL;
    }
    return 0;
}

int
e2b_list_parse(const char *query, struct e2b_list *ret, struct err *reterr)
{
    struct e2b_list l = {.limit = LIST_DEFAULT};
    struct evkeyvalq q;
    struct evkeyval *kv;
    bool any_state = false;
    int r = 0;

    TAILQ_INIT(&q);
    if (query != NULL && evhttp_parse_query_str(query, &q) < 0) {
        evhttp_clear_headers(&q);
        return err_set(reterr, -EINVAL, "the query string is malformed");
    }
    TAILQ_FOREACH (kv, &q, next) {
        any_state = any_state || strcmp(kv->key, "state") == 0;
        r = list_param(&l, kv->key, kv->value, reterr);
        if (r < 0) {
            break;
        }
    }
    evhttp_clear_headers(&q);
    if (r < 0) {
        e2b_list_done(&l);
        return r;
    }
    l.running = l.running || !any_state;
    l.paused = l.paused || !any_state;
    *ret = l;
    return 0;
}

bool
e2b_list_matches(const struct e2b_list *l, json_t *metadata)
{
    for (size_t i = 0; i < l->n_filters; i++) {
        const char *v = json_string_value(json_object_get(metadata, l->keys[i]));

        if (v == NULL || strcmp(v, l->values[i]) != 0) {
            return false;
        }
    }
    return true;
}

/* ---- envd ------------------------------------------------------------------------------------ */

/* The rest of path after root ("" or starting with '/'), or NULL when path is not root or
 * under it. */
static const char *
under(const char *path, const char *root)
{
    size_t n = strlen(root);

    if (strncmp(path, root, n) != 0 || (path[n] != '\0' && path[n] != '/')) {
        return NULL;
    }
    return path + n;
}

int
e2b_path_map(const char *path, char *out, size_t n, struct err *reterr)
{
    const char *rest = path;

    if (path[0] == '/') {
        rest = under(path, E2B_HOME);
        if (rest == NULL) {
            rest = under(path, E2B_WORKSPACE);
        }
        if (rest == NULL) {
            return err_set(reterr, -EINVAL,
                           "'%.200s' is outside the workspace: only " E2B_HOME " and " E2B_WORKSPACE
                           " (the same directory) are writable here",
                           path);
        }
        rest += strspn(rest, "/"); /* "/home/user//x" is x too */
    }
    if (strlen(rest) >= n) {
        return err_set(reterr, -EINVAL, "the path is too long");
    }
    memcpy(out, rest, strlen(rest) + 1);
    return 0;
}

static bool
strings_object(json_t *o)
{
    const char *key;
    json_t *v;

    json_object_foreach (o, key, v) {
        if (!json_is_string(v) || key[0] == '\0' || strchr(key, '=') != NULL) {
            return false;
        }
    }
    return true;
}

int
e2b_start_parse(json_t *msg, struct e2b_start *ret, struct err *reterr)
{
    json_t *p = json_object_get(msg, "process"), *args, *envs, *cwd, *pty, *v, *argv;
    const char *cmd = json_string_value(json_object_get(p, "cmd"));
    size_t i;

    if (!json_is_object(p) || cmd == NULL || cmd[0] == '\0') {
        return err_set(reterr, -EINVAL, "'process.cmd' must be a non-empty string");
    }
    args = json_object_get(p, "args");
    envs = json_object_get(p, "envs");
    cwd = json_object_get(p, "cwd");
    pty = json_object_get(msg, "pty");
    if (args != NULL && (!json_is_array(args) || json_array_size(args) >= START_ARGS_MAX)) {
        return err_set(reterr, -EINVAL, "'process.args' must be an array of strings");
    }
    if (envs != NULL && !json_is_null(envs) && (!json_is_object(envs) || !strings_object(envs))) {
        return err_set(reterr, -EINVAL, "'process.envs' must map names to strings");
    }
    if (cwd != NULL && !json_is_null(cwd) && !json_is_string(cwd)) {
        return err_set(reterr, -EINVAL, "'process.cwd' must be a string");
    }
    if (pty != NULL && !json_is_null(pty)) {
        return err_set(reterr, -EINVAL, "a PTY is not supported here: run the command without one");
    }
    argv = OOM_CHECK(json_array());
    (void)json_array_append_new(argv, OOM_CHECK(json_string(cmd)));
    json_array_foreach (args, i, v) {
        if (!json_is_string(v) || memchr(json_string_value(v), '\0', json_string_length(v))) {
            json_decref(argv);
            return err_set(reterr, -EINVAL, "'process.args' must be an array of strings");
        }
        (void)json_array_append(argv, v);
    }
    ret->argv = argv;
    ret->envs = json_is_object(envs) && json_object_size(envs) > 0 ? envs : NULL;
    ret->cwd = json_string_value(cwd);
    return 0;
}

/* ---- the code interpreter -------------------------------------------------------------------- */

int
e2b_execute_parse(json_t *body, struct e2b_execute *ret, struct err *reterr)
{
    json_t *code = json_object_get(body, "code"), *ctx = json_object_get(body, "context_id");
    json_t *lang = json_object_get(body, "language"), *env = json_object_get(body, "env_vars");

    if (!json_is_string(code)) {
        return err_set(reterr, -EINVAL, "'code' must be a string");
    }
    if (ctx != NULL && !json_is_null(ctx) && !json_is_string(ctx)) {
        return err_set(reterr, -EINVAL, "'context_id' must be a string");
    }
    if (lang != NULL && !json_is_null(lang) &&
        (!json_is_string(lang) || strcmp(json_string_value(lang), CODE_LANGUAGES) != 0)) {
        return err_set(reterr, -EINVAL, "only 'python' code runs here");
    }
    if (json_is_string(ctx) && json_is_string(lang)) {
        return err_set(reterr, -EINVAL, "give 'context_id' or 'language', not both");
    }
    if (env != NULL && !json_is_null(env) && !(json_is_object(env) && json_object_size(env) == 0)) {
        return err_set(reterr, -EINVAL,
                       "'env_vars' is not supported here: set os.environ in the code");
    }
    ret->code = json_string_value(code);
    ret->code_len = json_string_length(code);
    ret->context_id = json_string_value(ctx);
    return 0;
}

const char *
e2b_result_key(const char *mime)
{
    static const char *const keys[][2] = {
        {"text/plain", "text"},        {"text/html", "html"},
        {"text/markdown", "markdown"}, {"image/svg+xml", "svg"},
        {"image/png", "png"},          {"image/jpeg", "jpeg"},
        {"application/pdf", "pdf"},    {"text/latex", "latex"},
        {"application/json", "json"},  {"application/javascript", "javascript"},
    };

    for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
        if (strcmp(keys[i][0], mime) == 0) {
            return keys[i][1];
        }
    }
    return mime;
}
