/* Typed engine operations; see api.h.
 *
 * Each operation allocates a small `struct op` that the docker_call owns (free_userdata), so a
 * cancelled call frees it too. The completion parses the body (bounded by the client) and maps
 * HTTP statuses to negative errno in one place, docker_status_to_errno(), with the few
 * per-endpoint exceptions spelled out below (start 304, kill 409, remove 404/409). */
#include "api.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "docker/json.h"
#include "docker/quirks.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/parse.h"

#define API_MIN 1041 /* Debian 12's Engine 20.10 and Podman 4.3 */
#define API_MAX 1044 /* newest layout we rely on; never below API_MIN */

enum op_kind {
    OP_JSON,  /* 2xx with a JSON body: hand it over */
    OP_EMPTY, /* 2xx, body ignored */
    OP_PING,
    OP_CREATE,
    OP_START,
    OP_KILL,
    OP_REMOVE,
    OP_INSPECT, /* OP_JSON, rewritten into Docker's shape (docker_quirks_normalize_inspect) */
    OP_REFUSED, /* never sent: the engine cannot do what was asked (why) */
};

struct op {
    enum op_kind kind;
    struct docker_client *client;
    docker_result_cb *cb;
    docker_event_cb *on_event;
    void *userdata;
    char why[192]; /* OP_REFUSED */
};

bool
docker_valid_id(const char *id)
{
    /* A leading '-' or '.' could read as an option or a relative path segment. */
    return str_is_name(id, 128) && id[0] != '.' && id[0] != '-';
}

static void
op_deliver(struct op *op, int r, json_t *result, const struct err *e)
{
    if (op->cb != NULL) {
        op->cb(r, result, e, op->userdata);
    }
}

static int
negotiate(struct docker_client *c, struct err *reterr)
{
    const char *v = docker_client_peer_api_version(c);
    unsigned ver;

    if (parse_api_version(v, strlen(v), &ver) < 0) {
        return err_set(reterr, -EPROTO, "engine answered /_ping without a usable Api-Version");
    }
    if (ver < API_MIN) {
        return err_set(reterr, -EPROTONOSUPPORT,
                       "engine speaks API %u.%u; sandpool needs at least %u.%u", ver / 1000,
                       ver % 1000, API_MIN / 1000, API_MIN % 1000);
    }
    docker_client_set_api_version(c, MIN(ver, (unsigned)API_MAX));
    return 0;
}

/* Create answered 201: refuse the container if the engine silently dropped a limit. */
static int
check_create(json_t *root, struct err *reterr)
{
    json_t *warnings = json_object_get(root, "Warnings");
    const char *id = json_string_value(json_object_get(root, "Id"));

    if (id == NULL || !docker_valid_id(id)) {
        return err_set(reterr, -EPROTO, "engine answered create without a valid Id");
    }
    if (json_is_array(warnings) && json_array_size(warnings) > 0) {
        const char *w = json_string_value(json_array_get(warnings, 0));

        return err_set(reterr, -EOPNOTSUPP, "engine dropped a limit: %s",
                       w ? w : "(unreadable warning)");
    }
    return 0;
}

static void
on_cleanup_done(int r, json_t *result, const struct err *e, void *userdata)
{
    /* Best effort: the periodic reconcile removes labelled leftovers if this failed. */
}

