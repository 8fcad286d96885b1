/* Container list and event decoding; see list.h.
 *
 * A decode either fills its whole result or returns an error and leaves the caller's out-parameter
 * untouched: a summary is built on the stack, a list in a new allocation freed on failure. Strings
 * are copied only after their length was checked against their field, so nothing is ever cut;
 * the engine's own bound on an answer (docker/api.c, max_response) bounds the work, and
 * DOCKER_LIST_MAX the allocation. */
#include "list.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "docker/api.h"
#include "docker/json.h"
#include "docker/policy.h"
#include "util/hashmap.h"
#include "util/macro.h"
#include "util/parse.h"

struct docker_container_list {
    struct docker_container_summary *items;
    size_t n;
    struct hashmap *by_id; /* id -> items[i], borrowed */
};

static const char *const state_names[DOCKER_CONTAINER__COUNT] = {
    [DOCKER_CONTAINER_CREATED] = "created",   [DOCKER_CONTAINER_RUNNING] = "running",
    [DOCKER_CONTAINER_PAUSED] = "paused",     [DOCKER_CONTAINER_RESTARTING] = "restarting",
    [DOCKER_CONTAINER_REMOVING] = "removing", [DOCKER_CONTAINER_EXITED] = "exited",
    [DOCKER_CONTAINER_DEAD] = "dead",         [DOCKER_CONTAINER_OTHER] = "other",
};

static const char *const action_names[DOCKER_EVENT__COUNT] = {
    [DOCKER_EVENT_CREATE] = "create",
    [DOCKER_EVENT_START] = "start",
    [DOCKER_EVENT_DIE] = "die",
    [DOCKER_EVENT_OOM] = "oom",
    [DOCKER_EVENT_KILL] = "kill",
    [DOCKER_EVENT_STOP] = "stop",
    [DOCKER_EVENT_DESTROY] = "destroy",
    [DOCKER_EVENT_EXEC_CREATE] = "exec_create",
    [DOCKER_EVENT_EXEC_START] = "exec_start",
    [DOCKER_EVENT_EXEC_DIE] = "exec_die",
    [DOCKER_EVENT_OTHER] = "other",
};

const char *
docker_container_state_to_string(enum docker_container_state s)
{
    return s >= 0 && s < DOCKER_CONTAINER__COUNT ? state_names[s] : "invalid";
}

enum docker_container_state
docker_container_state_from_string(const char *s)
{
    for (int i = 0; i < DOCKER_CONTAINER_OTHER; i++) {
        if (strcmp(state_names[i], s) == 0) {
            return (enum docker_container_state)i;
        }
    }
    return DOCKER_CONTAINER_OTHER;
}

const char *
docker_event_action_to_string(enum docker_event_action a)
{
    return a >= 0 && a < DOCKER_EVENT__COUNT ? action_names[a] : "invalid";
}

bool
docker_event_action_ends_container(enum docker_event_action a)
{
    return a == DOCKER_EVENT_DIE || a == DOCKER_EVENT_DESTROY;
}

/* Copies string value v (of field what) into dst[size]: 0, or -EPROTO when it does not fit. */
static int
copy_string(char *dst, size_t size, const char *v, const char *ctx, const char *what,
            struct err *reterr)
{
    size_t n = strlen(v);

    if (n >= size) {
        return err_set(reterr, -EPROTO, "%s: '%s' is longer than %zu bytes", ctx, what, size - 1);
    }
    memcpy(dst, v, n + 1);
    return 0;
}

/* Copies v into dst[size] when it fits; a longer value leaves dst "" (see list.h: no label
 * the daemon writes is that long, so such a container is nobody's). */
static void
copy_if_fits(char *dst, size_t size, const char *v)
{
    size_t n = strlen(v);

    if (n < size) {
        memcpy(dst, v, n + 1);
    }
}

/* An optional string field: absent or null leaves dst "", another type is malformed. */
static int
opt_string(json_t *obj, const char *key, char *dst, size_t size, const char *ctx,
           struct err *reterr)
{
    json_t *v = json_object_get(obj, key);

    if (v == NULL || json_is_null(v)) {
        return 0;
    }
    if (!json_is_string(v)) {
        return err_set(reterr, -EPROTO, "%s: '%s' is not a string", ctx, key);
    }
    copy_if_fits(dst, size, json_string_value(v));
    return 0;
}

/* An optional integer field: absent or null gives 0; another type is malformed. */
static int
opt_int(json_t *obj, const char *key, int64_t *ret, const char *ctx, struct err *reterr)
{
    json_t *v = json_object_get(obj, key);

    if (v == NULL || json_is_null(v)) {
        *ret = 0;
        return 0;
    }
    if (!json_is_integer(v)) {
        return err_set(reterr, -EPROTO, "%s: '%s' is not an integer", ctx, key);
    }
    *ret = (int64_t)json_integer_value(v);
    return 0;
}

