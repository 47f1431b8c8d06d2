"""The built-in task set: stdin -> stdout problems written for this project.

They live in ``tasks/data/builtin_tasks.yaml`` (one record per task: id, title, statement,
examples, held-out tests, reference solution), are read once and cached. The instruction of each is
composed from the statement and the examples (`model.compose_instruction`), so every built-in
instruction shows its examples in the same format.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

import yaml

from ..errors import TaskSourceError
from .model import Task, compose_instruction, parse_test_cases

__all__ = ["BUILTIN_SOURCE", "builtin_tasks", "find_builtin_task_by_instruction", "builtin_data_path"]

#: the ``source`` of every built-in task
BUILTIN_SOURCE = "builtin"
_DATA_FILE = "builtin_tasks.yaml"
_REQUIRED = ("id", "title", "statement", "examples", "tests", "solution")


def builtin_data_path() -> str:
    """Where the built-in task file is (the sandbox hides this directory from code it runs).

    Returns:
        The file's path as a string.
    """
    return str(resources.files(__package__).joinpath("data", _DATA_FILE))


@functools.lru_cache(maxsize=1)
def _load() -> tuple[Task, ...]:
    path = builtin_data_path()
    text = resources.files(__package__).joinpath("data", _DATA_FILE).read_text(encoding="utf-8")
    records = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    tasks = []
    for n, rec in enumerate(records):
        missing = [k for k in _REQUIRED if k not in rec]
        if missing:
            raise TaskSourceError(f"{path}: task #{n} lacks field(s) {', '.join(missing)}")
        visible = parse_test_cases(rec["examples"], f"{path}: {rec['id']}.examples")
        tasks.append(Task(
            task_id=rec["id"],
            title=rec["title"],
            instruction=compose_instruction(rec["statement"], visible),
            visible_tests=visible,
            held_out_tests=parse_test_cases(rec["tests"], f"{path}: {rec['id']}.tests"),
            reference_solution=rec["solution"],
            source=BUILTIN_SOURCE,
            metadata={"statement": rec["statement"].strip(), "position": n},
        ))
    return tuple(tasks)


def builtin_tasks() -> list[Task]:
    """All built-in tasks, in file order.

    Returns:
        A new list of `Task` (the tasks themselves are immutable and shared).

    Raises:
        TaskSourceError: the shipped task file is malformed.
    """
    return list(_load())


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def find_builtin_task_by_instruction(text: str) -> Task | None:
    """Recognise a built-in task from a prompt that contains its instruction.

    Whitespace is compared loosely (runs of spaces/newlines count as one space), so a harness that
    re-wraps or indents the task text still matches. The whole instruction is tried first, then the
    statement alone (for harnesses that drop or reformat the examples).

    Args:
        text: a user message, or the whole prompt.

    Returns:
        The task whose instruction (or statement) occurs in `text`, the longest such match when
        several do; None when no built-in task is in it.
    """
    haystack = _squash(text)
    if not haystack:
        return None
    for column in (0, 1):
        found = [(len(keys[column]), task) for task, keys in _squashed() if keys[column] and keys[column] in haystack]
        if found:
            return max(found, key=lambda pair: pair[0])[1]
    return None


@functools.lru_cache(maxsize=1)
def _squashed() -> tuple[tuple[Task, tuple[str, str]], ...]:
    return tuple((t, (_squash(t.instruction), _squash(t.metadata.get("statement", "")))) for t in _load())
