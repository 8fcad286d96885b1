/* sandpool wire contract, shared by the daemon, the client library and sandpoolctl: the API
 * version, the error codes of the HTTP API and the field names every client relies on. */
#pragma once

#define SANDPOOL_API_VERSION "v1"
#define SANDPOOL_VERSION     "0.1.0"

/* Error codes: {"error": {"code": "<code>", "message": "<sentence>"}} */
#define SANDPOOL_ERR_INVALID_ARGUMENT   "invalid_argument"   /* 400 */
#define SANDPOOL_ERR_UNAUTHENTICATED    "unauthenticated"    /* 401 */
#define SANDPOOL_ERR_FORBIDDEN          "forbidden"          /* 403 */
#define SANDPOOL_ERR_NOT_FOUND          "not_found"          /* 404 */
#define SANDPOOL_ERR_METHOD_NOT_ALLOWED "method_not_allowed" /* 405 */
#define SANDPOOL_ERR_SESSION_BUSY       "session_busy"       /* 409 */
#define SANDPOOL_ERR_NOT_RUNNING        "not_running"        /* 409: nothing to interrupt */
#define SANDPOOL_ERR_CONFLICT           "conflict" /* 409: code in the sandbox moved the path */
#define SANDPOOL_ERR_SNAPSHOT_LOST      "snapshot_lost"      /* 410: missing or corrupt bytes */
#define SANDPOOL_ERR_PAYLOAD_TOO_LARGE  "payload_too_large"  /* 413 */
#define SANDPOOL_ERR_UPGRADE_REQUIRED   "upgrade_required"   /* 426: a WebSocket version not 13 */
#define SANDPOOL_ERR_QUOTA_EXCEEDED     "quota_exceeded"     /* 429 */
#define SANDPOOL_ERR_INTERNAL           "internal"           /* 500 */
#define SANDPOOL_ERR_CAPACITY_EXHAUSTED "capacity_exhausted" /* 503 + Retry-After */
#define SANDPOOL_ERR_UNAVAILABLE        "unavailable"        /* 503 + Retry-After */
#define SANDPOOL_ERR_NOT_IMPLEMENTED    "not_implemented"    /* 501: snapshots not configured */
#define SANDPOOL_ERR_TIMEOUT            "timeout"            /* 504 */

/* Default listen address and the file deploy/local/run.sh writes for sandpoolctl. */
#define SANDPOOL_DEFAULT_URL     "http://127.0.0.1:8080"
#define SANDPOOL_CLIENT_ENV_FILE "/run/sandpool/client.env"
