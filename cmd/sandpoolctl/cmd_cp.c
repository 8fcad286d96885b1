/* sandpoolctl cp: copies one file between this machine and a session's /workspace, streamed
 * both ways (the client library reads and writes the FILE in slices).
 *
 * An upload from a pipe is spooled to an unlinked temporary file first, so that the daemon
 * gets a Content-Length and can refuse a file that does not fit before a byte is sent (a
 * chunked upload would be limited by http.max_body_bytes). A download goes to a temporary file
 * next to its destination that is renamed into place once complete, so that a failed copy
 * never leaves a truncated file under the real name. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "ctl.h"
#include "util/macro.h"
#include "util/parse.h"

static const char cp_help[] =
    "Usage: sandpoolctl cp LOCAL ID:PATH\n"
    "       sandpoolctl cp ID:PATH LOCAL\n"
    "\n"
    "Copies a file into or out of the workspace of session ID. PATH is relative to /workspace\n"
    "(/workspace/PATH is accepted too). LOCAL '-' is stdin or stdout; a LOCAL that is a\n"
    "directory receives the file under its own name. Write ./NAME for a local file whose\n"
    "name has a colon. Files are streamed, never held in memory; a download is renamed into\n"
    "place only once complete.\n";

/* -EIO is a local file error (1); anything else came from the daemon or the way to it (3). */
static int
r_local(int r)
{
    return r == -EIO ? EXIT_EXEC_FAILED : EXIT_SERVER;
}

struct remote {
    char id[65];
    const char *path;
};

/* "ID:PATH" with ID a session id ([A-Za-z0-9._-], no '/'). */
static bool
parse_remote(const char *arg, struct remote *ret)
{
    const char *colon = strchr(arg, ':');
    size_t n = colon != NULL ? (size_t)(colon - arg) : 0;

    if (n == 0 || n >= sizeof(ret->id) || strcmp(arg, "-") == 0) {
        return false;
    }
    memcpy(ret->id, arg, n);
    ret->id[n] = '\0';
    if (!str_is_name(ret->id, sizeof(ret->id) - 1)) {
        return false;
    }
    ret->path = colon + 1;
    return true;
}

/* Copies a non-seekable input into an unlinked temporary file; returns it rewound. */
static FILE *
spool(FILE *in, int64_t *ret_size)
{
    FILE *t = tmpfile();
    char chunk[65536];
    size_t n;
    long size;

    if (t == NULL) {
        (void)fprintf(stderr, "sandpoolctl: cp: cannot create a temporary file: %s\n",
                      strerror(errno));
        return NULL;
    }
    while ((n = fread(chunk, 1, sizeof(chunk), in)) > 0) {
        if (fwrite(chunk, 1, n, t) != n) {
            (void)fprintf(stderr, "sandpoolctl: cp: writing the temporary file failed: %s\n",
                          strerror(errno));
            (void)fclose(t);
            return NULL;
        }
    }
    if (ferror(in) || fflush(t) != 0 || (size = ftell(t)) < 0 || fseek(t, 0, SEEK_SET) != 0) {
        (void)fprintf(stderr, "sandpoolctl: cp: reading the input failed: %s\n", strerror(errno));
        (void)fclose(t);
        return NULL;
    }
    *ret_size = size;
    return t;
}

static int
upload(struct ctl *ctl, struct sp_client *c, const char *local, const struct remote *dst)
{
    FILE *in = strcmp(local, "-") == 0 ? stdin : fopen(local, "rbe");
    FILE *src = in;
    struct sp_error e = {0};
    json_t *ans = NULL;
    int64_t size = -1;
    struct stat st;
    int rc = EXIT_EXEC_FAILED, r;

    if (in == NULL) {
        ctl_println(stderr, "sandpoolctl: cp: cannot open '%s': %s", local, strerror(errno));
        return EXIT_EXEC_FAILED;
    }
    if (fstat(fileno(in), &st) < 0 || S_ISDIR(st.st_mode)) {
        ctl_println(stderr, "sandpoolctl: cp: '%s' is not a file", local);
        goto out;
    }
    if (S_ISREG(st.st_mode)) {
        size = st.st_size;
    } else {
        src = spool(in, &size);
        if (src == NULL) {
            goto out;
        }
    }
    r = sp_client_file_put(c, dst->id, dst->path, src, size, &ans, &e);
    if (r < 0) {
        rc = r_local(r);
        ctl_println(stderr, "sandpoolctl: cp: %s", e.message);
        goto out;
    }
    if (ctl->json) {
        ctl_print_json(ans);
    } else {
        ctl_println(stdout, "copied %lld bytes to %s:%s (sha256 %s)",
                    (long long)json_integer_value(json_object_get(ans, "size")), dst->id,
                    json_string_value(json_object_get(ans, "path")) ?: dst->path,
                    json_string_value(json_object_get(ans, "sha256")) ?: "?");
    }
    rc = EXIT_OK;
out:
    json_decref(ans);
    if (src != NULL && src != in) {
        (void)fclose(src);
    }
    if (in != stdin) {
        (void)fclose(in);
    }
    return rc;
}

