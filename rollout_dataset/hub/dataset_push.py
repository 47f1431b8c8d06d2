"""Append-safe publishing of a built dataset folder to the Hugging Face Hub.

`push` never deletes and never duplicates: it reads the repo's current state (the small `summary`
shards tell which rollout ids are there), uploads this folder's rows of NEW rollouts as shards
under fresh unique names (``data/<config>/<UTC stamp>-<uuid>.parquet``), rewrites README.md from
the union, adds the stored tokenizer (``tokenizer/``) when the repo has none (and refuses a repo
holding another tokenizer), and commits with ``parent_commit`` = the revision it read
(`rollout_dataset.hub.commits.commit_with_retry`). When another writer committed in between, the
Hub answers 412 (or 409) and the push plans again from the fresh state, so two processes pushing
at once both land. (`Dataset.push_to_hub` replaces a config's files on
each push, which is why it is not used here.)

The token goes to huggingface_hub only: it is never written to a file, logged, or put in an error
message (messages are scrubbed of it as well).
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rollout_dataset.builder.build import check_shards, dataset_rollout_ids, read_summary_rows
from rollout_dataset.builder.card import render_card
from rollout_dataset.builder.card_info import arrow_num_bytes, load_card_options
from rollout_dataset.builder.compaction import card_context, shard_rollout_ids
from rollout_dataset.builder.configs import CONFIG_NAMES, DEFAULT_CONFIG
from rollout_dataset.builder.tokenizer_files import TOKENIZER_DIR, tokenizer_uploads
from rollout_dataset.builder.writer import copy_filtered, shard_name
from rollout_dataset.errors import ArtifactError, PublishError
from rollout_dataset.hub.commits import (
    CommitPlan,
    RetryPolicy,
    check_repo_id,
    commit_with_retry,
    hub_errors,
    repo_file_errors,
)
from rollout_dataset.hub.plans import (
    CARD_PATH,
    config_bytes,
    config_shards,
    default_traces_repo,
    over_shard_limit,
    repo_file_sizes,
    shard_path,
)
from rollout_dataset.hub.remote_compaction import AUTO_COMPACT_SHARDS, compact_repo
from rollout_dataset.hub.trace_sessions import local_sessions, push_traces

__all__ = ["PushResult", "push"]

log = logging.getLogger(__name__)

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
        compacted: what the automatic compaction after the push did (a
            `rollout_dataset.builder.compaction.CompactResult`), if it ran.
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
            repo (`rollout_dataset.hub.compact_repo`, one more commit); default
            `rollout_dataset.hub.AUTO_COMPACT_SHARDS`; 0 turns it off. A failed compaction is
            logged, never fails the push (the rollouts have landed).

    Returns:
        A `PushResult`.

    Raises:
        ValueError: `repo_id` is not ``org/name``.
        ArtifactError: `dataset_dir` holds no built dataset, or one of its shards is not readable
            parquet (named; checked before any request).
        PublishError: the Hub refused (status and URL in the message, never the token), or
            `max_attempts` conflicts in a row.
        TokenizerMismatchError: the repo stores another tokenizer than the dataset (a ValueError).
    """
    from huggingface_hub import HfApi

    check_repo_id(repo_id)
    dataset_dir = Path(dataset_dir)
    if not list((dataset_dir / "data" / DEFAULT_CONFIG).glob("*.parquet")):
        raise ArtifactError(f"{dataset_dir}: no data/{DEFAULT_CONFIG}/*.parquet (build the dataset first)")
    check_shards(dataset_dir)  # a cut-short shard is named before any request (no repo, no sessions pushed)
    api = HfApi(endpoint=endpoint, token=token)
    result = PushResult(repo_id=repo_id)
    traces_repo = (traces_repo or default_traces_repo(repo_id)) if traces and local_sessions(dataset_dir) else None
    if traces_repo:
        check_repo_id(traces_repo, "traces repo id")
    local_ids = dataset_rollout_ids(dataset_dir)
    if traces_repo:  # first, so the card's link points at sessions that exist
        result.sessions_added, _ = push_traces(api, traces_repo, dataset_dir, dataset_repo=repo_id,
                                               private=private, max_attempts=max_attempts)
        result.traces_repo = traces_repo
    with hub_errors("push to", repo_id, api):
        result.url = str(api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True))
    with tempfile.TemporaryDirectory(prefix="rollout-push-") as tmp:
        def plan(info: Any, attempt: int) -> CommitPlan:
            return _plan_push(api, repo_id, info, dataset_dir, local_ids, template=template, traces_repo=traces_repo,
                              work=Path(tmp) / f"attempt-{attempt}")

        outcome = commit_with_retry(api, repo_id, plan, action="push to", policy=RetryPolicy(max_attempts),
                                    files_metadata=True)
    planned: _Planned = outcome.plan.detail
    result.attempts, result.commit = outcome.attempts, outcome.commit
    result.skipped, result.total_rollouts = planned.skipped, planned.total_rollouts
    if outcome.commit is None:
        log.info("%s: every rollout of %s is already in the repo; nothing to push", repo_id, dataset_dir)
        return result
    result.added, result.files = planned.added, planned.files
    log.info("%s: pushed %d rollout(s) (%d already there) in commit %s", repo_id, len(result.added),
             len(result.skipped), outcome.commit[:12])
    result.compacted = _auto_compact(api, repo_id, planned.repo_files, compact_above, template)
    return result


