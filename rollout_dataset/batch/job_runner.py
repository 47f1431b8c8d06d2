"""The batch's one runner, for every environment of the one registry (`rollout_dataset.envs.registry`).

`env_runner(config)` returns `(server, run_one)`: `server` is a context manager yielding the
inference base URL the rollouts use (`config.base_url`, or ONE local backend for the whole batch
playing the environment's `default_policy`), and `run_one(job) -> RolloutResult` captures one
rollout through the one capture pipeline (`capture_rollout(environment.batch_config(...))`) into
`job.artifact_dir`, then reads it back (`result_from_artifacts`, the environment's
`achievements` as the timeline when the folder has no `achievements.json`) and lets the
environment adjust the result (`batch_result`).

An environment may instead carry its own `batch_runner(config) -> (server, run_one)`
(`register_env(name, factory)` registers such a stand-in, for tests and custom drivers).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator

from rollout_dataset.artifact_files import SUMMARY_FILE
from rollout_dataset.batch.config import BatchConfig
from rollout_dataset.batch.executor import RolloutJob, RunOne
from rollout_dataset.errors import ConfigError
from rollout_dataset.rewards.results import RolloutResult, read_rollout_result

__all__ = [
    "RunnerFactory",
    "register_env",
    "env_runner",
    "result_from_artifacts",
]

log = logging.getLogger(__name__)

RunnerFactory = Callable[[BatchConfig], "tuple[ContextManager[str | None], RunOne]"]


class _RunnerEnvironment:
    """An environment known to the batch only by its runner factory (`register_env`)."""

    def __init__(self, name: str, factory: RunnerFactory | str) -> None:
        self.name = name
        self.description = f"batch runner {factory}" if isinstance(factory, str) else "batch runner"
        self.default_policy = "echo"
        self._factory = factory

    def batch_runner(self, config: BatchConfig) -> tuple[ContextManager[str | None], RunOne]:
        factory = self._factory
        if isinstance(factory, str):
            import importlib

            module_name, _, attr = factory.partition(":")
            try:
                factory = getattr(importlib.import_module(module_name), attr)
            except (ImportError, AttributeError) as exc:
                raise ConfigError(f"--env {config.env}: its batch runner {module_name}:{attr} is unavailable ({exc})") from None
        return factory(config)


def register_env(name: str, factory: RunnerFactory | str) -> None:
    """Register an environment the batch runs with its own runner factory (in the one registry).

    Args:
        name: the `--env` name.
        factory: `factory(config) -> (server, run_one)`, or its `"module:attribute"` path.
    """
    from rollout_dataset.envs.registry import register_environment

    register_environment(_RunnerEnvironment(name, factory), name)


@contextlib.contextmanager
def _shared_server(config: BatchConfig, environment: Any, options: dict[str, Any]) -> Iterator[str | None]:
    """Yield `config.base_url`, or start ONE local backend playing the environment's scripted player."""
    if config.base_url:
        yield config.base_url
        return
    from rollout_dataset.backend import make_policy, run_backend_in_thread
    from rollout_dataset.envs.registry import register_builtin_policies
    from rollout_dataset.tokenizers import load_tokenizer

    register_builtin_policies()
    policy = make_policy(environment.default_policy, **environment.policy_options(options))
    with run_backend_in_thread(tokenizer=load_tokenizer("builtin"), policy=policy, served_model_name="local") as backend:
        log.info("local backend (%s policy) for the batch at %s", environment.default_policy, backend.base_url)
        yield backend.base_url


def env_runner(config: BatchConfig) -> tuple[ContextManager[str | None], RunOne]:
    """The server context and `run_one` of `config.env`.

    Raises:
        ConfigError: an unknown environment, one whose module is not installed, or bad env options.
        SandboxUnavailableError: coding without the allow-list sandbox (and no `unsafe_sandbox`).
    """
    from rollout_dataset.envs.registry import get_environment

    try:
        environment = get_environment(config.env)
    except ConfigError as exc:
        raise ConfigError(f"--env: {exc}") from None
    if callable(getattr(environment, "batch_runner", None)):
        return environment.batch_runner(config)
    options = environment.batch_options(config)  # refused before any rollout starts

    def run_one(job: RolloutJob) -> RolloutResult:
        from rollout_dataset.capture.pipeline import run_capture

        captured = run_capture(environment, environment.batch_config(config, job, options))
        if not captured.ok:
            log.warning("%s rollout %s (seed %d, #%d) has capture errors: %s", config.env, job.rollout_id, job.seed,
                        job.rollout_idx, "; ".join(e.get("message", "") for e in captured.errors)
                        or captured.validation_failures[:3])
        result = result_from_artifacts(job.artifact_dir, environment=environment)
        result = environment.batch_result(result, captured)
        result.extra["capture_errors"] = [e.get("kind") for e in captured.errors]
        return result

    return _shared_server(config, environment, options), run_one


def _timeline_of(environment: Any) -> Callable[[Path], tuple[list[Any], frozenset[str]]]:
    """The environment's timeline of a folder (`achievements`), else its `achievements.json`, else none."""

    def timeline(folder: Path) -> tuple[list[Any], frozenset[str]]:
        from rollout_dataset.rewards.achievements import read_achievements

        found = environment.achievements(Path(folder)) or read_achievements(folder)
        return found if found is not None else ([], frozenset())

    return timeline


def _environment_named_in(folder: Path) -> Any:
    """The registered environment `summary.json` names (coding when it names none); None when unknown."""
    import json

    from rollout_dataset.envs.registry import get_environment

    try:
        name = json.loads((folder / SUMMARY_FILE).read_text(encoding="utf-8")).get("env") or "coding"
        return get_environment(str(name))
    except (OSError, ValueError, AttributeError):  # ConfigError is a ValueError; read_rollout_result names the file
        return None


def result_from_artifacts(folder: str | Path, *, replay: bool = True, environment: Any = None) -> RolloutResult:
    """Read what the batch needs from one artifact folder.

    Args:
        folder: the artifact folder (`summary.json`, and `achievements.json` or `trace.json`).
        replay: let the environment rebuild the timeline when the folder has no `achievements.json`
            (coding replays `trace.json` in a fresh sandbox); False reads `achievements.json` only.
        environment: the rollout's environment (default: the one `summary.json` names, from the registry).

    Returns:
        The rollout's result; `final_return` is `reward_after_penalties` (None when unscorable).

    Raises:
        ArtifactError: summary.json is missing or unreadable.
    """
    folder = Path(folder)
    if replay and environment is None:
        environment = _environment_named_in(folder)
    if not replay or environment is None or not callable(getattr(environment, "achievements", None)):
        return read_rollout_result(folder)
    return read_rollout_result(folder, replay_timeline=_timeline_of(environment))
