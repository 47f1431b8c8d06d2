"""Process helpers every layer shares: watching a child to its end, and stopping its whole process group.

This module imports nothing of the package, so the harness and Harbor's adapter (which may import
no other layer) can both use it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Callable, Sequence

__all__ = ["stop_process_group", "watch_child", "CHILD_EXIT", "TIME_LIMIT"]

#: `watch_child`'s reasons: the child exited by itself; the time limit came first.
CHILD_EXIT = "harness_exit"
TIME_LIMIT = "timeout"


def stop_process_group(proc: subprocess.Popen, first_signal: signal.Signals, grace_s: float) -> None:
    """Signal a child's process group with `first_signal`, then SIGKILL it if the child outlives the grace.

    The child must lead its own process group (started with ``start_new_session=True``). Each
    signal is followed by up to `grace_s` seconds of waiting for the child; a group already gone
    ends the stop.

    Args:
        proc: the child, the leader of its process group.
        first_signal: the polite request (SIGTERM, or SIGINT for a program that stops cleanly on it).
        grace_s: how long to wait for the child after each signal.
    """
    for sig in (first_signal, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def watch_child(proc: subprocess.Popen, *, start: float, limit_s: float, checks: Sequence[Callable[[], str | None]],
                poll_s: float, first_signal: signal.Signals, grace_s: float) -> tuple[str, bool]:
    """Wait for a child to exit, its time limit, or a check's reason to stop it; a child still running
    then (or when the wait is interrupted) is stopped with `stop_process_group`.

    Each poll, in order: the time limit, then each check (the first reason it returns ends the wait).

    Args:
        proc: the child, the leader of its process group.
        start: `time.monotonic()` when the child started.
        limit_s: seconds from `start` before the child is stopped.
        checks: called each poll; a non-empty string is the reason to stop now.
        poll_s: seconds between polls.
        first_signal: `stop_process_group`'s polite signal.
        grace_s: `stop_process_group`'s grace.

    Returns:
        The reason (`CHILD_EXIT`, `TIME_LIMIT`, or a check's), and whether the time limit was it.
    """
    try:
        while proc.poll() is None:
            if time.monotonic() - start >= limit_s:
                return TIME_LIMIT, True
            for check in checks:
                reason = check()
                if reason:
                    return reason, False
            time.sleep(poll_s)
        return CHILD_EXIT, False
    finally:
        if proc.poll() is None:
            stop_process_group(proc, first_signal, grace_s)
