"""A small dataset of real captures in groups, for the training recipes' tests.

Each group is one task under one dataset seed captured twice on the local backend: once by the
`oracle` policy (it solves the task: reward 1.0) and once by `echo` (it writes no solution: 0.0),
so a group baseline has something to learn from. Optionally a group of one rollout is added.
"""

from __future__ import annotations

from pathlib import Path

from rollout_dataset.builder import build
from rollout_dataset.recipes.coding.config import CaptureConfig
from rollout_dataset.capture.pipeline import capture_rollout

__all__ = ["build_grouped_dataset"]


def build_grouped_dataset(root: Path, *, tasks: tuple[int, ...] = (0, 1), policies: tuple[str, ...] = ("oracle", "echo"),
                          seed: int = 0) -> Path:
    """Capture `policies` x `tasks` rollouts under `root/runs` and build them into `root/dataset`.

    Returns:
        The dataset folder.
    """
    for task in tasks:
        for policy in policies:
            result = capture_rollout(CaptureConfig(out_dir=root / "runs" / f"t{task}-{policy}", task_index=task,
                                                   seed=seed, policy=policy, timeout_s=120))
            assert not result.validation_failures, result.validation_failures
    build([root / "runs"], root / "dataset")
    return root / "dataset"
