"""What a harness needs installed, checked before anything starts.

A capture with ``--harness opencode`` on a machine without opencode would otherwise start the model
server and the proxy, build the sandbox, and fail late with ``bash: opencode: command not found``.
`require_harness_tools` looks the programs up first (a PATH lookup each, no process started) and
raises `ToolNotInstalledError` naming the command that installs the missing one:

| needed by | program | installed by |
| --- | --- | --- |
| ``--harness opencode`` | ``opencode`` (`OPENCODE_BIN`, ``.npm-tools``, PATH) | ``make npm-tools`` |
| ``--harness codex`` | ``codex`` (`CODEX_BIN`, ``.npm-tools``, PATH) | ``make npm-tools`` |
| ``--harness claude-code`` | ``claude`` (`CLAUDE_CODE_BIN`, ``.npm-tools``, PATH) | ``make npm-tools`` |
| ``--harness terminus-2`` | ``harbor`` (`HARBOR_BIN`, ``.venv-harbor``, PATH) | ``make harbor`` |
| ``--harness harbor:NAME`` | ``harbor``; ``podman``, ``podman-compose``, ``socat``, ``nsenter``, ``setpriv``; the agent's npm binary (not mini-swe-agent's) | ``make harbor``; ``make containers``; ``make npm-tools`` |
| ``--harness mini-swe-agent`` | ``mini`` (next to this Python, or PATH) | ``pip install 'rollout-dataset[harnesses]'`` |
| ``--harness cmd:"PROGRAM ..."`` | ``PROGRAM`` (when it is a plain program name or path) | (the user's own) |
| the allow-list sandbox (every coding harness) | ``bwrap`` | ``make system-deps`` |
| an external harness's proxy port inside the sandbox | ``socat`` | ``make system-deps`` |

``bwrap`` is not required with ``unsafe_sandbox=True`` (``--unsafe-sandbox``), where the run goes
on without isolation; ``socat`` is required wherever ``bwrap`` is there (the sandbox is then built) (`rollout_dataset.sandbox.isolation.require_isolation`).
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from rollout_dataset.errors import ToolNotInstalledError

__all__ = ["MissingTool", "NPM_TOOLS_INSTALL", "SYSTEM_DEPS_INSTALL", "HARNESSES_EXTRA_INSTALL", "missing_tools",
           "require_harness_tools"]

#: the command that installs the npm harnesses (opencode, Codex CLI, Claude Code) into the checkout's .npm-tools
NPM_TOOLS_INSTALL = "make npm-tools"
#: the command that installs the sandbox's Debian packages (bubblewrap, socat)
SYSTEM_DEPS_INSTALL = "make system-deps"
#: the command that installs mini-swe-agent (the package's `harnesses` extra)
HARNESSES_EXTRA_INSTALL = "pip install 'rollout-dataset[harnesses]'"

# words a `cmd:` harness may start with that are no program on PATH
_SHELL_WORDS = frozenset({"cd", "export", "exec", "set", "source", ".", "eval", "true", "false", "test", "[", "echo",
                          "printf", "if", "for", "while", "until", "case", "{", "(", "!", "time", "command", "env",
                          "type", "umask", "ulimit", "read", "trap", "unset", ":"})


@dataclass(frozen=True)
class MissingTool:
    """A program a run needs and does not find.

    Args:
        tool: the program's name.
        install: the command that installs it (or, with `is_command` False, what to do instead).
        needed_for: what needs it (for the message).
        is_command: `install` is a command to run.
    """

    tool: str
    install: str
    needed_for: str
    is_command: bool = True

    def error(self) -> ToolNotInstalledError:
        """The error to raise for it."""
        return ToolNotInstalledError(self.tool, self.install, self.needed_for, self.is_command)


def _executable(path: str | None) -> bool:
    return bool(path) and Path(path).is_file() and os.access(path, os.X_OK)  # type: ignore[arg-type]


def _command_program(command: str) -> str | None:
    """The program a ``cmd:`` harness runs first, when it is a plain word (None when it is shell syntax)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for word in words:
        if "=" in word.split("/")[0]:  # VAR=value before the program
            continue
        if word in _SHELL_WORDS or any(ch in word for ch in "$`|&;<>(){}*?"):
            return None
        return word
    return None


