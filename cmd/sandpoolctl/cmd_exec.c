/* sandpoolctl exec: runs code (or a command) in a session and streams its output as printed:
 * the session's stdout to ours, its stderr to ours, each event written and flushed as it
 * arrives (SSE). The exit code says how the execution ended: 0 status ok, 1 anything else
 * (error, timeout, oom, interrupted; the traceback goes to stderr; a command's non-zero exit
 * code is printed there too: passed through, it would collide with 2 and 3). Errors before the
 * execution ran (no such session, busy, unreachable) are 3.
 *
 * The program's output is the user's data: written to a pipe or a file it is passed through
 * byte for byte (`exec ... > out.csv` must be exact). Only a stream that is a terminal gets it
 * escaped (CTL_TEXT_LINES: lines, tabs and CRs kept, every other control visible), because
 * there the program would otherwise drive the operator's terminal (title, clipboard, screen).
 * What sandpoolctl itself says about the execution (artifact paths, the traceback, the status)
 * is always escaped, wherever it goes. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "ctl.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/parse.h"

#define CODE_MAX (8u << 20) /* code read from stdin; the daemon's body limit is lower anyway */

static const char exec_help[] =
    "Usage: sandpoolctl exec [--timeout S] ID [--] CODE\n"
    "       sandpoolctl exec [--timeout S] ID --command -- ARGV...\n"
    "\n"
    "Runs Python CODE in session ID (the session's interpreter keeps its variables between\n"
    "executions) or, with --command, runs ARGV in the session's container. CODE '-' reads the\n"
    "code from stdin. Output is streamed as printed: the session's stdout to stdout, its stderr\n"
    "to stderr. With -o json nothing is streamed: the Execution object is printed at the end.\n"
    "\n"
    "Output written to a terminal shows control characters other than newline, tab and\n"
    "carriage return as escapes (ESC as \\x1b, U+009B as \\u009b), so that a program cannot\n"
    "set the title, write the clipboard or redraw the screen; output redirected to a file or a\n"
    "pipe is passed through unchanged, byte for byte. Tracebacks and sandpoolctl's own lines\n"
    "are always escaped.\n"
    "\n"
    "  --timeout S   stop the execution after S seconds (default: the daemon's)\n"
    "\n"
    "Ctrl-C interrupts the execution (KeyboardInterrupt; its state is kept when it stops);\n"
    "a second Ctrl-C stops waiting for it.\n"
    "\n"
    "Exit code: 0 when the execution's status is ok, 1 when it is error, timeout, oom or\n"
    "interrupted (the error and traceback go to stderr), or, with --command, when the command\n"
    "exits non-zero (its exit code goes to stderr, and is in -o json's exit_code); 3 when it\n"
    "could not run (no such session, busy, unreachable); 2 for a usage error.\n";

struct exec_args {
    const char *id;
    bool command;
    int timeout_s; /* 0: the daemon's default */
    char **argv;   /* code (one) or the command */
    int argc;
};

static int
parse_args(int argc, char **argv, struct exec_args *a)
{
    int i;

    for (i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--command") == 0) {
            a->command = true;
        } else if (strcmp(argv[i], "--timeout") == 0) {
            if (i + 1 >= argc || parse_int(argv[i + 1], 1, 86400, &a->timeout_s) < 0) {
                return CTL_USAGE_ERROR("exec", "--timeout needs a number of seconds (1..86400)");
            }
            i++;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return CTL_USAGE_ERROR("exec", "unknown option '%s'", argv[i]);
        } else if (a->id == NULL) {
            a->id = argv[i];
        } else if (a->argv == NULL && !a->command) {
            a->argv = argv + i; /* `exec ID CODE` without "--" */
            a->argc = 1;
        } else {
            return CTL_USAGE_ERROR("exec", "unexpected argument '%s' (put code after '--')",
                                   argv[i]);
        }
    }
    if (i < argc) { /* "--" */
        if (a->argv != NULL) {
            return CTL_USAGE_ERROR("exec", "CODE given twice");
        }
        a->argv = argv + i + 1;
        a->argc = argc - i - 1;
    }
    if (a->id == NULL) {
        return CTL_USAGE_ERROR("exec", "missing session ID");
    }
    if (a->argc == 0) {
        return CTL_USAGE_ERROR("exec", a->command ? "missing the command after '--'"
                                                  : "missing CODE (or '-' to read stdin)");
    }
    if (!a->command && a->argc > 1) {
        return CTL_USAGE_ERROR("exec", "CODE must be one argument: quote it");
    }
    return -1;
}

