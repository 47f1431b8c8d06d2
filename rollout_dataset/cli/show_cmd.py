"""`rollout-dataset show ARTIFACT_DIR`: print one screen about a captured rollout.

Reads ``rollout.json``; when the folder has only ``trace.json``, builds the rollout document from it.
The file is checked as `validate` checks it first: a corrupt, mistyped or symlinked-out file is one
``error: file: json.path: reason`` line and exit 1, never a traceback.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rollout_dataset.artifact_files import ROLLOUT_FILE, TRACE_FILE
from rollout_dataset.errors import ArtifactError

__all__ = ["add_arguments", "run", "load_document"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments.

    Args:
        parser: the sub-command's parser.
    """
    parser.add_argument("artifact_dir", metavar="ARTIFACT_DIR", help="a rollout's artifact folder (or its rollout.json / trace.json)")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the document from trace.json even if rollout.json exists")


def _read_checked(path: Path, folder: Path, schema: str) -> Any:
    """Read one document the way `validate` checks it; raise instead of returning a bad one."""
    from rollout_dataset.errors import SchemaValidationError
    from rollout_dataset.schema.check import check_document, file_problem, load_json_file

    problem = file_problem(path, folder)
    if problem is not None:
        raise ArtifactError(f"{path}: {problem}")
    doc, failures = load_json_file(path)
    failures = failures or check_document(doc, schema, str(path))
    if failures:
        raise SchemaValidationError(failures)
    return doc


def load_document(path: str | Path, *, rebuild: bool = False) -> dict[str, Any]:
    """Load a rollout document from an artifact folder, building it from ``trace.json`` if needed.

    The file read is checked with the rules of `validate` first (a symlink leaving the folder, text
    that is not UTF-8, JSON off its schema are errors, never a crash later on).

    Args:
        path: the artifact folder, or a ``rollout.json`` / ``trace.json`` file.
        rebuild: ignore ``rollout.json`` and build from ``trace.json``.

    Returns:
        The rollout document.

    Raises:
        ArtifactError: neither file exists, or the one to read is not a regular file in the folder.
        SchemaValidationError: the file is not UTF-8 JSON matching its schema and semantic checks.
    """
    path = Path(path)
    named = not path.is_dir() and os.path.lexists(path)
    folder = path.parent if named else path
    rollout = path if named and path.name != TRACE_FILE else folder / ROLLOUT_FILE
    trace = path if named and path.name == TRACE_FILE else folder / TRACE_FILE
    if os.path.lexists(rollout) and not rebuild and not (named and path.name == TRACE_FILE):
        return _read_checked(rollout, folder, "rollout")
    if not os.path.lexists(trace):
        raise ArtifactError(f"{folder}: no rollout.json or trace.json here (is it an artifact folder?)")
    from rollout_dataset.export import capture_level_of, export_rollout

    data = _read_checked(trace, folder, "trace")
    calls = data["calls"]
    return export_rollout(
        calls,
        session_id=str(data.get("session", folder.name)),
        metadata={"source": str(trace)},
        capture_level=capture_level_of(calls),
    )


def run(args: argparse.Namespace) -> int:
    """Print the rollout's summary.

    Args:
        args: parsed arguments.

    Returns:
        0 on success, 1 when the folder cannot be read.
    """
    from rollout_dataset.builder.inputs import first_failure_line
    from rollout_dataset.cli.reporting import EXIT_FAILED, report_error
    from rollout_dataset.errors import SchemaValidationError
    from rollout_dataset.export import summarise

    try:
        document = load_document(args.artifact_dir, rebuild=args.rebuild)
    except SchemaValidationError as exc:
        return report_error(first_failure_line(exc), EXIT_FAILED)
    except ArtifactError as exc:
        return report_error(exc, EXIT_FAILED)
    print(summarise(document))
    return 0
