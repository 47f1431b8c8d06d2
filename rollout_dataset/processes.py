"""Process helpers every layer shares: stopping a child's whole process group.

This module imports nothing of the package, so the harness and Harbor's adapter (which may import
no other layer) can both use it.
"""

from __future__ import annotations

import os
import signal
import subprocess

__all__ = ["stop_process_group"]


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
