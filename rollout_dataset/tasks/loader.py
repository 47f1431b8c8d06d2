"""Load tasks from the built-in set, a local JSONL/parquet file or folder, or a Hugging Face dataset.

Sources (the ``--tasks`` flag):

- ``builtin`` — the shipped set (`builtin.builtin_tasks`);
- ``PATH.jsonl`` / ``PATH.json`` (one JSON object per line) or ``PATH.parquet`` — a local file;
- ``DIR`` or ``DIR:SPLIT`` — a local folder, read through `datasets` exactly like a Hub dataset
  (data files, or a ``save_to_disk`` folder);
- ``DIR`` holding Harbor task folders (``task.toml``, ``instruction.md``, ``tests/``), or one such
  folder, and ``harbor-builtin`` (the shipped ones): see `harbor_format`;
- ``hf:ORG/NAME`` or ``hf:ORG/NAME:SPLIT`` — a Hub dataset via ``datasets.load_dataset`` (needs the
  network or a warm cache; split defaults to ``train``).

Columns are found by a column map ``{field: column}``; fields without a mapping try the usual names
(see `DEFAULT_COLUMNS`). Tests may be a list of ``{"input", "output"}`` objects, a JSON string of
one, or ``{"inputs": [...], "outputs": [...]}``. Without a visible-test column the worked examples
are read from the instruction (`model.parse_examples`).

Selection (`load_tasks`) is deterministic in the seed: a seeded shuffle of the source order, then
the first ``n_prompts`` (all of them when fewer are available; nothing is repeated).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import threading
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import TaskIndexError, TaskSourceError
from .builtin import BUILTIN_SOURCE, builtin_tasks
from .harbor_format import HARBOR_BUILTIN_DIR, HARBOR_BUILTIN_SOURCE, is_harbor_task_set, load_harbor_tasks
from .model import Task, TestCase, held_out_leaks, parse_examples, parse_test_cases

__all__ = ["DEFAULT_COLUMNS", "load_tasks", "load_task_source", "select_task", "tasks_from_records",
           "warn_of_held_out_leaks"]

log = logging.getLogger(__name__)

#: field -> column names tried in order when the column map does not name one
DEFAULT_COLUMNS: dict[str, tuple[str, ...]] = {
    "task_id": ("task_id", "id", "problem_id"),
    "title": ("title", "name"),
    "instruction": ("instruction", "statement", "prompt", "question", "problem", "description"),
    "tests": ("held_out_tests", "tests", "test_cases", "hidden_tests", "private_tests"),
    "visible_tests": ("visible_tests", "examples", "public_tests"),
    "reference_solution": ("reference_solution", "solution", "canonical_solution"),
}
_REQUIRED_FIELDS = ("instruction", "tests")


def _resolve_columns(columns: Iterable[str], column_map: Mapping[str, str] | None, where: str) -> dict[str, str]:
    available = list(columns)
    column_map = dict(column_map or {})
    unknown = sorted(set(column_map) - set(DEFAULT_COLUMNS))
    if unknown:
        raise TaskSourceError(f"column map for {where}: unknown field(s) {', '.join(unknown)}; "
                              f"valid fields: {', '.join(DEFAULT_COLUMNS)}")
    resolved = {}
    for field, candidates in DEFAULT_COLUMNS.items():
        if field in column_map:
            if column_map[field] not in available:
                raise TaskSourceError(f"{where}: column {column_map[field]!r} (mapped to {field}) is missing; "
                                      f"columns: {', '.join(available) or '(none)'}")
            resolved[field] = column_map[field]
            continue
        for name in candidates:
            if name in available:
                resolved[field] = name
                break
        else:
            if field in _REQUIRED_FIELDS:
                raise TaskSourceError(f"{where}: missing column for {field} (tried {', '.join(candidates)}; "
                                      f"map one with column_map={{{field!r}: COLUMN}}); "
                                      f"columns: {', '.join(available) or '(none)'}")
    return resolved


def _parse_tests(value: Any, where: str) -> tuple[TestCase, ...]:
    if value is None:
        return ()
    if isinstance(value, (bytes, str)):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise TaskSourceError(f"{where}: tests are not valid JSON ({exc})") from None
    if isinstance(value, Mapping) and "inputs" in value and "outputs" in value:
        if len(value["inputs"]) != len(value["outputs"]):
            raise TaskSourceError(f"{where}: {len(value['inputs'])} inputs but {len(value['outputs'])} outputs")
        value = [{"input": i, "output": o} for i, o in zip(value["inputs"], value["outputs"])]
    if not isinstance(value, (list, tuple)):
        raise TaskSourceError(f"{where}: tests must be a list of {{input, output}} objects, got {type(value).__name__}")
    return parse_test_cases(value, where)


def _instruction_text(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(m, Mapping) for m in value):
        # a chat prompt: the user turns make up the instruction
        parts = [str(m.get("content") or "") for m in value if m.get("role", "user") == "user"]
        if parts:
            return "\n\n".join(parts)
    raise TaskSourceError(f"{where}: instruction must be text (or a list of chat messages), got {type(value).__name__}")


def tasks_from_records(records: Iterable[Mapping[str, Any]], source: str, column_map: Mapping[str, str] | None = None,
                       where: str | None = None) -> list[Task]:
    """Turn rows (dicts) into tasks through a column map.

    Args:
        records: the rows, in source order.
        source: the ``source`` label of the tasks (``"file:PATH"``, ``"hf:ORG/NAME:SPLIT"``).
        column_map: ``{field: column}`` for fields named differently (fields: `DEFAULT_COLUMNS`).
        where: how to name the source in errors (default: `source`).

    Returns:
        The tasks, in row order.

    Raises:
        TaskSourceError: a required column is missing, a value is malformed, or ids repeat;
            the message names the source, the row and the column.
    """
    where = where or source
    rows = list(records)
    if not rows:
        raise TaskSourceError(f"{where}: no rows")
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    cols = _resolve_columns(columns, column_map, where)
    tasks: list[Task] = []
    seen: dict[str, int] = {}  # task id -> its row
    for n, row in enumerate(rows):
        at = f"{where}: row {n}"
        raw_instruction = row.get(cols["instruction"])
        if raw_instruction is None:
            raise TaskSourceError(f"{at}: column {cols['instruction']!r} is empty")
        instruction = _instruction_text(raw_instruction, f"{at}: column {cols['instruction']!r}")
        held_out = _parse_tests(row.get(cols["tests"]), f"{at}: column {cols['tests']!r}")
        if "visible_tests" in cols and row.get(cols["visible_tests"]) is not None:
            visible = _parse_tests(row[cols["visible_tests"]], f"{at}: column {cols['visible_tests']!r}")
        else:
            visible = tuple(parse_examples(instruction))
        raw_id = row.get(cols["task_id"]) if "task_id" in cols else None
        task_id = str(raw_id) if raw_id not in (None, "") else hashlib.sha1(instruction.encode()).hexdigest()[:12]
        if task_id in seen:
            raise TaskSourceError(f"{at}: task id {task_id!r} repeats row {seen[task_id]}")
        seen[task_id] = n
        title = row.get(cols["title"]) if "title" in cols else None
        solution = row.get(cols["reference_solution"]) if "reference_solution" in cols else None
        tasks.append(Task(
            task_id=task_id,
            title=str(title) if title else instruction.strip().split("\n", 1)[0][:80],
            instruction=instruction,
            visible_tests=visible,
            held_out_tests=held_out,
            reference_solution=solution if isinstance(solution, str) and solution.strip() else None,
            source=source,
            metadata={"row": n},
        ))
    return tasks


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskSourceError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise TaskSourceError(f"{path}:{lineno}: each line must be a JSON object")
            rows.append(row)
    return rows


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise TaskSourceError(f"{path}: cannot read parquet ({exc})") from None


def _read_with_datasets(name: str, split: str, where: str) -> list[dict[str, Any]]:
    import datasets

    try:
        path = Path(name)
        if path.is_dir() and ((path / "state.json").exists() or (path / "dataset_dict.json").exists()):
            loaded = datasets.load_from_disk(str(path))
            if isinstance(loaded, datasets.DatasetDict):
                if split not in loaded:
                    raise TaskSourceError(f"{where}: no split {split!r}; splits: {', '.join(loaded)}")
                loaded = loaded[split]
        else:
            loaded = datasets.load_dataset(name, split=split)
    except TaskSourceError:
        raise
    except Exception as exc:  # noqa: BLE001 - datasets raises many kinds (not found, offline, bad split)
        raise TaskSourceError(f"{where}: cannot load dataset ({type(exc).__name__}: {exc})") from None
    rows: list[dict[str, Any]] = loaded.to_list()
    return rows


def _split_suffix(text: str) -> tuple[str, str | None]:
    head, sep, tail = text.rpartition(":")
    if sep and head and tail and "/" not in tail and not os.path.exists(text):
        return head, tail
    return text, None


def load_task_source(source: str = BUILTIN_SOURCE, column_map: Mapping[str, str] | None = None) -> list[Task]:
    """Every task of a source, in source order.

    Args:
        source: ``builtin``, a file or folder path (``DIR:SPLIT`` for a split), or ``hf:ORG/NAME[:SPLIT]``.
        column_map: ``{field: column}`` for columns with other names (not used for ``builtin``).

    Returns:
        The tasks.

    Raises:
        TaskSourceError: the source cannot be read, lacks a required column, or is empty.
    """
    if source == BUILTIN_SOURCE:
        return builtin_tasks()
    if source == HARBOR_BUILTIN_SOURCE:
        return load_harbor_tasks(HARBOR_BUILTIN_DIR, HARBOR_BUILTIN_SOURCE)
    if source.startswith("hf:"):
        name, split = _split_suffix(source[3:])
        if not name or name.count("/") > 1:
            raise TaskSourceError(f"task source {source!r}: expected hf:ORG/NAME or hf:ORG/NAME:SPLIT")
        split = split or "train"
        label = f"hf:{name}:{split}"
        return tasks_from_records(_read_with_datasets(name, split, label), label, column_map)
    text = source[5:] if source.startswith("file:") else source
    path_text, split = _split_suffix(text)
    path = Path(path_text).expanduser()
    if not path.exists():
        raise TaskSourceError(f"task source {source!r}: no such file or folder {path} "
                              "(use builtin, a .jsonl/.parquet file, a folder, or hf:ORG/NAME[:SPLIT])")
    if is_harbor_task_set(path):
        return load_harbor_tasks(path)
    label = f"file:{path.resolve()}"
    if path.is_dir():
        rows = _read_with_datasets(str(path), split or "train", str(path))
    elif path.suffix in (".jsonl", ".json", ".ndjson"):
        rows = _read_jsonl(path)
    elif path.suffix == ".parquet":
        rows = _read_parquet(path)
    else:
        raise TaskSourceError(f"{path}: unknown task file type {path.suffix!r} (use .jsonl or .parquet)")
    return tasks_from_records(rows, label, column_map, where=str(path))


def load_tasks(source: str = BUILTIN_SOURCE, n_prompts: int = 64, seed: int = 0,
               column_map: Mapping[str, str] | None = None) -> list[Task]:
    """Load a source and pick ``n_prompts`` tasks, deterministically in ``seed``.

    The source order is shuffled with ``random.Random(seed)`` and the first ``n_prompts`` are kept;
    when the source has fewer, all of them are returned (never repeated). The same seed always
    gives the same tasks in the same order, so a task index means the same task across runs.

    Args:
        source: see `load_task_source`.
        n_prompts: how many tasks to keep (>= 1).
        seed: the dataset seed.
        column_map: ``{field: column}`` for file and Hub sources.

    Returns:
        The selected tasks, in selection order.

    Raises:
        ValueError: ``n_prompts`` is below 1.
        TaskSourceError: the source cannot be read.
    """
    if int(n_prompts) < 1:
        raise ValueError(f"n_prompts must be at least 1, got {n_prompts}")
    tasks = load_task_source(source, column_map)
    order = list(range(len(tasks)))
    random.Random(seed).shuffle(order)
    if n_prompts > len(tasks):
        log.info("task source %s has %d tasks (< n_prompts=%d); using all of them", source, len(tasks), n_prompts)
    return [tasks[i] for i in order[: int(n_prompts)]]


_WARNED_LEAKS: set[tuple[str, str]] = set()  # (source, task id) already warned of in this process
_WARNED_LEAKS_LOCK = threading.Lock()


def warn_of_held_out_leaks(task: Task) -> list[str]:
    """Log a warning, once per task per process, when a task's statement shows one of its held-out tests.

    A rollout on such a task earns its reward on what the agent was shown (`held_out_leaks`); the task
    is still used (the data is the user's). Episodes call this for the task they run.

    Args:
        task: the task a rollout is about to run.

    Returns:
        The problems found (empty for a clean task), whether or not they were logged this time.
    """
    problems = held_out_leaks(task)
    if problems:
        with _WARNED_LEAKS_LOCK:
            first = (task.source, task.task_id) not in _WARNED_LEAKS
            _WARNED_LEAKS.add((task.source, task.task_id))
        if first:
            for problem in problems:
                log.warning("%s (%s): its reward does not measure generalisation", problem, task.source)
    return problems


def select_task(tasks: list[Task], index: int) -> Task:
    """The task at an index, with a clear error outside the range.

    Args:
        tasks: the selected tasks (from `load_tasks`).
        index: the task index (negative indices are refused).

    Returns:
        The task.

    Raises:
        TaskIndexError: the index is outside ``0..N-1`` (the message names that range).
    """
    n = len(tasks)
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n:
        valid = f"0..{n - 1}" if n else "none (the task set is empty)"
        raise TaskIndexError(f"task index {index!r} is outside the task set; valid range: {valid} ({n} tasks)")
    return tasks[index]
