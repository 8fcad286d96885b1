/* sandpoolctl snapshot ls [--tenant T] | rm ID...: every tenant's snapshots and what they count
 * towards their quotas, through the admin API (GET /v1/admin/snapshots, DELETE
 * /v1/admin/snapshots/{id}). */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "ctl.h"
#include "util/macro.h"

static const char snapshot_help[] =
    "Usage: sandpoolctl snapshot ls [--tenant T]\n"
    "       sandpoolctl snapshot rm ID...\n"
    "\n"
    "ls  the snapshots of every tenant (or of tenant T), newest first: size, age, when its\n"
    "    retention ends, the session it was taken of, how many variables it holds; then each\n"
    "    tenant's count, bytes and quota (a hibernated session's snapshot counts in its bytes\n"
    "    but is listed as the session: 'session ls')\n"
    "rm  deletes snapshots of any tenant (its bytes, then its record); a hibernated session's\n"
    "    own snapshot goes only with its session ('session kill')\n";

static const char *
str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* 1536 bytes as "1.5K", 10 MiB as "10.0M". */
static void
format_bytes(const json_t *v, char *out, size_t n)
{
    static const char units[] = "KMGTP";
    double b;
    size_t u = 0;

    if (!json_is_integer(v)) {
        (void)snprintf(out, n, "-");
        return;
    }
    b = (double)json_integer_value(v);
    if (b < 1024.0) {
        (void)snprintf(out, n, "%lld", (long long)json_integer_value(v));
        return;
    }
    b /= 1024.0;
    while (b >= 1024.0 && u + 1 < sizeof(units) - 1) {
        b /= 1024.0;
        u++;
    }
    (void)snprintf(out, n, "%.1f%c", b, units[u]);
}

static void
print_snapshots(const json_t *snapshots)
{
    static const char *const headers[] = {"ID",  "TENANT",  "SESSION",   "SIZE",
                                          "AGE", "EXPIRES", "VARIABLES", "SKIPPED"};
    struct ctl_table *t = ctl_table_new(ELEMENTSOF(headers), headers);
    const json_t *s;
    size_t i;

    json_array_foreach (snapshots, i, s) {
        char size[32], age[32], ends[32], vars[16], skipped[16];
        const char *cells[] = {str(s, "id"), str(s, "tenant"), str(s, "session"), size, age, ends,
                               vars,         skipped};

        format_bytes(json_object_get(s, "size"), size, sizeof(size));
        ctl_format_age(str(s, "created_at"), age, sizeof(age));
        if (str(s, "expires_at") != NULL) {
            ctl_format_until(str(s, "expires_at"), ends, sizeof(ends));
        } else {
            (void)snprintf(ends, sizeof(ends), "never");
        }
        (void)snprintf(vars, sizeof(vars), "%zu", json_array_size(json_object_get(s, "variables")));
        (void)snprintf(skipped, sizeof(skipped), "%zu",
                       json_array_size(json_object_get(s, "skipped")));
        ctl_table_add(t, cells);
    }
    ctl_table_print(t, stdout, 0, 0);
    (void)ctl_table_free(t);
}

static void
print_tenants(const json_t *tenants)
{
    static const char *const headers[] = {"TENANT", "SNAPSHOTS", "BYTES", "QUOTA", "USED"};
    struct ctl_table *t = ctl_table_new(ELEMENTSOF(headers), headers);
    const json_t *o;
    size_t i;

    json_array_foreach (tenants, i, o) {
        const json_t *quota = json_object_get(o, "quota_bytes");
        char count[32], bytes[32], q[32], used[16];
        const char *cells[] = {str(o, "tenant"), count, bytes, q, used};

        ctl_format_value(json_object_get(o, "snapshots"), count, sizeof(count));
        format_bytes(json_object_get(o, "bytes"), bytes, sizeof(bytes));
        format_bytes(quota, q, sizeof(q));
        if (json_integer_value(quota) > 0) {
            (void)snprintf(used, sizeof(used), "%.0f%%",
                           100.0 * (double)json_integer_value(json_object_get(o, "bytes")) /
                               (double)json_integer_value(quota));
        } else {
            (void)snprintf(used, sizeof(used), "-");
        }
        ctl_table_add(t, cells);
    }
    ctl_table_print(t, stdout, 0, 0);
    (void)ctl_table_free(t);
}

static int
snapshot_ls(struct ctl *ctl, struct sp_client *c, const char *tenant)
{
    struct sp_error e = {0};
    json_t *ans = NULL;

    if (sp_client_admin_snapshots(c, tenant, &ans, &e) < 0) {
        return ctl_fail(&e);
    }
    if (ctl->json) {
        ctl_print_json(ans);
    } else {
        print_snapshots(json_object_get(ans, "snapshots"));
        if (json_is_true(json_object_get(ans, "truncated"))) {
            (void)printf("(only the newest %zu are listed)\n",
                         json_array_size(json_object_get(ans, "snapshots")));
        }
        (void)printf("\n");
        print_tenants(json_object_get(ans, "tenants"));
    }
    json_decref(ans);
    return EXIT_OK;
}

/* Deletes each id; the exit code is the last failure's (the others still go). */
static int
snapshot_rm(struct ctl *ctl, struct sp_client *c, int n, char **ids)
{
    json_t *done = OOM_CHECK(json_array());
    int rc = EXIT_OK;

    for (int i = 0; i < n; i++) {
        struct sp_error e = {0};

        if (sp_client_admin_snapshot_delete(c, ids[i], &e) < 0) {
            rc = ctl_fail(&e);
            continue;
        }
        (void)json_array_append_new(done, OOM_CHECK(json_string(ids[i])));
        if (!ctl->json) {
            ctl_println(stdout, "snapshot %s deleted", ids[i]);
        }
    }
    if (ctl->json) {
        json_t *doc = OOM_CHECK(json_pack("{s:o}", "deleted", done));

        ctl_print_json(doc);
        json_decref(doc);
    } else {
        json_decref(done);
    }
    return rc;
}

int
ctl_cmd_snapshot(struct ctl *ctl, int argc, char **argv)
{
    const char *tenant = NULL;
    struct sp_client *c;
    int rc;

    if (argc < 2) {
        return CTL_USAGE_ERROR("snapshot", "missing subcommand (ls or rm)");
    }
    for (int i = 1; i < argc; i++) {
        if (ctl_is_help(argv[i])) {
            (void)fputs(snapshot_help, stdout);
            return EXIT_OK;
        }
    }
    if (strcmp(argv[1], "ls") == 0) {
        if (argc == 4 && strcmp(argv[2], "--tenant") == 0 && argv[3][0] != '\0') {
            tenant = argv[3];
        } else if (argc != 2) {
            return CTL_USAGE_ERROR("snapshot", "ls takes only --tenant T");
        }
    } else if (strcmp(argv[1], "rm") == 0) {
        if (argc < 3) {
            return CTL_USAGE_ERROR("snapshot", "rm takes one or more snapshot IDs");
        }
    } else {
        return CTL_USAGE_ERROR("snapshot", "unknown subcommand '%s' (ls or rm)", argv[1]);
    }
    c = ctl_client(ctl);
    if (c == NULL) {
        return EXIT_USAGE;
    }
    rc = strcmp(argv[1], "ls") == 0 ? snapshot_ls(ctl, c, tenant)
                                    : snapshot_rm(ctl, c, argc - 2, argv + 2);
    (void)sp_client_free(c);
    return rc;
}
