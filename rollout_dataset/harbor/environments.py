"""Which Harbor environment runs a Harbor task here (`--harbor-env`, batch ``--env-option harbor_env=``).

- `read_task_needs(task_dir)`: what a task's environment asks for: the ``environment/Dockerfile``
  (read with ``dockerfile-parse``: its base image, ``WORKDIR``, ``ENV`` and the steps that build an
  image: ``RUN``, ``COPY``, ``ADD``, a second ``FROM``), ``docker_image``, ``gpus``, ``memory_mb``;
- `choose_environment(task_dir, requested)`: ``bwrap`` (this project's bubblewrap environment, on the
  host's own ``/usr``), or any environment type Harbor accepts (`HARBOR_ENVIRONMENT_TYPES`), run
  unchanged by Harbor. ``auto`` takes, for a task that needs an image, the first of docker, podman,
  singularity whose Harbor preflight passes here (a ``docker`` binary with no reachable daemon fails
  it), and refuses when none does, naming what was checked and how to fix it; for a task that needs no
  image, ``bwrap`` when it asks for no network, else a runtime that works (Harbor gives the network),
  else ``bwrap`` without the network, recorded in the choice's notes;
- `credential_variables(name)`: the variables a cloud environment reads its credentials from, passed
  to Harbor for that environment only (every other secret-looking variable is dropped).

Harbor's preflight runs in Harbor's venv (`rollout_dataset.harbor.preflight`); nothing here imports Harbor.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from rollout_dataset.errors import ConfigError

__all__ = ["AUTO", "BWRAP", "PROXIED_PODMAN_SPEC", "HARBOR_ENVIRONMENT_TYPES", "HARBOR_ENV_CHOICES", "LOCAL_RUNTIMES",
           "BWRAP_BASE_IMAGES", "HARBOR_INSTALL", "PODMAN_INSTALL", "EnvironmentChoice", "HarborTaskUnsupportedError", "TaskNeeds",
           "read_task_needs", "read_dockerfile", "network_mode_of", "choose_environment", "credential_variables", "harbor_preflight", "harbor_python",
           "host_memory_mb", "host_gpus"]

#: let the task decide (see the module docstring)
AUTO = "auto"
#: this project's bubblewrap environment (`rollout_dataset.harbor.bwrap_environment`)
BWRAP = "bwrap"
#: Harbor 0.26's ``EnvironmentType`` values, in its order (tests/test_harbor_environments.py checks them
#: against the installed Harbor's enum)
HARBOR_ENVIRONMENT_TYPES: tuple[str, ...] = (
    "docker", "sbx", "podman", "daytona", "e2b", "modal", "runloop", "langsmith", "ec2", "gke", "ack", "openshift",
    "novita", "apple-container", "singularity", "islo", "tensorlake", "cwsandbox", "use-computer", "cua-cloud",
    "blaxel", "opensandbox", "beam", "skypilot", "hf-sandbox", "hyperbrowser", "vercel", "runta", "prime", "kata",
    "mosaic", "smol", "sail", "kernel", "snowflake", "boxd", "superserve", "aca-sandbox")
#: every value `--harbor-env` takes
HARBOR_ENV_CHOICES: tuple[str, ...] = (AUTO, BWRAP, *HARBOR_ENVIRONMENT_TYPES)
#: the container runtimes `auto` tries, in order, for a task that needs an image
LOCAL_RUNTIMES: tuple[str, ...] = ("docker", "podman", "singularity")
#: base images whose userland the host's Debian ``/usr`` stands in for in the bwrap environment (last
#: path component of the ``FROM`` image); any other base needs the image itself
BWRAP_BASE_IMAGES = re.compile(r"^(python|debian|ubuntu|ubuntu-\d\d-\d\d|buildpack-deps)(:|$)")
#: the command that installs Harbor (its own venv, `.venv-harbor`)
HARBOR_INSTALL = "make harbor"
#: how to get a container runtime Harbor runs here (docs/harbor.md, "Environments")
#: the ``--env`` of this project's podman environment (`rollout_dataset.harbor.proxied_podman`): an installed
#: agent's container reaches the proxy through it; a no-network task gets network ``none`` in it
PROXIED_PODMAN_SPEC = "rollout_dataset.harbor.proxied_podman:ProxiedPodmanEnvironment"
PODMAN_INSTALL = "apt-get install podman and pip install podman-compose (docs/harbor.md)"
#: Dockerfile instructions the bwrap environment honours (WORKDIR, ENV) or that change nothing it runs
_HOST_SATISFIED = frozenset({"FROM", "WORKDIR", "ENV", "LABEL", "ARG", "CMD", "ENTRYPOINT", "USER", "SHELL",
                             "EXPOSE", "MAINTAINER", "STOPSIGNAL", "HEALTHCHECK", "VOLUME", "COMMENT"})
#: cloud environments whose credentials are not all under their own NAME_ prefix (read in Harbor 0.26's
#: environments); every Harbor type also gets its ``NAME_*`` variables (``DAYTONA_API_KEY``, ``E2B_API_KEY``, ...)
_EXTRA_CREDENTIALS: dict[str, tuple[str, ...]] = {
    "ec2": ("AWS_",), "gke": ("GOOGLE_", "GCP_", "CLOUDSDK_", "KUBECONFIG"), "ack": ("ALIBABA_", "ALICLOUD_", "KUBECONFIG"),
    "openshift": ("KUBECONFIG", "OPENSHIFT_"), "hf-sandbox": ("HF_", "HUGGING_FACE_"), "cua-cloud": ("CUA_",),
    "aca-sandbox": ("AZURE_",), "modal": ("MODAL_",), "sbx": ("SBX_", "DOCKER_"), "snowflake": ("SNOWFLAKE_",),
}
_PREFLIGHT_TIMEOUT_S = 120.0


class HarborTaskUnsupportedError(ConfigError):
    """A Harbor task cannot run here in the environment asked for (or in any, with ``auto``): the
    message names the task's need, what was checked, and how to fix it."""


