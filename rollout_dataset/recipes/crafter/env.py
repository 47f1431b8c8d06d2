"""Crafter behind the `Environment` seam: a seeded world, the `act` tool harness, achievements as rewards.

The one capture pipeline (`rollout_dataset.capture.pipeline`) runs it like coding. Its
configuration is `CrafterRolloutConfig` (`rollout_dataset.recipes.crafter.config`).

- task: the world drawn by `seed` (`crafter-seed-<seed>`); the instruction is the system prompt and
  the first observation;
- run: `CrafterAgent` plays against the proxy's session URL (session `crafter`);
- score: `env_reward` = the fraction of Crafter's 22 achievements unlocked (no tests, no penalties);
  `summary.json` `env_metrics` (count, Crafter's own return, env steps) and `stepwise` totals;
  `rollout.json` `metadata.crafter` (the episode) and `metadata.stepwise`;
- extra file: `achievements.json`, the per-decision timeline the batch's step rewards read;
- batch: `--env-option max_steps|max_actions|area|view`; seed `s` is the world, rollout `i` of it
  sends request seed `s * 1000 + i`; the final return is the number of achievements unlocked;
- the local backend's player: `crafter` (`recipes/crafter/policy.py`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any, Mapping

from rollout_dataset.artifact_files import ROLLOUT_FILE
from rollout_dataset.envs.base import AgentContext, AgentOutcome, CaptureSettings, EnvironmentBase, Score, TaskInfo
from rollout_dataset.recipes.crafter.flags import CRAFTER_FLAGS
from rollout_dataset.recipes.crafter.config import ENV_NAME, HARNESS_NAME, SESSION, CrafterRolloutConfig, task_id_for

__all__ = ["CrafterEnvironment", "CrafterEpisode", "run_crafter_rollout"]

logger = logging.getLogger(__name__)


def _first_observation(result: Any) -> str:
    for message in result.messages:
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


def _episode_metadata(result: Any) -> dict[str, Any]:
    return {
        "env_steps": result.env_steps,
        "crafter_return": result.crafter_return,
        "achievements_unlocked": len(result.unlocked),
        "unlocked": result.unlocked,
        "achievements": result.achievements,
        "dead": result.dead,
        "decisions": result.decisions,
    }


class CrafterEpisode:
    """One Crafter episode: its world built, nothing started yet."""

    session = SESSION
    harness = HARNESS_NAME

    def __init__(self, config: CrafterRolloutConfig) -> None:
        from rollout_dataset.recipes.crafter.world import CrafterWorld

        self.config = config
        self.world = CrafterWorld(seed=config.seed, max_steps=config.max_steps, view=config.view, area=config.area)
        self._stepwise: tuple[Any, Any] | None = None

    def run(self, agent: AgentContext) -> AgentOutcome:
        """`CrafterAgent` plays the world through the proxy."""
        from rollout_dataset.recipes.crafter.harness import CrafterAgent

        config = self.config
        player = CrafterAgent(agent.base_url, agent.model, api_key=agent.api_key, max_turns=config.max_turns,
                              max_actions=config.max_actions, timeout_s=config.timeout_s,
                              seed=config.effective_rollout_seed, temperature=config.temperature,
                              max_tokens=config.max_tokens, report_url=agent.report_url)
        result = player.run(self.world)
        errors = [{"kind": "upstream_error", "message": result.error}] if result.error else []
        logger.info("crafter seed=%d: %d env steps, %d achievements, return %.1f", config.seed, result.env_steps,
                    len(result.unlocked), result.crafter_return)
        return AgentOutcome(result.stop_reason, result.timed_out, errors, result.decisions, state=result)

    def _stepwise_of(self, outcome: AgentOutcome) -> tuple[Any, Any]:
        if self._stepwise is None:
            from rollout_dataset.rewards.stepwise import stepwise_for_rollout

            self._stepwise = stepwise_for_rollout(outcome.state.timeline, self.config.step_rewards)
        return self._stepwise

    def score(self, records: list[dict[str, Any]], turns: dict[str, Any], outcome: AgentOutcome,
              agent: AgentContext) -> Score:
        """The fraction of the 22 achievements unlocked; no tests, no penalties, nothing to leak."""
        from rollout_dataset.recipes.crafter.world import ACHIEVEMENTS

        unlocked = len(outcome.state.unlocked)
        reward = unlocked / len(ACHIEVEMENTS)
        return Score(env_reward=reward, reward_after_penalties=reward,
                     samples_header={"reward": round(reward, 4),
                                     "passed": f"{unlocked}/{len(ACHIEVEMENTS)} achievements"})

    def task(self, outcome: AgentOutcome) -> TaskInfo:
        """The world as `task.json` records it (instruction: the system prompt and first observation)."""
        from rollout_dataset.recipes.crafter.harness import SYSTEM_PROMPT
        from rollout_dataset.recipes.crafter.world import ACTIONS

        config = self.config
        instruction = (SYSTEM_PROMPT.format(n=config.max_actions, actions=", ".join(ACTIONS)) + "\n\n"
                       + _first_observation(outcome.state))
        return TaskInfo(env=ENV_NAME, task_id=task_id_for(config.seed), task_index=0,
                        title=f"Crafter world {config.seed}", instruction=instruction, source=ENV_NAME,
                        dataset_seed=config.seed, rollout_seed=config.effective_rollout_seed, n_prompts=1,
                        config=config.public_dict())

    def rollout_metadata(self, rollout_id: str, model: str, outcome: AgentOutcome) -> dict[str, Any]:
        """The episode (`crafter`) and the configured strategy's step rewards (`stepwise`)."""
        decisions, totals = self._stepwise_of(outcome)
        return {
            "env": ENV_NAME, "task_id": task_id_for(self.config.seed), "rollout_id": rollout_id, "model": model,
            "harness": HARNESS_NAME, "seed": self.config.seed, "rollout_seed": self.config.effective_rollout_seed,
            "crafter": _episode_metadata(outcome.state),
            "stepwise": {"config": self.config.step_rewards.to_dict(), "decisions": decisions, "totals": totals},
        }

    def summary_fields(self, facts: Mapping[str, Any], outcome: AgentOutcome) -> dict[str, Any]:
        """`env_metrics` and the stepwise totals."""
        result = outcome.state
        fields: dict[str, Any] = {"env_metrics": {"achievements_unlocked": len(result.unlocked),
                                                  "crafter_return": float(result.crafter_return),
                                                  "env_steps": int(result.env_steps)}}
        totals = self._stepwise_of(outcome)[1]
        if totals is not None:
            fields["stepwise"] = totals
        return fields

    def extra_files(self, outcome: AgentOutcome) -> dict[str, Any]:
        """`achievements.json`: the timeline recorded while playing."""
        from rollout_dataset.recipes.crafter.harness import crafter_achievements
        from rollout_dataset.rewards.achievements import ACHIEVEMENTS_FILE, achievements_text

        return {ACHIEVEMENTS_FILE: achievements_text(env=ENV_NAME, catalogue=crafter_achievements().catalogue(),
                                                     timeline=outcome.state.timeline, initial=(), source="recorded")}


