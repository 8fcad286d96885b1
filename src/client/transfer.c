/* The client library's transfer engine; the contract is in include/sandpool/client.h.
 *
 * Every call goes through client_perform(): it resets the client's one easy handle (which keeps
 * the connection cache), points it at the daemon and runs one blocking transfer described by a
 * struct xfer. Where the answer's bytes go is decided once per answer, at its first byte, from
 * the status and Content-Type that curl has parsed by then (route()):
 *
 *   2xx + a FILE to write to      -> the FILE (downloads), never held in memory;
 *   2xx text/event-stream + SSE   -> the SSE parser, which calls the user per event;
 *   anything else                 -> `answer`, a buffer capped at SP_CLIENT_MAX_ANSWER.
 *
 * So an error answer to a download or a stream is still read as the JSON error it is. A
 * callback that must stop the transfer records why in the xfer (fail()) and returns the value
 * that makes curl abort; client_perform() then reports that reason instead of curl's. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "client/client-internal.h"
#include "util/errcode.h"

/* ---- errors ---------------------------------------------------------------------------------- */

int
client_error(struct sp_error *e, int r, int http_status, const char *code, const char *fmt, ...)
{
    va_list ap;

    if (e == NULL) {
        return r;
    }
    e->http_status = http_status;
    (void)snprintf(e->code, sizeof(e->code), "%s", code);
    va_start(ap, fmt);
    (void)vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return r;
}

static void PRINTF_LIKE(3, 4) fail(struct xfer *x, int r, const char *fmt, ...)
{
    va_list ap;

    if (x->fail_r < 0) {
        return; /* the first reason is the one that counts */
    }
    x->fail_r = r;
    va_start(ap, fmt);
    (void)vsnprintf(x->fail_msg, sizeof(x->fail_msg), fmt, ap);
    va_end(ap);
}

/* An HTTP error answer: the daemon's {"error": {"code", "message"}} when the body is that,
 * else the status line (libevent's own HTML pages for refused requests are not worth showing). */
int
client_http_error(struct xfer *x, long status, struct sp_error *reterr)
{
    const struct errcode *row = errcode_from_status((int)status);
    const char *reason = row != NULL ? row->reason : "HTTP error";
    int r = row != NULL ? row->err : -EREMOTEIO;
    json_t *root = json_loadb(x->answer.buf, x->answer.len, JSON_REJECT_DUPLICATES, NULL);
    json_t *err = json_object_get(root, "error");
    const char *code = json_string_value(json_object_get(err, "code"));
    const char *msg = json_string_value(json_object_get(err, "message"));

    if (code != NULL && msg != NULL) {
        (void)client_error(reterr, r, (int)status, code, "%s (%s)", msg, code);
    } else {
        (void)client_error(reterr, r, (int)status, "", "sandpoold at %s answered HTTP %ld (%s)",
                           x->c->url, status, reason);
    }
    json_decref(root);
    return r;
}

/* "Connection refused" -> "connection refused": the text goes inside a sentence. */
static void
lower_first(char *s)
{
    if (s[0] >= 'A' && s[0] <= 'Z' && (s[1] < 'A' || s[1] > 'Z')) {
        s[0] = (char)(s[0] - 'A' + 'a');
    }
}

/* No (complete) HTTP answer: a sentence about the daemon and the URL, with curl's detail only
 * as a trailer where it adds something. */
static int
transport_error(struct xfer *x, CURLcode rc, const char *detail, struct sp_error *reterr)
{
    const char *url = x->c->url;
    long os_errno = 0;
    char why[160];

    (void)curl_easy_getinfo(x->c->easy, CURLINFO_OS_ERRNO, &os_errno);
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
        if (os_errno == ENOENT) {
            (void)snprintf(why, sizeof(why), "no such socket");
        } else if (os_errno != 0) {
            (void)snprintf(why, sizeof(why), "%s", strerror((int)os_errno));
            lower_first(why);
        } else {
            (void)snprintf(why, sizeof(why), "connection refused");
        }
        return client_error(reterr, -ECONNREFUSED, 0, "",
                            "cannot reach sandpoold at %s: %s; is it running?", url, why);
    case CURLE_COULDNT_RESOLVE_HOST:
        return client_error(reterr, -ECONNREFUSED, 0, "",
                            "cannot reach sandpoold at %s: unknown host name", url);
    case CURLE_OPERATION_TIMEDOUT:
        return client_error(reterr, -ETIMEDOUT, 0, "", "sandpoold at %s did not answer in time",
                            url);
    case CURLE_GOT_NOTHING:
        return client_error(reterr, -EPROTO, 0, "",
                            "sandpoold at %s closed the connection without an answer", url);
    case CURLE_URL_MALFORMAT:
        return client_error(reterr, -EINVAL, 0, "", "'%s' is not a valid sandpoold URL", url);
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
        return client_error(reterr, -ECONNRESET, 0, "",
                            "the connection to sandpoold at %s broke: %s", url,
                            detail[0] != '\0' ? detail : curl_easy_strerror(rc));
    default:
        return client_error(reterr, -EPROTO, 0, "", "the request to sandpoold at %s failed: %s",
                            url, detail[0] != '\0' ? detail : curl_easy_strerror(rc));
    }
}

