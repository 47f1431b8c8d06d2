"""Environments behind one seam (`Environment`, `rollout_dataset.envs.base`) and one registry.

Built in: `coding` (`rollout_dataset/recipes/coding/`: a task set, a harness in the sandbox, a verifier) and `crafter`
(`rollout_dataset/recipes/crafter/`: the game through an `act` tool). Third-party packages add environments through
the entry-point group `rollout_dataset.environments` (`rollout_dataset.envs.registry`); every
environment is captured, batched and built by the same pipeline:

    from rollout_dataset import capture_rollout, get_environment
    environment = get_environment("crafter")
    capture_rollout(environment.config_class()(seed=3, out_dir="out"))

Nothing here imports an environment's code until it is asked for.
"""

from __future__ import annotations

from rollout_dataset.envs.base import (
    AgentContext,
    AgentOutcome,
    CaptureFlag,
    CaptureSettings,
    Environment,
    EnvironmentBase,
    Episode,
    Score,
    TaskInfo,
)
from rollout_dataset.envs.registry import (
    ENTRY_POINT_GROUP,
    available_environments,
    get_environment,
    register_builtin_policies,
    register_environment,
    unregister_environment,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "AgentContext",
    "AgentOutcome",
    "CaptureFlag",
    "CaptureSettings",
    "Environment",
    "EnvironmentBase",
    "Episode",
    "Score",
    "TaskInfo",
    "available_environments",
    "get_environment",
    "register_builtin_policies",
    "register_environment",
    "unregister_environment",
]
