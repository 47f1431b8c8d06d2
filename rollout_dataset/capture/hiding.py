"""Which paths the agent's sandbox hides during a capture (held-out isolation).

The agent's code must not read held-out tests: not the task's source file (`task_hidden_paths`),
not the `held_out_tests.json` this capture will write, and not those of other rollouts written
next to it (a batch writes every rollout under one `rollouts/` folder). So the sandbox hides:

- the task's hidden paths (a ``file:`` task source);
- the output folder itself;
- the output folder's parent (the root holding sibling rollouts), unless hiding it would also
  hide what the sandboxed code needs to run (the Python installation, this package, the
  temporary directory holding the sandbox's working directory) or the current working directory
  (where a user keeps the files an external harness command names, e.g. ``--out-dir r1`` run
  from a project folder); then the sibling folders already holding a ``held_out_tests.json``
  are hidden instead;
- any extra paths the caller names (`CaptureConfig.hide_paths`, e.g. a batch's `rollouts/`).

Hiding uses the sandbox's mount namespace: a hidden directory reads as empty, a hidden file as
empty (see `rollout_dataset.sandbox.isolation`). Without a mount namespace nothing is hidden and
`rollout_dataset.sandbox.isolation_report()` says so.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable

__all__ = ["capture_hidden_paths", "safe_to_hide"]

logger = logging.getLogger(__name__)


def _needed_paths() -> list[Path]:
    """Paths sandboxed code needs readable: the interpreter, the installed packages, the temp dir."""
    import rollout_dataset

    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             os.path.dirname(sys.executable), os.path.dirname(rollout_dataset.__file__), tempfile.gettempdir(),
             "/bin", "/usr", "/lib", "/etc"]
    paths += [p for p in sys.path if p and os.path.isdir(p)]
    return [Path(p).resolve() for p in paths]


def safe_to_hide(path: str | os.PathLike[str]) -> bool:
    """Whether hiding `path` leaves the sandboxed code able to run.

    Args:
        path: a directory or file.

    Returns:
        False when `path` is the filesystem root, the home directory, or contains (or is) the
        Python installation, an import path, this package or the temporary directory.
    """
    target = Path(path).resolve()
    if target == Path(target.anchor) or target == Path.home().resolve():
        return False
    return not any(target == needed or target in needed.parents for needed in _needed_paths())


def _holds_cwd(path: Path) -> bool:
    try:
        cwd = Path.cwd().resolve()
    except OSError:  # the current directory was deleted
        return False
    return path == cwd or path in cwd.parents


def _sibling_artifacts(out: Path) -> list[Path]:
    """Folders next to `out` that hold a rollout's held-out tests (sorted)."""
    try:
        entries = list(out.parent.iterdir())
    except OSError:
        return []
    return sorted(p for p in entries if p != out and p.is_dir() and (p / "held_out_tests.json").is_file())


def capture_hidden_paths(task: Any, out_dir: str | os.PathLike[str],
                         extra: Iterable[str | os.PathLike[str]] = ()) -> list[Path]:
    """The paths a capture's agent sandbox hides.

    Args:
        task: the task (its ``file:`` source is hidden, see `rollout_dataset.sandbox.task_hidden_paths`).
        out_dir: the artifact folder of this rollout.
        extra: more paths to hide (trusted as given; e.g. a batch's `rollouts/` folder).

    Returns:
        The paths, resolved and without duplicates, in order: task files, the output folder, its
        parent (when `safe_to_hide` and not holding the current directory; else the sibling folders
        holding ``held_out_tests.json``), the extras.
    """
    from rollout_dataset.sandbox import task_hidden_paths

    out = Path(out_dir).resolve()
    paths = [*task_hidden_paths(task), out]
    if safe_to_hide(out.parent) and not _holds_cwd(out.parent):
        paths.append(out.parent)
    else:
        siblings = _sibling_artifacts(out)
        logger.info("sandbox: not hiding %s (the parent of the output folder): it holds what the sandboxed code "
                    "or the current directory needs; hiding %s and %d sibling rollout folder(s)",
                    out.parent, out, len(siblings))
        paths += siblings
    paths += [Path(p).resolve() for p in extra]
    unique: list[Path] = []
    for p in paths:
        if p not in unique:
            unique.append(p)
    return unique
