/* Egress rules, address ranges and the hosts map; see rules.h. */
#include "egress/rules.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/macro.h"
#include "util/parse.h"

static const char *const verdict_names[EGRESS__COUNT] = {
    [EGRESS_ALLOWED] = "allowed",
    [EGRESS_DENIED] = "denied by name",
    [EGRESS_NOT_ALLOWED] = "not allowed",
};

const char *
egress_verdict_to_string(enum egress_verdict v)
{
    return v < EGRESS__COUNT ? verdict_names[v] : "?";
}

/* ---- addresses ------------------------------------------------------------------------------- */

int
egress_addr_parse(const char *s, struct egress_addr *ret)
{
    struct egress_addr a = {0};

    if (inet_pton(AF_INET, s, a.bytes) == 1) {
        a.family = AF_INET;
    } else if (inet_pton(AF_INET6, s, a.bytes) == 1) {
        a.family = AF_INET6;
    } else {
        return -EINVAL;
    }
    *ret = a;
    return 0;
}

void
egress_addr_format(const struct egress_addr *a, char *out, size_t n)
{
    if (inet_ntop(a->family, a->bytes, out, (socklen_t)n) == NULL && n > 0) {
        out[0] = '\0';
    }
}

int
egress_addr_from_sockaddr(const struct sockaddr *sa, struct egress_addr *ret)
{
    struct egress_addr a = {.family = sa->sa_family};

    if (sa->sa_family == AF_INET) {
        memcpy(a.bytes, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        memcpy(a.bytes, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
    } else {
        return -EAFNOSUPPORT;
    }
    *ret = a;
    return 0;
}

/* Whether the first prefix bits of x and y are the same. */
static bool
prefix_eq(const uint8_t *x, const uint8_t *y, unsigned prefix)
{
    unsigned whole = prefix / 8, rest = prefix % 8;

    if (memcmp(x, y, whole) != 0) {
        return false;
    }
    return rest == 0 || ((x[whole] ^ y[whole]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

struct range {
    const char *net;
    unsigned prefix;
    const char *kind;
};

/* RFC 6890 and its successors: what no sandbox reaches by a resolved name unless the operator
 * lists it in egress.allow_cidrs. */
static const struct range refused_v4[] = {
    {"0.0.0.0", 8, "this-network"},        {"10.0.0.0", 8, "private"},
    {"100.64.0.0", 10, "shared"},          {"127.0.0.0", 8, "loopback"},
    {"169.254.0.0", 16, "link-local"}, /* the cloud metadata services too */
    {"172.16.0.0", 12, "private"},         {"192.0.0.0", 24, "reserved"},
    {"192.0.2.0", 24, "documentation"},    {"192.88.99.0", 24, "reserved"},
    {"192.168.0.0", 16, "private"},        {"198.18.0.0", 15, "benchmarking"},
    {"198.51.100.0", 24, "documentation"}, {"203.0.113.0", 24, "documentation"},
    {"224.0.0.0", 4, "multicast"},         {"240.0.0.0", 4, "reserved"},
};
static const struct range refused_v6[] = {
    {"::", 128, "unspecified"},
    {"::1", 128, "loopback"},
    {"100::", 64, "discard"},
    {"2001::", 23, "reserved"},
    {"2001:db8::", 32, "documentation"},
    {"2002::", 16, "6to4"},
    {"fc00::", 7, "private"},
    {"fe80::", 10, "link-local"},
    {"fec0::", 10, "site-local"},
    {"ff00::", 8, "multicast"},
};

static const char *
in_ranges(const struct egress_addr *a, const struct range *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct egress_addr net;

        if (egress_addr_parse(r[i].net, &net) == 0 && net.family == a->family &&
            prefix_eq(a->bytes, net.bytes, r[i].prefix)) {
            return r[i].kind;
        }
    }
    return NULL;
}

const char *
egress_addr_refused_range(const struct egress_addr *a)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b};

    if (a->family == AF_INET) {
        return in_ranges(a, refused_v4, ELEMENTSOF(refused_v4));
    }
    if (a->family != AF_INET6) {
        return "unknown";
    }
    if (memcmp(a->bytes, mapped, 12) == 0 || memcmp(a->bytes, nat64, 12) == 0) {
        struct egress_addr v4 = {.family = AF_INET};

        memcpy(v4.bytes, a->bytes + 12, 4);
        return in_ranges(&v4, refused_v4, ELEMENTSOF(refused_v4));
    }
    return in_ranges(a, refused_v6, ELEMENTSOF(refused_v6));
}

/* Calls fn with each comma-separated entry of text (blanks around it dropped); stops at the
 * first negative return. */
static int
each_entry(const char *text, int (*fn)(const char *entry, size_t n, void *arg), void *arg)
{
    const char *p = text;

    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        const char *s = p;
        int r;

        while (n > 0 && (*s == ' ' || *s == '\t')) {
            s++, n--;
        }
        while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t')) {
            n--;
        }
        if (n > 0 && (r = fn(s, n, arg)) < 0) {
            return r;
        }
        p = end != NULL ? end + 1 : p + strlen(p);
    }
    return 0;
}

