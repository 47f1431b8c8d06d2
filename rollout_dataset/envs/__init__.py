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

# the package's names are the seam's and the registry's, each listed once in its module's `__all__`
from rollout_dataset.envs import base, registry
from rollout_dataset.envs.base import *  # noqa: F403 - re-exports exactly base.__all__
from rollout_dataset.envs.registry import *  # noqa: F403 - re-exports exactly registry.__all__

__all__: list[str] = []
__all__ += base.__all__
__all__ += registry.__all__
