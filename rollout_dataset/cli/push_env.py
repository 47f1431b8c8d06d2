"""Where a command pushes: read from ``PUSH_TO_DATASET`` / ``PUSH_PRIVATE`` (the CLI's job only).

Library code takes an explicit destination (``push_repo``/``push_private`` of `CaptureConfig`,
`CrafterRolloutConfig` and `BatchConfig`, or `rollout_dataset.hub.push`); only the entry points
(`rollout_dataset.cli`, `rollout_dataset.demo`) read the environment, through this module.
"""

from __future__ import annotations

import os
from pathlib import Path

from rollout_dataset.hub import PushResult, push

__all__ = ["push_destination_from_env", "maybe_push_from_env"]


def push_destination_from_env() -> tuple[str | None, bool | None]:
    """The push destination the environment asks for.

    Returns:
        ``(repo_id, private)``: the repo id of ``PUSH_TO_DATASET`` (None when unset or empty) and
        True when ``PUSH_PRIVATE`` is ``1``/``true``/``yes`` (else None: the repo's own setting).
    """
    repo_id = os.environ.get("PUSH_TO_DATASET", "").strip() or None
    private = True if os.environ.get("PUSH_PRIVATE", "").strip().lower() in ("1", "true", "yes") else None
    return repo_id, private


def maybe_push_from_env(dataset_dir: str | Path) -> PushResult | None:
    """Push a built dataset when ``PUSH_TO_DATASET=org/name`` is set (build and demo call it at the end).

    ``HF_TOKEN`` (read by huggingface_hub) is the token, ``PUSH_PRIVATE=1`` makes a new repo private,
    ``HF_ENDPOINT`` (read by huggingface_hub) picks the Hub.

    Args:
        dataset_dir: the built dataset folder.

    Returns:
        The `PushResult`, or None when ``PUSH_TO_DATASET`` is not set.

    Raises:
        PublishError: as `rollout_dataset.hub.push`.
    """
    repo_id, private = push_destination_from_env()
    if repo_id is None:
        return None
    return push(dataset_dir, repo_id, private=private)
