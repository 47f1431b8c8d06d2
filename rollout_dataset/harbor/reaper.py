"""Kill every process of one Harbor bwrap environment and remove its root, when asked or once Harbor dies.

Each command an environment runs carries a marker variable (`MARKER_VAR=<id>`) that its children
(the tmux server included, which leaves the command's session) inherit. `sweep(marker)` finds them by
``/proc/PID/environ`` and kills them; `watch(pid, marker, root)` (run as ``python reaper.py PID MARKER
ROOT``, detached) waits until process `pid` (Harbor) is gone, then sweeps and removes `root`. Standard
library only: it runs under Harbor's interpreter.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time

__all__ = ["MARKER_VAR", "marked_pids", "sweep", "watch"]

#: the variable every command of an environment carries
MARKER_VAR = "ROLLOUT_HARBOR_ENV"


def marked_pids(marker: str) -> list[int]:
    """The processes whose environment holds ``MARKER_VAR=marker``.

    Args:
        marker: the environment's id.

    Returns:
        Their pids (this process excluded).
    """
    needle = f"{MARKER_VAR}={marker}".encode() + b"\0"
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                data = fh.read() + b"\0"
        except OSError:
            continue
        if needle in data or data.startswith(needle):
            found.append(int(name))
    return found


def sweep(marker: str, rounds: int = 5) -> int:
    """SIGKILL every process of an environment, until none is left (or `rounds` passes).

    Args:
        marker: the environment's id.
        rounds: how many passes (processes may fork while being killed).

    Returns:
        How many processes were killed.
    """
    killed = 0
    for _ in range(rounds):
        pids = marked_pids(marker)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    return killed


def watch(pid: int, marker: str, root: str, poll_s: float = 0.5) -> None:
    """Wait until process `pid` is gone, then sweep the environment and remove its root folder.

    Args:
        pid: the process to outlive (Harbor).
        marker: the environment's id.
        root: the environment's host folder.
        poll_s: how often to look.
    """
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        except PermissionError:
            pass
        if not os.path.isdir(root):  # stopped normally: nothing left to do
            return
        time.sleep(poll_s)
    sweep(marker)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":  # python reaper.py PID MARKER ROOT
    watch(int(sys.argv[1]), sys.argv[2], sys.argv[3])
