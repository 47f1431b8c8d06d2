"""`rollout-dataset batch --env crafter`: the Crafter runner behind the batch's environment registry.

`batch_runner(config)` returns `(server, run_one)` as `rollout_dataset.batch.envs` expects. Without
a base URL, `server` starts ONE local backend with the `crafter` policy for the whole batch. Each
job is one `run_crafter_rollout`: seed `s` is the world, rollout `i` of it sends request seed
`s * 1000 + i` (so the scripted policy explores differently and rollouts of one world differ).

The batch's final return is the number of achievements unlocked in the episode; Crafter's own
return, the env steps and the unlocked names go to the result's `extra`. The episode is shaped by
`config.env_options` (`rollout-dataset batch --env crafter --env-option KEY=VALUE`): `max_steps`
(default `max_turns * max_actions`), `max_actions` (default 8), `area` and `view`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any, ContextManager, Iterator

from rollout_dataset.envs.crafter.harness import MAX_ACTIONS_PER_CALL

__all__ = ["batch_runner", "rollout_seed_for", "episode_options"]

logger = logging.getLogger(__name__)

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


@contextlib.contextmanager
def _server(config: Any, max_actions: int) -> Iterator[str | None]:
    if config.base_url:
        yield config.base_url
        return
    from rollout_dataset.backend import LocalBackend
    from rollout_dataset.backend.policies import make_policy
    from rollout_dataset.tokenizers import load_tokenizer
    from rollout_dataset.capture.threads import serve_in_thread

    import rollout_dataset.envs.crafter.policy  # noqa: F401 - registers the `crafter` policy

    policy = make_policy("crafter", max_actions=max_actions)
    tokenizer = load_tokenizer("builtin")
    with serve_in_thread(lambda: LocalBackend(tokenizer=tokenizer, policy=policy), name="crafter-batch-backend") as backend:
        logger.info("local backend with the crafter policy at %s", backend.base_url)
        yield backend.base_url


def batch_runner(config: Any) -> tuple[ContextManager[str | None], Any]:
    """The Crafter environment's `(server, run_one)` for `run_batch`.

    Args:
        config: the `BatchConfig`.

    Returns:
        The server context (yields the inference base URL) and `run_one(job) -> RolloutResult`.

    Raises:
        ConfigError: invalid Crafter env options.
    """
    options = episode_options(config)
    local = not config.base_url

    def run_one(job: Any) -> Any:
        from rollout_dataset.envs.crafter.rollout import CrafterRolloutConfig, run_crafter_rollout
        from rollout_dataset.rewards.results import read_rollout_result

        settings = job.settings
        rollout = CrafterRolloutConfig(
            out_dir=job.artifact_dir,
            seed=job.seed,
            rollout_seed=rollout_seed_for(job.seed, job.rollout_idx),
            base_url=settings.get("base_url"),
            model=settings.get("model") or ("local" if local else None),
            max_turns=int(settings.get("max_turns") or config.max_turns),
            timeout_s=float(settings.get("timeout_s") or config.timeout_s),
            rollout_id=job.rollout_id,
            tokenizer="builtin" if local else None,
            backend_policy="crafter" if local else None,
            step_rewards=config.step_rewards.with_strategy(config.strategies[0]),
            **options,
        )
        captured = run_crafter_rollout(rollout)
        if not captured.ok:
            logger.warning("crafter rollout %s (seed %d, #%d) has capture errors: %s", job.rollout_id, job.seed,
                           job.rollout_idx, "; ".join(e.get("message", "") for e in captured.errors)
                           or captured.validation_failures[:3])
        crafter = _episode(captured)
        # the fields every environment shares come from the artifacts, as for coding; the final
        # return is the number of achievements unlocked, and the episode's figures join `extra`
        shared = read_rollout_result(captured.out_dir)
        return dataclasses.replace(
            shared,
            final_return=float(crafter.get("achievements_unlocked", 0)),
            extra={
                "env": "crafter",
                "crafter_return": crafter.get("crafter_return"),
                "env_steps": crafter.get("env_steps"),
                "unlocked": crafter.get("unlocked"),
                **shared.extra,
                "capture_errors": [e.get("kind") for e in captured.errors],
            },
        )

    return _server(config, options["max_actions"]), run_one


def _episode(captured: Any) -> dict[str, Any]:
    import json

    doc = json.loads((captured.out_dir / "rollout.json").read_text(encoding="utf-8"))
    return dict((doc.get("metadata") or {}).get("crafter") or {})
