"""Where the package's own shipped files are: one definition each, importing nothing of the package.

`TASK_PACKAGE_DIR` is the folder of the task package and its data (held-out tests, solutions,
`tasks/data/`): what an agent's sandbox root (`rollout_dataset.harness.external`) and its
`--sandbox-ro` paths (`rollout_dataset.sandbox.isolation`) must never hold.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["PACKAGE_DIR", "TASK_PACKAGE_DIR"]

#: the installed `rollout_dataset` folder.
PACKAGE_DIR = Path(__file__).resolve().parent

#: the task package and its data.
TASK_PACKAGE_DIR = PACKAGE_DIR / "tasks"
