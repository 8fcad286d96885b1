/* sandpoolctl node ls: the nodes sharing this daemon's Redis, as its node registry last read
 * them (GET /v1/admin/nodes, docs/cluster.md). */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "ctl.h"
#include "util/macro.h"

static const char node_help[] =
    "Usage: sandpoolctl node ls\n"
    "\n"
    "ls  one line per node of the registry, newest heartbeat first: its id (* this one), the\n"
    "    URL the others reach it at, its state (live, draining, stopped, or lost: no heartbeat\n"
    "    for 3 of them), the age of its last heartbeat, its sessions, and per profile its\n"
    "    warm containers ready, bound and the most it holds (profile:ready/bound/max)\n";

static const char *
str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* "python:3/2/12 gpu:0/1/4" */
static void
format_capacity(const json_t *cap, char *out, size_t n)
{
    const char *profile;
    const json_t *p;
    size_t used = 0;

    out[0] = '\0';
    json_object_foreach ((json_t *)cap, profile, p) {
        int w = snprintf(out + used, n - used, "%s%s:%lld/%lld/%lld", used ? " " : "", profile,
                         (long long)json_integer_value(json_object_get(p, "ready")),
                         (long long)json_integer_value(json_object_get(p, "bound")),
                         (long long)json_integer_value(json_object_get(p, "max")));

        if (w < 0 || (size_t)w >= n - used) {
            break; /* cut: the JSON has it whole */
        }
        used += (size_t)w;
    }
    if (used == 0) {
        (void)snprintf(out, n, "-");
    }
}

static const char *
node_state(const json_t *o)
{
    if (json_is_true(json_object_get(o, "stopped"))) {
        return "stopped";
    }
    if (!json_is_true(json_object_get(o, "live"))) {
        return "lost";
    }
    return json_is_true(json_object_get(o, "draining")) ? "draining" : "live";
}

static void
print_nodes(const json_t *ans)
{
    static const char *const headers[] = {"NODE",     "URL",     "STATE",   "HEARTBEAT",
                                          "SESSIONS", "VERSION", "CAPACITY"};
    struct ctl_table *t = ctl_table_new(ELEMENTSOF(headers), headers);
    const char *self = str(ans, "self");
    const json_t *o;
    size_t i;

    json_array_foreach (json_object_get(ans, "nodes"), i, o) {
        char id[80], age[32], sessions[16], cap[512];
        const char *cells[] = {id, str(o, "url"), node_state(o), age, sessions, str(o, "version"),
                               cap};

        (void)snprintf(id, sizeof(id), "%s%s", str(o, "id") ? str(o, "id") : "-",
                       self != NULL && str(o, "id") && strcmp(self, str(o, "id")) == 0 ? " *" : "");
        ctl_format_duration(json_integer_value(json_object_get(o, "heartbeat_age_ms")) / 1000, age,
                            sizeof(age));
        ctl_format_value(json_object_get(o, "sessions"), sessions, sizeof(sessions));
        format_capacity(json_object_get(o, "capacity"), cap, sizeof(cap));
        ctl_table_add(t, cells);
    }
    ctl_table_print(t, stdout, 0, 0);
    (void)ctl_table_free(t);
}

int
ctl_cmd_node(struct ctl *ctl, int argc, char **argv)
{
    struct sp_error e = {0};
    struct sp_client *c;
    json_t *ans = NULL;
    int rc = EXIT_OK;

    if (argc >= 2 && ctl_is_help(argv[1])) {
        (void)fputs(node_help, stdout);
        return EXIT_OK;
    }
    if (argc != 2 || strcmp(argv[1], "ls") != 0) {
        return CTL_USAGE_ERROR("node", argc < 2 ? "missing subcommand (ls)"
                                                : "unknown subcommand or argument (only ls)");
    }
    c = ctl_client(ctl);
    if (c == NULL) {
        return EXIT_USAGE;
    }
    if (sp_client_admin_nodes(c, &ans, &e) < 0) {
        rc = ctl_fail(&e);
    } else if (ctl->json) {
        ctl_print_json(ans);
    } else {
        print_nodes(ans);
    }
    json_decref(ans);
    (void)sp_client_free(c);
    return rc;
}
