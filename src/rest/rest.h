/* The REST API (docs/api.md): sessions, executions, files, snapshots and the admin's endpoints
 * under /v1, served by the HTTP core (src/http). Loop context only. */
#pragma once

#include <stdbool.h>

#include "http/http.h"

struct execution_result;
typedef struct json_t json_t;

extern const struct http_protocol rest_protocol;

/* REST's Execution object (docs/api.md) for an execution's typed result (session.h;
 * execution.c); with_output adds stdout and stderr. New reference. */
json_t *rest_execution_json(const struct execution_result *r, bool with_output);
