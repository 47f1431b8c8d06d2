"""What one rollout produced, as an evaluator needs it, read from its artifact folder.

`RolloutResult` is what a batch runner's `run_one(job)` returns; `read_rollout_result(folder)` is
the shared reading of an artifact folder (`summary.json`, `achievements.json`) any environment can
use without importing the batch (which adds its coding replay:
`rollout_dataset.batch.job_runner.result_from_artifacts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rollout_dataset.artifact_files import SUMMARY_FILE, TASK_FILE, TRACE_FILE
from rollout_dataset.errors import ArtifactError
from rollout_dataset.rewards.achievements import read_achievements
from rollout_dataset.rewards.stepwise import AchievementSnapshot

__all__ = ["RolloutResult", "read_rollout_result"]


@dataclass
class RolloutResult:
    """What one rollout produced, as the batch needs it.

    Attributes:
        final_return: outcome reward (None when unscorable).
        num_steps: agent turns.
        tool_calls_total: tool calls the agent made.
        timeline: achievements after each decision (see `stepwise`).
        initial: achievements true before the first decision.
        model: model name used.
        task_id: id of the task.
        extra: anything else worth keeping in the batch result record.
    """

    final_return: float | None
    num_steps: int
    tool_calls_total: int
    timeline: list[AchievementSnapshot] = field(default_factory=list)
    initial: frozenset[str] = frozenset()
    model: str | None = None
    task_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)



def _read_json(path: Path) -> dict[str, Any]:
    import json

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ArtifactError(f"{path}: missing (the rollout wrote no summary)") from None
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"{path}: unreadable ({exc})") from None
    if not isinstance(doc, dict):
        raise ArtifactError(f"{path}: expected a JSON object")
    return doc


def read_rollout_result(
    folder: str | Path,
    *,
    replay_timeline: Callable[[Path], tuple[list[AchievementSnapshot], frozenset[str]]] | None = None,
) -> RolloutResult:
    """Read what the batch needs from one artifact folder.

    Args:
        folder: the artifact folder (`summary.json`, and `achievements.json` or `trace.json`).
        replay_timeline: when given and the folder holds `trace.json` and `task.json`, the timeline
            and initial achievements come from it (the batch's coding replay) rather than from
            `achievements.json`.

    Returns:
        The rollout's result; `final_return` is `reward_after_penalties` (None when unscorable).

    Raises:
        ArtifactError: summary.json is missing or unreadable.
    """
    folder = Path(folder)
    summary = _read_json(folder / SUMMARY_FILE)
    if replay_timeline is not None and (folder / TRACE_FILE).is_file() and (folder / TASK_FILE).is_file():
        timeline, initial = replay_timeline(folder)
    else:
        found = read_achievements(folder)
        timeline, initial = found if found is not None else ([], frozenset())
    final = summary.get("reward_after_penalties")
    return RolloutResult(
        final_return=None if final is None else float(final),
        num_steps=int(summary.get("agent_turns") or 0),
        tool_calls_total=int(summary.get("tool_calls_total") or 0),
        timeline=timeline,
        initial=initial,
        model=summary.get("model"),
        task_id=summary.get("task_id"),
        extra={
            "env_reward": summary.get("env_reward"),
            "stop_reason": summary.get("stop_reason"),
            "timed_out": summary.get("timed_out"),
            "capture_level": summary.get("capture_level"),
        },
    )
