/* The service manager's readiness protocol (sd_notify(3)): one datagram per state change to
 * $NOTIFY_SOCKET, through libsystemd when the build found it (meson option `systemd`).
 *
 * Both functions may run on the loop thread: the datagram goes to a local socket that systemd
 * drains at once, and nothing is sent when NOTIFY_SOCKET is unset (not started by systemd with
 * Type=notify). Failures are returned, never logged: the caller logs them once. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* true when the daemon was built with libsystemd. */
bool sdnotify_supported(void);

/* Sends state (e.g. "READY=1\nSTATUS=listening"). Returns 1 when sent, 0 when NOTIFY_SOCKET is
 * unset (or the build has no libsystemd: see sdnotify_supported()), or a negative errno. */
int sdnotify_send(const char *state);

/* The keep-alive interval the service manager asks for (WatchdogSec=: $WATCHDOG_USEC, for this
 * process if $WATCHDOG_PID is set), in microseconds; 0 when it asks for none. The daemon then
 * sends WATCHDOG=1 every half interval from its event loop: a loop that stops turning is
 * restarted by the manager. */
uint64_t sdnotify_watchdog_usec(void);
