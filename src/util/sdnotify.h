/* The service manager's readiness protocol (sd_notify(3)): one datagram per state change to
 * $NOTIFY_SOCKET, through libsystemd when the build found it (meson option `systemd`).
 *
 * Both functions may run on the loop thread: the datagram goes to a local socket that systemd
 * drains at once, and nothing is sent when NOTIFY_SOCKET is unset (not started by systemd with
 * Type=notify). Failures are returned, never logged: the caller logs them once. */
#pragma once

#include <stdbool.h>

/* true when the daemon was built with libsystemd. */
bool sdnotify_supported(void);

/* Sends state (e.g. "READY=1\nSTATUS=listening"). Returns 1 when sent, 0 when NOTIFY_SOCKET is
 * unset (or the build has no libsystemd: see sdnotify_supported()), or a negative errno. */
int sdnotify_send(const char *state);
