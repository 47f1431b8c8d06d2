"""The built-in agent's tools: their manifest (sent on every model call) and their execution.

Tools act on one working directory (the sandbox workdir). Code runs through a `CommandRunner`,
a callable the caller provides (the capture wires in the sandbox, with its limits and no network);
`subprocess_runner` is a plain fallback for tests and tools-only use.

| tool | arguments | effect |
| --- | --- | --- |
| `write_file` | `path`, `content` | create/overwrite a file inside the workdir |
| `read_file` | `path` | read a file inside the workdir (first 20,000 characters) |
| `run` | `command`, `stdin`? | run a shell command in the workdir; exit code, stdout, stderr |
| `run_examples` | none | run `solution.py` on each worked example of the statement |
| `submit` | none | finish: the solution file is verified on held-out tests |
"""

from __future__ import annotations

import json
import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from rollout_dataset.sandbox.verify import DEFAULT_SOLUTION_FILE, outputs_match

__all__ = [
    "SOLUTION_FILE",
    "TOOL_NAMES",
    "CommandResult",
    "CommandRunner",
    "ToolBox",
    "ToolOutcome",
    "outputs_match",
    "sandbox_runner",
    "subprocess_runner",
    "tool_manifest",
]

logger = logging.getLogger(__name__)

#: where every harness must leave its solution, relative to the workdir.
SOLUTION_FILE = DEFAULT_SOLUTION_FILE  # one definition: rollout_dataset.sandbox.verify
TOOL_NAMES = ("write_file", "read_file", "run", "run_examples", "submit")
_MAX_READ = 20_000
_MAX_OUTPUT = 4_000


