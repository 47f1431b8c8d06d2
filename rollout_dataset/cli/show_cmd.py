"""`rollout-dataset show ARTIFACT_DIR`: print one screen about a captured rollout.

Reads ``rollout.json``; when the folder has only ``trace.json``, builds the rollout document from it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rollout_dataset.errors import ArtifactError

__all__ = ["add_arguments", "run", "load_document"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments.

    Args:
        parser: the sub-command's parser.
    """
    parser.add_argument("artifact_dir", metavar="ARTIFACT_DIR", help="a rollout's artifact folder (or its rollout.json / trace.json)")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the document from trace.json even if rollout.json exists")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"{path}: cannot read JSON: {exc}") from exc


def load_document(path: str | Path, *, rebuild: bool = False) -> dict[str, Any]:
    """Load a rollout document from an artifact folder, building it from ``trace.json`` if needed.

    Args:
        path: the artifact folder, or a ``rollout.json`` / ``trace.json`` file.
        rebuild: ignore ``rollout.json`` and build from ``trace.json``.

    Returns:
        The rollout document.

    Raises:
        ArtifactError: neither file exists, or one cannot be read.
    """
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    rollout = path if path.is_file() and path.name != "trace.json" else folder / "rollout.json"
    trace = path if path.is_file() and path.name == "trace.json" else folder / "trace.json"
    if rollout.is_file() and not rebuild and not (path.is_file() and path.name == "trace.json"):
        return _read_json(rollout)
    if not trace.is_file():
        raise ArtifactError(f"{folder}: no rollout.json or trace.json here (is it an artifact folder?)")
    from rollout_dataset.export import capture_level_of, export_rollout

    data = _read_json(trace)
    calls = data.get("calls") if isinstance(data, dict) else None
    if not isinstance(calls, list):
        raise ArtifactError(f"{trace}: field 'calls' must be a list of trace records")
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
    from rollout_dataset.export import summarise

    try:
        document = load_document(args.artifact_dir, rebuild=args.rebuild)
    except ArtifactError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(summarise(document))
    return 0
