/* Fuzz target: the kernel's "done" message, decoded completely (kernel/proto.c) and classified
 * (session/result.c). The input is a JSON object whose "t" is forced to "done", so every input
 * exercises the done decoder; a decoded done must hold what proto.h promises, and every phase and
 * cause must classify it into a valid status. */
#include <jansson.h>

#include "fuzz.h"
#include "kernel/proto.h"
#include "session/session-internal.h"

static void
check_done(json_t *obj, const struct kernel_done *d)
{
    json_t *tb;

    CHECK(kernel_done_status_to_string(d->status) != NULL);
    CHECK(d->result == NULL || d->result_len == json_string_length(json_object_get(obj, "result")));
    if (d->has_error) {
        tb = d->error.traceback;
        CHECK(d->error.name != NULL && d->error.value != NULL && json_is_array(tb));
        for (size_t i = 0; i < json_array_size(tb); i++) {
            CHECK(json_is_string(json_array_get(tb, i)));
        }
        CHECK(d->error.line >= -1 && d->error.column >= -1);
    }
    CHECK(!d->has_exit_code || (d->exit_code >= -255 && d->exit_code <= 255));
    CHECK(d->cpu_ms >= -1 && d->peak_memory_bytes >= -1);
    CHECK(d->has_resources || (d->cpu_ms == -1 && d->peak_memory_bytes == -1));
    for (int i = 0; i < 2; i++) {
        CHECK(d->truncated[i].total <= INT64_MAX && d->truncated[i].dropped <= INT64_MAX);
    }
}

static void
classify_all(const struct kernel_done *d)
{
    static const enum exec_phase phases[] = {PH_RUNNING, PH_INTERRUPTED, PH_RESTARTING};
    static const enum exec_cause causes[] = {CAUSE_NONE, CAUSE_TIMEOUT, CAUSE_CLIENT};

    for (size_t p = 0; p < 3; p++) {
        for (size_t c = 0; c < 3; c++) {
            struct result r;

            result_classify(d, phases[p], causes[c], 1, 1 + (p & 1), &r);
            CHECK(session_exec_status_to_string(r.status) != NULL);
            CHECK(r.error == RESULT_ERROR_KERNEL || r.error_value != NULL);
            CHECK(!r.state_preserved || d->status != KERNEL_DONE_DIED);
        }
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *obj = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL);
    struct kernel_msg m;

    if (json_is_object(obj)) {
        (void)json_object_set_new(obj, "t", json_string("done"));
        if (kernel_proto_decode(obj, &m) == 0) {
            CHECK(m.type == KERNEL_MSG_DONE && m.id != NULL);
            check_done(obj, &m.done);
            classify_all(&m.done);
        }
    }
    json_decref(obj);
    return 0;
}
