/* The E2B SDK's updateNetwork (PUT sandboxes/ID/network, docs/e2b.md): the sandbox's own
 * narrowing of its profile's egress list replaced; what the body omits is cleared. */
#include <errno.h>
#include <stdlib.h>

#include <event2/http.h>
#include <jansson.h>

#define LOG_MODULE "e2b"
#include "audit/audit.h"
#include "e2b/e2b-internal.h"
#include "util/macro.h"

static void
on_network_set(int r, void *userdata)
{
    struct e2b_wait *w = userdata;

    if (r == -ECANCELED) { /* the daemon is stopping: the api (and its clients) may be gone */
        e2b_wait_end(w);
        return;
    }
    http_pending_log(&w->pending);
    if (r == 0) {
        audit_log("e2b.sandbox.network", w->actor,
                  OOM_CHECK(json_pack("{s:s, s:s}", "tenant", w->tenant, "session", w->id)));
    }
    if (w->pending.req != NULL && r < 0) {
        e2b_reply_error(w->pending.req, e2b_status_of(r), "sandbox %s %s", w->id,
                        r == -ENOTCONN ? "could not be changed (redis is down); retry"
                                       : "is not running");
    } else if (w->pending.req != NULL) {
        evhttp_send_reply(w->pending.req, 204, "No Content", NULL);
    }
    log_set_request(NULL);
    e2b_wait_end(w);
}

/* PUT .../network (updateNetwork): the sandbox's narrowing of its profile's list replaced, what
 * the body omits cleared (docs/e2b.md); a profile without a list has no way out to narrow. */
void
e2b_sandbox_network(struct http *a, struct evhttp_request *req, const struct cfg_tenant *t,
                    struct session *s)
{
    json_t *body = e2b_body_json(req), *net = NULL;
    struct err e = {0};
    struct e2b_wait *w;
    char *text;
    int r;

    if (body == NULL) {
        return;
    }
    r = e2b_network_update_parse(body, &net, &e);
    json_decref(body);
    if (r < 0 || !session_has_egress(s)) {
        if (r < 0) {
            e2b_reply_error(req, 400, "%s", e.msg);
        } else {
            evhttp_send_reply(req, 204, "No Content", NULL);
        }
        json_decref(net);
        return;
    }
    text = net != NULL ? OOM_CHECK(json_dumps(net, JSON_COMPACT)) : NULL;
    json_decref(net);
    w = e2b_wait_new(a, req, t, session_id(s));
    r = session_set_egress(s, text != NULL ? text : "", on_network_set, w, &e);
    free(text);
    if (r < 0) {
        e2b_reply_error(req, e2b_status_of(r), "%s", e.msg);
        e2b_wait_end(w);
    }
}