struct cidrs_parse {
    struct egress_cidr *out;
    size_t max, n;
    struct err *reterr;
};

static int
one_cidr(const char *s, size_t n, void *arg)
{
    struct cidrs_parse *cp = arg;
    char text[64];
    const char *slash;
    struct egress_cidr c = {0};
    int prefix;

    if (n >= sizeof(text)) {
        return err_set(cp->reterr, -EINVAL, "'%.40s...' is no address range", s);
    }
    memcpy(text, s, n);
    text[n] = '\0';
    slash = strchr(text, '/');
    if (slash == NULL) {
        return err_set(cp->reterr, -EINVAL, "'%s' is no address range (ADDRESS/PREFIX)", text);
    }
    text[slash - text] = '\0';
    if (egress_addr_parse(text, &c.addr) < 0 ||
        parse_int(slash + 1, 0, c.addr.family == AF_INET ? 32 : 128, &prefix) < 0) {
        return err_set(cp->reterr, -EINVAL, "'%.*s' is no address range (ADDRESS/PREFIX)", (int)n,
                       s);
    }
    c.prefix = (unsigned)prefix;
    for (unsigned bit = c.prefix; bit < (c.addr.family == AF_INET ? 32u : 128u); bit++) {
        if (c.addr.bytes[bit / 8] & (0x80 >> (bit % 8))) {
            return err_set(cp->reterr, -EINVAL, "'%.*s' has bits set past its prefix", (int)n, s);
        }
    }
    if (cp->n == cp->max) {
        return err_set(cp->reterr, -E2BIG, "more than %zu address ranges", cp->max);
    }
    cp->out[cp->n++] = c;
    return 0;
}

int
egress_cidrs_parse(const char *text, struct egress_cidr *out, size_t max, struct err *reterr)
{
    struct cidrs_parse cp = {.out = out, .max = max, .reterr = reterr};
    int r = each_entry(text, one_cidr, &cp);

    return r < 0 ? r : (int)cp.n;
}

bool
egress_cidrs_contain(const struct egress_cidr *c, size_t n, const struct egress_addr *a)
{
    for (size_t i = 0; i < n; i++) {
        if (c[i].addr.family == a->family && prefix_eq(a->bytes, c[i].addr.bytes, c[i].prefix)) {
            return true;
        }
    }
    return false;
}

/* ---- names ----------------------------------------------------------------------------------- */

/* Whether s (n bytes) is a DNS name of letters, digits, '-' and '_' in labels of 1 to 63. */
static bool
is_name(const char *s, size_t n)
{
    size_t label = 0;

    if (n == 0 || n > EGRESS_NAME_MAX) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char c = s[i];

        if (c == '.') {
            if (label == 0 || s[i - 1] == '-') {
                return false;
            }
            label = 0;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '_' || (c == '-' && label > 0)) {
            if (++label > 63) {
                return false;
            }
        } else {
            return false;
        }
    }
    return label > 0 && s[n - 1] != '-';
}

int
egress_host_normalize(const char *host, size_t n, char *out, struct egress_addr *ret_addr)
{
    char text[EGRESS_NAME_MAX + 2];
    struct egress_addr a;

    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
        host++, n -= 2; /* an IPv6 literal as a URL writes it */
        if (n >= sizeof(text) || memchr(host, ':', n) == NULL) {
            return -EINVAL;
        }
    }
    if (n > 0 && host[n - 1] == '.') {
        n--;
    }
    if (n == 0 || n >= sizeof(text) || memchr(host, '\0', n) != NULL) {
        return -EINVAL;
    }
    memcpy(text, host, n);
    text[n] = '\0';
    if (egress_addr_parse(text, &a) == 0) {
        egress_addr_format(&a, out, EGRESS_NAME_MAX + 1);
        if (ret_addr != NULL) {
            *ret_addr = a;
        }
        return 1;
    }
    if (!is_name(text, n)) {
        return -EINVAL;
    }
    for (size_t i = 0; i <= n; i++) {
        out[i] = (char)tolower((unsigned char)text[i]);
    }
    /* A name of digits and dots only that is no address ("1.2.3", "010.0.0.1") is refused:
     * resolvers and clients read such names as addresses in ways of their own. */
    return strspn(out, "0123456789.") == n ? -EINVAL : 0;
}

