/* sandpoolctl top: a live view of the daemon, redrawn in place every --interval seconds.
 *
 * Each frame is three requests (GET /v1/admin/pools, /v1/admin/sessions, /metrics) over the
 * client's one kept-alive connection, composed in memory and written with one write after
 * "clear screen, cursor home", so the terminal never shows half a frame. Executions per second
 * come from the difference of sandpool_executions_total between two frames over the monotonic
 * time between them. The sessions list is cut to what fits the terminal (TIOCGWINSZ, read each
 * frame, so a resize takes effect at the next one); lines are cut to its width.
 *
 * The terminal: when stdin is a terminal it is switched to non-canonical, no-echo input so that
 * 'q' quits without Enter; Ctrl-C (SIGINT), SIGTERM, SIGQUIT and SIGHUP set a flag that ends the
 * loop, and stops a request in flight. Every path, and --iterations running out, restores the
 * terminal's settings and shows the cursor again; Ctrl-Z restores them until SIGCONT. A
 * failed refresh shows its error in the frame and the view goes on (the daemon may come back);
 * the exit code is 3 when the last refresh failed. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ctl.h"
#include "util/macro.h"
#include "util/parse.h"
#include "util/time.h"

static const char top_help[] =
    "Usage: sandpoolctl top [--interval S] [--iterations N]\n"
    "\n"
    "A live view, redrawn in place: per pool warm target, ready, starting, bound and max\n"
    "containers; the number of sessions; executions per second; the sessions, as many as fit\n"
    "the terminal. Quit with q or Ctrl-C.\n"
    "\n"
    "  --interval S     seconds between refreshes (default 1, may be fractional)\n"
    "  --iterations N   stop after N frames (for scripts)\n";

static volatile sig_atomic_t quit_signal;
/* The terminal's settings before and during the view, for the signal handlers. */
static struct termios term_saved, term_raw;
static volatile sig_atomic_t term_is_raw;

static void
on_signal(int sig)
{
    quit_signal = sig;
}

/* Ctrl-Z: the shell gets its terminal back as it was, and the view its raw mode on SIGCONT.
 * tcsetattr(), write(), signal() and raise() are async-signal-safe. */
static void
on_tstp(int sig)
{
    if (term_is_raw) {
        (void)tcsetattr(STDIN_FILENO, TCSANOW, &term_saved);
    }
    (void)!write(STDOUT_FILENO, "\033[?25h", 6);
    (void)signal(SIGTSTP, SIG_DFL);
    (void)raise(SIGTSTP);
}

static void
on_cont(int sig)
{
    (void)signal(SIGTSTP, on_tstp);
    if (term_is_raw) {
        (void)tcsetattr(STDIN_FILENO, TCSANOW, &term_raw);
    }
    (void)!write(STDOUT_FILENO, "\033[?25l", 6);
}

/* A request in flight stops as soon as a quit signal came (curl itself retries an EINTR). */
static int
on_progress(void *userdata)
{
    return quit_signal != 0 ? -EINTR : 0;
}

struct top {
    struct ctl *ctl;
    struct sp_client *c;
    double last_total; /* sandpool_executions_total at last_ms; < 0: none yet */
    uint64_t last_ms;
    double interval;
    unsigned rows, cols;
    bool failed; /* the last refresh failed */
};

static void
window_size(struct top *t)
{
    struct winsize ws = {0};

    t->rows = 24;
    t->cols = 80;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
        t->rows = ws.ws_row;
        t->cols = ws.ws_col;
    }
}

/* Executions per second since the last frame, as text ("-" for the first frame). */
static void
rate(struct top *t, const char *metrics, char *out, size_t n, double *ret_total)
{
    uint64_t now = time_now_ms();
    double total = -1;

    (void)snprintf(out, n, "-");
    if (metrics == NULL || sp_client_metric_sum(metrics, "sandpool_executions_total", &total) < 0) {
        *ret_total = -1;
        t->last_total = -1;
        return;
    }
    if (t->last_total >= 0 && now > t->last_ms && total >= t->last_total) {
        (void)snprintf(out, n, "%.1f",
                       (total - t->last_total) * 1000.0 / (double)(now - t->last_ms));
    }
    t->last_total = total;
    t->last_ms = now;
    *ret_total = total;
}

