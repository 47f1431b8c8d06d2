"""Run Harbor's terminus-2, unchanged, on one Harbor task against the recording proxy (`--harness terminus-2`).

`run_terminus(...)` starts ``harbor trials start`` (Harbor's own CLI, from its venv: `find_harbor`) as a
process group of its own with:

- ``--agent terminus-2 --model hosted_vllm/MODEL`` (``openai/MODEL`` when the name has a slash) and
  agent kwargs ``api_base`` (the proxy's session URL), ``collect_rollout_details=true`` (token ids and
  logprobs in its ATIF trajectory), ``record_terminal_session=false``, ``model_info`` (the context
  length, so its summarisation starts before the context is full) and ``llm_call_kwargs`` (terminus-2
  sends no ``temperature``/``max_tokens``/``seed`` of its own);
- ``--env``: the environment `rollout_dataset.harbor.environments.choose_environment` picks or was
  given (``--harbor-env``): ``rollout_dataset.harbor.bwrap_environment:BwrapEnvironment`` (no Docker, no
  network) for a task that needs no image, else one of Harbor's own (docker, podman, singularity, a
  cloud one); where none can run the task it is refused (`HarborTaskUnsupportedError`); a task asking
  for no network under Podman gets ``rollout_dataset.harbor.proxied_podman:ProxiedPodmanEnvironment``
  without its relay (network ``none``: Harbor's own needs registry images to enforce it);
- an environment without credentials (every secret-looking variable dropped, save a cloud
  environment's own: `environments.credential_variables`), a dummy key, ``HARBOR_TELEMETRY=0`` and
  ``LITELLM_LOCAL_MODEL_COST_MAP=True``.

A multi-step task (``[[steps]]``) runs as Harbor runs it: one trial across its steps, each step's
verifier reward in `HarborRun.steps`, the trial's reward Harbor's (mean or final, as the task says).

The trial folder (``result.json``, ``agent/trajectory.json``, the verifier's logs) is read back into a
`HarborRun`: the verifier's reward, Harbor's exception if any, and the ATIF trajectory.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rollout_dataset.harbor.container_errors import describe_container_failure
from rollout_dataset.harbor.environments import (AUTO, BWRAP, HARBOR_INSTALL, PROXIED_PODMAN_SPEC, EnvironmentChoice,
                                                 HarborTaskUnsupportedError, choose_environment, credential_variables,
                                                 read_task_needs)
from rollout_dataset.harbor.trial_containers import CONTAINER_ENVIRONMENTS, remove_trial_containers
from rollout_dataset.processes import CHILD_EXIT, watch_child

__all__ = ["HARBOR_VERSION", "HARBOR_INSTALL", "ENVIRONMENT_SPEC", "HarborRun", "HarborTaskUnsupportedError",
           "find_harbor", "dockerfile_needs", "build_timeout_s", "environment_arg", "environment_for", "harbor_command",
           "run_terminus", "run_trial"]

logger = logging.getLogger(__name__)

#: the Harbor release `make harbor` installs and the tests drive
HARBOR_VERSION = "0.26.0"
#: the `--env` of the bubblewrap environment
ENVIRONMENT_SPEC = "rollout_dataset.harbor.bwrap_environment:BwrapEnvironment"
_REPO_ROOT = Path(__file__).resolve().parents[2]  # a checkout's root (its .venv-harbor)
_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PROXY", re.IGNORECASE)
_STOP_GRACE_S = 5.0
#: seconds a trial may take beyond its agent and verifier budgets (Harbor's start-up, environment set-up, teardown)
HARBOR_SLACK_S = 120.0
#: Harbor's own default of ``[environment] build_timeout_sec``
DEFAULT_BUILD_TIMEOUT_S = 600.0


@dataclass
class HarborRun:
    """What one terminus-2 trial gave.

    Args:
        trial_dir: Harbor's trial folder.
        exit_code: `harbor`'s exit code (None when it was killed).
        stop_reason: ``harness_exit``, ``timeout``, or the reason the caller's `should_stop` gave.
        reward: the verifier's ``reward`` (None when there is none).
        rewards: every reward the verifier wrote.
        exception: Harbor's exception type and message, when the trial raised one.
        result: ``result.json`` (empty when Harbor wrote none).
        trajectory: ``agent/trajectory.json`` (ATIF), None when absent.
        subagent_trajectories: terminus-2's summarisation trajectories (``agent/trajectory.NAME.json``), by NAME.
        wall_s: how long it ran.
        stderr_tail: the end of Harbor's output.
        environment: the environment it ran in (``bwrap`` or a Harbor environment type).
        steps: a multi-step task's steps, in order: ``{"name", "reward", "rewards", "exception"}``
            (empty for a single-step task); `reward` is then Harbor's trial reward over them.
        step_trajectories: a multi-step task's ATIF trajectory of each step (``steps/NAME/agent/``), by
            step name; its summarisation subagents' are in `subagent_trajectories` as ``NAME.SUBAGENT``.
    """

    trial_dir: Path
    exit_code: int | None
    stop_reason: str
    reward: float | None
    rewards: dict[str, Any] = field(default_factory=dict)
    exception: str | None = None
    result: dict[str, Any] = field(default_factory=dict)
    trajectory: dict[str, Any] | None = None
    subagent_trajectories: dict[str, dict[str, Any]] = field(default_factory=dict)
    wall_s: float = 0.0
    stderr_tail: str = ""
    environment: str = BWRAP
    steps: list[dict[str, Any]] = field(default_factory=list)
    step_trajectories: dict[str, dict[str, Any]] = field(default_factory=dict)


def find_harbor() -> str | None:
    """Locate the ``harbor`` CLI: `HARBOR_BIN`, the checkout's ``.venv-harbor``, or PATH.

    Returns:
        Its path, or None when Harbor is not installed (`make harbor`).
    """
    for candidate in (os.environ.get("HARBOR_BIN"), str(_REPO_ROOT / ".venv-harbor/bin/harbor"), shutil.which("harbor")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def dockerfile_needs(task_dir: Path) -> list[str]:
    """What a task's environment needs beyond the host's own files (empty: the bwrap environment runs it).

    Args:
        task_dir: the Harbor task folder.

    Returns:
        ``docker_image NAME`` from ``task.toml``, each Dockerfile instruction that builds an image
        (``RUN ...``, ``COPY ...``, ``ADD ...``), and a ``FROM`` base the host cannot stand in for
        (`rollout_dataset.harbor.environments.read_task_needs`).
    """
    needs = read_task_needs(task_dir)
    found = [f"docker_image {needs.docker_image}"] if needs.docker_image else []
    found += list(needs.image_steps)
    if needs.foreign_base:
        found.append(f"FROM {needs.base_image}")
    return found


def build_timeout_s(task_dir: Path) -> float:
    """How long Harbor gives a task's image build: ``[environment] build_timeout_sec`` of its ``task.toml``.

    Args:
        task_dir: the Harbor task folder.

    Returns:
        Seconds (`DEFAULT_BUILD_TIMEOUT_S` when the file or field is missing or not a positive number).
    """
    import tomllib

    try:
        config = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
        value = (config.get("environment") or {}).get("build_timeout_sec")
    except (OSError, tomllib.TOMLDecodeError, AttributeError):
        value = None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")
    return float(value) if ok else DEFAULT_BUILD_TIMEOUT_S  # type: ignore[arg-type]


def environment_arg(choice: EnvironmentChoice) -> str:
    """The ``--env`` value of a choice: the bwrap environment's import path, Harbor's type name, or, for a task
    asking for no network under Podman, this project's podman environment without a relay
    (`rollout_dataset.harbor.proxied_podman`: the container's network is its own loopback only). Harbor's own
    enforces no-network with an egress sidecar whose images (alpine, gost) come from a registry, and refuses
    the task where they cannot be pulled; the kernel's ``network_mode: none`` needs no image."""
    if choice.name == BWRAP:
        return ENVIRONMENT_SPEC
    if choice.name == "podman" and choice.needs.network == "no-network":
        return PROXIED_PODMAN_SPEC
    return choice.name


def environment_for(task_dir: Path, requested: str = AUTO) -> str:
    """The Harbor ``--env`` that runs a task here (`rollout_dataset.harbor.environments.choose_environment`).

    Args:
        task_dir: the Harbor task folder.
        requested: ``auto``, ``bwrap`` or a Harbor environment type.

    Returns:
        `ENVIRONMENT_SPEC` for the bwrap environment, else Harbor's environment type.

    Raises:
        HarborTaskUnsupportedError: no environment asked for can run the task here (named).
    """
    return environment_arg(choose_environment(task_dir, requested, harbor=find_harbor()))


def harbor_command(harbor: str, task_dir: Path, trials_dir: Path, trial_name: str, *, base_url: str, model: str,
                   environment: str, agent_kwargs: dict[str, Any], agent_timeout_s: float | None = None) -> list[str]:
    """The ``harbor trials start`` command line (see the module docstring).

    Args:
        agent_timeout_s: the agent's time budget (``--agent-timeout``; None: the task's own).

    Returns:
        argv.
    """
    provider = "openai" if "/" in model else "hosted_vllm"
    argv = [harbor, "trials", "start", "-p", str(Path(task_dir).resolve()), "--trials-dir", str(Path(trials_dir).resolve()),
            "--trial-name", trial_name,
            "--agent", "terminus-2", "--model", f"{provider}/{model}", "--env", environment]
    if agent_timeout_s is not None:
        argv += ["--agent-timeout", str(float(agent_timeout_s))]
    kwargs = {"api_base": base_url, "collect_rollout_details": True, "record_terminal_session": False, **agent_kwargs}
    for key, value in kwargs.items():
        argv += ["--agent-kwarg", f"{key}={json.dumps(value)}"]
    return argv


def _package_path(folder: Path) -> str:
    """A folder holding only a link to this package, for Harbor's PYTHONPATH: the environment module is
    importable, and nothing else of this venv (whose packages are built for another Python) shadows Harbor's."""
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "rollout_dataset"
    if not link.is_symlink():
        link.symlink_to(Path(__file__).resolve().parents[1], target_is_directory=True)
    return str(folder)


def _harbor_env(api_key: str, python_path: str, environment: str = BWRAP) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not _SECRET_NAME.search(k)}
    env.update(credential_variables(environment))  # a cloud environment's own credentials, nothing else
    env.pop("PYTHONHOME", None)
    env.update({"HOSTED_VLLM_API_KEY": api_key, "OPENAI_API_KEY": api_key, "HARBOR_TELEMETRY": "0",
                "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": python_path,
                "NO_COLOR": "1", "TERM": "dumb"})
    return env


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def run_terminus(task_dir: Path, trials_dir: Path, *, base_url: str, model: str, api_key: str, timeout_s: float,
                 agent_kwargs: dict[str, Any] | None = None, should_stop: Callable[[], str | None] | None = None,
                 harbor: str | None = None, poll_s: float = 0.2, trial_name: str | None = None,
                 verifier_timeout_s: float = 600.0, environment: str = AUTO) -> HarborRun:
    """One terminus-2 trial of a Harbor task, to its end, the time budget, or a stop request.

    Args:
        task_dir: the Harbor task folder.
        trials_dir: where Harbor writes the trial folder (a fresh folder).
        base_url: the proxy's session base URL (ends in ``/v1``).
        model: the served model name.
        api_key: the dummy key terminus-2 sends.
        timeout_s: the agent's time budget: Harbor stops terminus-2 then (``AgentTimeoutError``) and its
            verifier still scores what is there; the whole trial is killed past
            ``timeout_s + verifier_timeout_s + HARBOR_SLACK_S`` (plus the task's `build_timeout_s` where
            Harbor builds its image: podman, docker).
        verifier_timeout_s: the task's verifier timeout (for the hard limit).
        agent_kwargs: more terminus-2 kwargs (``llm_call_kwargs``, ``model_info``, ``max_turns``).
        should_stop: polled; a returned reason stops the trial.
        harbor: the ``harbor`` executable (default `find_harbor`).
        poll_s: polling interval.
        trial_name: the trial folder's name (default: ``trial-`` and a random suffix: a container engine's
            names are shared by every trial on the host, see `trial_containers`).
        environment: ``auto``, ``bwrap`` or a Harbor environment type (``--harbor-env``).

    Returns:
        The run.

    Raises:
        ToolNotInstalledError: Harbor is not installed (`make harbor`).
        HarborTaskUnsupportedError: no environment asked for can run the task here (named).
    """
    from rollout_dataset.errors import ToolNotInstalledError

    harbor = harbor or find_harbor()
    if harbor is None:
        raise ToolNotInstalledError("harbor", HARBOR_INSTALL, "--harness terminus-2")
    choice = choose_environment(task_dir, environment, harbor=harbor)
    trial_name = trial_name or f"trial-{secrets.token_hex(6)}"
    argv = harbor_command(harbor, task_dir, trials_dir, trial_name, base_url=base_url, model=model,
                          environment=environment_arg(choice), agent_kwargs=dict(agent_kwargs or {}),
                          agent_timeout_s=timeout_s)
    slack = HARBOR_SLACK_S
    if choice.name in CONTAINER_ENVIRONMENTS:  # Harbor builds the task's image inside the trial
        slack += build_timeout_s(task_dir)
    return run_trial(argv, trials_dir, trial_name, api_key=api_key, timeout_s=timeout_s, should_stop=should_stop,
                     poll_s=poll_s, verifier_timeout_s=verifier_timeout_s, slack_s=slack, environment=choice.name)


