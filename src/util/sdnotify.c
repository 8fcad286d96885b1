/* sd_notify(3) for the daemon; see sdnotify.h.
 *
 * libsystemd first (STYLE: the well-kept library): it handles abstract socket names, the
 * credentials and every corner of the protocol. Without it (meson -Dsystemd=disabled, or a
 * machine without libsystemd-dev) sdnotify_send() sends nothing and says so with its return
 * value, so that main can warn when it runs under Type=notify anyway. */
#include "util/sdnotify.h"

#ifdef SANDPOOL_HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

bool
sdnotify_supported(void)
{
#ifdef SANDPOOL_HAVE_LIBSYSTEMD
    return true;
#else
    return false;
#endif
}

int
sdnotify_send(const char *state)
{
#ifdef SANDPOOL_HAVE_LIBSYSTEMD
    /* 0 keeps NOTIFY_SOCKET in the environment: STOPPING=1 comes much later. */
    return sd_notify(0, state);
#else
    (void)state;
    return 0;
#endif
}

uint64_t
sdnotify_watchdog_usec(void)
{
#ifdef SANDPOOL_HAVE_LIBSYSTEMD
    uint64_t usec = 0;

    return sd_watchdog_enabled(0, &usec) > 0 ? usec : 0;
#else
    return 0;
#endif
}