/* Composes one frame into f. Returns false when a request failed (shown in the frame). */
static bool
frame(struct top *t, FILE *f)
{
    struct sp_error e = {0};
    json_t *pools = NULL, *sessions = NULL;
    cleanup_free char *metrics = NULL;
    struct ctl_table *pt = NULL, *st = NULL;
    char stamp[16], per_s[32], count[32] = "-";
    double total = -1;
    time_t now = time(NULL);
    struct tm tm;
    size_t used, room;
    bool ok = sp_client_pools(t->c, &pools, &e) >= 0 &&
              sp_client_admin_sessions(t->c, NULL, NULL, &sessions, &e) >= 0 &&
              sp_client_metrics(t->c, &metrics, &e) >= 0;

    (void)strftime(stamp, sizeof(stamp), "%H:%M:%S", localtime_r(&now, &tm));
    rate(t, metrics, per_s, sizeof(per_s), &total);
    ctl_println(f, "sandpoolctl top - %s - %s - every %gs - q quits", sp_client_url(t->c), stamp,
                t->interval);
    if (!ok) {
        (void)fputc('\n', f);
        /* The message may quote the daemon or the engine. */
        ctl_println(f, "error: %.*s", (int)MIN(t->cols, 400u), e.message);
        goto out;
    }
    pt = ctl_pools_table(json_object_get(pools, "pools"));
    st = ctl_sessions_table(json_object_get(sessions, "sessions"));
    if (total >= 0) {
        (void)snprintf(count, sizeof(count), "%.0f", total);
    }
    (void)fprintf(f, "sessions: %zu   executions: %s   executions/s: %s\n\n", ctl_table_rows(st),
                  count, per_s);
    ctl_table_print(pt, f, 0, t->cols - 1);
    (void)fputc('\n', f);
    /* Lines so far: 2 header lines + blank + pool table (1 + rows) + blank; the sessions
     * table needs its header and a possible "... N more" line. */
    used = 4 + 1 + ctl_table_rows(pt);
    /* The last line ends with a newline too: the frame must fit in rows - 1 lines, or the
     * terminal scrolls and the title leaves the screen. */
    room = t->rows > used + 3 ? t->rows - used - 3 : 1;
    ctl_table_print(st, f, ctl_table_rows(st) > room + 1 ? room : 0, t->cols - 1);
out:
    (void)ctl_table_free(pt);
    (void)ctl_table_free(st);
    json_decref(pools);
    json_decref(sessions);
    return ok;
}

/* Waits up to ms for the interval to pass; returns true when the user asked to quit. */
static bool
wait_input(int *fd, uint64_t ms)
{
    uint64_t end = time_now_ms() + ms;

    while (quit_signal == 0) {
        uint64_t now = time_now_ms();
        struct pollfd p = {.fd = *fd, .events = POLLIN};
        char ch[64];
        ssize_t n;

        if (now >= end) {
            return false;
        }
        if (poll(&p, *fd >= 0 ? 1 : 0, (int)MIN(end - now, 1000u)) <= 0) {
            continue; /* timeout, or EINTR from a signal: the loop condition sees it */
        }
        n = read(*fd, ch, sizeof(ch));
        if (n <= 0) {
            *fd = -1; /* end of input (not a terminal): only time and signals matter now */
            continue;
        }
        if (memchr(ch, 'q', (size_t)n) != NULL || memchr(ch, 'Q', (size_t)n) != NULL) {
            return true;
        }
    }
    return true;
}

