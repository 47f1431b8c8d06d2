"""One Crafter rollout's configuration (`CrafterRolloutConfig`), captured by the one capture pipeline.

`run_crafter_rollout(config)` (`rollout_dataset.recipes.crafter.env`) is `capture_rollout(config)`
(`rollout_dataset.capture.pipeline`) with the Crafter environment: local backend (the `crafter` policy)
unless a base URL is given -> recording proxy -> the Crafter harness -> trace -> export ->
documents -> artifacts -> validation -> a push to `push_repo` when given. The folder holds the
same eight files as a coding capture, plus `achievements.json` (the achievement timeline); Crafter
has no tests, so `visible_tests.txt` is empty and `held_out_tests.json` lists none.

Rewards: `env_reward` (and `reward_after_penalties`, no penalties apply) is the fraction of
Crafter's 22 achievements unlocked in the episode; `summary.json` `env_metrics` holds the count
(`achievements_unlocked`), Crafter's own return (`crafter_return`) and `env_steps`; the count,
Crafter's own return and the
per-decision record are in `rollout.json` under `metadata.crafter`, and the stepwise rewards of
the configured strategy under `metadata.stepwise` (totals also in `summary.json`).
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rollout_dataset.rewards.config import StepRewardConfig
from rollout_dataset.recipes.crafter.harness import MAX_ACTIONS_PER_CALL
from rollout_dataset.recipes.crafter.world import ACHIEVEMENTS, ACTIONS
from rollout_dataset.proxy.redact import redact_url

__all__ = ["ENV_NAME", "HARNESS_NAME", "SESSION", "CrafterRolloutConfig", "task_id_for"]


ENV_NAME = "crafter"
HARNESS_NAME = "crafter"
SESSION = "crafter"


def task_id_for(seed: int) -> str:
    """The task id of the Crafter world drawn by `seed` (e.g. `crafter-seed-3`)."""
    return f"crafter-seed-{int(seed)}"


@dataclass
class CrafterRolloutConfig:
    """Settings of one Crafter rollout.

    Args:
        out_dir: the artifact folder (created; artifact files in it are overwritten).
        seed: decides the world (the task).
        rollout_seed: request seed of the model calls; None means `seed`.
        base_url: an OpenAI-compatible server (ends in `/v1`); None starts the local backend with
            the `crafter` policy.
        model: the model name; default: the local backend's served name, else the server's first model.
        api_key: the real key of `base_url`: the proxy sends it upstream, the agent only gets a
            per-rollout dummy key; never written anywhere.
        max_steps: Crafter steps per episode (>= 1).
        max_turns: model calls per episode (>= 1).
        max_actions: actions per `act` call (1..64, default 8).
        temperature: sampling temperature.
        max_tokens: completion cap per call.
        timeout_s: wall-time budget of the episode.
        area: world size (Crafter's default 64 x 64; smaller is faster to generate).
        view: (width, height) of the map in the observation (odd numbers).
        step_rewards: the step-reward block used for `summary.json`'s `stepwise` (default simple).
        rollout_id: the rollout id (32 hex); None draws a uuid4.
        tokenizer: tokenizer for the export's re-render check and `samples.md` (`builtin`, a path or
            a hub id already cached); default `builtin` with the local backend, none otherwise.
        served_model_name: the local backend's model name.
        backend_policy: the local backend's policy when `base_url` points at one started by the
            caller (recorded in `task.json`; a batch shares one backend).
        push_repo: build the artifact folder into a dataset and push it to this Hub repo (as a
            coding capture does); None pushes nothing (a batch pushes its whole dataset once instead).
        push_private: create a new `push_repo` private (None: the Hub's default).
        more_upstreams: more model servers serving the model of `base_url` (``--upstream`` repeated).
        trust_env: reach `base_url` honouring the environment's proxy and CA variables, as httpx's
            ``trust_env`` (`rollout_dataset.proxy.trust_env`; ``--no-trust-env`` turns it off).

    Raises:
        ValueError: a budget or id out of range.
    """

    env_name: ClassVar[str] = ENV_NAME

    out_dir: str | Path = "crafter_artifact"
    seed: int = 0
    rollout_seed: int | None = None
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    max_steps: int = 100
    max_turns: int = 30
    max_actions: int = MAX_ACTIONS_PER_CALL
    temperature: float = 1.0
    max_tokens: int = 512
    timeout_s: float = 900.0
    area: tuple[int, int] = (64, 64)
    view: tuple[int, int] = (11, 9)
    step_rewards: StepRewardConfig = field(default_factory=StepRewardConfig)
    rollout_id: str | None = None
    tokenizer: str | None = None
    served_model_name: str = "local"
    backend_policy: str | None = None
    push_repo: str | None = None
    push_private: bool | None = None
    trust_env: bool = True
    more_upstreams: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed: {self.seed!r} is out of range (an integer >= 0)")
        for name in ("max_steps", "max_turns"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: {value!r} is out of range (an integer >= 1)")
        if not 1 <= int(self.max_actions) <= 64:
            raise ValueError(f"max_actions: {self.max_actions!r} is out of range (1..64)")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s: {self.timeout_s!r} is out of range (> 0)")
        if self.rollout_id is not None and (len(self.rollout_id) != 32 or
                                            any(c not in "0123456789abcdef" for c in self.rollout_id)):
            raise ValueError(f"rollout_id: {self.rollout_id!r} is not 32 lowercase hex characters (uuid4 hex)")
        self.area = (int(self.area[0]), int(self.area[1]))
        self.view = (int(self.view[0]), int(self.view[1]))

    @property
    def effective_rollout_seed(self) -> int:
        """The request seed: `rollout_seed`, else `seed`."""
        return self.seed if self.rollout_seed is None else int(self.rollout_seed)

    def public_dict(self) -> dict[str, Any]:
        """The settings as `task.json` records them (never the API key)."""
        try:
            version = importlib.metadata.version("crafter")
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover - crafter is a dependency
            version = None
        return {
            "env": ENV_NAME, "crafter_version": version, "seed": self.seed, "max_steps": self.max_steps,
            "max_turns": self.max_turns, "max_actions": self.max_actions, "area": list(self.area),
            "view": list(self.view), "actions": list(ACTIONS), "achievements": list(ACHIEVEMENTS),
            "base_url": redact_url(self.base_url), "model": self.model,
            "policy": "crafter" if self.base_url is None else self.backend_policy, "harness": HARNESS_NAME,
            "temperature": self.temperature, "max_tokens": self.max_tokens, "timeout_s": self.timeout_s,
            "tokenizer": self.tokenizer, "step_rewards": self.step_rewards.to_dict(),
        }
