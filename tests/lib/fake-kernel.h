/* A fake of the kernel inside a sandbox (images/python/sandbox/kernel.py) for unit tests: it
 * speaks the kernel protocol (src/kernel/proto.h, the docstring of kernel.py) behind a
 * fake engine's hijacked attach or exec stream (tests/lib/fake-engine.h), without Python.
 *
 * Requests come in as the container's stdin bytes (fake_kernel_feed(), one JSON object a line)
 * and answers leave through the output function, one JSON line each (the engine frames them as
 * stdout). With no output function set, answers are dropped, as kernel.py drops them when nobody
 * is attached. The kernel outlives its attach streams, as the real one outlives sandpoold's.
 *
 * Code is not Python: it is a list of directives, separated by ';' or newlines, run in order:
 *   print TEXT / eprint TEXT   output "TEXT\n" on stdout / stderr
 *   result TEXT                the trailing expression's value is TEXT
 *   raise NAME VALUE           ends with status "error", error {name, value, traceback}
 *   set NAME VALUE / get NAME  namespace: get's value becomes the result, NameError if unset
 *   spam N                     N bytes of stdout (cut at max_output: truncated says so)
 *   sleep MS                   ends MS later (ok)
 *   hang                       runs until interrupted (then "interrupted", namespace kept)
 *   hang-hard                  ignores interrupts: only a restart ends it (status "died")
 *   die / oom                  the worker dies: "restarted" (new generation, namespace lost),
 *                              then done "died" (oom true for oom)
 * Anything else ends with status "error", error name "FakeKernelError". Commands (argv):
 * "echo ARGS..." prints them, "false" exits 1, "hang" runs until interrupted (exit 137); others
 * exit 127. Output past max_output is cut as kernel.py cuts it: the first 3/4 streamed, the last
 * 1/4 sent before done after a "[... N bytes of output cut ...]" line. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct fake_kernel;

/* Writes one answer line (n bytes, ending in '\n') to whoever is attached. */
typedef void fake_kernel_write_fn(const char *line, size_t n, void *userdata);

/* base borrowed. The first generation is 1, as kernel.py's after its first worker. */
struct fake_kernel *fake_kernel_new(struct event_base *base);
struct fake_kernel *fake_kernel_free(struct fake_kernel *k);
/* fn NULL: nobody attached (answers are dropped). */
void fake_kernel_set_output(struct fake_kernel *k, fake_kernel_write_fn *fn, void *userdata);
/* Stdin bytes from the daemon, in pieces of any size. */
void fake_kernel_feed(struct fake_kernel *k, const char *data, size_t n);
/* A frozen sandbox: reads requests, answers nothing (hello timeouts, wedged kernels). */
void fake_kernel_set_silent(struct fake_kernel *k, bool silent);
/* The worker dies on its own now (as user code's os._exit or the OOM killer would do it):
 * "restarted" with reason "oom" or "exit 1", then a running execution's done "died". */
void fake_kernel_worker_dies(struct fake_kernel *k, bool oom);

int64_t fake_kernel_gen(const struct fake_kernel *k);
/* The session it was bound to, or NULL. */
const char *fake_kernel_session(const struct fake_kernel *k);
/* The running execution's id, or NULL. */
const char *fake_kernel_busy(const struct fake_kernel *k);
/* Requests received of type t ("hello", "exec", "cmd", "interrupt", "restart", "bind", "ping");
 * malformed lines count as "garbage". */
unsigned fake_kernel_count(const struct fake_kernel *k, const char *t);
/* The relay key the first hello carried, "" if none. */
const char *fake_kernel_key(const struct fake_kernel *k);
