"""One Crafter rollout through the recording proxy, written as the usual artifact folder.

`run_crafter_rollout(CrafterRolloutConfig)` is the Crafter counterpart of `capture_rollout`:
local backend (the `crafter` policy) unless a base URL is given -> recording proxy -> the Crafter
harness -> trace -> rollout/turns documents (the export module) -> artifacts (the capture module's
writer, secrets redacted) -> a push to the config's ``push_repo`` when given (the capture's shared
`push_artifacts`). The folder holds the same eight files as a coding capture, plus the
batch's `achievements.json` (the achievement timeline); Crafter has no tests, so
`visible_tests.txt` is empty and `held_out_tests.json` lists none.

Rewards: `env_reward` (and `reward_after_penalties`, no penalties apply) is the fraction of
Crafter's 22 achievements unlocked in the episode; `summary.json` `env_metrics` holds the count
(`achievements_unlocked`), Crafter's own return (`crafter_return`) and `env_steps`; the count,
Crafter's own return and the
per-decision record are in `rollout.json` under `metadata.crafter`, and the stepwise rewards of
the configured strategy under `metadata.stepwise` (totals also in `summary.json`).
"""

from __future__ import annotations

import importlib.metadata
import logging
import tempfile
import time
import uuid
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout_dataset.rewards.config import StepRewardConfig
from rollout_dataset.rewards.stepwise import stepwise_for_rollout
from rollout_dataset.envs.crafter.harness import (
    MAX_ACTIONS_PER_CALL,
    SYSTEM_PROMPT,
    CrafterAgent,
    CrafterAgentResult,
    crafter_achievements,
)
from rollout_dataset.envs.crafter.world import ACHIEVEMENTS, ACTIONS, CrafterWorld
from rollout_dataset.proxy.redact import redact_url

__all__ = ["ENV_NAME", "HARNESS_NAME", "CrafterRolloutConfig", "run_crafter_rollout", "task_id_for"]

logger = logging.getLogger(__name__)

