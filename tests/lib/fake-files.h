/* A fake of the sandbox's file helper (images/python/sandbox/files.py) for the fake engine
 * (tests/lib/fake-engine.h): what an exec of /opt/sandpool/files.py does, on an in-memory
 * workspace of regular files (one per container), so that the file routes of REST, MCP and E2B
 * (src/files/files.c) run against the fakes. Its protocol, from files.py's docstring: one compact
 * JSON line on stdout first; put writes {"ready":true}, then reads stdin (exactly SIZE bytes, or
 * with "upto" 4-byte big-endian framed pieces up to an empty frame) and answers {"path", "size",
 * "sha256"}; get answers {"path", "size", "mtime"} and the bytes; stat, list, mkdir and delete
 * answer their line. Exit 0 on success, 2 with {"error", "message"} (not_found, too_large,
 * usage, incomplete). Directories are not kept: mkdir answers created, list lists the files
 * under a path. Loop context only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct fake_files;
struct fake_files_run;

/* Output on stdout (err false) or stderr. */
typedef void fake_files_write_fn(const char *data, size_t n, bool err, void *userdata);
/* The helper exits with code; no call comes after it. */
typedef void fake_files_exit_fn(int code, void *userdata);

struct fake_files *fake_files_new(void);
struct fake_files *fake_files_free(struct fake_files *ws);

/* Runs the helper with argv[0..argc) (what follows files.py: "put", PATH, ...) on ws. Its first
 * answers, and an exit, may come from inside this call. */
struct fake_files_run *fake_files_start(struct fake_files *ws, const char *const *argv, size_t argc,
                                        fake_files_write_fn *write, fake_files_exit_fn *exit_fn,
                                        void *userdata);
/* Stdin bytes, in pieces of any size. */
void fake_files_feed(struct fake_files_run *run, const char *data, size_t n);
/* Stdin ended (an unfinished put is incomplete). */
void fake_files_eof(struct fake_files_run *run);
void fake_files_run_free(struct fake_files_run *run);

/* A file's content (borrowed) and length, or NULL. */
const char *fake_files_get(const struct fake_files *ws, const char *path, size_t *ret_len);
