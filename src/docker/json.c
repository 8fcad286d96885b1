/* Engine JSON helpers; see json.h. Every input here comes from the engine, which we trust to be
 * the engine but not to be well-formed (truncated streams, proxies, fault injection): nothing is
 * assumed about types, and every size is bounded by the caller's buffer caps. */
#include "json.h"

#include <errno.h>
#include <string.h>

#include <jansson.h>

int
docker_json_parse(const char *data, size_t len, json_t **ret, struct err *reterr)
{
    json_error_t jerr;
    json_t *root;

    root = json_loadb(data, len, 0, &jerr);
    if (root == NULL) {
        return err_set(reterr, -EPROTO, "engine answer is not JSON: %s", jerr.text);
    }
    *ret = root;
    return 0;
}

int
docker_json_split_lines(struct buf *data, size_t max_line, void (*cb)(json_t *obj, void *ud),
                        void *userdata)
{
    size_t start = 0;
    int r = 0;

    while (start < data->len) {
        const char *nl = memchr(data->buf + start, '\n', data->len - start);
        size_t n;
        json_t *obj;

        if (nl == NULL) {
            break;
        }
        n = (size_t)(nl - (data->buf + start));
        if (n > 0 && !(n == 1 && data->buf[start] == '\r')) {
            obj = json_loadb(data->buf + start, n, 0, NULL);
            if (obj == NULL || !json_is_object(obj)) {
                json_decref(obj);
                r = -EPROTO;
                break;
            }
            cb(obj, userdata);
            json_decref(obj);
        }
        start += n + 1;
    }
    buf_consume(data, start);
    if (r == 0 && data->len > max_line) {
        r = -EMSGSIZE;
    }
    return r;
}

int
docker_parse_state(json_t *inspect, struct docker_state *ret)
{
    struct docker_state s = {0};
    json_t *state = json_object_get(inspect, "State");
    const char *id = json_string_value(json_object_get(inspect, "Id"));
    const char *status = json_string_value(json_object_get(state, "Status"));
    json_t *running = json_object_get(state, "Running");
    json_t *oom = json_object_get(state, "OOMKilled");
    json_t *code = json_object_get(state, "ExitCode");
    json_t *pid = json_object_get(state, "Pid");

    if (id == NULL || status == NULL || !json_is_boolean(running) || strlen(id) >= sizeof(s.id) ||
        strlen(status) >= sizeof(s.status)) {
        return -EPROTO;
    }
    memcpy(s.id, id, strlen(id) + 1);
    memcpy(s.status, status, strlen(status) + 1);
    s.running = json_is_true(running);
    s.oom_killed = json_is_true(oom);
    s.exit_code = json_is_integer(code) ? (int)json_integer_value(code) : -1;
    s.pid = json_is_integer(pid) ? (int64_t)json_integer_value(pid) : 0;
    *ret = s;
    return 0;
}

const char *
docker_answer_id(json_t *answer)
{
    return json_string_value(json_object_get(answer, "Id"));
}

const char *
docker_label(json_t *obj, const char *key)
{
    json_t *labels = json_object_get(obj, "Labels");

    if (!json_is_object(labels)) {
        labels = json_object_get(json_object_get(obj, "Config"), "Labels");
    }
    return json_string_value(json_object_get(labels, key));
}