/* Reads all of stdin (bounded) as the code. */
static int
read_stdin(struct buf *code)
{
    char chunk[65536];
    size_t n;

    while ((n = fread(chunk, 1, sizeof(chunk), stdin)) > 0) {
        if (buf_append(code, chunk, n) < 0) {
            (void)fprintf(stderr, "sandpoolctl: exec: the code on stdin is larger than %u MiB\n",
                          CODE_MAX >> 20);
            return -EMSGSIZE;
        }
    }
    if (ferror(stdin)) {
        (void)fprintf(stderr, "sandpoolctl: exec: reading stdin failed: %s\n", strerror(errno));
        return -EIO;
    }
    return 0;
}

static json_t *
make_request(const struct exec_args *a, const struct buf *code)
{
    json_t *req;

    if (a->command) {
        json_t *cmd = OOM_CHECK(json_array());

        for (int i = 0; i < a->argc; i++) {
            (void)json_array_append_new(cmd, OOM_CHECK(json_string(a->argv[i])));
        }
        req = OOM_CHECK(json_pack("{s:o}", "command", cmd));
    } else {
        req = json_pack("{s:s%}", "code", code->buf, code->len);
        if (req == NULL) {
            (void)fprintf(stderr, "sandpoolctl: exec: the code is not valid UTF-8\n");
            return NULL;
        }
    }
    if (a->timeout_s > 0) {
        (void)json_object_set_new(req, "timeout_s", OOM_CHECK(json_integer(a->timeout_s)));
    }
    return req;
}

/* Ctrl-C: the first asks the daemon to interrupt the execution (KeyboardInterrupt in the code,
 * a kernel restart if it does not stop; the stream then ends with status 'interrupted'); the
 * second stops waiting. */
static volatile sig_atomic_t interrupts;

static void
on_sigint(int sig)
{
    interrupts++;
}

struct watch {
    const struct ctl *ctl;
    const char *id;
    int sent; /* interrupts acted on */
};

static int
on_progress(void *userdata)
{
    struct watch *w = userdata;
    struct sp_client *other;
    struct sp_error e = {0};

    if (interrupts == w->sent) {
        return 0;
    }
    if (w->sent > 0) {
        (void)fprintf(stderr, "sandpoolctl: stopped waiting; the execution may still run\n");
        return -EINTR;
    }
    w->sent = 1;
    (void)fflush(stdout);
    other = ctl_client(w->ctl); /* c is inside its transfer: a second connection */
    if (other != NULL && sp_client_session_interrupt(other, w->id, NULL, &e) < 0 &&
        e.http_status != 409) { /* 409 not_running: it just finished */
        ctl_println(stderr, "sandpoolctl: cannot interrupt: %s", e.message);
    } else if (other != NULL) {
        (void)fprintf(stderr, "sandpoolctl: interrupting (Ctrl-C again to stop waiting)\n");
    }
    (void)sp_client_free(other);
    return 0;
}

/* Which of our streams are terminals, decided once before the output starts. */
struct ttys {
    bool out, err;
};

/* Writes an output event's text where it belongs, at once: raw to a pipe or a file, escaped to
 * a terminal (see the top of this file). */
static int
on_event(const struct sp_event *ev, void *userdata)
{
    const struct ttys *tty = userdata;
    bool out = strcmp(ev->name, "stdout") == 0;
    FILE *f = out ? stdout : stderr;
    const json_t *text = json_object_get(ev->data, "text");

    if (out || strcmp(ev->name, "stderr") == 0) {
        if (!json_is_string(text)) {
            return 0;
        }
        if (out ? tty->out : tty->err) {
            ctl_text_write(f, json_string_value(text), json_string_length(text), CTL_TEXT_LINES);
        } else {
            (void)fwrite(json_string_value(text), 1, json_string_length(text), f);
        }
        (void)fflush(f);
    } else if (strcmp(ev->name, "artifact") == 0) {
        (void)fflush(stdout);
        ctl_println(stderr, "sandpoolctl: artifact %s",
                    json_string_value(json_object_get(ev->data, "path")) ?: "?");
    }
    return 0;
}

/* Writes text from the sandbox (a traceback line; an error's name, sep and value) to stderr
 * with its own line breaks, every other control escaped, then a newline. */