/* A container or actor id: a string usable in a URL path (docker_valid_id), at most
 * DOCKER_LIST_ID_MAX bytes. */
static int
take_id(json_t *v, char *dst, const char *ctx, const char *what, struct err *reterr)
{
    const char *id = json_string_value(v);

    if (id == NULL) {
        return err_set(reterr, -EPROTO, "%s: no '%s' string", ctx, what);
    }
    if (!docker_valid_id(id)) {
        return err_set(reterr, -EPROTO, "%s: '%s' is not a container id", ctx, what);
    }
    return copy_string(dst, DOCKER_LIST_ID_MAX + 1, id, ctx, what, reterr);
}

static int
take_labels(json_t *obj, struct docker_container_summary *s, const char *ctx, struct err *reterr)
{
    json_t *labels = json_object_get(obj, "Labels");
    json_t *uid;
    int r;

    s->uid = -1;
    if (labels == NULL || json_is_null(labels)) {
        return 0; /* Podman may send null for a container without labels */
    }
    if (!json_is_object(labels)) {
        return err_set(reterr, -EPROTO, "%s: 'Labels' is not an object", ctx);
    }
    if ((r = opt_string(labels, DOCKER_LABEL_OWNER, s->owner, sizeof(s->owner), ctx, reterr)) < 0 ||
        (r = opt_string(labels, DOCKER_LABEL_PROFILE, s->profile, sizeof(s->profile), ctx,
                        reterr)) < 0 ||
        (r = opt_string(labels, DOCKER_LABEL_SLOT, s->slot, sizeof(s->slot), ctx, reterr)) < 0 ||
        (r = opt_string(labels, DOCKER_LABEL_KEY, s->key, sizeof(s->key), ctx, reterr)) < 0) {
        return r;
    }
    uid = json_object_get(labels, DOCKER_LABEL_UID);
    if (uid != NULL && !json_is_null(uid) && !json_is_string(uid)) {
        return err_set(reterr, -EPROTO, "%s: '%s' is not a string", ctx, DOCKER_LABEL_UID);
    }
    s->uid = docker_policy_uid_value(json_string_value(uid));
    return 0;
}

/* Names[0] without Docker's leading '/' (the list gives every name of a container, links too). */
static int
take_name(json_t *obj, struct docker_container_summary *s, const char *ctx, struct err *reterr)
{
    json_t *names = json_object_get(obj, "Names");
    const char *name;

    if (names == NULL || json_is_null(names)) {
        return 0;
    }
    if (!json_is_array(names)) {
        return err_set(reterr, -EPROTO, "%s: 'Names' is not an array", ctx);
    }
    if (json_array_size(names) == 0) {
        return 0;
    }
    name = json_string_value(json_array_get(names, 0));
    if (name == NULL) {
        return err_set(reterr, -EPROTO, "%s: 'Names[0]' is not a string", ctx);
    }
    copy_if_fits(s->name, sizeof(s->name), name[0] == '/' ? name + 1 : name);
    return 0;
}

int
docker_container_summary_decode(json_t *obj, struct docker_container_summary *ret,
                                struct err *reterr)
{
    struct docker_container_summary s = {0};
    const char *state;
    char ctx[32]; /* "container <id>", for the messages */
    int r;

    if (!json_is_object(obj)) {
        return err_set(reterr, -EPROTO, "container list entry: not an object");
    }
    if ((r = take_id(json_object_get(obj, "Id"), s.id, "container list entry", "Id", reterr)) < 0) {
        return r;
    }
    (void)snprintf(ctx, sizeof(ctx), "container %.12s", s.id);
    state = json_string_value(json_object_get(obj, "State"));
    if (state == NULL) {
        return err_set(reterr, -EPROTO, "%s: no 'State' string", ctx);
    }
    s.state = docker_container_state_from_string(state);
    if ((r = take_labels(obj, &s, ctx, reterr)) < 0 || (r = take_name(obj, &s, ctx, reterr)) < 0 ||
        (r = opt_string(obj, "ImageID", s.image_id, sizeof(s.image_id), ctx, reterr)) < 0 ||
        (r = opt_int(obj, "Created", &s.created, ctx, reterr)) < 0) {
        return r;
    }
    *ret = s;
    return 0;
}

struct docker_container_list *
docker_container_list_free(struct docker_container_list *l)
{
    if (l == NULL) {
        return NULL;
    }
    hashmap_free(l->by_id);
    free(l->items);
    free(l);
    return NULL;
}

