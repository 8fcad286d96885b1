/* libsandpool_client's public calls; the contract is in include/sandpool/client.h. Each is a
 * request spelled through transfer.c (client_call_json(), client_call_on(), or a struct xfer of
 * its own for health, metrics, executions and files). */
#include "sandpool/client.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "client/client-internal.h"

/* ---- life cycle ------------------------------------------------------------------------------ */

int
sp_client_new(const char *url, const char *token, struct sp_client **ret, struct sp_error *reterr)
{
    struct sp_client *c;
    size_t n;

    if (url == NULL || url[0] == '\0') {
        return client_error(reterr, -EINVAL, 0, "", "no sandpoold URL given");
    }
    if (strncmp(url, "unix:", 5) != 0 && strncmp(url, "http://", 7) != 0 &&
        strncmp(url, "https://", 8) != 0) {
        return client_error(reterr, -EINVAL, 0, "",
                            "'%.200s' is not a sandpoold URL: use http://HOST:PORT or unix:/PATH",
                            url);
    }
    if (strncmp(url, "unix:", 5) == 0 && url[5] != '/') {
        return client_error(reterr, -EINVAL, 0, "", "'%.200s': the socket path must be absolute",
                            url);
    }
    c = xcalloc(1, sizeof(*c));
    c->easy = OOM_CHECK(curl_easy_init());
    c->url = xstrdup(url);
    c->timeout_ms = DEFAULT_TIMEOUT_MS;
    if (strncmp(url, "unix:", 5) == 0) {
        c->unix_path = xstrdup(url + 5);
        c->base = xstrdup("http://localhost");
    } else {
        n = strlen(url);
        while (n > 0 && url[n - 1] == '/') {
            n--;
        }
        c->base = xstrndup(url, n);
    }
    if (token != NULL && token[0] != '\0') {
        struct buf h = BUF_INIT(8192);

        if (strpbrk(token, "\r\n") != NULL ||
            buf_printf(&h, "Authorization: Bearer %s", token) < 0) {
            buf_done(&h);
            (void)sp_client_free(c);
            return client_error(reterr, -EINVAL, 0, "", "the token is not a valid bearer token");
        }
        c->auth = buf_detach(&h, NULL);
    }
    *ret = c;
    return 0;
}

struct sp_client *
sp_client_free(struct sp_client *c)
{
    if (c == NULL) {
        return NULL;
    }
    curl_easy_cleanup(c->easy);
    free(c->url);
    free(c->base);
    free(c->unix_path);
    free(c->auth);
    free(c);
    return NULL;
}

void
sp_client_set_timeout(struct sp_client *c, long timeout_ms)
{
    c->timeout_ms = timeout_ms;
}

void
sp_client_set_progress(struct sp_client *c, sp_client_progress_cb *cb, void *userdata)
{
    c->progress = cb;
    c->progress_userdata = userdata;
}

const char *
sp_client_url(const struct sp_client *c)
{
    return c->url;
}

int
sp_client_request(struct sp_client *c, const char *method, const char *path, json_t *body,
                  json_t **ret, struct sp_error *reterr)
{
    return client_call_json(c, method, path, body, ret, reterr);
}

/* ---- health and metrics ---------------------------------------------------------------------- */

int
sp_client_health(struct sp_client *c, bool *ret_live, bool *ret_ready, json_t **ret_checks,
                 struct sp_error *reterr)
{
    struct xfer x;
    struct body b = {0};
    long live = 0, ready = 0;
    json_t *root = NULL;
    int r;

    client_xfer_init(&x, c);
    r = client_perform(&x, "GET", "/healthz", &b, true, &live, reterr);
    client_xfer_done(&x);
    if (r < 0) {
        return r;
    }
    client_xfer_init(&x, c);
    r = client_perform(&x, "GET", "/readyz", &b, true, &ready, reterr);
    if (r >= 0 && ready != 200 && ready != 503) {
        r = client_http_error(&x, ready, reterr);
    }
    if (r >= 0) {
        r = client_parse_answer(&x, ready, &root, reterr);
    }
    client_xfer_done(&x);
    if (r < 0) {
        return r;
    }
    *ret_live = live == 200;
    *ret_ready = ready == 200;
    if (ret_checks != NULL) {
        json_t *checks = json_object_get(root, "checks");

        *ret_checks = json_is_object(checks) ? json_incref(checks) : OOM_CHECK(json_object());
    }
    json_decref(root);
    return 0;
}