@dataclass
class CommandResult:
    """What running one command gave.

    Args:
        stdout: captured standard output (maybe truncated).
        stderr: captured standard error (maybe truncated).
        exit_code: the exit status (None when killed).
        timed_out: the wall-time limit hit.
        limit: which sandbox limit hit (``"wall"``, ``"cpu"``, ``"memory"``, ``"output"``), if any.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool = False
    limit: str | None = None


#: ``runner(command, stdin, workdir, timeout_s) -> CommandResult``
CommandRunner = Callable[[str, "str | None", Path, float], CommandResult]


def subprocess_runner(command: str, stdin: str | None, workdir: Path, timeout_s: float) -> CommandResult:
    """Run a shell command in `workdir` with a wall-time limit and nothing else (no sandbox).

    Args:
        command: the shell command.
        stdin: text for standard input, or None.
        workdir: the working directory.
        timeout_s: wall-time limit in seconds.

    Returns:
        The command's result.
    """
    try:
        proc = subprocess.run(["bash", "-c", command], input=stdin or "", cwd=workdir, capture_output=True,
                              text=True, timeout=timeout_s, errors="replace")
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return CommandResult(out, f"wall-time limit of {timeout_s:g} s hit", None, timed_out=True, limit="wall")
    return CommandResult(proc.stdout, proc.stderr, proc.returncode)


def sandbox_runner(sandbox: Any) -> CommandRunner:
    """A `CommandRunner` running commands in a `rollout_dataset.sandbox.Sandbox` (limits, no network).

    Args:
        sandbox: the sandbox whose working directory the tools act on.

    Returns:
        The runner; the wall-time limit of each run is the smaller of the sandbox's and the call's.
    """
    from dataclasses import replace

    def run(command: str, stdin: str | None, workdir: Path, timeout_s: float) -> CommandResult:
        limits = replace(sandbox.limits, wall_s=max(0.1, min(sandbox.limits.wall_s, timeout_s)))
        res = sandbox.run(command, stdin=stdin, limits=limits)
        stderr = res.stderr if not res.limit else (res.stderr + "\n" + (res.error or "")).strip()
        return CommandResult(res.stdout, stderr, res.exit_code, res.timed_out, res.limit)

    return run


def _fn(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


def tool_manifest(names: Sequence[str] = TOOL_NAMES) -> list[dict[str, Any]]:
    """The OpenAI-style tool manifest of the built-in agent.

    Args:
        names: which tools to include (default all).

    Returns:
        A list of ``{"type": "function", "function": {...}}`` entries.
    """
    all_tools = {
        "write_file": _fn("write_file", "Create or overwrite a file in the working directory.",
                          {"path": {"type": "string", "description": "Path relative to the working directory."},
                           "content": {"type": "string", "description": "The full file content."}},
                          ["path", "content"]),
        "read_file": _fn("read_file", "Read a file in the working directory.",
                         {"path": {"type": "string", "description": "Path relative to the working directory."}},
                         ["path"]),
        "run": _fn("run", "Run a shell command in the working directory (no network).",
                   {"command": {"type": "string", "description": "The shell command."},
                    "stdin": {"type": "string", "description": "Text for standard input."}},
                   ["command"]),
        "run_examples": _fn("run_examples", f"Run {SOLUTION_FILE} on each worked example of the statement "
                                            "and report which pass.", {}, []),
        "submit": _fn("submit", f"Finish: {SOLUTION_FILE} is your final answer.", {}, []),
    }
    return [all_tools[n] for n in names]


@dataclass
class ToolOutcome:
    """The result of one tool call, as the model will read it.

    Args:
        content: the text returned to the model.
        ok: whether the call did what it was asked.
        ran_code: whether code was executed.
        changed_solution: whether the solution file was written.
        submitted: whether this was `submit`.
        examples_passed: for `run_examples`, which example indices passed.
    """

    content: str
    ok: bool = True
    ran_code: bool = False
    changed_solution: bool = False
    submitted: bool = False
    examples_passed: list[int] | None = None


def _clip(text: str, limit: int = _MAX_OUTPUT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut]"


@dataclass
class ToolBox:
    """Executes the built-in tools in one working directory.

    Args:
        workdir: the agent's working directory.
        examples: the statement's worked examples as ``(input, output)`` pairs.
        runner: how to run commands (default: `subprocess_runner`, no sandbox).
        command_timeout_s: wall-time limit per command.
    """

    workdir: Path
    examples: Sequence[tuple[str, str]] = ()
    runner: CommandRunner = subprocess_runner
    command_timeout_s: float = 10.0

    def _resolve(self, rel: Any) -> Path:
        if not isinstance(rel, str) or not rel.strip():
            raise ValueError("argument 'path' must be a non-empty string")
        root = self.workdir.resolve()
        target = (root / rel).resolve()
        if target != root and root not in target.parents:
            raise ValueError(f"path {rel!r} is outside the working directory")
        return target

    def execute(self, name: str, arguments: str | dict | None, *, timeout_s: float | None = None) -> ToolOutcome:
        """Run one tool call.

        Args:
            name: the tool's name.
            arguments: its arguments (a JSON string as models send them, or a dict).
            timeout_s: cap on this call's command time (the rollout's remaining time).

        Returns:
            The outcome; errors (unknown tool, bad arguments) become an outcome with ``ok=False``.
        """
        try:
            args = json.loads(arguments) if isinstance(arguments, str) and arguments.strip() else (arguments or {})
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except (json.JSONDecodeError, ValueError) as exc:
            return ToolOutcome(f"error: could not parse the arguments of {name}: {exc}", ok=False)
        limit = self.command_timeout_s if timeout_s is None else max(0.1, min(self.command_timeout_s, timeout_s))
        try:
            if name == "write_file":
                return self._write(args)
            if name == "read_file":
                path = self._resolve(args.get("path"))
                if not path.is_file():
                    return ToolOutcome(f"error: no file {args.get('path')!r}", ok=False)
                return ToolOutcome(_clip(path.read_text(encoding="utf-8", errors="replace"), _MAX_READ))
            if name == "run":
                command = args.get("command")
                if not isinstance(command, str) or not command.strip():
                    raise ValueError("argument 'command' must be a non-empty string")
                res = self.runner(command, args.get("stdin"), self.workdir, limit)
                return ToolOutcome(self._format(res), ok=res.exit_code == 0, ran_code=True)
            if name == "run_examples":
                return self._run_examples(limit)
            if name == "submit":
                return ToolOutcome("submitted", submitted=True)
        except ValueError as exc:
            return ToolOutcome(f"error: {name}: {exc}", ok=False)
        return ToolOutcome(f"error: unknown tool {name!r}; available: {', '.join(TOOL_NAMES)}", ok=False)

    def _write(self, args: dict) -> ToolOutcome:
        path = self._resolve(args.get("path"))
        content = args.get("content")
        if not isinstance(content, str):
            raise ValueError("argument 'content' must be a string")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        changed = path == (self.workdir.resolve() / SOLUTION_FILE)
        return ToolOutcome(f"wrote {len(content)} characters to {args['path']}", changed_solution=changed)

    @staticmethod
    def _format(res: CommandResult) -> str:
        parts = [f"exit code: {res.exit_code}"]
        if res.limit:
            parts.append(f"limit hit: {res.limit}")
        parts.append("stdout:\n" + _clip(res.stdout))
        if res.stderr:
            parts.append("stderr:\n" + _clip(res.stderr))
        return "\n".join(parts)

    def _run_examples(self, timeout_s: float) -> ToolOutcome:
        if not (self.workdir / SOLUTION_FILE).is_file():
            return ToolOutcome(f"error: no {SOLUTION_FILE} yet; write it first", ok=False)
        if not self.examples:
            return ToolOutcome("the statement has no worked examples", ran_code=False, examples_passed=[])
        lines, passed = [], []
        for i, (given, expected) in enumerate(self.examples):
            res = self.runner(f"python3 {SOLUTION_FILE}", given, self.workdir, timeout_s)
            ok = res.exit_code == 0 and outputs_match(res.stdout, expected)
            if ok:
                passed.append(i)
                lines.append(f"example {i + 1}: PASS")
            else:
                detail = f"limit hit: {res.limit}" if res.limit else f"exit code {res.exit_code}"
                lines.append(f"example {i + 1}: FAIL ({detail})\nexpected:\n{_clip(expected, 500)}\n"
                             f"got:\n{_clip(res.stdout, 500)}" + (f"\nstderr:\n{_clip(res.stderr, 800)}" if res.stderr else ""))
        lines.append(f"{len(passed)}/{len(self.examples)} examples pass")
        return ToolOutcome("\n".join(lines), ok=len(passed) == len(self.examples), ran_code=True,
                           examples_passed=passed)
