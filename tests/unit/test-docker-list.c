/* Unit tests of the typed container list and event decoders (src/docker/list.c): a table of
 * engine answers that must decode, with what they decode to, and one of answers that must not,
 * with the error and the message. */
#include <errno.h>

#include <jansson.h>

#include "docker/list.h"
#include "docker/policy.h"
#include "tap.h"
#include "util/macro.h"

#define ID_A "4f1c2d0a9b8e7f6a5d4c3b2a19080706f5e4d3c2b1a0918273645546372819a0"
#define ID_B "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b"

/* A Docker 20.10 list entry, as `GET /containers/json?all=1` sends it (trimmed of the fields
 * nobody reads: Ports, Mounts, NetworkSettings, HostConfig, SizeRw...). */
#define DOCKER_ENTRY                                                                          \
    "{\"Id\":\"" ID_A "\",\"Names\":[\"/sandpool-0123456789abcdef0123456789abcdef\"],"        \
    "\"Image\":\"sandpool/python:latest\",\"ImageID\":\"sha256:" ID_B "\","                   \
    "\"Command\":\"/usr/bin/python3 -u /opt/sandbox/kernel.py\",\"Created\":1764650000,"      \
    "\"Ports\":[],\"Labels\":{\"sandpool.owner\":\"node-1\",\"sandpool.profile\":\"python\"," \
    "\"sandpool.slot\":\"0123456789abcdef0123456789abcdef\",\"sandpool.schema\":\"2\","       \
    "\"sandpool.key\":\"fedcba9876543210fedcba9876543210\",\"sandpool.uid\":\"2000000\"},"    \
    "\"State\":\"running\",\"Status\":\"Up 3 minutes\",\"HostConfig\":{\"NetworkMode\":\"none\"}}"

TEST(summary_docker)
{
    struct docker_container_list *l = NULL;
    const struct docker_container_summary *s;
    const char *text = "[" DOCKER_ENTRY "]";
    struct err e = {0};

    ASSERT_OK(docker_container_list_parse(text, strlen(text), &l, &e));
    ASSERT_EQ_U(docker_container_list_size(l), 1);
    s = docker_container_list_at(l, 0);
    ASSERT_STREQ(s->id, ID_A);
    ASSERT_STREQ(s->name, "sandpool-0123456789abcdef0123456789abcdef");
    ASSERT_EQ_I(s->state, DOCKER_CONTAINER_RUNNING);
    ASSERT_STREQ(s->owner, "node-1");
    ASSERT_STREQ(s->profile, "python");
    ASSERT_STREQ(s->slot, "0123456789abcdef0123456789abcdef");
    ASSERT_STREQ(s->key, "fedcba9876543210fedcba9876543210");
    ASSERT_EQ_I(s->uid, 2000000);
    ASSERT_STREQ(s->image_id, "sha256:" ID_B);
    ASSERT_EQ_I(s->created, 1764650000);
    ASSERT_TRUE(docker_container_list_find(l, ID_A) == s);
    ASSERT_TRUE(docker_container_list_find(l, ID_B) == NULL);
    ASSERT_TRUE(docker_container_list_find(l, "4f1c2d0a9b8e") == NULL); /* full ids only */
    ASSERT_TRUE(docker_container_list_running(l, ID_A));
    ASSERT_TRUE(!docker_container_list_running(l, ID_B));
    l = docker_container_list_free(l);
    ASSERT_TRUE(docker_container_list_free(NULL) == NULL);
}

/* Podman 4.3's compatible list: Names without '/', null Labels possible, its own states passed
 * through, ImageID without the sha256: prefix. */
