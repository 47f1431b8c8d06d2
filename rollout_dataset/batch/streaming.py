"""Streaming pushes from a batch: publish finished rollouts every N, so a crash loses at most N.

`StreamingPusher` collects the artifact folders of rollouts as they finish; every `every` of them
it builds a small dataset of just those (in ``<batch>/.push-staging/``, wiped before each build)
and pushes it with `rollout_dataset.hub.push`, which appends and skips rollout ids the repo
already holds. That dedupe is what keeps the batch's final push of the whole `dataset/` and a
resumed batch duplicate-free: a rollout pushed by a stream push is skipped later, one whose push
was lost to a crash is still on disk and is pushed by the resumed batch.

The destination is explicit (a repo id); reading ``PUSH_TO_DATASET`` is the CLI's job.
"""

from __future__ import annotations

import logging
import shutil
from rollout_dataset.artifact_files import SUMMARY_FILE
from pathlib import Path
from typing import Any

__all__ = ["STAGING_DIR", "StreamingPusher"]

log = logging.getLogger(__name__)

STAGING_DIR = ".push-staging"  # under the batch folder; rebuilt for each stream push


class StreamingPusher:
    """Pushes finished rollouts to a Hub dataset repo every `every` rollouts.

    Args:
        batch_dir: the batch folder (holds the staging folder).
        repo_id: ``org/name`` of the dataset repo.
        every: rollouts per push (>= 1).
        private: make a NEW repo private (as `push`).

    Raises:
        ValueError: `every` is below 1.
    """

    def __init__(self, batch_dir: str | Path, repo_id: str, every: int, *, private: bool | None = None) -> None:
        if every < 1:
            raise ValueError(f"push_every={every}: must be >= 1")
        self.batch_dir = Path(batch_dir)
        self.repo_id = repo_id
        self.every = every
        self.private = private
        self.pending: list[Path] = []
        self.pushes: list[Any] = []
        self.failures: list[str] = []

    def add(self, artifact_dir: str | Path) -> Any:
        """Record a finished rollout; push when `every` are waiting.

        Args:
            artifact_dir: the rollout's artifact folder (skipped when it holds no summary.json).

        Returns:
            The `PushResult` when this call pushed, else None.
        """
        folder = Path(artifact_dir)
        if not (folder / SUMMARY_FILE).is_file():
            return None
        self.pending.append(folder)
        return self.flush() if len(self.pending) >= self.every else None

    def flush(self) -> Any:
        """Push the waiting rollouts now (nothing when none wait).

        A refused push is logged and its rollouts stay waiting for the next push (and the batch's
        final push of `dataset/` covers them too); nothing is dropped silently.

        Returns:
            The `PushResult`, or None when nothing was pushed.
        """
        if not self.pending:
            return None
        import rollout_dataset.hub as hub
        from rollout_dataset.builder import build
        from rollout_dataset.errors import RolloutDatasetError

        staging = self.batch_dir / STAGING_DIR
        shutil.rmtree(staging, ignore_errors=True)
        try:
            build(self.pending, staging, progress=False)
            result = hub.push(staging, self.repo_id, private=self.private)
        except (RolloutDatasetError, OSError) as exc:
            message = f"stream push of {len(self.pending)} rollout(s) to {self.repo_id} failed: {exc}"
            log.warning("%s; they are pushed with the next push", message)
            self.failures.append(message)
            return None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        log.info("%s: streamed %d rollout(s) (%d already there)", self.repo_id, len(result.added),
                 len(result.skipped))
        self.pending.clear()
        self.pushes.append(result)
        return result
