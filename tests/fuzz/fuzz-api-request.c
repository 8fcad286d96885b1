/* Fuzz target: what an API client sends, through the same pure checks the handlers use
 * (src/http/request.c, files_normalize()). The first byte chooses what the rest is:
 *
 *   byte % 4 == 0   a request body where an empty one is allowed (POST /v1/sessions)
 *   byte % 4 == 1   a request body that must not be empty (POST .../execute)
 *   byte % 4 == 2   the percent-encoded {path} of a files URL
 *   byte % 4 == 3   the query string of a files listing (?dir=...)
 *
 * (seed files start with '0'..'3'). A body that decodes is checked by both the create and the
 * execute parser; a path or dir goes on through http_request_file_path(). Every refusal must carry
 * a negative errno and a message; every acceptance must leave its outputs complete and within the
 * documented bounds, or the target aborts. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "files/files.h"
#include "fuzz.h"
#include "http/http-internal.h"
#include "session/session.h"
#include "util/buf.h"
#include "util/utf8.h"

/* A refusal says what and why, in a message that goes into the JSON error body the way
 * http_reply_error() puts it there: made valid UTF-8 first (it may quote a key cut
 * mid-character). */
static void
check_refusal(int r, const struct err *e)
{
    struct buf clean = BUF_INIT(3 * sizeof(e->msg));
    json_t *s;

    CHECK(r < 0 && e->code == r && e->msg[0] != '\0');
    CHECK(memchr(e->msg, '\0', sizeof(e->msg)) != NULL);
    CHECK(utf8_append_sanitized(&clean, e->msg, strlen(e->msg)) >= 0);
    s = json_stringn(clean.buf, clean.len);
    CHECK(s != NULL);
    json_decref(s);
    buf_done(&clean);
}

static void
check_create(json_t *body)
{
    struct http_create_body cb;
    struct err e = {0};
    int r = http_request_create(body, &cb, &e);

    if (r < 0) {
        check_refusal(r, &e);
        CHECK(r == -EINVAL || r == -EMSGSIZE);
        return;
    }
    CHECK(cb.idle_timeout_s <= 31536000);
    CHECK(cb.profile == json_string_value(json_object_get(body, "profile")));
    if (cb.metadata_json != NULL) {
        json_t *meta = json_loads(cb.metadata_json, JSON_REJECT_DUPLICATES, NULL);
        const char *key;
        json_t *v;

        CHECK(strlen(cb.metadata_json) <= 4096);
        CHECK(json_is_object(meta) && json_object_size(meta) <= 32);
        json_object_foreach (meta, key, v) {
            CHECK(json_is_string(v));
        }
        CHECK(json_equal(meta, json_object_get(body, "metadata")));
        json_decref(meta);
        http_create_body_done(&cb);
    }
}

static void
check_exec(json_t *body)
{
    struct exec_req er;
    struct err e = {0};
    int r = http_request_exec(body, &er, &e);
    size_t i;
    json_t *v;

    if (r < 0) {
        check_refusal(r, &e);
        CHECK(r == -EINVAL);
        return;
    }
    CHECK((er.code == NULL) != (er.argv == NULL)); /* exactly one thing to run */
    CHECK(er.timeout_s <= 31536000);
    if (er.code != NULL) {
        CHECK(er.code_len == json_string_length(json_object_get(body, "code")));
        return;
    }
    CHECK(json_is_array(er.argv) && json_array_size(er.argv) >= 1 &&
          json_array_size(er.argv) <= 4096);
    json_array_foreach (er.argv, i, v) {
        CHECK(json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v));
    }
}

static void
check_body(const char *text, size_t len, bool allow_empty)
{
    json_t *body = NULL;
    struct err e = {0};
    int r = http_request_json(text, len, allow_empty, &body, &e);

    if (r < 0) {
        check_refusal(r, &e);
        CHECK(body == NULL);
        return;
    }
    CHECK(json_is_object(body));
    check_create(body);
    check_exec(body);
    json_decref(body);
}

/* An accepted path is UTF-8 (it goes to the engine in JSON), relative to the workspace, has no
 * empty, "." or ".." segment and no control character, and normalizes to itself. */
static void
check_normalize(const char *path, size_t len, bool allow_root)
{
    char out[FILES_PATH_MAX + 1], again[FILES_PATH_MAX + 1];
    struct err e = {0};
    int r = http_request_file_path(path, len, allow_root, out, sizeof(out), &e);
    size_t n;

    if (r < 0) {
        check_refusal(r, &e);
        return;
    }
    n = strlen(out);
    CHECK(n <= len && (n > 0 || allow_root));
    CHECK(n == 0 || (out[0] != '/' && out[n - 1] != '/' && strstr(out, "//") == NULL));
    for (const char *seg = out; n > 0;) {
        const char *slash = strchr(seg, '/');
        size_t sl = slash != NULL ? (size_t)(slash - seg) : strlen(seg);

        CHECK(!(sl == 1 && seg[0] == '.') && !(sl == 2 && seg[0] == '.' && seg[1] == '.'));
        if (slash == NULL) {
            break;
        }
        seg = slash + 1;
    }
    for (size_t i = 0; i < n; i++) {
        CHECK((unsigned char)out[i] >= 0x20 && out[i] != 0x7f);
    }
    CHECK(utf8_valid(out, n));
    CHECK(http_request_file_path(out, n, allow_root, again, sizeof(again), &e) == 0);
    CHECK(strcmp(out, again) == 0);
}

static void
check_url_path(const char *encoded)
{
    struct err e = {0};
    char *path = NULL;
    size_t len = 0;
    int r = http_request_path(encoded, &path, &len, &e);

    if (r < 0) {
        check_refusal(r, &e);
        return;
    }
    CHECK(len <= strlen(encoded));
    check_normalize(path, len, false);
    free(path);
}

static void
check_dir_query(const char *query)
{
    struct err e = {0};
    char *dir = NULL;
    int r = http_request_dir(query, &dir, &e);

    if (r < 0) {
        check_refusal(r, &e);
        CHECK(dir == NULL);
        return;
    }
    if (dir != NULL) {
        check_normalize(dir, strlen(dir), true);
        free(dir);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t n = size > 0 ? size - 1 : 0;
    char *text;

    if (size == 0) {
        return 0;
    }
    /* A copy of exactly the payload, so that ASan sees a read past its end; the URL parts arrive
     * as C strings, so they get a NUL. */
    text = malloc(n + (data[0] % 4 >= 2));
    if (text == NULL) {
        abort();
    }
    memcpy(text, data + 1, n);
    switch (data[0] % 4) {
    case 0:
    case 1:
        check_body(text, n, data[0] % 4 == 0);
        break;
    case 2:
        text[n] = '\0';
        check_url_path(text);
        break;
    default:
        text[n] = '\0';
        check_dir_query(text);
        break;
    }
    free(text);
    return 0;
}