/* "name", "*.name", "name:port", "[v6]:port" into *ret. */
static int
rule_parse(const char *text, struct egress_rule *ret, struct err *reterr)
{
    struct egress_rule r = {0};
    const char *host = text, *colon = strrchr(text, ':');
    size_t n = strlen(text);
    int port = 0, kind;

    if (colon != NULL && (text[0] != '[' || colon > strchr(text, ']')) &&
        (text[0] == '[' || strchr(text, ':') == colon)) {
        if (parse_int(colon + 1, 1, 65535, &port) < 0) {
            return err_set(reterr, -EINVAL, "'%.100s': the port must be 1 to 65535", text);
        }
        n = (size_t)(colon - text);
    }
    if (n > 2 && host[0] == '*' && host[1] == '.') {
        r.suffix = true;
        host += 2, n -= 2;
    }
    kind = egress_host_normalize(host, n, r.name, NULL);
    if (kind < 0 || (kind == 1 && r.suffix)) {
        return err_set(reterr, -EINVAL,
                       "'%.100s' is no name, '*.name' or address (with an optional ':port')", text);
    }
    r.literal = kind == 1;
    r.port = (uint16_t)port;
    *ret = r;
    return 0;
}

static int
list_from_json(const json_t *a, const char *where, const char *which, struct egress_rule **ret,
               size_t *ret_n, struct err *reterr)
{
    size_t i;
    json_t *v;

    if (a == NULL) {
        return 0;
    }
    if (!json_is_array(a) || json_array_size(a) > EGRESS_RULES_MAX) {
        return err_set(reterr, -EINVAL, "%s.%s must be an array of at most %d strings", where,
                       which, EGRESS_RULES_MAX);
    }
    *ret = xcalloc(json_array_size(a) + 1, sizeof(**ret));
    json_array_foreach (a, i, v) {
        if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
            return err_set(reterr, -EINVAL, "%s.%s must hold strings", where, which);
        }
        if (rule_parse(json_string_value(v), &(*ret)[i], reterr) < 0) {
            return err_wrap(reterr, -EINVAL, "%s.%s", where, which);
        }
        (*ret_n)++;
    }
    return 0;
}

int
egress_rules_from_json(const json_t *obj, const char *where, struct egress_rules *ret,
                       struct err *reterr)
{
    struct egress_rules r = {0};
    const char *key;
    json_t *v;

    if (!json_is_object(obj) || json_object_get(obj, "allow") == NULL) {
        return err_set(reterr, -EINVAL, "%s must be an object with \"allow\" (and \"deny\")",
                       where);
    }
    json_object_foreach ((json_t *)obj, key, v) {
        if (strcmp(key, "allow") != 0 && strcmp(key, "deny") != 0) {
            return err_set(reterr, -EINVAL, "unknown key '%s.%.64s'", where, key);
        }
    }
    if (list_from_json(json_object_get(obj, "allow"), where, "allow", &r.allow, &r.n_allow,
                       reterr) < 0 ||
        list_from_json(json_object_get(obj, "deny"), where, "deny", &r.deny, &r.n_deny, reterr) <
            0) {
        egress_rules_done(&r);
        return -EINVAL;
    }
    *ret = r;
    return 0;
}

void
egress_rules_done(struct egress_rules *r)
{
    free(r->allow);
    free(r->deny);
    *r = (struct egress_rules){0};
}

void
egress_rules_copy(struct egress_rules *dst, const struct egress_rules *src)
{
    dst->allow = xcalloc(src->n_allow + 1, sizeof(*dst->allow));
    dst->deny = xcalloc(src->n_deny + 1, sizeof(*dst->deny));
    if (src->n_allow > 0) { /* a list never given is NULL: no memcpy() from it */
        memcpy(dst->allow, src->allow, src->n_allow * sizeof(*dst->allow));
    }
    if (src->n_deny > 0) {
        memcpy(dst->deny, src->deny, src->n_deny * sizeof(*dst->deny));
    }
    dst->n_allow = src->n_allow;
    dst->n_deny = src->n_deny;
}