def run_trial(argv: list[str], trials_dir: Path, trial_name: str, *, api_key: str, timeout_s: float,
              should_stop: Callable[[], str | None] | None = None, poll_s: float = 0.2,
              verifier_timeout_s: float = 600.0, extra_env: dict[str, str] | None = None,
              slack_s: float = HARBOR_SLACK_S, environment: str = BWRAP) -> HarborRun:
    """Run one ``harbor trials start`` command to its end, the time budget, or a stop request, and read its trial.

    Args:
        argv: the command (`harbor_command`, `rollout_dataset.harbor.installed.installed_agent_command`).
        trials_dir: its ``--trials-dir`` (made here).
        trial_name: its ``--trial-name``.
        api_key: the dummy key (``OPENAI_API_KEY``/``HOSTED_VLLM_API_KEY`` in Harbor's environment).
        timeout_s: the agent's budget; the whole trial is killed past ``timeout_s + verifier_timeout_s + slack_s``.
        should_stop: polled; a returned reason stops the trial (SIGINT, then SIGKILL to its group).
        poll_s: polling interval.
        verifier_timeout_s: the task's verifier timeout (for the hard limit).
        extra_env: more variables for Harbor's environment (after the secret-looking ones are dropped).
        slack_s: what the trial may take beyond the agent and the verifier (start-up, an image build, teardown).
        environment: the Harbor environment type it runs in (``bwrap`` for ours): a cloud one gets its own
            credential variables; a container engine's leftovers of the trial are removed after it.

    Returns:
        The run.
    """
    trials_dir.mkdir(parents=True, exist_ok=True)
    hard_limit = timeout_s + verifier_timeout_s + slack_s
    log_path = trials_dir / "harbor-output.log"
    env = _harbor_env(api_key, _package_path(trials_dir / ".package"), environment)
    env.update(extra_env or {})
    start = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True, cwd=trials_dir)
        reason, _ = watch_child(proc, start=start, limit_s=hard_limit, checks=[should_stop] if should_stop else [],
                                poll_s=poll_s, first_signal=signal.SIGINT,  # Harbor stops its trial on SIGINT
                                grace_s=_STOP_GRACE_S)
    wall = time.monotonic() - start
    left = remove_trial_containers(environment, trial_name) if environment in CONTAINER_ENVIRONMENTS else []
    if left:  # Harbor was killed, or its compose frontend died, before its own teardown
        logger.warning("harbor trial %s left containers %s: removed", trial_name, ", ".join(left))
    trial_dir = trials_dir / trial_name
    result = _read_json(trial_dir / "result.json") or {}
    verifier = result.get("verifier_result") or {}
    rewards = verifier.get("rewards") or {}
    reward = rewards.get("reward")
    exc = result.get("exception_info") or None
    exception = f"{exc.get('exception_type')}: {exc.get('exception_message')}" if isinstance(exc, dict) else None
    if reason == CHILD_EXIT and isinstance(exc, dict) and exc.get("exception_type") == "AgentTimeoutError":
        reason = "timeout"  # Harbor stopped the agent on its budget; the verifier ran
    tail = log_path.read_bytes()[-4000:].decode("utf-8", "replace")
    if not result and reason == CHILD_EXIT:  # Harbor failed before its trial wrote anything
        last = [line.strip() for line in tail.splitlines() if line.strip()]
        exception = f"harbor wrote no result.json (exit code {proc.returncode}): {last[-1] if last else 'no output'}"
    trial_log = ""
    if exception or reward is None:  # Harbor's own log of the trial: what its exec calls met
        try:
            trial_log = (trial_dir / "trial.log").read_bytes()[-20000:].decode("utf-8", "replace")
        except OSError:
            pass
    named = describe_container_failure(f"{exception}\n{tail}\n{trial_log}") if exception or reward is None else None
    if named:  # a build step, a base image or the container itself: one line instead of the compose output
        exception = f"{named} [{(exception or 'harbor').split(':', 1)[0]}]"
    logger.info("harbor trial %s: %s, reward %s, exception %s after %.1f s", trial_name, reason, reward, exception, wall)
    steps = _step_results(result)
    subagents = _subagent_trajectories(trial_dir / "agent")
    step_trajectories: dict[str, dict[str, Any]] = {}
    for step in steps:  # Harbor moves each step's agent folder to steps/NAME/agent
        agent_dir = trial_dir / "steps" / step["name"] / "agent"
        if re.fullmatch(r"[A-Za-z0-9_.-]+", step["name"]) and (doc := _read_json(agent_dir / "trajectory.json")):
            step_trajectories[step["name"]] = doc
            subagents.update({f"{step['name']}.{k}": v for k, v in _subagent_trajectories(agent_dir).items()})
    return HarborRun(trial_dir=trial_dir, exit_code=proc.returncode if reason == CHILD_EXIT else None,
                     stop_reason=reason, reward=float(reward) if isinstance(reward, (int, float)) else None,
                     rewards=rewards, exception=exception, result=result,
                     trajectory=_read_json(trial_dir / "agent" / "trajectory.json"),
                     subagent_trajectories=subagents, wall_s=wall, stderr_tail=tail,
                     environment=environment, steps=steps, step_trajectories=step_trajectories)


def _step_results(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A multi-step trial's ``step_results``: each step's name, reward, rewards and exception."""
    steps = []
    for step in result.get("step_results") or []:
        if not isinstance(step, dict):
            continue
        rewards = (step.get("verifier_result") or {}).get("rewards") or {}
        reward = rewards.get("reward") if isinstance(rewards, dict) else None
        exc = step.get("exception_info")
        steps.append({"name": str(step.get("step_name")),
                      "reward": float(reward) if isinstance(reward, (int, float)) else None,
                      "rewards": rewards if isinstance(rewards, dict) else {},
                      "exception": f"{exc.get('exception_type')}: {exc.get('exception_message')}"
                      if isinstance(exc, dict) else None})
    return steps


def _subagent_trajectories(agent_dir: Path) -> dict[str, dict[str, Any]]:
    """``trajectory.NAME.json`` files of a trial's agent folder (terminus-2's summarisation subagents)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(agent_dir.glob("trajectory.*.json")) if agent_dir.is_dir() else []:
        name = path.name[len("trajectory."):-len(".json")]
        doc = _read_json(path)
        if doc is not None and re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            found[name] = doc
    return found
