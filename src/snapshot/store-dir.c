/* The dir backend: snapshots as files "<dir>/<id>.tar" (see store.h).
 *
 * A put writes "<dir>/.part-<id>-<16 random hex>" (O_EXCL, 0600): its bytes are buffered and
 * written on the loop one bounded chunk per loop turn; at finish a thread of the put's own
 * fsyncs the file, renames it over "<id>.tar" and fsyncs the directory, so a slow volume (a
 * ReadWriteMany one in Kubernetes) stalls that thread and not the loop. The rename is the
 * commit: a reader sees the old object or the new one, never a part of either, and a get that
 * opened the old file keeps reading it. The thread hands its result back through the store's
 * pipe (a byte, then the loop scans the jobs under job_lock).
 *
 * A job whose put goes away first (abort, the store freed, the finish deadline) is orphaned: the
 * loop removes the part file at once and the thread frees the job when it is done; its rename
 * then fails for want of the file, or it came first and the object is complete. Either way the
 * thread never touches the store again.
 *
 * At start the store removes ".part-*" files older than SNAPSTORE_DIR_STALE_S (a crashed
 * daemon's); younger ones may be another node's writes in progress on the same volume. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "snapshot/store-internal.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/time.h"

#define PUT_CHUNK      (256u << 10) /* one write(2) per loop turn at most */
#define PUT_HIGH_WATER (1u << 20)
#define PUT_LOW_WATER  (256u << 10)
#define PUT_MAX        (16u << 20) /* a writer that ignores the high-water mark fails here */
#define PART_PREFIX    ".part-"
#define NAME_MAX_LEN   64 /* ".part-" + 32 + "-" + 16, or "<id>.tar" */

struct dir_store {
    int dirfd;
    int pipe_r, pipe_w; /* jobs -> loop */
    struct event *wake;
    LIST_HEAD(, dir_job) jobs; /* loop side; each job's done flag under job_lock */
    struct snapstore *st;
};

/* Shared by the loop and one thread. The loop owns it until the thread starts; then done and
 * orphaned (under job_lock) say who frees it: the loop once done, the thread once orphaned. */
struct dir_job {
    int fd, dirfd, pipe_w; /* the thread's own: fd and dirfd are closed by it */
    char part[NAME_MAX_LEN], final[NAME_MAX_LEN];
    int r;
    bool done, orphaned;
    struct snapstore_put *p; /* loop side */
    LIST_ENTRY(dir_job) link;
};

struct dir_put {
    int fd;
    char part[NAME_MAX_LEN];
    struct buf buf;
    struct event *flush, *deadline;
    struct dir_job *job;
};

struct dir_get {
    int fd;
    char *chunk; /* SNAPSTORE_GET_CHUNK bytes */
};

static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER;

static int
fail_errno(struct err *e, int errnum, const char *what)
{
    int r = snapstore_errno_map(errnum);

    return err_set(e, r, "snapshot store (dir): %s: %s", what, strerror(errnum));
}

/* ---- the fsync thread ------------------------------------------------------------------------ */

static void *
job_run(void *arg)
{
    struct dir_job *j = arg;
    int r = 0;

    if (fsync(j->fd) < 0) {
        r = -errno;
    }
    if (close(j->fd) < 0 && r == 0) {
        r = -errno; /* NFS reports write errors at close */
    }
    if (r == 0 && renameat(j->dirfd, j->part, j->dirfd, j->final) < 0) {
        r = -errno;
    }
    if (r == 0 && fsync(j->dirfd) < 0) {
        r = -errno;
    }
    if (r < 0) {
        (void)unlinkat(j->dirfd, j->part, 0);
    }
    (void)close(j->dirfd);
    (void)pthread_mutex_lock(&job_lock);
    if (j->orphaned) {
        (void)pthread_mutex_unlock(&job_lock);
        free(j);
        return NULL;
    }
    j->r = r;
    j->done = true;
    /* Under the lock: the store closes the pipe only after orphaning every job. A full pipe
     * already holds a wake-up. */
    if (write(j->pipe_w, "j", 1) < 0) {
        /* EAGAIN: the pipe is full, and so a wake-up is pending already */
    }
    (void)pthread_mutex_unlock(&job_lock);
    return NULL;
}

