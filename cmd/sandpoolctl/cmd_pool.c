/* sandpoolctl pool ls | resize PROFILE N: the warm pools (GET/PUT /v1/admin/pools). */
#include <string.h>

#include <jansson.h>

#include "ctl.h"
#include "util/macro.h"
#include "util/parse.h"

static const char pool_help[] =
    "Usage: sandpoolctl pool ls\n"
    "       sandpoolctl pool resize PROFILE N\n"
    "\n"
    "ls      one line per profile: warm target, ready, starting, bound (in sessions), its\n"
    "        paused sessions (frozen) and hibernated ones (no container), removing, max,\n"
    "        waiters, containers created and failed, refill rate, last failure\n"
    "resize  sets the warm target of PROFILE to N (0..max); the pool fills or shrinks\n"
    "        in the background: watch it with 'pool ls' or 'top'\n";

struct ctl_table *
ctl_pools_table(const json_t *pools)
{
    static const char *const headers[] = {
        "PROFILE",  "WARM", "READY",   "STARTING", "BOUND",  "PAUSED",     "HIBERNATED",
        "REMOVING", "MAX",  "WAITERS", "CREATED",  "FAILED", "REFILL/MIN", "LAST FAILURE"};
    static const char *const keys[] = {
        "profile",       "warm_target",    "ready",          "starting",    "bound",
        "paused",        "hibernated",     "removing",       "max",         "waiters",
        "created_total", "failures_total", "refill_per_min", "last_failure"};
    struct ctl_table *t = ctl_table_new(ELEMENTSOF(headers), headers);
    const json_t *p;
    size_t i;

    json_array_foreach (pools, i, p) {
        char text[ELEMENTSOF(keys)][256];
        const char *cells[ELEMENTSOF(keys)];

        for (size_t k = 0; k < ELEMENTSOF(keys); k++) {
            ctl_format_value(json_object_get(p, keys[k]), text[k], sizeof(text[k]));
            cells[k] = text[k];
        }
        ctl_table_add(t, cells);
    }
    return t;
}

static int
pool_ls(struct ctl *ctl, struct sp_client *c)
{
    struct sp_error e = {0};
    json_t *ans = NULL;
    struct ctl_table *t;

    if (sp_client_pools(c, &ans, &e) < 0) {
        return ctl_fail(&e);
    }
    if (ctl->json) {
        ctl_print_json(ans);
    } else {
        t = ctl_pools_table(json_object_get(ans, "pools"));
        ctl_table_print(t, stdout, 0, 0);
        (void)ctl_table_free(t);
    }
    json_decref(ans);
    return EXIT_OK;
}

static int
pool_resize(struct ctl *ctl, struct sp_client *c, const char *profile, unsigned warm)
{
    struct sp_error e = {0};
    json_t *ans = NULL;
    json_t *one;
    struct ctl_table *t;

    if (sp_client_pool_resize(c, profile, warm, &ans, &e) < 0) {
        return ctl_fail(&e);
    }
    if (ctl->json) {
        ctl_print_json(ans);
    } else {
        one = OOM_CHECK(json_array());
        (void)json_array_append(one, ans);
        t = ctl_pools_table(one);
        ctl_table_print(t, stdout, 0, 0);
        (void)ctl_table_free(t);
        json_decref(one);
    }
    json_decref(ans);
    return EXIT_OK;
}

int
ctl_cmd_pool(struct ctl *ctl, int argc, char **argv)
{
    struct sp_client *c;
    int warm = 0, rc;

    if (argc < 2) {
        return CTL_USAGE_ERROR("pool", "missing subcommand (ls or resize)");
    }
    if (ctl_is_help(argv[1]) || (argc > 2 && ctl_is_help(argv[2]))) {
        (void)fputs(pool_help, stdout);
        return EXIT_OK;
    }
    if (strcmp(argv[1], "ls") == 0) {
        if (argc > 2) {
            return CTL_USAGE_ERROR("pool", "ls: unexpected argument '%s'", argv[2]);
        }
    } else if (strcmp(argv[1], "resize") == 0) {
        if (argc != 4) {
            return CTL_USAGE_ERROR("pool", "resize takes PROFILE and N");
        }
        if (parse_int(argv[3], 0, 1000000, &warm) < 0) {
            return CTL_USAGE_ERROR("pool", "resize: '%s' is not a number of containers", argv[3]);
        }
    } else {
        return CTL_USAGE_ERROR("pool", "unknown subcommand '%s' (ls or resize)", argv[1]);
    }
    c = ctl_client(ctl);
    if (c == NULL) {
        return EXIT_USAGE;
    }
    rc = argc == 2 ? pool_ls(ctl, c) : pool_resize(ctl, c, argv[2], (unsigned)warm);
    (void)sp_client_free(c);
    return rc;
}
