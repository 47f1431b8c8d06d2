"""The verifier: run a solution on a task's tests and score it.

Output comparison (`outputs_match`): exact after normalising both texts — trailing whitespace is
removed from every line, and trailing empty lines / newlines are dropped. Leading whitespace,
inner blank lines and letter case all count.

`verify_solution` scores held-out tests. Each test runs in a FRESH temporary sandbox holding only
the solution file; the input arrives on stdin and the expected output stays in this process, so the
held-out data is never written anywhere the solution (or the agent) can read. `run_examples` runs
the task's visible examples against the solution in the agent's own working directory (they are in
the statement already), for a harness's `run` tool and for stepwise rewards.
"""

from __future__ import annotations

import logging
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from .limits import Limits, RunResult
from .run import Sandbox
from rollout_dataset.errors import SandboxUnavailableError
from rollout_dataset.files import IrregularFileError, read_regular_file

if TYPE_CHECKING:  # pragma: no cover
    from ..tasks.model import Task, TestCase

__all__ = [
    "DEFAULT_SOLUTION_FILE",
    "MAX_SOLUTION_BYTES",
    "VERIFY_LIMITS",
    "VerifyResult",
    "ExampleResult",
    "normalise_output",
    "outputs_match",
    "verify_solution",
    "run_examples",
    "task_hidden_paths",
]

log = logging.getLogger(__name__)

#: the file name a solution is expected under, in the agent's working directory
DEFAULT_SOLUTION_FILE = "solution.py"
#: the largest solution file the verifier reads (a larger one scores 0.0)
MAX_SOLUTION_BYTES = 4 * 1024 * 1024
#: limits of one test run: small programs on small inputs
VERIFY_LIMITS = Limits(wall_s=10.0, cpu_s=5.0, memory_mb=512, output_bytes=1_000_000, file_mb=16)


def normalise_output(text: str) -> str:
    """Normalise program output for comparison.

    Args:
        text: raw output.

    Returns:
        The text with trailing whitespace removed from each line and trailing newlines dropped
        (``\\r\\n`` counts as a newline).
    """
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def outputs_match(got: str, expected: str) -> bool:
    """Whether a program's output matches the expected output (see `normalise_output`).

    Args:
        got: what the program printed.
        expected: the expected output.

    Returns:
        True when both normalise to the same text.
    """
    return normalise_output(got) == normalise_output(expected)


def _reason(result: RunResult, expected: str) -> tuple[bool, str]:
    if result.limit:
        return False, result.error or result.limit
    if result.exit_code != 0:
        tail = result.stderr.strip().splitlines()[-1:] if result.stderr.strip() else []
        return False, f"runtime error: {result.error}" + (f" ({tail[0][:200]})" if tail else "")
    if outputs_match(result.stdout, expected):
        return True, "passed"
    return False, "wrong answer"


@dataclass
class VerifyResult:
    """The verdict on one solution.

    Args:
        passed: held-out tests passed.
        total: held-out tests run.
        env_reward: ``passed / total``; 0.0 when the agent left no solution (a failure, which a
            trainer's group baseline needs); None only when the verifier itself could not run
            (the task has no held-out tests, the sandbox failed), with `unscored_reason`.
        per_test: one ``{"index", "passed", "reason", "limit", "exit_code", "wall_s"}`` per test, in
            test order. Reasons never contain the expected output.
        errors: what made tests fail or the solution unscorable, one line each.
        unscored_reason: why `env_reward` is None; None whenever the solution was scored.
    """

    passed: int
    total: int
    env_reward: float | None
    per_test: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    unscored_reason: str | None = None

    @property
    def limits_hit(self) -> list[str]:
        """The names of the limits that hit, one per affected test."""
        return [t["limit"] for t in self.per_test if t.get("limit")]

    def to_dict(self) -> dict[str, Any]:
        """The verdict as a JSON-ready dict.

        Returns:
            ``{"passed", "total", "env_reward", "per_test", "errors", "unscored_reason"}``.
        """
        return asdict(self)