TEST(summary_podman_and_states)
{
    const char *text =
        "[{\"Id\":\"" ID_A "\",\"Names\":[\"sandpool-x\"],\"ImageID\":\"" ID_B "\","
        "\"Created\":1764650001,\"Labels\":null,\"State\":\"configured\",\"Status\":\"Created\"},"
        "{\"Id\":\"" ID_B
        "\",\"Names\":[],\"Labels\":{\"sandpool.uid\":\"0\"},\"State\":\"exited\"}"
        "]";
    struct docker_container_list *l = NULL;
    const struct docker_container_summary *s;
    struct err e = {0};

    ASSERT_OK(docker_container_list_parse(text, strlen(text), &l, &e));
    ASSERT_EQ_U(docker_container_list_size(l), 2);
    s = docker_container_list_find(l, ID_A);
    ASSERT_TRUE(s != NULL && s->state == DOCKER_CONTAINER_OTHER && s->uid == -1);
    ASSERT_STREQ(s->name, "sandpool-x");
    ASSERT_STREQ(s->profile, "");
    ASSERT_STREQ(s->slot, "");
    s = docker_container_list_find(l, ID_B);
    ASSERT_TRUE(s != NULL && s->state == DOCKER_CONTAINER_EXITED);
    ASSERT_EQ_I(s->uid, -1); /* "0" is no sandbox uid */
    ASSERT_STREQ(s->name, "");
    ASSERT_EQ_I(s->created, 0);
    ASSERT_TRUE(!docker_container_list_running(l, ID_B));
    docker_container_list_free(l);

    ASSERT_OK(docker_container_list_parse("[]", 2, &l, &e));
    ASSERT_EQ_U(docker_container_list_size(l), 0);
    docker_container_list_free(l);

    for (int i = 0; i < DOCKER_CONTAINER__COUNT; i++) {
        const char *name = docker_container_state_to_string((enum docker_container_state)i);

        ASSERT_EQ_I(docker_container_state_from_string(name), i);
    }
    ASSERT_EQ_I(docker_container_state_from_string("Running"), DOCKER_CONTAINER_OTHER);
    ASSERT_STREQ(docker_container_state_to_string(DOCKER_CONTAINER__INVALID), "invalid");
}

static const struct {
    const char *json;
    int err;
    const char *msg; /* a part of the message */
} bad_lists[] = {
    {"{}", EPROTO, "not an array"},
    {"null", EPROTO, "not JSON"}, /* jansson takes objects and arrays only */
    {"[1]", EPROTO, "not an object"},
    {"[{}]", EPROTO, "no 'Id' string"},
    {"[{\"Id\":7,\"State\":\"running\"}]", EPROTO, "no 'Id' string"},
    {"[{\"Id\":\"\",\"State\":\"running\"}]", EPROTO, "not a container id"},
    {"[{\"Id\":\"../etc\",\"State\":\"running\"}]", EPROTO, "not a container id"},
    {"[{\"Id\":\"-rf\",\"State\":\"running\"}]", EPROTO, "not a container id"},
    {"[{\"Id\":\"" ID_A "\"}]", EPROTO, "container 4f1c2d0a9b8e: no 'State' string"},
    {"[{\"Id\":\"" ID_A "\",\"State\":true}]", EPROTO, "no 'State' string"},
    {"[{\"Id\":\"" ID_A "\",\"State\":\"running\",\"Labels\":[]}]", EPROTO,
     "'Labels' is not an object"},
    {"[{\"Id\":\"" ID_A "\",\"State\":\"running\",\"Labels\":{\"sandpool.slot\":5}}]", EPROTO,
     "'sandpool.slot' is not a string"},
    {"[{\"Id\":\"" ID_A "\",\"State\":\"running\",\"Labels\":{\"sandpool.uid\":2000000}}]", EPROTO,
     "'sandpool.uid' is not a string"},
    {"[{\"Id\":\"" ID_A "\",\"State\":\"running\",\"Names\":\"/x\"}]", EPROTO,
     "'Names' is not an array"},
    {"[{\"Id\":\"" ID_A "\",\"State\":\"running\",\"Names\":[null]}]", EPROTO,
     "'Names[0]' is not a string"},
    {"[{\"Id\":\"" ID_A "\",\"State\":\"running\",\"ImageID\":{}}]", EPROTO,
     "'ImageID' is not a string"},
    {"[{\"Id\":\"" ID_A "\",\"State\":\"running\",\"Created\":\"yesterday\"}]", EPROTO,
     "'Created' is not an integer"},
    {"[{\"Id\":\"" ID_A "\",\"State\":\"running\"},{\"Id\":\"" ID_A "\",\"State\":\"exited\"}]",
     EPROTO, "listed twice"},
    {"[{\"Id\":\"" ID_A "\",\"State\":\"running\"},{\"State\":\"exited\"}]", EPROTO,
     "no 'Id' string"},
    {"[{\"Id\":\"" ID_A "\"", EPROTO, "not JSON"},
};