def missing_tools(harness: str, *, unsafe_sandbox: bool = False) -> list[MissingTool]:
    """The programs `harness` needs that are not installed.

    Args:
        harness: a ``--harness`` value (``builtin``, ``opencode``, ``codex``, ``mini-swe-agent``, ``cmd:...``).
        unsafe_sandbox: the run goes on without the allow-list sandbox, so its programs are not needed.

    Returns:
        What is missing, the harness's own program first (empty when everything is there).
    """
    from rollout_dataset.harness.claude_code import find_claude_code
    from rollout_dataset.harness.codex import find_codex
    from rollout_dataset.harness.presets import find_mini, find_opencode

    flag = f"--harness {harness}"
    missing: list[MissingTool] = []
    external = harness != "builtin"
    if harness == "opencode" and find_opencode() is None:
        missing.append(MissingTool("opencode", NPM_TOOLS_INSTALL, flag))
    elif harness == "codex" and find_codex() is None:
        missing.append(MissingTool("codex", NPM_TOOLS_INSTALL, flag))
    elif harness == "claude-code" and find_claude_code() is None:
        missing.append(MissingTool("claude", NPM_TOOLS_INSTALL, flag))
    elif harness == "terminus-2":
        from rollout_dataset.harbor.adapter import HARBOR_INSTALL, find_harbor

        if find_harbor() is None:
            missing.append(MissingTool("harbor", HARBOR_INSTALL, flag))
        if shutil.which("tmux") is None:
            missing.append(MissingTool("tmux", SYSTEM_DEPS_INSTALL, f"{flag} (terminus-2's terminal)"))
    elif harness.startswith("harbor:"):
        missing += _harbor_agent_missing(harness, flag)
    elif harness == "mini-swe-agent" and not _executable(shutil.which(find_mini())):
        missing.append(MissingTool("mini (mini-swe-agent)", HARNESSES_EXTRA_INSTALL, flag))
    elif harness.startswith("cmd:"):
        program = _command_program(harness[4:].strip().strip("\"'"))
        if program is not None and not _executable(shutil.which(program)):
            missing.append(MissingTool(program, "install it, or give its absolute path in the command",
                                       "--harness cmd:", is_command=False))
    has_bwrap = shutil.which("bwrap") is not None
    if not has_bwrap and not unsafe_sandbox:
        missing.append(MissingTool("bwrap (bubblewrap)", SYSTEM_DEPS_INSTALL,
                                   "the allow-list sandbox (or opt out with --unsafe-sandbox)"))
    if external and harness != "terminus-2" and not harness.startswith("harbor:") and has_bwrap and not shutil.which("socat"):  # the sandbox is built, the port goes in by socat
        missing.append(MissingTool("socat", SYSTEM_DEPS_INSTALL, f"{flag} (the proxy port inside its sandbox)"))
    return missing


def _harbor_agent_missing(harness: str, flag: str) -> list[MissingTool]:
    """What a Harbor installed agent (``harbor:NAME``) needs: Harbor, Podman and the relay's programs, its binary."""
    from rollout_dataset.harbor.adapter import HARBOR_INSTALL, find_harbor
    from rollout_dataset.harbor.installed import CONTAINERS_INSTALL, agent_binary, installed_agent, relay_tools_missing

    agent = installed_agent(harness)
    missing: list[MissingTool] = []
    if agent is None:
        return missing
    if find_harbor() is None:
        missing.append(MissingTool("harbor", HARBOR_INSTALL, flag))
    missing += [MissingTool(tool, CONTAINERS_INSTALL, f"{flag} (the task's container)") for tool in relay_tools_missing()]
    if agent.binary is not None and agent_binary(agent) is None:
        missing.append(MissingTool(agent.binary[0], NPM_TOOLS_INSTALL, flag))
    return missing


def require_harness_tools(harness: str, *, unsafe_sandbox: bool = False) -> None:
    """Refuse to start when `harness` (or its sandbox) needs a program that is not installed.

    Call it before starting any server: it only looks the programs up.

    Args:
        harness: a ``--harness`` value.
        unsafe_sandbox: the run goes on without the allow-list sandbox.

    Raises:
        ToolNotInstalledError: the first missing program, with the command that installs it.
    """
    missing = missing_tools(harness, unsafe_sandbox=unsafe_sandbox)
    if missing:
        raise missing[0].error()
