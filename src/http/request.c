/* Request validation for the HTTP API: the bytes a client sends, checked before any of them reach
 * a session. Pure code: no evhttp request, no event_base, no logging. Every function returns 0
 * or a negative errno with a message that is safe to show the client (it names fields, never
 * echoes values beyond a short key), and the handlers reply with exactly that errno and message
 * (sessions.c, files.c). Keeping the checks here is what lets tests/fuzz/fuzz-api-request.c reach
 * them without an HTTP request.
 *
 * Invariants the fuzz target asserts: an accepted execute body has exactly one of code and argv;
 * an argv is a non-empty array of at most 4096 NUL-free strings; a timeout is 0 (not given) or
 * 1..31536000; accepted metadata is an object of strings whose text is at most 4 KiB; an accepted
 * file path is UTF-8, relative, without empty, "." or ".." segments, and normalizes to itself.
 * A message may quote a key cut mid-character ("%.64s"): http_reply_error() makes it valid UTF-8.
 * Out-params are written only on success, and what they borrow belongs to the parsed body. */
#include <errno.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "egress/rules.h"
#include "files/files.h"
#include "http/http-internal.h"
#include "session/session.h"
#include "store/schema.h"
#include "util/macro.h"
#include "util/utf8.h"

#define METADATA_MAX_BYTES 4096
#define METADATA_MAX_KEYS  32
#define ARGV_MAX           4096
#define UINT_FIELD_MAX     31536000 /* a year, in seconds */

int
http_request_json(const char *data, size_t len, bool allow_empty, json_t **ret, struct err *reterr)
{
    json_error_t jerr;
    json_t *root;

    if (len == 0 && allow_empty) {
        *ret = OOM_CHECK(json_object());
        return 0;
    }
    if (len == 0) {
        return err_set(reterr, -EINVAL, "a JSON object body is required");
    }
    root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        return err_set(reterr, -EINVAL, "the body is not valid JSON: %s (line %d column %d)",
                       jerr.text, jerr.line, jerr.column);
    }
    if (!json_is_object(root)) {
        json_decref(root);
        return err_set(reterr, -EINVAL, "the body must be a JSON object");
    }
    *ret = root;
    return 0;
}

/* Every member of body is one of allowed (NULL-terminated). */
static int
reject_unknown(json_t *body, const char *const *allowed, struct err *reterr)
{
    const char *key;
    json_t *v;

    json_object_foreach (body, key, v) {
        bool ok = false;

        for (const char *const *k = allowed; *k != NULL; k++) {
            ok = ok || strcmp(*k, key) == 0;
        }
        if (!ok) {
            return err_set(reterr, -EINVAL, "unknown field '%.64s'", key);
        }
    }
    return 0;
}

/* An optional positive integer member: *ret is left alone when it is absent or null. */
static int
get_uint(json_t *body, const char *key, unsigned *ret, struct err *reterr)
{
    json_t *v = json_object_get(body, key);

    if (v == NULL || json_is_null(v)) {
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 ||
        json_integer_value(v) > UINT_FIELD_MAX) {
        return err_set(reterr, -EINVAL, "'%s' must be a positive integer", key);
    }
    *ret = (unsigned)json_integer_value(v);
    return 0;
}

/* metadata: absent or null (*ret_text NULL), or an object of at most 32 string values, 4 KiB in
 * all as compact text with sorted keys (*ret_text, owned by the caller). */
int
http_request_metadata(json_t *meta, char **ret_text, struct err *reterr)
{
    const char *key;
    json_t *v;
    char *text;

    if (meta == NULL || json_is_null(meta)) {
        *ret_text = NULL;
        return 0;
    }
    if (!json_is_object(meta) || json_object_size(meta) > METADATA_MAX_KEYS) {
        return err_set(reterr, -EINVAL, "'metadata' must be an object of at most %d strings",
                       METADATA_MAX_KEYS);
    }
    json_object_foreach (meta, key, v) {
        if (!json_is_string(v)) {
            return err_set(reterr, -EINVAL, "'metadata.%.64s' must be a string", key);
        }
    }
    text = OOM_CHECK(json_dumps(meta, JSON_COMPACT | JSON_SORT_KEYS));
    if (strlen(text) > METADATA_MAX_BYTES) {
        free(text);
        return err_set(reterr, -EMSGSIZE, "'metadata' is larger than %d bytes", METADATA_MAX_BYTES);
    }
    *ret_text = text;
    return 0;
}

/* egress: absent or null (*ret_text NULL), or a narrowing (rules.h), at most
 * STORE_EGRESS_MAX bytes as compact text (*ret_text, owned by the caller). */
int
http_request_egress(json_t *eg, char **ret_text, struct err *reterr)
{
    struct egress_narrowing n;
    char *text;

    *ret_text = NULL;
    if (eg == NULL || json_is_null(eg)) {
        return 0;
    }
    if (egress_narrowing_from_json(eg, "egress", &n, reterr) < 0) {
        return -EINVAL;
    }
    egress_narrowing_done(&n);
    text = OOM_CHECK(json_dumps(eg, JSON_COMPACT));
    if (strlen(text) > STORE_EGRESS_MAX) {
        free(text);
        return err_set(reterr, -EMSGSIZE, "'egress' is larger than %d bytes", STORE_EGRESS_MAX);
    }
    *ret_text = text;
    return 0;
}

