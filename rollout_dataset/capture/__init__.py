"""Capture ONE rollout of any environment end to end and write its artifact folder.

Public API:

- `capture_rollout(config) -> CaptureResult` — ONE pipeline for every environment
  (`capture.pipeline`): local backend (unless a base URL is given), recording proxy, the
  environment's agent, trace, export, documents (`rollout_dataset.documents`), artifacts, validation, push;
  `config` is an environment's configuration (`rollout_dataset.recipes.coding.CaptureConfig` for coding);
- `run_capture(environment, config)` — the same with an explicit environment;
- `CaptureResult`;
- `compute_penalties`, `reward_after_penalties`, `PenaltyRules` — the reward rules, usable on their own;
- `collect_secrets`, `redact_text` — what the artifacts never hold;
- `first_call_failure` — the named error of a failed first model call;
- `push_artifacts` — build one artifact folder into a dataset and push it to an explicit repo
  (the pipeline calls it at the end with the configuration's ``push_repo``, for every environment).

This package imports no concrete environment (the registry, `rollout_dataset.envs`, gives them);
coding's own pieces (configuration, hiding, leakage scan, work directory, statement) are in
`rollout_dataset.recipes.coding`.
"""

from rollout_dataset.capture.result import CaptureResult
from rollout_dataset.capture.pipeline import capture_rollout, run_capture
from rollout_dataset.capture.model_server import first_call_failure
from rollout_dataset.hub.artifact_push import push_artifacts
from rollout_dataset.rewards.penalties import PenaltyRules, compute_penalties, reward_after_penalties
from rollout_dataset.capture.secrets import collect_secrets, redact_text

__all__ = [
    "CaptureResult",
    "PenaltyRules",
    "capture_rollout",
    "run_capture",
    "collect_secrets",
    "compute_penalties",
    "first_call_failure",
    "push_artifacts",
    "redact_text",
    "reward_after_penalties",
]
