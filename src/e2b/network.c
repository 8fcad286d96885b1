/* The E2B SDK's network options at a sandbox's creation, as a narrowing of its profile's egress
 * list (control.h, docs/e2b.md, docs/egress.md). Pure. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "e2b/control.h"
#include "egress/rules.h"
#include "util/macro.h"

#define NET_ENTRIES_MAX 128u /* EGRESS_RULES_MAX: entries of one list */

/* The catch-all ranges: denied, they make allowOut the only way out. */
static bool
is_everything(const char *s)
{
    return strcmp(s, "0.0.0.0/0") == 0 || strcmp(s, "::/0") == 0;
}

/* One allowOut or denyOut entry as a rule's text into out: a name or "*.name" as it is (allowOut
 * only), an address, or a range of one address ("a.b.c.d/32", "x::y/128") as that address. */
static int
entry_rule(const char *list, const char *s, bool names, char *out, size_t n, struct err *reterr)
{
    const char *slash = strchr(s, '/');
    char addr[64];
    struct egress_addr a;

    if (slash == NULL) {
        if (egress_addr_parse(s, &a) == 0) {
            egress_addr_format(&a, out, n);
            return 0;
        }
        if (!names) {
            return err_set(reterr, -EINVAL,
                           "'network.%s': '%.64s' is no address or range (E2B takes no names "
                           "there)",
                           list, s);
        }
        (void)snprintf(out, n, "%s", s); /* the narrowing's parser judges the name */
        return 0;
    }
    if ((size_t)(slash - s) < sizeof(addr)) {
        memcpy(addr, s, (size_t)(slash - s));
        addr[slash - s] = '\0';
        if (egress_addr_parse(addr, &a) == 0 &&
            strcmp(slash + 1, a.family == AF_INET ? "32" : "128") == 0) {
            egress_addr_format(&a, out, n);
            return 0;
        }
    }
    return err_set(reterr, -EINVAL,
                   "'network.%s': '%.64s': a range of more than one address is not supported "
                   "here (a sandbox's way out is checked by name; only 0.0.0.0/0 in denyOut)",
                   list, s);
}

/* The entries of list (an array of strings, or absent) as rules into *ret (a new array);
 * *ret_everything when one of them is a catch-all range. */
static int
entries(json_t *net, const char *list, bool names, json_t **ret, bool *ret_everything,
        struct err *reterr)
{
    json_t *v = net != NULL ? json_object_get(net, list) : NULL, *item;
    size_t i;

    *ret = OOM_CHECK(json_array());
    if (v == NULL || json_is_null(v)) {
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) > NET_ENTRIES_MAX) {
        return err_set(reterr, -EINVAL, "'network.%s' must be an array of at most %u strings", list,
                       NET_ENTRIES_MAX);
    }
    json_array_foreach (v, i, item) {
        char rule[EGRESS_NAME_MAX + 8];
        int r;

        if (!json_is_string(item)) {
            return err_set(reterr, -EINVAL, "'network.%s' must hold strings", list);
        }
        if (is_everything(json_string_value(item))) {
            *ret_everything = true;
            continue;
        }
        r = entry_rule(list, json_string_value(item), names, rule, sizeof(rule), reterr);
        if (r < 0) {
            return r;
        }
        (void)json_array_append_new(*ret, OOM_CHECK(json_string(rule)));
    }
    return 0;
}

/* Whether arr (of strings) holds s. */
static bool
holds(json_t *arr, const char *s)
{
    size_t i;
    json_t *v;

    json_array_foreach (arr, i, v) {
        if (strcmp(json_string_value(v), s) == 0) {
            return true;
        }
    }
    return false;
}