/* ---- transfer -------------------------------------------------------------------------------- */

int
client_on_sse_event(const struct client_sse_event *ev, void *userdata)
{
    struct xfer *x = userdata;
    json_t *data = json_loadb(ev->data, ev->data_len, JSON_REJECT_DUPLICATES, NULL);
    struct sp_event pub = {
        .name = ev->event,
        .id = ev->id,
        .raw = ev->data,
        .raw_len = ev->data_len,
        .data = data,
    };
    int r = x->cb != NULL ? x->cb(&pub, x->userdata) : 0;

    if (r < 0) {
        fail(x, r, "stopped by the event handler: %s", strerror(-r));
    } else if (strcmp(ev->event, "done") == 0) {
        if (!json_is_object(data) || x->done != NULL) {
            fail(x, -EPROTO, "sandpoold sent a malformed 'done' event");
            r = -EPROTO;
        } else {
            x->done = json_incref(data);
        }
    }
    json_decref(data);
    return r;
}

static void
route(struct xfer *x)
{
    long status = 0;
    const char *ctype = NULL;

    (void)curl_easy_getinfo(x->c->easy, CURLINFO_RESPONSE_CODE, &status);
    (void)curl_easy_getinfo(x->c->easy, CURLINFO_CONTENT_TYPE, &ctype);
    x->sink = SINK_BUFFER;
    if (status < 200 || status >= 300) {
        return;
    }
    if (x->out != NULL) {
        x->sink = SINK_FILE;
    } else if (x->want_sse && ctype != NULL && strncasecmp(ctype, "text/event-stream", 17) == 0) {
        x->sink = SINK_SSE;
    }
}

static size_t
on_write(char *data, size_t size, size_t nmemb, void *userp)
{
    struct xfer *x = userp;
    size_t n = size * nmemb;
    int r;

    if (x->sink == SINK_UNROUTED) {
        route(x);
    }
    switch (x->sink) {
    case SINK_FILE:
        if (fwrite(data, 1, n, x->out) != n) {
            fail(x, -EIO, "writing the downloaded file failed: %s", strerror(errno));
            return 0;
        }
        x->out_bytes += n;
        return n;
    case SINK_SSE:
        r = client_sse_feed(&x->sse, data, n);
        if (r == -EMSGSIZE) {
            fail(x, r, "sandpoold sent an event larger than %u MiB", SP_CLIENT_MAX_EVENT >> 20);
        } else if (r < 0) {
            fail(x, r, "sandpoold sent a malformed event stream");
        }
        return r < 0 ? 0 : n;
    case SINK_UNROUTED:
    case SINK_BUFFER:
        break;
    }
    if (buf_append(&x->answer, data, n) < 0) {
        fail(x, -EMSGSIZE, "the answer of sandpoold at %s is larger than %u MiB", x->c->url,
             SP_CLIENT_MAX_ANSWER >> 20);
        return 0;
    }
    return n;
}

static int
on_progress(void *userp, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    struct xfer *x = userp;
    int r = x->c->progress(x->c->progress_userdata);

    if (r < 0) {
        fail(x, r, "stopped: %s", strerror(-r));
        return 1; /* abort */
    }
    return 0;
}

static size_t
on_read(char *data, size_t size, size_t nmemb, void *userp)
{
    struct xfer *x = userp;
    size_t n = fread(data, 1, size * nmemb, x->in);

    if (n == 0 && ferror(x->in)) {
        fail(x, -EIO, "reading the file to upload failed: %s", strerror(errno));
        return CURL_READFUNC_ABORT;
    }
    return n;
}

void
client_xfer_init(struct xfer *x, struct sp_client *c)
{
    *x = (struct xfer){.c = c};
    buf_init(&x->answer, SP_CLIENT_MAX_ANSWER);
}

void
client_xfer_done(struct xfer *x)
{
    buf_done(&x->answer);
    if (x->want_sse) {
        client_sse_done(&x->sse);
    }
    json_decref(x->done);
}

static struct curl_slist *
add_header(struct curl_slist *h, const char *line)
{
    return OOM_CHECK(curl_slist_append(h, line));
}

static void
set_method(CURL *e, const char *method, const struct xfer *x, const struct body *b)
{
    if (x->in != NULL) {
        (void)curl_easy_setopt(e, CURLOPT_UPLOAD, 1L); /* PUT */
        (void)curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
        (void)curl_easy_setopt(e, CURLOPT_READDATA, x);
        (void)curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)b->upload_size);
        return;
    }
    if (b->data != NULL || strcmp(method, "POST") == 0) {
        (void)curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)b->len);
        (void)curl_easy_setopt(e, CURLOPT_POSTFIELDS, b->data != NULL ? b->data : "");
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0) {
        (void)curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    }
}

/* Runs one request. Returns 0 with the answer's status in *ret_status (2xx, or any status when
 * any_status), or a negative errno with reterr filled. */
