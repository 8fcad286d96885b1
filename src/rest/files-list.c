/* GET /v1/sessions/{id}/files?dir=D and DELETE /v1/sessions/{id}/files/{path} (files.c has the
 * call, the gate, downloads and uploads). */
#include <errno.h>
#include <string.h>

#include <event2/http.h>
#include <jansson.h>

#define LOG_MODULE "api"
#include "log/log.h"
#include "rest/files-internal.h"
#include "rest/rest-internal.h"
#include "util/macro.h"

/* ---- list and delete ------------------------------------------------------------------------- */

void
files_on_listed(int r, json_t *result, const struct err *e, void *userdata)
{
    struct fcall *fc = userdata;

    fc->op = NULL;
    if (r < 0) {
        files_reply_op_error(fc->pending.req, r, e);
    } else if (!json_is_array(json_object_get(result, "entries"))) {
        http_reply_error(fc->pending.req, -EPROTO, "the sandbox's file helper gave no listing");
    } else {
        http_reply_json_new(fc->pending.req, 200, json_incref(result));
    }
    files_call_end(fc);
}

void
rest_files_list(struct http *a, struct evhttp_request *req, const char *const *params)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    cleanup_free char *dir = NULL;
    struct files_target ft;
    struct err e = {0};
    struct fcall *fc;

    if (http_request_dir(uri != NULL ? evhttp_uri_get_query(uri) : NULL, &dir, &e) < 0) {
        http_reply_error(req, e.code, "%s", e.msg);
        return;
    }
    fc = files_call_begin(a, req, params, dir != NULL ? dir : "", dir != NULL ? strlen(dir) : 0,
                          true, &ft, NULL);
    if (fc != NULL) {
        files_call_admit(fc, FOP_LIST);
    }
}

void
files_on_deleted(int r, json_t *result, const struct err *e, void *userdata)
{
    struct fcall *fc = userdata;

    fc->op = NULL;
    http_pending_log(&fc->pending);
    if (r < 0) {
        files_reply_op_error(fc->pending.req, r, e);
    } else {
        log_info("file deleted session=%s", fc->session);
        files_audit(fc, "file.deleted", 0);
        evhttp_send_reply(fc->pending.req, 204, "No Content", NULL);
    }
    files_call_end(fc);
    log_set_request(NULL);
}

void
rest_files_delete(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct files_target ft;
    struct fcall *fc = files_call_begin_url(a, req, params, &ft, NULL);

    if (fc != NULL) {
        files_call_admit(fc, FOP_DELETE);
    }
}