@dataclass
class _Planned:
    """What one push plan found and chose (the detail of its `CommitPlan`)."""

    added: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    total_rollouts: int = 0
    repo_files: list[str] = field(default_factory=list)  # the repo's paths once the commit lands


def _plan_push(api: Any, repo_id: str, info: Any, dataset_dir: Path, local_ids: set[str], *,
               template: str | Path | None, traces_repo: str | None, work: Path) -> CommitPlan:
    """The push commit on the revision `info`: the new rollouts' rows as fresh shards (written under
    `work`), the tokenizer when the repo has none, and the card of the union."""
    from huggingface_hub import CommitOperationAdd

    remote_files = repo_file_sizes(info)
    sizes = config_bytes(remote_files)
    remote_rows = []
    for path in config_shards(remote_files, DEFAULT_CONFIG):
        with repo_file_errors(path):
            table = pq.read_table(_download(api, repo_id, info, path))
        if "rollout_id" not in table.column_names:  # a parquet file of something else, put there by hand
            raise OSError(f"{path}: no rollout_id column (it holds {', '.join(table.column_names[:5])}), so it is "
                          "not a summary shard; nothing was committed: delete or replace that file in the repo")
        remote_rows.extend(table.to_pylist())
    remote_ids = {r["rollout_id"] for r in remote_rows}
    new_ids = local_ids - remote_ids
    planned = _Planned(skipped=sorted(local_ids & remote_ids), total_rollouts=len(remote_ids))
    if not new_ids:
        return CommitPlan(detail=planned)
    ops = []
    for config in CONFIG_NAMES:
        there = set(remote_ids)  # a row is pushed once: not when the repo or an earlier local shard has its rollout
        for shard in sorted((dataset_dir / "data" / config).glob("*.parquet")):
            name = shard_name()
            out = work / config / name
            try:
                ids = set(shard_rollout_ids(shard))
                rows = copy_filtered(shard, out, config, ids & there)
            except pa.ArrowException as exc:  # its footer read (check_shards), its pages did not
                raise ArtifactError(f"{shard}: not a readable parquet shard ({exc}); nothing was pushed") from None
            there |= ids
            if rows == 0 and (config_shards(remote_files, config) or config_shards(planned.files, config)):
                continue  # an empty shard only where the config would have none
            ops.append(CommitOperationAdd(path_in_repo=shard_path(config, name), path_or_fileobj=str(out)))
            planned.files.append(shard_path(config, name))
            sizes[config] += out.stat().st_size
    remote_tok, remote_tok_sha = f"{TOKENIZER_DIR}/tokenizer.json", None
    if remote_tok in remote_files:
        remote_tok_sha = hashlib.sha256(_download(api, repo_id, info, remote_tok).read_bytes()).hexdigest()
    for path_in_repo, local_file in tokenizer_uploads(dataset_dir, remote_tok_sha):
        ops.append(CommitOperationAdd(path_in_repo=path_in_repo, path_or_fileobj=str(local_file)))
        planned.files.append(path_in_repo)
    fresh: dict[str, dict[str, Any]] = {}  # each new rollout's first summary row, as its shards are pushed
    for row in read_summary_rows(dataset_dir):
        if row["rollout_id"] in new_ids:
            fresh.setdefault(row["rollout_id"], row)
    union = remote_rows + list(fresh.values())
    with repo_file_errors(CARD_PATH):
        card_text = _download(api, repo_id, info, CARD_PATH).read_text("utf-8") if CARD_PATH in remote_files else ""
    before = card_context(card_text)["arrow_bytes"] or {}
    arrow_bytes = {c: before.get(c, 0) + arrow_num_bytes(sorted((work / c).glob("*.parquet"))) for c in CONFIG_NAMES}
    readme = render_card(union, template=template, repo_id=repo_id, config_bytes=sizes, arrow_bytes=arrow_bytes,
                         traces_repo_id=traces_repo, options=load_card_options(dataset_dir)).encode("utf-8")
    ops.append(CommitOperationAdd(path_in_repo=CARD_PATH, path_or_fileobj=readme))
    planned.files.append(CARD_PATH)
    planned.added, planned.total_rollouts = sorted(new_ids), len(union)
    planned.repo_files = list(remote_files) + planned.files
    return CommitPlan(ops, f"Add {len(new_ids)} rollout(s)", detail=planned)


def _download(api: Any, repo_id: str, info: Any, path: str) -> Path:
    """A file of the revision `info` (huggingface_hub's cache)."""
    return Path(api.hf_hub_download(repo_id, path, repo_type="dataset", revision=info.sha))


def _auto_compact(api: Any, repo_id: str, repo_files: list[str], compact_above: int | None,
                  template: str | Path | None) -> Any:
    """Compact the repo when a config holds more than `compact_above` shards (see `push`)."""
    limit = AUTO_COMPACT_SHARDS if compact_above is None else compact_above
    most = over_shard_limit(repo_files, limit)
    if most is None:
        return None
    log.info("%s: %d shards in a config (more than %d); compacting", repo_id, most, limit)
    try:
        return compact_repo(repo_id, token=api.token, endpoint=api.endpoint, template=template)
    except (PublishError, OSError) as exc:
        log.warning("%s: the push landed, but compacting afterwards failed: %s", repo_id, exc)
        return None
