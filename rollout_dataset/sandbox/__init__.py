"""Run untrusted code under limits without network, and verify solutions against tests.

Public API:

- `Limits`, `RunResult` — what a run may use, and what came back (``limit`` names what hit).
- `Sandbox` — a working directory (temporary or given) with ``run(cmd, stdin=, limits=)``;
  ``Sandbox.isolation()`` says what is isolated on this machine.
- `run_in_sandbox(cmd, ...)` — one command in a fresh temporary sandbox.
- `verify_solution(task, solution) -> VerifyResult` — held-out tests, each in a fresh sandbox;
  ``env_reward`` is the fraction passed, None when unscorable.
- `run_examples(task, workdir) -> list[ExampleResult]` — the visible examples in the agent's workdir.
- `outputs_match`, `normalise_output` — the comparison rule (trailing whitespace per line and
  trailing newlines ignored).
"""

from __future__ import annotations

from .isolation import default_hidden_paths, isolation_report
from .limits import LIMIT_NAMES, Limits, RunResult
from .run import Sandbox, run_in_sandbox, scrubbed_env
from .verify import (
    DEFAULT_SOLUTION_FILE,
    VERIFY_LIMITS,
    ExampleResult,
    VerifyResult,
    normalise_output,
    outputs_match,
    run_examples,
    task_hidden_paths,
    verify_solution,
)

__all__ = [
    "Limits",
    "RunResult",
    "LIMIT_NAMES",
    "Sandbox",
    "run_in_sandbox",
    "scrubbed_env",
    "isolation_report",
    "default_hidden_paths",
    "VerifyResult",
    "ExampleResult",
    "verify_solution",
    "run_examples",
    "outputs_match",
    "normalise_output",
    "task_hidden_paths",
    "DEFAULT_SOLUTION_FILE",
    "VERIFY_LIMITS",
]