static void
on_op_done(int r, long status, const struct buf *body, void *userdata)
{
    struct op *op = userdata;
    struct err e = {0};
    json_t *root = NULL;

    if (op->kind == OP_REFUSED) {
        (void)err_set(&e, r, "%s", op->why);
        op_deliver(op, r, NULL, &e);
        return;
    }
    if (r < 0) {
        (void)err_set(&e, r, "engine request failed: %s",
                      r == -ETIMEDOUT  ? "deadline passed"
                      : r == -EINVAL   ? "invalid identifier or argument"
                      : r == -EMSGSIZE ? "answer too large"
                                       : strerror(-r));
        op_deliver(op, r, NULL, &e);
        return;
    }
    r = docker_status_to_errno(status, body->buf, body->len, &e);
    if ((op->kind == OP_START && r == -EALREADY) ||
        (op->kind == OP_REMOVE && (r == -ENOENT || r == -EBUSY))) {
        r = 0; /* already started; or gone, or being removed by someone else */
    } else if (op->kind == OP_KILL && r == -EBUSY) {
        r = err_set(&e, -ESRCH, "container is not running");
    } else if (op->kind == OP_PING && r == 0) {
        r = negotiate(op->client, &e);
    }
    if (r < 0) {
        op_deliver(op, r, NULL, &e);
        return;
    }
    if (op->kind == OP_JSON || op->kind == OP_CREATE || op->kind == OP_INSPECT) {
        r = docker_json_parse(body->buf, body->len, &root, &e);
        if (r == 0 && op->kind == OP_INSPECT) {
            docker_quirks_normalize_inspect(docker_client_quirks(op->client), root);
        }
        if (r == 0 && op->kind == OP_CREATE) {
            r = check_create(root, &e);
            if (r == -EOPNOTSUPP) {
                const char *id = json_string_value(json_object_get(root, "Id"));

                (void)docker_container_remove(op->client, id, on_cleanup_done, NULL);
            }
        }
    }
    op_deliver(op, r, r == 0 ? root : NULL, r < 0 ? &e : NULL);
    json_decref(root);
}

static struct docker_call *
op_start(struct docker_client *c, enum op_kind kind, struct docker_request *req,
         docker_result_cb *cb, void *userdata)
{
    struct op *op = xcalloc(1, sizeof(*op));

    op->kind = kind;
    op->client = c;
    op->cb = cb;
    op->userdata = userdata;
    req->free_userdata = free;
    return docker_client_request(c, req, on_op_done, op);
}

/* Bad arguments still complete asynchronously, keeping the single-completion contract. */
static struct docker_call *
op_invalid(struct docker_client *c, docker_result_cb *cb, void *userdata)
{
    struct docker_request req = {.method = "GET", .path = "/", .fail = -EINVAL};

    return op_start(c, OP_EMPTY, &req, cb, userdata);
}

/* Something the engine cannot do: completes asynchronously with r and why, sending nothing. */
static struct docker_call *
op_refused(struct docker_client *c, int r, const char *why, docker_result_cb *cb, void *userdata)
{
    struct docker_request req = {.method = "GET", .path = "/", .fail = r, .free_userdata = free};
    struct op *op = xcalloc(1, sizeof(*op));

    op->kind = OP_REFUSED;
    op->client = c;
    op->cb = cb;
    op->userdata = userdata;
    (void)snprintf(op->why, sizeof(op->why), "%s", why);
    return docker_client_request(c, &req, on_op_done, op);
}

struct docker_call *
docker_ping(struct docker_client *c, docker_result_cb *cb, void *userdata)
{
    struct docker_request req = {.method = "GET", .path = "/_ping", .unversioned = true};

    return op_start(c, OP_PING, &req, cb, userdata);
}

struct docker_call *
docker_info(struct docker_client *c, docker_result_cb *cb, void *userdata)
{
    struct docker_request req = {.method = "GET", .path = "/info"};

    return op_start(c, OP_JSON, &req, cb, userdata);
}

/* Builds PREFIX ID SUFFIX [ARG] into out; false when id is unusable or it does not fit. */
static bool
id_path(char *out, size_t n, const char *prefix, const char *id, const char *suffix,
        const char *arg)
{
    if (id == NULL || !docker_valid_id(id)) {
        return false;
    }
    return snprintf(out, n, "%s%s%s%s", prefix, id, suffix, arg ? arg : "") < (int)n;
}

struct docker_call *
docker_container_create(struct docker_client *c, const char *name, json_t *body,
                        docker_result_cb *cb, void *userdata)
{
    char path[256];
    char *text;
    struct docker_call *call;
    struct err e = {0};
    json_t *adapted;

    if (!id_path(path, sizeof(path), "/containers/create?name=", name, "", NULL)) {
        return op_invalid(c, cb, userdata);
    }
    adapted = OOM_CHECK(json_deep_copy(body));
    if (docker_quirks_adapt_create(docker_client_quirks(c), adapted, &e) < 0) {
        json_decref(adapted);
        return op_refused(c, -EOPNOTSUPP, err_msg(&e), cb, userdata);
    }
    text = OOM_CHECK(json_dumps(adapted, JSON_COMPACT));
    json_decref(adapted);
    struct docker_request req = {
        .method = "POST", .path = path, .body = text, .body_len = strlen(text)};

    call = op_start(c, OP_CREATE, &req, cb, userdata);
    free(text);
    return call;
}

