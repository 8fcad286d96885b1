/* sandpoolctl session ls | show ID | kill ID: every tenant's sessions, through the admin API
 * (GET /v1/admin/sessions[/{id}], DELETE /v1/admin/sessions/{id}). */
#include <stdbool.h>
#include <string.h>

#include <jansson.h>

#include "ctl.h"
#include "util/macro.h"

static const char session_help[] =
    "Usage: sandpoolctl session ls [--tenant T] [--profile P]\n"
    "       sandpoolctl session show ID\n"
    "       sandpoolctl session kill ID\n"
    "       sandpoolctl session pause ID\n"
    "       sandpoolctl session hibernate ID\n"
    "       sandpoolctl session wake ID\n"
    "\n"
    "ls    the sessions of every tenant (or of tenant T, profile P): state, age, time since\n"
    "      the last activity, when the idle timeout ends it, kernel epoch, container\n"
    "show  every field of one session, its metadata included\n"
    "kill  ends a session at once (its container is removed in the background)\n"
    "pause freezes its container (no CPU, memory kept); its next call resumes it\n"
    "hibernate  snapshots it (workspace and variables) and releases its container; its next\n"
    "      call, or wake, restores it into a new one (same id, kernel epoch + 1)\n"
    "wake  restores a hibernated session now\n";

static const char *
str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

struct ctl_table *
ctl_sessions_table(const json_t *sessions)
{
    static const char *const headers[] = {"ID",   "TENANT", "PROFILE", "STATE",    "AGE",
                                          "IDLE", "ENDS",   "EPOCH",   "CONTAINER"};
    struct ctl_table *t = ctl_table_new(ELEMENTSOF(headers), headers);
    const json_t *s;
    size_t i;

    json_array_foreach (sessions, i, s) {
        char age[32], idle[32], ends[32], epoch[32], container[16];
        const char *cells[] = {
            str(s, "id"), str(s, "tenant"), str(s, "profile"), str(s, "state"), age, idle, ends,
            epoch,        container};

        ctl_format_age(str(s, "created_at"), age, sizeof(age));
        ctl_format_age(str(s, "last_active_at"), idle, sizeof(idle));
        ctl_format_until(str(s, "idle_expires_at"), ends, sizeof(ends));
        ctl_format_value(json_object_get(s, "kernel_epoch"), epoch, sizeof(epoch));
        ctl_format_value(json_object_get(s, "container"), container, 13); /* short id */
        ctl_table_add(t, cells);
    }
    return t;
}

static int
session_ls(struct ctl *ctl, struct sp_client *c, const char *tenant, const char *profile)
{
    struct sp_error e = {0};
    json_t *ans = NULL;
    struct ctl_table *t;

    if (sp_client_admin_sessions(c, tenant, profile, &ans, &e) < 0) {
        return ctl_fail(&e);
    }
    if (ctl->json) {
        ctl_print_json(ans);
    } else {
        t = ctl_sessions_table(json_object_get(ans, "sessions"));
        ctl_table_print(t, stdout, 0, 0);
        (void)ctl_table_free(t);
    }
    json_decref(ans);
    return EXIT_OK;
}

static void
print_session(const json_t *s)
{
    static const char *const keys[] = {
        "id",         "tenant",      "profile",        "state",          "node",
        "container",  "created_at",  "last_active_at", "idle_timeout_s", "idle_expires_at",
        "expires_at", "kernel_epoch"};
    const json_t *meta = json_object_get(s, "metadata"), *v;
    const char *key;
    char text[512], rel[48];

    for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
        const char *raw = str(s, keys[i]);

        ctl_format_value(json_object_get(s, keys[i]), text, sizeof(text));
        rel[0] = '\0';
        if (strcmp(keys[i], "created_at") == 0 || strcmp(keys[i], "last_active_at") == 0) {
            char d[32];

            ctl_format_age(raw, d, sizeof(d));
            (void)snprintf(rel, sizeof(rel), "  (%s ago)", d);
        } else if (strcmp(keys[i], "idle_expires_at") == 0 || strcmp(keys[i], "expires_at") == 0) {
            char d[32];

            ctl_format_until(raw, d, sizeof(d));
            (void)snprintf(rel, sizeof(rel), "  (%s)", d);
        }
        ctl_println(stdout, "%-16s %s%s", keys[i], text, raw != NULL ? rel : "");
    }
    if (json_object_size(meta) == 0) {
        (void)printf("%-16s -\n", "metadata");
    } else {
        (void)printf("metadata\n");
    }
    /* The tenant wrote both the keys and the values: escaped, one line each. */
    json_object_foreach ((json_t *)meta, key, v) {
        ctl_format_value(v, text, sizeof(text));
        ctl_println(stdout, "  %s=%s", key, text);
    }
}

