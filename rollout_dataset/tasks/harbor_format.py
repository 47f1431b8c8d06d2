"""Harbor task folders as a task source (`--tasks DIR`, `--tasks harbor-builtin`).

A Harbor task is a folder holding ``task.toml``, ``instruction.md`` (the task text),
``environment/`` (a ``Dockerfile``, or ``docker_image`` in ``task.toml``), ``tests/test.sh`` (writes
``/logs/verifier/reward.txt`` or ``reward.json``) and ``solution/``. `--tasks DIR` is a Harbor task
set when DIR is such a folder or holds such folders (sorted by name). Each becomes a `Task` whose
instruction is ``instruction.md``, with no held-out stdin/stdout tests (the folder's ``tests/`` are
the verifier) and `metadata`:

- ``harbor_dir``: the task folder (absolute);
- ``harbor``: the honoured ``task.toml`` fields: agent and verifier ``timeout_sec``, ``workdir``,
  ``network_mode``, ``cpus``, ``memory_mb``, ``docker_image``;
- ``held_out_text``: the text of every file under ``tests/`` (the leakage scan's needles). ``solution/``
  is never put where an agent runs (Harbor uploads it for its oracle agent only), and an agent that
  solves the task writes much of it itself, so its text is no evidence of a leak.

The built-in set (`HARBOR_BUILTIN_SOURCE`) ships three of the built-in coding tasks in this format.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from ..errors import TaskSourceError
from .model import Task, parse_examples

__all__ = ["HARBOR_BUILTIN_SOURCE", "HARBOR_BUILTIN_DIR", "is_harbor_task", "is_harbor_task_set",
           "load_harbor_tasks", "harbor_task_dir", "REQUIRED_FILES"]

#: `--tasks` value naming the shipped Harbor-format tasks
HARBOR_BUILTIN_SOURCE = "harbor-builtin"
#: where they are
HARBOR_BUILTIN_DIR = Path(__file__).resolve().parent / "data" / "harbor"
#: what a Harbor task folder must hold
REQUIRED_FILES = ("task.toml", "instruction.md", "tests/test.sh")
_HELD_OUT_LIMIT = 200_000  # characters of tests/ text kept for the leakage scan


def is_harbor_task(path: Path) -> bool:
    """Whether `path` is a Harbor task folder (it holds ``task.toml`` and ``instruction.md``)."""
    return path.is_dir() and (path / "task.toml").is_file() and (path / "instruction.md").is_file()


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
    fields = {"agent_timeout_sec": agent.get("timeout_sec"), "verifier_timeout_sec": verifier.get("timeout_sec", 600.0),
              "workdir": env.get("workdir"), "network_mode": env.get("network_mode", "public"),
              "cpus": env.get("cpus"), "memory_mb": env.get("memory_mb"), "docker_image": env.get("docker_image")}
    for name in ("agent_timeout_sec", "verifier_timeout_sec", "cpus", "memory_mb"):
        value = fields[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise TaskSourceError(f"{where}: {name.replace('_timeout_sec', '.timeout_sec')} must be a positive number, "
                                  f"got {value!r}")
    return fields


def _held_out_text(folder: Path) -> list[str]:
    texts: list[str] = []
    budget = _HELD_OUT_LIMIT
    for sub in ("tests",):
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
    for name in REQUIRED_FILES:
        if not (folder / name).is_file():
            raise TaskSourceError(f"{folder}: not a Harbor task: {name} is missing")
    try:
        config = tomllib.loads((folder / "task.toml").read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TaskSourceError(f"{folder / 'task.toml'}: not valid TOML ({exc})") from None
    instruction = (folder / "instruction.md").read_text(encoding="utf-8")
    if not instruction.strip():
        raise TaskSourceError(f"{folder / 'instruction.md'}: empty")
    return Task(task_id=folder.name, title=instruction.strip().split("\n", 1)[0][:80], instruction=instruction,
                visible_tests=tuple(parse_examples(instruction)), held_out_tests=(), reference_solution=None,
                source=label, metadata={"harbor_dir": str(folder.resolve()), "harbor": _fields(config, folder),
                                        "held_out_text": _held_out_text(folder)})


def load_harbor_tasks(path: Path, label: str | None = None) -> list[Task]:
    """The tasks of a Harbor task folder, or of a folder of them (sorted by folder name).

    Args:
        path: the folder.
        label: the tasks' ``source`` (default ``harbor:PATH``).

    Returns:
        The tasks.

    Raises:
        TaskSourceError: no task folder, or one without ``task.toml``/``instruction.md``/``tests/test.sh``,
            invalid TOML, a non-positive timeout or resource, a symlink leading out of the task folder.
    """
    path = Path(path)
    label = label or f"harbor:{path.resolve()}"
    if is_harbor_task(path):
        return [_load_one(path, label)]
    folders = sorted(p for p in path.iterdir() if p.is_dir() and (p / "task.toml").is_file()) if path.is_dir() else []
    if not folders:
        raise TaskSourceError(f"{path}: no Harbor task folder (a folder with task.toml and instruction.md) in it")
    return [_load_one(folder, label) for folder in folders]