static int
job_start(struct dir_job *j)
{
    sigset_t all, old;
    pthread_attr_t attr;
    pthread_t t;
    int r;

    /* The thread takes no signals: the loop thread handles them. */
    (void)sigfillset(&all);
    if (pthread_attr_init(&attr) != 0) {
        oom();
    }
    (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    (void)pthread_sigmask(SIG_SETMASK, &all, &old);
    r = pthread_create(&t, &attr, job_run, j);
    (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
    (void)pthread_attr_destroy(&attr);
    return -r;
}

/* The loop lets go of a job: frees it when the thread is done, else leaves it to the thread. */
static void
job_orphan(struct dir_job *j)
{
    bool done;

    LIST_REMOVE(j, link);
    (void)pthread_mutex_lock(&job_lock);
    done = j->done;
    j->orphaned = true;
    (void)pthread_mutex_unlock(&job_lock);
    if (done) {
        free(j);
    }
}

static void
job_finished(struct dir_job *j)
{
    struct snapstore_put *p = j->p;
    struct dir_put *dp = p->impl;
    struct err e;
    int r = j->r;

    LIST_REMOVE(j, link);
    free(j);
    dp->job = NULL;
    (void)event_del(dp->deadline);
    if (r < 0) {
        snapstore_put_done(p, fail_errno(&e, -r, "making the snapshot durable"), &e);
        return;
    }
    snapstore_put_done(p, 0, NULL);
}

static void
on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct dir_store *ds = arg;
    struct dir_job *j, *next;
    char drain[64];

    while (read(ds->pipe_r, drain, sizeof(drain)) > 0) {
    }
    for (j = LIST_FIRST(&ds->jobs); j != NULL; j = next) {
        bool done;

        next = LIST_NEXT(j, link);
        (void)pthread_mutex_lock(&job_lock);
        done = j->done;
        (void)pthread_mutex_unlock(&job_lock);
        if (done) {
            job_finished(j);
        }
    }
}

/* ---- put ------------------------------------------------------------------------------------- */

static void
on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct snapstore_put *p = arg;
    struct dir_put *dp = p->impl;
    struct dir_store *ds = p->st->impl;
    struct err e;

    job_orphan(dp->job);
    dp->job = NULL;
    (void)unlinkat(ds->dirfd, dp->part, 0);
    (void)err_set(&e, -ETIMEDOUT, "snapshot store (dir): fsync and rename took over %u ms",
                  p->st->timeout_ms);
    snapstore_put_done(p, -ETIMEDOUT, &e);
}

static void
put_sync(struct snapstore_put *p)
{
    struct dir_put *dp = p->impl;
    struct dir_store *ds = p->st->impl;
    struct dir_job *j = xcalloc(1, sizeof(*j));
    struct timeval tv;
    struct err e;
    int r;

    j->fd = dp->fd;
    j->dirfd = fcntl(ds->dirfd, F_DUPFD_CLOEXEC, 3);
    j->pipe_w = ds->pipe_w;
    j->p = p;
    memcpy(j->part, dp->part, sizeof(j->part));
    (void)snprintf(j->final, sizeof(j->final), "%s.tar", p->id);
    if (j->dirfd < 0) {
        r = fail_errno(&e, errno, "dup of the directory");
        free(j);
        snapstore_put_done(p, r, &e);
        return;
    }
    r = job_start(j);
    if (r < 0) {
        (void)close(j->dirfd);
        free(j);
        snapstore_put_done(p, err_set(&e, r, "snapshot store (dir): no thread: %s", strerror(-r)),
                           &e);
        return;
    }
    dp->fd = -1; /* the thread's now */
    dp->job = j;
    LIST_INSERT_HEAD(&ds->jobs, j, link);
    time_tv_from_ms(&tv, p->st->timeout_ms);
    (void)evtimer_add(dp->deadline, &tv);
}

/* Writes one chunk of the buffer; then the next turn writes the next, or the finish syncs. */
static void
on_flush(evutil_socket_t fd, short what, void *arg)
{
    static const struct timeval zero = {0, 0};
    struct snapstore_put *p = arg;
    struct dir_put *dp = p->impl;
    size_t n = MIN(dp->buf.len, (size_t)PUT_CHUNK);
    struct err e;
    ssize_t w;

    if (p->r < 0) {
        return;
    }
    if (n > 0) {
        do {
            w = write(dp->fd, dp->buf.buf, n);
        } while (w < 0 && errno == EINTR);
        if (w < 0) {
            buf_done(&dp->buf);
            snapstore_put_failed(p, fail_errno(&e, errno, "writing the snapshot"), &e);
            return;
        }
        buf_consume(&dp->buf, (size_t)w);
    }
    if (dp->buf.len < PUT_LOW_WATER) {
        snapstore_put_drained(p);
    }
    if (dp->buf.len > 0) {
        (void)evtimer_add(dp->flush, &zero);
    } else if (p->finishing) {
        put_sync(p);
    }
}

