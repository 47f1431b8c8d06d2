"""Harbor task folders as a task source (`--tasks DIR`, `--tasks harbor-builtin`).

A Harbor task is a folder holding ``task.toml``, ``instruction.md`` (the task text),
``environment/`` (a ``Dockerfile``, or ``docker_image`` in ``task.toml``), ``tests/test.sh`` (writes
``/logs/verifier/reward.txt`` or ``reward.json``) and ``solution/``. A multi-step task lists its
steps in ``task.toml`` (``[[steps]] name = ...``), each with ``steps/NAME/instruction.md`` and
``steps/NAME/tests/test.sh`` (or the shared ``tests/test.sh``), and has no top-level ``instruction.md``.
`--tasks DIR` is a Harbor task set when DIR is such a folder or holds such folders (sorted by name;
a folder that does not load is skipped, named in one warning, and takes no index). Each becomes a
`Task` whose instruction is ``instruction.md`` (a multi-step task's: each step's, under a
``## Step NAME`` heading), with no held-out stdin/stdout tests (the folder's ``tests/`` are the
verifier) and `metadata`:

- ``harbor_dir``: the task folder (absolute);
- ``harbor``: the honoured ``task.toml`` fields: agent and verifier ``timeout_sec``, ``workdir``,
  ``network_mode`` (the legacy ``allow_internet = false`` read as ``no-network``, as Harbor does),
  ``cpus``, ``memory_mb``, ``gpus``, ``docker_image``, and ``steps`` (a multi-step task's step names);
- ``held_out_text``: the text of every file under ``tests/`` (the leakage scan's needles). ``solution/``
  is never put where an agent runs (Harbor uploads it for its oracle agent only), and an agent that
  solves the task writes much of it itself, so its text is no evidence of a leak.

The built-in set (`HARBOR_BUILTIN_SOURCE`) ships three of the built-in coding tasks in this format.
"""

from __future__ import annotations

import logging
import os
import threading
import tomllib
from pathlib import Path
from typing import Any

from ..errors import TaskSourceError
from .model import Task, parse_examples

log = logging.getLogger(__name__)

__all__ = ["HARBOR_BUILTIN_SOURCE", "HARBOR_BUILTIN_DIR", "is_harbor_task", "is_harbor_task_set",
           "load_harbor_tasks", "load_harbor_set", "harbor_task_dir", "REQUIRED_FILES"]

#: `--tasks` value naming the shipped Harbor-format tasks
HARBOR_BUILTIN_SOURCE = "harbor-builtin"
#: where they are
HARBOR_BUILTIN_DIR = Path(__file__).resolve().parent / "data" / "harbor"
#: what a Harbor task folder must hold
REQUIRED_FILES = ("task.toml", "instruction.md", "tests/test.sh")
_HELD_OUT_LIMIT = 200_000  # characters of tests/ text kept for the leakage scan


def is_harbor_task(path: Path) -> bool:
    """Whether `path` is a Harbor task folder: it holds ``task.toml`` and ``instruction.md`` or ``steps/``
    (a multi-step task), or ``task.toml`` and ``environment/`` or ``tests/`` (a broken one, refused by name)."""
    if not (path.is_dir() and (path / "task.toml").is_file()):
        return False
    return any((path / name).exists() for name in ("instruction.md", "steps", "environment", "tests"))


def is_harbor_task_set(path: Path) -> bool:
    """Whether `path` is a Harbor task folder or a folder of them."""
    return is_harbor_task(path) or (path.is_dir() and any(is_harbor_task(p) for p in path.iterdir()))


def harbor_task_dir(task: Any) -> Path | None:
    """The Harbor task folder of a `Task`, or None for any other task."""
    value = (getattr(task, "metadata", None) or {}).get("harbor_dir")
    return Path(value) if value else None