/* The members of network that change requests or route them elsewhere: refused. */
static int
refuse_unsupported(json_t *net, struct err *reterr)
{
    static const struct {
        const char *name, *why;
    } refused[] = {
        {"rules", "the egress proxy changes no request (it never sees inside TLS)"},
        {"egressProxy", "the daemon's own proxy is a sandbox's only way out"},
    };

    for (size_t i = 0; i < ELEMENTSOF(refused); i++) {
        json_t *v = json_object_get(net, refused[i].name);

        if (v != NULL && !json_is_null(v) && !(json_is_object(v) && json_object_size(v) == 0)) {
            return err_set(reterr, -EINVAL, "'network.%s' is not supported here: %s",
                           refused[i].name, refused[i].why);
        }
    }
    return 0;
}

int
e2b_network_parse(json_t *body, json_t **ret, struct err *reterr)
{
    json_t *aia = json_is_object(body) ? json_object_get(body, "allow_internet_access") : NULL;
    json_t *net = json_is_object(body) ? json_object_get(body, "network") : NULL;
    json_t *allow = NULL, *deny = NULL, *out = NULL, *kept;
    bool everything = false, allow_everything = false;
    size_t i;
    json_t *v;
    int r;

    if (aia != NULL && !json_is_null(aia) && !json_is_boolean(aia)) {
        return err_set(reterr, -EINVAL, "'allow_internet_access' must be true or false");
    }
    if (net != NULL && json_is_null(net)) {
        net = NULL;
    }
    if (net != NULL && !json_is_object(net)) {
        return err_set(reterr, -EINVAL, "'network' must be an object");
    }
    if ((net != NULL && (r = refuse_unsupported(net, reterr)) < 0) ||
        (r = entries(net, "allowOut", true, &allow, &allow_everything, reterr)) < 0 ||
        (r = entries(net, "denyOut", false, &deny, &everything, reterr)) < 0) {
        json_decref(allow);
        json_decref(deny);
        return r;
    }
    /* E2B: an allowOut entry wins over a denyOut one (here a deny entry would win); a catch-all
     * one over every denyOut entry. */
    kept = OOM_CHECK(json_array());
    json_array_foreach (deny, i, v) {
        if (!allow_everything && !holds(allow, json_string_value(v))) {
            (void)json_array_append(kept, v);
        }
    }
    json_decref(deny);
    if ((json_is_false(aia) || everything) && !allow_everything) {
        /* Only allowOut's entries (as far as the profile allows them), less denyOut's. */
        out = OOM_CHECK(json_pack("{s:o, s:o}", "allow", allow, "deny", kept));
    } else if (json_array_size(kept) > 0) {
        out = OOM_CHECK(json_pack("{s:o}", "deny", kept)); /* the profile's list, less these */
        json_decref(allow);                                /* alone, allowOut widens nothing */
    } else {
        json_decref(allow);
        json_decref(kept);
    }
    if (out != NULL) {
        struct egress_narrowing n;

        r = egress_narrowing_from_json(out, "network", &n, reterr);
        if (r < 0) {
            json_decref(out);
            return r;
        }
        egress_narrowing_done(&n);
    }
    *ret = out;
    return 0;
}

int
e2b_network_update_parse(json_t *body, json_t **ret, struct err *reterr)
{
    static const char *const members[] = {"allowOut", "denyOut", "rules", "egressProxy"};
    json_t *net, *wrapped, *v;
    int r;

    if (!json_is_object(body)) {
        return err_set(reterr, -EINVAL, "the body must be a JSON object");
    }
    net = OOM_CHECK(json_object());
    for (size_t i = 0; i < ELEMENTSOF(members); i++) {
        if ((v = json_object_get(body, members[i])) != NULL) {
            (void)json_object_set(net, members[i], v);
        }
    }
    wrapped = OOM_CHECK(json_pack("{s:o}", "network", net));
    if ((v = json_object_get(body, "allow_internet_access")) != NULL) {
        (void)json_object_set(wrapped, "allow_internet_access", v);
    }
    r = e2b_network_parse(wrapped, ret, reterr);
    json_decref(wrapped);
    return r;
}
