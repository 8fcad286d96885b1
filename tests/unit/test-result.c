/* Unit tests for the pure parts of the session module: result.c (the kernel's done, the
 * execution's phase and cause, and the epochs to the API's answer; the epoch contract) and the
 * session state machine's transition table (session.c). */
#include <stdint.h>

#include "session/session-internal.h"
#include "tap.h"
#include "util/macro.h"

struct row {
    enum kernel_done_status done;
    bool oom;
    const char *reason;
    enum exec_phase phase;
    enum exec_cause cause;
    uint64_t epoch0, epoch;
    /* want */
    enum session_exec_status status;
    bool preserved;
    enum result_error error;
    const char *error_value;
};

static const struct row rows[] = {
    /* Ran to its end. */
    {KERNEL_DONE_OK, false, NULL, PH_RUNNING, CAUSE_NONE, 1, 1, SESSION_EXEC_OK, true,
     RESULT_ERROR_KERNEL, NULL},
    {KERNEL_DONE_ERROR, false, NULL, PH_RUNNING, CAUSE_NONE, 1, 1, SESSION_EXEC_ERROR, true,
     RESULT_ERROR_KERNEL, NULL},
    /* The epoch moved while it ran (a restart's "restarted" came first). */
    {KERNEL_DONE_OK, false, NULL, PH_RUNNING, CAUSE_NONE, 1, 2, SESSION_EXEC_OK, false,
     RESULT_ERROR_KERNEL, NULL},
    /* The code caught nothing and stopped at our interrupt: its namespace survives. */
    {KERNEL_DONE_INTERRUPTED, false, NULL, PH_INTERRUPTED, CAUSE_TIMEOUT, 3, 3,
     SESSION_EXEC_TIMEOUT, true, RESULT_ERROR_KERNEL, NULL},
    {KERNEL_DONE_INTERRUPTED, false, NULL, PH_INTERRUPTED, CAUSE_CLIENT, 3, 3,
     SESSION_EXEC_INTERRUPTED, true, RESULT_ERROR_KERNEL, NULL},
    /* The restart after the grace period ended it: the namespace is gone. */
    {KERNEL_DONE_DIED, false, NULL, PH_RESTARTING, CAUSE_TIMEOUT, 3, 4, SESSION_EXEC_TIMEOUT, false,
     RESULT_ERROR_KERNEL, NULL},
    {KERNEL_DONE_INTERRUPTED, false, NULL, PH_RESTARTING, CAUSE_CLIENT, 3, 3,
     SESSION_EXEC_INTERRUPTED, false, RESULT_ERROR_KERNEL, NULL},
    /* An interrupt the kernel reports without our asking (a KeyboardInterrupt of its own). */
    {KERNEL_DONE_INTERRUPTED, false, NULL, PH_RUNNING, CAUSE_NONE, 1, 1, SESSION_EXEC_INTERRUPTED,
     true, RESULT_ERROR_KERNEL, NULL},
    /* The interpreter died: of memory, or of something it says. */
    {KERNEL_DONE_DIED, true, NULL, PH_RUNNING, CAUSE_NONE, 1, 1, SESSION_EXEC_OOM, false,
     RESULT_ERROR_KERNEL, NULL},
    {KERNEL_DONE_DIED, false, "segfault", PH_RUNNING, CAUSE_NONE, 1, 1, SESSION_EXEC_ERROR, false,
     RESULT_ERROR_DIED, "segfault"},
    {KERNEL_DONE_DIED, false, NULL, PH_RUNNING, CAUSE_NONE, 1, 1, SESSION_EXEC_ERROR, false,
     RESULT_ERROR_DIED, "the interpreter exited"},
    /* Died after our interrupt, of memory: the interrupt's cause says it. */
    {KERNEL_DONE_DIED, true, NULL, PH_INTERRUPTED, CAUSE_TIMEOUT, 1, 1, SESSION_EXEC_TIMEOUT, false,
     RESULT_ERROR_KERNEL, NULL},
    /* The kernel refused the request. */
    {KERNEL_DONE_REJECTED, false, "too big", PH_RUNNING, CAUSE_NONE, 1, 1, SESSION_EXEC_ERROR, true,
     RESULT_ERROR_REJECTED, "too big"},
    {KERNEL_DONE_REJECTED, false, NULL, PH_INTERRUPTED, CAUSE_CLIENT, 1, 1, SESSION_EXEC_ERROR,
     true, RESULT_ERROR_REJECTED, "the kernel refused the request"},
};

TEST(classify)
{
    for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
        const struct row *w = &rows[i];
        struct kernel_done d = {.status = w->done, .oom = w->oom, .reason = w->reason};
        struct result r;

        result_classify(&d, w->phase, w->cause, w->epoch0, w->epoch, &r);
        TAP_CHECK(r.status == w->status && r.state_preserved == w->preserved &&
                      r.error == w->error &&
                      (w->error_value == NULL
                           ? r.error_value == NULL
                           : r.error_value != NULL && strcmp(r.error_value, w->error_value) == 0),
                  "row %zu: %s phase %d cause %d epoch %llu->%llu => %s preserved %d error %d "
                  "'%s' (want %s %d %d)",
                  i, kernel_done_status_to_string(w->done), w->phase, w->cause,
                  (unsigned long long)w->epoch0, (unsigned long long)w->epoch,
                  session_exec_status_to_string(r.status), r.state_preserved, r.error,
                  r.error_value ? r.error_value : "", session_exec_status_to_string(w->status),
                  w->preserved, w->error);
    }
}