def _fields(config: dict[str, Any], where: Path) -> dict[str, Any]:
    env = config.get("environment") or {}
    agent = config.get("agent") or {}
    verifier = config.get("verifier") or {}
    from ..harbor.environments import network_mode_of

    network = network_mode_of(env)  # network_mode, else Harbor's legacy allow_internet
    fields = {"agent_timeout_sec": agent.get("timeout_sec"), "verifier_timeout_sec": verifier.get("timeout_sec", 600.0),
              "workdir": env.get("workdir"), "network_mode": network,
              "cpus": env.get("cpus"), "memory_mb": env.get("memory_mb"), "docker_image": env.get("docker_image")}
    gpus = env.get("gpus")
    if gpus:
        fields["gpus"] = gpus
    steps = _step_names(config, where)
    if steps:
        fields["steps"] = steps
    for name in ("agent_timeout_sec", "verifier_timeout_sec", "cpus", "memory_mb"):
        value = fields[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise TaskSourceError(f"{where}: {name.replace('_timeout_sec', '.timeout_sec')} must be a positive number, "
                                  f"got {value!r}")
    return fields


def _step_names(config: dict[str, Any], where: Path) -> list[str]:
    """A multi-step task's step names (``[[steps]]``, in order), empty for a single-step task."""
    steps = config.get("steps")
    if steps is None:
        return []
    if not isinstance(steps, list) or not all(isinstance(s, dict) and isinstance(s.get("name"), str) and s["name"]
                                              for s in steps):
        raise TaskSourceError(f"{where / 'task.toml'}: steps must be [[steps]] tables, each with a name")
    names = [s["name"] for s in steps]
    for name in names:
        if "/" in name or name in (".", "..") or name.startswith("."):
            raise TaskSourceError(f"{where / 'task.toml'}: step name {name!r} is not a folder name under steps/")
    return names


def _held_out_text(folder: Path) -> list[str]:
    texts: list[str] = []
    budget = _HELD_OUT_LIMIT
    subs = ["tests", *(str(p.relative_to(folder)) for p in sorted(folder.glob("steps/*/tests")))]
    for sub in subs:
        for file in sorted((folder / sub).rglob("*")) if (folder / sub).is_dir() else []:
            if file.is_file() and budget > 0:
                text = file.read_text(encoding="utf-8", errors="replace")[:budget]
                budget -= len(text)
                texts.append(text)
    return texts


def _escaping_link(folder: Path) -> str | None:
    """The first symlink in a task folder that leads out of it (or nowhere), as a refusal, else None.

    Its files go to the agent (``instruction.md``), into the dataset and into the environment (Harbor
    uploads ``tests/`` and ``solution/``, copying what links point at): a link to a host file would
    carry that file's content there.
    """
    root = folder.resolve()
    for parent, dirs, files in os.walk(folder, followlinks=False):
        for name in sorted(dirs + files):
            path = Path(parent) / name
            if not path.is_symlink():
                continue
            try:
                target = path.resolve(strict=True)
            except (OSError, RuntimeError):
                return f"{path}: a symlink to {os.readlink(path)!r}, which does not resolve; refused"
            if not target.is_relative_to(root):
                return (f"{path}: a symlink to {str(target)!r}, outside the task folder; refused (a task's files "
                        "are read only from inside it)")
    return None


def _load_one(folder: Path, label: str) -> Task:
    problem = _escaping_link(folder)
    if problem is not None:
        raise TaskSourceError(problem)
    if not (folder / "task.toml").is_file():
        raise TaskSourceError(f"{folder}: not a Harbor task: task.toml is missing")
    try:
        config = tomllib.loads((folder / "task.toml").read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TaskSourceError(f"{folder / 'task.toml'}: not valid TOML ({exc})") from None
    fields = _fields(config, folder)
    steps = fields.get("steps") or []
    if steps:
        instruction = _multi_step_instruction(folder, steps)
    else:
        if not (folder / "instruction.md").is_file() and (folder / "steps").is_dir():
            raise TaskSourceError(f"{folder}: not a Harbor task: it has a steps/ folder but task.toml lists no "
                                  "[[steps]] (a multi-step task names each step: [[steps]] name = ...), and no "
                                  "instruction.md")
        for name in REQUIRED_FILES:
            if not (folder / name).is_file():
                raise TaskSourceError(f"{folder}: not a Harbor task: {name} is missing")
        instruction = (folder / "instruction.md").read_text(encoding="utf-8")
        if not instruction.strip():
            raise TaskSourceError(f"{folder / 'instruction.md'}: empty")
    first = instruction.strip().split("\n", 1)[0] if not steps else f"{len(steps)}-step task: {folder.name}"
    return Task(task_id=folder.name, title=first[:80], instruction=instruction,
                visible_tests=tuple(parse_examples(instruction)), held_out_tests=(), reference_solution=None,
                source=label, metadata={"harbor_dir": str(folder.resolve()), "harbor": fields,
                                        "held_out_text": _held_out_text(folder)})


def _multi_step_instruction(folder: Path, steps: list[str]) -> str:
    """A multi-step task's instructions, each under a ``## Step NAME`` heading (each step's folder checked
    as Harbor checks it: its ``instruction.md``, and a ``tests/test.sh`` of its own or the shared one)."""
    parts = []
    for name in steps:
        step = folder / "steps" / name
        if not (step / "instruction.md").is_file():
            raise TaskSourceError(f"{folder}: multi-step Harbor task: step {name!r} has no steps/{name}/instruction.md")
        if not (step / "tests" / "test.sh").is_file() and not (folder / "tests" / "test.sh").is_file():
            raise TaskSourceError(f"{folder}: multi-step Harbor task: step {name!r} has no steps/{name}/tests/test.sh "
                                  "and there is no shared tests/test.sh")
        text = (step / "instruction.md").read_text(encoding="utf-8")
        if not text.strip():
            raise TaskSourceError(f"{step / 'instruction.md'}: empty")
        parts.append(f"## Step {name}\n\n{text.strip()}\n")
    return "\n".join(parts)


_WARNED_SKIPS: set[str] = set()  # folders already named in a warning by this process
_WARNED_SKIPS_LOCK = threading.Lock()


def load_harbor_set(path: Path, label: str | None = None) -> tuple[list[Task], list[str]]:
    """The tasks of a Harbor task folder, or of a folder of them (sorted by folder name), and the
    folders of a set that do not load.

    Args:
        path: the folder.
        label: the tasks' ``source`` (default ``harbor:PATH``).

    Returns:
        ``(tasks, skipped)``: `skipped` holds one line per folder of the set that does not load, naming
        it and why (the other folders keep loading; a skipped folder takes no task index).

    Raises:
        TaskSourceError: `path` is a task folder that does not load, or a set none of whose folders
            load (the first reason named), or no task folder at all.
    """
    path = Path(path)
    label = label or f"harbor:{path.resolve()}"
    if is_harbor_task(path):
        return [_load_one(path, label)], []
    folders = sorted(p for p in path.iterdir() if p.is_dir() and (p / "task.toml").is_file()) if path.is_dir() else []
    if not folders:
        raise TaskSourceError(f"{path}: no Harbor task folder (a folder with task.toml and instruction.md) in it")
    tasks: list[Task] = []
    skipped: list[str] = []
    for folder in folders:
        try:
            tasks.append(_load_one(folder, label))
        except (TaskSourceError, OSError, UnicodeDecodeError) as exc:
            skipped.append(f"skipped {folder}: {exc}" if str(folder) not in str(exc) else f"skipped: {exc}")
    if not tasks:
        raise TaskSourceError(f"{path}: none of its {len(folders)} Harbor task folders loads ({skipped[0]})")
    return tasks, skipped


def load_harbor_tasks(path: Path, label: str | None = None) -> list[Task]:
    """The tasks of a Harbor task folder, or of a folder of them (`load_harbor_set`); each folder of a
    set that does not load is named in one warning (once per process) and skipped.

    Args:
        path: the folder.
        label: the tasks' ``source`` (default ``harbor:PATH``).

    Returns:
        The tasks that load, in folder-name order.

    Raises:
        TaskSourceError: a single task folder without ``task.toml``/``instruction.md``/``tests/test.sh``
            (or, multi-step, a step's ``instruction.md`` or test), invalid TOML, a non-positive timeout or
            resource, a symlink leading out of the task folder; a set none of whose folders load.
    """
    tasks, skipped = load_harbor_set(path, label)
    for line in skipped:
        with _WARNED_SKIPS_LOCK:
            first = line not in _WARNED_SKIPS
            _WARNED_SKIPS.add(line)
        if first:
            log.warning("%s", line)
    return tasks
