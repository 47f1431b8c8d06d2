"""One build part: a slice of artifact folders -> shard files + the card's running aggregates.

This is the unit every way of building runs, in this process or another (`build --workers N`
gives each of N processes one contiguous slice of the sorted inputs; a distributed build can give
parts to other machines): `build_part` reads each folder, checks it with the rules of `validate`,
turns it into rows and streams them into its own shards (`writer.PartWriter`: bounded row groups,
shards rolled at a target size, named so that they sort in input order), writes the rollout's
trace-viewer session, and folds its summary row into a `CardAggregates`. Nothing else per rollout
is kept: memory is flat in the number of rollouts. It returns a `PartResult` (picklable): the
files written, the rows per config, the aggregates and the Arrow sizes of its shards.

Finishing the dataset from the merged results (tokenizer files, card, atomic swap) is
`build.finish_dataset`; `build.build` runs parts and finishes.

Which rollouts a part skips is decided before the parts run (`plan_inputs`): a rollout already in
the dataset, or whose id an earlier input folder also has, is skipped (checked, not added), so
parts never need to know each other's rollouts.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import orjson
from tqdm.auto import tqdm

from rollout_dataset.artifact_files import SUMMARY_FILE
from rollout_dataset.builder import staging
from rollout_dataset.builder.aggregates import CardAggregates
from rollout_dataset.builder.card_info import arrow_num_bytes
from rollout_dataset.builder.configs import CONFIG_NAMES
from rollout_dataset.builder.inputs import first_failure_line, load_checked_artifact
from rollout_dataset.builder.rows import PREVIEW_CHARS, rollout_rows, tokenizer_name
from rollout_dataset.builder.tokenizer_files import TokenizerRegistry
from rollout_dataset.builder.traces import write_session
from rollout_dataset.builder.writer import ROW_GROUP_BYTES, SHARD_BYTES, PartWriter
from rollout_dataset.errors import ArtifactError, SchemaValidationError, TokenizerMismatchError

__all__ = ["PartSpec", "PartResult", "PartStopped", "exit_with_parent", "split_present", "plan_inputs", "split_parts",
           "build_part", "run_part", "read_progress"]

log = logging.getLogger(__name__)


@dataclass
class PartSpec:
    """What one part builds.

    Attributes:
        part: the part's index (names its shards; parts are merged in this order).
        folders: artifact folders, in input order.
        expected_ids: the rollout id each folder's summary.json held when the build planned
            (None when unreadable: the check reports it); a folder whose checked id differs is refused.
        skip: per folder, True when its rollout is already in the dataset or in an earlier input.
    """

    part: int
    folders: list[str]
    expected_ids: list[str | None]
    skip: list[bool]


@dataclass
class PartResult:
    """What `build_part` wrote.

    Attributes:
        part: the part's index.
        added: rollout ids added, in order.
        skipped: rollout ids skipped (already in the dataset or an earlier input).
        refused: ``(folder, first failure)`` of each folder the schema check refused and
            ``skip_invalid`` left out.
        rows: rows written per config.
        cut_cells: text cells cut to the cell limit.
        shards: per config, the shard files written (none for a config without rows).
        sessions: the trace-viewer session files written.
        aggregates: the card's running aggregates of the added rollouts' summary rows.
        arrow_bytes: per config, the Arrow (in-memory) bytes of this part's shards.
        tokenizers: ``(tokenizer name, folder)`` of the first added folder naming each tokenizer,
            so the parent checks that all parts used one tokenizer.
    """

    part: int
    added: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    cut_cells: int = 0
    shards: dict[str, list[str]] = field(default_factory=dict)
    sessions: list[str] = field(default_factory=list)
    aggregates: CardAggregates = field(default_factory=CardAggregates)
    arrow_bytes: dict[str, int] = field(default_factory=dict)
    tokenizers: list[tuple[str | None, str]] = field(default_factory=list)


#: seconds between a build worker's checks that its build process still runs (`exit_with_parent`).
PARENT_CHECK_S = 0.2


class PartStopped(Exception):
    """A part was told to stop early (`build_part`'s `stop`): another part of the build failed."""


def artifact_rollout_id(folder: str | Path) -> str | None:
    """The rollout id an artifact folder's ``summary.json`` gives, read without checking the folder.

    The one reader used to plan builds, appends and Ray builds (which rollouts are already there).

    Args:
        folder: an artifact folder.

    Returns:
        The id, or None when summary.json is not a regular file (a symlink, a FIFO or a device is
        never opened), not JSON, or has no string id (the folder is then built and its check says why).
    """
    path = Path(folder) / SUMMARY_FILE
    try:
        if path.is_symlink() or not path.is_file():
            return None
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    rid = doc.get("rollout_id") if isinstance(doc, dict) else None
    return rid if isinstance(rid, str) else None


#: a folder as the caller gives it (a path, or a string for the Ray build), handed back the same
FolderT = TypeVar("FolderT", str, Path)


def split_present(folders: Sequence[FolderT], present: set[str]) -> tuple[list[FolderT], list[tuple[FolderT, str]]]:
    """Separate the folders whose rollout a dataset already holds (append and the Ray build skip them).

    Args:
        folders: the artifact folders, in input order.
        present: rollout ids already in the dataset.

    Returns:
        ``(to build, already there)``: the folders to build, and ``(folder, rollout id)`` of the
        others, both in input order.
    """
    todo: list[FolderT] = []
    there: list[tuple[FolderT, str]] = []
    for folder in folders:
        rid = artifact_rollout_id(folder)
        if rid is not None and rid in present:
            there.append((folder, rid))
        else:
            todo.append(folder)
    return todo, there


def plan_inputs(folders: Sequence[Path], present: set[str]) -> tuple[list[str | None], list[bool]]:
    """Read each folder's rollout id (summary.json only) and decide which rollouts are skipped.

    Args:
        folders: the artifact folders, in input order.
        present: rollout ids already in the dataset.

    Returns:
        ``(expected_ids, skip)``: per folder, its rollout id (None when unreadable) and whether it is
        skipped (in `present`, or the id of an earlier folder).
    """
    seen = set(present)
    ids: list[str | None] = []
    skip: list[bool] = []
    for folder in folders:
        rid = artifact_rollout_id(folder)
        ids.append(rid)
        skip.append(rid is not None and rid in seen)
        if rid is not None:
            seen.add(rid)
    return ids, skip


def split_parts(folders: Sequence[Path], expected_ids: Sequence[str | None], skip: Sequence[bool],
                n_parts: int) -> list[PartSpec]:
    """Contiguous, near-equal slices of the inputs, one per part (fewer when there are fewer folders).

    Args:
        folders: the artifact folders, in input order.
        expected_ids: from `plan_inputs`.
        skip: from `plan_inputs`.
        n_parts: how many parts at most.

    Returns:
        The parts, in order.
    """
    n = len(folders)
    n_parts = max(1, min(n_parts, n))
    bounds = [round(k * n / n_parts) for k in range(n_parts + 1)]
    return [PartSpec(k, [str(f) for f in folders[a:b]], list(expected_ids[a:b]), list(skip[a:b]))
            for k, (a, b) in enumerate(zip(bounds, bounds[1:]))]


def read_progress(path: str | Path) -> tuple[int, int] | None:
    """What a part last wrote to its progress file (see `build_part`'s `progress_file`).

    Args:
        path: the progress file.

    Returns:
        ``(pid, index of the folder it was building)``, or None when the file is missing or unreadable.
    """
    try:
        pid, index = Path(path).read_text().split()
        return int(pid), int(index)
    except (OSError, ValueError):
        return None


def build_part(spec: PartSpec, stage: str | Path, prefix: str, *, tokenizer_identity: tuple[str | None, str] = (None, ""),
               samples: str = "preview", preview_chars: int = PREVIEW_CHARS, row_group_bytes: int = ROW_GROUP_BYTES,
               shard_bytes: int = SHARD_BYTES, progress: bool = False,
               progress_file: str | Path | None = None, stop: Callable[[], bool] | None = None,
               skip_invalid: bool = False) -> PartResult:
    """Build one part: check each folder, write its rows to the part's shards, aggregate its summary.

    Args:
        spec: the part (see `PartSpec`).
        stage: the dataset (staging) folder; shards go to ``data/<config>/``, sessions to ``traces/sessions/``.
        prefix: the build's shard-name prefix (`writer.build_prefix`).
        tokenizer_identity: ``(identity, origin)`` of the dataset's tokenizer so far (see
            `TokenizerRegistry`): a rollout of another tokenizer is refused.
        samples: the `samples` config's mode.
        preview_chars: characters of samples.md a preview keeps.
        row_group_bytes: Arrow bytes buffered per config before a row group is written.
        shard_bytes: parquet bytes after which a shard is closed and the next one started.
        progress: show a progress bar.
        progress_file: when given, ``"<pid> <folder index>"`` is written there before each folder,
            so that the parent can name the folder a crashed process was on.
        stop: asked before each folder; True ends the part early with `PartStopped` (another
            part failed, so this one's rows will not be used).
        skip_invalid: leave out a folder the schema check refuses, or whose tokenizer differs from the
            dataset's (named in `PartResult.refused`), instead of failing the part.

    Returns:
        A `PartResult`.

    Raises:
        SchemaValidationError: a folder fails a check of `validate`.
        ArtifactError: a value does not fit its column, a folder passes the checks but cannot be
            turned into rows, or a folder's rollout id changed since the build planned (named).
        TokenizerMismatchError: a rollout's tokenizer differs from the dataset's.
        PartStopped: `stop` said so.
    """
    stage = Path(stage)
    tokenizers = TokenizerRegistry.seeded(*tokenizer_identity)
    writer = PartWriter(stage, prefix, spec.part, row_group_bytes=row_group_bytes, shard_bytes=shard_bytes)
    result = PartResult(part=spec.part)
    names: dict[str | None, str] = {}  # tokenizer name -> the first folder naming it
    marker = os.open(progress_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) if progress_file else None
    try:
        for i, folder in enumerate(tqdm(spec.folders, desc=f"build part {spec.part}", unit="rollout",
                                        disable=not progress, position=spec.part)):
            if stop is not None and stop():
                raise PartStopped(f"build part {spec.part} stopped before {folder}")
            if marker is not None:
                os.pwrite(marker, f"{os.getpid()} {i}\n".ljust(32).encode(), 0)
            _build_one(Path(folder), spec.expected_ids[i], spec.skip[i], stage, writer, tokenizers, result, names,
                       samples=samples, preview_chars=preview_chars, skip_invalid=skip_invalid)
            staging.checkpoint("rollout")
    finally:
        result.rows = writer.close()
        if marker is not None:
            os.close(marker)
    result.shards = {c: [str(p) for p in writer.shards[c]] for c in CONFIG_NAMES}
    result.arrow_bytes = {c: arrow_num_bytes(writer.shards[c]) for c in CONFIG_NAMES}
    result.tokenizers = list(names.items())
    return result


def _build_one(folder: Path, expected: str | None, skip: bool, stage: Path, writer: PartWriter,
               tokenizers: TokenizerRegistry, result: PartResult, names: dict[str | None, str], *, samples: str,
               preview_chars: int, skip_invalid: bool = False) -> None:
    """Check one folder and add its rows (or skip it, or with `skip_invalid` leave out a refused one); fills `result`."""
    try:
        art = load_checked_artifact(folder)
    except SchemaValidationError as exc:
        if not skip_invalid:
            raise
        reason = first_failure_line(exc, folder)
        log.warning("%s: refused by the schema check, left out of the dataset: %s", folder, reason)
        result.refused.append((str(folder), reason))
        return
    rid = art["summary"]["rollout_id"]
    if rid != expected:
        raise ArtifactError(f"{folder / 'summary.json'}: rollout_id is {rid!r} but was {expected!r} when the build "
                            "started; the folder changed during the build, so build again")
    if skip:
        log.info("%s: rollout %s already in the dataset; skipped", folder, rid)
        result.skipped.append(rid)
        return
    name = tokenizer_name(art)
    try:
        tok = tokenizers.check(name, str(folder))
    except TokenizerMismatchError as exc:
        if not skip_invalid:
            raise
        log.warning("%s: left out of the dataset: %s", folder, exc)
        result.refused.append((str(folder), str(exc)))
        return
    names.setdefault(name, str(folder))
    art.update(tokenizer_sha256=tok.sha256 if tok else None, tokenizer_revision=tok.revision if tok else None)
    try:
        rows, stats = rollout_rows(art, samples, preview_chars=preview_chars)
    except (TypeError, ValueError, KeyError, IndexError, OverflowError, AttributeError) as exc:
        # validated documents always make rows; a failure here is a gap in the checks
        raise ArtifactError(f"{folder}: passes validate but cannot be turned into rows "
                            f"({type(exc).__name__}: {exc}); please report it") from None
    try:
        writer.add(rows)
    except ValueError as exc:
        raise ArtifactError(f"{folder}: a value does not fit the dataset schema: {exc}") from None
    summary = rows["summary"][0]
    result.sessions.append(str(write_session(art, stage, summary["group_id"])))
    result.aggregates.add(summary)
    result.added.append(rid)
    result.cut_cells += stats["cut_cells"]


def exit_with_parent(parent: int) -> None:
    """Start a watch that ends this (worker) process as soon as the process `parent` is gone.

    The initializer of build worker processes: when the build process is killed (``kill -9``),
    its workers stop at once instead of writing on into a staging folder nobody will use, or
    waiting forever for their next part.

    Args:
        parent: the build process's pid.
    """
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_S)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def run_part(kwargs: dict[str, Any]) -> PartResult:
    """`build_part(**kwargs)` in a worker process, its exception made picklable when it is not.

    Args:
        kwargs: the keyword arguments of `build_part`.

    Returns:
        The part's result.

    Raises:
        Whatever `build_part` raises; an exception that cannot cross the process boundary becomes
        an `ArtifactError` with its type and message.
    """
    import pickle

    try:
        return build_part(**kwargs)
    except BaseException as exc:
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:  # noqa: BLE001 - an exception that does not pickle is re-raised as one that does
            raise ArtifactError(f"build part {kwargs['spec'].part}: {type(exc).__name__}: {exc}") from None
        raise

