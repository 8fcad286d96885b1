/* sandpoolctl internals shared by main.c and the cmd_<verb>.c files: the global options, the
 * exit codes, and the output helpers (aligned tables, readable durations, error lines). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sandpool/client.h"

enum {
    EXIT_OK = 0,
    EXIT_EXEC_FAILED = 1, /* the execution (or a local file operation) failed */
    EXIT_USAGE = 2,
    EXIT_SERVER = 3, /* unreachable, or an HTTP error answer */
};

struct ctl {
    char url[512];
    char token[513]; /* the daemon takes tokens of up to 512 bytes */
    bool json;       /* -o json: the server's JSON, one document */
};

/* One subcommand: run gets argv[0] = the command name. */
struct ctl_command {
    const char *name;
    const char *args; /* synopsis after the name */
    const char *help;
    int (*run)(struct ctl *ctl, int argc, char **argv);
};

/* ---- util.c -------------------------------------------------------------------------------- */

/* Creates the client for ctl (URL and token), or prints why not and returns NULL. */
struct sp_client *ctl_client(const struct ctl *ctl);
/* Prints "sandpoolctl: <message>" (escaped: it may quote the server) for a failed call and
 * returns the exit code for it (3). */
int ctl_fail(const struct sp_error *e);
/* Prints "sandpoolctl: <cmd>: <fmt>" (escaped) and the usage hint on stderr. */
void ctl_usage_print(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same as an expression worth EXIT_USAGE: `return CTL_USAGE_ERROR("pool", "...");`. A
 * macro, so that the analyzer sees the value (a function in another file would be opaque). */
#define CTL_USAGE_ERROR(...) (ctl_usage_print(__VA_ARGS__), EXIT_USAGE)
/* True when argv[i] is -h or --help. */
bool ctl_is_help(const char *arg);
/* Prints j as one JSON document (indented) on stdout. */
void ctl_print_json(const json_t *j);

/* Seconds since the epoch from an RFC 3339 UTC time ("2026-11-29T08:38:58.123Z"), or -1. */
int64_t ctl_parse_time(const char *s);
/* "45s", "3m12s", "2h05m", "4d03h" (negative values as "-"). */
void ctl_format_duration(int64_t secs, char *out, size_t n);
/* Age of an RFC 3339 time relative to now ("3m12s"), or "-" when absent/unparsable. */
void ctl_format_age(const char *rfc3339, char *out, size_t n);
/* Time until an RFC 3339 time ("in 4m", "expired" when past), or "-". */
void ctl_format_until(const char *rfc3339, char *out, size_t n);
/* A JSON value as short text: strings as is, integers, reals, true/false, null as "-". Not yet
 * safe to show: print it through ctl_println() or a table. */
void ctl_format_value(const json_t *v, char *out, size_t n);

/* Text that a tenant, a sandbox or the engine controls (metadata, paths, error messages,
 * tracebacks, program output) never reaches the terminal raw: it could set the window title,
 * write the clipboard (OSC 52), clear the screen or forge lines. Every human-readable output
 * goes through the escaping below; -o json is left to jansson.
 *
 * CTL_TEXT_CELL (tables, key/value views, messages): one line, the daemon's log rules.
 * Backslash becomes \\; newline, CR and tab \n, \r, \t; other C0 controls and DEL \xHH; the
 * C1 controls U+0080..U+009F and the line separators U+2028/U+2029 \uHHHH; a byte outside
 * well-formed UTF-8 \xHH (it names the byte, where U+FFFD would hide it). With the backslash
 * doubled, each escape stands for exactly one input.
 * CTL_TEXT_LINES (program output on a terminal, tracebacks): newline, tab and CR are kept (the
 * layout is the program's; CR can only overwrite the program's own line), and so is the
 * backslash (the program's text reads as it wrote it); every other control is escaped as in
 * CTL_TEXT_CELL. */
enum ctl_text {
    CTL_TEXT_CELL,
    CTL_TEXT_LINES,
};
/* Writes s[0..len) escaped into out (n >= 1 bytes, always NUL-terminated): whole escapes and
 * characters only, the rest is cut. Returns the length written. Pure. */
size_t ctl_text_escape(char *out, size_t n, const char *s, size_t len, enum ctl_text mode);
/* Writes s[0..len) escaped to f, all of it. */
void ctl_text_write(FILE *f, const char *s, size_t len, enum ctl_text mode);
/* Prints fmt's output escaped as CTL_TEXT_CELL, then a newline: one line of text whose
 * arguments may come from the server. fmt is ours and holds no newline (asserted). */
void ctl_println(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An aligned text table: add the header, then rows; print computes column widths. Cells are
 * copied, escaped as CTL_TEXT_CELL (NULL shows as "-"). max_rows limits what print shows
 * (0 = all) and says how many were left out. */
struct ctl_table;
struct ctl_table *ctl_table_new(size_t ncols, const char *const *headers);
void ctl_table_add(struct ctl_table *t, const char *const *cells);
size_t ctl_table_rows(const struct ctl_table *t);
/* Prints to f; lines are cut at width columns when width > 0. */
void ctl_table_print(const struct ctl_table *t, FILE *f, size_t max_rows, size_t width);
struct ctl_table *ctl_table_free(struct ctl_table *t);

/* ---- commands ------------------------------------------------------------------------------ */

int ctl_cmd_health(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_version(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_drain(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_policy(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_pool(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_session(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_snapshot(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_node(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_exec(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_cp(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_top(struct ctl *ctl, int argc, char **argv);

/* Shared by session and top: a table of session objects (admin list shape). */
struct ctl_table *ctl_sessions_table(const json_t *sessions);
/* Shared by pool and top: a table of pool objects. */
struct ctl_table *ctl_pools_table(const json_t *pools);
