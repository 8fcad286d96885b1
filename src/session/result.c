/* The answer of an ended execution, pure (no event_base, no I/O; tests/unit/test-result.c
 * table-tests it): the kernel's done, decoded by kernel/proto.c, and the execution's phase and
 * cause give the API status and whether the namespace survived; the epoch contract (which
 * generation moves the epoch) is here too. Status names exist for the views alone
 * (session_exec_status_to_string()). */
#include <string.h>

#include "session-internal.h"

static const char *const exec_status_names[SESSION_EXEC__COUNT] = {
    [SESSION_EXEC_OK] = "ok",           [SESSION_EXEC_ERROR] = "error",
    [SESSION_EXEC_TIMEOUT] = "timeout", [SESSION_EXEC_INTERRUPTED] = "interrupted",
    [SESSION_EXEC_OOM] = "oom",
};

const char *
session_exec_status_to_string(enum session_exec_status st)
{
    return st >= 0 && st < SESSION_EXEC__COUNT ? exec_status_names[st] : NULL;
}

void
result_classify(const struct kernel_done *d, enum exec_phase phase, enum exec_cause cause,
                uint64_t epoch0, uint64_t epoch, struct result *ret)
{
    bool died = d->status == KERNEL_DONE_DIED;
    bool preserved = !died && epoch == epoch0;
    struct result r = {.status = SESSION_EXEC_ERROR, .state_preserved = preserved};

    if (phase != PH_RUNNING && (died || d->status == KERNEL_DONE_INTERRUPTED)) {
        /* Ended by our interrupt, or by the restart after it: the restart lost the namespace. */
        r.status = cause == CAUSE_TIMEOUT ? SESSION_EXEC_TIMEOUT : SESSION_EXEC_INTERRUPTED;
        r.state_preserved = phase != PH_RESTARTING && preserved;
    } else if (died && d->oom) {
        r.status = SESSION_EXEC_OOM;
    } else if (died) {
        r.error = RESULT_ERROR_DIED;
        r.error_value = d->reason ? d->reason : "the interpreter exited";
    } else if (d->status == KERNEL_DONE_OK) {
        r.status = SESSION_EXEC_OK;
    } else if (d->status == KERNEL_DONE_INTERRUPTED) {
        r.status = SESSION_EXEC_INTERRUPTED;
    }
    if (d->status == KERNEL_DONE_REJECTED) {
        r.error = RESULT_ERROR_REJECTED;
        r.error_value = d->reason ? d->reason : "the kernel refused the request";
    }
    *ret = r;
}

enum session_exec_status
result_lost_status(bool died_of_oom)
{
    return died_of_oom ? SESSION_EXEC_OOM : SESSION_EXEC_ERROR;
}

bool
result_epoch_moves(int64_t epoch_gen, int64_t reported_gen)
{
    return reported_gen != epoch_gen;
}

bool
result_restart_is_ours(const char *reason)
{
    return reason != NULL && strcmp(reason, RESTART_REASON) == 0;
}