int
sp_client_metrics(struct sp_client *c, char **ret_text, struct sp_error *reterr)
{
    struct xfer x;
    struct body b = {0};
    long status = 0;
    int r;

    client_xfer_init(&x, c);
    r = client_perform(&x, "GET", "/metrics", &b, false, &status, reterr);
    if (r >= 0) {
        *ret_text = buf_detach(&x.answer, NULL);
    }
    client_xfer_done(&x);
    return r;
}

/* Parses the value of one sample line after its name (and labels); -EINVAL when malformed. */
static int
sample_value(const char *v, double *ret)
{
    char *end = NULL;
    double d;

    errno = 0;
    d = strtod(v, &end);
    if (errno != 0 || end == v || (*end != '\n' && *end != '\0' && *end != ' ')) {
        return -EINVAL;
    }
    *ret = d;
    return 0;
}

int
sp_client_metric_sum(const char *text, const char *name, double *ret)
{
    size_t n = strlen(name);
    double sum = 0, v;
    bool found = false;

    for (const char *line = text; line != NULL && *line != '\0';) {
        const char *nl = strchr(line, '\n'), *p = line + n;

        if (strncmp(line, name, n) == 0 && (*p == ' ' || *p == '{')) {
            if (*p == '{') {
                /* Label values are quoted and may hold '}' or ' ': skip them as strings. */
                bool quoted = false;

                for (p++; *p != '\0' && *p != '\n' && (quoted || *p != '}'); p++) {
                    if (*p == '\\' && quoted && p[1] != '\0') {
                        p++;
                    } else if (*p == '"') {
                        quoted = !quoted;
                    }
                }
                if (*p != '}') {
                    return -EINVAL;
                }
                p++;
            }
            if (*p != ' ' || sample_value(p + 1, &v) < 0) {
                return -EINVAL;
            }
            sum += v;
            found = true;
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    if (!found) {
        return -ENOENT;
    }
    *ret = sum;
    return 0;
}

/* ---- sessions -------------------------------------------------------------------------------- */

int
sp_client_session_create(struct sp_client *c, json_t *body, json_t **ret, struct sp_error *reterr)
{
    return client_call_json(c, "POST", "/v1/sessions", body, ret, reterr);
}

int
sp_client_session_list(struct sp_client *c, json_t **ret, struct sp_error *reterr)
{
    return client_call_json(c, "GET", "/v1/sessions", NULL, ret, reterr);
}

int
sp_client_session_get(struct sp_client *c, const char *id, json_t **ret, struct sp_error *reterr)
{
    return client_call_on(c, "GET", "/v1/sessions/", id, "", NULL, ret, reterr);
}

int
sp_client_session_delete(struct sp_client *c, const char *id, struct sp_error *reterr)
{
    return client_call_on(c, "DELETE", "/v1/sessions/", id, "", NULL, NULL, reterr);
}

int
sp_client_session_pause(struct sp_client *c, const char *id, json_t **ret, struct sp_error *reterr)
{
    return client_call_on(c, "POST", "/v1/sessions/", id, "/pause", NULL, ret, reterr);
}

int
sp_client_session_hibernate(struct sp_client *c, const char *id, json_t **ret,
                            struct sp_error *reterr)
{
    return client_call_on(c, "POST", "/v1/sessions/", id, "/hibernate", NULL, ret, reterr);
}

int
sp_client_session_wake(struct sp_client *c, const char *id, json_t **ret, struct sp_error *reterr)
{
    return client_call_on(c, "POST", "/v1/sessions/", id, "/wake", NULL, ret, reterr);
}

int
sp_client_session_interrupt(struct sp_client *c, const char *id, json_t **ret,
                            struct sp_error *reterr)
{
    return client_call_on(c, "POST", "/v1/sessions/", id, "/interrupt", NULL, ret, reterr);
}

int
sp_client_session_restart(struct sp_client *c, const char *id, json_t **ret,
                          struct sp_error *reterr)
{
    long saved = c->timeout_ms;
    int r;

    /* A restart waits for a fresh interpreter: allow it the time a container start takes. */
    c->timeout_ms = saved == 0 ? 0 : MAX(saved, 120000L);
    r = client_call_on(c, "POST", "/v1/sessions/", id, "/restart", NULL, ret, reterr);
    c->timeout_ms = saved;
    return r;
}

/* ---- executions ------------------------------------------------------------------------------ */

static int
execute(struct sp_client *c, const char *id, json_t *request, sp_client_event_cb *cb,
        void *userdata, bool stream, json_t **ret, struct sp_error *reterr)
{
    struct buf path = BUF_INIT(PATH_MAX_BYTES);
    cleanup_free char *text = NULL;
    struct body b = {0};
    struct xfer x;
    long status = 0;
    int r;

    if (!json_is_object(request)) {
        return client_error(reterr, -EINVAL, 0, "", "the execute request must be a JSON object");
    }
    r = client_make_path(&path, "/v1/sessions/", id, false, "/execute", reterr);
    if (r < 0) {
        return r;
    }
    text = OOM_CHECK(json_dumps(request, JSON_COMPACT));
    b.data = text;
    b.len = strlen(text);
    client_xfer_init(&x, c);
    x.long_running = true;
    if (stream) {
        x.want_sse = true;
        x.cb = cb;
        x.userdata = userdata;
        client_sse_init(&x.sse, SP_CLIENT_MAX_EVENT, client_on_sse_event, &x);
    }
    r = client_perform(&x, "POST", path.buf, &b, false, &status, reterr);
    if (r >= 0 && x.sink != SINK_SSE) {
        /* Not a stream (a daemon that answers JSON anyway, or the JSON call). */
        r = client_parse_answer(&x, status, &x.done, reterr);
        if (r >= 0 && !json_is_object(x.done)) {
            r = client_error(reterr, -EPROTO, (int)status, "",
                             "sandpoold answered the execution with something that is not an "
                             "Execution object");
        }
    } else if (r >= 0 && x.done == NULL) {
        r = client_error(reterr, -EPROTO, (int)status, "",
                         "the event stream from sandpoold at %s ended before the execution "
                         "finished",
                         c->url);
    }
    if (r >= 0 && ret != NULL) {
        *ret = TAKE_PTR(x.done);
    }
    client_xfer_done(&x);
    buf_done(&path);
    return r;
}

int
sp_client_execute(struct sp_client *c, const char *id, json_t *request, json_t **ret,
                  struct sp_error *reterr)
{
    return execute(c, id, request, NULL, NULL, false, ret, reterr);
}

int
sp_client_execute_stream(struct sp_client *c, const char *id, json_t *request,
                         sp_client_event_cb *cb, void *userdata, json_t **ret,
                         struct sp_error *reterr)
{
    return execute(c, id, request, cb, userdata, true, ret, reterr);
}

/* ---- files ----------------------------------------------------------------------------------- */

/* "/workspace/x" is docs/api.md's other spelling of "x"; any other absolute path is outside the
 * workspace and refused here, so that it is never silently taken as relative. */
static int
file_path(struct buf *b, const char *id, const char *path, struct sp_error *reterr)
{
    int r = client_make_path(b, "/v1/sessions/", id, false, "/files/", reterr);

    if (r < 0) {
        return r;
    }
    if (path != NULL && strncmp(path, "/workspace/", 11) == 0) {
        path += 11;
    } else if (path != NULL && path[0] == '/') {
        return client_error(reterr, -EINVAL, 0, "",
                            "'%.200s' is outside the workspace: paths are relative to /workspace",
                            path);
    }
    return client_make_path(b, "", path, true, "", reterr);
}

int
sp_client_file_put(struct sp_client *c, const char *id, const char *path, FILE *in, int64_t size,
                   json_t **ret, struct sp_error *reterr)
{
    struct buf p = BUF_INIT(PATH_MAX_BYTES);
    struct body b = {.upload_size = size < 0 ? -1 : size};
    struct xfer x;
    long status = 0;
    int r = file_path(&p, id, path, reterr);

    if (r < 0) {
        buf_done(&p);
        return r;
    }
    client_xfer_init(&x, c);
    x.long_running = true;
    x.in = in;
    r = client_perform(&x, "PUT", p.buf, &b, false, &status, reterr);
    if (r >= 0) {
        r = client_parse_answer(&x, status, ret, reterr);
    }
    client_xfer_done(&x);
    buf_done(&p);
    return r;
}

int
sp_client_file_get(struct sp_client *c, const char *id, const char *path, FILE *out,
                   uint64_t *ret_size, struct sp_error *reterr)
{
    struct buf p = BUF_INIT(PATH_MAX_BYTES);
    struct body b = {0};
    struct xfer x;
    long status = 0;
    int r = file_path(&p, id, path, reterr);

    if (r < 0) {
        buf_done(&p);
        return r;
    }
    client_xfer_init(&x, c);
    x.long_running = true;
    x.out = out;
    r = client_perform(&x, "GET", p.buf, &b, false, &status, reterr);
    if (r >= 0 && fflush(out) != 0) {
        r = client_error(reterr, -EIO, 0, "", "writing the downloaded file failed: %s",
                         strerror(errno));
    }
    if (r >= 0 && ret_size != NULL) {
        *ret_size = x.out_bytes;
    }
    client_xfer_done(&x);
    buf_done(&p);
    return r;
}

int
sp_client_file_list(struct sp_client *c, const char *id, const char *dir, json_t **ret,
                    struct sp_error *reterr)
{
    struct buf p = BUF_INIT(PATH_MAX_BYTES);
    int r = client_make_path(&p, "/v1/sessions/", id, false, "/files", reterr);

    if (r >= 0 && dir != NULL && dir[0] != '\0' &&
        client_make_path(&p, "?dir=", dir, true, "", reterr) < 0) {
        r = -EINVAL;
    }
    if (r >= 0) {
        r = client_call_json(c, "GET", p.buf, NULL, ret, reterr);
    }
    buf_done(&p);
    return r;
}

int
sp_client_file_delete(struct sp_client *c, const char *id, const char *path,
                      struct sp_error *reterr)
{
    struct buf p = BUF_INIT(PATH_MAX_BYTES);
    int r = file_path(&p, id, path, reterr);

    if (r >= 0) {
        r = client_call_json(c, "DELETE", p.buf, NULL, NULL, reterr);
    }
    buf_done(&p);
    return r;
}

/* ---- admin ----------------------------------------------------------------------------------- */

int
sp_client_pools(struct sp_client *c, json_t **ret, struct sp_error *reterr)
{
    return client_call_json(c, "GET", "/v1/admin/pools", NULL, ret, reterr);
}

int
sp_client_pool_resize(struct sp_client *c, const char *profile, unsigned warm, json_t **ret,
                      struct sp_error *reterr)
{
    json_t *body = OOM_CHECK(json_pack("{s:I}", "warm", (json_int_t)warm));
    int r = client_call_on(c, "PUT", "/v1/admin/pools/", profile, "", body, ret, reterr);

    json_decref(body);
    return r;
}

int
sp_client_admin_sessions(struct sp_client *c, const char *tenant, const char *profile, json_t **ret,
                         struct sp_error *reterr)
{
    struct buf p = BUF_INIT(PATH_MAX_BYTES);
    int r = 0;

    if (buf_puts(&p, "/v1/admin/sessions") < 0) {
        oom(); /* a literal far below the cap */
    }
    if (tenant != NULL) {
        r = client_make_path(&p, "?tenant=", tenant, false, "", reterr);
    }
    if (r >= 0 && profile != NULL) {
        r = client_make_path(&p, tenant != NULL ? "&profile=" : "?profile=", profile, false, "",
                             reterr);
    }
    if (r >= 0) {
        r = client_call_json(c, "GET", p.buf, NULL, ret, reterr);
    }
    buf_done(&p);
    return r;
}

int
sp_client_admin_session_get(struct sp_client *c, const char *id, json_t **ret,
                            struct sp_error *reterr)
{
    return client_call_on(c, "GET", "/v1/admin/sessions/", id, "", NULL, ret, reterr);
}

int
sp_client_admin_session_kill(struct sp_client *c, const char *id, struct sp_error *reterr)
{
    return client_call_on(c, "DELETE", "/v1/admin/sessions/", id, "", NULL, NULL, reterr);
}

int
sp_client_admin_nodes(struct sp_client *c, json_t **ret, struct sp_error *reterr)
{
    return client_call_json(c, "GET", "/v1/admin/nodes", NULL, ret, reterr);
}

int
sp_client_admin_snapshots(struct sp_client *c, const char *tenant, json_t **ret,
                          struct sp_error *reterr)
{
    struct buf p = BUF_INIT(PATH_MAX_BYTES);
    int r = 0;

    if (buf_puts(&p, "/v1/admin/snapshots") < 0) {
        oom(); /* a literal far below the cap */
    }
    if (tenant != NULL) {
        r = client_make_path(&p, "?tenant=", tenant, false, "", reterr);
    }
    if (r >= 0) {
        r = client_call_json(c, "GET", p.buf, NULL, ret, reterr);
    }
    buf_done(&p);
    return r;
}

int
sp_client_admin_snapshot_delete(struct sp_client *c, const char *id, struct sp_error *reterr)
{
    return client_call_on(c, "DELETE", "/v1/admin/snapshots/", id, "", NULL, NULL, reterr);
}

int
sp_client_drain(struct sp_client *c, bool drain, json_t **ret, struct sp_error *reterr)
{
    return client_call_json(c, "POST", drain ? "/v1/admin/drain" : "/v1/admin/undrain", NULL, ret,
                            reterr);
}

int
sp_client_policy(struct sp_client *c, json_t **ret, struct sp_error *reterr)
{
    return client_call_json(c, "GET", "/v1/admin/policy", NULL, ret, reterr);
}