ENV_NAME = "crafter"
HARNESS_NAME = "crafter"
_SESSION = "crafter"


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
        model: the model name; default: the local backend's served name, else `default`.
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

    Raises:
        ValueError: a budget or id out of range.
    """

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


def _start_local_backend(stack: ExitStack, config: CrafterRolloutConfig, tokenizer: Any) -> str:
    from rollout_dataset.backend import LocalBackend
    from rollout_dataset.backend.policies import make_policy
    from rollout_dataset.capture.threads import serve_in_thread

    import rollout_dataset.envs.crafter.policy  # noqa: F401 - registers the `crafter` policy

    policy = make_policy("crafter", max_actions=config.max_actions)
    backend = stack.enter_context(serve_in_thread(
        lambda: LocalBackend(tokenizer=tokenizer, policy=policy, served_model_name=config.served_model_name),
        name="crafter-backend"))
    return backend.base_url


def _load_tokenizer(config: CrafterRolloutConfig) -> Any:
    spec = config.tokenizer or ("builtin" if config.base_url is None else None)
    if spec is None:
        return None
    from rollout_dataset.tokenizers import load_tokenizer

    return load_tokenizer(spec)


def _findings_count(document: dict[str, Any]) -> int:
    found = list(document.get("findings") or [])
    for seq in document.get("sequences") or []:
        found.extend(seq.get("findings") or [])
    return sum(1 for f in found if f.get("level") in ("ERROR", "WARN"))


def _samples(document: dict[str, Any], records: list[dict[str, Any]], tokenizer: Any, header: dict[str, Any]) -> str:
    if tokenizer is None:
        return ("# samples\n\nNo tokenizer was available for this rollout (pass `tokenizer=`), so the token "
                "stream is not rendered; the messages are in trace.json.\n")
    from rollout_dataset.render import render_samples

    return render_samples(document, records, tokenizer, header=header)


def _first_observation(result: CrafterAgentResult) -> str:
    for message in result.messages:
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    return ""


def _episode_metadata(result: CrafterAgentResult) -> dict[str, Any]:
    return {
        "env_steps": result.env_steps,
        "crafter_return": result.crafter_return,
        "achievements_unlocked": len(result.unlocked),
        "unlocked": result.unlocked,
        "achievements": result.achievements,
        "dead": result.dead,
        "decisions": result.decisions,
    }


def run_crafter_rollout(config: CrafterRolloutConfig) -> Any:
    """Capture one Crafter episode end to end and write its artifact folder.

    Args:
        config: the rollout settings.

    Returns:
        A `rollout_dataset.capture.config.CaptureResult` (folder, rollout id, summary, errors,
        validation failures, per-decision records).

    Raises:
        UpstreamStatusError: the first model call answered 4xx/5xx (names status and URL).
        UpstreamError: the model server could not be reached on the first call.
    """
    from rollout_dataset.rewards.achievements import write_achievements
    from rollout_dataset.capture.artifacts import write_artifacts
    from rollout_dataset.capture.config import CaptureResult
    from rollout_dataset.capture.orchestrate import upstream_target
    from rollout_dataset.capture.push import push_artifacts
    from rollout_dataset.capture.secrets import collect_secrets, new_dummy_key
    from rollout_dataset.export import capture_level_of, export_rollout, turns_document
    from rollout_dataset.capture.threads import serve_in_thread
    from rollout_dataset.proxy import CaptureProxy, read_trace
    from rollout_dataset.schema.check import validate_path

    t0 = time.monotonic()
    timings: dict[str, float] = {}
    out_dir = Path(config.out_dir)
    rollout_id = config.rollout_id or uuid.uuid4().hex
    from rollout_dataset.capture.artifacts import utc_now

    created_at = utc_now()
    tokenizer = _load_tokenizer(config)
    model = config.model or (config.served_model_name if config.base_url is None else "default")
    dummy_key = new_dummy_key()  # the agent never holds the real key; the proxy sends it upstream
    world = CrafterWorld(seed=config.seed, max_steps=config.max_steps, view=config.view, area=config.area)
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="crafter-trace-") as trace_dir:
        upstream = config.base_url or _start_local_backend(stack, config, tokenizer)
        target = upstream_target(upstream, config.api_key if config.base_url else None)
        proxy = stack.enter_context(serve_in_thread(lambda: CaptureProxy(upstream=upstream, trace_dir=trace_dir,
                                                                         api_key=target.api_key,
                                                                         forward_client_auth=False),
                                                    name="crafter-proxy"))
        timings["setup"] = time.monotonic() - t0
        agent = CrafterAgent(proxy.session_base_url(_SESSION), model, api_key=dummy_key,
                             max_turns=config.max_turns, max_actions=config.max_actions,
                             timeout_s=config.timeout_s, seed=config.effective_rollout_seed,
                             temperature=config.temperature, max_tokens=config.max_tokens,
                             report_url=target.shown("/v1/chat/completions"))
        t1 = time.monotonic()
        result = agent.run(world)
        timings["agent"] = time.monotonic() - t1
        t_stop = time.monotonic()
        stack.close()  # stop the proxy (flushes the trace) and the backend
        timings["teardown"] = time.monotonic() - t_stop
        trace_path = Path(trace_dir) / f"{_SESSION}.jsonl"
        records = read_trace(trace_path) if trace_path.is_file() else []
    t2 = time.monotonic()
    task_id = task_id_for(config.seed)
    level = capture_level_of(records)
    decisions, totals = stepwise_for_rollout(result.timeline, config.step_rewards)
    metadata = {
        "env": ENV_NAME, "task_id": task_id, "rollout_id": rollout_id, "model": model, "harness": HARNESS_NAME,
        "seed": config.seed, "rollout_seed": config.effective_rollout_seed,
        "crafter": _episode_metadata(result),
        "stepwise": {"config": config.step_rewards.to_dict(), "decisions": decisions, "totals": totals},
    }
    document = export_rollout(records, session_id=_SESSION, metadata=metadata, capture_level=level,
                              tokenizer=tokenizer)
    turns = turns_document(document, records)
    agent_turns = [t for t in turns["turns"] if t.get("role") == "agent"]
    by_name = Counter(name for t in agent_turns for name in (t.get("tool_calls") or []))
    env_reward = len(result.unlocked) / len(ACHIEVEMENTS)
    errors = [{"kind": "upstream_error", "message": result.error}] if result.error else []
    header = {"rollout": rollout_id, "reward": round(env_reward, 4),
                         "passed": f"{len(result.unlocked)}/{len(ACHIEVEMENTS)} achievements",
                         "stop_reason": result.stop_reason}
    samples = _samples(document, records, tokenizer, header)
    timings["export"] = time.monotonic() - t2
    timings["total"] = time.monotonic() - t0
    summary: dict[str, Any] = {
        "schema_version": 1, "rollout_id": rollout_id, "created_at": created_at, "env": ENV_NAME,
        "model": model, "harness": HARNESS_NAME, "task_id": task_id, "task_index": 0,
        "dataset_seed": config.seed, "rollout_seed": config.effective_rollout_seed,
        "captured_calls": len(records), "agent_turns": len(agent_turns),
        "trained_turns": sum(1 for t in turns["turns"] if t.get("trained") is True),
        "tool_calls_by_name": dict(sorted(by_name.items())), "tool_calls_total": sum(by_name.values()),
        "held_out_tests": 0, "held_out_passed": None, "env_reward": env_reward,
        "reward_after_penalties": env_reward, "penalties": [], "timed_out": result.timed_out,
        "stop_reason": result.stop_reason, "capture_level": level, "trainable": bool(document.get("trainable")),
        "trainable_tokens": int(document.get("stats", {}).get("n_trainable_tokens", 0)),
        "findings_count": _findings_count(document), "leakage": {"checked": False, "hits": []},
        "timings": {k: round(v, 3) for k, v in timings.items()}, "errors": errors,
        "env_metrics": {"achievements_unlocked": len(result.unlocked),
                        "crafter_return": float(result.crafter_return), "env_steps": int(result.env_steps)},
    }
    if totals is not None:
        summary["stepwise"] = totals
    task = {
        "schema_version": 1, "env": ENV_NAME, "task_id": task_id, "task_index": 0,
        "title": f"Crafter world {config.seed}",
        "instruction": SYSTEM_PROMPT.format(n=config.max_actions, actions=", ".join(ACTIONS))
        + "\n\n" + _first_observation(result),
        "source": ENV_NAME, "dataset_seed": config.seed, "rollout_seed": config.effective_rollout_seed,
        "n_prompts": 1, "config": config.public_dict(),
    }
    files = {
        "trace.json": {"schema_version": 1, "session": _SESSION, "calls": records},
        "rollout.json": document,
        "turns.json": turns,
        "task.json": task,
        "visible_tests.txt": "",
        "held_out_tests.json": {"schema_version": 1, "task_id": task_id, "tests": []},
        "summary.json": summary,
        "samples.md": samples,
    }
    secrets = collect_secrets([config.api_key, dummy_key, *target.secrets], environ={})
    redacted = write_artifacts(out_dir, files, secrets)
    if redacted:
        summary["errors"].append({"kind": "secret_redacted", "message": f"{redacted} secret occurrence(s) redacted"})
        write_artifacts(out_dir, {"summary.json": summary}, secrets)
    write_achievements(out_dir, env=ENV_NAME, catalogue=crafter_achievements().catalogue(),
                       timeline=result.timeline, initial=(), source="recorded")
    failures = validate_path(out_dir)
    for f in failures:
        logger.error("%s: %s: %s", *f)
    errors = list(summary["errors"])
    push_error = push_artifacts(out_dir, config.push_repo, config.push_private) if not failures else None
    if push_error:
        errors.append({"kind": "push_error", "message": push_error})
    logger.info("crafter seed=%d: %d turns, %d env steps, %d achievements, return %.1f -> %s", config.seed,
                len(agent_turns), result.env_steps, len(result.unlocked), result.crafter_return, out_dir)
    return CaptureResult(out_dir=out_dir, rollout_id=rollout_id, summary=summary, errors=errors,
                         validation_failures=failures, decisions=result.decisions)

