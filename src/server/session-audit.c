/* The audit lines of sessions and executions; see session-audit.h. Their content (keys and
 * their order) is what the suites grep for: "session.created", "session.ended",
 * "execution.started", "execution.finished", "session.paused" (idle; an explicit pause's is
 * sessions.c's), "session.resumed", "session.hibernated" and "session.woken". The last four a
 * tenant can repeat at will (pause, call, pause...): at most AUDIT_LIMITED_PER_S a second each
 * per tenant, the rest counted (audit_log_limited()). */
#include "server/session-audit.h"

#include <stdio.h>

#include <jansson.h>

#include "audit/audit.h"
#include "session/session.h"
#include "snapshot/snapshot.h"
#include "store/nodes.h"
#include "util/macro.h"

static void
audit_execution_finished(const struct session_audit *a)
{
    const char *status = session_exec_status_to_string(a->status);

    if (a->orphan) {
        audit_log("execution.finished", a->actor,
                  OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s, s:I, s:b}", "tenant", a->tenant,
                                      "session", a->session, "execution", a->execution, "status",
                                      status, "epoch", (json_int_t)a->epoch, "orphan", 1)));
        return;
    }
    audit_log("execution.finished", a->actor,
              OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:I, s:I}", "tenant", a->tenant,
                                  "session", a->session, "execution", a->execution, "code_sha256",
                                  a->code_sha256, "code_bytes", (json_int_t)a->code_bytes, "status",
                                  status, "duration_ms", (json_int_t)a->duration_ms, "epoch",
                                  (json_int_t)a->epoch)));
}

void
server_session_audit(const struct session_audit *a, void *userdata)
{
    (void)userdata;
    switch (a->kind) {
    case SESSION_AUDIT_CREATED:
        audit_log("session.created", a->actor,
                  OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s, s:s}", "tenant", a->tenant, "session",
                                      a->session, "profile", a->profile, "container", a->container,
                                      "source", a->cold ? "cold" : "warm")));
        break;
    case SESSION_AUDIT_ENDED:
        audit_log("session.ended", a->actor,
                  OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s}", "tenant", a->tenant, "session",
                                      a->session, "why", a->why, "detail", a->detail)));
        break;
    case SESSION_AUDIT_EXEC_STARTED:
        audit_log("execution.started", a->actor,
                  OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I}", "tenant", a->tenant,
                                      "session", a->session, "execution", a->execution, "kind",
                                      a->is_cmd ? "command" : "code", "code_sha256", a->code_sha256,
                                      "code_bytes", (json_int_t)a->code_bytes, "timeout_s",
                                      (json_int_t)a->timeout_s)));
        break;
    case SESSION_AUDIT_EXEC_FINISHED:
        audit_execution_finished(a);
        break;
    case SESSION_AUDIT_PAUSED:
        audit_log_limited("session.paused", a->actor, a->tenant,
                          OOM_CHECK(json_pack("{s:s, s:s, s:s}", "tenant", a->tenant, "session",
                                              a->session, "why", a->why)));
        break;
    case SESSION_AUDIT_RESUMED:
        audit_log_limited(
            "session.resumed", a->actor, a->tenant,
            OOM_CHECK(json_pack("{s:s, s:s, s:I}", "tenant", a->tenant, "session", a->session,
                                "duration_ms", (json_int_t)a->duration_ms)));
        break;
    case SESSION_AUDIT_HIBERNATED:
        audit_log_limited(
            "session.hibernated", a->actor, a->tenant,
            OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s, s:I, s:I}", "tenant", a->tenant, "session",
                                a->session, "why", a->why, "snapshot", a->snapshot, "bytes",
                                (json_int_t)a->bytes, "duration_ms", (json_int_t)a->duration_ms)));
        break;
    case SESSION_AUDIT_WOKEN:
        audit_log_limited(
            "session.woken", a->actor, a->tenant,
            OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I}", "tenant", a->tenant,
                                "session", a->session, "snapshot", a->snapshot, "container",
                                a->container, "source", a->cold ? "cold" : "warm", "epoch",
                                (json_int_t)a->epoch, "duration_ms", (json_int_t)a->duration_ms)));
        break;
    }
}

void
server_audit_node_lost(const char *lost, const char *claimer, const struct store_nodes_claimed *c)
{
    char detail[192];

    (void)snprintf(detail, sizeof(detail), "its node '%s' was lost; ended by node '%s'", lost,
                   claimer);
    for (size_t i = 0; i < c->n_ended; i++) {
        audit_log(
            "session.ended", "daemon",
            OOM_CHECK(json_pack("{s:s, s:s, s:s, s:s}", "tenant", c->ended[2 * i + 1], "session",
                                c->ended[2 * i], "why", "node_lost", "detail", detail)));
    }
    audit_log("node.lost", "daemon",
              OOM_CHECK(json_pack("{s:s, s:s, s:I, s:I}", "node", lost, "claimed_by", claimer,
                                  "sessions_ended", (json_int_t)c->n_ended, "sessions_adopted",
                                  (json_int_t)c->n_adopted)));
}

void
server_snapshot_audit(const struct snapshot_audit *a, void *userdata)
{
    json_t *detail;

    if (a->session != NULL) { /* created */
        detail = OOM_CHECK(json_pack("{s:s, s:s, s:s, s:I, s:s}", "tenant", a->tenant, "session",
                                     a->session, "snapshot", a->snapshot, "size",
                                     (json_int_t)a->size, "sha256", a->sha256));
    } else {
        detail = OOM_CHECK(json_pack("{s:s, s:s}", "tenant", a->tenant, "snapshot", a->snapshot));
    }
    if (a->why != NULL) {
        (void)json_object_set_new(detail, "why", OOM_CHECK(json_string(a->why)));
    }
    audit_log(a->action, a->actor, detail);
}
