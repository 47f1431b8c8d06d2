"""The build's inputs: finding artifact folders and reading each one exactly as `validate` checks it.

Every folder is read through `rollout_dataset.schema.check.check_artifact_dir`, the one definition
of a valid artifact folder (schemas, semantic checks, cross-file counts, symlinks, encodings), so
`build` never turns into rows what `validate` rejects, and a check added there applies here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from rollout_dataset.artifact_files import ARTIFACT_FILES, SUMMARY_FILE
from rollout_dataset.errors import ArtifactError, SchemaValidationError
from rollout_dataset.schema.check import check_artifact_dir

__all__ = ["find_artifact_dirs", "load_checked_artifact", "first_failure_line"]


def find_artifact_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Expand the inputs: an artifact folder, or a folder holding artifact folders (any depth).

    Symlinked folders are not entered (a link can point anywhere on the machine).

    Args:
        paths: folders given by the user.

    Returns:
        Artifact folders (those with a summary.json), in the given order, each tree sorted.

    Raises:
        ArtifactError: a path does not exist or holds no artifact folder.
    """
    out: list[Path] = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise ArtifactError(f"{p}: not a folder (give artifact folders or a folder of them)")
        if os.path.lexists(p / SUMMARY_FILE):
            found = [p]
        else:
            found = sorted(Path(parent) for parent, _, files in os.walk(p, followlinks=False)
                           if SUMMARY_FILE in files)
        if not found:
            raise ArtifactError(f"{p}: no artifact folder (summary.json) found in it")
        out.extend(x for x in found if x not in out)
    return out


def load_checked_artifact(folder: str | Path) -> dict[str, Any]:
    """Read one artifact folder after checking it with the rules of `validate`.

    Args:
        folder: the artifact folder of one rollout.

    Returns:
        The documents in the shape `rows.rollout_rows` takes: ``{"summary", "task", "trace",
        "rollout", "turns", "held_out_tests"}`` parsed, ``"visible_tests"`` and ``"samples"`` texts,
        and ``"folder"``.

    Raises:
        SchemaValidationError: the folder is not valid; one `(file, json_path, reason)` per failure
            (a missing, unreadable, symlinked-out or corrupt file included).
    """
    folder = Path(folder)
    documents: dict[str, Any] = {}
    failures = check_artifact_dir(folder, documents)
    if failures:
        raise SchemaValidationError(failures)
    art: dict[str, Any] = {"folder": str(folder)}
    for name in ARTIFACT_FILES:
        art[name.split(".")[0]] = documents[name]
    return art


def first_failure_line(exc: SchemaValidationError, folder: str | Path | None = None) -> str:
    """One line for a failed folder: its first failure and how many more there are.

    Args:
        exc: the error from `load_checked_artifact` (or any `SchemaValidationError`).
        folder: the folder to point `rollout-dataset validate` at for the full list.

    Returns:
        ``file: json.path: reason`` plus ``(and N more; ...)`` when there are more.
    """
    if not exc.failures:
        return str(exc)
    file, path, reason = exc.failures[0]
    line = f"{file}: {path}: {reason}"
    more = len(exc.failures) - 1
    if more:
        line += f" (and {more} more failure(s): rollout-dataset validate {folder or file})"
    return line.replace("\n", " ")
