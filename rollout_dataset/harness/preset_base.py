"""What an external harness preset is (`HarnessPreset`) and where an npm-installed harness is found.

The ground every preset module stands on (`harness.presets`: mini-swe-agent, opencode;
`harness.codex`): none of them imports another to get it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from rollout_dataset.npm_tools import find_npm_tool

__all__ = ["HarnessPreset", "find_npm_tool", "tool_folder"]  # find_npm_tool: rollout_dataset.npm_tools


@dataclass(frozen=True)
class HarnessPreset:
    """A named external harness.

    Args:
        name: the preset's name (`--harness NAME`).
        command: the shell command template.
        env: extra environment variables (templates).
        ro_paths: host paths the harness needs read-only inside its sandbox, besides the runtime
            (/usr, the Python installation and its venv), e.g. opencode's npm folder.
    """

    name: str
    command: str
    env: dict[str, str] = field(default_factory=dict)
    ro_paths: tuple[str, ...] = ()


def tool_folder(binary: str) -> str | None:
    """The folder a harness binary must see read-only: the npm prefix holding its ``node_modules``.

    Args:
        binary: the harness executable's path.

    Returns:
        The folder above the binary's ``node_modules`` (as named, symlinks kept, so the command's path
        works inside the sandbox), or None when the binary is not in an npm tree.
    """
    path = Path(os.path.abspath(binary))
    for parent in path.parents:
        if parent.name == "node_modules":
            return str(parent.parent)
    return None
