"""Append-safe publishing of a built dataset folder to the Hugging Face Hub.

`push` never deletes and never duplicates: it reads the repo's current state (the small `summary`
shards tell which rollout ids are there), uploads this folder's rows of NEW rollouts as shards
under fresh unique names (``data/<config>/<UTC stamp>-<uuid>.parquet``), rewrites README.md from
the union, adds the stored tokenizer (``tokenizer/``) when the repo has none (and refuses a repo
holding another tokenizer), and commits with ``parent_commit`` = the revision it read. When another writer
committed in between, the Hub answers 412 (or 409) and the push starts over from the fresh state,
so two processes pushing at once both land. (`Dataset.push_to_hub` replaces a config's files on
each push, which is why it is not used here.)

The token goes to huggingface_hub only: it is never written to a file, logged, or put in an error
message (messages are scrubbed of it as well).
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from rollout_dataset.builder.build import dataset_rollout_ids, read_summary_rows
from rollout_dataset.builder.card import read_card_metadata, render_card
from rollout_dataset.builder.card_info import arrow_num_bytes, load_card_options
from rollout_dataset.builder.configs import CONFIG_NAMES, DEFAULT_CONFIG
from rollout_dataset.builder.tokenizer_files import TOKENIZER_DIR, tokenizer_uploads
from rollout_dataset.builder.writer import copy_filtered, shard_name
from rollout_dataset.errors import ArtifactError, PublishError

__all__ = ["PushResult", "push"]

log = logging.getLogger(__name__)

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_CONFLICT = (409, 412)


@dataclass
class PushResult:
    """What `push` did.

    Attributes:
        repo_id: the dataset repo.
        commit: the commit sha created (None when there was nothing new to push).
        added: rollout ids uploaded by this push.
        skipped: rollout ids already in the repo (not uploaded again).
        files: paths uploaded (shards and README.md).
        total_rollouts: rollouts in the repo after the push.
        attempts: commit attempts (more than 1 when another writer committed in between).
        url: the repo's URL.
        traces_repo: the companion repo the sessions went to (None: none pushed).
        sessions_added: sessions uploaded to it by this push.
        compacted: what the automatic compaction after the push did (`rollout_dataset.compact`), if it ran.
    """

    repo_id: str
    commit: str | None = None
    added: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    total_rollouts: int = 0
    attempts: int = 0
    url: str = ""
    traces_repo: str | None = None
    sessions_added: int = 0
    compacted: Any = None


def _conflict_backoff(exc: Exception, attempt: int, max_attempts: int) -> float | None:
    """Seconds to wait before trying a commit again after `exc`, or None when it must be raised.

    A 409/412 means the repo moved since the revision read (another writer committed): the caller
    starts over from fresh state after an exponential, jittered delay, up to `max_attempts`.
    """
    if _status(exc) in _CONFLICT and attempt < max_attempts:
        return min(0.2 * 2 ** (attempt - 1), 5.0) * (0.5 + random.random())
    return None


def _scrub(text: str, token: str | None) -> str:
    for secret in (token, os.environ.get("HF_TOKEN"), os.environ.get("HUGGING_FACE_HUB_TOKEN")):
        if secret:
            text = text.replace(secret, "***")
    return re.sub(r"hf_[A-Za-z0-9]{8,}", "hf_***", text)


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def push(dataset_dir: str | Path, repo_id: str, *, token: str | None = None, private: bool | None = None,
         endpoint: str | None = None, template: str | Path | None = None, max_attempts: int = 8,
         traces_repo: str | None = None, traces: bool = True, compact_above: int | None = None) -> PushResult:
    """Push a dataset folder to a Hub dataset repo, appending.

    Args:
        dataset_dir: a folder written by `rollout_dataset.build`.
        repo_id: ``org/name`` of the dataset repo (created if missing).
        token: a Hub token (default: huggingface_hub's own lookup, e.g. ``HF_TOKEN``).
        private: make a NEW repo private (an existing repo keeps its visibility).
        endpoint: the Hub URL (default: ``HF_ENDPOINT`` or huggingface.co).
        template: the card template (default: the repo's `dataset_card.md`).
        max_attempts: commits tried before giving up on conflicting concurrent writers.
        traces_repo: the companion repo of the trace-viewer sessions (default ``<repo_id>-traces``).
        traces: push the sessions (``traces/sessions/*.jsonl``) to `traces_repo` first, and link it
            from the card; False pushes the parquet dataset only.
        compact_above: after a push that leaves more than this many shards in a config, compact the
            repo (`rollout_dataset.compact.compact_repo`, one more commit); default
            `rollout_dataset.compact.AUTO_COMPACT_SHARDS`; 0 turns it off. A failed compaction is
            logged, never fails the push (the rollouts have landed).

    Returns:
        A `PushResult`.

    Raises:
        ValueError: `repo_id` is not ``org/name``.
        ArtifactError: `dataset_dir` holds no built dataset.
        PublishError: the Hub refused (status and URL in the message, never the token), or
            `max_attempts` conflicts in a row.
        TokenizerMismatchError: the repo stores another tokenizer than the dataset (a ValueError).
    """
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError

    if not _REPO_ID.match(repo_id or ""):
        raise ValueError(f"repo id {repo_id!r} is not of the form org/name")
    dataset_dir = Path(dataset_dir)
    if not list((dataset_dir / "data" / DEFAULT_CONFIG).glob("*.parquet")):
        raise ArtifactError(f"{dataset_dir}: no data/{DEFAULT_CONFIG}/*.parquet (build the dataset first)")
    api = HfApi(endpoint=endpoint, token=token)
    result = PushResult(repo_id=repo_id)
    from rollout_dataset.publish_traces import default_traces_repo, local_sessions, push_traces

    traces_repo = (traces_repo or default_traces_repo(repo_id)) if traces and local_sessions(dataset_dir) else None
    if traces_repo and not _REPO_ID.match(traces_repo):
        raise ValueError(f"traces repo id {traces_repo!r} is not of the form org/name")
    local_ids = dataset_rollout_ids(dataset_dir)
    try:
        if traces_repo:  # first, so the card's link points at sessions that exist
            result.sessions_added, _ = push_traces(api, traces_repo, dataset_dir, dataset_repo=repo_id,
                                                   private=private, max_attempts=max_attempts)
            result.traces_repo = traces_repo
        url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        result.url = str(url)
        with tempfile.TemporaryDirectory(prefix="rollout-push-") as tmp:
            for attempt in range(1, max_attempts + 1):
                result.attempts = attempt
                info = api.dataset_info(repo_id, files_metadata=True)
                sha = info.sha
                remote_files = [s.rfilename for s in (info.siblings or [])]
                config_bytes = {c: sum(int(s.size or 0) for s in (info.siblings or [])
                                       if s.rfilename.startswith(f"data/{c}/") and s.rfilename.endswith(".parquet"))
                                for c in CONFIG_NAMES}
                remote_rows = []
                for path in sorted(f for f in remote_files
                                   if f.startswith(f"data/{DEFAULT_CONFIG}/") and f.endswith(".parquet")):
                    local = api.hf_hub_download(repo_id, path, repo_type="dataset", revision=sha)
                    remote_rows.extend(pq.read_table(local).to_pylist())
                remote_ids = {r["rollout_id"] for r in remote_rows}
                new_ids = local_ids - remote_ids
                result.skipped = sorted(local_ids & remote_ids)
                if not new_ids:
                    log.info("%s: every rollout of %s is already in the repo; nothing to push", repo_id, dataset_dir)
                    result.total_rollouts = len(remote_ids)
                    return result
                ops, files = [], []
                work = Path(tmp) / f"attempt-{attempt}"
                for config in CONFIG_NAMES:
                    has_remote = any(f.startswith(f"data/{config}/") and f.endswith(".parquet") for f in remote_files)
                    for shard in sorted((dataset_dir / "data" / config).glob("*.parquet")):
                        name = shard_name()
                        out = work / config / name
                        n = copy_filtered(shard, out, config, local_ids & remote_ids)
                        if n == 0 and (has_remote or _files_for(files, config)):
                            continue
                        path_in_repo = f"data/{config}/{name}"
                        ops.append(CommitOperationAdd(path_in_repo=path_in_repo, path_or_fileobj=str(out)))
                        files.append(path_in_repo)
                        config_bytes[config] += out.stat().st_size
                remote_tok, remote_tok_sha = f"{TOKENIZER_DIR}/tokenizer.json", None
                if remote_tok in remote_files:
                    got = Path(api.hf_hub_download(repo_id, remote_tok, repo_type="dataset", revision=sha))
                    remote_tok_sha = hashlib.sha256(got.read_bytes()).hexdigest()
                for path_in_repo, local_file in tokenizer_uploads(dataset_dir, remote_tok_sha):
                    ops.append(CommitOperationAdd(path_in_repo=path_in_repo, path_or_fileobj=str(local_file)))
                    files.append(path_in_repo)
                union = remote_rows + [r for r in read_summary_rows(dataset_dir) if r["rollout_id"] in new_ids]
                readme = render_card(union, template=template, repo_id=repo_id, config_bytes=config_bytes,
                                     arrow_bytes=_arrow_bytes(api, repo_id, sha, remote_files, work),
                                     traces_repo_id=traces_repo, options=load_card_options(dataset_dir)
                                     ).encode("utf-8")
                ops.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=readme))
                files.append("README.md")
                try:
                    commit = api.create_commit(repo_id, ops, repo_type="dataset", parent_commit=sha,
                                               commit_message=f"Add {len(new_ids)} rollout(s)")
                except HfHubHTTPError as exc:
                    delay = _conflict_backoff(exc, attempt, max_attempts)
                    if delay is not None:
                        log.info("%s: the repo moved since revision %s (HTTP %s); retrying in %.2fs with fresh "
                                 "state (attempt %d/%d)", repo_id, sha[:12], _status(exc), delay, attempt + 1,
                                 max_attempts)
                        time.sleep(delay)
                        continue
                    raise
                result.commit = commit.oid
                result.added = sorted(new_ids)
                result.files = files
                result.total_rollouts = len(union)
                log.info("%s: pushed %d rollout(s) (%d already there) in commit %s", repo_id, len(new_ids),
                         len(result.skipped), commit.oid[:12])
                result.compacted = _auto_compact(api, repo_id, remote_files + files, compact_above, token, template)
                return result
            raise PublishError(f"push to {repo_id}: {max_attempts} commits in a row conflicted with other writers")
    except HfHubHTTPError as exc:
        status = _status(exc)
        raise PublishError(_scrub(f"push to {repo_id} at {api.endpoint} failed (HTTP {status}): {exc}", token)) \
            from None
    except PublishError:
        raise
    except OSError as exc:
        if isinstance(exc, ArtifactError):
            raise
        raise PublishError(_scrub(f"push to {repo_id} at {api.endpoint} failed: {exc}", token)) from None


def _arrow_bytes(api: Any, repo_id: str, sha: str, remote_files: list[str], work: Path) -> dict[str, int]:
    """Arrow bytes per config after this push: the repo card's `num_bytes` + the new shards' (in `work`)."""
    before: dict[str, int] = {}
    if "README.md" in remote_files:
        text = Path(api.hf_hub_download(repo_id, "README.md", repo_type="dataset", revision=sha)).read_text("utf-8")
        for info in read_card_metadata(text).get("dataset_info") or []:
            if isinstance(info, dict) and info.get("splits"):
                before[info.get("config_name")] = int(info["splits"][0].get("num_bytes") or 0)
    return {c: before.get(c, 0) + arrow_num_bytes(sorted((work / c).glob("*.parquet"))) for c in CONFIG_NAMES}


def _auto_compact(api: Any, repo_id: str, repo_files: list[str], compact_above: int | None,
                  token: str | None, template: str | Path | None) -> Any:
    """Compact the repo when a config holds more than `compact_above` shards (see `push`)."""
    from rollout_dataset.compact import AUTO_COMPACT_SHARDS, compact_repo

    limit = AUTO_COMPACT_SHARDS if compact_above is None else compact_above
    counts = {c: sum(1 for f in repo_files if f.startswith(f"data/{c}/") and f.endswith(".parquet"))
              for c in CONFIG_NAMES}
    if not limit or max(counts.values()) <= limit:
        return None
    log.info("%s: %d shards in a config (more than %d); compacting", repo_id, max(counts.values()), limit)
    try:
        return compact_repo(repo_id, token=token, endpoint=api.endpoint, template=template)
    except (PublishError, OSError) as exc:
        log.warning("%s: the push landed, but compacting afterwards failed: %s", repo_id, exc)
        return None


def _files_for(files: list[str], config: str) -> bool:
    """Whether `files` already holds a shard of `config` (so an empty one is not needed)."""
    return any(f.startswith(f"data/{config}/") for f in files)
