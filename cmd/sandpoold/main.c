/* sandpoold: parse arguments, load and validate the configuration (defaults, file, SANDPOOL_*
 * environment, flags, in that order), build the server, run the loop, exit. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define LOG_MODULE "main"
#include <jansson.h>

#include "audit/audit.h"
#include "config/config.h"
#include "docker/policy.h"
#include "http/http.h"
#include "log/log.h"
#include "sandpool/api.h"
#include "server.h"
#include "util/macro.h"

static void
usage(FILE *f)
{
    cleanup_free char *opts = cfg_help();

    (void)fprintf(
        f,
        "Usage: sandpoold [--config FILE] [--print-config] [--OPTION=VALUE ...]\n"
        "\n"
        "Keeps a warm pool of locked-down containers and serves the sandpool HTTP API.\n"
        "\n"
        "  --config FILE              JSON configuration (also SANDPOOL_CONFIG)\n"
        "  --print-config             print the effective configuration and exit\n"
        "  --print-create-body=PROFILE  print the engine create body of PROFILE and exit\n"
        "  --version                  print the version and exit\n"
        "  -h, --help                 this help\n"
        "\n"
        "Options (flag, environment variable, meaning); profiles and tenants are set in the\n"
        "configuration file:\n%s",
        opts);
}

struct args {
    const char *config;
    bool print_config;
    const char *print_create_body; /* profile name */
};

/* Applies --name=value / --name value flags to c. Returns 0, 1 (exit 0: help/version shown) or a
 * negative errno after printing the problem. */
static int
parse_args(int argc, char **argv, struct cfg *c, struct args *a, bool apply)
{
    for (int i = 1; i < argc && argv[i] != NULL; i++) {
        const char *arg = argv[i];
        char name[96];
        const char *value, *eq;
        struct err e = {0};
        size_t n;

        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            usage(stdout);
            return 1;
        }
        if (strcmp(arg, "--version") == 0) {
            (void)printf("sandpoold %s (API %s)\n", SANDPOOL_VERSION, SANDPOOL_API_VERSION);
            return 1;
        }
        if (strcmp(arg, "--print-config") == 0) {
            a->print_config = true;
            continue;
        }
        if (strncmp(arg, "--print-create-body=", 20) == 0) {
            a->print_create_body = arg + 20;
            continue;
        }
        if (strncmp(arg, "--", 2) != 0) {
            (void)fprintf(stderr, "sandpoold: unexpected argument '%s' (see --help)\n", arg);
            return -EINVAL;
        }
        eq = strchr(arg, '=');
        n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (n == 0 || n >= sizeof(name)) {
            (void)fprintf(stderr, "sandpoold: bad option '%s'\n", arg);
            return -EINVAL;
        }
        memcpy(name, arg + 2, n);
        name[n] = '\0';
        if (eq != NULL) {
            value = eq + 1;
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            (void)fprintf(stderr, "sandpoold: option '--%s' needs a value\n", name);
            return -EINVAL;
        }
        if (strcmp(name, "config") == 0) {
            a->config = value;
            continue;
        }
        if (apply && cfg_set(c, name, value, &e) < 0) {
            (void)fprintf(stderr, "sandpoold: %s\n", err_msg(&e));
            return -EINVAL;
        }
    }
    return 0;
}

static int
load_config(int argc, char **argv, struct cfg **ret, struct args *a, char *unknown, size_t un)
{
    struct cfg *c = cfg_new();
    struct err e = {0};
    int r;

    /* First pass finds --config and --help; the second applies flags over the file. */
    r = parse_args(argc, argv, c, a, false);
    if (r == 0 && a->config == NULL) {
        a->config = getenv("SANDPOOL_CONFIG");
    }
    if (r == 0 && a->config != NULL && a->config[0] != '\0') {
        r = cfg_load_file(c, a->config, &e);
    }
    if (r == 0) {
        r = cfg_apply_env(c, (const char *const *)environ, unknown, un, &e);
    }
    if (r == 0) {
        r = parse_args(argc, argv, c, a, true);
    }
    if (r == 0) {
        r = cfg_validate(c, &e);
    }
    /* The profile's file, read once here (and at each reload); --print-config only shows its
     * path, as it shows audit.file's without opening it. */
    if (r == 0 && !a->print_config) {
        r = cfg_load_seccomp(c, &e);
    }
    if (r != 0) {
        if (r < 0 && e.code < 0) {
            (void)fprintf(stderr, "sandpoold: configuration: %s\n", err_msg(&e));
        }
        cfg_free(c);
        return r;
    }
    *ret = c;
    return 0;
}

