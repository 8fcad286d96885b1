/* Egress by name (docs/egress.md): what a sandbox may reach through the daemon's proxy.
 *
 * A profile's list: {"allow": [...], "deny": [...]}, each entry an exact name
 * ("api.example.com"), a suffix ("*.pythonhosted.org": every name under it, not the name
 * itself) or an address literal ("10.1.2.3", "[fd00::1]"), with an optional port (":8443");
 * an allow entry without one allows the default ports 80 and 443, a deny entry without one
 * denies every port. A deny entry wins over every allow entry. The
 * operator's hosts map (egress.hosts: names pinned to addresses, consulted before DNS) and the
 * address ranges a resolved address may be in (every range but loopback, private, link-local,
 * multicast, reserved and documentation ones, unless egress.allow_cidrs lists it) live here too.
 *
 * Pure: no I/O, no event base; unit-tested (tests/unit/test-egress.c) and fuzzed. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <jansson.h>

#include "util/err.h"

#define EGRESS_NAME_MAX  253 /* a DNS name's characters, without its final dot */
#define EGRESS_RULES_MAX 128 /* entries of one list (allow or deny) */
#define EGRESS_HOSTS_MAX 256 /* names of egress.hosts */
#define EGRESS_CIDRS_MAX 64  /* ranges of egress.allow_cidrs */
/* A sandbox's gate is the directory <egress.dir>/<its slot id>, bind-mounted read-only at
 * EGRESS_MOUNT in its container, with the proxy's socket EGRESS_SOCKET in it (proxy.h). The
 * longest egress.dir leaves room for a 32-digit slot id and the socket's name in a unix socket's
 * address (sun_path: 108 bytes). */
#define EGRESS_DIR_MAX 63
/* The forwarder in a sandbox (images/python/sandbox/egress.py) holds egress.max_connections +
 * EGRESS_FORWARDER_SLACK connections at once (so that the proxy's 429 reaches the sandbox), each
 * with its two sockets and up to two pipes when it relays, and as many refused ones while their
 * refusal is read (one socket each): the descriptors it may need, within the profile's nofile. */
#define EGRESS_FORWARDER_SLACK 4u
#define EGRESS_FORWARDER_FDS(max_connections) \
    (7ul * ((unsigned long)(max_connections) + EGRESS_FORWARDER_SLACK) + 16ul)
#define EGRESS_MOUNT  "/run/sandpool/egress"
#define EGRESS_SOCKET "proxy.sock"

/* An address: IPv4 (family AF_INET, the first 4 bytes) or IPv6 (AF_INET6, 16 bytes). */
struct egress_addr {
    int family;
    uint8_t bytes[16];
};

struct egress_rule {
    char name[EGRESS_NAME_MAX + 1]; /* lowercase; a suffix rule's name is what follows "*." */
    bool suffix;                    /* "*.name": the names under name */
    bool literal;                   /* an address literal (name is its canonical text) */
    uint16_t port;                  /* 0: the default ports, 80 and 443 */
};

struct egress_rules {
    struct egress_rule *allow, *deny;
    size_t n_allow, n_deny;
};

enum egress_verdict {
    EGRESS_ALLOWED,
    EGRESS_DENIED,      /* a deny entry matches */
    EGRESS_NOT_ALLOWED, /* no allow entry matches */
    EGRESS__COUNT,
};
const char *egress_verdict_to_string(enum egress_verdict v);

/* A host as a client wrote it (a name, an IPv4 literal, an IPv6 literal with or without its
 * brackets), n bytes: into out (EGRESS_NAME_MAX + 1 bytes) as the rules compare it (lowercase,
 * no final dot; an address in its canonical text, and *ret_addr when ret_addr is not NULL and it
 * is one). 1 for an address literal, 0 for a name, -EINVAL for neither (empty, a label over 63
 * characters or not of letters, digits and '-' (and '_'), over EGRESS_NAME_MAX). */