/* The destination file name: LOCAL, or LOCAL/basename(PATH) when LOCAL is a directory. */
static char *
destination(const char *local, const char *path)
{
    struct stat st;
    char *copy, *name, *out = NULL;

    if (stat(local, &st) < 0 || !S_ISDIR(st.st_mode)) {
        return xstrdup(local);
    }
    copy = xstrdup(path);
    name = basename(copy);
    if (asprintf(&out, "%s/%s", local, name) < 0) {
        oom();
    }
    free(copy);
    return out;
}

static volatile sig_atomic_t cp_interrupted;

static void
on_cp_signal(int sig)
{
    cp_interrupted = sig;
}

/* Ctrl-C or SIGTERM stop the transfer: the download's temporary file is removed on the way out. */
static int
on_cp_progress(void *userdata)
{
    return cp_interrupted != 0 ? -EINTR : 0;
}

static int
download_to(struct sp_client *c, const struct remote *src, const char *dest, uint64_t *ret_size,
            struct sp_error *e)
{
    cleanup_free char *copy = xstrdup(dest), *tmp = NULL;
    mode_t mask = umask(0);
    int fd, r;
    FILE *out;

    (void)umask(mask);
    if (asprintf(&tmp, "%s/.%s.sandpoolctl-XXXXXX", dirname(copy), basename((char *)dest)) < 0) {
        oom();
    }
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0 || fchmod(fd, 0666 & ~mask) < 0 || (out = fdopen(fd, "wb")) == NULL) {
        ctl_println(stderr, "sandpoolctl: cp: cannot write next to '%s': %s", dest,
                    strerror(errno));
        if (fd >= 0) {
            (void)close(fd);
            (void)unlink(tmp);
        }
        return -EIO;
    }
    r = sp_client_file_get(c, src->id, src->path, out, ret_size, e);
    if (fclose(out) != 0 && r >= 0) {
        r = -EIO;
        (void)snprintf(e->message, sizeof(e->message), "writing '%s' failed: %s", dest,
                       strerror(errno));
    }
    if (r >= 0 && rename(tmp, dest) < 0) {
        r = -EIO;
        (void)snprintf(e->message, sizeof(e->message), "cannot rename into '%s': %s", dest,
                       strerror(errno));
    }
    if (r < 0) {
        (void)unlink(tmp);
    }
    return r;
}

static int
download(struct ctl *ctl, struct sp_client *c, const struct remote *src, const char *local)
{
    struct sp_error e = {0};
    cleanup_free char *dest = NULL;
    uint64_t size = 0;
    int r;

    if (strcmp(local, "-") == 0) {
        r = sp_client_file_get(c, src->id, src->path, stdout, &size, &e);
    } else {
        dest = destination(local, src->path);
        r = download_to(c, src, dest, &size, &e);
    }
    if (r < 0) {
        if (e.message[0] != '\0') {
            ctl_println(stderr, "sandpoolctl: cp: %s", e.message);
        }
        return r_local(r);
    }
    if (dest == NULL) {
        return EXIT_OK; /* stdout carries the file */
    }
    if (ctl->json) {
        json_t *doc = OOM_CHECK(json_pack("{s:s, s:s, s:s, s:I}", "session", src->id, "path",
                                          src->path, "local", dest, "size", (json_int_t)size));

        ctl_print_json(doc);
        json_decref(doc);
    } else {
        ctl_println(stdout, "copied %llu bytes from %s:%s to %s", (unsigned long long)size, src->id,
                    src->path, dest);
    }
    return EXIT_OK;
}

int
ctl_cmd_cp(struct ctl *ctl, int argc, char **argv)
{
    struct remote from, to;
    bool from_remote, to_remote;
    struct sp_client *c;
    int rc;

    for (int i = 1; i < argc; i++) {
        if (ctl_is_help(argv[i])) {
            (void)fputs(cp_help, stdout);
            return EXIT_OK;
        }
    }
    if (argc != 3) {
        return CTL_USAGE_ERROR("cp", "takes a source and a destination");
    }
    from_remote = parse_remote(argv[1], &from);
    to_remote = parse_remote(argv[2], &to);
    if (from_remote == to_remote) {
        return CTL_USAGE_ERROR("cp", "exactly one side must be ID:PATH (a session's file)");
    }
    if ((from_remote ? from.path : to.path)[0] == '\0') {
        return CTL_USAGE_ERROR("cp", "the path after 'ID:' is empty");
    }
    c = ctl_client(ctl);
    if (c != NULL) {
        struct sigaction sa = {.sa_handler = on_cp_signal};

        (void)sigemptyset(&sa.sa_mask);
        (void)sigaction(SIGINT, &sa, NULL);
        (void)sigaction(SIGTERM, &sa, NULL);
        sp_client_set_progress(c, on_cp_progress, NULL);
    }
    if (c == NULL) {
        return EXIT_USAGE;
    }
    rc = to_remote ? upload(ctl, c, argv[1], &to) : download(ctl, c, &from, argv[2]);
    (void)sp_client_free(c);
    return rc;
}