void
http_create_body_done(struct http_create_body *cb)
{
    free(cb->metadata_json);
    free(cb->egress_json);
    cb->metadata_json = cb->egress_json = NULL;
}

int
http_request_create(json_t *body, struct http_create_body *ret, struct err *reterr)
{
    static const char *const allowed[] = {"profile",  "idle_timeout_s", "pause_after_s", "metadata",
                                          "snapshot", "idle_action",    "egress",        NULL};
    json_t *snapshot = json_object_get(body, "snapshot");
    json_t *idle_action = json_object_get(body, "idle_action");
    json_t *profile = json_object_get(body, "profile");
    struct http_create_body cb = {0};
    int r;

    if ((r = reject_unknown(body, allowed, reterr)) < 0 ||
        (r = get_uint(body, "idle_timeout_s", &cb.idle_timeout_s, reterr)) < 0 ||
        (r = get_uint(body, "pause_after_s", &cb.pause_after_s, reterr)) < 0 ||
        (r = http_request_metadata(json_object_get(body, "metadata"), &cb.metadata_json, reterr)) <
            0) {
        return r;
    }
    if ((r = http_request_egress(json_object_get(body, "egress"), &cb.egress_json, reterr)) < 0) {
        http_create_body_done(&cb);
        return r;
    }
    if (profile != NULL && !json_is_string(profile)) {
        http_create_body_done(&cb);
        return err_set(reterr, -EINVAL, "'profile' must be a string");
    }
    if (snapshot != NULL && !json_is_string(snapshot)) {
        http_create_body_done(&cb);
        return err_set(reterr, -EINVAL, "'snapshot' must be a snapshot id (a string)");
    }
    if (idle_action != NULL && !json_is_string(idle_action)) {
        http_create_body_done(&cb);
        return err_set(reterr, -EINVAL, "'idle_action' must be \"end\" or \"hibernate\"");
    }
    cb.profile = json_string_value(profile);
    cb.snapshot = json_string_value(snapshot);
    cb.idle_action = json_string_value(idle_action);
    *ret = cb;
    return 0;
}

int
http_request_exec(json_t *body, struct exec_req *ret, struct err *reterr)
{
    static const char *const allowed[] = {"code", "command", "timeout_s", NULL};
    json_t *code = json_object_get(body, "code");
    json_t *cmd = json_object_get(body, "command");
    struct exec_req er = {0};
    size_t i;
    json_t *v;
    int r;

    if ((r = reject_unknown(body, allowed, reterr)) < 0 ||
        (r = get_uint(body, "timeout_s", &er.timeout_s, reterr)) < 0) {
        return r;
    }
    if ((code == NULL) == (cmd == NULL)) {
        return err_set(reterr, -EINVAL, "give exactly one of 'code' and 'command'");
    }
    if (code != NULL) {
        if (!json_is_string(code)) {
            return err_set(reterr, -EINVAL, "'code' must be a string");
        }
        er.code = json_string_value(code);
        er.code_len = json_string_length(code);
        *ret = er;
        return 0;
    }
    if (!json_is_array(cmd) || json_array_size(cmd) == 0 || json_array_size(cmd) > ARGV_MAX) {
        return err_set(reterr, -EINVAL, "'command' must be a non-empty array of strings");
    }
    json_array_foreach (cmd, i, v) {
        if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
            return err_set(reterr, -EINVAL, "'command[%zu]' must be a string without NUL", i);
        }
    }
    er.argv = cmd;
    *ret = er;
    return 0;
}

int
http_request_path(const char *encoded, char **ret, size_t *ret_len, struct err *reterr)
{
    size_t len = 0;
    char *path = evhttp_uridecode(encoded, 0, &len);

    if (path == NULL) {
        return err_set(reterr, -EINVAL, "the path is not valid percent-encoding");
    }
    *ret = path;
    *ret_len = len;
    return 0;
}

int
http_request_file_path(const char *path, size_t len, bool allow_root, char *out, size_t out_n,
                       struct err *reterr)
{
    if (!utf8_valid(path, len)) {
        /* The path goes to the engine in the helper's argv, JSON: never ill-formed. */
        return err_set(reterr, -EINVAL, "the path is not valid UTF-8");
    }
    return files_normalize(path, len, allow_root, out, out_n, reterr);
}

int
http_request_dir(const char *query, char **ret_dir, struct err *reterr)
{
    struct evkeyvalq q;
    const char *dir;

    TAILQ_INIT(&q);
    if (query == NULL) {
        *ret_dir = NULL;
        return 0;
    }
    if (evhttp_parse_query_str(query, &q) < 0) {
        return err_set(reterr, -EINVAL, "the query string is malformed");
    }
    if (strcasestr(query, "%00") != NULL) {
        /* Decoded values are C strings: a NUL would cut the path silently. */
        evhttp_clear_headers(&q);
        return err_set(reterr, -EINVAL, "the path holds a NUL or control character");
    }
    dir = evhttp_find_header(&q, "dir");
    *ret_dir = dir != NULL ? xstrdup(dir) : NULL;
    evhttp_clear_headers(&q);
    return 0;
}
