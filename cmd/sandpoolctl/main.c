/* sandpoolctl: the admin CLI. A commands[] table (crun style) maps verbs to handlers in
 * cmd_<verb>.c; each prints aligned text for people or the server's JSON with -o json. It talks to
 * the daemon only through libsandpool_client (include/sandpool/client.h). Exit codes: 0 ok,
 * 1 execution failed, 2 usage, 3 server error or unreachable. The CLI may block: it is not the
 * daemon.
 *
 * Global options (-o, --url, --token) are taken out of the command line wherever they appear
 * before a "--", so that `sandpoolctl pool ls -o json` works like `sandpoolctl -o json pool ls`;
 * what follows "--" (code, a command's argv) is never looked at. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "ctl.h"
#include "sandpool/api.h"
#include "util/macro.h"

static const struct ctl_command commands[] = {
    {"pool", "ls | resize PROFILE N", "list the warm pools, change a warm target", ctl_cmd_pool},
    {"session", "ls | show ID | kill ID | ...", "list, show, end, pause, hibernate, wake",
     ctl_cmd_session},
    {"snapshot", "ls [--tenant T] | rm ID...", "list and delete snapshots", ctl_cmd_snapshot},
    {"node", "ls", "the nodes sharing this daemon's Redis", ctl_cmd_node},
    {"exec", "ID [--command] -- CODE|ARGV...", "run code or a command, output streamed",
     ctl_cmd_exec},
    {"cp", "LOCAL ID:PATH | ID:PATH LOCAL", "copy a file into or out of a session", ctl_cmd_cp},
    {"top", "[--interval S] [--iterations N]", "live view of pools and sessions", ctl_cmd_top},
    {"drain", "", "stop taking new sessions", ctl_cmd_drain},
    {"undrain", "", "take new sessions again", ctl_cmd_drain},
    {"policy", "", "check the containers against the policy", ctl_cmd_policy},
    {"health", "", "show whether the daemon is live and ready", ctl_cmd_health},
    {"version", "", "print the version", ctl_cmd_version},
};

static void
usage(FILE *f)
{
    (void)fprintf(f, "Usage: sandpoolctl [-o json] [--url URL] [--token TOKEN] COMMAND [ARGS...]\n"
                     "\nCommands:\n");
    for (size_t i = 0; i < ELEMENTSOF(commands); i++) {
        (void)fprintf(f, "  %-8s %-33s %s\n", commands[i].name, commands[i].args, commands[i].help);
    }
    (void)fprintf(f,
                  "\nOptions:\n"
                  "  -o json          print the server's JSON (one document) instead of tables\n"
                  "  --url URL        the daemon: http://HOST:PORT or unix:/PATH\n"
                  "  --token TOKEN    bearer token (the admin token for most commands)\n"
                  "\nThe daemon is found through --url/--token, else SANDPOOL_URL and\n"
                  "SANDPOOL_TOKEN, else %s, else %s.\n"
                  "Each command takes --help. Exit codes: 0 ok, 1 the execution failed,\n"
                  "2 usage error, 3 server error or unreachable.\n",
                  SANDPOOL_CLIENT_ENV_FILE, SANDPOOL_DEFAULT_URL);
}

/* Copies s into out; an over-long value is an error the user must see, not a silent cut. */
static int
set_str(char *out, size_t n, const char *what, const char *s)
{
    if (strlen(s) >= n) {
        /* Never a token's bytes on a terminal or in a log, not even its start. */
        if (strcmp(what, "token") == 0) {
            (void)fprintf(stderr, "sandpoolctl: the token is too long (at most %zu bytes)\n",
                          n - 1);
        } else {
            ctl_println(stderr, "sandpoolctl: the %s '%.40s...' is too long (at most %zu bytes)",
                        what, s, n - 1);
        }
        return -EINVAL;
    }
    memcpy(out, s, strlen(s) + 1);
    return 0;
}

