"""Capture ONE rollout end to end and write its artifact folder.

Public API:

- `capture_rollout(config) -> CaptureResult` — ONE pipeline for every environment
  (`capture.pipeline`): local backend (unless a base URL is given), recording proxy, the
  environment's agent, trace, export, documents (`rollout_dataset.documents`), artifacts, validation, push;
  `config` is a `CaptureConfig` (coding) or another environment's configuration;
- `run_capture(environment, config)` — the same with an explicit environment;
- `CaptureConfig`, `CaptureResult`;
- `scan_for_leaks`, `compute_penalties`, `reward_after_penalties`, `PenaltyRules` — the integrity
  and reward rules, usable on their own;
- `capture_hidden_paths` — what the agent's sandbox masks besides its allow-list root;
- `push_artifacts` — build one artifact folder into a dataset and push it to an explicit repo
  (the pipeline calls it at the end with the configuration's ``push_repo``, for every environment);
- `harness_statement` — the statement every harness is given (instruction + where solution.py goes).
"""

from rollout_dataset.capture.config import CaptureConfig, CaptureResult
from rollout_dataset.capture.hiding import capture_hidden_paths
from rollout_dataset.capture.leakage import MIN_LEAK_CHARS, LeakHit, scan_for_leaks
from rollout_dataset.capture.pipeline import capture_rollout, run_capture
from rollout_dataset.capture.upstream import first_call_failure
from rollout_dataset.envs.coding.statement import SOLUTION_NOTE, harness_statement
from rollout_dataset.hub.artifact_push import push_artifacts
from rollout_dataset.rewards.penalties import PenaltyRules, compute_penalties, reward_after_penalties
from rollout_dataset.capture.secrets import collect_secrets, redact_text
from rollout_dataset.capture.threads import serve_in_thread

__all__ = [
    "CaptureConfig",
    "CaptureResult",
    "LeakHit",
    "MIN_LEAK_CHARS",
    "PenaltyRules",
    "SOLUTION_NOTE",
    "capture_hidden_paths",
    "capture_rollout",
    "run_capture",
    "collect_secrets",
    "compute_penalties",
    "first_call_failure",
    "harness_statement",
    "push_artifacts",
    "redact_text",
    "reward_after_penalties",
    "scan_for_leaks",
    "serve_in_thread",
]
