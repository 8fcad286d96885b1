/* The audit lines of sessions and executions: the session module reports what happened
 * (struct session_audit), this writes it (style.md §1: nothing below server/api writes the
 * audit log). */
#pragma once

struct session_audit;
struct snapshot_audit;
struct store_nodes_claimed;

/* A session_audit_cb: writes the event's line with audit_log(). userdata unused. */
void server_session_audit(const struct session_audit *a, void *userdata);
/* This node (claimer) claimed node lost: a "session.ended" line (actor "daemon", why
 * "node_lost") for each of its live sessions it ended, and a "node.lost" line. */
void server_audit_node_lost(const char *lost, const char *claimer,
                            const struct store_nodes_claimed *c);
/* A snapshot_audit_cb: the snapshot module's events ("snapshot.created", "snapshot.deleted"). */
void server_snapshot_audit(const struct snapshot_audit *a, void *userdata);
