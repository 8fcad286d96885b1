/* Audit log: one JSON line per security-relevant action (who did what to which session, file or
 * setting), appended to a file of its own so that it can be shipped and kept apart from the
 * diagnostic log. Process-wide like the log (one daemon, one audit trail); loop thread only.
 *
 * A line is {"ts": RFC 3339 UTC with milliseconds, "action": ..., "actor": ..., ...fields}. Actors
 * are "tenant:<id>", "admin" or "daemon" (idle reaper, drift quarantine). Never put a token, a
 * code body or sandbox output in fields: callers pass hashes and sizes instead. */
#pragma once

#include <stdbool.h>

#include <jansson.h>

struct err;

/* Longest line written, newline included; a line that would be longer is replaced by a line with
 * the same ts, action and actor plus "truncated": true, so the action is never lost. */
#define AUDIT_LINE_MAX 4096

/* Opens the audit file (O_APPEND|O_CREAT|O_CLOEXEC, 0600); path "" = audit off. Reopen on SIGHUP
 * is optional. Calling it again closes the previous file first (also when the new open fails,
 * which leaves the audit off). Returns 0 or a negative errno with reterr set. */
int audit_open(const char *path, struct err *reterr);
/* Closes the audit file, after the count lines of audit_log_limited() still due; audit_log() is
 * a no-op afterwards. Safe to call when nothing is open. */
void audit_close(void);
/* One JSON line {"ts": RFC3339 with ms, "action": action, "actor": actor, ...fields}, written
 * with a single write(2) per line. fields is stolen (may be NULL). Never a token, code body or
 * output. Keys "ts", "action" and "actor" in fields are ignored. A failed write is logged (at most
 * once a minute) and otherwise ignored: auditing never fails the request it records. */
void audit_log(const char *action, const char *actor, json_t *fields);
/* True when an audit file is open (callers may skip building fields otherwise). */
bool audit_enabled(void);

/* A line of a kind that a client can repeat at will (a refused credential, a pause and its
 * resume...): as audit_log(), but at most AUDIT_LIMITED_PER_S lines a second per action and
 * tenant (NULL: one count for all, e.g. anonymous clients). The rest are counted, and said in one
 * line {"suppressed": n, "tenant"} of that action (its actor the last one suppressed) once their
 * second is over: at the next line of the same kind, or at audit_limited_flush(). fields is
 * stolen. */
#define AUDIT_LIMITED_PER_S 20u
void audit_log_limited(const char *action, const char *actor, const char *tenant, json_t *fields);
/* Writes the count lines of the seconds that are over (the cron calls it; audit_close() writes
 * all). */
void audit_limited_flush(void);
/* Lines audit_log_limited() suppressed since the start (counted in their count lines). */
unsigned long long audit_limited_suppressed_total(void);