@dataclass
class ExampleResult:
    """One visible example run against the agent's current solution.

    Args:
        index: the example's position (0-based).
        passed: the output matched.
        reason: ``"passed"``, ``"wrong answer"``, a runtime error or the limit that hit.
        input: the example input.
        expected: the expected output.
        got: what the solution printed (capped).
        stderr: the end of its standard error.
        limit: the limit that hit, or None.
    """

    index: int
    passed: bool
    reason: str
    input: str
    expected: str
    got: str
    stderr: str
    limit: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-ready dict."""
        return asdict(self)


def task_hidden_paths(task: "Task") -> list[Path]:
    """Files that hold a task's held-out tests and must be hidden from sandboxed code.

    Args:
        task: the task.

    Returns:
        The task file for ``file:PATH`` sources. The allow-list root holds no host file outside its
        runtime anyway; these are masked as well in case they lie inside it.
    """
    source = getattr(task, "source", "") or ""
    if source.startswith("file:"):
        path = Path(source[len("file:"):])
        if path.exists():
            return [path.resolve()]
    return []


def _solution_text(solution: str | os.PathLike[str] | None) -> tuple[str | None, str | None]:
    """(source text, error) for a solution given as source, file or directory."""
    if solution is None:
        return None, "no solution given"
    if isinstance(solution, os.PathLike) or (isinstance(solution, str) and "\n" not in solution
                                              and (os.path.exists(solution) or solution.endswith(".py"))):
        path = Path(solution)
        if path.is_dir():
            path = path / DEFAULT_SOLUTION_FILE
        return _read_solution_file(path)
    return str(solution), None


def _read_solution_file(path: Path) -> tuple[str | None, str | None]:
    """(text, error) of a solution file the agent wrote: a regular file, never a link's target.

    The file lies in a folder untrusted code wrote; this process may read far more of the host than
    the sandbox does (a link to a root-only token file would run it as the solution and put its text
    into the recorded errors), so a symlink, FIFO or device is refused, as is a file past `MAX_SOLUTION_BYTES`
    (`rollout_dataset.files.read_regular_file`).
    """
    try:
        return read_regular_file(path, MAX_SOLUTION_BYTES).decode("utf-8", errors="replace"), None
    except FileNotFoundError:
        return None, f"no solution file at {path}"
    except IrregularFileError as exc:
        return None, f"solution file {path} is {exc.strerror}"
    except OSError as exc:
        why = "a symlink (not followed)" if path.is_symlink() else f"unreadable ({exc.strerror})"
        return None, f"solution file {path} is {why}"


def _run_one(source: str, filename: str, stdin: str, limits: Limits, command: Sequence[str] | None,
             hidden: list[Path], unsafe: bool) -> RunResult:
    # a throwaway root per test: a fresh working directory holding only a copy of the solution, a
    # fresh private /tmp and (root runner) a fresh uid; all of it is gone when the run ends
    with Sandbox(limits=limits, hide_paths=hidden, unsafe=unsafe) as box:
        box.write_file(filename, source)
        return box.run(list(command) if command else [sys.executable, filename], stdin=stdin)


def _score(tests: Sequence["TestCase"], source: str, filename: str, limits: Limits,
           command: Sequence[str] | None, hidden: list[Path], workers: int,
           unsafe: bool) -> list[tuple[RunResult, str]]:
    def job(test: "TestCase") -> tuple[RunResult, str]:
        return _run_one(source, filename, test.input, limits, command, hidden, unsafe), test.output

    if workers <= 1 or len(tests) <= 1:
        return [job(t) for t in tests]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="verify") as pool:
        return list(pool.map(job, tests))


def _default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def verify_solution(task: "Task", solution: str | os.PathLike[str] | None, limits: Limits | None = None, *,
                    filename: str = DEFAULT_SOLUTION_FILE, command: Sequence[str] | None = None,
                    workers: int | None = None, hide_paths: Iterable[str | os.PathLike[str]] = (),
                    unsafe: bool = False) -> VerifyResult:
    """Score a solution on the task's held-out tests, each in a fresh throwaway sandbox.

    Each test copies the solution's text into a new temporary working directory, runs it in its own
    allow-list root (the held-out input only on its stdin) and deletes the directory afterwards: a
    solution that writes its input somewhere leaves it nowhere a later command or rollout can read.

    Args:
        task: the task whose ``held_out_tests`` are run.
        solution: the solution's source text, a path to the file, or the agent's working directory
            (then ``<dir>/solution.py``); a one-line string naming an existing path or ending in
            ``.py`` is taken as a path. None or a missing file: reward 0.0 (the agent failed); so is
            a solution file that is a symlink (never followed), not a regular file, or larger than
            `MAX_SOLUTION_BYTES`.
        limits: limits of each test run (default `VERIFY_LIMITS`).
        filename: the name the solution is copied in as.
        command: how to run it (default ``[sys.executable, filename]``).
        workers: tests run in parallel (default ``min(4, cpu_count)``).
        hide_paths: further paths to hide from the solution (artifact folders and the like).
        unsafe: run even where the allow-list root cannot be built.

    Returns:
        A `VerifyResult`: ``env_reward`` is 0.0 when there is no solution file (the agent failed),
        None with `unscored_reason` when the verifier could not run (no held-out test, sandbox error).

    Raises:
        SandboxUnavailableError: no allow-list root here and not `unsafe`.
    """
    source, error = _solution_text(solution)
    tests = list(task.held_out_tests)
    if not tests:
        reason = f"task {task.task_id} has no held-out tests"
        return VerifyResult(0, 0, None, [], [reason], unscored_reason=reason)
    if source is None:
        return VerifyResult(0, len(tests), 0.0, [], [error or "no solution"])
    hidden = [*task_hidden_paths(task), *(Path(p) for p in hide_paths)]
    try:
        runs = _score(tests, source, filename, limits or VERIFY_LIMITS, command, hidden,
                      _default_workers() if workers is None else workers, unsafe)
    except SandboxUnavailableError:
        raise
    except (OSError, RuntimeError) as exc:  # the sandbox itself failed: the solution was never judged
        reason = f"verifier could not run: {type(exc).__name__}: {exc}"
        log.error("verify %s: %s", task.task_id, reason)
        return VerifyResult(0, len(tests), None, [], [reason], unscored_reason=reason)
    per_test, errors, passed = [], [], 0
    for i, (result, expected) in enumerate(runs):
        ok, reason = _reason(result, expected)
        passed += ok
        per_test.append({"index": i, "passed": ok, "reason": reason, "limit": result.limit,
                         "exit_code": result.exit_code, "wall_s": round(result.wall_s, 4)})
        if not ok:
            errors.append(f"held-out test {i}: {reason}")
    log.debug("verify %s: %d/%d", task.task_id, passed, len(tests))
    return VerifyResult(passed, len(tests), passed / len(tests), per_test, errors)


def run_examples(task: "Task", workdir: str | os.PathLike[str], limits: Limits | None = None, *,
                 filename: str = DEFAULT_SOLUTION_FILE, command: Sequence[str] | None = None,
                 tests: Sequence["TestCase"] | None = None, unsafe: bool = False) -> list[ExampleResult]:
    """Run the task's visible examples against the solution in the agent's working directory.

    Args:
        task: the task whose ``visible_tests`` are run.
        workdir: the agent's working directory, holding `filename`.
        limits: limits of each run (default `VERIFY_LIMITS`).
        filename: the solution file inside `workdir`.
        command: how to run it (default ``[sys.executable, filename]``).
        tests: run these instead of the visible tests (they must be visible to the agent).
        unsafe: run even where the allow-list root cannot be built.

    Returns:
        One `ExampleResult` per example; a missing solution file fails each with that reason.

    Raises:
        SandboxUnavailableError: no allow-list root here and not `unsafe`.
    """
    examples = list(task.visible_tests if tests is None else tests)
    with Sandbox(workdir, limits=limits or VERIFY_LIMITS, hide_paths=task_hidden_paths(task), unsafe=unsafe) as box:
        if not (box.workdir / filename).is_file():
            return [ExampleResult(i, False, f"no solution file {filename} in {box.workdir}", t.input, t.output, "",
                                  "") for i, t in enumerate(examples)]
        results = []
        for i, test in enumerate(examples):
            run = box.run(list(command) if command else [sys.executable, filename], stdin=test.input)
            ok, reason = _reason(run, test.output)
            results.append(ExampleResult(i, ok, reason, test.input, test.output, run.stdout[:4000],
                                         run.stderr[-2000:], run.limit))
    return results
