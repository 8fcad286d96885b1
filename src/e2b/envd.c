/* Port 49983 of an E2B sandbox, envd (docs/e2b.md):
 *
 *   GET  /health                                 204
 *   GET  /files?path=                            the file, streamed (octet-stream)
 *   POST /files?path=                            multipart (one or several "file" parts) or
 *                                                octet-stream: [{path, name, type: "file"}]
 *   POST /filesystem.Filesystem/{Stat, ListDir, MakeDir, Remove, Move}   unary Connect-JSON
 *   POST /process.Process/{Start, SendSignal}    run.c
 *   POST /<package>.<Service>/<Method>           anything else: unimplemented (501)
 *
 * Paths are E2B's (/home/user, relative) mapped onto the workspace (e2b_path_map()), then
 * checked like the files API's (http_request_file_path(): no "..", no symlink followed inside the
 * sandbox). Every operation is one engine exec through the files gate (gate.c), as the files
 * API's are. An answer names a path as the client did: under /home/user when it asked so,
 * under /workspace otherwise. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#define LOG_MODULE "e2b"
#include "audit/audit.h"
#include "e2b/e2b-internal.h"
#include "e2b/wire.h"
#include "files/files.h"
#include "log/log.h"
#include "session/session.h"
#include "stream/out.h"
#include "util/macro.h"
#include "util/time.h"

static void op_begin(struct e2b_envd_op *o);

static void
op_set(struct e2b_envd_op *o, enum e2b_envd_state to)
{
    o->state = to;
}

/* The path the client sees for a workspace path. */
json_t *
e2b_envd_path(const struct e2b_envd_op *o, const char *rel)
{
    rel = rel != NULL ? rel : "";
    char p[FILES_PATH_MAX + 32];

    (void)snprintf(p, sizeof(p), "%s%s%s", o->home ? E2B_HOME : E2B_WORKSPACE, rel[0] ? "/" : "",
                   rel);
    return OOM_CHECK(json_string(p));
}

void
e2b_envd_gate_leave(struct e2b_envd_op *o, bool in_flight)
{
    if (!o->gate_in) {
        return;
    }
    o->gate_in = false;
    if (in_flight) {
        http_gate_leave_later(o->a->files_gate, o->tenant, o->session);
    } else {
        http_gate_leave(o->a->files_gate, o->tenant, o->session);
    }
}

void
e2b_envd_free(struct e2b_envd_op *o)
{
    http_pending_end(&o->pending);
    if (o->used) {
        session_unuse(o->a->backend->sessions, o->session);
    }
    e2b_upload_free(o);
    free(o);
}

/* The operation is over: free it now (its reply was sent, or nobody waits). */
void
e2b_envd_over(struct e2b_envd_op *o)
{
    op_set(o, ENVD_OVER);
    e2b_envd_gate_leave(o, false);
    e2b_envd_free(o);
}

static void
on_gone(struct http_pending *p)
{
    struct e2b_envd_op *o = container_of(p, struct e2b_envd_op, pending);

    if (o->out != NULL) {
        stream_out_abandon(o->out);
        o->out = NULL;
    }
    http_gate_cancel(o->gw);
    o->gw = NULL;
    e2b_upload_cancel(o);
    if (o->fop != NULL) {
        files_cancel(o->fop);
        o->fop = NULL;
        e2b_envd_gate_leave(o, true); /* the engine may still be at it for a moment */
    }
    e2b_envd_over(o);
}

/* What a failed files operation answers: REST errors for /files, Connect's for the rest. */
void
e2b_envd_failed(struct e2b_envd_op *o, int r, const struct err *e)
{
    const char *msg = e != NULL && e->msg[0] != '\0' ? e->msg : strerror(-r);

    if (o->pending.req == NULL) {
        return;
    }
    if (o->kind == ENVD_GET || o->kind == ENVD_PUT) {
        e2b_reply_error(o->pending.req, e2b_status_of(r), "%s", msg);
    } else {
        e2b_reply_connect_error(o->pending.req, e2b_connect_code(r), "%s", msg);
    }
}

static void
on_gate(int r, void *arg)
{
    struct e2b_envd_op *o = arg;

    o->gw = NULL;
    http_pending_log(&o->pending);
    if (r < 0) {
        e2b_envd_failed(o, -EDQUOT, NULL);
        e2b_envd_over(o);
    } else {
        o->gate_in = true;
        op_set(o, ENVD_RUNNING);
        op_begin(o);
    }
    log_set_request(NULL);
}

