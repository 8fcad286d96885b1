/* Typed container summaries and events: the engine's `GET /containers/json` array and the JSON
 * objects of `GET /events` (docs/internals/engine.md §3), decoded once into plain values, so that
 * the modules above (pool, session, server) never read an engine json_t themselves.
 *
 * Pure: no I/O, no event_base; unit-tested (tests/unit/test-docker-list.c) and fuzzed
 * (tests/fuzz/fuzz-docker-list.c). Every input comes from the engine, which is trusted to be the
 * engine but not to be well-formed: every type is checked, every string and count is bounded, and
 * a malformed answer is an error (-EPROTO, -EMSGSIZE past a bound) with a message naming the
 * entry and the field, never a partly filled result. Required: a summary's Id (a container id of
 * at most DOCKER_LIST_ID_MAX) and State, an event's Action and Actor.ID. Optional fields may be
 * absent or null; present with another type than the documented one, they are malformed.
 *
 * A label or name longer than its field is not an error but decodes as absent (""): the daemon
 * never writes a sandpool label that long (node ids and profile names are at most 64 bytes, slot
 * ids and relay keys 32), so such a container is nobody's: the server removes it as an orphan,
 * or its adoption fails and removes it. Failing the whole list on it instead
 * would keep the daemon's engine link down over one stray container. Strings are never cut. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct json_t json_t;

/* Bounds of a decoded summary. An id is the engine's 64 hex digits, or a unique prefix; longer
 * than DOCKER_LIST_ID_MAX is malformed. */
#define DOCKER_LIST_ID_MAX    128u
#define DOCKER_LIST_LABEL_MAX 64u    /* the sandpool labels: node id, profile, slot id, relay key */
#define DOCKER_LIST_NAME_MAX  128u   /* a container name (without Docker's leading '/') */
#define DOCKER_LIST_MAX       65536u /* containers in one list answer */

/* A container's state as the list reports it. Podman's own states ("configured", "stopped"...)
 * that its compatible API passes through are DOCKER_CONTAINER_OTHER. */
enum docker_container_state {
    DOCKER_CONTAINER_CREATED,
    DOCKER_CONTAINER_RUNNING,
    DOCKER_CONTAINER_PAUSED,
    DOCKER_CONTAINER_RESTARTING,
    DOCKER_CONTAINER_REMOVING,
    DOCKER_CONTAINER_EXITED,
    DOCKER_CONTAINER_DEAD,
    DOCKER_CONTAINER_OTHER,
    DOCKER_CONTAINER__COUNT,
    DOCKER_CONTAINER__INVALID = -22,
};

/* One entry of a container list. A label that is absent or longer than its field is ""
 * (uid: -1). */
struct docker_container_summary {
    char id[DOCKER_LIST_ID_MAX + 1];
    char name[DOCKER_LIST_NAME_MAX + 1]; /* Names[0] without its '/', or "" */
    enum docker_container_state state;
    char owner[DOCKER_LIST_LABEL_MAX + 1];   /* DOCKER_LABEL_OWNER: the node that made it */
    char profile[DOCKER_LIST_LABEL_MAX + 1]; /* DOCKER_LABEL_PROFILE */
    char slot[DOCKER_LIST_LABEL_MAX + 1];    /* DOCKER_LABEL_SLOT */
    char key[DOCKER_LIST_LABEL_MAX + 1];     /* DOCKER_LABEL_KEY: the kernel's relay key */
    /* DOCKER_LABEL_UID, the sandbox uid of user code: -1 when absent or not a positive
     * 32-bit number (a container made by an older daemon, or not by us); as
     * docker_policy_uid(). */
    int64_t uid;
    char image_id[DOCKER_LIST_ID_MAX + 1]; /* "sha256:..." or "" */
    int64_t created;                       /* Unix seconds, 0 when absent */
};

/* A decoded list: n summaries in the engine's order, and an index by id. Owned by its caller. */
struct docker_container_list;

