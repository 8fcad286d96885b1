/* The core's own endpoints, which name no protocol: /healthz (the process answers), /readyz (the
 * engine, Redis, the node registry, drain and every pool's warm target) and /metrics (Prometheus
 * text; the series that name tenants only with the metrics or the admin token). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <jansson.h>

#include "cluster/registry.h"
#include "http/http-internal.h"
#include "pool/pool.h"
#include "util/macro.h"

/* ---- handlers -------------------------------------------------------------------------------- */

static void
handle_healthz(struct http *a, struct evhttp_request *req, const char *const *params)
{
    http_authenticate_offered(a, req);
    http_reply_json_new(req, 200, OOM_CHECK(json_pack("{s:s}", "status", "ok")));
}

static void
handle_readyz(struct http *a, struct evhttp_request *req, const char *const *params)
{
    const struct http_backend *b = a->backend;
    json_t *checks = OOM_CHECK(json_object());
    bool ready = true;
    char why[512];

    http_authenticate_offered(a, req);
    why[0] = '\0';
    if (!b->engine_ok(b->userdata, why, sizeof(why))) {
        ready = false;
    }
    (void)json_object_set_new(checks, "engine", OOM_CHECK(json_string(why[0] ? why : "ok")));
    why[0] = '\0';
    if (b->redis_ok != NULL && !b->redis_ok(b->userdata, why, sizeof(why))) {
        ready = false;
    }
    if (b->redis_ok != NULL) {
        (void)json_object_set_new(checks, "redis", OOM_CHECK(json_string(why[0] ? why : "ok")));
    }
    if (b->registry != NULL) {
        /* Before its first read this node cannot tell another node's session from none. */
        bool listed = registry_listed(b->registry);

        ready = ready && listed;
        (void)json_object_set_new(
            checks, "registry",
            OOM_CHECK(json_string(listed ? "ok" : "not read yet: the other nodes are unknown")));
    }
    if (b->drain_state(b->userdata) != HTTP_SERVING) {
        ready = false;
        (void)json_object_set_new(
            checks, "drain",
            OOM_CHECK(json_string(b->drain_state(b->userdata) >= HTTP_LEAVING
                                      ? "shutting down"
                                      : "drained by the admin: no new sessions")));
    }
    for (size_t i = 0; i < b->n_pools; i++) {
        struct pool_stats st;
        char key[96];

        pool_get_stats(b->pools[i], &st);
        (void)snprintf(key, sizeof(key), "pool:%s", pool_name(b->pools[i]));
        if (st.refused[0]) {
            ready = false;
            (void)snprintf(why, sizeof(why), "refused: %s", st.refused);
        } else if (!st.warm_reached) {
            ready = false;
            (void)snprintf(why, sizeof(why), "warming: %u of %u ready%s%s", st.ready,
                           st.warm_target, st.last_failure[0] ? "; last failure: " : "",
                           st.last_failure);
        } else {
            (void)snprintf(why, sizeof(why), "ok");
        }
        (void)json_object_set_new(checks, key, OOM_CHECK(json_string(why)));
    }
    http_reply_json_new(req, ready ? 200 : 503,
                        OOM_CHECK(json_pack("{s:s, s:o}", "status", ready ? "ready" : "not_ready",
                                            "checks", checks)));
}

static void
handle_metrics(struct http *a, struct evhttp_request *req, const char *const *params)
{
    struct buf text = BUF_INIT(8u << 20);
    const struct cfg_tenant *t = NULL;
    enum auth_role who = http_authenticate(a, req, &t);
    bool trusted = who == AUTH_ADMIN || who == AUTH_METRICS;
    struct evbuffer *out;

    /* Series that name tenants go only to the scraper and the admin: an anonymous client must
     * not learn who the customers are. */
    if (a->cfg->metrics_token_sha256[0] != '\0' && !trusted) {
        (void)evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
                                "Bearer realm=\"sandpool\"");
        http_reply_close(req);
        http_reply_error(req, -EACCES, "/metrics needs the metrics or the admin token");
        return;
    }
    out = OOM_CHECK(evbuffer_new());
    a->backend->metrics(a->backend->userdata, trusted, &text);
    (void)evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                            "text/plain; version=0.0.4");
    if (evbuffer_add(out, text.buf, text.len) < 0) {
        oom();
    }
    evhttp_send_reply(req, 200, "OK", out);
    evbuffer_free(out);
    buf_done(&text);
}

/* All the health listener serves (http.health_listen), and the first rows of every table. */
const struct http_route http_ops_routes[] = {
    {EVHTTP_REQ_GET, 0, "/healthz", handle_healthz},
    {EVHTTP_REQ_GET, 0, "/metrics", handle_metrics},
    {EVHTTP_REQ_GET, 0, "/readyz", handle_readyz},
};
const size_t http_n_ops_routes = ELEMENTSOF(http_ops_routes);
