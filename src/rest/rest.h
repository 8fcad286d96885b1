/* The REST API (docs/api.md): sessions, executions, files, snapshots and the admin's endpoints
 * under /v1, served by the HTTP core (src/http). Loop context only. */
#pragma once

#include "http/http.h"

extern const struct http_protocol rest_protocol;
