"""Run untrusted code in an allow-list root (bubblewrap) under limits, and verify solutions against tests.

Public API:

- `Limits`, `RunResult` — what a run may use, and what came back (``limit`` names what hit).
- `Sandbox` — a working directory (temporary or given) with ``run(cmd, stdin=, limits=)``;
  ``Sandbox.isolation()`` / `isolation_report()` say what holds on this machine; `probe_isolation()`
  whether the allow-list root can be built (``.level`` is ``"allow-list"`` or ``"unsafe"``).
- `HostForwarder` — carries one loopback port (the recording proxy's) into a sandbox.
- `run_in_sandbox(cmd, ...)` — one command in a fresh temporary sandbox.
- `verify_solution(task, solution) -> VerifyResult` — held-out tests, each in a fresh sandbox;
  ``env_reward`` is the fraction passed, None when unscorable.
- `run_examples(task, workdir) -> list[ExampleResult]` — the visible examples in the agent's workdir.
- `outputs_match`, `normalise_output` — the comparison rule (trailing whitespace per line and
  trailing newlines ignored).
"""

from __future__ import annotations

from .forward import HostForwarder
from .isolation import ISOLATION_LEVELS, isolation_report, probe_isolation
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
    "probe_isolation",
    "ISOLATION_LEVELS",
    "HostForwarder",
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