/* SIGHUP: the configuration again, from the same sources (argv, environment, file). */
struct reload_ctx {
    int argc;
    char **argv;
};

static struct cfg *
reload_config(void *userdata)
{
    struct reload_ctx *rc = userdata;
    struct args a = {0};
    struct cfg *c = NULL;
    char unknown[512] = "";

    return load_config(rc->argc, rc->argv, &c, &a, unknown, sizeof(unknown)) == 0 ? c : NULL;
}

/* Every session and warm container holds one connection to the engine, every client one to
 * us: lift the soft limit on open files to the hard one. Returns the new soft limit. */
static unsigned long
raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
        return 0;
    }
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
        (void)getrlimit(RLIMIT_NOFILE, &rl);
    }
    return (unsigned long)rl.rlim_cur;
}

int
main(int argc, char **argv)
{
    struct args a = {0};
    struct server *s = NULL;
    struct cfg *c = NULL;
    char unknown_env[512] = "";
    struct err e = {0};
    int r;

    r = load_config(argc, argv, &c, &a, unknown_env, sizeof(unknown_env));
    if (r != 0) {
        return r > 0 ? EXIT_SUCCESS : 2;
    }
    if (a.print_create_body != NULL) {
        const struct cfg_profile *p = cfg_profile_find(c, a.print_create_body);
        json_t *body;
        char *text;

        if (p == NULL) {
            (void)fprintf(stderr, "sandpoold: no profile '%s'\n", a.print_create_body);
            cfg_free(c);
            return 2;
        }
        body = docker_policy_create_body(p, c->node_id, "SLOT", c->sandbox_uid_first);
        text = OOM_CHECK(json_dumps(body, JSON_INDENT(2) | JSON_SORT_KEYS));
        (void)printf("%s\n", text);
        free(text);
        json_decref(body);
        cfg_free(c);
        return EXIT_SUCCESS;
    }
    if (a.print_config) {
        cleanup_free char *text = cfg_dump(c);

        (void)printf("%s\n", text);
        cfg_free(c);
        return EXIT_SUCCESS;
    }
    log_setup(log_level_from_string(c->log_level), log_format_from_string(c->log_format));
    log_route_libevent();
    if (unknown_env[0] != '\0') {
        log_warn("not configuration options, ignoring: %s", unknown_env);
    }
    if (c->seccomp == NULL) {
        log_warn("sandbox.seccomp_profile is \"\": sandboxes get the engine's default seccomp "
                 "profile (Docker 20.10's allows io_uring)");
    } else {
        log_info("seccomp profile of every sandbox: '%s' (%zu bytes compact)",
                 c->sandbox_seccomp_profile, strlen(c->seccomp));
    }
    if (audit_open(c->audit_file, &e) < 0) {
        log_error("cannot start: %s", err_msg(&e));
        cfg_free(c);
        return EXIT_FAILURE;
    }
    /* Writes to a peer that went away must fail with EPIPE, not kill the daemon. */
    (void)signal(SIGPIPE, SIG_IGN);
    unsigned long nofile = raise_nofile(); /* not inside log_debug(): it may not evaluate */
    unsigned long budget = server_descriptor_budget(c);

    log_debug("open files limit: %lu, this configuration holds at most %lu", nofile, budget);
    if (nofile > 0 && nofile < budget) {
        /* Past the limit, accept() and the engine's sockets fail for everyone: refuse to start
         * rather than let a client reach it. */
        log_error("cannot start: the open files limit (%lu) is below the %lu descriptors this "
                  "configuration may hold (http.max_connections, the profiles' max, "
                  "files.max_inflight, egress.max_connections); raise it (LimitNOFILE=, ulimit -n) "
                  "or lower those",
                  nofile, budget);
        cfg_free(c);
        audit_close();
        return EXIT_FAILURE;
    }

    r = server_new(c, &s, &e);
    if (r < 0) {
        log_error("cannot start: %s", err_msg(&e));
        return EXIT_FAILURE;
    }
    struct reload_ctx rc = {argc, argv};

    server_set_reload(s, reload_config, &rc);
    r = server_run(s);
    server_free(s);
    audit_close();
    log_info("stopped");
    return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