/* A new operation on t's sandbox; through the gate, then op_begin(). */
void
e2b_envd_start(struct http *a, struct evhttp_request *req, struct e2b_target *t,
               struct e2b_envd_op *o)
{
    int r;

    o->a = a;
    (void)snprintf(o->tenant, sizeof(o->tenant), "%s", session_tenant(t->s));
    (void)snprintf(o->session, sizeof(o->session), "%s", session_id(t->s));
    http_pending_start(&o->pending, req, on_gone);
    r = http_gate_enter(a->files_gate, o->tenant, o->session, on_gate, o, &o->gw);
    if (r < 0) {
        e2b_envd_failed(o, -EDQUOT,
                        &(struct err){.msg = "too many file operations of this tenant "
                                             "wait; retry in a moment"});
        e2b_envd_over(o);
    } else if (r == 0) {
        o->gate_in = true;
        op_set(o, ENVD_RUNNING);
        op_begin(o);
    } else {
        op_set(o, ENVD_AT_GATE);
    }
}

bool
e2b_envd_target(struct e2b_envd_op *o, struct files_target *ret)
{
    struct session *s = session_find(o->a->backend->sessions, o->tenant, o->session);

    if (s == NULL || session_container(s) == NULL) {
        return false;
    }
    if (!o->used) {
        session_use(s);
        o->used = true;
    }
    *ret = (struct files_target){
        .engine = o->a->backend->engine,
        .container = session_container(s),
        .user = session_user(s),
    };
    return true;
}

/* ---- entries --------------------------------------------------------------------------------- */

const char *
e2b_base_name(const char *rel)
{
    const char *slash = strrchr(rel, '/');

    return slash ? slash + 1 : rel;
}

/* E2B's FileType of a helper's entry: a symlink has the type of what it resolves to (E2B's envd
 * reports it so, and sets symlinkTarget); a dangling one, a fifo, a socket or a device has none
 * (FILE_TYPE_UNSPECIFIED: the SDK's list skips them). */
static const char *
entry_type(const char *type, const char *target_type)
{
    const char *t = strcmp(type, "symlink") == 0 ? target_type : type;

    return strcmp(t, "dir") == 0    ? "FILE_TYPE_DIRECTORY"
           : strcmp(t, "file") == 0 ? "FILE_TYPE_FILE"
                                    : "FILE_TYPE_UNSPECIFIED";
}

/* A symlink's target as the helper gave it (relative to the workspace, or absolute outside it)
 * as the client sees paths; NULL when it is no path. */
static json_t *
link_target(const struct e2b_envd_op *o, const char *target)
{
    if (target == NULL || strlen(target) > FILES_PATH_MAX) {
        return NULL;
    }
    return target[0] == '/' ? OOM_CHECK(json_string(target)) : e2b_envd_path(o, target);
}

/* An entry of the helper's answer as E2B's EntryInfo, or NULL when it is malformed: the answer
 * comes from inside the sandbox (user code can write into the helper's stdout), so every member
 * is checked before it is used. A symlink's mode is its target's, its permissions its own
 * ("Lrwxrwxrwx"), as E2B's envd reports them. */
