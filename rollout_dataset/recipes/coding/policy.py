"""The coding environment's scripted player: the local backend's `oracle` policy, registered on import.

The oracle (`rollout_dataset.backend.oracle.OraclePolicy`) knows no task set; this module gives it
the built-in one (`rollout_dataset.tasks.find_builtin_task_by_instruction`), so the backend never
imports `tasks`. Imported at the edges (CLI, capture, batch) through
`rollout_dataset.envs.registry.register_builtin_policies()`.
"""

from __future__ import annotations

from typing import Any

from rollout_dataset.backend.oracle import OraclePolicy
from rollout_dataset.backend.policies import register_policy

__all__ = ["find_builtin_task", "make_oracle"]


def find_builtin_task(instruction: str) -> Any:
    """The built-in coding task whose statement is `instruction`.

    Args:
        instruction: the text of a user message.

    Returns:
        The `Task`, or None when no built-in task has that statement.
    """
    from rollout_dataset.tasks import find_builtin_task_by_instruction

    return find_builtin_task_by_instruction(instruction)


def make_oracle(**kwargs: Any) -> OraclePolicy:
    """The `oracle` policy over the built-in task set.

    Args:
        **kwargs: `OraclePolicy`'s keywords (`p_wrong`, `p_fix`); others are ignored.

    Returns:
        An `OraclePolicy` that recognises the built-in tasks.
    """
    kwargs.pop("find_task", None)
    return OraclePolicy(find_task=find_builtin_task, **kwargs)


register_policy("oracle", make_oracle)
