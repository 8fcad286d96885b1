/* Kernel protocol, daemon side; see proto.h. */
#include "proto.h"

#include <errno.h>
#include <string.h>

#include <jansson.h>

#include "util/macro.h"

static const char *const type_names[KERNEL_MSG__COUNT] = {
    [KERNEL_MSG_HELLO] = "hello",
    [KERNEL_MSG_PONG] = "pong",
    [KERNEL_MSG_OUT] = "out",
    [KERNEL_MSG_DONE] = "done",
    [KERNEL_MSG_RESTARTED] = "restarted",
    [KERNEL_MSG_BOUND] = "bound",
    [KERNEL_MSG_ERROR] = "error",
    [KERNEL_MSG_ARTIFACT] = "artifact",
};

/* A string member, or NULL when absent, not a string, or holding NUL. */
static const char *
get_str(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    const char *s = json_string_value(v);

    if (s == NULL || strlen(s) != json_string_length(v)) {
        return NULL;
    }
    return s;
}

static bool
valid_id(const char *id)
{
    return id != NULL && id[0] != '\0' && strlen(id) <= KERNEL_MAX_ID;
}

/* An artifact's path as the kernel names them: KERNEL_ARTIFACT_DIR, then one plain file name. */
static bool
valid_artifact_path(const char *p)
{
    size_t pre = strlen(KERNEL_ARTIFACT_DIR), n;

    if (p == NULL || strncmp(p, KERNEL_ARTIFACT_DIR, pre) != 0) {
        return false;
    }
    p += pre;
    n = strlen(p);
    if (n == 0 || n > 128 || p[0] == '.') {
        return false;
    }
    return strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

static const char *const done_status_names[KERNEL_DONE__COUNT] = {
    [KERNEL_DONE_OK] = "ok",
    [KERNEL_DONE_ERROR] = "error",
    [KERNEL_DONE_INTERRUPTED] = "interrupted",
    [KERNEL_DONE_DIED] = "died",
    [KERNEL_DONE_REJECTED] = "rejected",
};

const char *
kernel_done_status_to_string(enum kernel_done_status st)
{
    return st >= 0 && st < KERNEL_DONE__COUNT ? done_status_names[st] : NULL;
}

static enum kernel_done_status
done_status_from_string(const char *name)
{
    for (int i = 0; name != NULL && i < KERNEL_DONE__COUNT; i++) {
        if (strcmp(name, done_status_names[i]) == 0) {
            return (enum kernel_done_status)i;
        }
    }
    return KERNEL_DONE__INVALID;
}

/* A member that is an integer in [0, 2^31), or -1. */
static int64_t
small_member(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);

    return json_is_integer(v) && json_integer_value(v) >= 0 &&
                   json_integer_value(v) < ((json_int_t)1 << 31)
               ? json_integer_value(v)
               : -1;
}

/* error: absent or null, or {"name": S, "value": S, "traceback": [S...]}. */
static int
decode_done_error(json_t *v, struct kernel_done *d)
{
    json_t *name, *value, *tb, *line;
    size_t i;

    if (v == NULL || json_is_null(v)) {
        return 0;
    }
    name = json_object_get(v, "name");
    value = json_object_get(v, "value");
    tb = json_object_get(v, "traceback");
    if (!json_is_object(v) || !json_is_string(name) || !json_is_string(value) ||
        !json_is_array(tb)) {
        return -EPROTO;
    }
    json_array_foreach (tb, i, line) {
        if (!json_is_string(line)) {
            return -EPROTO;
        }
    }
    d->has_error = true;
    d->error = (struct kernel_done_error){
        .name = json_string_value(name),
        .name_len = json_string_length(name),
        .value = json_string_value(value),
        .value_len = json_string_length(value),
        .traceback = tb,
        .line = small_member(v, "line"),
        .column = small_member(v, "column"),
    };
    return 0;
}

/* truncated: {"o": [total, dropped], "e": [...]}; anything else in a stream's place is 0, 0. */
static void
decode_done_truncated(json_t *t, struct kernel_done *d)
{
    static const char *const keys[2] = {"o", "e"};

    for (int i = 0; i < 2; i++) {
        json_t *pair = json_object_get(t, keys[i]);
        json_int_t total = json_integer_value(json_array_get(pair, 0));
        json_int_t dropped = json_integer_value(json_array_get(pair, 1));

        if (total >= 0 && dropped >= 0) {
            d->truncated[i] = (struct kernel_output_count){(uint64_t)total, (uint64_t)dropped};
        }
    }
}

static int64_t
nonneg_member(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);

    return json_is_integer(v) && json_integer_value(v) >= 0 ? json_integer_value(v) : -1;
}

/* The members of a "done", checked for their types: a done that breaks them is not a
 * kernel's (-EPROTO). */
/* mime: an object of at most KERNEL_MIME_MAX strings, else absent. */
static json_t *
decode_done_mime(json_t *v)
{
    const char *key;
    json_t *member;

    if (!json_is_object(v) || json_object_size(v) > KERNEL_MIME_MAX) {
        return NULL;
    }
    json_object_foreach (v, key, member) {
        if (!json_is_string(member) || strchr(key, '/') == NULL) {
            return NULL;
        }
    }
    return v;
}

