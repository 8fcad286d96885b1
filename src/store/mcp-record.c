/* The record of an MCP session; see mcp-record.h for its key and who reads it.
 *
 * The text is the format running daemons have written since MCP sessions survived restarts: a
 * JSON object with sorted keys, "mount" "bound" or "own", "node" optional on reading (records
 * written before it existed). Changing what store_mcp_rec_dump() writes strands every session a
 * running daemon holds; a new field is optional on reading, as "node" is. */
#include "store/mcp-record.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "util/macro.h"
#include "util/parse.h"

#define IDLE_TIMEOUT_MAX 31536000 /* a year, in seconds: a profile's idle_timeout_s at most */

char *
store_mcp_rec_dump(const struct store_mcp_rec *r)
{
    json_t *o;
    char *text;

    assert(r->version[0] != '\0'); /* a record without one would never load again */
    o = OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:I, s:s}", "tenant", r->tenant,
                            "mount", r->bound ? "bound" : "own", "sandbox", r->sandbox, "profile",
                            r->profile, "idle_timeout_s", (json_int_t)r->idle_timeout_s, "version",
                            r->version, "epoch", (json_int_t)MIN(r->epoch, (uint64_t)INT64_MAX),
                            "node", r->node));
    text = OOM_CHECK(json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS));
    json_decref(o);
    return text;
}

/* A name of at most n - 1 bytes (or "" when empty is allowed) into out. */
static bool
record_name(const char *s, bool allow_empty, char *out, size_t n)
{
    if ((s[0] == '\0' && !allow_empty) || (s[0] != '\0' && !str_is_name(s, n - 1))) {
        return false;
    }
    (void)snprintf(out, n, "%s", s);
    return true;
}

int
store_mcp_rec_load(const char *data, size_t len, struct store_mcp_rec *ret, struct err *reterr)
{
    const char *tenant, *mount, *sandbox, *profile, *version, *node = "";
    json_int_t idle, epoch;
    struct store_mcp_rec r = {0};
    json_error_t je;
    json_t *o = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
    int ok;

    ok = o != NULL &&
         json_unpack(o, "{s:s, s:s, s:s, s:s, s:I, s:s, s:I, s?s}", "tenant", &tenant, "mount",
                     &mount, "sandbox", &sandbox, "profile", &profile, "idle_timeout_s", &idle,
                     "version", &version, "epoch", &epoch, "node", &node) == 0;
    ok = ok && record_name(tenant, false, r.tenant, sizeof(r.tenant)) &&
         record_name(sandbox, true, r.sandbox, sizeof(r.sandbox)) &&
         record_name(profile, true, r.profile, sizeof(r.profile)) &&
         record_name(node, true, r.node, sizeof(r.node)) &&
         record_name(version, false, r.version, sizeof(r.version)) &&
         (strcmp(mount, "own") == 0 || strcmp(mount, "bound") == 0) && idle >= 0 &&
         idle <= IDLE_TIMEOUT_MAX && epoch >= 0;
    if (ok) {
        r.bound = strcmp(mount, "bound") == 0;
        r.idle_timeout_s = (unsigned)idle;
        r.epoch = (uint64_t)epoch;
        ok = !r.bound || r.sandbox[0] != '\0';
    }
    json_decref(o);
    if (!ok) {
        return err_set(reterr, -EINVAL, "not an MCP session record");
    }
    *ret = r;
    return 0;
}