TEST(summary_bad)
{
    for (size_t i = 0; i < ELEMENTSOF(bad_lists); i++) {
        struct docker_container_list *l = (void *)&bad_lists; /* must stay untouched */
        struct err e = {0};

        ASSERT_ERR(
            docker_container_list_parse(bad_lists[i].json, strlen(bad_lists[i].json), &l, &e),
            bad_lists[i].err);
        TAP_CHECK(strstr(e.msg, bad_lists[i].msg) != NULL, "[%zu] '%s' says '%s'", i, e.msg,
                  bad_lists[i].msg);
        ASSERT_TRUE(l == (void *)&bad_lists);
    }
}

/* A label or name past its field decodes as absent (nothing is cut), an id past its field is
 * malformed, and a count past DOCKER_LIST_MAX too big. */
TEST(summary_bounds)
{
    char label[DOCKER_LIST_LABEL_MAX + 2], name[DOCKER_LIST_NAME_MAX + 3],
        id[DOCKER_LIST_ID_MAX + 2];
    struct docker_container_summary s = {0};
    struct docker_container_list *l = NULL;
    struct err e = {0};
    json_t *o, *arr;

    memset(label, 'a', sizeof(label) - 1);
    label[sizeof(label) - 1] = '\0';
    memset(name, 'n', sizeof(name) - 1);
    name[0] = '/';
    name[sizeof(name) - 1] = '\0';
    o = json_pack("{s:s, s:s, s:[s], s:{s:s, s:s, s:s}}", "Id", ID_A, "State", "running", "Names",
                  name, "Labels", DOCKER_LABEL_PROFILE, label, DOCKER_LABEL_SLOT, "s1",
                  DOCKER_LABEL_UID, "99999999999");
    ASSERT_OK(docker_container_summary_decode(o, &s, &e));
    ASSERT_STREQ(s.profile, "");
    ASSERT_STREQ(s.name, "");
    ASSERT_STREQ(s.slot, "s1");
    ASSERT_EQ_I(s.uid, -1);          /* past 32 bits */
    label[sizeof(label) - 2] = '\0'; /* exactly DOCKER_LIST_LABEL_MAX */
    name[sizeof(name) - 2] = '\0';   /* exactly DOCKER_LIST_NAME_MAX after the '/' */
    json_object_set_new(json_object_get(o, "Labels"), DOCKER_LABEL_PROFILE, json_string(label));
    json_array_set_new(json_object_get(o, "Names"), 0, json_string(name));
    ASSERT_OK(docker_container_summary_decode(o, &s, &e));
    ASSERT_EQ_U(strlen(s.profile), DOCKER_LIST_LABEL_MAX);
    ASSERT_EQ_U(strlen(s.name), DOCKER_LIST_NAME_MAX);
    json_decref(o);

    memset(id, 'b', sizeof(id) - 1);
    id[sizeof(id) - 1] = '\0';
    o = json_pack("{s:s, s:s}", "Id", id, "State", "running");
    ASSERT_ERR(docker_container_summary_decode(o, &s, &e), EPROTO);
    json_decref(o);

    arr = json_array();
    for (unsigned i = 0; i <= DOCKER_LIST_MAX; i++) {
        json_array_append_new(arr, json_null()); /* the count is checked before any entry */
    }
    ASSERT_ERR(docker_container_list_decode(arr, &l, &e), EMSGSIZE);
    ASSERT_TRUE(l == NULL);
    json_decref(arr);
}

