"""Achievements of a coding task: its visible examples, and the timeline of one rollout.

The achievement `example_<k>` (1-based, as the statement numbers them) is true in a working
directory when `solution.py` there prints the expected output of the k-th worked example.

The timeline is what the step rewards need: after each agent decision that changed or ran the
solution, which examples pass. An environment can record it while it runs (an `achievements.json`
in the artifact folder, see `rollout_dataset.rewards.achievements.write_achievements`); when a coding artifact folder has none, it is
rebuilt here after the fact by replaying the recorded tool calls of `trace.json` into a fresh
sandbox — files written, commands re-run there under the sandbox's limits — and running the visible
examples after each decision. Replay understands the built-in harness's tools (`write_file`, `run`,
`run_examples`) and shell tools that take a `command` (mini-swe-agent's and opencode's `bash`) or
write a file (`write` with `filePath`/`path` and `content`); a decision with none of them changes nothing.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

from rollout_dataset.artifact_files import SUMMARY_FILE, TASK_FILE, TRACE_FILE
from rollout_dataset.rewards.achievements import read_achievements, write_achievements
from rollout_dataset.rewards.stepwise import AchievementSnapshot, AchievementTracker
from rollout_dataset.sandbox.verify import DEFAULT_SOLUTION_FILE as SOLUTION_FILE  # the one definition

__all__ = [
    "CodingExamples",
    "example_name",
    "decisions_from_trace",
    "replay_timeline",
    "timeline_for_artifacts",
]

log = logging.getLogger(__name__)

_COMMAND_TOOLS = {"run", "bash", "shell", "execute", "terminal"}
_WRITE_TOOLS = {"write_file", "write", "create_file"}
_RUN_SOLUTION_TOOLS = {"run_examples"}


def example_name(index: int) -> str:
    """The achievement name of the example at 0-based `index` (`example_1`, `example_2`, ...)."""
    return f"example_{index + 1}"


class CodingExamples:
    """The visible examples of one task as achievements (implements `EnvironmentAchievements`).

    Args:
        task: the task (a `rollout_dataset.tasks.Task`); its `visible_tests` are the examples.
        limits: sandbox limits of each example run (default: the verifier's).
        unsafe: run the examples even where the allow-list sandbox cannot be built (the rollout
            was captured with ``--unsafe-sandbox``).
    """

    env = "coding"

    def __init__(self, task: Any, limits: Any = None, unsafe: bool = False) -> None:
        self.task = task
        self.limits = limits
        self.unsafe = unsafe

    def catalogue(self) -> Sequence[str]:
        """`example_1` .. `example_n`."""
        return [example_name(i) for i in range(len(self.task.visible_tests))]

    def achieved(self, state: str | os.PathLike[str]) -> frozenset[str]:
        """The examples that `solution.py` in the working directory `state` passes."""
        from rollout_dataset.sandbox import run_examples

        if not self.task.visible_tests or not (Path(state) / SOLUTION_FILE).is_file():
            return frozenset()
        results = run_examples(self.task, state, self.limits, unsafe=self.unsafe)
        return frozenset(example_name(r.index) for r in results if r.passed)


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str) and raw.strip():
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}
    return {}


def decisions_from_trace(calls: Sequence[Mapping[str, Any]]) -> list[tuple[int, list[tuple[str, dict[str, Any]]]]]:
    """The agent's decisions from trace records: `(turn, [(tool name, arguments), ...])`.

    `turn` counts the generation calls that returned an assistant message (0-based, arrival order),
    which is the built-in harness's turn index. Calls without tool calls are skipped.
    """
    out = []
    turn = -1
    for call in sorted(calls, key=lambda c: c.get("index", 0)):
        response = call.get("response")
        if not isinstance(response, Mapping) or not call.get("endpoint", "").endswith("/chat/completions"):
            continue
        choices = response.get("choices") or []
        if not choices or not isinstance(choices[0], Mapping):
            continue
        message = choices[0].get("message") or {}
        turn += 1
        tool_calls = message.get("tool_calls") or []
        items = []
        for tc in tool_calls:
            fn = (tc or {}).get("function") or {}
            if fn.get("name"):
                items.append((str(fn["name"]), _arguments(fn.get("arguments"))))
        if items:
            out.append((turn, items))
    return out


def _apply(workdir: Path, name: str, args: Mapping[str, Any], sandbox: Any) -> tuple[bool, bool]:
    """Apply one tool call to the replay workdir; returns (changed_or_ran, ok)."""
    if name in _WRITE_TOOLS:
        rel = args.get("path") or args.get("filePath") or args.get("file_path")
        content = args.get("content")
        if not isinstance(rel, str) or not isinstance(content, str):
            return False, False
        # an absolute path pointed into the harness's own workdir: keep its file name
        root = workdir.resolve()
        target = (root / (Path(rel).name if os.path.isabs(rel) else rel)).resolve()
        if root not in target.parents:
            return False, False
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return True, True
    if name in _COMMAND_TOOLS:
        command = args.get("command") or args.get("cmd")
        if not isinstance(command, str) or not command.strip():
            return False, False
        stdin = args.get("stdin") if isinstance(args.get("stdin"), str) else None
        sandbox.run(command, stdin=stdin)
        return True, True
    if name in _RUN_SOLUTION_TOOLS:
        return True, True
    return False, True


def replay_timeline(
    calls: Sequence[Mapping[str, Any]], environment: CodingExamples, *, limits: Any = None, unsafe: bool = False
) -> list[AchievementSnapshot]:
    """Rebuild a coding rollout's achievement timeline from its trace.

    Args:
        calls: the trace records (`trace.json` `calls`).
        environment: the task's examples.
        limits: sandbox limits of replayed commands (default: the sandbox's).
        unsafe: replay even where the allow-list sandbox cannot be built.

    Returns:
        One snapshot per decision that wrote a file, ran a command or ran the examples.
    """
    from rollout_dataset.sandbox import Sandbox

    tracker = AchievementTracker(environment)
    with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
        workdir = Path(tmp)
        with Sandbox(workdir, limits=limits, unsafe=unsafe) as box:
            for turn, tools in decisions_from_trace(calls):
                acted = False
                for name, args in tools:
                    changed, _ok = _apply(workdir, name, args, box)
                    acted = acted or changed
                if acted:
                    tracker.after_decision(turn, workdir)
    return tracker.timeline


def _task_from_artifacts(folder: Path) -> Any:
    from rollout_dataset.tasks.model import Task, parse_examples

    task_doc = json.loads((folder / TASK_FILE).read_text(encoding="utf-8"))
    examples = parse_examples(task_doc.get("instruction", ""))
    return Task(
        task_id=task_doc.get("task_id", "unknown"),
        title=task_doc.get("title", ""),
        instruction=task_doc.get("instruction", ""),
        visible_tests=tuple(examples),
        source=task_doc.get("source", "builtin"),
    )


def _isolation_of(folder: Path) -> str | None:
    """The ``isolation`` field of the folder's summary.json (None when absent or unreadable)."""
    try:
        summary = json.loads((folder / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return summary.get("isolation") if isinstance(summary, dict) else None


def timeline_for_artifacts(folder: str | os.PathLike[str]) -> tuple[list[AchievementSnapshot], frozenset[str]]:
    """The achievement timeline of one coding artifact folder.

    Uses `achievements.json` when present; otherwise replays `trace.json` against the examples
    parsed from `task.json` and writes the result as `achievements.json` (`source: replayed`).

    Args:
        folder: the artifact folder.

    Returns:
        `(timeline, initial)`.

    Raises:
        FileNotFoundError: no achievements.json and no trace.json/task.json to replay from.
    """
    folder = Path(folder)
    found = read_achievements(folder)
    if found is not None:
        return found
    trace = json.loads((folder / TRACE_FILE).read_text(encoding="utf-8"))
    # a rollout the user captured with --unsafe-sandbox is replayed the same way; every other needs the sandbox
    unsafe = _isolation_of(folder) == "unsafe"
    env = CodingExamples(_task_from_artifacts(folder), unsafe=unsafe)
    timeline = replay_timeline(trace.get("calls") or [], env, unsafe=unsafe)
    write_achievements(folder, env=env.env, catalogue=env.catalogue(), timeline=timeline, source="replayed")
    return timeline, frozenset()