@dataclass(frozen=True)
class TaskNeeds:
    """What a Harbor task's environment asks for (`read_task_needs`).

    Args:
        image_steps: the Dockerfile instructions that build an image (``RUN``, ``COPY``, ``ADD``, a second
            ``FROM``), as written (continuation lines joined).
        docker_image: ``[environment] docker_image``.
        base_image: the Dockerfile's first ``FROM`` image.
        workdir: the Dockerfile's final ``WORKDIR``.
        env: the Dockerfile's ``ENV`` values (final stage).
        gpus: ``[environment] gpus``.
        memory_mb: ``[environment] memory_mb``.
        network: the network the task asks for (`network_mode_of`).
    """

    image_steps: tuple[str, ...] = ()
    docker_image: str | None = None
    base_image: str | None = None
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    gpus: int = 0
    memory_mb: int | None = None
    network: str = "public"

    @property
    def foreign_base(self) -> bool:
        """The ``FROM`` image is one the host's ``/usr`` does not stand in for (`BWRAP_BASE_IMAGES`)."""
        if not self.base_image:
            return False
        name = self.base_image.rsplit("/", 1)[-1]
        return not BWRAP_BASE_IMAGES.match(name)

    @property
    def needs_image(self) -> bool:
        """The task runs only in its own image (a prebuilt one, build steps, or a base the host cannot stand in for)."""
        return bool(self.docker_image or self.image_steps or self.foreign_base)

    def describe(self) -> str:
        """The task's need of an image, as the first words of a refusal."""
        if self.docker_image:
            return f"the task runs in a prebuilt image (task.toml [environment] docker_image = {self.docker_image!r})"
        if self.image_steps:
            more = f" and {len(self.image_steps) - 1} more" if len(self.image_steps) > 1 else ""
            return f"the task's Dockerfile builds an image ({self.image_steps[0]!r}{more})"
        return (f"the task's Dockerfile starts FROM {self.base_image!r}, which the bubblewrap environment cannot stand "
                f"in for (it runs on this host's /usr; it stands in for python, debian and ubuntu bases only)")


def read_task_needs(task_dir: Path) -> TaskNeeds:
    """What a task's environment asks for (see `TaskNeeds`).

    Args:
        task_dir: the Harbor task folder.

    Returns:
        Its needs (an unreadable ``task.toml`` counts as empty: the task loader refuses it by name).
    """
    import tomllib

    try:
        config = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        config = {}
    section = config.get("environment")
    env: dict[str, Any] = section if isinstance(section, dict) else {}
    raw_gpus = env.get("gpus")
    gpus = raw_gpus if isinstance(raw_gpus, int) and not isinstance(raw_gpus, bool) else 0
    memory = env.get("memory_mb") if isinstance(env.get("memory_mb"), (int, float)) else None
    image = env.get("docker_image") or None
    dockerfile = read_dockerfile(task_dir / "environment" / "Dockerfile")
    return TaskNeeds(docker_image=image, gpus=gpus, memory_mb=memory, network=network_mode_of(env), **dockerfile)


