/* sandpoolctl health, version, drain, undrain and policy: the one-call commands. */
#include <string.h>

#include <jansson.h>

#include "ctl.h"
#include "sandpool/api.h"
#include "util/macro.h"

/* Handles "--help" and refuses any other argument; returns -1 to go on. */
static int
no_args(int argc, char **argv, const char *synopsis, const char *text)
{
    if (argc > 1 && ctl_is_help(argv[1])) {
        (void)printf("Usage: sandpoolctl %s\n\n%s\n", synopsis, text);
        return EXIT_OK;
    }
    if (argc > 1) {
        return CTL_USAGE_ERROR(argv[0], "unexpected argument '%s'", argv[1]);
    }
    return -1;
}

int
ctl_cmd_health(struct ctl *ctl, int argc, char **argv)
{
    struct sp_client *c;
    struct sp_error e = {0};
    json_t *checks = NULL;
    bool live = false, ready = false;
    int rc = no_args(argc, argv, "health",
                     "Shows /healthz and /readyz of the daemon and each readiness check.\n"
                     "Exit code 0 when live and ready, 3 otherwise.");

    if (rc >= 0) {
        return rc;
    }
    c = ctl_client(ctl);
    if (c == NULL) {
        return EXIT_USAGE;
    }
    if (sp_client_health(c, &live, &ready, &checks, &e) < 0) {
        rc = ctl_fail(&e);
    } else if (ctl->json) {
        json_t *doc =
            OOM_CHECK(json_pack("{s:b, s:b, s:O}", "live", live, "ready", ready, "checks", checks));

        ctl_print_json(doc);
        json_decref(doc);
        rc = live && ready ? EXIT_OK : EXIT_SERVER;
    } else {
        const char *key;
        json_t *v;
        char text[512];

        (void)printf("%-24s %s\n", "live", live ? "yes" : "no");
        (void)printf("%-24s %s\n", "ready", ready ? "yes" : "no");
        json_object_foreach (checks, key, v) {
            ctl_format_value(v, text, sizeof(text)); /* it may quote the engine's error */
            ctl_println(stdout, "%-24s %s", key, text);
        }
        rc = live && ready ? EXIT_OK : EXIT_SERVER;
    }
    json_decref(checks);
    (void)sp_client_free(c);
    return rc;
}

int
ctl_cmd_version(struct ctl *ctl, int argc, char **argv)
{
    int rc = no_args(argc, argv, "version", "Prints the version of sandpoolctl and its API.");

    if (rc >= 0) {
        return rc;
    }
    if (ctl->json) {
        (void)printf("{\"version\": \"%s\", \"api\": \"%s\"}\n", SANDPOOL_VERSION,
                     SANDPOOL_API_VERSION);
    } else {
        (void)printf("sandpoolctl %s (API %s)\n", SANDPOOL_VERSION, SANDPOOL_API_VERSION);
    }
    return EXIT_OK;
}

int
ctl_cmd_drain(struct ctl *ctl, int argc, char **argv)
{
    bool drain = strcmp(argv[0], "drain") == 0;
    struct sp_client *c;
    struct sp_error e = {0};
    json_t *ans = NULL;
    int rc = no_args(argc, argv, argv[0],
                     drain ? "Drains the daemon: new sessions are refused (503 unavailable) and\n"
                             "readyz answers 503; existing sessions go on. Undo with undrain."
                           : "Ends a drain: the daemon takes new sessions again.");

    if (rc >= 0) {
        return rc;
    }
    c = ctl_client(ctl);
    if (c == NULL) {
        return EXIT_USAGE;
    }
    if (sp_client_drain(c, drain, &ans, &e) < 0) {
        rc = ctl_fail(&e);
    } else if (ctl->json) {
        ctl_print_json(ans);
        rc = EXIT_OK;
    } else {
        char n[32];

        ctl_format_value(json_object_get(ans, "sessions"), n, sizeof(n));
        ctl_println(stdout, "draining: %s (%s session%s)",
                    json_is_true(json_object_get(ans, "draining")) ? "yes" : "no", n,
                    strcmp(n, "1") == 0 ? "" : "s");
        rc = EXIT_OK;
    }
    json_decref(ans);
    (void)sp_client_free(c);
    return rc;
}

static void
print_policy(const json_t *ans)
{
    static const char *const headers[] = {"CONTAINER", "PROFILE", "SESSION", "ACTION",
                                          "DIFFERENCES"};
    const json_t *drifted = json_object_get(ans, "drifted"), *d;
    struct ctl_table *t = ctl_table_new(ELEMENTSOF(headers), headers);
    char checked[32], errors[32];
    size_t i;

    json_array_foreach (drifted, i, d) {
        const json_t *diffs = json_object_get(d, "differences"), *x;
        char container[16], profile[64], session[80], action[32], all[1024] = "";
        const char *cells[] = {container, profile, session, action, all};
        size_t k, used = 0;

        ctl_format_value(json_object_get(d, "container"), container, 13); /* the short id */
        ctl_format_value(json_object_get(d, "profile"), profile, sizeof(profile));
        ctl_format_value(json_object_get(d, "session"), session, sizeof(session));
        ctl_format_value(json_object_get(d, "action"), action, sizeof(action));
        json_array_foreach (diffs, k, x) {
            int w = snprintf(all + used, sizeof(all) - used, "%s%s", k > 0 ? "; " : "",
                             json_string_value(x) != NULL ? json_string_value(x) : "?");

            if (w < 0 || (size_t)w >= sizeof(all) - used) {
                break; /* cut: the JSON output has it whole */
            }
            used += (size_t)w;
        }
        ctl_table_add(t, cells);
    }
    ctl_format_value(json_object_get(ans, "checked"), checked, sizeof(checked));
    ctl_format_value(json_object_get(ans, "errors"), errors, sizeof(errors));
    ctl_println(stdout, "checked %s containers, %zu drifted, %s could not be inspected", checked,
                ctl_table_rows(t), errors);
    if (ctl_table_rows(t) > 0) {
        ctl_table_print(t, stdout, 0, 0);
    }
    (void)ctl_table_free(t);
}

int
ctl_cmd_policy(struct ctl *ctl, int argc, char **argv)
{
    struct sp_client *c;
    struct sp_error e = {0};
    json_t *ans = NULL;
    int rc = no_args(argc, argv, "policy",
                     "Checks every container of the daemon against its profile's policy and\n"
                     "lists the ones that drifted (they are ended). Exit code 3 when some\n"
                     "container could not be inspected (the engine did not answer).");

    if (rc >= 0) {
        return rc;
    }
    c = ctl_client(ctl);
    if (c == NULL) {
        return EXIT_USAGE;
    }
    sp_client_set_timeout(c, 120000L); /* it inspects every container */
    if (sp_client_policy(c, &ans, &e) < 0) {
        rc = ctl_fail(&e);
    } else {
        if (ctl->json) {
            ctl_print_json(ans);
        } else {
            print_policy(ans);
        }
        rc = json_integer_value(json_object_get(ans, "errors")) > 0 ? EXIT_SERVER : EXIT_OK;
    }
    json_decref(ans);
    (void)sp_client_free(c);
    return rc;
}