TEST(small_rules)
{
    ASSERT_TRUE(result_lost_status(true) == SESSION_EXEC_OOM);
    ASSERT_TRUE(result_lost_status(false) == SESSION_EXEC_ERROR);
    ASSERT_TRUE(!result_epoch_moves(4, 4));
    ASSERT_TRUE(result_epoch_moves(4, 5));
    ASSERT_TRUE(result_epoch_moves(4, 0)); /* a kernel started again from scratch */
    ASSERT_TRUE(result_restart_is_ours(RESTART_REASON));
    ASSERT_TRUE(!result_restart_is_ours("execution did not stop after its timeout"));
    ASSERT_TRUE(!result_restart_is_ours(NULL));
    ASSERT_STREQ(session_exec_status_to_string(SESSION_EXEC_INTERRUPTED), "interrupted");
    ASSERT_TRUE(session_exec_status_to_string(SESSION_EXEC__COUNT) == NULL);
}

/* The state machine's table, both ways: every transition the code makes is allowed, and the
 * ones it must never make are not. */
TEST(transitions)
{
    static const struct {
        enum session_state from, to;
        bool allowed;
    } t[] = {
        {SESSION_CREATING, SESSION_READY, true},
        {SESSION_CREATING, SESSION_CREATE_LOST, true},
        {SESSION_CREATING, SESSION_ENDING, false},
        {SESSION_CREATE_LOST, SESSION_READY, false},
        {SESSION_READY, SESSION_DETACHED, true},
        {SESSION_READY, SESSION_DYING, true},
        {SESSION_READY, SESSION_ENDING, true},
        {SESSION_READY, SESSION_RECONNECTING, false},
        {SESSION_DETACHED, SESSION_RECONNECTING, true},
        {SESSION_DETACHED, SESSION_DYING, true},
        {SESSION_DETACHED, SESSION_ENDING, true},
        {SESSION_DETACHED, SESSION_READY, false},
        {SESSION_RECONNECTING, SESSION_READY, true},
        {SESSION_RECONNECTING, SESSION_DETACHED, true},
        {SESSION_RECONNECTING, SESSION_ENDING, true},
        {SESSION_RECONNECTING, SESSION_DYING, false},
        {SESSION_DYING, SESSION_ENDING, true},
        {SESSION_DYING, SESSION_READY, false},
        {SESSION_DYING, SESSION_DETACHED, false},
        {SESSION_ENDING, SESSION_READY, true},
        {SESSION_ENDING, SESSION_DETACHED, true},
        {SESSION_ENDING, SESSION_DYING, false},
        {SESSION_ENDING, SESSION_ENDING, false},
        {SESSION_READY, SESSION_READY, false},
        {SESSION_READY, SESSION__COUNT, false},
        /* pause.c */
        {SESSION_READY, SESSION_PAUSING, true},
        {SESSION_READY, SESSION_PAUSED, false},
        {SESSION_DETACHED, SESSION_PAUSING, false},
        {SESSION_PAUSING, SESSION_PAUSED, true},
        {SESSION_PAUSING, SESSION_READY, true}, /* the engine refused */
        {SESSION_PAUSING, SESSION_RESUMING, false},
        {SESSION_PAUSED, SESSION_RESUMING, true},
        {SESSION_PAUSED, SESSION_READY, false}, /* only through a confirmed thaw */
        {SESSION_RESUMING, SESSION_READY, true},
        {SESSION_RESUMING, SESSION_PAUSED, true}, /* the thaw failed */
        {SESSION_PAUSED, SESSION_ENDING, true},
        {SESSION_PAUSING, SESSION_ENDING, true},
        {SESSION_RESUMING, SESSION_ENDING, true},
        {SESSION_ENDING, SESSION_PAUSED, true}, /* a failed end of a frozen one */
        {SESSION_ENDING, SESSION_PAUSING, false},
        {SESSION_PAUSED, SESSION_DETACHED, true},
        {SESSION_PAUSED, SESSION_DYING, false},
    };

    for (size_t i = 0; i < ELEMENTSOF(t); i++) {
        TAP_CHECK(session_state_allowed(t[i].from, t[i].to) == t[i].allowed, "%s -> %s: %s",
                  session_state_name(t[i].from), session_state_name(t[i].to),
                  t[i].allowed ? "allowed" : "refused");
    }
    /* Nothing leaves CREATE_LOST (the object is freed), everything registered may end. */
    for (int to = 0; to < SESSION__COUNT; to++) {
        ASSERT_TRUE(!session_state_allowed(SESSION_CREATE_LOST, (enum session_state)to));
    }
    ASSERT_STREQ(session_state_name(SESSION_DYING), "dying");
    ASSERT_STREQ(session_state_name(SESSION_PAUSED), "paused");
}

int
main(void)
{
    RUN(classify);
    RUN(small_rules);
    RUN(transitions);
    return tap_done();
}