static void
dir_put_begin(struct snapstore_put *p)
{
    struct dir_store *ds = p->st->impl;
    struct dir_put *dp = xcalloc(1, sizeof(*dp));
    char rnd[17];
    struct err e;

    p->impl = dp;
    buf_init(&dp->buf, PUT_MAX);
    dp->flush = OOM_CHECK(evtimer_new(p->st->base, on_flush, p));
    dp->deadline = OOM_CHECK(evtimer_new(p->st->base, on_deadline, p));
    random_hex(rnd, 8);
    (void)snprintf(dp->part, sizeof(dp->part), PART_PREFIX "%s-%s", p->id, rnd);
    dp->fd =
        openat(ds->dirfd, dp->part, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (dp->fd < 0) {
        snapstore_put_failed(p, fail_errno(&e, errno, "creating the snapshot"), &e);
    }
}

static int
dir_put_write(struct snapstore_put *p, const void *data, size_t len)
{
    static const struct timeval zero = {0, 0};
    struct dir_put *dp = p->impl;
    struct err e;

    if (buf_append(&dp->buf, data, len) < 0) {
        snapstore_put_failed(p,
                             err_set(&e, -EMSGSIZE,
                                     "snapshot store: the writer went past %u bytes buffered",
                                     PUT_MAX),
                             &e);
        return -EMSGSIZE;
    }
    if (!evtimer_pending(dp->flush, NULL)) {
        (void)evtimer_add(dp->flush, &zero);
    }
    return dp->buf.len >= PUT_HIGH_WATER ? 1 : 0;
}

static void
dir_put_finish(struct snapstore_put *p)
{
    struct dir_put *dp = p->impl;

    if (dp->buf.len == 0 && !evtimer_pending(dp->flush, NULL)) {
        put_sync(p);
    }
    /* else the flush syncs once the buffer is written */
}

static void
dir_put_free(struct snapstore_put *p, bool abandon)
{
    struct dir_put *dp = p->impl;
    struct dir_store *ds = p->st->impl;

    if (dp == NULL) {
        return;
    }
    if (dp->job != NULL) {
        job_orphan(dp->job);
    }
    if (dp->fd >= 0) {
        (void)close(dp->fd);
    }
    if (abandon || dp->job != NULL) {
        (void)unlinkat(ds->dirfd, dp->part, 0);
    }
    event_free(dp->flush);
    event_free(dp->deadline);
    buf_done(&dp->buf);
    free(dp);
    p->impl = NULL;
}

/* ---- get ------------------------------------------------------------------------------------- */

static void
dir_get_begin(struct snapstore_get *g)
{
    struct dir_store *ds = g->st->impl;
    struct dir_get *dg = xcalloc(1, sizeof(*dg));
    char name[NAME_MAX_LEN];
    struct err e;

    g->impl = dg;
    (void)snprintf(name, sizeof(name), "%s.tar", g->id);
    /* Opened now: a put that replaces the object later does not change what this get reads. */
    dg->fd = openat(ds->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (dg->fd < 0 && errno == ENOENT) {
        snapstore_get_done(g, err_set(&e, -ENOENT, "no such snapshot"), &e);
    } else if (dg->fd < 0) {
        snapstore_get_done(g, fail_errno(&e, errno, "opening the snapshot"), &e);
    } else {
        dg->chunk = xmalloc(SNAPSTORE_GET_CHUNK);
    }
}

static void
dir_get_room(struct snapstore_get *g)
{
    struct dir_get *dg = g->impl;
    struct err e;
    ssize_t n;

    if (dg->fd < 0) {
        return;
    }
    do {
        n = read(dg->fd, dg->chunk, SNAPSTORE_GET_CHUNK);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        snapstore_get_done(g, fail_errno(&e, errno, "reading the snapshot"), &e);
    } else if (n == 0) {
        snapstore_get_done(g, 0, NULL);
    } else if (snapstore_get_push(g, dg->chunk, (size_t)n) < 0) {
        snapstore_get_done(g, err_set(&e, -EIO, "snapshot store (dir): read ahead overflow"), &e);
    }
}

static void
dir_get_free(struct snapstore_get *g)
{
    struct dir_get *dg = g->impl;

    if (dg == NULL) {
        return;
    }
    if (dg->fd >= 0) {
        (void)close(dg->fd);
    }
    free(dg->chunk);
    free(dg);
}

/* ---- delete ---------------------------------------------------------------------------------- */

static void
dir_del_begin(struct snapstore_del *d)
{
    struct dir_store *ds = d->st->impl;
    char name[NAME_MAX_LEN];
    struct err e;

    (void)snprintf(name, sizeof(name), "%s.tar", d->id);
    if (unlinkat(ds->dirfd, name, 0) < 0 && errno != ENOENT) {
        snapstore_del_done(d, fail_errno(&e, errno, "removing the snapshot"), &e);
        return;
    }
    snapstore_del_done(d, 0, NULL);
}

static void
dir_del_free(struct snapstore_del *d)
{}

/* ---- the store ------------------------------------------------------------------------------- */

/* mkdir -p with 0700 for what it makes. */
static int
make_dirs(const char *path)
{
    char tmp[4096];
    size_t n = strlen(path);

    if (n >= sizeof(tmp)) {
        return -ENAMETOOLONG;
    }
    memcpy(tmp, path, n + 1);
    for (char *s = tmp + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;

            *s = '\0';
            if (mkdir(tmp, 0700) < 0 && errno != EEXIST) {
                return -errno;
            }
            *s = c;
            if (c == '\0') {
                return 0;
            }
        }
    }
}

/* Removes the ".part-*" files older than SNAPSTORE_DIR_STALE_S: a crashed writer's. */
static void
remove_stale_parts(struct dir_store *ds)
{
    int fd = fcntl(ds->dirfd, F_DUPFD_CLOEXEC, 3);
    time_t now = time(NULL);
    struct dirent *de;
    DIR *d;

    if (fd < 0 || (d = fdopendir(fd)) == NULL) {
        if (fd >= 0) {
            (void)close(fd);
        }
        return;
    }
    while ((de = readdir(d)) != NULL) {
        struct stat sb;

        if (strncmp(de->d_name, PART_PREFIX, strlen(PART_PREFIX)) != 0 ||
            fstatat(ds->dirfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(sb.st_mode)) {
            continue;
        }
        if (now - sb.st_mtime > SNAPSTORE_DIR_STALE_S) {
            (void)unlinkat(ds->dirfd, de->d_name, 0);
        }
    }
    (void)closedir(d);
}

static int
dir_open(struct dir_store *ds, const char *dir, struct err *reterr)
{
    int r, p[2];

    if (dir == NULL || dir[0] != '/') {
        return err_set(reterr, -EINVAL, "snapshots.dir must be an absolute path");
    }
    if (strlen(dir) + 1 + NAME_MAX_LEN >= 4096) {
        return err_set(reterr, -ENAMETOOLONG, "snapshots.dir is too long");
    }
    r = make_dirs(dir);
    if (r < 0) {
        return err_set(reterr, r, "snapshots.dir %s cannot be made: %s", dir, strerror(-r));
    }
    ds->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (ds->dirfd < 0) {
        return err_set(reterr, -errno, "snapshots.dir %s: %s", dir, strerror(errno));
    }
    if (faccessat(ds->dirfd, ".", W_OK | X_OK, AT_EACCESS) < 0) {
        return err_set(reterr, -errno, "snapshots.dir %s is not writable: %s", dir,
                       strerror(errno));
    }
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
        return err_set(reterr, -errno, "snapshot store: pipe: %s", strerror(errno));
    }
    ds->pipe_r = p[0];
    ds->pipe_w = p[1];
    return 0;
}

static void
dir_close(struct dir_store *ds)
{
    if (ds->dirfd >= 0) {
        (void)close(ds->dirfd);
    }
    if (ds->pipe_r >= 0) {
        (void)close(ds->pipe_r);
        (void)close(ds->pipe_w);
    }
    free(ds);
}

static int
dir_init(struct snapstore *st, const struct snapstore_cfg *cfg, struct err *reterr)
{
    struct dir_store *ds = xcalloc(1, sizeof(*ds));
    int r;

    ds->dirfd = ds->pipe_r = ds->pipe_w = -1;
    ds->st = st;
    LIST_INIT(&ds->jobs);
    r = dir_open(ds, cfg->dir, reterr);
    if (r < 0) {
        dir_close(ds);
        return r;
    }
    remove_stale_parts(ds);
    ds->wake = OOM_CHECK(event_new(st->base, ds->pipe_r, EV_READ | EV_PERSIST, on_wake, ds));
    (void)event_add(ds->wake, NULL);
    st->impl = ds;
    return 0;
}

static void
dir_done(struct snapstore *st)
{
    struct dir_store *ds = st->impl;

    /* The puts are gone (snapstore_free), and with them their jobs: no thread writes now. */
    while (!LIST_EMPTY(&ds->jobs)) {
        job_orphan(LIST_FIRST(&ds->jobs));
    }
    event_free(ds->wake);
    dir_close(ds);
}

const struct snapstore_ops snapstore_dir_ops = {
    .init = dir_init,
    .done = dir_done,
    .put_begin = dir_put_begin,
    .put_write = dir_put_write,
    .put_finish = dir_put_finish,
    .put_free = dir_put_free,
    .get_begin = dir_get_begin,
    .get_room = dir_get_room,
    .get_free = dir_get_free,
    .del_begin = dir_del_begin,
    .del_free = dir_del_free,
};
