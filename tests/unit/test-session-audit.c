/* Unit test of the audit lines of sessions and executions (src/server/session-audit.c): the
 * session module reports events, the API layer writes them, and the lines must stay exactly
 * what they were when session.c wrote them (the suites grep them). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "audit/audit.h"
#include "server/session-audit.h"
#include "session/session.h"
#include "tap.h"
#include "util/macro.h"

static const struct {
    struct session_audit a;
    const char *want; /* the line after its "ts" */
} cases[] = {
    {{.kind = SESSION_AUDIT_CREATED,
      .actor = "tenant:a",
      .tenant = "a",
      .session = "s1",
      .profile = "python",
      .container = "c1",
      .cold = true},
     "\"action\":\"session.created\",\"actor\":\"tenant:a\",\"tenant\":\"a\",\"session\":\"s1\","
     "\"profile\":\"python\",\"container\":\"c1\",\"source\":\"cold\"}"},
    {{.kind = SESSION_AUDIT_ENDED,
      .actor = "daemon",
      .tenant = "a",
      .session = "s1",
      .why = "lost",
      .detail = "its container was gone at start"},
     "\"action\":\"session.ended\",\"actor\":\"daemon\",\"tenant\":\"a\",\"session\":\"s1\","
     "\"why\":\"lost\",\"detail\":\"its container was gone at start\"}"},
    {{.kind = SESSION_AUDIT_EXEC_STARTED,
      .actor = "admin",
      .tenant = "a",
      .session = "s1",
      .execution = "e1",
      .is_cmd = true,
      .code_sha256 = "ab",
      .code_bytes = 7,
      .timeout_s = 30},
     "\"action\":\"execution.started\",\"actor\":\"admin\",\"tenant\":\"a\",\"session\":\"s1\","
     "\"execution\":\"e1\",\"kind\":\"command\",\"code_sha256\":\"ab\",\"code_bytes\":7,"
     "\"timeout_s\":30}"},
    {{.kind = SESSION_AUDIT_EXEC_FINISHED,
      .actor = "tenant:a",
      .tenant = "a",
      .session = "s1",
      .execution = "e1",
      .code_sha256 = "ab",
      .code_bytes = 7,
      .status = SESSION_EXEC_TIMEOUT,
      .duration_ms = 1500,
      .epoch = 2},
     "\"action\":\"execution.finished\",\"actor\":\"tenant:a\",\"tenant\":\"a\",\"session\":"
     "\"s1\",\"execution\":\"e1\",\"code_sha256\":\"ab\",\"code_bytes\":7,\"status\":\"timeout\","
     "\"duration_ms\":1500,\"epoch\":2}"},
    {{.kind = SESSION_AUDIT_EXEC_FINISHED,
      .actor = "daemon",
      .tenant = "a",
      .session = "s1",
      .execution = "e0",
      .status = SESSION_EXEC_INTERRUPTED,
      .epoch = 3,
      .orphan = true},
     "\"action\":\"execution.finished\",\"actor\":\"daemon\",\"tenant\":\"a\",\"session\":"
     "\"s1\",\"execution\":\"e0\",\"status\":\"interrupted\",\"epoch\":3,\"orphan\":true}"},
};

TEST(lines)
{
    char path[] = "/tmp/test-session-audit-XXXXXX";
    int fd = mkstemp(path);
    char line[1024];
    FILE *f;
    size_t i = 0;

    ASSERT_TRUE(fd >= 0);
    (void)close(fd);
    ASSERT_OK(audit_open(path, NULL));
    for (size_t k = 0; k < ELEMENTSOF(cases); k++) {
        server_session_audit(&cases[k].a, NULL);
    }
    audit_close();
    f = fopen(path, "r");
    ASSERT_TRUE(f != NULL);
    while (f != NULL && i < ELEMENTSOF(cases) && fgets(line, sizeof(line), f) != NULL) {
        /* {"ts":"2026-...Z",<rest> */
        const char *rest = strstr(line, "Z\",");

        line[strcspn(line, "\n")] = '\0';
        TAP_CHECK(rest != NULL && strcmp(rest + 3, cases[i].want) == 0, "line %zu: %s", i, line);
        i++;
    }
    ASSERT_EQ_U(i, ELEMENTSOF(cases));
    if (f != NULL) {
        (void)fclose(f);
    }
    (void)unlink(path);
}

int
main(void)
{
    RUN(lines);
    return tap_done();
}
