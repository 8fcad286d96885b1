/* Shared by the files of the REST API (src/rest) only. */
#pragma once

#include "http/handler.h"
#include "rest/rest.h"

struct session;

/* Session endpoints (sessions.c). */
http_handler_fn rest_sessions_create;
http_handler_fn rest_sessions_list;
http_handler_fn rest_sessions_get;
http_handler_fn rest_sessions_delete;
http_handler_fn rest_sessions_execute;
http_handler_fn rest_sessions_interrupt;
http_handler_fn rest_sessions_restart;
http_handler_fn rest_sessions_executions;
http_handler_fn rest_sessions_pause;
http_handler_fn rest_sessions_hibernate;
http_handler_fn rest_sessions_wake;
/* Ends s and answers 204 (or the error). */
void rest_session_delete(struct http *a, struct evhttp_request *req, struct session *s,
                         const struct http_actor *who);

/* Snapshot endpoints (snapshots.c). */
http_handler_fn rest_snapshots_take;
http_handler_fn rest_snapshots_list;
http_handler_fn rest_snapshots_get;
http_handler_fn rest_snapshots_delete;
http_handler_fn rest_admin_snapshots;
http_handler_fn rest_admin_nodes;
http_handler_fn rest_admin_snapshot_delete;
/* A session just created for a POST /v1/sessions {"snapshot": id}: the snapshot is restored into
 * it, then req is answered (201, or the error after the session is ended). */
void rest_snapshots_restore_reply(struct http *a, struct evhttp_request *req, struct session *s,
                                  const char *snapshot);

/* Admin endpoints (admin.c): admin token only. */
http_handler_fn rest_admin_pools;
http_handler_fn rest_admin_pool_put;
http_handler_fn rest_admin_sessions;
http_handler_fn rest_admin_session_get;
http_handler_fn rest_admin_session_delete;
http_handler_fn rest_admin_drain;
http_handler_fn rest_admin_undrain;
http_handler_fn rest_admin_policy;

/* File endpoints (files.c, files-list.c). params[1] is the raw (still percent-encoded) file
 * path. */
http_handler_fn rest_files_list;
http_handler_fn rest_files_get;
http_handler_fn rest_files_put;
http_handler_fn rest_files_delete;
