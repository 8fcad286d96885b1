/* sandpoolctl: the admin CLI. A commands[] table (crun style) maps verbs to handlers; each prints
 * aligned text for people or JSON with -o json. Exit codes: 0 ok, 1 execution failed, 2 usage,
 * 3 server error or unreachable. The CLI may block: it is not the daemon. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "sandpool/api.h"
#include "util/buf.h"
#include "util/macro.h"

enum {
    EXIT_OK = 0,
    EXIT_EXEC_FAILED = 1,
    EXIT_USAGE = 2,
    EXIT_SERVER = 3,
};

struct ctl {
    char url[512];
    char token[256];
    bool json;
};

struct command {
    const char *name;
    const char *help;
    int (*run)(struct ctl *ctl, int argc, char **argv);
};

static size_t
on_body(char *data, size_t size, size_t nmemb, void *userp)
{
    return buf_append(userp, data, size * nmemb) < 0 ? 0 : size * nmemb;
}

/* GET url+path; fills body and status. Returns 0 or prints a readable error and returns -1. */
static int
http_get(struct ctl *ctl, const char *path, struct buf *body, long *status)
{
    char url[1024], err[CURL_ERROR_SIZE] = "";
    CURL *e = OOM_CHECK(curl_easy_init());
    CURLcode rc;

    (void)snprintf(url, sizeof(url), "%s%s", ctl->url, path);
    (void)curl_easy_setopt(e, CURLOPT_URL, url);
    (void)curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    (void)curl_easy_setopt(e, CURLOPT_WRITEDATA, body);
    (void)curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 10000L);
    (void)curl_easy_setopt(e, CURLOPT_ERRORBUFFER, err);
    (void)curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    rc = curl_easy_perform(e);
    if (rc == CURLE_OK) {
        (void)curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
    }
    curl_easy_cleanup(e);
    if (rc != CURLE_OK) {
        (void)fprintf(stderr, "sandpoolctl: cannot reach sandpoold at %s (%s); is it running?\n",
                      ctl->url, rc == CURLE_COULDNT_CONNECT ? "connection refused" : err);
        return -1;
    }
    return 0;
}

static int
cmd_health(struct ctl *ctl, int argc, char **argv)
{
    struct buf body = BUF_INIT(1u << 20);
    long health = 0, ready = 0;
    json_t *root = NULL;
    int rc = EXIT_SERVER;

    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        (void)printf("Usage: sandpoolctl health\n\nShows /healthz and /readyz of the daemon.\n");
        return EXIT_OK;
    }
    if (http_get(ctl, "/healthz", &body, &health) < 0) {
        goto out;
    }
    buf_reset(&body);
    if (http_get(ctl, "/readyz", &body, &ready) < 0) {
        goto out;
    }
    root = json_loadb(body.buf, body.len, 0, NULL);
    if (ctl->json) {
        (void)printf("{\"healthz\":%ld,\"readyz\":%ld,\"detail\":%s}\n", health, ready,
                     root ? body.buf : "null");
    } else {
        const char *key;
        json_t *v;

        (void)printf("%-24s %s\n", "live", health == 200 ? "yes" : "no");
        (void)printf("%-24s %s\n", "ready", ready == 200 ? "yes" : "no");
        json_object_foreach (json_object_get(root, "checks"), key, v) {
            (void)printf("%-24s %s\n", key, json_string_value(v) ? json_string_value(v) : "?");
        }
    }
    rc = health == 200 && ready == 200 ? EXIT_OK : EXIT_SERVER;
out:
    json_decref(root);
    buf_done(&body);
    return rc;
}

static int
cmd_version(struct ctl *ctl, int argc, char **argv)
{
    (void)printf("sandpoolctl %s (API %s)\n", SANDPOOL_VERSION, SANDPOOL_API_VERSION);
    return EXIT_OK;
}

static const struct command commands[] = {
    {"health", "show whether the daemon is live and ready", cmd_health},
    {"version", "print the version", cmd_version},
};

static void
usage(FILE *f)
{
    (void)fprintf(f, "Usage: sandpoolctl [-o json] [--url URL] COMMAND [ARGS...]\n\nCommands:\n");
    for (size_t i = 0; i < ELEMENTSOF(commands); i++) {
        (void)fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
    }
    (void)fprintf(f,
                  "\nThe daemon is found through SANDPOOL_URL and SANDPOOL_TOKEN, else %s,\n"
                  "else %s.\n",
                  SANDPOOL_CLIENT_ENV_FILE, SANDPOOL_DEFAULT_URL);
}

/* Copies s into out; an over-long value is an error the user must see, not a silent cut. */
static void
set_str(char *out, size_t n, const char *s)
{
    if (strlen(s) >= n) {
        (void)fprintf(stderr, "sandpoolctl: value '%.40s...' is too long, ignoring it\n", s);
        return;
    }
    memcpy(out, s, strlen(s) + 1);
}

/* Reads KEY=VALUE lines of the file deploy/local/run.sh writes; environment wins. */
static void
load_env_file(struct ctl *ctl)
{
    FILE *f = fopen(SANDPOOL_CLIENT_ENV_FILE, "re");
    char line[1024];

    if (f == NULL) {
        return;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        if (strncmp(line, "SANDPOOL_URL=", 13) == 0 && getenv("SANDPOOL_URL") == NULL) {
            set_str(ctl->url, sizeof(ctl->url), line + 13);
        } else if (strncmp(line, "SANDPOOL_TOKEN=", 15) == 0 && getenv("SANDPOOL_TOKEN") == NULL) {
            set_str(ctl->token, sizeof(ctl->token), line + 15);
        }
    }
    (void)fclose(f);
}

int
main(int argc, char **argv)
{
    struct ctl ctl = {0};
    const char *env_url, *env_token;
    int i;

    set_str(ctl.url, sizeof(ctl.url), SANDPOOL_DEFAULT_URL);
    load_env_file(&ctl);
    env_url = getenv("SANDPOOL_URL");
    env_token = getenv("SANDPOOL_TOKEN");
    if (env_url != NULL) {
        set_str(ctl.url, sizeof(ctl.url), env_url);
    }
    if (env_token != NULL) {
        set_str(ctl.token, sizeof(ctl.token), env_token);
    }
    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return EXIT_OK;
        } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            ctl.json = strcmp(argv[++i], "json") == 0;
        } else if (strcmp(argv[i], "--url") == 0 && i + 1 < argc) {
            set_str(ctl.url, sizeof(ctl.url), argv[++i]);
        } else {
            (void)fprintf(stderr, "sandpoolctl: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (i >= argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    for (size_t k = 0; k < ELEMENTSOF(commands); k++) {
        if (strcmp(commands[k].name, argv[i]) == 0) {
            int rc;

            (void)curl_global_init(CURL_GLOBAL_DEFAULT);
            rc = commands[k].run(&ctl, argc - i, argv + i);
            curl_global_cleanup();
            return rc;
        }
    }
    (void)fprintf(stderr, "sandpoolctl: unknown command '%s'\n", argv[i]);
    usage(stderr);
    return EXIT_USAGE;
}