static const struct {
    const char *json;
    enum docker_event_type type;
    enum docker_event_action action;
    int exit_code;
    int64_t time;
} good_events[] = {
    /* Docker 20.10 */
    {"{\"status\":\"die\",\"id\":\"" ID_A "\",\"from\":\"sandpool/python\",\"Type\":\"container\","
     "\"Action\":\"die\",\"Actor\":{\"ID\":\"" ID_A "\",\"Attributes\":{\"exitCode\":\"137\","
     "\"image\":\"sandpool/python\",\"sandpool.owner\":\"node-1\"}},\"scope\":\"local\","
     "\"time\":1764650100,\"timeNano\":1764650100123456789}",
     DOCKER_EVENT_TYPE_CONTAINER, DOCKER_EVENT_DIE, 137, 1764650100},
    {"{\"Type\":\"container\",\"Action\":\"oom\",\"Actor\":{\"ID\":\"" ID_A "\","
     "\"Attributes\":{}},\"time\":1}",
     DOCKER_EVENT_TYPE_CONTAINER, DOCKER_EVENT_OOM, -1, 1},
    {"{\"Type\":\"container\",\"Action\":\"exec_start: python3 -c print(1)\","
     "\"Actor\":{\"ID\":\"" ID_A "\"}}",
     DOCKER_EVENT_TYPE_CONTAINER, DOCKER_EVENT_EXEC_START, -1, 0},
    {"{\"Type\":\"container\",\"Action\":\"exec_die\",\"Actor\":{\"ID\":\"" ID_A "\","
     "\"Attributes\":{\"exitCode\":\"0\",\"execID\":\"" ID_B "\"}}}",
     DOCKER_EVENT_TYPE_CONTAINER, DOCKER_EVENT_EXEC_DIE, 0, 0},
    {"{\"Type\":\"container\",\"Action\":\"health_status: healthy\",\"Actor\":{\"ID\":\"" ID_A
     "\"}}",
     DOCKER_EVENT_TYPE_CONTAINER, DOCKER_EVENT_OTHER, -1, 0},
    {"{\"Type\":\"container\",\"Action\":\"destroy\",\"Actor\":{\"ID\":\"" ID_A "\"}}",
     DOCKER_EVENT_TYPE_CONTAINER, DOCKER_EVENT_DESTROY, -1, 0},
    /* Podman 4.3's compatible stream, its own names (normally renamed by docker/quirks.c) */
    {"{\"status\":\"remove\",\"id\":\"" ID_A "\",\"Type\":\"container\",\"Action\":\"remove\","
     "\"Actor\":{\"ID\":\"" ID_A "\",\"Attributes\":{\"containerExitCode\":\"0\"}},"
     "\"scope\":\"local\",\"time\":1764650200,\"timeNano\":1764650200000000000}",
     DOCKER_EVENT_TYPE_CONTAINER, DOCKER_EVENT_DESTROY, -1, 1764650200},
    {"{\"Type\":\"container\",\"Action\":\"exec_died\",\"Actor\":{\"ID\":\"" ID_A "\"}}",
     DOCKER_EVENT_TYPE_CONTAINER, DOCKER_EVENT_EXEC_DIE, -1, 0},
    {"{\"Type\":\"image\",\"Action\":\"pull\",\"Actor\":{\"ID\":\"sandpool.python\"}}",
     DOCKER_EVENT_TYPE_OTHER, DOCKER_EVENT_OTHER, -1, 0},
    {"{\"Action\":\"start\",\"Actor\":{\"ID\":\"" ID_A "\"}}", DOCKER_EVENT_TYPE_OTHER,
     DOCKER_EVENT_START, -1, 0},
    {"{\"Action\":\"died\",\"Actor\":{\"ID\":\"" ID_A "\"}}", DOCKER_EVENT_TYPE_OTHER,
     DOCKER_EVENT_OTHER, -1, 0},
    /* A die whose exit code or time cannot be read still counts (both are informational). */
    {"{\"Action\":\"die\",\"Actor\":{\"ID\":\"" ID_A "\",\"Attributes\":[]}}",
     DOCKER_EVENT_TYPE_OTHER, DOCKER_EVENT_DIE, -1, 0},
    {"{\"Action\":\"die\",\"Actor\":{\"ID\":\"" ID_A "\",\"Attributes\":{\"exitCode\":137}}}",
     DOCKER_EVENT_TYPE_OTHER, DOCKER_EVENT_DIE, -1, 0},
    {"{\"Action\":\"die\",\"Actor\":{\"ID\":\"" ID_A "\",\"Attributes\":{\"exitCode\":\"-1\"}}}",
     DOCKER_EVENT_TYPE_OTHER, DOCKER_EVENT_DIE, -1, 0},
    {"{\"Action\":\"die\",\"Actor\":{\"ID\":\"" ID_A "\",\"Attributes\":{\"exitCode\":\"256\"}}}",
     DOCKER_EVENT_TYPE_OTHER, DOCKER_EVENT_DIE, -1, 0},
    {"{\"Action\":\"die\",\"time\":\"now\",\"Actor\":{\"ID\":\"" ID_A "\"}}",
     DOCKER_EVENT_TYPE_OTHER, DOCKER_EVENT_DIE, -1, 0},
};