static json_t *
entry_json(const struct e2b_envd_op *o, json_t *e)
{
    json_t *name = json_object_get(e, "name"), *jsize = json_object_get(e, "size");
    json_t *jmode = json_object_get(e, "mode"), *jmtime = json_object_get(e, "mtime");
    json_t *jtmode = json_object_get(e, "target_mode"), *target = NULL, *out;
    const char *type = json_string_value(json_object_get(e, "type"));
    const char *path = json_string_value(json_object_get(e, "path"));
    const char *ttype = json_string_value(json_object_get(e, "target_type"));
    json_int_t mode = json_integer_value(jmode), tmode = json_integer_value(jtmode);
    double mtime = json_number_value(jmtime);
    bool dir = type != NULL && strcmp(type, "dir") == 0;
    bool link = type != NULL && strcmp(type, "symlink") == 0;
    char size[24], perms[11] = "----------", t[40];

    if (!json_is_string(name) || path == NULL || type == NULL ||
        (jsize != NULL && (!json_is_integer(jsize) || json_integer_value(jsize) < 0)) ||
        (jmode != NULL && (!json_is_integer(jmode) || mode < 0 || mode > 07777)) ||
        (jmtime != NULL && !json_is_number(jmtime))) {
        return NULL;
    }
    if (link &&
        (ttype == NULL || !json_is_integer(jtmode) || tmode < 0 || tmode > 07777 ||
         (target = link_target(o, json_string_value(json_object_get(e, "target")))) == NULL)) {
        return NULL;
    }
    if (!(mtime >= 0.0 && mtime < 1e11)) {
        mtime = 0.0; /* NaN, negative, or past the year 5138: unknown */
    }
    (void)snprintf(size, sizeof(size), "%lld", (long long)json_integer_value(jsize));
    if (link || dir) {
        perms[0] = link ? 'L' : 'd';
    }
    for (int i = 0; i < 9; i++) {
        if (mode & (0400 >> i)) {
            perms[1 + i] = "rwxrwxrwx"[i];
        }
    }
    out = OOM_CHECK(json_pack("{s:O, s:s, s:o, s:s, s:i, s:s, s:s, s:s, s:s}", "name",
                              json_object_get(e, "name"), "type", entry_type(type, ttype), "path",
                              e2b_envd_path(o, json_string_value(json_object_get(e, "path"))),
                              "size", size, "mode", (int)(link ? tmode : mode), "permissions",
                              perms, "owner", "user", "group", "user", "modifiedTime",
                              time_rfc3339((uint64_t)(mtime * 1000.0), t, sizeof(t))));
    if (target != NULL) {
        (void)json_object_set_new(out, "symlinkTarget", target);
    }
    return out;
}

/* ---- unary filesystem calls ------------------------------------------------------------------ */

static void
malformed(struct e2b_envd_op *o)
{
    e2b_envd_failed(o, -EPROTO,
                    &(struct err){.msg = "the sandbox's file helper answered "
                                         "something malformed"});
}

static void
on_answer(int r, json_t *result, const struct err *e, void *userdata)
{
    struct e2b_envd_op *o = userdata;
    json_t *out = NULL, *v;
    size_t i;

    o->fop = NULL;
    http_pending_log(&o->pending);
    if (r == 0 && o->kind == ENVD_MKDIR && json_is_false(json_object_get(result, "created"))) {
        e2b_reply_connect_error(o->pending.req, "already_exists", "%s/%s exists already",
                                o->home ? E2B_HOME : E2B_WORKSPACE, o->path);
    } else if (r < 0) {
        e2b_envd_failed(o, r, e);
    } else if (o->kind == ENVD_LIST) {
        json_t *entries = OOM_CHECK(json_array()), *entry;

        json_array_foreach (json_object_get(result, "entries"), i, v) {
            if ((entry = entry_json(o, v)) == NULL) {
                break;
            }
            (void)json_array_append_new(entries, entry);
        }
        if (json_is_array(json_object_get(result, "entries")) &&
            i == json_array_size(json_object_get(result, "entries"))) {
            out = OOM_CHECK(json_pack("{s:o}", "entries", entries));
        } else {
            json_decref(entries);
            malformed(o);
        }
    } else if (o->kind == ENVD_REMOVE) {
        out = OOM_CHECK(json_object());
    } else if (o->kind == ENVD_STAT) {
        json_t *entry = entry_json(o, result);

        if (entry != NULL) {
            out = OOM_CHECK(json_pack("{s:o}", "entry", entry));
        } else {
            malformed(o);
        }
    } else { /* MakeDir, Move: the entry made, as far as the helper said */
        const char *rel = o->kind == ENVD_MOVE ? o->path2 : o->path;
        json_t *made = OOM_CHECK(json_pack(
            "{s:s, s:s, s:s, s:i, s:i, s:f}", "name", e2b_base_name(rel), "path", rel, "type",
            o->kind == ENVD_MKDIR ? "dir" : "file", "size", 0, "mode",
            o->kind == ENVD_MKDIR ? 0755 : 0644, "mtime", (double)time_wall_ms() / 1000.0));

        out = OOM_CHECK(json_pack("{s:o}", "entry", entry_json(o, made)));
        json_decref(made);
    }
    if (out != NULL && o->pending.req != NULL) {
        http_reply_json_new(o->pending.req, 200, out);
    } else {
        json_decref(out);
    }
    e2b_envd_gate_leave(o, false);
    e2b_envd_over(o);
    log_set_request(NULL);
}