struct docker_call *
docker_container_start(struct docker_client *c, const char *id, docker_result_cb *cb,
                       void *userdata)
{
    char path[256];
    struct docker_request req = {.method = "POST", .path = path};

    if (!id_path(path, sizeof(path), "/containers/", id, "/start", NULL)) {
        return op_invalid(c, cb, userdata);
    }
    return op_start(c, OP_START, &req, cb, userdata);
}

struct docker_call *
docker_container_kill(struct docker_client *c, const char *id, const char *signal,
                      docker_result_cb *cb, void *userdata)
{
    char path[256];
    struct docker_request req = {.method = "POST", .path = path};

    if (!docker_valid_id(signal) ||
        !id_path(path, sizeof(path), "/containers/", id, "/kill?signal=", signal)) {
        return op_invalid(c, cb, userdata);
    }
    return op_start(c, OP_KILL, &req, cb, userdata);
}

struct docker_call *
docker_container_freeze(struct docker_client *c, const char *id, bool freeze, docker_result_cb *cb,
                        void *userdata)
{
    char path[256];
    struct docker_request req = {.method = "POST", .path = path};

    if (!id_path(path, sizeof(path), "/containers/", id, freeze ? "/pause" : "/unpause", NULL)) {
        return op_invalid(c, cb, userdata);
    }
    return op_start(c, OP_EMPTY, &req, cb, userdata);
}

struct docker_call *
docker_container_remove(struct docker_client *c, const char *id, docker_result_cb *cb,
                        void *userdata)
{
    char path[256];
    struct docker_request req = {.method = "DELETE", .path = path};

    if (!id_path(path, sizeof(path), "/containers/", id, "?force=1&v=1", NULL)) {
        return op_invalid(c, cb, userdata);
    }
    return op_start(c, OP_REMOVE, &req, cb, userdata);
}

struct docker_call *
docker_container_inspect(struct docker_client *c, const char *id, docker_result_cb *cb,
                         void *userdata)
{
    char path[256];
    struct docker_request req = {.method = "GET", .path = path};

    if (!id_path(path, sizeof(path), "/containers/", id, "/json", NULL)) {
        return op_invalid(c, cb, userdata);
    }
    return op_start(c, OP_INSPECT, &req, cb, userdata);
}

/* Appends ?filters=<urlencoded JSON> built from a label list (and an optional type). */
static int
filters_query(struct buf *out, const char *type, const char *const *labels)
{
    json_t *f = OOM_CHECK(json_object());
    json_t *arr = OOM_CHECK(json_array());
    char *text, *esc;
    int r;

    for (const char *const *l = labels; l != NULL && *l != NULL; l++) {
        (void)json_array_append_new(arr, OOM_CHECK(json_string(*l)));
    }
    (void)json_object_set_new(f, "label", arr);
    if (type != NULL) {
        (void)json_object_set_new(f, "type", OOM_CHECK(json_pack("[s]", type)));
    }
    text = OOM_CHECK(json_dumps(f, JSON_COMPACT));
    esc = OOM_CHECK(curl_easy_escape(NULL, text, 0));
    r = buf_printf(out, "filters=%s", esc);
    curl_free(esc);
    free(text);
    json_decref(f);
    return r;
}

struct docker_call *
docker_container_list(struct docker_client *c, const char *const *labels, docker_result_cb *cb,
                      void *userdata)
{
    struct buf path = BUF_INIT(2048);
    struct docker_call *call;

    if (buf_puts(&path, "/containers/json?all=1&") < 0 || filters_query(&path, NULL, labels) < 0) {
        buf_done(&path);
        return op_invalid(c, cb, userdata);
    }
    struct docker_request req = {.method = "GET", .path = path.buf, .max_response = 64u << 20};

    call = op_start(c, OP_JSON, &req, cb, userdata);
    buf_done(&path);
    return call;
}

