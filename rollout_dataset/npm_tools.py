"""Where an npm-installed harness binary is (`find_npm_tool`): one definition, used by the harness presets
(`rollout_dataset.harness`) and by the Harbor agents that mount the binary into a container
(`rollout_dataset.harbor.installed`); it imports nothing of the package."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["find_npm_tool"]

_REPO_ROOT = Path(__file__).resolve().parents[1]


def find_npm_tool(name: str, env_var: str) -> str | None:
    """Locate an npm-installed harness binary: the `env_var` override, the repo's `.npm-tools`, or PATH.

    Args:
        name: the binary's name (``opencode``, ``codex``).
        env_var: the environment variable that may name it (``OPENCODE_BIN``, ``CODEX_BIN``).

    Returns:
        The path of an executable file, or None when it is not installed (`make npm-tools` installs it).
    """
    candidates = [os.environ.get(env_var), str(_REPO_ROOT / ".npm-tools/node_modules/.bin" / name), shutil.which(name)]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None
