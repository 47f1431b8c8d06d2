"""The step-reward configuration: the `step_rewards` block, validated.

The block follows the seed's shape: `{enabled, mode, strategy, indicator_lambda, weights,
k_limits}`. Reading it from a TOML or JSON file is the batch's job
(`rollout_dataset.batch.config.load_step_config`); environments and the batch both build it here.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping

from rollout_dataset.errors import ConfigError

__all__ = ["MODES", "STRATEGIES", "STEP_KEYS", "StepRewardConfig", "finite_number", "parse_weights", "parse_k_limits"]

MODES = ("off", "decision_stepwise")
STRATEGIES = ("simple", "complex")
STEP_KEYS = {"enabled", "mode", "strategy", "indicator_lambda", "weights", "k_limits"}
# keys an RL-style config may carry in the same block that we accept and ignore
_IGNORED_STEP_KEYS = {"step_beta"}


def finite_number(value: Any, where: str) -> float:
    """`value` as a float. Raises: ConfigError naming `where` when it is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def parse_weights(value: Any, where: str) -> dict[str, float]:
    """Achievement name -> weight. Raises: ConfigError naming `where` (not a mapping, a bad weight)."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping of achievement name -> weight, got {type(value).__name__}")
    return {str(k): finite_number(v, f"{where}.{k}") for k, v in value.items()}


def parse_k_limits(value: Any, where: str) -> dict[str, int]:
    """Achievement name -> count (>= 0). Raises: ConfigError naming `where` (not a mapping, a bad count)."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping of achievement name -> count, got {type(value).__name__}")
    out: dict[str, int] = {}
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"{where}.{k}: expected an integer >= 0, got {v!r}")
        out[str(k)] = int(v)
    return out


@dataclass(frozen=True)
class StepRewardConfig:
    """The `step_rewards` block.

    Attributes:
        enabled: master switch; rewards are computed only when enabled and mode is decision_stepwise.
        mode: `off` or `decision_stepwise`.
        strategy: `simple` (indicator_lambda when a decision unlocks anything new) or `complex`
            (per-achievement weights, each counted at most k_limits times per episode).
        indicator_lambda: the reward of one indicator in `simple`.
        weights: achievement name -> weight (`complex`; default 1.0 for names not listed).
        k_limits: achievement name -> times it may count per episode (`complex`; default 1).
    """

    enabled: bool = True
    mode: str = "decision_stepwise"
    strategy: str = "simple"
    indicator_lambda: float = 1.0
    weights: dict[str, float] = field(default_factory=dict)
    k_limits: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"step_rewards.mode: {self.mode!r} is not one of {', '.join(MODES)}")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"step_rewards.strategy: {self.strategy!r} is not one of {', '.join(STRATEGIES)}")
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"step_rewards.enabled: expected true or false, got {self.enabled!r}")
        finite_number(self.indicator_lambda, "step_rewards.indicator_lambda")
        parse_weights(self.weights, "step_rewards.weights")
        parse_k_limits(self.k_limits, "step_rewards.k_limits")

    @property
    def active(self) -> bool:
        """True when step rewards are computed (enabled and mode `decision_stepwise`)."""
        return self.enabled and self.mode == "decision_stepwise"

    def weight(self, name: str) -> float:
        """The weight of one achievement (1.0 when not listed)."""
        return float(self.weights.get(name, 1.0))

    def k_limit(self, name: str) -> int:
        """How many times one achievement may count per episode (1 when not listed)."""
        return int(self.k_limits.get(name, 1))

    def with_strategy(self, strategy: str) -> "StepRewardConfig":
        """A copy with another strategy (validated)."""
        return replace(self, strategy=strategy)

    def to_dict(self) -> dict[str, Any]:
        """The block as plain JSON-ready data."""
        return asdict(self)

    @classmethod
    def from_mapping(cls, block: Mapping[str, Any], *, source: str = "step_rewards") -> "StepRewardConfig":
        """Build from a parsed `step_rewards` block.

        Args:
            block: the mapping (missing keys take the defaults).
            source: where it came from, for error messages (file name).

        Returns:
            The validated configuration.

        Raises:
            ConfigError: an unknown key, or a value of the wrong type or outside its range.
        """
        if not isinstance(block, Mapping):
            raise ConfigError(f"{source}: step_rewards must be a table/object, got {type(block).__name__}")
        unknown = sorted(set(block) - STEP_KEYS - _IGNORED_STEP_KEYS)
        if unknown:
            raise ConfigError(
                f"{source}: unknown step_rewards key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(STEP_KEYS))}"
            )
        kwargs: dict[str, Any] = {}
        if "enabled" in block:
            kwargs["enabled"] = block["enabled"]
        if "mode" in block:
            kwargs["mode"] = str(block["mode"]).lower()
        if "strategy" in block:
            kwargs["strategy"] = str(block["strategy"]).lower()
        if "indicator_lambda" in block:
            kwargs["indicator_lambda"] = finite_number(block["indicator_lambda"], f"{source}: step_rewards.indicator_lambda")
        if "weights" in block:
            kwargs["weights"] = parse_weights(block["weights"], f"{source}: step_rewards.weights")
        if "k_limits" in block:
            kwargs["k_limits"] = parse_k_limits(block["k_limits"], f"{source}: step_rewards.k_limits")
        try:
            return cls(**kwargs)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