/* A client path member of msg into out; false after replying invalid_argument. */
static bool
member_path(struct evhttp_request *req, json_t *msg, const char *name, bool allow_root, char *out,
            bool *home)
{
    const char *p = json_string_value(json_object_get(msg, name));
    char mapped[FILES_PATH_MAX + 1];
    struct err e = {0};

    if (p == NULL) {
        e2b_reply_connect_error(req, "invalid_argument", "'%s' must be a string", name);
        return false;
    }
    if (e2b_path_map(p, mapped, sizeof(mapped), &e) < 0 ||
        http_request_file_path(mapped, strlen(mapped), allow_root, out, FILES_PATH_MAX + 1, &e) <
            0) {
        e2b_reply_connect_error(req, "invalid_argument", "%s", e.msg);
        return false;
    }
    *home = p[0] != '/' || strncmp(p, E2B_HOME, strlen(E2B_HOME)) == 0;
    return true;
}

static void
filesystem(struct http *a, struct evhttp_request *req, struct e2b_target *t, const char *method)
{
    static const struct {
        const char *name;
        enum e2b_envd_kind kind;
    } methods[] = {{"Stat", ENVD_STAT},
                   {"ListDir", ENVD_LIST},
                   {"MakeDir", ENVD_MKDIR},
                   {"Remove", ENVD_REMOVE},
                   {"Move", ENVD_MOVE}};
    struct e2b_envd_op *o;
    json_t *msg;
    bool home2;
    int kind = -1;

    for (size_t i = 0; i < ELEMENTSOF(methods); i++) {
        if (strcmp(methods[i].name, method) == 0) {
            kind = (int)methods[i].kind;
        }
    }
    if (kind < 0) {
        e2b_reply_connect_error(req, "unimplemented",
                                "filesystem.Filesystem/%.64s is not "
                                "supported here",
                                method);
        return;
    }
    msg = e2b_body_json(req);
    if (msg == NULL) {
        return;
    }
    o = xcalloc(1, sizeof(*o));
    o->kind = (enum e2b_envd_kind)kind;
    if ((o->kind == ENVD_MOVE
             ? !member_path(req, msg, "source", false, o->path, &o->home) ||
                   !member_path(req, msg, "destination", false, o->path2, &home2)
             : !member_path(req, msg, "path", o->kind != ENVD_REMOVE, o->path, &o->home))) {
        json_decref(msg);
        free(o);
        return;
    }
    json_decref(msg);
    if (o->kind == ENVD_MKDIR && o->path[0] == '\0') {
        /* The workspace itself (OpenAI's backend makes its root at every start): no exec. */
        e2b_reply_connect_error(req, "already_exists", "%s exists already",
                                o->home ? E2B_HOME : E2B_WORKSPACE);
        free(o);
        return;
    }
    e2b_envd_start(a, req, t, o);
}

/* ---- downloads ------------------------------------------------------------------------------- */

static void
on_get_drained(void *userdata)
{
    struct e2b_envd_op *o = userdata;

    if (o->fop != NULL) {
        files_pause(o->fop, false);
    }
}

static int
on_get_header(uint64_t size, double mtime, void *userdata)
{
    struct e2b_envd_op *o = userdata;
    struct evkeyvalq *h = evhttp_request_get_output_headers(o->pending.req);
    char len[24];

    (void)snprintf(len, sizeof(len), "%llu", (unsigned long long)size);
    (void)evhttp_add_header(h, "Content-Type", "application/octet-stream");
    (void)evhttp_add_header(h, "Content-Length", len);
    (void)evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    (void)evhttp_add_header(h, "Cache-Control", "no-store");
    o->out = stream_out_start(o->pending.req, 200, "OK", on_get_drained, o);
    return 0;
}

static int
on_get_data(const char *data, size_t n, void *userdata)
{
    struct e2b_envd_op *o = userdata;
    struct evbuffer *b = OOM_CHECK(evbuffer_new());

    if (evbuffer_add(b, data, n) < 0) {
        oom();
    }
    o->a->stats.download_bytes += n;
    if (stream_out_send(o->out, b)) {
        files_pause(o->fop, true);
    }
    evbuffer_free(b);
    return 0;
}

