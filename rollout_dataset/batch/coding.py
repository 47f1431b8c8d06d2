"""Moved to `rollout_dataset.envs.coding.replay` (the coding environment's achievements and trace
replay live with the environment); re-exported here for existing imports."""

from rollout_dataset.envs.coding.replay import (  # noqa: F401
    CodingExamples,
    decisions_from_trace,
    example_name,
    replay_timeline,
    timeline_for_artifacts,
)

__all__ = ["CodingExamples", "example_name", "decisions_from_trace", "replay_timeline", "timeline_for_artifacts"]
