"""Environment families a batch can run, and the coding one.

An environment registers a *runner factory*: `factory(config) -> (server, run_one)`, where `server`
is a context manager yielding the inference base URL the rollouts use (it may start a local
backend for the whole batch, or yield `config.base_url`), and `run_one(job) -> RolloutResult`
runs one rollout into `job.artifact_dir`. Factories are named by dotted path so that an
environment's heavy imports happen only when it is used:

    register_env("crafter", "rollout_dataset.envs.crafter.batch:batch_runner")

`result_from_artifacts(folder, ...)` is the shared reading of an artifact folder any environment
can use: `summary.json` gives the final return (`reward_after_penalties`), agent turns, tool calls,
model and task; `achievements.json` (or, for coding, a replay of `trace.json`) gives the timeline.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator

from rollout_dataset.batch.coding import timeline_for_artifacts
from rollout_dataset.batch.config import BatchConfig
from rollout_dataset.batch.executor import RolloutJob, RunOne
from rollout_dataset.errors import ConfigError
from rollout_dataset.rewards.results import RolloutResult, read_rollout_result

__all__ = [
    "ENVIRONMENTS",
    "RunnerFactory",
    "register_env",
    "env_runner",
    "result_from_artifacts",
    "coding_runner",
    "coding_task_count",
]

log = logging.getLogger(__name__)

RunnerFactory = Callable[[BatchConfig], "tuple[ContextManager[str | None], RunOne]"]

#: environment name -> runner factory (an object or a "module:attribute" path, imported on use).
ENVIRONMENTS: dict[str, RunnerFactory | str] = {
    "coding": "rollout_dataset.batch.envs:coding_runner",
    "crafter": "rollout_dataset.envs.crafter.batch:batch_runner",
}


def register_env(name: str, factory: RunnerFactory | str) -> None:
    """Register (or replace) an environment's runner factory.

    Args:
        name: the `--env` name.
        factory: the factory, or its `"module:attribute"` path.
    """
    ENVIRONMENTS[name] = factory


def env_runner(config: BatchConfig) -> tuple[ContextManager[str | None], RunOne]:
    """The server context and `run_one` of `config.env`.

    Raises:
        ConfigError: an unknown environment, or one whose module is not installed.
    """
    factory = ENVIRONMENTS.get(config.env)
    if factory is None:
        raise ConfigError(f"--env: {config.env!r} is not one of {', '.join(sorted(ENVIRONMENTS))}")
    if isinstance(factory, str):
        module_name, _, attr = factory.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"--env {config.env}: its batch runner {module_name}:{attr} is unavailable ({exc})") from None
    return factory(config)


def result_from_artifacts(folder: str | Path, *, replay: bool = True) -> RolloutResult:
    """Read what the batch needs from one artifact folder.

    Args:
        folder: the artifact folder (`summary.json`, and `achievements.json` or `trace.json`).
        replay: rebuild a coding timeline from `trace.json` when `achievements.json` is missing.

    Returns:
        The rollout's result; `final_return` is `reward_after_penalties` (None when unscorable).

    Raises:
        ArtifactError: summary.json is missing or unreadable.
    """
    return read_rollout_result(folder, replay_timeline=timeline_for_artifacts if replay else None)


_TASK_COUNT_LOCK = threading.Lock()
_TASK_COUNTS: dict[tuple[str, int], int] = {}


def coding_task_count(tasks: str, n_prompts: int) -> int:
    """How many tasks the capture's task list holds for `(tasks, n_prompts)` (seed 0), cached."""
    key = (tasks, n_prompts)
    with _TASK_COUNT_LOCK:
        if key not in _TASK_COUNTS:
            from rollout_dataset.tasks import load_tasks

            _TASK_COUNTS[key] = len(load_tasks(source=tasks, n_prompts=n_prompts, seed=0))
        return _TASK_COUNTS[key]


@contextlib.contextmanager
def _local_backend_or(config: BatchConfig) -> Iterator[str | None]:
    """Yield `config.base_url`, or start one local backend (oracle policy) shared by the whole batch."""
    if config.base_url:
        yield config.base_url
        return
    from rollout_dataset.backend import make_policy, run_backend_in_thread
    from rollout_dataset.envs.policies import register_builtin_policies
    from rollout_dataset.tokenizers import load_tokenizer

    register_builtin_policies()

    with run_backend_in_thread(
        tokenizer=load_tokenizer("builtin"), policy=make_policy("oracle"), served_model_name="local"
    ) as backend:
        log.info("local backend (oracle policy) for the batch at %s", backend.base_url)
        yield backend.base_url


def coding_runner(config: BatchConfig) -> tuple[ContextManager[str | None], RunOne]:
    """The coding environment: each rollout is one `capture_rollout` with the built-in harness.

    Seed `s` runs task index `s mod (number of tasks)` of the task list drawn with dataset seed 0;
    rollout `i` of it uses rollout seed `s * 1000 + i`, so rollouts of a seed differ and every run
    is reproducible. Coding takes no env options. Each rollout's sandbox hides the batch's
    `rollouts/` folder (`settings["hide_paths"]`), so no agent reads the held-out tests an earlier
    rollout wrote there (the allow-list sandbox does not contain it anyway).

    Raises:
        ConfigError: env options were given (coding has none).
        SandboxUnavailableError: the allow-list sandbox cannot be built and `unsafe_sandbox` is off.
    """
    if config.env_options:
        names = ", ".join(sorted(config.env_options))
        raise ConfigError(f"--env-option: the coding environment takes no options (got {names})")
    from rollout_dataset.sandbox.isolation import require_isolation

    require_isolation(config.unsafe_sandbox)  # agents' code runs only in the allow-list sandbox unless opted out

    def run_one(job: RolloutJob) -> RolloutResult:
        from rollout_dataset.capture import CaptureConfig, capture_rollout

        settings = job.settings
        n_tasks = coding_task_count(settings["tasks"], settings["n_prompts"])
        capture = CaptureConfig(
            out_dir=job.artifact_dir,
            base_url=settings.get("base_url"),
            model=settings.get("model"),
            task_index=job.seed % n_tasks,
            seed=0,
            rollout_seed=job.seed * 1000 + job.rollout_idx,
            n_prompts=settings["n_prompts"],
            tasks=settings["tasks"],
            timeout_s=settings["timeout_s"],
            max_turns=settings["max_turns"],
            rollout_id=job.rollout_id,
            tokenizer="builtin" if settings.get("local_backend") else None,
            hide_paths=tuple(settings.get("hide_paths") or ()),
            on_policy=bool(settings.get("on_policy")),
            max_tokens_cap=settings.get("max_tokens_cap"),
            fit_context=settings.get("fit_context", True),
            unsafe_sandbox=bool(settings.get("unsafe_sandbox")),
        )
        captured = capture_rollout(capture)
        if not captured.ok:
            log.warning("rollout %s (seed %d, #%d) has capture errors: %s", job.rollout_id, job.seed, job.rollout_idx,
                        "; ".join(e.get("message", "") for e in captured.errors) or captured.validation_failures[:3])
        result = result_from_artifacts(job.artifact_dir)
        result.extra["capture_errors"] = [e.get("kind") for e in captured.errors]
        return result

    return _local_backend_or(config), run_one