int
client_perform(struct xfer *x, const char *method, const char *path, const struct body *b,
               bool any_status, long *ret_status, struct sp_error *reterr)
{
    struct sp_client *c = x->c;
    CURL *e = c->easy;
    struct curl_slist *h = NULL;
    char errbuf[CURL_ERROR_SIZE] = "";
    struct buf url = BUF_INIT(PATH_MAX_BYTES + 1024);
    long status = 0;
    CURLcode rc;

    if (buf_printf(&url, "%s%s", c->base, path) < 0) {
        return client_error(reterr, -EINVAL, 0, "", "the request path is too long");
    }
    curl_easy_reset(e);
    (void)curl_easy_setopt(e, CURLOPT_URL, url.buf);
    if (c->unix_path != NULL) {
        (void)curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, c->unix_path);
    }
    (void)curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    (void)curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    (void)curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    (void)curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, x->long_running ? 0L : c->timeout_ms);
    (void)curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    (void)curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    (void)curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    if (c->progress != NULL) {
        (void)curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
        (void)curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
        (void)curl_easy_setopt(e, CURLOPT_XFERINFODATA, x);
    }
    if (c->auth != NULL) {
        h = add_header(h, c->auth);
    }
    if (b->data != NULL) {
        h = add_header(h, "Content-Type: application/json");
    } else if (x->in == NULL && strcmp(method, "POST") == 0) {
        h = add_header(h, "Content-Type:"); /* an empty POST is no form: drop curl's default */
    }
    h = add_header(h, x->want_sse ? "Accept: text/event-stream" : "Accept: application/json");
    (void)curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    set_method(e, method, x, b);

    rc = curl_easy_perform(e);
    (void)curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    buf_done(&url);
    if (x->fail_r < 0) {
        return client_error(reterr, x->fail_r, (int)status, "", "%s", x->fail_msg);
    }
    if (rc != CURLE_OK) {
        return transport_error(x, rc, errbuf, reterr);
    }
    if (!any_status && (status < 200 || status >= 300)) {
        return client_http_error(x, status, reterr);
    }
    *ret_status = status;
    return 0;
}

/* Parses the buffered answer into *ret (NULL for an empty answer); ret may be NULL. */
int
client_parse_answer(struct xfer *x, long status, json_t **ret, struct sp_error *reterr)
{
    json_error_t jerr;
    json_t *root;

    if (ret == NULL) {
        return 0;
    }
    if (x->answer.len == 0) {
        *ret = NULL;
        return 0;
    }
    root = json_loadb(x->answer.buf, x->answer.len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        return client_error(reterr, -EPROTO, (int)status, "",
                            "sandpoold at %s answered something that is not JSON (%s)", x->c->url,
                            jerr.text);
    }
    *ret = root;
    return 0;
}

int
client_call_json(struct sp_client *c, const char *method, const char *path, json_t *body,
                 json_t **ret, struct sp_error *reterr)
{
    struct xfer x;
    struct body b = {0};
    cleanup_free char *text = NULL;
    long status = 0;
    int r;

    if (body != NULL) {
        text = OOM_CHECK(json_dumps(body, JSON_COMPACT));
        b.data = text;
        b.len = strlen(text);
    }
    client_xfer_init(&x, c);
    r = client_perform(&x, method, path, &b, false, &status, reterr);
    if (r >= 0) {
        r = client_parse_answer(&x, status, ret, reterr);
    }
    client_xfer_done(&x);
    return r;
}

/* ---- paths ----------------------------------------------------------------------------------- */

/* Appends s percent-encoded: RFC 3986 unreserved characters stay, and '/' when keep_slash. */
static int
put_encoded(struct buf *b, const char *s, bool keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";

    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;
        bool plain = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                     (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_' || ch == '~' ||
                     (keep_slash && ch == '/');
        char esc[3] = {'%', hex[ch >> 4], hex[ch & 15]};

        if ((plain ? buf_putc(b, (char)ch) : buf_append(b, esc, sizeof(esc))) < 0) {
            return -EINVAL;
        }
    }
    return 0;
}

/* Builds prefix + encoded(arg) + suffix into b. */
int
client_make_path(struct buf *b, const char *prefix, const char *arg, bool keep_slash,
                 const char *suffix, struct sp_error *reterr)
{
    if (arg == NULL || arg[0] == '\0') {
        return client_error(reterr, -EINVAL, 0, "", "an empty name or path is not valid here");
    }
    if (buf_puts(b, prefix) < 0 || put_encoded(b, arg, keep_slash) < 0 || buf_puts(b, suffix) < 0) {
        return client_error(reterr, -EINVAL, 0, "", "'%.64s...' is too long", arg);
    }
    return 0;
}

int
client_call_on(struct sp_client *c, const char *method, const char *prefix, const char *arg,
               const char *suffix, json_t *body, json_t **ret, struct sp_error *reterr)
{
    struct buf path = BUF_INIT(PATH_MAX_BYTES);
    int r = client_make_path(&path, prefix, arg, false, suffix, reterr);

    if (r >= 0) {
        r = client_call_json(c, method, path.buf, body, ret, reterr);
    }
    buf_done(&path);
    return r;
}
