"""Compaction: merge a dataset's small parquet shards into shards of about a target size, per config.

Every `push` and every `build` adds one shard per config, so a run that pushes every step leaves
thousands of small files per config, which slows `load_dataset` and the Hub's viewer and meets
the Hub's per-folder file-count and commit-rate limits. Compaction merges runs of consecutive small
shards (in name order, which is time order) into one shard each:

- rows keep their order: shards are read in name order and row group by row group, and a merged
  shard is named with the timestamp of its first input, so it sorts where its inputs were;
- the schema, compression, page index and row-group bounds are the builder's own
  (`rollout_dataset.builder.writer.ConfigWriter` writes every merged shard);
- every rollout stays exactly once: rows of a rollout id already seen in an earlier shard of the
  config are dropped (as `push` drops rollouts the repo already holds);
- shards at or above the target size are left as they are (locally, unless they hold duplicates).

Locally (`compact_local`) each config's folder is rebuilt in a staging folder next to it
(untouched shards hard-linked, merged shards written and checked) and then swapped in with one
atomic directory exchange, so a killed compaction leaves either the old or the new config folder,
both loadable.

Why here: this module holds the compaction of a local dataset folder and the shard merging a
remote compaction shares. It lives in the builder because the builder is what writes parquet (a
merged shard's schema, compression and row-group bounds are `ConfigWriter`'s) and what owns a
dataset folder's locks and atomic swaps (`rollout_dataset.builder.staging`); a local compaction
makes no request. The same merge on a Hub repo, in one commit, is
`rollout_dataset.hub.remote_compaction.compact_repo`: remote I/O lives in `rollout_dataset.hub`,
which imports this module, never the other way round.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from rollout_dataset.builder.audit_card import kept_audit
from rollout_dataset.builder.card import read_card_metadata, render_card
from rollout_dataset.builder.card_info import load_card_options
from rollout_dataset.builder.configs import CONFIG_NAMES, DEFAULT_CONFIG
from rollout_dataset.builder.merge import card_inputs
from rollout_dataset.builder.staging import DATASET_TAG, exchange_folders, is_built_dataset, link_or_copy, locked_out_dir
from rollout_dataset.builder.writer import ConfigWriter, shard_name
from rollout_dataset.errors import ArtifactError, DatasetDirError, RolloutDatasetError
from rollout_dataset.files import write_text_atomic

__all__ = ["DEFAULT_TARGET_BYTES", "CompactResult", "plan_merges", "merge_shards", "duplicate_drops",
           "merged_shard_name", "shard_rollout_ids", "card_context", "compact_local"]

log = logging.getLogger(__name__)

DEFAULT_TARGET_BYTES = 256 * 1024 * 1024  # a merged shard's size goal (parquet bytes)
STAGING_DIR = ".compact-staging"  # inside the dataset folder; never matched by data/<config>/*.parquet
_STAMP = re.compile(r"^(\d{8}T\d{6}\d*Z)-")


@dataclass
class CompactResult:
    """What a compaction did.

    Attributes:
        target: the dataset folder or the repo id.
        shards_before: shards per config before.
        shards_after: shards per config after.
        rows: rows per config after.
        duplicate_rows: rows dropped per config because their rollout was already in an earlier shard.
        commit: the Hub commit created (`rollout_dataset.hub.compact_repo` only; None when nothing
            was merged).
        attempts: commit attempts (`rollout_dataset.hub.compact_repo` only).
    """

    target: str
    shards_before: dict[str, int] = field(default_factory=dict)
    shards_after: dict[str, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    duplicate_rows: dict[str, int] = field(default_factory=dict)
    commit: str | None = None
    attempts: int = 0

    @property
    def changed(self) -> bool:
        """Whether any shard was merged or rewritten."""
        return self.shards_before != self.shards_after or any(self.duplicate_rows.values())


def plan_merges(sizes: Sequence[int], target_bytes: int) -> list[list[int]]:
    """Group shards (given in name order) into output shards.

    Consecutive shards smaller than `target_bytes` are packed greedily while their total stays
    within it; a shard at or above the target stays alone. Each group of two or more shards is
    merged into one; a group of one is kept as it is (the caller rewrites it if it holds duplicates).

    Args:
        sizes: the shards' sizes in bytes, in name order.
        target_bytes: the size goal of a merged shard (> 0).

    Returns:
        Groups of shard indices covering every shard once, in order.

    Raises:
        ValueError: `target_bytes` is not positive.
    """
    if target_bytes <= 0:
        raise ValueError(f"target_bytes={target_bytes}: must be > 0")
    groups: list[list[int]] = []
    current: list[int] = []
    total = 0
    for i, size in enumerate(sizes):
        if size >= target_bytes:
            if current:
                groups.append(current)
            groups.append([i])
            current, total = [], 0
            continue
        if current and total + size > target_bytes:
            groups.append(current)
            current, total = [], 0
        current.append(i)
        total += size
    if current:
        groups.append(current)
    return groups


def merged_shard_name(first: str) -> str:
    """A new shard name sorting where `first` did: its timestamp, a fresh uuid.

    Args:
        first: the name of the first shard merged.

    Returns:
        The merged shard's file name (a fresh `shard_name` when `first` carries no timestamp).
    """
    match = _STAMP.match(first)
    return f"{match.group(1)}-{uuid.uuid4().hex}.parquet" if match else shard_name()


def shard_rollout_ids(path: Path) -> list[str]:
    """The `rollout_id` column of a shard, one per row.

    Args:
        path: the parquet shard.

    Returns:
        The ids in row order.

    Raises:
        OSError, pyarrow.ArrowException: the shard is unreadable.
    """
    # rollout_id is a non-null string column (configs.py), so no None comes back
    return cast("list[str]", pq.read_table(str(path), columns=["rollout_id"]).column("rollout_id").to_pylist())


def duplicate_drops(id_lists: Sequence[Sequence[str] | None]) -> list[set[str]]:
    """Per shard, the rollout ids whose rows an earlier shard already holds (first shard wins).

    Args:
        id_lists: each shard's rollout ids (from `shard_rollout_ids`), in name order.

    Returns:
        One set per shard: the ids to leave out of it.
    """
    owner: dict[str, int] = {}
    for i, ids in enumerate(id_lists):
        for rid in ids or ():
            owner.setdefault(rid, i)
    return [{rid for rid in (ids or ()) if owner[rid] != i} for i, ids in enumerate(id_lists)]


def merge_shards(config: str, sources: Sequence[Path], drops: Sequence[set[str]], dst: Path) -> tuple[int, int]:
    """Write `sources` (minus their `drops`) into one shard with the builder's writer.

    Args:
        config: the config name (its schema is the writer's).
        sources: the shards to merge, in order.
        drops: per source, the rollout ids whose rows are left out (`duplicate_drops`).
        dst: the merged shard to write.

    Returns:
        (rows written, rows dropped as duplicates).

    Raises:
        OSError, pyarrow.ArrowException: a source is unreadable or `dst` cannot be written.
    """
    writer = ConfigWriter(config, dst)
    kept = dropped = 0
    try:
        for src, drop in zip(sources, drops):
            f = pq.ParquetFile(str(src))
            value_set = pa.array(sorted(drop), pa.string())
            for g in range(f.num_row_groups):
                table = f.read_row_group(g).cast(writer.schema)
                if len(value_set):
                    before = len(table)
                    table = table.filter(pc.invert(pc.is_in(table["rollout_id"], value_set=value_set)))
                    dropped += before - len(table)
                writer.add_table(table)
                kept += len(table)
    finally:
        writer.close()
    return kept, dropped


# --- local --------------------------------------------------------------------------------------

def _swap_in(staged: Path, live: Path, old: Path) -> None:
    """Put `staged` at `live`; the previous `live` ends at `staged` (exchange) or `old` (fallback)."""
    if exchange_folders(staged, live):
        return
    # fallback (no renameat2): two renames; `_recover` finishes a kill between them
    old.parent.mkdir(parents=True, exist_ok=True)
    os.replace(live, old)
    os.replace(staged, live)


def _recover(dataset_dir: Path) -> None:
    """Finish or drop what a killed compaction left: put a staged config back if its folder is gone."""
    root = dataset_dir / STAGING_DIR
    if not root.is_dir():
        return
    for run in sorted(root.iterdir()):
        for side in ("new", "old"):  # a staged new folder is complete once it was to be swapped
            for staged in sorted((run / side).glob("*")) if (run / side).is_dir() else []:
                live = dataset_dir / "data" / staged.name
                if not live.exists() and (staged / ".complete").is_file() and side == "new":
                    log.warning("%s: finishing an interrupted compaction of config %s", dataset_dir, staged.name)
                    os.replace(staged, live)
                    (live / ".complete").unlink(missing_ok=True)
                elif not live.exists() and side == "old":
                    log.warning("%s: restoring config %s from an interrupted compaction", dataset_dir, staged.name)
                    os.replace(staged, live)
        shutil.rmtree(run, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)


def _listing(folder: Path) -> set[tuple[str, int, int]]:
    """(name, size, mtime_ns) of every file in `folder`: a change means another writer was at work."""
    return {(p.name, st.st_size, st.st_mtime_ns) for p in folder.iterdir() for st in [p.stat()]}


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def card_context(text: str) -> dict[str, Any]:
    """What a re-rendered card keeps from the existing one.

    Args:
        text: the existing README.md (a YAML header that does not parse counts as none).

    Returns:
        ``pretty_name`` and ``license`` (when set), ``arrow_bytes`` per config from the card's
        ``dataset_info`` (None when it has none; merging shards does not change them) and
        ``traces_repo_id``, the trace-viewer repo it links (or None): keyword arguments of
        `rollout_dataset.builder.card.render_card`.
    """
    try:
        meta = read_card_metadata(text)
    except yaml.YAMLError:
        meta = {}
    meta = meta if isinstance(meta, dict) else {}
    out: dict[str, Any] = {k: str(meta[k]) for k in ("pretty_name", "license") if meta.get(k)}
    arrow = {info.get("config_name"): int(info["splits"][0].get("num_bytes") or 0)
             for info in meta.get("dataset_info") or [] if isinstance(info, dict) and info.get("splits")}
    out["arrow_bytes"] = {c: arrow.get(c, 0) for c in CONFIG_NAMES} if arrow else None
    link = re.search(r"agent-trace\s+viewer: \[([\w.-]+/[\w.-]+)\]\(", text)
    out["traces_repo_id"] = link.group(1) if link else None
    return out


def _compact_config(dataset_dir: Path, config: str, run_dir: Path, target_bytes: int,
                    result: CompactResult) -> None:
    live = dataset_dir / "data" / config
    shards = sorted(live.glob("*.parquet"))
    result.shards_before[config] = result.shards_after[config] = len(shards)
    result.duplicate_rows[config] = 0
    if not shards:
        result.rows[config] = 0
        return
    try:
        ids = [shard_rollout_ids(s) for s in shards]
    except (OSError, pa.ArrowException) as exc:
        raise ArtifactError(f"{live}: a shard is unreadable ({exc}); nothing was compacted in {config}") from None
    drops = duplicate_drops(ids)
    groups = plan_merges([s.stat().st_size for s in shards], target_bytes)
    rewrite = [g for g in groups if len(g) > 1 or drops[g[0]]]
    total_rows = sum(len(x) for x in ids)
    if not rewrite:
        result.rows[config] = total_rows
        return
    try:
        _rewrite_config(dataset_dir, config, shards, ids, drops, groups, run_dir, result)
    except RolloutDatasetError:
        raise
    except OSError as exc:  # a full disk, a permission: the config stays as it was, and is named
        named = OSError(f"{live}: compacting it failed ({exc.strerror or exc}); the config was left as it was "
                        "(configs compacted before it stay compacted)")
        named.errno = exc.errno
        raise named from None
    except pa.ArrowException as exc:  # a shard whose footer reads but whose pages do not
        raise ArtifactError(f"{live}: a shard is unreadable ({exc}); the config was left as it was") from None


def _rewrite_config(dataset_dir: Path, config: str, shards: list[Path], ids: list[list[str]], drops: list[set[str]],
                    groups: list[list[int]], run_dir: Path, result: CompactResult) -> None:
    """Write the compacted config in the staging folder and swap it in (see `_compact_config`)."""
    live = dataset_dir / "data" / config
    total_rows = sum(len(x) for x in ids)
    listing = _listing(live)
    staged = run_dir / "new" / config
    staged.mkdir(parents=True)
    for other in sorted(set(live.iterdir()) - set(shards)):  # keep anything else the folder holds
        if other.is_file():
            link_or_copy(other, staged / other.name)
    rows = dropped = 0
    for group in groups:
        if len(group) == 1 and not drops[group[0]]:
            link_or_copy(shards[group[0]], staged / shards[group[0]].name)
            rows += len(ids[group[0]])
            continue
        out = staged / merged_shard_name(shards[group[0]].name)
        n, d = merge_shards(config, [shards[i] for i in group], [drops[i] for i in group], out)
        _fsync(out)
        rows, dropped = rows + n, dropped + d
    written = sum(pq.ParquetFile(str(p)).metadata.num_rows for p in staged.glob("*.parquet"))
    if written != rows or rows + dropped != total_rows:
        raise ArtifactError(f"{live}: compaction staged {written} rows, expected {rows} of {total_rows} "
                            f"({dropped} duplicates); the config was left as it was")
    if _listing(live) != listing:
        raise ArtifactError(f"{live}: its shards changed while compacting (a build or another writer?); "
                            f"the config was left as it was: run compact again when nothing writes to it")
    (staged / ".complete").touch()
    _swap_in(staged, live, run_dir / "old" / config)
    (live / ".complete").unlink(missing_ok=True)
    result.shards_after[config] = len(groups)
    result.rows[config] = rows
    result.duplicate_rows[config] = dropped
    log.info("%s: %s: %d shards -> %d (%d rows, %d duplicate rows dropped)", dataset_dir, config,
             len(shards), len(groups), rows, dropped)


def compact_local(dataset_dir: str | Path, *, target_bytes: int = DEFAULT_TARGET_BYTES,
                  configs: Sequence[str] | None = None, template: str | Path | None = None) -> CompactResult:
    """Merge a local dataset folder's small shards, config by config, atomically per config.

    Args:
        dataset_dir: a folder written by `rollout_dataset.build`.
        target_bytes: the size goal of a merged shard (parquet bytes).
        configs: the configs to compact (default: all).
        template: the card template used to re-render README.md (default: the builder's).

    Returns:
        A `CompactResult`.

    Raises:
        DatasetDirError: `dataset_dir` is not a dataset this tool built (its README.md lacks the tag).
        ArtifactError: `dataset_dir` holds no built dataset, a shard is unreadable, or a config's
            shards changed while it was being compacted (that config is left untouched; configs
            already compacted stay compacted), or another compaction holds ``DIR/.compact.lock``,
            or a build or append is writing to the folder (it holds the build lock).
        ValueError: `target_bytes` is not positive or a config name is unknown.
    """
    dataset_dir = Path(dataset_dir)
    if target_bytes <= 0:
        raise ValueError(f"target_bytes={target_bytes}: must be > 0")
    unknown = [c for c in configs or () if c not in CONFIG_NAMES]
    if unknown:
        raise ValueError(f"unknown config(s) {', '.join(unknown)}; valid: {', '.join(CONFIG_NAMES)}")
    if dataset_dir.is_dir() and not is_built_dataset(dataset_dir):  # before anything is written in it
        raise DatasetDirError(f"{dataset_dir}: not a rollout-dataset dataset (no README.md with the {DATASET_TAG!r} "
                              "tag); compact rewrites the shards of a dataset this tool built, and no other folder")
    lock = _lock(dataset_dir)
    try:
        try:
            # the build's lock too: a build or `build --append` swaps the whole folder, which would
            # silently undo a compaction running inside it (and a compaction would race its staging)
            with locked_out_dir(dataset_dir.absolute()):
                return _compact_local_locked(dataset_dir, target_bytes, configs, template)
        except DatasetDirError:
            raise ArtifactError(f"{dataset_dir}: a build or append is writing to it; compact it when that has "
                                "finished") from None
    finally:
        os.close(lock)


def _lock(dataset_dir: Path) -> int:
    """An exclusive lock on ``DIR/.compact.lock`` (one compaction per folder at a time).

    Raises:
        ArtifactError: the folder is missing, or another compaction holds the lock.
    """
    import fcntl

    if not dataset_dir.is_dir():
        raise ArtifactError(f"{dataset_dir}: not a folder (give a dataset folder written by build)")
    fd = os.open(dataset_dir / ".compact.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ArtifactError(f"{dataset_dir}: another compaction is running on it (.compact.lock is held)") from None
    return fd


def _compact_local_locked(dataset_dir: Path, target_bytes: int, configs: Sequence[str] | None,
                          template: str | Path | None) -> CompactResult:
    _recover(dataset_dir)
    if not list((dataset_dir / "data" / DEFAULT_CONFIG).glob("*.parquet")):
        raise ArtifactError(f"{dataset_dir}: no data/{DEFAULT_CONFIG}/*.parquet (build the dataset first)")
    result = CompactResult(target=str(dataset_dir))
    run_dir = dataset_dir / STAGING_DIR / uuid.uuid4().hex
    try:
        for config in configs or CONFIG_NAMES:
            _compact_config(dataset_dir, config, run_dir, target_bytes, result)
    finally:
        shutil.rmtree(dataset_dir / STAGING_DIR, ignore_errors=True)
    readme = dataset_dir / "README.md"
    if result.changed and readme.is_file():
        aggregates, config_bytes, arrow_bytes = card_inputs(dataset_dir)
        context = card_context(readme.read_text(encoding="utf-8"))
        context["arrow_bytes"] = arrow_bytes
        text = render_card(aggregates, template=template, config_bytes=config_bytes,
                           options=load_card_options(dataset_dir), audit=kept_audit(dataset_dir), **context)
        write_text_atomic(readme, text)
    return result
