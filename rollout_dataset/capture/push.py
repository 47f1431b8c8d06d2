"""Push one rollout's artifact folder to the Hub when ``PUSH_TO_DATASET`` asks for it.

Shared by every capture (`capture_rollout` for coding, `run_crafter_rollout` for Crafter): the
artifact folder is built into a dataset in a temporary folder (`rollout_dataset.builder.build`)
and handed to `rollout_dataset.publish.maybe_push_from_env`, which reads ``PUSH_TO_DATASET``,
``HF_TOKEN``, ``PUSH_PRIVATE`` and ``HF_ENDPOINT``. The artifacts are already written, so a failed
push is reported (as the capture's ``push_error``), never raised.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

__all__ = ["push_wanted", "push_artifacts_from_env"]

logger = logging.getLogger(__name__)


def push_wanted(push: bool | None) -> bool:
    """Whether a capture pushes.

    Args:
        push: the capture's setting; None reads the environment (``PUSH_TO_DATASET`` set and not empty).

    Returns:
        True when the capture should push.
    """
    return push if push is not None else bool(os.environ.get("PUSH_TO_DATASET", "").strip())


def push_artifacts_from_env(out_dir: str | os.PathLike[str], push: bool | None = None) -> str | None:
    """Build a dataset from one artifact folder and push it to ``PUSH_TO_DATASET``, if wanted.

    Args:
        out_dir: the rollout's artifact folder (written and validated).
        push: True/False to force; None: push when ``PUSH_TO_DATASET`` is set.

    Returns:
        None when nothing was to be pushed or the push succeeded; else the error message (the
        repo id and the exception named, never the token).
    """
    if not push_wanted(push):
        return None
    try:
        from rollout_dataset.builder import build
        from rollout_dataset.publish import maybe_push_from_env
    except ImportError as exc:
        return f"PUSH_TO_DATASET is set but the dataset builder/publisher is unavailable: {exc}"
    with tempfile.TemporaryDirectory(prefix="rollout-push-") as tmp:
        try:
            build([Path(out_dir)], Path(tmp) / "dataset", progress=False)
            pushed = maybe_push_from_env(Path(tmp) / "dataset")
        except Exception as exc:  # the artifacts are written; a failed push is reported, not fatal
            return f"push to {os.environ.get('PUSH_TO_DATASET')} failed: {type(exc).__name__}: {exc}"
    if pushed is not None:
        logger.info("pushed %s to %s", out_dir, os.environ.get("PUSH_TO_DATASET"))
    return None
