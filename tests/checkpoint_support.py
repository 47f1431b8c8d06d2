"""Stop a child process at a named point of a build and signal it there (kill -9, SIGTERM tests).

The child replaces the `rollout_dataset.builder.staging.checkpoint` hook: when the build reaches
`step` for the `nth` time it prints ``PAUSED`` and waits, so a test signals it at exactly that
point, with no sleeps to guess the moment.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

#: the child script's head: `pause_at(step, nth, rounds)` installs the pausing checkpoint (it waits
#: `rounds` x 50 ms at the point, then lets the build go on).
_PAUSE = textwrap.dedent("""
    import sys, time
    from rollout_dataset.builder import staging

    def pause_at(step, nth, rounds=40):
        seen = 0

        def pause(name):
            nonlocal seen
            if name == step:
                seen += 1
                if seen == nth:
                    print("PAUSED", flush=True)
                    for _ in range(rounds):
                        time.sleep(0.05)

        staging.checkpoint = pause
""")


def pausing_child(body: str) -> str:
    """A child script: `pause_at` defined (see `_PAUSE`), then `body` (which calls it, then builds)."""
    return _PAUSE + textwrap.dedent(body)


def signal_when_paused(script: str, args: list[str], sig: int, *, env: dict[str, str] | None = None,
                       timeout: float = 30) -> int:
    """Run `script` with `args`, send `sig` once it prints PAUSED, and return its exit code.

    `env` is the child's whole environment (None: this process's). Fails the test with the child's
    stderr when it ends without pausing.
    """
    child = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
    try:
        line = child.stdout.readline()
        assert line.strip() == "PAUSED", (line, child.stderr.read() if child.poll() is not None else "")
        child.send_signal(sig)
        return child.wait(timeout=timeout)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stderr.close()
