/* The REST API's routes (docs/api.md), in the order the core matches them. */
#include <event2/http.h>

#include "rest/rest-internal.h"
#include "util/macro.h"

static const struct http_route routes[] = {
    {EVHTTP_REQ_POST, 0, "/v1/sessions", rest_sessions_create},
    {EVHTTP_REQ_GET, 0, "/v1/sessions", rest_sessions_list},
    {EVHTTP_REQ_GET, 0, "/v1/sessions/*", rest_sessions_get},
    {EVHTTP_REQ_DELETE, 0, "/v1/sessions/*", rest_sessions_delete},
    {EVHTTP_REQ_POST, 0, "/v1/sessions/*/execute", rest_sessions_execute},
    {EVHTTP_REQ_POST, 0, "/v1/sessions/*/interrupt", rest_sessions_interrupt},
    {EVHTTP_REQ_POST, 0, "/v1/sessions/*/restart", rest_sessions_restart},
    {EVHTTP_REQ_POST, 0, "/v1/sessions/*/pause", rest_sessions_pause},
    {EVHTTP_REQ_POST, 0, "/v1/sessions/*/hibernate", rest_sessions_hibernate},
    {EVHTTP_REQ_POST, 0, "/v1/sessions/*/wake", rest_sessions_wake},
    {EVHTTP_REQ_POST, 0, "/v1/sessions/*/snapshots", rest_snapshots_take},
    {EVHTTP_REQ_GET, 0, "/v1/snapshots", rest_snapshots_list},
    {EVHTTP_REQ_GET, 0, "/v1/snapshots/*", rest_snapshots_get},
    {EVHTTP_REQ_DELETE, 0, "/v1/snapshots/*", rest_snapshots_delete},
    {EVHTTP_REQ_GET, 0, "/v1/sessions/*/executions", rest_sessions_executions},
    {EVHTTP_REQ_GET, 0, "/v1/sessions/*/files", rest_files_list},
    {EVHTTP_REQ_GET, 0, "/v1/admin/pools", rest_admin_pools},
    {EVHTTP_REQ_PUT, 0, "/v1/admin/pools/*", rest_admin_pool_put},
    {EVHTTP_REQ_GET, 0, "/v1/admin/sessions", rest_admin_sessions},
    {EVHTTP_REQ_GET, 0, "/v1/admin/sessions/*", rest_admin_session_get},
    {EVHTTP_REQ_DELETE, 0, "/v1/admin/sessions/*", rest_admin_session_delete},
    {EVHTTP_REQ_GET, 0, "/v1/admin/nodes", rest_admin_nodes},
    {EVHTTP_REQ_GET, 0, "/v1/admin/snapshots", rest_admin_snapshots},
    {EVHTTP_REQ_DELETE, 0, "/v1/admin/snapshots/*", rest_admin_snapshot_delete},
    {EVHTTP_REQ_POST, 0, "/v1/admin/drain", rest_admin_drain},
    {EVHTTP_REQ_POST, 0, "/v1/admin/undrain", rest_admin_undrain},
    {EVHTTP_REQ_GET, 0, "/v1/admin/policy", rest_admin_policy},
    {EVHTTP_REQ_GET, 0, "/v1/sessions/*/files/**", rest_files_get},
    {EVHTTP_REQ_PUT, HTTP_ROUTE_STREAMED_BODY, "/v1/sessions/*/files/**", rest_files_put},
    {EVHTTP_REQ_DELETE, 0, "/v1/sessions/*/files/**", rest_files_delete},
};

/* REST keeps no state of its own: everything it serves is the session manager's. */
const struct http_protocol rest_protocol = {
    .name = "rest",
    .routes = routes,
    .n_routes = ELEMENTSOF(routes),
};
