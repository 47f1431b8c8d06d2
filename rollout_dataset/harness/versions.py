"""The installed version of a harness preset (`mini-swe-agent`, `opencode`), for `summary.json`'s provenance."""

from __future__ import annotations

import functools
import importlib.metadata
import subprocess

__all__ = ["VERSION_PROBE_TIMEOUT_S", "harness_version"]

#: how long `opencode --version` may take.
VERSION_PROBE_TIMEOUT_S = 10.0


@functools.lru_cache(maxsize=16)
def harness_version(harness: str) -> str | None:
    """The version of the harness `harness` as installed here.

    Args:
        harness: the `--harness` value.

    Returns:
        The version (the `mini-swe-agent` distribution's, `opencode --version`'s last line), or None
        for any other harness or when it cannot be learned.
    """
    if harness == "mini-swe-agent":
        try:
            return importlib.metadata.version("mini-swe-agent")
        except importlib.metadata.PackageNotFoundError:
            return None
    if harness == "opencode":
        from rollout_dataset.harness.presets import find_opencode

        binary = find_opencode()
        if binary:
            try:
                done = subprocess.run([binary, "--version"], capture_output=True, text=True,
                                      timeout=VERSION_PROBE_TIMEOUT_S)
            except (OSError, subprocess.SubprocessError):
                return None
            return done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else None
    return None
