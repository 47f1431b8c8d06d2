"""`rollout-dataset batch --env crafter`: the episode options and seeds of Crafter's batch jobs
(used by `CrafterEnvironment`; the batch's one generic runner does the rest).

Seed `s` is the world, rollout `i` of it sends request seed `s * 1000 + i` (so the scripted policy
explores differently and rollouts of one world differ). The episode is shaped by
`config.env_options` (`rollout-dataset batch --env crafter --env-option KEY=VALUE`): `max_steps`
(default `max_turns * max_actions`), `max_actions` (default 8), `area` and `view`.
"""

from __future__ import annotations

from typing import Any

from rollout_dataset.recipes.crafter.harness import MAX_ACTIONS_PER_CALL

__all__ = ["rollout_seed_for", "episode_options"]


_OPTION_KEYS = {"max_steps", "max_actions", "area", "view"}


def rollout_seed_for(seed: int, rollout_idx: int) -> int:
    """The request seed of rollout `rollout_idx` on world `seed` (`seed * 1000 + rollout_idx`)."""
    return int(seed) * 1000 + int(rollout_idx)


def episode_options(config: Any) -> dict[str, Any]:
    """The Crafter episode settings of a batch configuration.

    Args:
        config: a `BatchConfig` (an `env_options` mapping is honoured when present).

    Returns:
        `{max_steps, max_actions}` plus `area`/`view` when given.

    Raises:
        ConfigError: an unknown option or a value out of range.
    """
    from rollout_dataset.errors import ConfigError

    options = dict(getattr(config, "env_options", None) or {})
    unknown = sorted(set(options) - _OPTION_KEYS)
    if unknown:
        raise ConfigError(f"env options {unknown} are not Crafter options; valid: {', '.join(sorted(_OPTION_KEYS))}")
    out: dict[str, Any] = {
        "max_actions": int(options.get("max_actions", MAX_ACTIONS_PER_CALL)),
    }
    out["max_steps"] = int(options.get("max_steps", config.max_turns * out["max_actions"]))
    if out["max_steps"] < 1 or not 1 <= out["max_actions"] <= 64:
        raise ConfigError(f"env options: max_steps {out['max_steps']} (>= 1) or max_actions {out['max_actions']} (1..64) out of range")
    for key in ("area", "view"):
        if key in options:
            value = options[key]
            out[key] = (int(value[0]), int(value[1])) if isinstance(value, (list, tuple)) else (int(value), int(value))
    return out