static void
on_got(int r, json_t *result, const struct err *e, void *userdata)
{
    struct e2b_envd_op *o = userdata;
    struct stream_out *out = o->out;

    o->fop = NULL;
    http_pending_log(&o->pending);
    if (out == NULL) {
        e2b_envd_failed(o, r, e);
        e2b_envd_over(o);
    } else {
        o->out = NULL;
        http_pending_end(&o->pending);
        e2b_envd_over(o); /* first: the end may free the connection at once (stream/out.h) */
        stream_out_end(out, r < 0);
    }
    log_set_request(NULL);
}

static const struct files_get_io get_io = {
    .on_header = on_get_header,
    .on_data = on_get_data,
};

/* ---- /files ---------------------------------------------------------------------------------- */

static void
op_begin(struct e2b_envd_op *o)
{
    struct files_target ft;

    if (o->kind == ENVD_PUT) {
        e2b_upload_begin(o);
        return;
    }
    if (!e2b_envd_target(o, &ft)) {
        e2b_envd_failed(o, -ENOENT, &(struct err){.msg = "the sandbox ended"});
        e2b_envd_over(o);
        return;
    }
    switch (o->kind) {
    case ENVD_GET:
        o->fop = files_get(&ft, o->path, &get_io, on_got, o);
        break;
    case ENVD_STAT:
        o->fop = files_stat(&ft, o->path, on_answer, o);
        break;
    case ENVD_LIST:
        o->fop = files_list(&ft, o->path, on_answer, o);
        break;
    case ENVD_MKDIR:
        o->fop = files_mkdir(&ft, o->path, on_answer, o);
        break;
    case ENVD_REMOVE:
        o->fop = files_delete(&ft, o->path, on_answer, o);
        break;
    case ENVD_MOVE:
        o->fop = files_move(&ft, o->path, o->path2, on_answer, o);
        break;
    case ENVD_PUT:
        break;
    }
}

static void
files_route(struct http *a, struct evhttp_request *req, struct e2b_target *t)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *query = evhttp_uri_get_query(uri);
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    struct evkeyvalq q;
    const char *path;
    char mapped[FILES_PATH_MAX + 1];
    struct e2b_envd_op *o;
    struct err e = {0};

    TAILQ_INIT(&q);
    if (query != NULL && evhttp_parse_query_str(query, &q) < 0) {
        e2b_reply_error(req, 400, "the query string is malformed");
        return;
    }
    path = evhttp_find_header(&q, "path");
    o = xcalloc(1, sizeof(*o));
    o->a = a;
    o->home = path == NULL || path[0] != '/' || strncmp(path, E2B_HOME, strlen(E2B_HOME)) == 0;
    if (m == EVHTTP_REQ_POST) {
        o->kind = ENVD_PUT;
        if (!e2b_upload_prepare(a, req, o, path)) {
            evhttp_clear_headers(&q);
            e2b_envd_free(o);
            return;
        }
    } else if (path == NULL || e2b_path_map(path, mapped, sizeof(mapped), &e) < 0 ||
               http_request_file_path(mapped, strlen(mapped), false, o->path, sizeof(o->path), &e) <
                   0) {
        e2b_reply_error(req, 400, "%s", path ? e.msg : "'path' is required");
        evhttp_clear_headers(&q);
        e2b_envd_free(o);
        return;
    }
    evhttp_clear_headers(&q);
    e2b_envd_start(a, req, t, o);
}

void
e2b_envd(struct http *a, struct evhttp_request *req, struct e2b_target *t)
{
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    const char *dot, *slash;

    if (strcmp(t->path, "/health") == 0) {
        evhttp_send_reply(req, 204, "No Content", NULL);
        return;
    }
    if (strcmp(t->path, "/files") == 0 && (m == EVHTTP_REQ_GET || m == EVHTTP_REQ_POST)) {
        files_route(a, req, t);
        return;
    }
    dot = strchr(t->path, '.');
    slash = dot ? strchr(dot, '/') : NULL;
    if (m != EVHTTP_REQ_POST || slash == NULL) {
        e2b_reply_error(req, 404, "%.128s is not an envd endpoint here", t->path);
        return;
    }
    if (strncmp(t->path, "/process.Process/", 17) == 0) {
        e2b_process(a, req, t, slash + 1);
    } else if (strncmp(t->path, "/filesystem.Filesystem/", 23) == 0) {
        filesystem(a, req, t, slash + 1);
    } else {
        e2b_reply_connect_error(req, "unimplemented", "%.128s is not supported here", t->path + 1);
    }
}
