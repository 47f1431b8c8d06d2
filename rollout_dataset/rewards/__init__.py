"""Rewards, one floor below `batch` and the environments: both import from here, never the reverse.

- `penalties`: the documented penalties of one rollout (`PenaltyRules`, `compute_penalties`,
  `reward_after_penalties`);
- `config`: the step-reward configuration (`StepRewardConfig`, `MODES`, `STRATEGIES`);
- `stepwise`: decision-stepwise strategies and achievement tracking (`stepwise_for_rollout`,
  `AchievementTracker`, `AchievementSnapshot`, `CounterAchievements`, the `EnvironmentAchievements`
  protocol an environment implements);
- `achievements`: the `achievements.json` an environment records (`write_achievements`,
  `read_achievements`);
- `results`: `RolloutResult` and `read_rollout_result(folder)`, what one rollout produced as an
  evaluator reads it.

Submodules are imported by name (`from rollout_dataset.rewards.stepwise import ...`); this package
imports nothing itself, so importing one piece stays cheap.
"""