int
docker_container_list_decode(json_t *array, struct docker_container_list **ret, struct err *reterr)
{
    struct docker_container_list *l;
    size_t n = json_array_size(array);
    int r;

    if (!json_is_array(array)) {
        return err_set(reterr, -EPROTO, "the container list is not an array");
    }
    if (n > DOCKER_LIST_MAX) {
        return err_set(reterr, -EMSGSIZE, "the container list holds %zu containers, more than %u",
                       n, DOCKER_LIST_MAX);
    }
    l = xcalloc(1, sizeof(*l));
    l->items = xcalloc(n > 0 ? n : 1, sizeof(*l->items));
    l->by_id = OOM_CHECK(hashmap_new());
    for (size_t i = 0; i < n; i++) {
        struct docker_container_summary *s = &l->items[i];

        r = docker_container_summary_decode(json_array_get(array, i), s, reterr);
        if (r == 0 && hashmap_get(l->by_id, s->id) != NULL) {
            r = err_set(reterr, -EPROTO, "container %.12s is listed twice", s->id);
        }
        if (r < 0) {
            docker_container_list_free(l);
            return r;
        }
        hashmap_put(l->by_id, s->id, s);
        l->n++;
    }
    *ret = l;
    return 0;
}

int
docker_container_list_parse(const char *data, size_t len, struct docker_container_list **ret,
                            struct err *reterr)
{
    json_t *root;
    int r = docker_json_parse(data, len, &root, reterr);

    if (r < 0) {
        return r;
    }
    r = docker_container_list_decode(root, ret, reterr);
    json_decref(root);
    return r;
}

size_t
docker_container_list_size(const struct docker_container_list *l)
{
    return l->n;
}

const struct docker_container_summary *
docker_container_list_at(const struct docker_container_list *l, size_t i)
{
    assert(i < l->n);
    return &l->items[i];
}

const struct docker_container_summary *
docker_container_list_find(const struct docker_container_list *l, const char *id)
{
    return hashmap_get(l->by_id, id);
}

bool
docker_container_list_running(const struct docker_container_list *l, const char *id)
{
    const struct docker_container_summary *s = docker_container_list_find(l, id);

    return s != NULL && s->state == DOCKER_CONTAINER_RUNNING;
}

/* ---- events ---------------------------------------------------------------------------------- */

static enum docker_event_action
action_from_string(const char *a)
{
    static const char *const aliases[][2] = {{"remove", "destroy"}, {"exec_died", "exec_die"}};
    size_t n = strcspn(a, ":");

    for (size_t i = 0; i < ELEMENTSOF(aliases); i++) {
        if (strlen(aliases[i][0]) == n && strncmp(a, aliases[i][0], n) == 0) {
            a = aliases[i][1];
            n = strlen(a);
            break;
        }
    }
    for (int i = 0; i < DOCKER_EVENT_OTHER; i++) {
        if (strlen(action_names[i]) == n && strncmp(a, action_names[i], n) == 0) {
            return (enum docker_event_action)i;
        }
    }
    return DOCKER_EVENT_OTHER;
}

/* Actor.Attributes.exitCode: a decimal string ("137") on die events, absent elsewhere. Nothing
 * the daemon does depends on it, so one it cannot read (an engine's "-1" for an unknown code, a
 * number, attributes that are not an object) is absent (-1), and the event still counts: a die
 * dropped for its exit code would leave a dead container's session and slot standing. */
static int
take_exit_code(json_t *attrs)
{
    json_t *v = json_object_get(attrs, "exitCode");
    int code;

    if (!json_is_string(v) || parse_int(json_string_value(v), 0, 255, &code) < 0) {
        return -1;
    }
    return code;
}

int
docker_event_decode(json_t *obj, struct docker_event *ret, struct err *reterr)
{
    struct docker_event ev = {0};
    json_t *actor = json_object_get(obj, "Actor");
    const char *action = json_string_value(json_object_get(obj, "Action"));
    json_t *type = json_object_get(obj, "Type");
    int r;

    if (!json_is_object(obj)) {
        return err_set(reterr, -EPROTO, "event: not an object");
    }
    if (action == NULL) {
        return err_set(reterr, -EPROTO, "event: no 'Action' string");
    }
    if (!json_is_object(actor)) {
        return err_set(reterr, -EPROTO, "event: no 'Actor' object");
    }
    if (type != NULL && !json_is_null(type) && !json_is_string(type)) {
        return err_set(reterr, -EPROTO, "event: 'Type' is not a string");
    }
    ev.type =
        type != NULL && json_is_string(type) && strcmp(json_string_value(type), "container") == 0
            ? DOCKER_EVENT_TYPE_CONTAINER
            : DOCKER_EVENT_TYPE_OTHER;
    ev.action = action_from_string(action);
    if ((r = take_id(json_object_get(actor, "ID"), ev.actor_id, "event", "Actor.ID", reterr)) < 0) {
        return r;
    }
    ev.exit_code = take_exit_code(json_object_get(actor, "Attributes"));
    /* As the exit code: informational, so an unreadable time is absent (0). */
    if (opt_int(obj, "time", &ev.time, "event", NULL) < 0) {
        ev.time = 0;
    }
    *ret = ev;
    return 0;
}
