"""The scripted players of the built-in environments, registered with the local backend.

The backend's policy registry (`rollout_dataset.backend.policies`) is explicit: it holds `echo` and
`script` and whatever was registered. Each environment registers its own player when its policy
module is imported (`oracle` by `envs/coding/policy.py`, `crafter` by `envs/crafter/policy.py`);
the edges that build policies by name (the CLI, `capture`, `batch`, the demo) call
`register_builtin_policies()` first.
"""

from __future__ import annotations

__all__ = ["register_builtin_policies"]


def register_builtin_policies() -> None:
    """Register `oracle` (coding) and `crafter` with the backend's policy registry (idempotent)."""
    import rollout_dataset.envs.coding.policy  # noqa: F401 - registers `oracle`
    import rollout_dataset.envs.crafter.policy  # noqa: F401 - registers `crafter`
