"""`rollout_dataset.processes`: watching a child and stopping its process group."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from rollout_dataset.processes import CHILD_EXIT, TIME_LIMIT, watch_child


def _child(seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"], start_new_session=True)


def test_a_child_that_exits_by_itself_is_reported_as_such():
    proc = _child(0)
    assert watch_child(proc, start=time.monotonic(), limit_s=30, checks=[], poll_s=0.01,
                       first_signal=signal.SIGTERM, grace_s=1) == (CHILD_EXIT, False)


def test_a_child_past_its_time_limit_is_stopped_with_the_first_signal():
    proc = _child(30)
    reason = watch_child(proc, start=time.monotonic(), limit_s=0.2, checks=[], poll_s=0.01,
                         first_signal=signal.SIGTERM, grace_s=5)
    assert reason == (TIME_LIMIT, True)
    assert proc.returncode == -signal.SIGTERM


def test_the_first_check_with_a_reason_stops_the_child():
    proc = _child(30)
    checks = [lambda: None, lambda: "disk_limit", lambda: "upstream_error"]
    reason = watch_child(proc, start=time.monotonic(), limit_s=30, checks=checks, poll_s=0.01,
                         first_signal=signal.SIGINT, grace_s=5)
    assert reason == ("disk_limit", False)
    assert proc.returncode is not None