static int
session_show(struct ctl *ctl, struct sp_client *c, const char *id)
{
    struct sp_error e = {0};
    json_t *ans = NULL;

    if (sp_client_admin_session_get(c, id, &ans, &e) < 0) {
        return ctl_fail(&e);
    }
    if (ctl->json) {
        ctl_print_json(ans);
    } else {
        print_session(ans);
    }
    json_decref(ans);
    return EXIT_OK;
}

static int
session_kill(struct ctl *ctl, struct sp_client *c, const char *id)
{
    struct sp_error e = {0};

    if (sp_client_admin_session_kill(c, id, &e) < 0) {
        return ctl_fail(&e);
    }
    if (ctl->json) {
        json_t *doc = OOM_CHECK(json_pack("{s:s, s:b}", "id", id, "ended", true));

        ctl_print_json(doc);
        json_decref(doc);
    } else {
        ctl_println(stdout, "session %s ended", id);
    }
    return EXIT_OK;
}

/* pause, hibernate and wake: the session's new state. */
static int
session_state_call(struct ctl *ctl, struct sp_client *c, const char *verb, const char *id)
{
    static const struct {
        const char *verb, *done;
        int (*call)(struct sp_client *c, const char *id, json_t **ret, struct sp_error *reterr);
    } calls[] = {
        {"pause", "paused", sp_client_session_pause},
        {"hibernate", "hibernated", sp_client_session_hibernate},
        {"wake", "woken", sp_client_session_wake},
    };
    struct sp_error e = {0};
    json_t *ans = NULL;
    size_t i = 0;

    while (strcmp(calls[i].verb, verb) != 0) {
        i++; /* the caller checked verb */
    }
    if (calls[i].call(c, id, &ans, &e) < 0) {
        return ctl_fail(&e);
    }
    if (ctl->json) {
        ctl_print_json(ans);
    } else {
        ctl_println(stdout, "session %s %s", id, calls[i].done);
    }
    json_decref(ans);
    return EXIT_OK;
}

/* Parses ls's options into tenant/profile; returns -1 to go on or an exit code. */
static int
ls_options(int argc, char **argv, const char **tenant, const char **profile)
{
    for (int i = 2; i < argc; i++) {
        const char **dst = strcmp(argv[i], "--tenant") == 0    ? tenant
                           : strcmp(argv[i], "--profile") == 0 ? profile
                                                               : NULL;

        if (dst == NULL) {
            return CTL_USAGE_ERROR("session", "ls: unknown argument '%s'", argv[i]);
        }
        if (i + 1 >= argc || argv[i + 1][0] == '\0') {
            return CTL_USAGE_ERROR("session", "ls: '%s' needs a value", argv[i]);
        }
        *dst = argv[++i];
    }
    return -1;
}

static bool
is_state_call(const char *verb)
{
    return strcmp(verb, "pause") == 0 || strcmp(verb, "hibernate") == 0 ||
           strcmp(verb, "wake") == 0;
}

int
ctl_cmd_session(struct ctl *ctl, int argc, char **argv)
{
    const char *tenant = NULL, *profile = NULL;
    struct sp_client *c;
    int rc;

    if (argc < 2) {
        return CTL_USAGE_ERROR("session",
                               "missing subcommand (ls, show, kill, pause, hibernate or wake)");
    }
    for (int i = 1; i < argc; i++) {
        if (ctl_is_help(argv[i])) {
            (void)fputs(session_help, stdout);
            return EXIT_OK;
        }
    }
    if (strcmp(argv[1], "ls") == 0) {
        rc = ls_options(argc, argv, &tenant, &profile);
        if (rc >= 0) {
            return rc;
        }
    } else if (strcmp(argv[1], "show") == 0 || strcmp(argv[1], "kill") == 0 ||
               is_state_call(argv[1])) {
        if (argc != 3) {
            return CTL_USAGE_ERROR("session", "%s takes one session ID", argv[1]);
        }
    } else {
        return CTL_USAGE_ERROR("session",
                               "unknown subcommand '%s' (ls, show, kill, pause, hibernate or wake)",
                               argv[1]);
    }
    c = ctl_client(ctl);
    if (c == NULL) {
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "ls") == 0) {
        rc = session_ls(ctl, c, tenant, profile);
    } else if (strcmp(argv[1], "show") == 0) {
        rc = session_show(ctl, c, argv[2]);
    } else if (is_state_call(argv[1])) {
        rc = session_state_call(ctl, c, argv[1], argv[2]);
    } else {
        rc = session_kill(ctl, c, argv[2]);
    }
    (void)sp_client_free(c);
    return rc;
}
