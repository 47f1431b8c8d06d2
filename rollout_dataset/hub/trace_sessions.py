"""Append-safe push of a dataset's trace-viewer sessions to their companion Hub repo.

The Hub picks one loader per dataset repo, so the STS sessions (``traces/sessions/*.jsonl``,
written by `build`) live in a repo of their own, ``<repo>-traces`` by default, linked from the
dataset card. A push adds only sessions the repo lacks (a session's file name is its rollout id,
so it never changes) and rewrites the companion README, in one commit on the revision read
(`rollout_dataset.hub.commits.commit_with_retry`: a concurrent writer makes the push start over
from the fresh state). Each session is validated again before upload (a file edited after the
build is refused, named).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from rollout_dataset.builder.traces import SESSIONS_DIR, TRACES_DIR, traces_repo_card, validate_session
from rollout_dataset.errors import SchemaValidationError
from rollout_dataset.hub.commits import CommitPlan, RetryPolicy, commit_with_retry, hub_errors
from rollout_dataset.hub.plans import CARD_PATH, default_traces_repo, session_path, sessions_to_add

__all__ = ["default_traces_repo", "local_sessions", "push_traces"]

log = logging.getLogger(__name__)


def local_sessions(dataset_dir: str | Path) -> list[Path]:
    """The session files a dataset folder holds.

    Args:
        dataset_dir: the built dataset folder.

    Returns:
        The ``traces/sessions/*.jsonl`` paths, sorted.
    """
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
        PublishError: the Hub refused (the companion repo, endpoint and status named, never the
            token), or `max_attempts` conflicts in a row.
    """
    from huggingface_hub import CommitOperationAdd

    sessions = {p.name: p for p in local_sessions(dataset_dir)}
    if not sessions:
        return 0, 0
    for path in sessions.values():
        _validated(path)
    with hub_errors("push to", traces_repo, api):
        api.create_repo(traces_repo, repo_type="dataset", private=private, exist_ok=True)

    def plan(info: Any, attempt: int) -> CommitPlan:
        new, total = sessions_to_add(list(sessions), (s.rfilename for s in info.siblings or []))
        if not new:
            return CommitPlan(detail=(0, total))
        ops = [CommitOperationAdd(path_in_repo=session_path(n), path_or_fileobj=str(sessions[n])) for n in new]
        card = traces_repo_card(dataset_repo, total).encode("utf-8")
        ops.append(CommitOperationAdd(path_in_repo=CARD_PATH, path_or_fileobj=card))
        return CommitPlan(ops, f"Add {len(new)} session(s)", detail=(len(new), total))

    outcome = commit_with_retry(api, traces_repo, plan, action="push to", policy=RetryPolicy(max_attempts))
    added, total = outcome.plan.detail
    if outcome.commit is not None:
        log.info("%s: pushed %d session(s), %d in total", traces_repo, added, total)
    return added, total
