"""Coding tasks: the built-in set and loaders for task files and Hugging Face datasets.

Public API:

- `Task`, `TestCase` — a stdin -> stdout problem with visible examples and held-out tests.
- `load_tasks(source="builtin", n_prompts=64, seed=0, column_map=None)` — deterministic selection.
- `select_task(tasks, index)` — raises `TaskIndexError` naming the valid range ``0..N-1``.
- `warn_of_held_out_leaks(task)` — logs, once per task per process, a statement that shows a held-out test.
- `builtin_tasks()`, `find_builtin_task_by_instruction(text)` — the shipped set; recognise a task
  from a prompt (used by the local backend's oracle policy).
- `visible_tests_text(task)` — the examples as text (``visible_tests.txt``).
- `held_out_leaks(task)`, `find_held_out_text(task, text)` — the "held-out test appears" rule.

Output comparison of the verifier (`rollout_dataset.sandbox.outputs_match`): exact after removing
trailing whitespace from each line and trailing newlines.
"""

from __future__ import annotations

from .builtin import BUILTIN_SOURCE, builtin_data_path, builtin_tasks, find_builtin_task_by_instruction
from .loader import DEFAULT_COLUMNS, load_task_source, load_tasks, select_task, tasks_from_records, warn_of_held_out_leaks
from .model import (
    STATEMENT_LEAK_MIN_CHARS,
    Task,
    TestCase,
    compose_instruction,
    find_held_out_text,
    format_examples,
    held_out_leaks,
    occurs_as_tokens,
    normalise_text,
    parse_examples,
    visible_tests_text,
)

__all__ = [
    "Task",
    "TestCase",
    "load_tasks",
    "load_task_source",
    "select_task",
    "tasks_from_records",
    "warn_of_held_out_leaks",
    "builtin_tasks",
    "builtin_data_path",
    "find_builtin_task_by_instruction",
    "visible_tests_text",
    "format_examples",
    "compose_instruction",
    "parse_examples",
    "normalise_text",
    "held_out_leaks",
    "find_held_out_text",
    "occurs_as_tokens",
    "STATEMENT_LEAK_MIN_CHARS",
    "DEFAULT_COLUMNS",
    "BUILTIN_SOURCE",
]