static bool
rule_matches(const struct egress_rule *r, const char *host, uint16_t port)
{
    size_t n = strlen(host), m = strlen(r->name);

    if (r->port != 0 ? port != r->port : port != 80 && port != 443) {
        return false;
    }
    if (!r->suffix) {
        return strcmp(host, r->name) == 0;
    }
    /* "*.example.com": a.example.com and a.b.example.com, never example.com nor xexample.com */
    return n > m + 1 && host[n - m - 1] == '.' && strcmp(host + n - m, r->name) == 0;
}

enum egress_verdict
egress_rules_check(const struct egress_rules *r, const char *host, uint16_t port)
{
    bool allowed = false;

    for (size_t i = 0; i < r->n_deny; i++) {
        struct egress_rule any = r->deny[i];

        /* A deny entry without a port denies the name on every port. */
        if (any.port == 0) {
            any.port = port;
        }
        if (rule_matches(&any, host, port)) {
            return EGRESS_DENIED;
        }
    }
    for (size_t i = 0; i < r->n_allow && !allowed; i++) {
        allowed = rule_matches(&r->allow[i], host, port);
    }
    return allowed ? EGRESS_ALLOWED : EGRESS_NOT_ALLOWED;
}

int
egress_narrowing_from_json(const json_t *obj, const char *where, struct egress_narrowing *ret,
                           struct err *reterr)
{
    json_t *o;
    int r;

    if (!json_is_object(obj)) {
        return err_set(reterr, -EINVAL, "%s must be an object with \"allow\" and/or \"deny\"",
                       where);
    }
    *ret = (struct egress_narrowing){.allow_all = json_object_get(obj, "allow") == NULL};
    o = OOM_CHECK(json_copy((json_t *)obj)); /* shallow: the lists are shared, not changed */
    if (ret->allow_all) {
        (void)json_object_set_new(o, "allow", OOM_CHECK(json_array()));
    }
    r = egress_rules_from_json(o, where, &ret->rules, reterr);
    json_decref(o);
    return r;
}

void
egress_narrowing_done(struct egress_narrowing *n)
{
    egress_rules_done(&n->rules);
}

void
egress_narrowing_copy(struct egress_narrowing *dst, const struct egress_narrowing *src)
{
    dst->allow_all = src->allow_all;
    egress_rules_copy(&dst->rules, &src->rules);
}

enum egress_verdict
egress_narrowed_check(const struct egress_rules *profile, const struct egress_narrowing *n,
                      const char *host, uint16_t port, const char **ret_by)
{
    enum egress_verdict v = egress_rules_check(profile, host, port);
    const char *by = "profile";

    if (v == EGRESS_ALLOWED && n != NULL) {
        v = egress_rules_check(&n->rules, host, port);
        if (v == EGRESS_NOT_ALLOWED && n->allow_all) {
            v = EGRESS_ALLOWED;
        }
        by = "session";
    }
    if (ret_by != NULL) {
        *ret_by = by;
    }
    return v;
}

/* ---- the hosts map --------------------------------------------------------------------------- */

struct hosts_parse {
    struct egress_host *out;
    size_t max, n;
    struct err *reterr;
};

static int
one_host(const char *s, size_t n, void *arg)
{
    struct hosts_parse *hp = arg;
    const char *eq = memchr(s, '=', n);
    struct egress_host h = {0};
    char addr[64];
    size_t an;

    if (eq == NULL || egress_host_normalize(s, (size_t)(eq - s), h.name, NULL) != 0) {
        return err_set(hp->reterr, -EINVAL, "'%.*s' is no NAME=ADDRESS", (int)MIN(n, 100), s);
    }
    an = n - (size_t)(eq - s) - 1;
    if (an >= sizeof(addr)) {
        return err_set(hp->reterr, -EINVAL, "'%.*s': the address is too long", (int)MIN(n, 100), s);
    }
    memcpy(addr, eq + 1, an);
    addr[an] = '\0';
    if (egress_addr_parse(addr, &h.addr) < 0) {
        return err_set(hp->reterr, -EINVAL, "'%.*s': '%s' is no address", (int)MIN(n, 100), s,
                       addr);
    }
    if (hp->n == hp->max) {
        return err_set(hp->reterr, -E2BIG, "more than %zu pinned names", hp->max);
    }
    hp->out[hp->n++] = h;
    return 0;
}

int
egress_hosts_parse(const char *text, struct egress_host *out, size_t max, struct err *reterr)
{
    struct hosts_parse hp = {.out = out, .max = max, .reterr = reterr};
    int r = each_entry(text, one_host, &hp);

    return r < 0 ? r : (int)hp.n;
}