TEST(events_good)
{
    for (size_t i = 0; i < ELEMENTSOF(good_events); i++) {
        json_t *o = json_loads(good_events[i].json, 0, NULL);
        struct docker_event ev = {0};
        struct err e = {0};

        ASSERT_TRUE(o != NULL);
        ASSERT_OK(docker_event_decode(o, &ev, &e));
        ASSERT_EQ_I(ev.type, good_events[i].type);
        TAP_CHECK(ev.action == good_events[i].action, "[%zu] action %s, want %s", i,
                  docker_event_action_to_string(ev.action),
                  docker_event_action_to_string(good_events[i].action));
        ASSERT_EQ_I(ev.exit_code, good_events[i].exit_code);
        ASSERT_EQ_I(ev.time, good_events[i].time);
        ASSERT_TRUE(strcmp(ev.actor_id, ID_A) == 0 || strcmp(ev.actor_id, "sandpool.python") == 0);
        json_decref(o);
    }
    ASSERT_TRUE(docker_event_action_ends_container(DOCKER_EVENT_DIE));
    ASSERT_TRUE(docker_event_action_ends_container(DOCKER_EVENT_DESTROY));
    ASSERT_TRUE(!docker_event_action_ends_container(DOCKER_EVENT_OOM));
    ASSERT_TRUE(!docker_event_action_ends_container(DOCKER_EVENT_EXEC_DIE));
    ASSERT_STREQ(docker_event_action_to_string(DOCKER_EVENT__INVALID), "invalid");
    for (int i = 0; i < DOCKER_EVENT__COUNT; i++) {
        ASSERT_TRUE(docker_event_action_to_string((enum docker_event_action)i)[0] != '\0');
    }
}

static const struct {
    const char *json;
    const char *msg;
} bad_events[] = {
    {"[]", "not an object"},
    {"{\"Actor\":{\"ID\":\"" ID_A "\"}}", "no 'Action' string"},
    {"{\"Action\":5,\"Actor\":{\"ID\":\"" ID_A "\"}}", "no 'Action' string"},
    {"{\"Action\":\"die\"}", "no 'Actor' object"},
    {"{\"Action\":\"die\",\"Actor\":\"" ID_A "\"}", "no 'Actor' object"},
    {"{\"Action\":\"die\",\"Actor\":{}}", "no 'Actor.ID' string"},
    {"{\"Action\":\"die\",\"Actor\":{\"ID\":\"a/b\"}}", "not a container id"},
    {"{\"Action\":\"die\",\"Type\":1,\"Actor\":{\"ID\":\"" ID_A "\"}}", "'Type' is not a string"},
};

TEST(events_bad)
{
    for (size_t i = 0; i < ELEMENTSOF(bad_events); i++) {
        json_t *o = json_loads(bad_events[i].json, 0, NULL);
        struct docker_event ev = {.exit_code = 42};
        struct err e = {0};

        ASSERT_TRUE(o != NULL);
        ASSERT_ERR(docker_event_decode(o, &ev, &e), EPROTO);
        TAP_CHECK(strstr(e.msg, bad_events[i].msg) != NULL, "[%zu] '%s' says '%s'", i, e.msg,
                  bad_events[i].msg);
        ASSERT_EQ_I(ev.exit_code, 42); /* untouched */
        json_decref(o);
    }
}

int
main(void)
{
    RUN(summary_docker);
    RUN(summary_podman_and_states);
    RUN(summary_bad);
    RUN(summary_bounds);
    RUN(events_good);
    RUN(events_bad);
    return tap_done();
}