static void
put_lines(const char *a, const char *sep, const char *b)
{
    ctl_text_write(stderr, a, strlen(a), CTL_TEXT_LINES);
    (void)fputs(sep, stderr);
    ctl_text_write(stderr, b, strlen(b), CTL_TEXT_LINES);
    (void)fputc('\n', stderr);
}

/* Tells on stderr how a non-ok execution ended: the traceback (or name: value), and what
 * happened to the interpreter's state. */
static void
report_failure(const json_t *x, const char *status)
{
    const json_t *err = json_object_get(x, "error"), *tb = json_object_get(err, "traceback"), *l;
    size_t i;

    (void)fflush(stdout);
    if (json_array_size(tb) > 0) {
        json_array_foreach (tb, i, l) {
            put_lines(json_string_value(l) ?: "", "", "");
        }
    } else if (json_is_object(err)) {
        put_lines(json_string_value(json_object_get(err, "name")) ?: "Error", ": ",
                  json_string_value(json_object_get(err, "value")) ?: "");
    }
    if (strcmp(status, "error") != 0) {
        ctl_println(stderr, "sandpoolctl: the execution ended with status '%s' (%s, epoch %lld)",
                    status,
                    json_is_true(json_object_get(x, "state_preserved"))
                        ? "variables kept"
                        : "interpreter restarted, variables gone",
                    (long long)json_integer_value(json_object_get(x, "kernel_epoch")));
    }
}

/* The exit code for a finished Execution. */
static int
exit_code_of(const json_t *x, bool command, bool quiet)
{
    const char *status = json_string_value(json_object_get(x, "status")) ?: "?";
    const json_t *code = json_object_get(x, "exit_code");
    bool ok = strcmp(status, "ok") == 0;

    if (json_is_object(json_object_get(x, "truncated")) && !quiet) {
        (void)fprintf(stderr, "sandpoolctl: the output was cut (over the profile's limit)\n");
    }
    if (!ok && !quiet) {
        report_failure(x, status);
    }
    if (command && json_is_integer(code) && json_integer_value(code) != 0) {
        if (!quiet) {
            (void)fprintf(stderr, "sandpoolctl: the command exited with %lld\n",
                          (long long)json_integer_value(code));
        }
        return EXIT_EXEC_FAILED;
    }
    return ok ? EXIT_OK : EXIT_EXEC_FAILED;
}

int
ctl_cmd_exec(struct ctl *ctl, int argc, char **argv)
{
    struct exec_args a = {0};
    struct buf code = BUF_INIT(CODE_MAX);
    struct sp_error e = {0};
    struct sp_client *c = NULL;
    json_t *req = NULL, *x = NULL;
    struct sigaction sigact = {0}, old_sigint;
    struct watch w = {.ctl = ctl};
    struct ttys tty = {isatty(STDOUT_FILENO) == 1, isatty(STDERR_FILENO) == 1};
    int rc, r;

    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (ctl_is_help(argv[i])) {
            (void)fputs(exec_help, stdout);
            return EXIT_OK;
        }
    }
    rc = parse_args(argc, argv, &a);
    if (rc >= 0) {
        return rc;
    }
    w.id = a.id;
    rc = EXIT_USAGE;
    if (!a.command) {
        if (strcmp(a.argv[0], "-") == 0 ? read_stdin(&code) < 0 : buf_puts(&code, a.argv[0]) < 0) {
            goto out;
        }
    }
    req = make_request(&a, &code);
    c = req != NULL ? ctl_client(ctl) : NULL;
    if (c == NULL) {
        goto out;
    }
    sigact.sa_handler = on_sigint;
    (void)sigemptyset(&sigact.sa_mask); /* no SA_RESTART: curl's wait returns at once */
    (void)sigaction(SIGINT, &sigact, &old_sigint);
    sp_client_set_progress(c, on_progress, &w);
    if (ctl->json) {
        r = sp_client_execute(c, a.id, req, &x, &e);
    } else {
        r = sp_client_execute_stream(c, a.id, req, on_event, &tty, &x, &e);
    }
    (void)sigaction(SIGINT, &old_sigint, NULL);
    if (r == -EINTR) {
        rc = EXIT_EXEC_FAILED; /* the user stopped waiting; on_progress said so */
        goto out;
    }
    if (r < 0) {
        (void)fflush(stdout);
        rc = ctl_fail(&e);
        goto out;
    }
    if (ctl->json) {
        ctl_print_json(x);
    }
    rc = exit_code_of(x, a.command, ctl->json);
out:
    json_decref(x);
    json_decref(req);
    (void)sp_client_free(c);
    buf_done(&code);
    return rc;
}
