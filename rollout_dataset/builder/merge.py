"""Adding built *parts* to a staged dataset folder: the one merge primitive of `build --append` and
of the Ray build (`builder.distributed`).

A part is a dataset folder that `build` wrote on the same file system as the staging folder (the
append builds its new rollouts into one; each Ray task builds one, and the driver writes its bytes
there). Merging a part into the staging folder of a dataset (`builder.staging.staging_folder`,
which already holds the existing dataset's files as hard links):

- refuses a part whose tokenizer differs from the dataset's (`TokenizerMismatchError`, naming both);
- drops the rows of rollouts the dataset (or an earlier part) already holds — the same rule and the
  same code as `hub.push`: the rollout ids come from the ``summary`` shards
  (`builder.build.dataset_rollout_ids`) and a shard holding any of them is copied without their
  rows (`builder.writer.copy_filtered`); a shard with none is moved in as it is (a rename, no
  rewrite);
- gives every moved shard a new unique name that sorts after every earlier shard, in part order
  (`ordered_shard_names`), so rows read in name order come in the order of the inputs;
- moves in the trace-viewer sessions of the rollouts it adds, and the stored tokenizer when the
  dataset has none.

Existing shards are never opened for writing: they stay the same files (same inode, bytes and
mtime). `write_card` then renders the card over the whole staged dataset (old + new rows), and the
caller swaps the staging folder in with `staging.commit`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Generic, Iterator, Sequence

import pyarrow.parquet as pq

from rollout_dataset.builder import staging
from rollout_dataset.builder.aggregates import CardAggregates
from rollout_dataset.builder.build import BuildResult, check_shards, dataset_rollout_ids, iter_summary_rows
from rollout_dataset.builder.audit_card import kept_audit
from rollout_dataset.builder.card import render_card
from rollout_dataset.builder.card_info import CardOptions, arrow_num_bytes, save_card_options
from rollout_dataset.builder.configs import CONFIG_NAMES, DEFAULT_CONFIG, arrow_schema
from rollout_dataset.builder.parts import FolderT, split_present
from rollout_dataset.builder.tokenizer_files import TOKENIZER_DIR, TokenizerRegistry, stored_tokenizer_sha256
from rollout_dataset.builder.traces import SESSIONS_DIR, TRACES_DIR
from rollout_dataset.builder.writer import copy_filtered
from rollout_dataset.errors import ArtifactError, TokenizerMismatchError
from rollout_dataset.files import write_text_atomic

__all__ = ["PARTS_DIR", "TokenizerIdentity", "tokenizer_identity", "ordered_shard_names", "merge_part",
           "card_inputs", "write_card", "Presence", "adding_to", "BuiltPart", "merge_parts"]

log = logging.getLogger(__name__)

#: where parts are built/written inside a staging folder (removed before the swap).
PARTS_DIR = ".parts"


@dataclass
class TokenizerIdentity:
    """Which tokenizer a dataset folder's rollouts used.

    Attributes:
        key: the SHA-256 of its tokenizer.json, ``"name:<name>"`` when only the name is known, or
            None when the folder holds no rollout with a tokenizer.
        names: the tokenizer names its summary rows give.
        origin: what the key was read from (for messages).
    """

    key: str | None
    names: frozenset[str]
    origin: str

    def describe(self) -> str:
        """The tokenizer's names and hash, for messages."""
        names = ", ".join(repr(n) for n in sorted(self.names)) or "unnamed"
        return f"{names} ({self.key.replace('name:', 'files not found, name ') if self.key else 'none'})"

    def agrees(self, other: "TokenizerIdentity") -> bool:
        """Whether two folders can be one dataset (same tokenizer, or one of them has none)."""
        if self.key is None or other.key is None or self.key == other.key:
            return True
        if self.key.startswith("name:"):  # rows written before hashes were recorded: compare names
            return self.key[5:] in other.names
        if other.key.startswith("name:"):
            return other.key[5:] in self.names
        return False


def tokenizer_identity(dataset_dir: str | Path, label: str | None = None) -> TokenizerIdentity:
    """The tokenizer of a dataset folder (see `TokenizerRegistry`, the rule `build` applies).

    Args:
        dataset_dir: the dataset folder.
        label: how to name the folder in messages (default: its path).

    Returns:
        Its `TokenizerIdentity`.

    Raises:
        ArtifactError: a summary shard cannot be read (named).
    """
    rows = list(iter_summary_rows(_summary_shards(dataset_dir), ["rollout_id", "tokenizer", "tokenizer_sha256"]))
    registry = TokenizerRegistry(rows, stored_tokenizer_sha256(dataset_dir))
    names = frozenset(r["tokenizer"] for r in rows if r.get("tokenizer"))
    return TokenizerIdentity(registry.identity, names, f"{registry.origin} of {label or dataset_dir}")


def ordered_shard_names() -> Iterator[str]:
    """Fresh unique shard names that sort after every shard written before, in the order drawn.

    ``<UTC timestamp>-<8-digit counter><24 hex of a uuid4>.parquet``: the format of
    `builder.writer.shard_name` (so `compact` reads the timestamp), with one timestamp for the whole
    merge and a counter keeping the draw order.

    Yields:
        File names.
    """
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    for i in range(10 ** 8):
        yield f"{stamp}-{i:08d}{uuid.uuid4().hex[8:]}.parquet"


