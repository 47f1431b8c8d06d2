"""Append-safe push of a dataset's trace-viewer sessions to their companion Hub repo.

The Hub picks one loader per dataset repo, so the STS sessions (``traces/sessions/*.jsonl``,
written by `build`) live in a repo of their own, ``<repo>-traces`` by default, linked from the
dataset card. A push adds only sessions the repo lacks (a session's file name is its rollout id,
so it never changes), rewrites the companion README, and commits with ``parent_commit``: a
concurrent writer makes the Hub answer 409/412 and the push starts over from the fresh state.
Each session is validated again before upload (a file edited after the build is refused, named).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from rollout_dataset.builder.traces import SESSIONS_DIR, TRACES_DIR, traces_repo_card, validate_session
from rollout_dataset.errors import PublishError, SchemaValidationError

__all__ = ["default_traces_repo", "local_sessions", "push_traces"]

log = logging.getLogger(__name__)


def default_traces_repo(repo_id: str) -> str:
    """The companion repo of a dataset repo: ``<repo>-traces``."""
    return f"{repo_id}-traces"


def local_sessions(dataset_dir: str | Path) -> list[Path]:
    """The session files a dataset folder holds (sorted)."""
    return sorted((Path(dataset_dir) / TRACES_DIR / SESSIONS_DIR).glob("*.jsonl"))


def _validated(path: Path) -> None:
    try:
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except ValueError as exc:
        raise SchemaValidationError([(str(path), "$", f"not JSON lines: {exc}")]) from None
    validate_session(lines, str(path))


def push_traces(api: Any, traces_repo: str, dataset_dir: str | Path, *, dataset_repo: str | None = None,
                private: bool | None = None, max_attempts: int = 8) -> tuple[int, int]:
    """Add the dataset folder's sessions that the companion repo lacks.

    Args:
        api: a `huggingface_hub.HfApi`.
        traces_repo: ``org/name`` of the companion repo (created if missing).
        dataset_dir: the built dataset folder.
        dataset_repo: the parquet dataset's repo (linked from the companion README).
        private: make a NEW companion repo private.
        max_attempts: commits tried before giving up on concurrent writers.

    Returns:
        ``(added, total)`` sessions.

    Raises:
        SchemaValidationError: a session file does not validate (nothing is pushed).
        PublishError: `max_attempts` conflicts in a row.
        huggingface_hub.errors.HfHubHTTPError: the Hub refused (the caller names it).
    """
    from huggingface_hub import CommitOperationAdd
    from huggingface_hub.errors import HfHubHTTPError

    sessions = local_sessions(dataset_dir)
    if not sessions:
        return 0, 0
    for path in sessions:
        _validated(path)
    api.create_repo(traces_repo, repo_type="dataset", private=private, exist_ok=True)
    for attempt in range(1, max_attempts + 1):
        info = api.dataset_info(traces_repo)
        remote = {s.rfilename for s in (info.siblings or [])
                  if s.rfilename.startswith(f"{SESSIONS_DIR}/") and s.rfilename.endswith(".jsonl")}
        new = [p for p in sessions if f"{SESSIONS_DIR}/{p.name}" not in remote]
        total = len(remote) + len(new)
        if not new:
            return 0, total
        ops = [CommitOperationAdd(path_in_repo=f"{SESSIONS_DIR}/{p.name}", path_or_fileobj=str(p)) for p in new]
        ops.append(CommitOperationAdd(path_in_repo="README.md",
                                      path_or_fileobj=traces_repo_card(dataset_repo, total).encode("utf-8")))
        try:
            api.create_commit(traces_repo, ops, repo_type="dataset", parent_commit=info.sha,
                              commit_message=f"Add {len(new)} session(s)")
        except HfHubHTTPError as exc:
            from rollout_dataset.publish import _conflict_backoff

            delay = _conflict_backoff(exc, attempt, max_attempts)
            if delay is not None:
                time.sleep(delay)
                continue
            raise
        log.info("%s: pushed %d session(s), %d in total", traces_repo, len(new), total)
        return len(new), total
    raise PublishError(f"push to {traces_repo}: {max_attempts} commits in a row conflicted with other writers")