static int
parse_top_args(int argc, char **argv, double *interval, int *iterations)
{
    for (int i = 1; i < argc; i += 2) {
        bool is_interval = strcmp(argv[i], "--interval") == 0;

        if (!is_interval && strcmp(argv[i], "--iterations") != 0) {
            return CTL_USAGE_ERROR("top", "unknown argument '%s'", argv[i]);
        }
        if (i + 1 >= argc) {
            return CTL_USAGE_ERROR("top", "'%s' needs a value", argv[i]);
        }
        if (is_interval ? parse_double(argv[i + 1], 0.1, 3600, interval) < 0
                        : parse_int(argv[i + 1], 1, 1000000000, iterations) < 0) {
            return CTL_USAGE_ERROR("top", "bad value '%s' for %s", argv[i + 1], argv[i]);
        }
    }
    return -1;
}

int
ctl_cmd_top(struct ctl *ctl, int argc, char **argv)
{
    struct top t = {.ctl = ctl, .last_total = -1};
    static const int quit_signals[] = {SIGINT, SIGTERM, SIGQUIT, SIGHUP};
    struct sigaction sa = {.sa_handler = on_signal}, old_quit[ELEMENTSOF(quit_signals)];
    double interval = 1.0;
    int iterations = 0, in_fd = STDIN_FILENO, rc;

    for (int i = 1; i < argc; i++) {
        if (ctl_is_help(argv[i])) {
            (void)fputs(top_help, stdout);
            return EXIT_OK;
        }
    }
    rc = parse_top_args(argc, argv, &interval, &iterations);
    if (rc >= 0) {
        return rc;
    }
    t.interval = interval;
    if (ctl->json) {
        return CTL_USAGE_ERROR("top", "has no JSON output: use 'pool ls' and 'session ls'");
    }
    t.c = ctl_client(ctl);
    if (t.c == NULL) {
        return EXIT_USAGE;
    }
    sp_client_set_timeout(t.c, 5000L);
    sp_client_set_progress(t.c, on_progress, NULL);
    /* The handlers first: a signal between the two must not leave the terminal raw. */
    (void)sigemptyset(&sa.sa_mask); /* no SA_RESTART: poll() returns at once */
    for (size_t i = 0; i < ELEMENTSOF(quit_signals); i++) {
        (void)sigaction(quit_signals[i], &sa, &old_quit[i]);
    }
    (void)signal(SIGTSTP, on_tstp);
    (void)signal(SIGCONT, on_cont);
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &term_saved) == 0) {
        term_raw = term_saved;
        term_raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO); /* ISIG stays: Ctrl-C is SIGINT */
        term_raw.c_cc[VMIN] = 1;
        term_raw.c_cc[VTIME] = 0;
        term_is_raw = tcsetattr(STDIN_FILENO, TCSANOW, &term_raw) == 0;
    }
    (void)printf("\033[?25l"); /* hide the cursor */
    for (int n = 0; quit_signal == 0; n++) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);

        if (f == NULL) {
            oom();
        }
        window_size(&t);
        t.failed = !frame(&t, f);
        (void)fclose(f);
        (void)printf("\033[H\033[2J");
        (void)fwrite(text, 1, len, stdout);
        (void)fflush(stdout);
        free(text);
        if ((iterations > 0 && n + 1 >= iterations) ||
            wait_input(&in_fd, (uint64_t)(interval * 1000.0))) {
            break;
        }
    }
    (void)printf("\033[?25h");
    (void)fflush(stdout);
    (void)signal(SIGTSTP, SIG_DFL);
    (void)signal(SIGCONT, SIG_DFL);
    if (term_is_raw) {
        term_is_raw = 0;
        (void)tcsetattr(STDIN_FILENO, TCSANOW, &term_saved);
    }
    for (size_t i = 0; i < ELEMENTSOF(quit_signals); i++) {
        (void)sigaction(quit_signals[i], &old_quit[i], NULL);
    }
    (void)sp_client_free(t.c);
    return t.failed ? EXIT_SERVER : EXIT_OK;
}
