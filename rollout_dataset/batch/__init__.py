"""Batch evaluations: seeds x rollouts, stepwise vs final rewards, statistics, plots, a report.

Public API (the reward pieces an environment also needs live one floor down, in
`rollout_dataset.rewards`, and are re-exported here as the batch's documented API):

- `run_batch(BatchConfig, run_one=None) -> BatchResult` — run or resume a batch and write its
  outputs (see `rollout_dataset.batch.runner` for the folder layout);
- `BatchConfig`, `StepRewardConfig`, `load_step_config(path)` — configuration (TOML/JSON/flags);
- `stepwise_for_rollout(timeline, config) -> (decisions, totals)`, `decision_records`,
  `simple_rewards`, `complex_rewards` — the step-reward strategies, pure functions;
- `EnvironmentAchievements` (protocol), `AchievementTracker`, `AchievementSnapshot`,
  `CounterAchievements` — what an achievement is (coding's examples: `rollout_dataset.recipes.coding.replay`);
- `write_achievements` / `read_achievements` — the `achievements.json` an environment may record;
- `register_env(name, factory)`, `result_from_artifacts(folder)` — plugging in an environment;
- `RolloutJob`, `RolloutResult`, `LocalExecutor`, `RayExecutor` — running rollouts;
- `describe`, `pearson`, `spearman` — the statistics.
"""

from __future__ import annotations

from rollout_dataset.batch.config import BatchConfig, load_json_mapping, load_step_config, parse_env_option, parse_seeds
from rollout_dataset.batch.job_runner import register_env, result_from_artifacts
from rollout_dataset.batch.executor import LocalExecutor, RayExecutor, RolloutJob
from rollout_dataset.batch.runner import BatchResult, check_turns, run_batch
from rollout_dataset.batch.stats import describe, pearson, spearman
from rollout_dataset.rewards.achievements import read_achievements, write_achievements
from rollout_dataset.rewards.config import StepRewardConfig
from rollout_dataset.rewards.results import RolloutResult
from rollout_dataset.rewards.stepwise import (
    AchievementSnapshot,
    AchievementTracker,
    CounterAchievements,
    EnvironmentAchievements,
    complex_rewards,
    decision_records,
    simple_rewards,
    stepwise_for_rollout,
)

__all__ = [
    "AchievementSnapshot",
    "AchievementTracker",
    "BatchConfig",
    "BatchResult",
    "CounterAchievements",
    "EnvironmentAchievements",
    "LocalExecutor",
    "RayExecutor",
    "RolloutJob",
    "RolloutResult",
    "StepRewardConfig",
    "check_turns",
    "complex_rewards",
    "decision_records",
    "describe",
    "load_json_mapping",
    "load_step_config",
    "parse_seeds",
    "parse_env_option",
    "pearson",
    "read_achievements",
    "register_env",
    "result_from_artifacts",
    "run_batch",
    "simple_rewards",
    "spearman",
    "stepwise_for_rollout",
    "write_achievements",
]