struct docker_call *
docker_container_wait(struct docker_client *c, const char *id, const char *condition,
                      docker_result_cb *cb, void *userdata)
{
    char path[256];
    struct docker_request req = {.method = "POST", .path = path, .timeout_ms = DOCKER_NO_TIMEOUT};

    if (!docker_valid_id(condition) ||
        !id_path(path, sizeof(path), "/containers/", id, "/wait?condition=", condition)) {
        return op_invalid(c, cb, userdata);
    }
    return op_start(c, OP_JSON, &req, cb, userdata);
}

static json_t *
strv_to_json(const char *const *v)
{
    json_t *a = OOM_CHECK(json_array());

    for (; v != NULL && *v != NULL; v++) {
        (void)json_array_append_new(a, OOM_CHECK(json_string(*v)));
    }
    return a;
}

struct docker_call *
docker_exec_create(struct docker_client *c, const char *id, const struct docker_exec_spec *spec,
                   docker_result_cb *cb, void *userdata)
{
    char path[256];
    struct docker_call *call;
    json_t *body;
    char *text;

    if (spec->argv == NULL || spec->argv[0] == NULL ||
        !id_path(path, sizeof(path), "/containers/", id, "/exec", NULL)) {
        return op_invalid(c, cb, userdata);
    }
    body = OOM_CHECK(json_pack("{s:b, s:b, s:b, s:b, s:b, s:o}", "AttachStdin", spec->attach_stdin,
                               "AttachStdout", 1, "AttachStderr", 1, "Tty", 0, "Privileged", 0,
                               "Cmd", strv_to_json(spec->argv)));
    if (spec->env != NULL) {
        (void)json_object_set_new(body, "Env", strv_to_json(spec->env));
    }
    if (spec->user != NULL) {
        (void)json_object_set_new(body, "User", OOM_CHECK(json_string(spec->user)));
    }
    if (spec->workdir != NULL) {
        (void)json_object_set_new(body, "WorkingDir", OOM_CHECK(json_string(spec->workdir)));
    }
    text = OOM_CHECK(json_dumps(body, JSON_COMPACT));
    json_decref(body);
    struct docker_request req = {
        .method = "POST", .path = path, .body = text, .body_len = strlen(text)};

    call = op_start(c, OP_JSON, &req, cb, userdata);
    free(text);
    return call;
}

struct docker_call *
docker_exec_inspect(struct docker_client *c, const char *exec_id, docker_result_cb *cb,
                    void *userdata)
{
    char path[256];
    struct docker_request req = {.method = "GET", .path = path};

    if (!id_path(path, sizeof(path), "/exec/", exec_id, "/json", NULL)) {
        return op_invalid(c, cb, userdata);
    }
    return op_start(c, OP_JSON, &req, cb, userdata);
}

static void
on_event_line(json_t *event, void *userdata)
{
    struct op *op = userdata;

    docker_quirks_normalize_event(docker_client_quirks(op->client), event);
    op->on_event(event, op->userdata);
}

static int
on_events_data(struct buf *data, void *userdata)
{
    return docker_json_split_lines(data, DOCKER_EVENT_MAX_LINE, on_event_line, userdata);
}

struct docker_call *
docker_events(struct docker_client *c, const char *label, docker_event_cb *on_event,
              docker_result_cb *cb, void *userdata)
{
    const char *labels[] = {label, NULL};
    struct buf path = BUF_INIT(2048);
    struct docker_call *call;
    struct op *op;

    if (buf_puts(&path, "/events?") < 0 || filters_query(&path, "container", labels) < 0) {
        buf_done(&path);
        return op_invalid(c, cb, userdata);
    }
    struct docker_request req = {
        .method = "GET",
        .path = path.buf,
        .timeout_ms = DOCKER_NO_TIMEOUT,
        .max_response = (size_t)4 * DOCKER_EVENT_MAX_LINE,
        .on_data = on_events_data,
        .free_userdata = free,
    };
    op = xcalloc(1, sizeof(*op));
    op->kind = OP_EMPTY;
    op->client = c;
    op->cb = cb;
    op->on_event = on_event;
    op->userdata = userdata;
    call = docker_client_request(c, &req, on_op_done, op);
    buf_done(&path);
    return call;
}