int egress_host_normalize(const char *host, size_t n, char *out, struct egress_addr *ret_addr);

/* {"allow": [...], "deny": [...]} ("deny" optional; "allow" may be empty: nothing is allowed)
 * into *ret (egress_rules_done() frees it). -EINVAL with the entry named in reterr. */
int egress_rules_from_json(const json_t *obj, const char *where, struct egress_rules *ret,
                           struct err *reterr);
void egress_rules_done(struct egress_rules *r);
/* *dst = a copy of src (egress_rules_done() frees it). */
void egress_rules_copy(struct egress_rules *dst, const struct egress_rules *src);
/* Whether host (as egress_host_normalize() wrote it) on port may be reached. */
enum egress_verdict egress_rules_check(const struct egress_rules *r, const char *host,
                                       uint16_t port);

/* A session's narrowing of its profile's list, given at its creation (docs/egress.md):
 * {"allow": [...], "deny": [...]}, entries as a profile's, both lists optional. A name is
 * reached only when the profile allows it and the narrowing does not refuse it: a narrowing can
 * take away, never add. Without "allow" it keeps what the profile allows, less its "deny". */
struct egress_narrowing {
    struct egress_rules rules;
    bool allow_all; /* no "allow": only its deny entries narrow */
};
/* -EINVAL with the entry named in reterr (where: its place, e.g. "egress"). */
int egress_narrowing_from_json(const json_t *obj, const char *where, struct egress_narrowing *ret,
                               struct err *reterr);
void egress_narrowing_done(struct egress_narrowing *n);
void egress_narrowing_copy(struct egress_narrowing *dst, const struct egress_narrowing *src);
/* The verdict for host on port under profile narrowed by n (NULL: not narrowed); *ret_by (when
 * not NULL) says whose list refused it: "profile" or "session". */
enum egress_verdict egress_narrowed_check(const struct egress_rules *profile,
                                          const struct egress_narrowing *n, const char *host,
                                          uint16_t port, const char **ret_by);

/* ---- addresses ---- */

/* Parses an address literal ("1.2.3.4", "::1"; no brackets): 0, or -EINVAL. */
int egress_addr_parse(const char *s, struct egress_addr *ret);
/* Its canonical text (inet_ntop's) into out (at least 46 bytes). */
void egress_addr_format(const struct egress_addr *a, char *out, size_t n);
/* An address from a sockaddr (AF_INET or AF_INET6): 0, or -EAFNOSUPPORT. */
int egress_addr_from_sockaddr(const struct sockaddr *sa, struct egress_addr *ret);
/* The kind of range a refused address is in ("loopback", "private", "link-local",
 * "multicast", "reserved", ...), or NULL for an address of the public internet. An IPv4 address
 * mapped into IPv6 (::ffff:a.b.c.d, 64:ff9b::a.b.c.d) is judged as the IPv4 address. */
const char *egress_addr_refused_range(const struct egress_addr *a);

struct egress_cidr {
    struct egress_addr addr;
    unsigned prefix;
};
/* "10.0.0.0/8,fd00::/8" (blanks around entries allowed; "" is none) into out (at most max):
 * the count, or -EINVAL (an entry is not a range, its host bits are set) / -E2BIG. */
int egress_cidrs_parse(const char *text, struct egress_cidr *out, size_t max, struct err *reterr);
bool egress_cidrs_contain(const struct egress_cidr *c, size_t n, const struct egress_addr *a);

/* ---- the hosts map ---- */

struct egress_host {
    char name[EGRESS_NAME_MAX + 1];
    struct egress_addr addr;
};
/* "name=address,name=address" (egress.hosts; "" is none) into out (at most max): the count,
 * or -EINVAL / -E2BIG. A name may come back with several addresses (one entry each). */
int egress_hosts_parse(const char *text, struct egress_host *out, size_t max, struct err *reterr);
