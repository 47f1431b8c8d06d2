"""Which paths a capture asks its agent's sandbox to mask (a second line behind the allow-list root).

The agent's code runs in the allow-list root of `rollout_dataset.sandbox.isolation`: it holds only
the working directory, a private /tmp and a read-only runtime, so the task's source file, this
rollout's output folder, sibling rollouts and the trace files are not in it at all. These paths are
still handed to the sandbox as masks: should one of them ever lie inside a tree the root binds (a
task file kept inside the runtime, say), it reads as empty there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

__all__ = ["capture_hidden_paths"]


def capture_hidden_paths(task: Any, out_dir: str | os.PathLike[str],
                         extra: Iterable[str | os.PathLike[str]] = ()) -> list[Path]:
    """The paths a capture's agent sandbox masks.

    Args:
        task: the task (its ``file:`` source, see `rollout_dataset.sandbox.task_hidden_paths`).
        out_dir: the artifact folder of this rollout.
        extra: more paths (e.g. a batch's `rollouts/` folder).

    Returns:
        The paths, resolved and without duplicates, in order: task files, the output folder, the extras.
    """
    from rollout_dataset.sandbox import task_hidden_paths

    paths = [*task_hidden_paths(task), Path(out_dir).resolve(), *(Path(p).resolve() for p in extra)]
    unique: list[Path] = []
    for p in paths:
        if p not in unique:
            unique.append(p)
    return unique