def merge_part(part: str | Path, stage: str | Path, present: set[str], dataset: TokenizerIdentity,
               result: BuildResult, names: Iterator[str], *, label: str | None = None,
               order: list[str] | None = None) -> list[Path]:
    """Move one built part into a staged dataset folder (see the module docstring).

    Args:
        part: a dataset folder written by `build` on the same file system as `stage` (its files are
            moved out of it).
        stage: the staging folder of the dataset.
        present: rollout ids the staged dataset holds; the part's are added to it.
        dataset: the staged dataset's tokenizer; updated when it had none and the part has one.
        result: gets the rows added per config (`rows`), the rollouts added and skipped.
        names: shard names to use (`ordered_shard_names`).
        label: how to name the part in messages (default: its path).
        order: the part's rollout ids in input order (its `BuildResult.added`), for `result.added`.

    Returns:
        The files moved or written into `stage` (to fsync).

    Raises:
        TokenizerMismatchError: the part's tokenizer differs from the dataset's (a ValueError).
        ArtifactError: a shard of the part is not complete parquet, or its columns differ from its
            config's (a part built by another version; named).
    """
    part, stage = Path(part), Path(stage)
    label = label or str(part)
    check_shards(part)
    theirs = tokenizer_identity(part, label)
    if not dataset.agrees(theirs):
        raise TokenizerMismatchError(f"{label}: tokenizer {theirs.describe()} differs from {dataset.describe()} of "
                                     f"{dataset.origin}; one dataset holds captures of one tokenizer (build the "
                                     "others into another dataset)")
    for config in CONFIG_NAMES:  # a part written by another version of the schema would break load_dataset
        for shard in sorted((part / "data" / config).glob("*.parquet")):
            if not pq.read_schema(shard).equals(arrow_schema(config), check_metadata=False):
                raise ArtifactError(f"{label}: {config} shard {shard.name} does not have the {config} config's "
                                    "columns and types (built by another rollout-dataset version?); nothing was merged")
    ids = dataset_rollout_ids(part)
    drop = ids & present
    written: list[Path] = []
    for config in CONFIG_NAMES:
        target = stage / "data" / config
        target.mkdir(parents=True, exist_ok=True)
        for shard in sorted((part / "data" / config).glob("*.parquet")):
            dst = target / next(names)
            if drop:
                rows = copy_filtered(shard, dst, config, drop)
            else:
                rows = pq.ParquetFile(shard).metadata.num_rows
                os.rename(shard, dst)
            if rows == 0 and any(p != dst for p in target.glob("*.parquet")):
                dst.unlink()  # an empty shard beside others adds nothing
                continue
            written.append(dst)
            result.rows[config] = result.rows.get(config, 0) + rows
    sessions = stage / TRACES_DIR / SESSIONS_DIR
    for session in sorted((part / TRACES_DIR / SESSIONS_DIR).glob("*.jsonl")):
        if session.stem in ids and session.stem not in drop:
            sessions.mkdir(parents=True, exist_ok=True)
            os.replace(session, sessions / session.name)
            written.append(sessions / session.name)
    theirs_tok, ours_tok = part / TOKENIZER_DIR, stage / TOKENIZER_DIR
    if (theirs_tok / "tokenizer.json").is_file() and not (ours_tok / "tokenizer.json").is_file():
        ours_tok.mkdir(exist_ok=True)
        for f in sorted(theirs_tok.iterdir()):
            if f.is_file() and not f.is_symlink():
                os.replace(f, ours_tok / f.name)
                written.append(ours_tok / f.name)
    if dataset.key is None and theirs.key is not None:
        dataset.key, dataset.origin = theirs.key, theirs.origin
    dataset.names = dataset.names | theirs.names
    added = [rid for rid in (order if order is not None else sorted(ids)) if rid in ids and rid not in drop]
    result.added.extend(added)
    result.skipped.extend(sorted(drop))
    present.update(ids)
    if drop:
        log.info("%s: %d rollout(s) already in the dataset; their rows were left out", label, len(drop))
    return written


def write_card(dataset_dir: str | Path, options: CardOptions, *, template: str | Path | None = None,
               result: BuildResult | None = None) -> list[Path]:
    """Render README.md over the whole dataset folder (every summary row) and keep the card options.

    An audit the folder holds (``data/audit/``) is kept: its config entry and card section
    (`builder.audit_card`). The statistics are those `build` computes: rows from every ``summary`` shard, parquet bytes and
    Arrow bytes per config from every shard. Both files are replaced atomically (never written
    through a hard link to an earlier dataset's file).

    Args:
        dataset_dir: the (staged) dataset folder.
        options: the card options (saved as ``card_options.json``).
        template: the card template (default: the builder's).
        result: gets `bytes_per_config` and `total_rollouts` when given.

    Returns:
        The files written (README.md, card_options.json).

    Raises:
        ArtifactError: a summary shard cannot be read (named).
    """
    folder = Path(dataset_dir)
    aggregates, config_bytes, arrow = card_inputs(folder)
    options_file = save_card_options(options, folder)
    readme = folder / "README.md"
    write_text_atomic(readme, render_card(aggregates, template=template, options=options, config_bytes=config_bytes,
                                          arrow_bytes=arrow, audit=kept_audit(folder)))
    if result is not None:
        result.bytes_per_config = config_bytes
        result.total_rollouts = aggregates.n
    return [readme, options_file]