/* Decodes a list answer (an array, borrowed). Returns 0 with a new list in *ret, -EPROTO for
 * anything but an array of well-formed summaries (the message names the entry and the field;
 * a duplicate id is malformed too), -EMSGSIZE past DOCKER_LIST_MAX entries. */
int docker_container_list_decode(json_t *array, struct docker_container_list **ret,
                                 struct err *reterr);
/* Parses and decodes a list answer's text (len bytes): as docker_container_list_decode(). */
int docker_container_list_parse(const char *data, size_t len, struct docker_container_list **ret,
                                struct err *reterr);
/* Accepts NULL; returns NULL. */
struct docker_container_list *docker_container_list_free(struct docker_container_list *l);

size_t docker_container_list_size(const struct docker_container_list *l);
/* The i-th summary (i < size), borrowed from l. */
const struct docker_container_summary *
docker_container_list_at(const struct docker_container_list *l, size_t i);
/* The summary of the container whose full id is id, or NULL. O(1). */
const struct docker_container_summary *
docker_container_list_find(const struct docker_container_list *l, const char *id);
/* True when the list holds container id in the running state. */
bool docker_container_list_running(const struct docker_container_list *l, const char *id);

/* Decodes one list entry (an object, borrowed) into *ret: 0, or -EPROTO (*ret untouched). */
int docker_container_summary_decode(json_t *obj, struct docker_container_summary *ret,
                                    struct err *reterr);

const char *docker_container_state_to_string(enum docker_container_state s);
/* DOCKER_CONTAINER_OTHER for a state the daemon does not know (never __INVALID). */
enum docker_container_state docker_container_state_from_string(const char *s);

/* An event's object type. The daemon asks only for container events (api.h: docker_events). */
enum docker_event_type {
    DOCKER_EVENT_TYPE_CONTAINER,
    DOCKER_EVENT_TYPE_OTHER, /* another type, or none given */
    DOCKER_EVENT_TYPE__COUNT,
    DOCKER_EVENT_TYPE__INVALID = -22,
};

/* What happened. Docker suffixes some actions with details ("exec_start: sh -c ...",
 * "health_status: healthy"): only the part before ':' names the action. Podman's "remove" is
 * DOCKER_EVENT_DESTROY and its "exec_died" DOCKER_EVENT_EXEC_DIE (engine.md §6). */
enum docker_event_action {
    DOCKER_EVENT_CREATE,
    DOCKER_EVENT_START,
    DOCKER_EVENT_DIE, /* the container's process exited (exit_code) */
    DOCKER_EVENT_OOM, /* Docker sends it before its "die"; Podman never does (engine.md §6) */
    DOCKER_EVENT_KILL,
    DOCKER_EVENT_STOP,
    DOCKER_EVENT_DESTROY, /* removed */
    DOCKER_EVENT_EXEC_CREATE,
    DOCKER_EVENT_EXEC_START,
    DOCKER_EVENT_EXEC_DIE,
    DOCKER_EVENT_OTHER, /* an action the daemon does not act on (attach, pause, rename...) */
    DOCKER_EVENT__COUNT,
    DOCKER_EVENT__INVALID = -22,
};

struct docker_event {
    enum docker_event_type type;
    enum docker_event_action action;
    char actor_id[DOCKER_LIST_ID_MAX + 1]; /* the container's id */
    int exit_code;                         /* Actor.Attributes.exitCode, or -1 */
    int64_t time;                          /* Unix seconds, 0 when absent */
};

/* Decodes one event object (borrowed; as docker_events delivers it, after the engine's quirks are
 * normalised). Returns 0, or -EPROTO when Action or Actor.ID is missing or malformed, or a field
 * has the wrong type (*ret untouched). */
int docker_event_decode(json_t *obj, struct docker_event *ret, struct err *reterr);
/* The action's name as Docker spells it ("die", "destroy", "exec_die"...; "other"). */
const char *docker_event_action_to_string(enum docker_event_action a);
/* True for the actions after which the container no longer runs: die and destroy. */
bool docker_event_action_ends_container(enum docker_event_action a);
