"""The `achievements.json` of an artifact folder: the contract between an environment and the batch.

An environment may record its achievement timeline while it runs (`write_achievements`); the batch
reads it back (`read_achievements`) for the step rewards (`rollout_dataset.rewards.stepwise`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Sequence

from rollout_dataset.files import write_text_atomic
from rollout_dataset.rewards.stepwise import AchievementSnapshot, timeline_from_json, timeline_to_json

__all__ = ["ACHIEVEMENTS_FILE", "achievements_text", "write_achievements", "read_achievements"]

ACHIEVEMENTS_FILE = "achievements.json"


def achievements_text(
    *,
    env: str,
    catalogue: Iterable[str],
    timeline: Sequence[AchievementSnapshot],
    initial: Iterable[str] = (),
    source: str = "recorded",
) -> str:
    """The text of `achievements.json` (what `write_achievements` writes; an environment hands it
    to the capture pipeline as an extra artifact file).

    Args:
        env: environment family.
        catalogue: every achievement name.
        timeline: the snapshots, in decision order.
        initial: achievements true before the first decision.
        source: `recorded` (while running) or `replayed` (after the fact).

    Returns:
        The JSON text, newline-terminated.
    """
    doc = {
        "schema_version": 1,
        "env": env,
        "source": source,
        "catalogue": list(catalogue),
        "initial": sorted(initial),
        "timeline": timeline_to_json(timeline),
    }
    return json.dumps(doc, indent=2) + "\n"


def write_achievements(
    folder: str | os.PathLike[str],
    *,
    env: str,
    catalogue: Iterable[str],
    timeline: Sequence[AchievementSnapshot],
    initial: Iterable[str] = (),
    source: str = "recorded",
) -> Path:
    """Write `achievements.json` into an artifact folder (the contract between an environment and the batch).

    Args:
        folder: the artifact folder.
        env, catalogue, timeline, initial, source: the document's fields, as for `achievements_text`.

    Returns:
        The file written.
    """
    path = Path(folder) / ACHIEVEMENTS_FILE
    write_text_atomic(path, achievements_text(env=env, catalogue=catalogue, timeline=timeline, initial=initial,
                                              source=source))  # a batch resume never reads half of it
    return path


def read_achievements(folder: str | os.PathLike[str]) -> tuple[list[AchievementSnapshot], frozenset[str]] | None:
    """`(timeline, initial)` from a folder's `achievements.json`, or None when it has none."""
    path = Path(folder) / ACHIEVEMENTS_FILE
    if not path.is_file():
        return None
    doc = json.loads(path.read_text(encoding="utf-8"))
    return timeline_from_json(doc.get("timeline") or []), frozenset(doc.get("initial") or [])
