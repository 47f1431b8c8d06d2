"""`rollout-dataset serve` / `proxy` run as the user runs them: a child process, its base URL read from
its first line of output, stopped with Ctrl-C (SIGINT) and killed only if it does not stop."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from signal import SIGINT
from typing import Any


def spawn_cli_server(args: list[str], preexec_fn: Callable[[], None] | None = None,
                     stderr: Any = subprocess.DEVNULL) -> tuple[subprocess.Popen, str]:
    """`rollout-dataset ARGS` in a child process, once it has printed its base URL (its stderr to `stderr`).

    Raises:
        RuntimeError: the first line is not a URL (the child is killed).
    """
    proc = subprocess.Popen([sys.executable, "-m", "rollout_dataset.cli", *args], stdout=subprocess.PIPE,
                            stderr=stderr, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            preexec_fn=preexec_fn)
    line = proc.stdout.readline().strip()
    if not line.startswith("http"):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"rollout-dataset {args[0]} did not print its base URL (got {line!r})")
    return proc, line


def stop_cli_server(proc: subprocess.Popen, timeout: float = 20) -> None:
    """Ctrl-C, as a user stops it; killed when it has not stopped within `timeout` seconds."""
    if proc.poll() is None:
        proc.send_signal(SIGINT)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