static int
decode_done(json_t *obj, struct kernel_done *d)
{
    json_t *v;

    *d = (struct kernel_done){.cpu_ms = -1, .peak_memory_bytes = -1};
    d->status = done_status_from_string(get_str(obj, "status"));
    if (d->status < 0) {
        return -EPROTO;
    }
    v = json_object_get(obj, "result");
    if (v != NULL && !json_is_null(v) && !json_is_string(v)) {
        return -EPROTO;
    }
    d->result = json_string_value(v);
    d->result_len = json_string_length(v);
    if (decode_done_error(json_object_get(obj, "error"), d) < 0) {
        return -EPROTO;
    }
    v = json_object_get(obj, "exit_code");
    if (v != NULL &&
        (!json_is_integer(v) || json_integer_value(v) < -255 || json_integer_value(v) > 255)) {
        return -EPROTO;
    }
    d->has_exit_code = v != NULL;
    d->exit_code = (int)json_integer_value(v);
    v = json_object_get(obj, "oom");
    if (v != NULL && !json_is_boolean(v)) {
        return -EPROTO;
    }
    d->oom = json_is_true(v);
    d->reason = json_string_value(json_object_get(obj, "reason"));
    decode_done_truncated(json_object_get(obj, "truncated"), d);
    v = json_object_get(obj, "resources");
    if (json_is_object(v)) {
        d->has_resources = true;
        d->cpu_ms = nonneg_member(v, "cpu_ms");
        d->peak_memory_bytes = nonneg_member(v, "peak_memory_bytes");
    }
    d->mime = decode_done_mime(json_object_get(obj, "mime"));
    return 0;
}

static bool
valid_sha256(const char *h)
{
    return h != NULL && strlen(h) == 64 && strspn(h, "0123456789abcdef") == 64;
}

