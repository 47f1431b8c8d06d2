"""Push one rollout's artifact folder to an explicit Hub dataset repo.

Called by the one capture pipeline for every environment (`rollout_dataset.capture.pipeline`): the
artifact folder is built into a dataset in a temporary folder (`rollout_dataset.builder.build`)
and handed to `rollout_dataset.hub.dataset_push.push`. The destination is explicit (the config's
``push_repo``); reading ``PUSH_TO_DATASET`` is the CLI's job (`rollout_dataset.cli.push_env`).
``HF_TOKEN`` and ``HF_ENDPOINT`` are read by huggingface_hub. The artifacts are already written,
so a failed push is reported (as the capture's ``push_error``), never raised.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

__all__ = ["push_artifacts"]

logger = logging.getLogger(__name__)


def push_artifacts(out_dir: str | os.PathLike[str], repo_id: str | None, private: bool | None = None) -> str | None:
    """Build a dataset from one artifact folder and push it to `repo_id`, if one is given.

    Args:
        out_dir: the rollout's artifact folder (written and validated).
        repo_id: the dataset repo ``org/name``; None pushes nothing.
        private: create a new repo private (None: the Hub's default).

    Returns:
        None when nothing was to be pushed or the push succeeded; else the error message (the
        repo id and the exception named, never the token).
    """
    if not repo_id:
        return None
    try:
        from rollout_dataset.builder import build
        from rollout_dataset.hub.dataset_push import push
    except ImportError as exc:
        return f"push to {repo_id} asked but the dataset builder/publisher is unavailable: {exc}"
    with tempfile.TemporaryDirectory(prefix="rollout-push-") as tmp:
        try:
            build([Path(out_dir)], Path(tmp) / "dataset", progress=False)
            push(Path(tmp) / "dataset", repo_id, private=private)
        except Exception as exc:  # noqa: BLE001 - the artifacts are written; a failed push is reported, not fatal
            return f"push to {repo_id} failed: {type(exc).__name__}: {exc}"
    logger.info("pushed %s to %s", out_dir, repo_id)
    return None