def card_inputs(dataset_dir: str | Path) -> tuple[CardAggregates, dict[str, int], dict[str, int]]:
    """What a card over a whole dataset folder is rendered from, streamed (memory: one row group).

    Args:
        dataset_dir: the dataset folder.

    Returns:
        ``(aggregates, config_bytes, arrow_bytes)``: the summary rows' `CardAggregates`, parquet bytes
        per config and Arrow bytes per config (see `render_card`).

    Raises:
        ArtifactError: a summary shard cannot be read (named).
    """
    folder = Path(dataset_dir)
    aggregates = CardAggregates.from_rows(iter_summary_rows(_summary_shards(folder)))
    shards = {c: sorted((folder / "data" / c).glob("*.parquet")) for c in CONFIG_NAMES}
    config_bytes = {c: sum(p.stat().st_size for p in shards[c]) for c in CONFIG_NAMES}
    arrow = {c: arrow_num_bytes(shards[c]) for c in CONFIG_NAMES}
    return aggregates, config_bytes, arrow


def _summary_shards(dataset_dir: str | Path) -> list[Path]:
    return sorted((Path(dataset_dir) / "data" / DEFAULT_CONFIG).glob("*.parquet"))


# The sequence of every writer that adds parts to a dataset folder (`build --append`, the Ray build),
# once: `with adding_to(out, folders, check) as seen:` (the lock, the rollouts already there), then,
# when there is something to add, `with staging.staged(out) as stage:`, build the parts under
# ``stage / PARTS_DIR`` and hand them to `merge_parts` (merge in order, card, fsync).


@dataclass
class Presence(Generic[FolderT]):
    """What a dataset folder already holds of the folders given to add (read under its lock).

    Attributes:
        present: rollout ids the dataset holds (`merge_parts` adds those it merges).
        todo: the folders to build, in input order.
        there: ``(folder, rollout id)`` of the folders whose rollout the dataset already holds.
    """

    present: set[str]
    todo: list[FolderT]
    there: list[tuple[FolderT, str]]


@contextlib.contextmanager
def adding_to(out: Path, folders: Sequence[FolderT], check_out: Callable[[Path], None]) -> Iterator[Presence[FolderT]]:
    """Own the dataset folder `out` (`staging.exclusive`) and split `folders` by what it already holds.

    Args:
        out: the dataset folder.
        folders: the artifact folders to add, in input order.
        check_out: the writer's check of `out` (run again under the lock, with `check_shards`).

    Yields:
        The `Presence` of the folders' rollouts in `out`.

    Raises:
        DatasetDirError: another build holds the lock, or `check_out` refuses `out`.
        ArtifactError: a shard of `out` is not complete parquet.
    """
    with staging.exclusive(out, check_out, check_shards):  # checked again under the lock
        present = dataset_rollout_ids(out)
        todo, there = split_present(folders, present)
        yield Presence(present, todo, there)


@dataclass
class BuiltPart:
    """One part built under ``stage / PARTS_DIR``, ready to merge.

    Attributes:
        folder: the part's dataset folder.
        label: how messages name the part.
        added: its rollout ids in input order (its `BuildResult.added`).
        skipped: rollout ids its build skipped (given twice among its inputs).
        cut_cells: text cells its build cut to the cell limit.
    """

    folder: Path
    label: str
    added: list[str]
    skipped: list[str]
    cut_cells: int


def merge_parts(stage: Path, out: Path, present: set[str], parts: Sequence[BuiltPart], result: BuildResult,
                options: CardOptions, *, template: str | Path | None = None) -> None:
    """Merge built parts into a staged dataset in order, drop `PARTS_DIR`, write the card, fsync.

    Args:
        stage: the staging folder of `out` (`staging.staged`).
        out: the dataset folder (names the dataset's tokenizer in messages).
        present: rollout ids the staged dataset holds (each part's are added).
        parts: the built parts, in the order their rows go in.
        result: gets what each part added and skipped, the cut cells, the rows, the bytes and the total.
        options: the card options.
        template: the card template (default: the builder's).

    Raises:
        TokenizerMismatchError, ArtifactError: as `merge_part`.
    """
    identity = tokenizer_identity(stage, str(out))
    names = ordered_shard_names()
    written: list[Path] = []
    for part in parts:
        result.cut_cells += part.cut_cells
        result.skipped.extend(part.skipped)
        written += merge_part(part.folder, stage, present, identity, result, names, label=part.label, order=part.added)
    if (stage / PARTS_DIR).exists():
        shutil.rmtree(stage / PARTS_DIR)
    staging.checkpoint("merged")
    written += write_card(stage, options, template=template, result=result)
    staging.fsync_tree(written)
