"""A normal run prints no third-party banner (transformers' "PyTorch was not found"), and a real warning
of those libraries still shows."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TRANSFORMERS_NO_ADVISORY_WARNINGS", None)  # as a user's shell has it
    return env


def test_a_capture_s_stderr_holds_no_third_party_banner(tmp_path):
    done = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "capture", "--task-index", "1",
                           "--out-dir", str(tmp_path / "art"), "--no-push"],
                          capture_output=True, text=True, timeout=240, env=_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "PyTorch was not found" not in done.stderr and "[transformers]" not in done.stderr, done.stderr


def test_a_real_transformers_warning_still_shows_under_the_cli(tmp_path):
    code = ("import sys\n"
            "from rollout_dataset.cli import quiet_third_party_banners\n"
            "quiet_third_party_banners()\n"
            "import transformers\n"
            "from transformers.utils import logging\n"
            "logging.get_logger('transformers.x').warning('a real warning')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 0, done.stderr
    assert "a real warning" in done.stderr and "PyTorch was not found" not in done.stderr, done.stderr


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="with PyTorch there is no banner to hide")
def test_without_the_switch_transformers_prints_its_banner_here():
    """The banner test above can fail: this machine has no PyTorch, so transformers' notice is live."""
    done = subprocess.run([sys.executable, "-c", "import transformers"], capture_output=True, text=True,
                          timeout=120, env=_env())
    assert "PyTorch was not found" in done.stderr