/* Reads KEY=VALUE lines of the file deploy/local/run.sh writes; the environment wins. */
static int
load_env_file(struct ctl *ctl)
{
    FILE *f = fopen(SANDPOOL_CLIENT_ENV_FILE, "re");
    char line[1024];
    int r = 0;

    if (f == NULL) {
        return 0;
    }
    while (r >= 0 && fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        if (strncmp(line, "SANDPOOL_URL=", 13) == 0 && getenv("SANDPOOL_URL") == NULL) {
            r = set_str(ctl->url, sizeof(ctl->url), "URL", line + 13);
        } else if (strncmp(line, "SANDPOOL_TOKEN=", 15) == 0 && getenv("SANDPOOL_TOKEN") == NULL) {
            r = set_str(ctl->token, sizeof(ctl->token), "token", line + 15);
        }
    }
    (void)fclose(f);
    return r;
}

/* Takes the global options out of argv (until "--"); what remains is compacted in place and its
 * count returned, or -1 after printing a usage error. */
static int
take_global_options(struct ctl *ctl, int argc, char **argv)
{
    int out = 1;
    bool rest = false;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int r = 0;

        if (rest || strcmp(a, "--") == 0) {
            rest = true;
            argv[out++] = argv[i];
            continue;
        }
        if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0 || strcmp(a, "--url") == 0 ||
            strcmp(a, "--token") == 0) {
            if (i + 1 >= argc) {
                ctl_println(stderr, "sandpoolctl: option '%s' needs a value", a);
                return -1;
            }
            v = argv[++i];
        } else if (strncmp(a, "-o", 2) == 0 && a[2] != '\0' && a[2] != '-') {
            v = a + 2; /* -ojson */
            a = "-o";
        } else if (strncmp(a, "--output=", 9) == 0 || strncmp(a, "--url=", 6) == 0 ||
                   strncmp(a, "--token=", 8) == 0) {
            v = strchr(a, '=') + 1;
        } else {
            argv[out++] = argv[i];
            continue;
        }
        if (a[1] == 'o' || strncmp(a, "--output", 8) == 0) {
            if (strcmp(v, "json") != 0 && strcmp(v, "text") != 0) {
                ctl_println(stderr, "sandpoolctl: unknown output format '%s' (json or text)", v);
                return -1;
            }
            ctl->json = strcmp(v, "json") == 0;
        } else if (strncmp(a, "--url", 5) == 0) {
            r = set_str(ctl->url, sizeof(ctl->url), "URL", v);
        } else {
            r = set_str(ctl->token, sizeof(ctl->token), "token", v);
        }
        if (r < 0) {
            return -1;
        }
    }
    argv[out] = NULL;
    return out;
}

static int
configure(struct ctl *ctl)
{
    const char *env_url = getenv("SANDPOOL_URL"), *env_token = getenv("SANDPOOL_TOKEN");

    if (set_str(ctl->url, sizeof(ctl->url), "URL", SANDPOOL_DEFAULT_URL) < 0 ||
        load_env_file(ctl) < 0) {
        return -1;
    }
    if (env_url != NULL && set_str(ctl->url, sizeof(ctl->url), "URL", env_url) < 0) {
        return -1;
    }
    if (env_token != NULL && set_str(ctl->token, sizeof(ctl->token), "token", env_token) < 0) {
        return -1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    struct ctl ctl = {0};
    int n;

    if (configure(&ctl) < 0) {
        return EXIT_USAGE;
    }
    n = take_global_options(&ctl, argc, argv);
    if (n < 0) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (n < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (ctl_is_help(argv[1]) || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        return ctl_cmd_version(&ctl, n - 1, argv + 1);
    }
    if (argv[1][0] == '-') {
        ctl_println(stderr, "sandpoolctl: unknown option '%s'", argv[1]);
        usage(stderr);
        return EXIT_USAGE;
    }
    for (size_t k = 0; k < ELEMENTSOF(commands); k++) {
        if (strcmp(commands[k].name, argv[1]) == 0) {
            int rc;

            if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
                (void)fprintf(stderr, "sandpoolctl: cannot initialize libcurl\n");
                return EXIT_SERVER;
            }
            rc = commands[k].run(&ctl, n - 1, argv + 1);
            curl_global_cleanup();
            return rc;
        }
    }
    ctl_println(stderr, "sandpoolctl: unknown command '%s'", argv[1]);
    usage(stderr);
    return EXIT_USAGE;
}
