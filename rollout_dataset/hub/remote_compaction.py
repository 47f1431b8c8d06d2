"""Compaction of a Hub dataset repo: its small parquet shards merged per config in ONE commit.

The merge is the builder's (`rollout_dataset.builder.compaction`: the same grouping, writer and
duplicate rule as a local compaction); what this module adds is the remote side. Only shards that
get merged are downloaded (plus the small summary shards, for the card). The commit deletes the
merged shards and adds their replacements and the re-rendered card, on the revision it read
(`rollout_dataset.hub.commits.commit_with_retry`): when a pusher committed in between, the Hub
answers 412 (or 409) and compaction plans again from the fresh state, so a racing pusher loses
nothing. `push` calls `compact_repo` on its own once a config holds more than
`AUTO_COMPACT_SHARDS` shards.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rollout_dataset.builder.audit_card import AUDIT_CONFIG, KeptAudit, audit_rows, audit_section
from rollout_dataset.builder.card import render_card
from rollout_dataset.builder.card_info import arrow_num_bytes
from rollout_dataset.builder.compaction import (
    DEFAULT_TARGET_BYTES,
    CompactResult,
    card_context,
    duplicate_drops,
    merge_shards,
    merged_shard_name,
    shard_rollout_ids,
)
from rollout_dataset.builder.configs import CONFIG_NAMES, DEFAULT_CONFIG
from rollout_dataset.hub.commits import CommitPlan, RetryPolicy, check_repo_id, commit_with_retry, repo_file_errors
from rollout_dataset.hub.plans import CARD_PATH, config_bytes, config_shards, merge_groups, repo_file_sizes, shard_path

__all__ = ["AUTO_COMPACT_SHARDS", "compact_repo"]

log = logging.getLogger(__name__)

AUTO_COMPACT_SHARDS = 64  # `push` compacts the repo when a config holds more shards than this


def compact_repo(repo_id: str, *, token: str | None = None, endpoint: str | None = None,
                 target_bytes: int = DEFAULT_TARGET_BYTES, template: str | Path | None = None,
                 max_attempts: int = 8) -> CompactResult:
    """Merge a Hub dataset repo's small shards in ONE commit (deletes + adds) on the revision read.

    Duplicate rollouts are dropped among the merged shards (`push` never writes duplicates, so
    shards left alone hold none).

    Args:
        repo_id: ``org/name`` of the dataset repo.
        token: a Hub token (default: huggingface_hub's own lookup, e.g. ``HF_TOKEN``).
        endpoint: the Hub URL (default: ``HF_ENDPOINT`` or huggingface.co).
        target_bytes: the size goal of a merged shard (parquet bytes).
        template: the card template (default: the builder's).
        max_attempts: commits tried before giving up on conflicting concurrent writers.

    Returns:
        A `CompactResult` (``commit`` None when there was nothing to merge).

    Raises:
        ValueError: `repo_id` is not ``org/name`` or `target_bytes` is not positive.
        PublishError: the Hub refused (status and URL in the message, never the token), or
            `max_attempts` conflicts in a row.
    """
    from huggingface_hub import HfApi

    check_repo_id(repo_id)
    if target_bytes <= 0:
        raise ValueError(f"target_bytes={target_bytes}: must be > 0")
    api = HfApi(endpoint=endpoint, token=token)
    with tempfile.TemporaryDirectory(prefix="rollout-compact-") as tmp:
        def plan(info: Any, attempt: int) -> CommitPlan:
            return _plan_compaction(api, repo_id, info, target_bytes, template, Path(tmp) / f"attempt-{attempt}")

        outcome = commit_with_retry(api, repo_id, plan, action="compact", policy=RetryPolicy(max_attempts),
                                    files_metadata=True)
    result: CompactResult = outcome.plan.detail
    result.attempts, result.commit = outcome.attempts, outcome.commit
    if outcome.commit is None:
        log.info("%s: nothing to compact (no two consecutive shards under the target)", repo_id)
    else:
        log.info("%s: compacted %s in commit %s", repo_id,
                 ", ".join(f"{c} {result.shards_before[c]}->{result.shards_after[c]}"
                           for c in CONFIG_NAMES if result.shards_before[c] != result.shards_after[c]),
                 outcome.commit[:12])
    return result


def _plan_compaction(api: Any, repo_id: str, info: Any, target_bytes: int, template: str | Path | None,
                     work: Path) -> CommitPlan:
    """The compaction commit of the revision `info` (merged shards written under `work`).

    Returns:
        The `CommitPlan` (no operations when nothing is to be merged); its detail is the
        `CompactResult` so far.
    """
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    files = repo_file_sizes(info)
    groups_by_config = merge_groups(files, target_bytes)
    result = CompactResult(target=repo_id)
    result.shards_before = {c: sum(len(g) for g in groups) for c, groups in groups_by_config.items()}
    result.shards_after = {c: len(groups) for c, groups in groups_by_config.items()}
    result.duplicate_rows = {c: 0 for c in CONFIG_NAMES}
    if result.shards_before == result.shards_after:
        return CommitPlan(detail=result)

    def download(path: str) -> Path:
        return Path(api.hf_hub_download(repo_id, path, repo_type="dataset", revision=info.sha))

    ops: list[Any] = []
    sizes = config_bytes(files)
    summary_tables: list[pa.Table] = []
    arrow_delta = {c: 0 for c in CONFIG_NAMES}  # Arrow bytes of merged shards minus their inputs'
    for config, groups in groups_by_config.items():
        for paths in groups:
            if len(paths) == 1:
                if config == DEFAULT_CONFIG:  # a summary shard left alone: read for the card only
                    with repo_file_errors(paths[0]):
                        summary_tables.append(pq.read_table(str(download(paths[0]))))
                continue
            local = [download(p) for p in paths]
            name = merged_shard_name(Path(paths[0]).name)
            out = work / config / name
            ids = []
            for path, shard in zip(paths, local):  # an unreadable shard is named alone
                with repo_file_errors(path):
                    ids.append(shard_rollout_ids(shard))
            with repo_file_errors(*paths):
                _, dropped = merge_shards(config, local, duplicate_drops(ids), out)
            result.duplicate_rows[config] += dropped
            sizes[config] += out.stat().st_size - sum(files[p] for p in paths)
            arrow_delta[config] += arrow_num_bytes([out]) - arrow_num_bytes(local)
            if config == DEFAULT_CONFIG:
                summary_tables.append(pq.read_table(str(out)))
            ops += [CommitOperationDelete(path_in_repo=p) for p in paths]
            ops.append(CommitOperationAdd(path_in_repo=shard_path(config, name), path_or_fileobj=str(out)))
    rows = [r for t in summary_tables for r in t.to_pylist()]
    context: dict[str, Any] = {}
    with repo_file_errors(CARD_PATH):
        card_text = download(CARD_PATH).read_text(encoding="utf-8") if CARD_PATH in files else None
    if card_text is not None:
        context = card_context(card_text)
        if context["arrow_bytes"]:
            context["arrow_bytes"] = {c: n + arrow_delta[c] for c, n in context["arrow_bytes"].items()}
    # an `audit` config uploaded to the repo by hand keeps its YAML entry and card section, as a local
    # compaction keeps them (its shards are left alone; their footers give the audited rollouts)
    audit_paths = config_shards(files, AUDIT_CONFIG)
    if audit_paths:
        with repo_file_errors(*audit_paths):
            context["audit"] = KeptAudit(audit_section(card_text)[1] if card_text else None,
                                         audit_rows(download(p) for p in audit_paths))
    readme = render_card(rows, template=template, repo_id=repo_id, config_bytes=sizes, **context)
    ops.append(CommitOperationAdd(path_in_repo=CARD_PATH, path_or_fileobj=readme.encode("utf-8")))
    return CommitPlan(ops, "Compact shards", detail=result)
