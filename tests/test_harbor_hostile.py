"""The bubblewrap environment of a Harbor task against a hostile agent (docs/harbor.md, "The
environment"): what the agent runs cannot see or signal the host's processes, and nothing it leaves
running outlives its turn into the verifier's, where it could rewrite the tests or the reward."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from rollout_dataset.harbor.adapter import find_harbor
from rollout_dataset.harbor.bwrap_root import TaskRoot

needs_harbor = pytest.mark.skipif(find_harbor() is None, reason="Harbor is not installed (make harbor)")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed (make system-deps)")


@needs_bwrap
def test_a_command_in_the_task_root_can_neither_see_nor_signal_a_host_process():
    victim = subprocess.Popen(["sleep", "60"])
    root = TaskRoot()
    try:
        root.build()
        for held in (False, True):  # a one-off command (the host-side verifier) and the environment's shared namespace
            if held:
                root.start_processes()
            code, out = root.run(f"ls /proc/{victim.pid} >/dev/null 2>&1 && echo seen; kill -9 {victim.pid}; "
                                 "ls /proc | grep -c '^[0-9]'", 20)
            assert "seen" not in out and int(out.split()[-1]) < 10, out
            assert victim.poll() is None
    finally:
        root.close()
        victim.kill()
        victim.wait()


@needs_bwrap
def test_a_process_that_dropped_its_marker_is_killed_with_the_environment():
    root = TaskRoot()
    try:
        root.build()
        root.start_processes()
        root.run("env -u ROLLOUT_HARBOR_ENV setsid bash -c 'exec -a hidden-survivor sleep 300' >/dev/null 2>&1 &", 20)
        time.sleep(0.3)
        assert subprocess.run(["pgrep", "-f", "hidden-survivor"], capture_output=True).returncode == 0
    finally:
        root.close()
    assert subprocess.run(["pgrep", "-f", "hidden-survivor"], capture_output=True).returncode == 1
