"""The one way this package writes to a Hub repo: read the head, plan a commit on it, commit with
``parent_commit``, and start over from fresh state when another writer got there first.

Every writer here (`rollout_dataset.hub.dataset_push`, `rollout_dataset.hub.trace_sessions`,
`rollout_dataset.hub.remote_compaction`) goes through `commit_with_retry`, so the rules are
defined once:

- a repo id is ``org/name`` (`check_repo_id`), refused before any request;
- a commit names the revision it was planned on; the Hub answers 412 (or 409) when the repo moved
  since, and the writer reads the fresh head and plans again after a jittered exponential delay
  (`RetryPolicy`), up to ``max_attempts`` commits;
- any other refusal is not retried; every failure leaves as ONE `PublishError` naming the action,
  the repo, the endpoint and the HTTP status (`hub_errors`), with every token scrubbed from the
  text (`scrub_secrets`): the token goes to huggingface_hub only, never into a message or a log.
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from rollout_dataset.errors import PublishError, RolloutDatasetError

__all__ = ["CONFLICT_STATUSES", "RetryPolicy", "CommitPlan", "CommitOutcome", "check_repo_id", "scrub_secrets",
           "http_status", "hub_errors", "repo_file_errors", "commit_with_retry"]

log = logging.getLogger(__name__)

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_TOKEN_SHAPE = re.compile(r"hf_[A-Za-z0-9]{8,}")
CONFLICT_STATUSES = (409, 412)  # the repo moved since the revision a commit was planned on


@dataclass(frozen=True)
class RetryPolicy:
    """How often, and after how long, a commit refused for a moved repo is planned and tried again.

    Attributes:
        max_attempts: commits tried in all (1: never retried).
        first_delay_s: the delay before the second attempt; it doubles per attempt.
        max_delay_s: the cap of a delay (before jitter).
    """

    max_attempts: int = 8
    first_delay_s: float = 0.2
    max_delay_s: float = 5.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait after the failed `attempt` (1-based): exponential, capped, jittered x0.5-1.5.

        Args:
            attempt: the attempt that was refused.

        Returns:
            The delay in seconds.
        """
        return min(self.first_delay_s * 2 ** (attempt - 1), self.max_delay_s) * (0.5 + random.random())


@dataclass
class CommitPlan:
    """One commit to make on the revision a plan was made from.

    Attributes:
        operations: huggingface_hub ``CommitOperationAdd`` / ``CommitOperationDelete`` items; empty:
            nothing to commit.
        message: the commit message.
        detail: what the planner wants back with the outcome (counts, the rows it read, ...).
    """

    operations: list[Any] = field(default_factory=list)
    message: str = ""
    detail: Any = None


@dataclass
class CommitOutcome:
    """What `commit_with_retry` did.

    Attributes:
        commit: the sha of the commit made (None when the last plan had nothing to commit).
        attempts: plans made (one per revision read).
        info: the repo info (``huggingface_hub.DatasetInfo``) the last plan was made from.
        plan: the last plan.
    """

    commit: str | None
    attempts: int
    info: Any
    plan: CommitPlan


def check_repo_id(repo_id: str | None, what: str = "repo id") -> str:
    """Refuse a repo id that is not ``org/name`` (before any request is made).

    Args:
        repo_id: the id to check.
        what: how the message names it (``repo id``, ``traces repo id``).

    Returns:
        `repo_id`, unchanged.

    Raises:
        ValueError: `repo_id` is not ``org/name``.
    """
    if not _REPO_ID.match(repo_id or ""):
        raise ValueError(f"{what} {repo_id!r} is not of the form org/name")
    return repo_id  # type: ignore[return-value]