def network_mode_of(environment: Mapping[str, Any]) -> str:
    """The network a task asks for, as Harbor reads ``task.toml``'s ``[environment]``: ``network_mode``, else
    the legacy ``allow_internet`` (``false`` is ``no-network``), else ``public``."""
    mode = environment.get("network_mode")
    if isinstance(mode, str) and mode:
        return mode
    return "no-network" if environment.get("allow_internet") is False else "public"


def read_dockerfile(path: Path) -> dict[str, Any]:
    """A Dockerfile as the bwrap environment sees it (read with ``dockerfile-parse``).

    Args:
        path: the ``Dockerfile`` (absent: nothing).

    Returns:
        ``image_steps`` (the instructions that build an image: ``RUN``, ``COPY``, ``ADD``, a second
        ``FROM``, ...), ``base_image`` (the first ``FROM``), ``workdir`` (the final stage's ``WORKDIR``),
        ``env`` (its ``ENV`` values): `TaskNeeds`'s fields.
    """
    if not path.is_file():
        return {}
    from dockerfile_parse import DockerfileParser  # type: ignore[import-untyped]

    parser = DockerfileParser(path=str(path), cache_content=True)
    steps: list[str] = []
    base: str | None = None
    workdir: str | None = None
    for instruction in parser.structure:
        name = str(instruction.get("instruction", "")).upper()
        value = " ".join(str(instruction.get("value", "")).split())
        if name == "FROM":
            if base is None:
                base = value.split()[0] if value else None
                continue
            workdir = None  # a second stage: an image built from another
        if name == "WORKDIR" and value:
            workdir = value if value.startswith("/") else str(Path(workdir or "/") / value)
        if name not in _HOST_SATISFIED or name == "FROM":
            steps.append(f"{name} {value}"[:200])
    try:
        variables = {str(k): str(v) for k, v in parser.envs.items()}
    except Exception:  # noqa: BLE001 - dockerfile-parse raises on odd substitutions; the ENV then stays unread
        variables = {}
    return {"image_steps": tuple(steps), "base_image": base, "workdir": workdir, "env": variables}