static int
decode_artifact(json_t *obj, struct kernel_msg *m)
{
    json_t *entry = json_object_get(obj, "entry");
    json_t *size = json_object_get(entry, "size");

    m->id = get_str(obj, "id");
    m->path = get_str(entry, "path");
    m->mime = get_str(entry, "mime");
    m->sha256 = get_str(entry, "sha256");
    if (!valid_id(m->id) || !valid_artifact_path(m->path) || m->mime == NULL ||
        strcmp(m->mime, "image/png") != 0 || !valid_sha256(m->sha256) || !json_is_integer(size) ||
        json_integer_value(size) < 0) {
        return -EPROTO;
    }
    m->size = json_integer_value(size);
    /* data (rich executions): the file's bytes in base64, leniently (absent when malformed). */
    m->data = get_str(entry, "data");
    if (m->data != NULL) {
        size_t n = strlen(m->data);

        if (n > KERNEL_ARTIFACT_INLINE_B64 || n % 4 != 0 ||
            strspn(m->data, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") !=
                n) {
            m->data = NULL;
        }
    }
    return 0;
}

int
kernel_proto_decode(json_t *obj, struct kernel_msg *ret)
{
    struct kernel_msg m = {.obj = obj, .gen = -1};
    const char *t = get_str(obj, "t");
    json_t *gen = json_object_get(obj, "gen");
    json_t *data;

    m.type = KERNEL_MSG__INVALID;
    for (int i = 0; t != NULL && i < KERNEL_MSG__COUNT; i++) {
        if (strcmp(t, type_names[i]) == 0) {
            m.type = (enum kernel_msg_type)i;
        }
    }
    if (m.type < 0) {
        return -EPROTO;
    }
    if ((m.type == KERNEL_MSG_HELLO || m.type == KERNEL_MSG_RESTARTED) && json_is_integer(gen) &&
        json_integer_value(gen) >= 0) {
        m.gen = json_integer_value(gen);
    }
    switch (m.type) {
    case KERNEL_MSG_OUT:
        m.id = get_str(obj, "id");
        data = json_object_get(obj, "d");
        m.text = json_string_value(data);
        m.text_len = json_string_length(data);
        m.to_stderr = json_string_value(json_object_get(obj, "s")) != NULL &&
                      strcmp(json_string_value(json_object_get(obj, "s")), "e") == 0;
        if (!valid_id(m.id) || m.text == NULL) {
            return -EPROTO;
        }
        break;
    case KERNEL_MSG_DONE:
        m.id = get_str(obj, "id");
        if (!valid_id(m.id) || decode_done(obj, &m.done) < 0) {
            return -EPROTO;
        }
        break;
    case KERNEL_MSG_HELLO:
        m.busy = get_str(obj, "busy");
        m.session = get_str(obj, "session");
        m.used = json_is_true(json_object_get(obj, "used"));
        if (m.gen < 0) {
            return -EPROTO;
        }
        break;
    case KERNEL_MSG_RESTARTED:
        m.text = get_str(obj, "reason");
        m.text_len = m.text ? strlen(m.text) : 0;
        if (m.gen < 0) {
            return -EPROTO;
        }
        break;
    case KERNEL_MSG_BOUND:
        m.session = get_str(obj, "session");
        break;
    case KERNEL_MSG_ERROR:
        m.text = get_str(obj, "error");
        m.text_len = m.text ? strlen(m.text) : 0;
        break;
    case KERNEL_MSG_ARTIFACT:
        if (decode_artifact(obj, &m) < 0) {
            return -EPROTO;
        }
        break;
    case KERNEL_MSG_PONG:
    case KERNEL_MSG__COUNT:
    case KERNEL_MSG__INVALID:
        break;
    }
    *ret = m;
    return 0;
}

void
kernel_splitter_init(struct kernel_splitter *s)
{
    memset(s, 0, sizeof(*s));
    buf_init(&s->line, KERNEL_MAX_LINE);
}

void
kernel_splitter_done(struct kernel_splitter *s)
{
    buf_done(&s->line);
}

/* Empties the line buffer, giving its memory back after a long line. */
static void
line_reset(struct kernel_splitter *s)
{
    if (s->line.alloc > KERNEL_LINE_KEEP) {
        buf_done(&s->line);
    } else {
        buf_reset(&s->line);
    }
}

static int
emit_line(struct kernel_splitter *s, int (*cb)(json_t *, void *), void *userdata)
{
    json_t *obj;
    int r = 0;

    if (s->line.len == 0) {
        return 0;
    }
    /* User output may hold NUL (print("\\0")): allow it in strings. */
    obj = json_loadb(s->line.buf, s->line.len, JSON_ALLOW_NUL, NULL);
    line_reset(s);
    if (obj == NULL || !json_is_object(obj)) {
        s->garbage++;
    } else {
        r = cb(obj, userdata);
    }
    json_decref(obj);
    return r;
}

int
kernel_splitter_feed(struct kernel_splitter *s, const char *data, size_t n,
                     int (*cb)(json_t *obj, void *userdata), void *userdata)
{
    while (n > 0) {
        const char *nl = memchr(data, '\n', n);
        size_t take = nl ? (size_t)(nl - data) : n;
        int r;

        if (!s->discarding && buf_append(&s->line, data, take) < 0) {
            s->discarding = true; /* over-long: skip it whole */
            s->garbage++;
            line_reset(s);
        }
        data += take;
        n -= take;
        if (nl == NULL) {
            break;
        }
        data++;
        n--;
        if (s->discarding) {
            s->discarding = false;
            continue;
        }
        r = emit_line(s, cb, userdata);
        if (r < 0) {
            return r;
        }
    }
    return 0;
}

static char *
dump_line(json_t *obj)
{
    char *text = OOM_CHECK(json_dumps(obj, JSON_COMPACT));
    size_t n = strlen(text);
    char *line = xrealloc(text, n + 2);

    line[n] = '\n';
    line[n + 1] = '\0';
    json_decref(obj);
    return line;
}

char *
kernel_proto_exec(const char *id, const char *code, size_t code_len, uint64_t max_output,
                  const struct kernel_exec_opts *o)
{
    json_t *req = OOM_CHECK(json_pack("{s:s, s:s, s:s%, s:I}", "t", "exec", "id", id, "code", code,
                                      code_len, "max_output", (json_int_t)max_output));

    if (o != NULL && o->ctx != NULL) {
        (void)json_object_set_new(req, "ctx", OOM_CHECK(json_string(o->ctx)));
    }
    if (o != NULL && o->drop) {
        (void)json_object_set_new(req, "drop", json_true());
    }
    if (o != NULL && o->rich) {
        (void)json_object_set_new(req, "rich", json_true());
    }
    if (o != NULL && o->env != NULL) {
        (void)json_object_set(req, "env", o->env);
    }
    if (o != NULL && o->snapshot != NULL) {
        (void)json_object_del(req, "code"); /* the kernel refuses both */
        (void)json_object_set_new(req, "snapshot", OOM_CHECK(json_string(o->snapshot)));
    }
    return dump_line(req);
}

char *
kernel_proto_cmd(const char *id, json_t *argv, uint64_t max_output,
                 const struct kernel_exec_opts *o)
{
    json_t *req = OOM_CHECK(json_pack("{s:s, s:s, s:O, s:I}", "t", "cmd", "id", id, "argv", argv,
                                      "max_output", (json_int_t)max_output));

    if (o != NULL && o->cwd != NULL) {
        (void)json_object_set_new(req, "cwd", OOM_CHECK(json_string(o->cwd)));
    }
    if (o != NULL && o->env != NULL) {
        (void)json_object_set(req, "env", o->env);
    }
    return dump_line(req);
}

char *
kernel_proto_simple(const char *type, const char *key, const char *value)
{
    if (key == NULL) {
        return dump_line(OOM_CHECK(json_pack("{s:s}", "t", type)));
    }
    return dump_line(OOM_CHECK(json_pack("{s:s, s:s}", "t", type, key, value)));
}
