/* Fuzz target: the typed container list and event decoders (src/docker/list.c). The whole input
 * is decoded as a list answer; then it is split like an events stream (newline-delimited) and
 * each object is decoded both as an event and as a list entry. Checks: a decode either fails
 * with -EPROTO or -EMSGSIZE and a message, or every string it produced fits its field, every
 * enum is in range, and every listed id is found again by the index. */
#include <errno.h>
#include <string.h>

#include <jansson.h>

#include "docker/json.h"
#include "docker/list.h"
#include "fuzz.h"

static void
check_summary(const struct docker_container_summary *s)
{
    CHECK(strlen(s->id) > 0 && strlen(s->id) <= DOCKER_LIST_ID_MAX);
    CHECK(strlen(s->name) <= DOCKER_LIST_NAME_MAX);
    CHECK(strlen(s->owner) <= DOCKER_LIST_LABEL_MAX && strlen(s->profile) <= DOCKER_LIST_LABEL_MAX);
    CHECK(strlen(s->slot) <= DOCKER_LIST_LABEL_MAX && strlen(s->key) <= DOCKER_LIST_LABEL_MAX);
    CHECK(strlen(s->image_id) <= DOCKER_LIST_ID_MAX);
    CHECK(s->state >= 0 && s->state < DOCKER_CONTAINER__COUNT);
    CHECK(s->uid >= -1 && s->uid <= (int64_t)UINT32_MAX && s->uid != 0);
}

static void
on_obj(json_t *obj, void *userdata)
{
    struct docker_container_summary s;
    struct docker_event ev;
    struct err e = {0};
    int r;

    r = docker_event_decode(obj, &ev, &e);
    CHECK(r == 0 || (r == -EPROTO && e.msg[0] != '\0'));
    if (r == 0) {
        CHECK(strlen(ev.actor_id) > 0 && strlen(ev.actor_id) <= DOCKER_LIST_ID_MAX);
        CHECK(ev.action >= 0 && ev.action < DOCKER_EVENT__COUNT);
        CHECK(ev.type >= 0 && ev.type < DOCKER_EVENT_TYPE__COUNT);
        CHECK(ev.exit_code >= -1 && ev.exit_code <= 255);
        CHECK(strcmp(docker_event_action_to_string(ev.action), "invalid") != 0);
    }
    r = docker_container_summary_decode(obj, &s, &e);
    CHECK(r == 0 || r == -EPROTO);
    if (r == 0) {
        check_summary(&s);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct docker_container_list *l = NULL;
    struct buf b = BUF_INIT(1 << 20);
    struct err e = {0};
    int r;

    r = docker_container_list_parse((const char *)data, size, &l, &e);
    CHECK(r == 0 || ((r == -EPROTO || r == -EMSGSIZE) && e.msg[0] != '\0' && l == NULL));
    for (size_t i = 0; r == 0 && i < docker_container_list_size(l); i++) {
        const struct docker_container_summary *s = docker_container_list_at(l, i);

        check_summary(s);
        CHECK(docker_container_list_find(l, s->id) == s);
        CHECK(docker_container_list_running(l, s->id) == (s->state == DOCKER_CONTAINER_RUNNING));
    }
    docker_container_list_free(l);
    if (buf_append(&b, data, size) == 0 && buf_append(&b, "\n", 1) == 0) {
        (void)docker_json_split_lines(&b, 1 << 20, on_obj, NULL);
    }
    buf_done(&b);
    return 0;
}