def scrub_secrets(text: str, token: str | None = None) -> str:
    """`text` with the token, the environment's Hub tokens and anything shaped like one replaced.

    Args:
        text: a message about to be raised or logged.
        token: the token in use (besides ``HF_TOKEN`` / ``HUGGING_FACE_HUB_TOKEN``).

    Returns:
        The scrubbed text.
    """
    for secret in (token, os.environ.get("HF_TOKEN"), os.environ.get("HUGGING_FACE_HUB_TOKEN")):
        if secret:
            text = text.replace(secret, "***")
    return _TOKEN_SHAPE.sub("hf_***", text)


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of a huggingface_hub error (None when it carries no response).

    Args:
        exc: the exception.

    Returns:
        The status code, or None.
    """
    return getattr(getattr(exc, "response", None), "status_code", None)


@contextmanager
def hub_errors(action: str, repo_id: str, api: Any) -> Iterator[None]:
    """Turn what a Hub call raises into one scrubbed `PublishError` (the package's own errors pass).

    Args:
        action: how the message starts (``push to``, ``compact``).
        repo_id: the repo acted on.
        api: the ``huggingface_hub.HfApi`` in use (its endpoint is named, its token scrubbed).

    Raises:
        PublishError: the Hub refused (``... at ENDPOINT failed (HTTP STATUS): ...``), or a file
            or connection error came up on the way.
    """
    from huggingface_hub.errors import HfHubHTTPError

    try:
        yield
    except RolloutDatasetError:
        raise
    except HfHubHTTPError as exc:
        raise PublishError(scrub_secrets(f"{action} {repo_id} at {api.endpoint} failed (HTTP {http_status(exc)}): "
                                         f"{exc}", api.token)) from None
    except OSError as exc:
        raise PublishError(scrub_secrets(f"{action} {repo_id} at {api.endpoint} failed: {exc}", api.token)) from None


@contextmanager
def repo_file_errors(*paths: str) -> Iterator[None]:
    """Name the repo files being read when they turn out not to be what they should (inside `hub_errors`).

    A shard in the repo that is not readable parquet (cut short, uploaded by hand) or a card that is
    not UTF-8 raises pyarrow's or the codec's own error, which names at most a file in
    huggingface_hub's cache; this turns it into an `OSError` naming the paths in the repo, which
    `hub_errors` makes the one `PublishError` line (action, repo, endpoint). Nothing is committed.

    Args:
        paths: the repo paths read within the block.

    Raises:
        OSError: a file read in the block is not readable parquet or not UTF-8 text.
    """
    import pyarrow as pa

    try:
        yield
    except (pa.ArrowException, UnicodeDecodeError) as exc:
        shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
        kind = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else "not a readable parquet shard"
        raise OSError(f"{shown}: {kind} ({exc}); nothing was committed: delete or replace that file in the "
                      "repo, then run again") from None


def commit_with_retry(api: Any, repo_id: str, plan: Callable[[Any, int], CommitPlan], *, action: str,
                      policy: RetryPolicy = RetryPolicy(), files_metadata: bool = False) -> CommitOutcome:
    """Read the repo's head, plan a commit on it, commit it with ``parent_commit``; again on a conflict.

    Args:
        api: a ``huggingface_hub.HfApi``.
        repo_id: ``org/name`` of an existing dataset repo.
        plan: called as ``plan(info, attempt)`` with the fresh repo info and the attempt (1-based);
            returns the `CommitPlan` (no operations: nothing to commit). It is called again on every
            attempt, so it must plan from `info` alone (files it writes go in a fresh folder).
        action: how messages name the operation (``push to``, ``compact``).
        policy: the retry policy.
        files_metadata: ask the repo info for file sizes (``siblings[].size``).

    Returns:
        A `CommitOutcome`.

    Raises:
        ValueError: ``policy.max_attempts`` is below 1.
        PublishError: every one of ``policy.max_attempts`` commits met a moved repo (the message
            names the repo, the attempts and the status), or the Hub refused otherwise (not
            retried; status and endpoint named, never the token).
        Exception: whatever `plan` raises that is not a Hub, file or connection error, unchanged.
    """
    from huggingface_hub.errors import HfHubHTTPError

    if policy.max_attempts < 1:
        raise ValueError(f"max_attempts={policy.max_attempts}: must be >= 1")
    attempt = 0
    with hub_errors(action, repo_id, api):
        while True:
            attempt += 1
            info = api.dataset_info(repo_id, files_metadata=files_metadata)
            planned = plan(info, attempt)
            if not planned.operations:
                return CommitOutcome(commit=None, attempts=attempt, info=info, plan=planned)
            try:
                made = api.create_commit(repo_id, planned.operations, repo_type="dataset", parent_commit=info.sha,
                                         commit_message=planned.message)
            except HfHubHTTPError as exc:
                status = http_status(exc)
                if status not in CONFLICT_STATUSES:
                    raise
                if attempt == policy.max_attempts:
                    raise PublishError(f"{action} {repo_id}: {attempt} commit(s) in a row were refused with HTTP "
                                       f"{status}: other writers kept committing first") from None
                delay = policy.delay(attempt)
                log.info("%s: the repo moved since revision %s (HTTP %s); planning again in %.2fs "
                         "(attempt %d/%d)", repo_id, info.sha[:12], status, delay, attempt + 1, policy.max_attempts)
                time.sleep(delay)
                continue
            return CommitOutcome(commit=made.oid, attempts=attempt, info=info, plan=planned)
