/* The audit lines of sessions and executions: the session module reports what happened
 * (struct session_audit), this writes it (style.md §1: nothing below server/api writes the
 * audit log). */
#pragma once

struct session_audit;

/* A session_audit_cb: writes the event's line with audit_log(). userdata unused. */
void api_session_audit(const struct session_audit *a, void *userdata);