def host_memory_mb() -> int | None:
    """This machine's memory (``/proc/meminfo`` MemTotal), None when unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def host_gpus() -> int:
    """NVIDIA GPUs this machine shows (``/dev/nvidia0``, ``/dev/nvidia1``, ...)."""
    return sum(1 for p in Path("/dev").glob("nvidia[0-9]*") if p.name[6:].isdigit())


def harbor_python(harbor: str) -> str:
    """The Python interpreter of Harbor's venv: the ``#!`` line of its ``harbor`` script.

    Args:
        harbor: the ``harbor`` executable (`rollout_dataset.harbor.adapter.find_harbor`).

    Returns:
        The interpreter's path (``python3`` beside the script when the line cannot be read).
    """
    try:
        with open(harbor, "rb") as fh:
            first = fh.readline(4096).decode("utf-8", "replace").strip()
    except OSError:
        first = ""
    if first.startswith("#!") and first[2:].split() and Path(first[2:].split()[0]).is_file():
        return first[2:].split()[0]
    return str(Path(harbor).parent / "python3")


def _package_folder() -> str:
    """The folder holding this package (for the preflight's PYTHONPATH)."""
    return str(Path(__file__).resolve().parents[2])


def harbor_preflight(harbor: str, names: tuple[str, ...], environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """Harbor's own preflight of each environment type, run in Harbor's venv (`rollout_dataset.harbor.preflight`).

    Args:
        harbor: the ``harbor`` executable.
        names: environment type names.
        environ: the environment the checks see (default: this process's, secrets included: a cloud
            environment's preflight reads its credential variables).

    Returns:
        ``{name: None}`` for each that passed, ``{name: reason}`` else.
    """
    env = dict(os.environ if environ is None else environ)
    env["PYTHONPATH"] = _package_folder()
    env.pop("PYTHONHOME", None)
    argv = [harbor_python(harbor), "-m", "rollout_dataset.harbor.preflight", *names]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=_PREFLIGHT_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
        answer = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return {name: f"Harbor's preflight did not run ({type(exc).__name__}: {exc})" for name in names}
    if not isinstance(answer, dict):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {name: f"Harbor's preflight failed (exit {proc.returncode}: {tail})" for name in names}
    return {name: answer.get(name, "not checked") for name in names}


_PREFLIGHT_CACHE: dict[tuple[str, tuple[str, ...], str], dict[str, str | None]] = {}
_PREFLIGHT_LOCK = threading.Lock()


def _cached_preflight(harbor: str, names: tuple[str, ...], path: str) -> dict[str, str | None]:
    """`harbor_preflight`, kept for the process once one of `names` passed (a batch asks per rollout); an
    answer where none passed is asked again next time (a runtime busy with another build may answer later)."""
    key = (harbor, names, path)
    with _PREFLIGHT_LOCK:
        if key in _PREFLIGHT_CACHE:
            return dict(_PREFLIGHT_CACHE[key])
    answer = harbor_preflight(harbor, names)
    if any(reason is None for reason in answer.values()):
        with _PREFLIGHT_LOCK:
            _PREFLIGHT_CACHE[key] = dict(answer)
    return answer


def credential_variables(name: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a Harbor environment reads its credentials from, taken from the user's environment.

    Args:
        name: the environment type (``daytona``, ``modal``, ...).
        environ: where to read them (default: this process's environment).

    Returns:
        ``NAME_*`` variables (``DAYTONA_API_KEY``, ``E2B_API_KEY``, ``RUNLOOP_API_KEY``, ...) and those of
        `_EXTRA_CREDENTIALS` (``AWS_*`` for ec2, ``HF_*`` for hf-sandbox, ...); empty for ``bwrap``, ``auto``
        and the local runtimes.
    """
    if name not in HARBOR_ENVIRONMENT_TYPES or name in LOCAL_RUNTIMES:
        return {}
    environ = os.environ if environ is None else environ
    prefixes = (name.upper().replace("-", "_") + "_", *_EXTRA_CREDENTIALS.get(name, ()))
    return {k: v for k, v in environ.items() if any(k == p or k.startswith(p) for p in prefixes)}


@dataclass(frozen=True)
class EnvironmentChoice:
    """The environment a task runs in.

    Args:
        name: ``bwrap`` or a Harbor environment type.
        needs: the task's needs.
        checked: what `auto` (or the one asked for) was checked against: ``{name: None | reason}``.
        notes: what the environment does not honour of the task (the bwrap environment's stand-in
            ``FROM`` base), recorded in ``summary.json``.
    """

    name: str
    needs: TaskNeeds
    checked: dict[str, str | None] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def network_given(self) -> str:
        """The network the task gets here: ``none`` in the bwrap environment, else Harbor applies the task's own."""
        return "none" if self.name == BWRAP else "as_asked"

    def facts(self) -> dict[str, Any]:
        """What ``summary.json``'s ``harbor`` field records of the choice."""
        return {"environment": self.name, "base_image": self.needs.base_image or self.needs.docker_image,
                "environment_checked": dict(self.checked), "environment_notes": list(self.notes)}


def _check_resources(needs: TaskNeeds, name: str, where: Path) -> None:
    """Refuse a GPU or more memory than this machine has, for an environment that runs on it."""
    if name != BWRAP and name not in LOCAL_RUNTIMES and name != AUTO:
        return  # a cloud environment provides its own machine
    if needs.gpus > 0 and host_gpus() < needs.gpus:
        raise HarborTaskUnsupportedError(
            f"{where}: task.toml [environment] gpus = {needs.gpus}, and this machine has {host_gpus()} GPU(s) "
            f"(/dev/nvidia*): run it with --harbor-env NAME for a cloud environment that provides GPUs (docs/harbor.md)")
    total = host_memory_mb()
    if needs.memory_mb is not None and total is not None and needs.memory_mb > total:
        raise HarborTaskUnsupportedError(
            f"{where}: task.toml [environment] memory_mb = {needs.memory_mb:g}, more than this machine's "
            f"{total} MB: run it on a larger machine or with --harbor-env NAME for a cloud environment (docs/harbor.md)")


def _bwrap_notes(needs: TaskNeeds) -> tuple[str, ...]:
    if needs.base_image:
        return (f"FROM {needs.base_image}: the bubblewrap environment runs on this host's /usr, which stands in "
                "for that image",)
    return ()


def _checked_text(checked: Mapping[str, str | None]) -> str:
    return "; ".join(f"{name}: {reason or 'works'}" for name, reason in checked.items())


def choose_environment(task_dir: Path, requested: str = AUTO, *, harbor: str | None = None,
                       preflight: Callable[[tuple[str, ...]], Mapping[str, str | None]] | None = None) -> EnvironmentChoice:
    """The environment a Harbor task runs in here (see the module docstring).

    Args:
        task_dir: the Harbor task folder.
        requested: ``auto``, ``bwrap`` or a Harbor environment type (`HARBOR_ENV_CHOICES`).
        harbor: the ``harbor`` executable, for its preflight (`adapter.find_harbor`; None: not installed).
        preflight: ``names -> {name: None | reason}`` (default: Harbor's own, `harbor_preflight`).

    Returns:
        The choice.

    Raises:
        ConfigError: `requested` is not a known name.
        HarborTaskUnsupportedError: the task asks for GPUs or more memory than this machine has (for
            an environment running here); ``bwrap`` for a task that needs an image; an environment
            whose Harbor preflight fails (its reason: a missing credential variable, no daemon); with
            ``auto``, no runtime works (each one checked is named, and how to install one).
    """
    if requested not in HARBOR_ENV_CHOICES:
        raise ConfigError(f"--harbor-env {requested}: unknown; use auto, bwrap or one of Harbor's environment types "
                          f"({', '.join(HARBOR_ENVIRONMENT_TYPES)})")
    needs = read_task_needs(task_dir)
    _check_resources(needs, requested, task_dir)
    if requested == BWRAP or (requested == AUTO and not needs.needs_image and (
            needs.network == "no-network" or (harbor is None and preflight is None))):
        if needs.needs_image:
            raise HarborTaskUnsupportedError(
                f"{task_dir}: {needs.describe()}; the bubblewrap environment (--harbor-env bwrap) runs only tasks "
                f"that need no image: use --harbor-env auto, podman or docker")
        return EnvironmentChoice(BWRAP, needs, notes=_bwrap_notes(needs))
    if preflight is None:
        found = harbor
        if found is None:
            raise HarborTaskUnsupportedError(f"{task_dir}: {needs.describe()}; Harbor, which runs it in a container, "
                                             f"is not installed: run `{HARBOR_INSTALL}`")

        def preflight(names: tuple[str, ...]) -> Mapping[str, str | None]:
            return _cached_preflight(found, names, os.environ.get("PATH", ""))
    if requested != AUTO:
        reason = preflight((requested,)).get(requested)
        if requested == "singularity" and not needs.docker_image and reason is None:
            reason = "Harbor's singularity environment runs only tasks with a docker_image (it builds no Dockerfile)"
        if reason:
            raise HarborTaskUnsupportedError(f"{task_dir}: --harbor-env {requested} cannot run here: {reason}")
        return EnvironmentChoice(requested, needs, checked={requested: None})
    if not needs.needs_image:
        # it asks for a network, which the bubblewrap environment never gives: a container runtime that works
        # here gives it as Harbor does; without one, bwrap runs it without (recorded)
        names = tuple(n for n in LOCAL_RUNTIMES if n != "singularity")
        answers = preflight(names)
        tried = {name: answers.get(name, "not checked") for name in names}
        working = [name for name in names if tried[name] is None]
        if working:
            return EnvironmentChoice(working[0], needs, checked={n: tried[n] for n in names[:names.index(working[0]) + 1]})
        note = (f"network_mode {needs.network}: the task asks for a network and the bubblewrap environment has none "
                f"(no container runtime works here: {_checked_text(tried)}); what downloads tools, in the agent's "
                f"run or the verifier's, fails")
        return EnvironmentChoice(BWRAP, needs, checked=tried, notes=(*_bwrap_notes(needs), note))
    candidates = tuple(n for n in LOCAL_RUNTIMES if n != "singularity" or needs.docker_image)
    answers = preflight(candidates)
    checked: dict[str, str | None] = {}
    for name in candidates:
        checked[name] = answers.get(name, "not checked")
        if checked[name] is None:
            return EnvironmentChoice(name, needs, checked=checked)
    if "singularity" not in candidates:
        checked["singularity"] = "not tried: it runs only tasks with a docker_image"
    hint = ("; or use a task whose Dockerfile has no RUN/COPY/ADD" if needs.image_steps and not needs.docker_image
            else "; the image is pulled from its registry, which the runtime must reach" if needs.docker_image else "")
    raise HarborTaskUnsupportedError(
        f"{task_dir}: {needs.describe()}, and no container runtime works here (checked {_checked_text(checked)}): "
        f"install Podman ({PODMAN_INSTALL}), start a Docker daemon, or pass --harbor-env NAME for a cloud "
        f"environment with its credentials set{hint}")
