/* Typed Docker Engine API operations on top of docker/client.h.
 *
 * Every operation completes exactly once through a docker_result_cb, never synchronously, unless
 * cancelled with docker_call_cancel() on the returned handle (then never). Results are JSON values
 * borrowed for the duration of the callback. Errors are negative errno with a message that says
 * what the engine answered (struct err):
 *   -ENOENT  no such container/exec/image     -EBUSY   conflict (409)
 *   -EINVAL  engine rejected the request      -ETIMEDOUT the deadline passed
 *   -ECONNREFUSED / -ENOENT on the socket: engine not running
 *   -EOPNOTSUPP the engine accepted a create but dropped a limit (Warnings); the container has
 *            already been removed again
 *   -EPROTO  the engine answered something that is not the documented shape
 * Identifiers passed in must be container/exec ids or names ([A-Za-z0-9_.-]); anything else is
 * -EINVAL, reported through the callback. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "docker/client.h"
#include "util/err.h"

typedef struct json_t json_t;

typedef void docker_result_cb(int r, json_t *result, const struct err *e, void *userdata);

/* GET /_ping, then picks the API version: min(engine's, 1.44), and refuses engines older than
 * 1.41 with -EPROTONOSUPPORT. Result: NULL. */
struct docker_call *docker_ping(struct docker_client *c, docker_result_cb *cb, void *userdata);
/* GET /info. Result: the JSON object. */
struct docker_call *docker_info(struct docker_client *c, docker_result_cb *cb, void *userdata);

/* POST /containers/create?name=NAME with body (borrowed). Result: {"Id", "Warnings"}. A
 * non-empty Warnings list fails with -EOPNOTSUPP after removing the container. */
struct docker_call *docker_container_create(struct docker_client *c, const char *name, json_t *body,
                                            docker_result_cb *cb, void *userdata);
/* POST /containers/{id}/start; "already started" (304) counts as success. */
struct docker_call *docker_container_start(struct docker_client *c, const char *id,
                                           docker_result_cb *cb, void *userdata);
/* POST /containers/{id}/kill?signal=SIG; a container that is not running gives -ESRCH. */
struct docker_call *docker_container_kill(struct docker_client *c, const char *id,
                                          const char *signal, docker_result_cb *cb, void *userdata);
/* POST /containers/{id}/pause (freeze) or /unpause: the cgroup freezer. A container that is not
 * running, or already in the state asked for, gives -EBUSY (409). */
struct docker_call *docker_container_freeze(struct docker_client *c, const char *id, bool freeze,
                                            docker_result_cb *cb, void *userdata);
/* DELETE /containers/{id}?force=1&v=1; "no such container" and "removal already in progress"
 * count as success, because the goal (the container goes away) is met. */
struct docker_call *docker_container_remove(struct docker_client *c, const char *id,
                                            docker_result_cb *cb, void *userdata);
/* GET /containers/{id}/json. Result: the inspect object. */
struct docker_call *docker_container_inspect(struct docker_client *c, const char *id,
                                             docker_result_cb *cb, void *userdata);
/* GET /containers/json?all=1&filters={"label":[labels...]}; labels is NULL-terminated
 * ("key" or "key=value"). Result: the JSON array. */
struct docker_call *docker_container_list(struct docker_client *c, const char *const *labels,
                                          docker_result_cb *cb, void *userdata);
/* POST /containers/{id}/wait?condition=COND (next-exit, not-running, removed); no deadline.
 * Result: {"StatusCode": n, ...}. */
struct docker_call *docker_container_wait(struct docker_client *c, const char *id,
                                          const char *condition, docker_result_cb *cb,
                                          void *userdata);

struct docker_exec_spec {
    const char *const *argv; /* NULL-terminated, at least one element */
    const char *const *env;  /* NULL-terminated "K=V", or NULL */
    const char *user;        /* "uid:gid", or NULL for the container's */
    const char *workdir;     /* or NULL */
    bool attach_stdin;
};

/* POST /containers/{id}/exec. Result: {"Id"}. Privileged is always false. */
struct docker_call *docker_exec_create(struct docker_client *c, const char *id,
                                       const struct docker_exec_spec *spec, docker_result_cb *cb,
                                       void *userdata);
/* GET /exec/{id}/json. Result: the inspect object. */
struct docker_call *docker_exec_inspect(struct docker_client *c, const char *exec_id,
                                        docker_result_cb *cb, void *userdata);

/* Receives one decoded event object (borrowed). */
typedef void docker_event_cb(json_t *event, void *userdata);
/* GET /events?filters={"type":["container"],"label":[label]} with no deadline. Every complete
 * JSON line goes to on_event; cb runs once when the stream ends (engine restart, cancel excluded),
 * with r < 0 on failure. Events are hints: reconcile with a list after every (re)connect. */
struct docker_call *docker_events(struct docker_client *c, const char *label,
                                  docker_event_cb *on_event, docker_result_cb *cb, void *userdata);

/* True for strings usable as container/exec ids or names in a URL path. */
bool docker_valid_id(const char *id);
