/* Fuzz target: engine answers through the engine-difference rewrites (src/docker/quirks.c) and
 * then the policy check, the way http.c and pool.c use them. The input is one JSON document,
 * parsed as docker_json_parse() parses an engine answer (at most 1 MiB here; the client caps
 * answers too). For each engine, on copies of it:
 *
 *   normalize_inspect(), then docker_policy_verify() against three fixed profiles (the built-in
 *   one, a gVisor one that leaves the process cap to the runtime, and one with a seccomp profile
 *   read);
 *   normalize_event();
 *   adapt_create(), as if the document were a create body.
 *
 * The target aborts when Docker's rewrites change anything; when Podman's inspect rewrite is not
 * idempotent or touches a document without a HostConfig object; when Podman's event rewrite
 * changes anything but Action and status, or those other than "remove" -> "destroy" and
 * "exec_died" -> "exec_die"; when an adapted Podman tmpfs keeps a uid=/gid= or lacks
 * notmpcopyup or a seccomp profile by content; or when a refusal lacks its errno or message. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config/config.h"
#include "docker/json.h"
#include "docker/policy.h"
#include "docker/quirks.h"
#include "fuzz.h"

#define INPUT_MAX (1u << 20)

/* The profiles every document is checked against; built once, reachable until exit. */
static struct cfg *
profiles(void)
{
    static struct cfg *c;
    static const char json[] =
        "{\"profiles\": {\"python\": {}, \"g\": {\"runtime\": \"runsc\", \"pids_enforced_by\":"
        " \"runtime\", \"nproc\": 100, \"pids\": 100, \"command\": [\"/bin/sleep\", \"1\"]},"
        " \"s\": {}}}";
    struct err e = {0};

    if (c == NULL) {
        c = cfg_new();
        CHECK(cfg_load_json(c, json, strlen(json), &e) == 0 && cfg_validate(c, &e) == 0);
        /* As cfg_load_seccomp() leaves it: the profile read, borrowed. */
        c->profiles[2].seccomp = "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"syscalls\":[]}";
        c->profiles[2].seccomp_path = "/usr/share/sandpool/seccomp.json";
    }
    return c;
}

static void
check_refusal(int r, const struct err *e)
{
    CHECK(r < 0 && e->code == r && e->msg[0] != '\0');
    CHECK(memchr(e->msg, '\0', sizeof(e->msg)) != NULL);
}

static void
check_verify(json_t *inspect)
{
    const struct cfg *c = profiles();

    for (size_t i = 0; i < c->n_profiles; i++) {
        struct err e = {0};
        int r = docker_policy_verify(inspect, &c->profiles[i], 1000, &e);

        if (r < 0) {
            check_refusal(r, &e);
            CHECK(r == -EPERM || r == -EPROTO);
        }
    }
}

static void
check_inspect(const struct docker_quirks *q, json_t *root)
{
    json_t *in = json_deep_copy(root);
    json_t *again;

    CHECK(in != NULL);
    docker_quirks_normalize_inspect(q, in);
    if (q->engine == DOCKER_ENGINE_DOCKER || !json_is_object(json_object_get(root, "HostConfig"))) {
        CHECK(json_equal(in, root));
    }
    again = json_deep_copy(in);
    CHECK(again != NULL);
    docker_quirks_normalize_inspect(q, again);
    CHECK(json_equal(again, in));
    json_decref(again);
    check_verify(in);
    json_decref(in);
}

/* Whether Podman's event rewrite may have turned was into now. */
static bool
renamed_ok(json_t *was, json_t *now)
{
    const char *a = json_string_value(was), *b = json_string_value(now);

    if (json_equal(was, now)) {
        return true;
    }
    return a != NULL && b != NULL &&
           ((strcmp(a, "remove") == 0 && strcmp(b, "destroy") == 0) ||
            (strcmp(a, "exec_died") == 0 && strcmp(b, "exec_die") == 0));
}

static void
check_event(const struct docker_quirks *q, json_t *root)
{
    json_t *ev = json_deep_copy(root);
    const char *key;
    json_t *v;

    CHECK(ev != NULL);
    docker_quirks_normalize_event(q, ev);
    if (q->engine == DOCKER_ENGINE_DOCKER || !json_is_object(root)) {
        CHECK(json_equal(ev, root));
    } else {
        CHECK(json_object_size(ev) == json_object_size(root));
        json_object_foreach (root, key, v) {
            json_t *now = json_object_get(ev, key);

            if (strcmp(key, "Action") == 0 || strcmp(key, "status") == 0) {
                CHECK(renamed_ok(v, now));
            } else {
                CHECK(json_equal(v, now));
            }
        }
    }
    json_decref(ev);
}

/* A tmpfs option list as Podman gets it: no uid=/gid= item, and notmpcopyup last. */
static void
check_adapted_opts(const char *opts)
{
    size_t len = strlen(opts), tail = strlen("notmpcopyup");
    const char *p = opts;

    CHECK(len >= tail && strcmp(opts + len - tail, "notmpcopyup") == 0);
    CHECK(len == tail || opts[len - tail - 1] == ',');
    while (*p != '\0') {
        size_t n = strcspn(p, ",");

        CHECK(!(n > 4 && (strncmp(p, "uid=", 4) == 0 || strncmp(p, "gid=", 4) == 0)));
        p += n;
        p += *p == ',';
    }
}

static void
check_adapt(const struct docker_quirks *q, json_t *root)
{
    json_t *body = json_deep_copy(root);
    json_t *tmpfs = json_object_get(json_object_get(body, "HostConfig"), "Tmpfs");
    struct err e = {0};
    const char *path;
    json_t *v;
    int r;

    CHECK(body != NULL);
    r = docker_quirks_adapt_create(q, body, &e);
    if (q->engine == DOCKER_ENGINE_DOCKER) {
        CHECK(r == 0 && json_equal(body, root));
    } else if (r < 0) {
        check_refusal(r, &e);
        CHECK(r == -EOPNOTSUPP);
    } else {
        size_t i;

        if (json_is_object(tmpfs)) {
            CHECK(json_object_get(tmpfs, "/run") != NULL &&
                  json_object_get(tmpfs, "/var/tmp") != NULL);
            json_object_foreach (tmpfs, path, v) {
                if (json_is_string(v)) {
                    check_adapted_opts(json_string_value(v));
                }
            }
        }
        json_array_foreach (json_object_get(json_object_get(body, "HostConfig"), "SecurityOpt"), i,
                            v) {
            CHECK(!json_is_string(v) || strncmp(json_string_value(v), "seccomp={", 9) != 0);
        }
    }
    json_decref(body);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const enum docker_engine engines[] = {DOCKER_ENGINE_DOCKER, DOCKER_ENGINE_PODMAN};
    struct err e = {0};
    json_t *root = NULL;

    if (size > INPUT_MAX || docker_json_parse((const char *)data, size, &root, &e) < 0) {
        return 0;
    }
    for (size_t i = 0; i < sizeof(engines) / sizeof(engines[0]); i++) {
        const struct docker_quirks *q = docker_quirks_of(engines[i]);

        check_inspect(q, root);
        check_event(q, root);
        check_adapt(q, root);
    }
    check_verify(root);
    json_decref(root);
    return 0;
}
