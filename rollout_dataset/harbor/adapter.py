"""Run Harbor's terminus-2, unchanged, on one Harbor task against the recording proxy (`--harness terminus-2`).

`run_terminus(...)` starts ``harbor trials start`` (Harbor's own CLI, from its venv: `find_harbor`) as a
process group of its own with:

- ``--agent terminus-2 --model hosted_vllm/MODEL`` (``openai/MODEL`` when the name has a slash) and
  agent kwargs ``api_base`` (the proxy's session URL), ``collect_rollout_details=true`` (token ids and
  logprobs in its ATIF trajectory), ``record_terminal_session=false``, ``model_info`` (the context
  length, so its summarisation starts before the context is full) and ``llm_call_kwargs`` (terminus-2
  sends no ``temperature``/``max_tokens``/``seed`` of its own);
- ``--env rollout_dataset.harbor.bwrap_environment:BwrapEnvironment`` (no Docker, no network), or
  Harbor's own ``podman``/``singularity`` provider where the task's Dockerfile needs an image and one is
  installed; where neither can run the task it is refused (`HarborTaskUnsupportedError`);
- an environment without credentials (every secret-looking variable dropped), a dummy key,
  ``HARBOR_TELEMETRY=0`` and ``LITELLM_LOCAL_MODEL_COST_MAP=True``.

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

from rollout_dataset.errors import ConfigError
from rollout_dataset.harbor.container_errors import describe_container_failure
from rollout_dataset.harbor.trial_containers import CONTAINER_ENVIRONMENTS, remove_trial_containers
from rollout_dataset.processes import CHILD_EXIT, watch_child

__all__ = ["HARBOR_VERSION", "HARBOR_INSTALL", "ENVIRONMENT_SPEC", "HarborRun", "HarborTaskUnsupportedError",
           "find_harbor", "dockerfile_needs", "build_timeout_s", "environment_for", "harbor_command", "run_terminus"]

logger = logging.getLogger(__name__)

#: the Harbor release `make harbor` installs and the tests drive
HARBOR_VERSION = "0.26.0"
#: the command that installs it
HARBOR_INSTALL = "make harbor"
#: the `--env` of the bubblewrap environment
ENVIRONMENT_SPEC = "rollout_dataset.harbor.bwrap_environment:BwrapEnvironment"
_REPO_ROOT = Path(__file__).resolve().parents[2]  # a checkout's root (its .venv-harbor)
_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PROXY", re.IGNORECASE)
#: Dockerfile instructions the host's own files satisfy (anything else needs an image)
_HOST_SATISFIED = frozenset({"FROM", "WORKDIR", "ENV", "LABEL", "ARG", "CMD", "ENTRYPOINT", "USER", "SHELL",
                             "EXPOSE", "MAINTAINER", "STOPSIGNAL", "HEALTHCHECK", "VOLUME"})
_STOP_GRACE_S = 5.0
#: seconds a trial may take beyond its agent and verifier budgets (Harbor's start-up, environment set-up, teardown)
HARBOR_SLACK_S = 120.0
#: Harbor's own default of ``[environment] build_timeout_sec``
DEFAULT_BUILD_TIMEOUT_S = 600.0


class HarborTaskUnsupportedError(ConfigError):
    """A Harbor task needs more than this host has (an image built by its Dockerfile, and no Podman/Apptainer)."""


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
        One entry per need: ``docker_image NAME`` from ``task.toml``, and each Dockerfile instruction
        that installs or copies something (``RUN ...``, ``COPY ...``, ``ADD ...``), as written.
    """
    import tomllib

    needs: list[str] = []
    try:
        config = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        config = {}
    image = (config.get("environment") or {}).get("docker_image")
    if image:
        needs.append(f"docker_image {image}")
    dockerfile = task_dir / "environment" / "Dockerfile"
    if dockerfile.is_file():
        text = re.sub(r"\\\n", " ", dockerfile.read_text(encoding="utf-8", errors="replace"))
        for line in text.splitlines():
            words = line.strip().split(None, 1)
            if words and not words[0].startswith("#") and words[0].upper() not in _HOST_SATISFIED:
                needs.append(line.strip()[:200])
    return needs


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


def environment_for(task_dir: Path) -> str:
    """The Harbor `--env` that runs a task here.

    Args:
        task_dir: the Harbor task folder.

    Returns:
        `ENVIRONMENT_SPEC` when the host's files are enough, else ``podman`` or ``singularity`` when installed.

    Raises:
        HarborTaskUnsupportedError: the task needs an image and neither Podman nor Apptainer is installed
            (the message names the first need).
    """
    needs = dockerfile_needs(task_dir)
    if not needs:
        return ENVIRONMENT_SPEC
    if shutil.which("podman"):
        return "podman"
    if shutil.which("apptainer") or shutil.which("singularity"):
        return "singularity"
    raise HarborTaskUnsupportedError(
        f"{task_dir}: the task's environment needs an image ({needs[0]!r}{f' and {len(needs) - 1} more' if len(needs) > 1 else ''}); "
        "this host has no Docker, Podman or Apptainer: install podman or apptainer, or use a task whose "
        "Dockerfile only has FROM/WORKDIR/ENV")


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


def _harbor_env(api_key: str, python_path: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not _SECRET_NAME.search(k)}
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
                 verifier_timeout_s: float = 600.0) -> HarborRun:
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

    Returns:
        The run.

    Raises:
        ToolNotInstalledError: Harbor is not installed (`make harbor`).
        HarborTaskUnsupportedError: the task needs an image this host cannot provide.
    """
    from rollout_dataset.errors import ToolNotInstalledError

    harbor = harbor or find_harbor()
    if harbor is None:
        raise ToolNotInstalledError("harbor", HARBOR_INSTALL, "--harness terminus-2")
    environment = environment_for(task_dir)
    trial_name = trial_name or f"trial-{secrets.token_hex(6)}"
    trials_dir.mkdir(parents=True, exist_ok=True)
    argv = harbor_command(harbor, task_dir, trials_dir, trial_name, base_url=base_url, model=model,
                          environment=environment, agent_kwargs=dict(agent_kwargs or {}), agent_timeout_s=timeout_s)
    hard_limit = timeout_s + verifier_timeout_s + HARBOR_SLACK_S
    if environment in CONTAINER_ENVIRONMENTS:  # Harbor builds the task's image inside the trial
        hard_limit += build_timeout_s(task_dir)
    log_path = trials_dir / "harbor-output.log"
    start = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=_harbor_env(api_key, _package_path(trials_dir / ".package")), start_new_session=True,
                                cwd=trials_dir)
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
    return HarborRun(trial_dir=trial_dir, exit_code=proc.returncode if reason == CHILD_EXIT else None,
                     stop_reason=reason, reward=float(reward) if isinstance(reward, (int, float)) else None,
                     rewards=rewards, exception=exception, result=result,
                     trajectory=_read_json(trial_dir / "agent" / "trajectory.json"),
                     subagent_trajectories=_subagent_trajectories(trial_dir / "agent"), wall_s=wall, stderr_tail=tail)


def _subagent_trajectories(agent_dir: Path) -> dict[str, dict[str, Any]]:
    """``trajectory.NAME.json`` files of a trial's agent folder (terminus-2's summarisation subagents)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(agent_dir.glob("trajectory.*.json")) if agent_dir.is_dir() else []:
        name = path.name[len("trajectory."):-len(".json")]
        doc = _read_json(path)
        if doc is not None and re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            found[name] = doc
    return found
