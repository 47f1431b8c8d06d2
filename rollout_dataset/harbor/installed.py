"""Harbor's installed agents inside the task's container, every call through the recording proxy
(`--harness harbor:NAME`).

terminus-2 calls the model from the host; Harbor's *installed* agents (opencode, Codex, Claude Code,
mini-swe-agent, ...) run inside the task's container and call it from there. `installed_agent_command`
builds the ``harbor trials start`` command that runs one of them, unchanged, with:

- ``--env`` `PROXIED_PODMAN_SPEC` (`rollout_dataset.harbor.proxied_podman`): Harbor's podman environment
  whose main container gets the proxy's port on its own loopback (a relay on the host's side, through
  `proxy_socket`), and no other network when the task asks for none;
- the connection set the way Harbor's agent classes take it (``harbor agent auth NAME``): ``--model
  PROVIDER/MODEL``, ``--base-url`` the proxy's session URL (Claude Code: without ``/v1``, it appends
  ``/v1/messages``), ``--api-format`` the API the proxy records for that agent, and ``--api-key-name``
  `AGENT_KEY_ENV`, a variable holding the rollout's dummy key (Harbor copies it into the variable the
  agent reads: ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``MSWEA_API_KEY``);
- the agent itself from this host, not the internet (its install scripts fetch from GitHub, nvm's and
  astral's servers, none of which this kind of machine reaches): the npm-installed binary
  (`make npm-tools`: opencode's native binary, Codex's static musl binary, Claude Code's native binary) is
  bind-mounted read-only at ``/usr/local/bin/NAME`` (``--mounts``) and the agent runs with
  ``skip_install=true``; mini-swe-agent (Python) is installed by `OfflineMiniSweAgent` from a wheel
  folder built on the host for the container's Python (see `rollout_dataset.harbor.offline_agents`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout_dataset.harbor.agent_paths import PYTHON_MARKER, WHEELS_TARGET
from rollout_dataset.harbor.environments import PROXIED_PODMAN_SPEC
from rollout_dataset.npm_tools import find_npm_tool

__all__ = ["HARBOR_PREFIX", "AGENT_KEY_ENV", "PROXIED_PODMAN_SPEC", "InstalledAgent", "INSTALLED_AGENTS",
           "installed_agent", "installed_agent_command", "agent_binary", "agent_mounts", "relay_tools_missing",
           "MINI_SWE_AGENT_PACKAGES", "CONTAINER_PYTHON", "prepare_mini_swe_agent", "run_installed_agent",
           "CONTAINERS_INSTALL"]

logger = logging.getLogger(__name__)

#: the `--harness` prefix naming a Harbor agent: ``harbor:opencode``
HARBOR_PREFIX = "harbor:"
#: the variable holding the rollout's dummy key in Harbor's environment (``--api-key-name``)
AGENT_KEY_ENV = "ROLLOUT_AGENT_KEY"
#: host programs the proxy relay needs (`proxied_podman`): Podman itself, and the relay's parts
RELAY_TOOLS = ("podman", "podman-compose", "socat", "nsenter", "setpriv")
#: seconds a container trial may take beyond the agent and the verifier: Harbor's start-up and teardown, the
#: image build (Harbor's own default build timeout is 600 s) and waits on Podman's storage lock while other
#: builds hold it (minutes on a loaded host; more on `vfs` storage, which copies every layer)
CONTAINER_SLACK_S = 1200.0
#: the command that installs Podman, podman-compose and their configuration here
CONTAINERS_INSTALL = "make containers"
#: what Harbor's own mini-swe-agent install puts in its tool venv (``uv tool install mini-swe-agent --with ...``)
MINI_SWE_AGENT_PACKAGES = ("mini-swe-agent", "litellm[mcp]", "orjson", "fastapi")
#: the container Python mini-swe-agent is prepared for unless told (`ROLLOUT_HARBOR_PYTHON`): Debian
#: bookworm's, which the stand-in ``python:3.1x-slim`` images and Debian/Ubuntu task images carry
CONTAINER_PYTHON = "3.11"


@dataclass(frozen=True)
class InstalledAgent:
    """How one Harbor installed agent runs here.

    Args:
        name: Harbor's agent name (``--agent``), and the harness's (``harbor:NAME``).
        provider: the ``--model`` prefix (``PROVIDER/MODEL``); a name Harbor maps to no built-in endpoint,
            so the base URL given is the only one.
        api_format: ``--api-format``: the API the agent speaks to the proxy.
        binary: the npm tool whose binary is mounted (`find_npm_tool` name and its override variable), or
            None when `agent_import` installs it.
        base_url_suffix: what ends the base URL (``/v1``; ``""`` for Claude Code, which appends ``/v1/messages``).
        agent_import: ``--agent module:Class`` instead of Harbor's own name (its install replaced).
        agent_kwargs: more ``--agent-kwarg`` values.
        agent_env: ``--ae`` variables (the agent's own switches for a local model).
    """

    name: str
    provider: str
    api_format: str
    binary: tuple[str, str] | None
    base_url_suffix: str = "/v1"
    agent_import: str | None = None
    agent_kwargs: dict[str, Any] = field(default_factory=dict)
    agent_env: dict[str, str] = field(default_factory=dict)


INSTALLED_AGENTS: dict[str, InstalledAgent] = {
    agent.name: agent for agent in (
        InstalledAgent("opencode", "rollout", "openai_chat_completions", ("opencode", "OPENCODE_BIN"),
                       # as the `opencode` preset: no update check, no LSP or plugin download (each would wait
                       # on a network the container does not have)
                       agent_env={"OPENCODE_DISABLE_AUTOUPDATE": "true", "OPENCODE_DISABLE_LSP_DOWNLOAD": "true",
                                  "OPENCODE_DISABLE_DEFAULT_PLUGINS": "true"}),
        InstalledAgent("codex", "openai", "openai_responses", ("codex", "CODEX_BIN")),
        InstalledAgent("claude-code", "anthropic", "anthropic_messages", ("claude", "CLAUDE_CODE_BIN"),
                       base_url_suffix="",
                       agent_env={"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
                                  "DISABLE_AUTOUPDATER": "1"}),
        InstalledAgent("mini-swe-agent", "hosted_vllm", "openai_chat_completions", None,
                       agent_import="rollout_dataset.harbor.offline_agents:OfflineMiniSweAgent",
                       agent_env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"}),  # else litellm fetches its cost map
    )
}


def installed_agent(harness: str) -> InstalledAgent | None:
    """The installed agent a ``--harness`` value names.

    Args:
        harness: e.g. ``harbor:opencode``.

    Returns:
        The agent, or None when `harness` does not start with `HARBOR_PREFIX`.

    Raises:
        ValueError: ``harbor:NAME`` with a NAME this capture cannot run (the valid names listed).
    """
    if not harness.startswith(HARBOR_PREFIX):
        return None
    name = harness[len(HARBOR_PREFIX):]
    if name not in INSTALLED_AGENTS:
        raise ValueError(f"--harness {harness}: unknown Harbor agent {name!r}; use "
                         f"{', '.join(HARBOR_PREFIX + n for n in INSTALLED_AGENTS)} (or terminus-2)")
    return INSTALLED_AGENTS[name]


#: native executables inside an npm tree whose ``.bin`` entry is a Node script (the container has no Node)
NATIVE_IN_NPM_TREE = {"codex": "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"}


def agent_binary(agent: InstalledAgent) -> str | None:
    """The host executable mounted into the container: the real file, native (Codex's ``.bin/codex`` is a
    Node launcher; its static musl binary is mounted instead), None when absent."""
    if agent.binary is None:
        return None
    found = find_npm_tool(*agent.binary)
    if not found:
        return None
    path = Path(found).resolve()
    native = NATIVE_IN_NPM_TREE.get(agent.binary[0])
    if native is not None:
        tree = next((parent for parent in path.parents if parent.name == "node_modules"), None)
        candidate = tree / native if tree is not None else None
        with open(path, "rb") as head:
            script = head.read(2) == b"#!"
        if script:
            return str(candidate) if candidate is not None and candidate.is_file() else None
    return str(path)


def agent_mounts(agent: InstalledAgent, wheels: str | None = None) -> list[dict[str, Any]]:
    """The ``--mounts`` entries (Docker Compose volume format) that bring the agent into the container.

    Args:
        agent: the agent.
        wheels: mini-swe-agent's wheel folder (`offline_agents.WHEELS_TARGET` inside).

    Returns:
        Read-only bind mounts.

    Raises:
        FileNotFoundError: the agent's binary is not installed on this host (`make npm-tools`).
    """
    if agent.binary is not None:
        binary = agent_binary(agent)
        if binary is None:
            raise FileNotFoundError(f"{agent.binary[0]} is not installed (make npm-tools)")
        return [{"type": "bind", "source": binary, "target": f"/usr/local/bin/{agent.binary[0]}", "read_only": True}]
    if wheels is None:
        return []
    return [{"type": "bind", "source": str(Path(wheels).resolve()), "target": WHEELS_TARGET, "read_only": True}]


def relay_tools_missing() -> list[str]:
    """The host programs the proxied podman environment needs that are not on PATH."""
    return [tool for tool in RELAY_TOOLS if shutil.which(tool) is None]


def installed_agent_command(harbor: str, task_dir: Path, trials_dir: Path, trial_name: str, *, agent: InstalledAgent,
                            base_url: str, model: str, proxy_socket: str, proxy_port: int,
                            mounts: list[dict[str, Any]], agent_timeout_s: float | None = None,
                            agent_kwargs: dict[str, Any] | None = None) -> list[str]:
    """The ``harbor trials start`` command running `agent` in the task's container (see the module docstring).

    Args:
        harbor: the ``harbor`` executable.
        task_dir: the Harbor task folder.
        trials_dir: where Harbor writes the trial folder.
        trial_name: the trial folder's name.
        agent: the agent.
        base_url: the proxy's session URL (``http://127.0.0.1:PORT/sessions/ID/v1``), the same inside the container.
        model: the served model name.
        proxy_socket: the host's Unix socket relayed to the proxy.
        proxy_port: the port the relay listens on inside the container (the proxy's).
        mounts: `agent_mounts`.
        agent_timeout_s: the agent's time budget (None: the task's).
        agent_kwargs: more agent kwargs.

    Returns:
        argv.
    """
    url = base_url.rstrip("/")
    if agent.base_url_suffix != "/v1":
        url = url.removesuffix("/v1") + agent.base_url_suffix
    argv = [harbor, "trials", "start", "-p", str(Path(task_dir).resolve()), "--trials-dir", str(Path(trials_dir).resolve()),
            "--trial-name", trial_name, "--agent", agent.agent_import or agent.name,
            "--model", f"{agent.provider}/{model}", "--base-url", url, "--api-key-name", AGENT_KEY_ENV,
            "--api-format", agent.api_format, "--env", PROXIED_PODMAN_SPEC,
            "--environment-kwarg", f"proxy_socket={proxy_socket}", "--environment-kwarg", f"proxy_port={int(proxy_port)}",
            "--mounts", json.dumps(mounts)]
    if agent_timeout_s is not None:
        argv += ["--agent-timeout", str(float(agent_timeout_s))]
    kwargs = {**({"skip_install": True} if agent.binary is not None else {}), **agent.agent_kwargs, **(agent_kwargs or {})}
    for key, value in kwargs.items():
        argv += ["--agent-kwarg", f"{key}={json.dumps(value)}"]
    for key, value in agent.agent_env.items():
        argv += ["--ae", f"{key}={value}"]
    return argv


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rollout-dataset" / "harbor-agents"


def prepare_mini_swe_agent(python_version: str | None = None, cache: Path | None = None) -> Path:
    """mini-swe-agent and its packages for a container's Python, built once from PyPI and cached.

    ``pip install --target`` with that version's wheels only (``--python-version``, ``--only-binary``,
    manylinux x86-64), so it runs on the container's own ``python3`` whatever this host's Python is.

    Args:
        python_version: ``X.Y`` (default `ROLLOUT_HARBOR_PYTHON`, else `CONTAINER_PYTHON`).
        cache: the cache folder (default ``$XDG_CACHE_HOME/rollout-dataset/harbor-agents``).

    Returns:
        The folder (holding `PYTHON_MARKER`), mounted at `WHEELS_TARGET`.

    Raises:
        RuntimeError: pip failed (its last lines named).
    """
    version = python_version or os.environ.get("ROLLOUT_HARBOR_PYTHON") or CONTAINER_PYTHON
    folder = (cache or _cache_root()) / f"mini-swe-agent-py{version}"
    if (folder / PYTHON_MARKER).is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    abi = "cp" + version.replace(".", "")
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target", str(staging),
            "--python-version", version, "--implementation", "cp", "--abi", abi,
            "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
            "--platform", "manylinux2014_x86_64", "--only-binary=:all:", *MINI_SWE_AGENT_PACKAGES]
    logger.info("preparing mini-swe-agent for Python %s in %s (once; a few minutes)", version, folder)
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise RuntimeError(f"pip could not prepare mini-swe-agent for Python {version}: {tail}")
    (staging / PYTHON_MARKER).write_text(version, encoding="utf-8")
    try:
        staging.rename(folder)
    except OSError:  # another capture prepared it meanwhile
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def run_installed_agent(task_dir: Path, trials_dir: Path, *, agent: InstalledAgent, base_url: str, model: str,
                        api_key: str, timeout_s: float, should_stop: Any = None, verifier_timeout_s: float = 600.0,
                        agent_kwargs: dict[str, Any] | None = None, harbor: str | None = None,
                        trial_name: str = "trial") -> Any:
    """One trial of `agent` inside the task's container, every model call through the proxy at `base_url`.

    The proxy's port reaches the container through a Unix socket (`HostForwarder`, this process) and the
    environment's relay (`proxied_podman`, Harbor's process); Harbor gets the dummy key only.

    Args:
        task_dir: the Harbor task folder.
        trials_dir: where Harbor writes the trial folder.
        agent: the agent (`installed_agent`).
        base_url: the proxy's session URL on this host's loopback.
        model: the served model name.
        api_key: the rollout's dummy key.
        timeout_s: the agent's budget (`rollout_dataset.harbor.adapter.run_trial`).
        should_stop: polled; a returned reason stops the trial.
        verifier_timeout_s: the task's verifier timeout.
        agent_kwargs: more agent kwargs.
        harbor: the ``harbor`` executable (default `find_harbor`).
        trial_name: the trial folder's name.

    Returns:
        The `HarborRun`.

    Raises:
        ToolNotInstalledError: Harbor, Podman or a relay program, or the agent's binary, is not installed.
        ConfigError: `base_url` is not on this host's loopback (the relay carries a loopback port only).
    """
    from rollout_dataset.errors import ConfigError, ToolNotInstalledError
    from rollout_dataset.harbor.adapter import HARBOR_INSTALL, find_harbor, run_trial
    from rollout_dataset.sandbox.forward import HostForwarder, loopback_port

    flag = f"--harness {HARBOR_PREFIX}{agent.name}"
    harbor = harbor or find_harbor()
    if harbor is None:
        raise ToolNotInstalledError("harbor", HARBOR_INSTALL, flag)
    missing = relay_tools_missing()
    if missing:
        raise ToolNotInstalledError(missing[0], CONTAINERS_INSTALL, f"{flag} (the task's container)")
    port = loopback_port(base_url)
    if port is None:
        raise ConfigError(f"{flag}: the proxy's URL {base_url} is not on this host's loopback")
    if agent.binary is not None and agent_binary(agent) is None:
        raise ToolNotInstalledError(agent.binary[0], "make npm-tools", flag)
    mounts = agent_mounts(agent, str(prepare_mini_swe_agent()) if agent.binary is None else None)
    with HostForwarder(port) as forwarder:
        argv = installed_agent_command(harbor, task_dir, trials_dir, trial_name, agent=agent, base_url=base_url,
                                       model=model, proxy_socket=str(forwarder.socket_path), proxy_port=port,
                                       mounts=mounts, agent_timeout_s=timeout_s, agent_kwargs=agent_kwargs)
        # run_trial removes what the trial left in Podman (`trial_containers`)
        return run_trial(argv, trials_dir, trial_name, api_key=api_key, timeout_s=timeout_s,
                         should_stop=should_stop, verifier_timeout_s=verifier_timeout_s,
                         extra_env={AGENT_KEY_ENV: api_key}, slack_s=CONTAINER_SLACK_S, environment="podman")