class CrafterEnvironment(EnvironmentBase):
    """Crafter (`--env crafter`)."""

    name = ENV_NAME
    description = "Crafter survival game (PyPI `crafter`), played through an `act` tool; achievements as rewards"
    default_policy = "crafter"
    capture_flags = CRAFTER_FLAGS
    flag_scope = "a game environment"

    def config_class(self) -> type:
        """`CrafterRolloutConfig`."""
        return CrafterRolloutConfig

    def capture_settings(self, config: CrafterRolloutConfig) -> CaptureSettings:
        """The local backend plays with the `crafter` policy; no context fitting, no on-policy mode."""
        return CaptureSettings(
            out_dir=Path(config.out_dir), base_url=config.base_url, model=config.model, api_key=config.api_key,
            rollout_id=config.rollout_id, tokenizer=config.tokenizer, backend_policy=self.default_policy,
            policy_options={"max_actions": config.max_actions}, served_model_name=config.served_model_name,
            push_repo=config.push_repo, push_private=config.push_private, trust_env=config.trust_env,
            more_upstreams=tuple(config.more_upstreams))

    def prepare(self, config: CrafterRolloutConfig) -> CrafterEpisode:
        """Build the world (its settings were checked by `CrafterRolloutConfig`)."""
        return CrafterEpisode(config)

    def batch_options(self, config: Any) -> dict[str, Any]:
        """`max_steps` (default `max_turns * max_actions`), `max_actions`, `area`, `view`.

        Raises:
            ConfigError: an unknown option or a value out of range.
        """
        from rollout_dataset.recipes.crafter.batch import episode_options

        return episode_options(config)

    def policy_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The scripted player acts at most `max_actions` per call."""
        return {"max_actions": options["max_actions"]}

    def batch_config(self, config: Any, job: Any, options: Mapping[str, Any]) -> CrafterRolloutConfig:
        """World `job.seed`, request seed `seed * 1000 + rollout_idx`, the first strategy's step rewards."""
        from rollout_dataset.recipes.crafter.batch import rollout_seed_for

        settings = job.settings
        local = bool(settings.get("local_backend"))
        return CrafterRolloutConfig(
            out_dir=job.artifact_dir, seed=job.seed, rollout_seed=rollout_seed_for(job.seed, job.rollout_idx),
            base_url=settings.get("base_url"), model=settings.get("model") or ("local" if local else None),
            max_turns=int(settings.get("max_turns") or config.max_turns),
            timeout_s=float(settings.get("timeout_s") or config.timeout_s), rollout_id=job.rollout_id,
            tokenizer="builtin" if local else None, backend_policy="crafter" if local else None,
            trust_env=bool(settings.get("trust_env", True)) and not local,
            more_upstreams=tuple(settings.get("more_upstreams") or ()),
            step_rewards=config.step_rewards.with_strategy(config.strategies[0]), **options)

    def batch_result(self, result: Any, captured: Any) -> Any:
        """The final return is the number of achievements unlocked; the episode's figures join `extra`."""
        doc = json.loads((Path(captured.out_dir) / ROLLOUT_FILE).read_text(encoding="utf-8"))
        crafter = dict((doc.get("metadata") or {}).get("crafter") or {})
        return dataclasses.replace(
            result,
            final_return=float(crafter.get("achievements_unlocked", 0)),
            extra={"env": ENV_NAME, "crafter_return": crafter.get("crafter_return"),
                   "env_steps": crafter.get("env_steps"), "unlocked": crafter.get("unlocked"), **result.extra},
        )


def run_crafter_rollout(config: CrafterRolloutConfig) -> Any:
    """Capture one Crafter episode end to end through the one capture pipeline.

    Args:
        config: the rollout settings.

    Returns:
        A `rollout_dataset.capture.result.CaptureResult` (folder, rollout id, summary, errors,
        validation failures, per-decision records).

    Raises:
        UpstreamStatusError: the first model call answered 4xx/5xx (names status and URL).
        UpstreamError: the model server could not be reached on the first call.
    """
    from rollout_dataset.capture.pipeline import run_capture

    return run_capture(CrafterEnvironment(), config)
