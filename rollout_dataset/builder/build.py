"""`build`: artifact folders -> a Hub-ready dataset folder (parquet per config + README.md).

Each rollout is also written as a session of the Hub's agent-trace viewer in `traces/sessions/`
(see `traces`; pushed to a companion repo). The captures' tokenizer is stored in `tokenizer/` (see
`tokenizer_files`); one dataset holds one.

Streams, in two public steps that any executor can drive:

1. `parts.build_part`: a slice of the folders -> its own shard files + the card's running
   aggregates (`aggregates.CardAggregates`). Rollouts flow one at a time from folder to bounded
   row groups; nothing per rollout is kept but its id and what the card's statistics need, so
   memory stays flat as the number of rollouts grows. `build(..., workers=N)` runs N parts in N
   processes (contiguous slices of the sorted inputs; shards named by part, so the dataset's rows
   come in the same order whatever N).
2. `finish_dataset`: the merged part results -> the finished dataset folder (an empty shard for a
   config without rows, the tokenizer files, card options and the card rendered from the merged
   aggregates, fsynced).

Building into a folder that already holds a dataset adds new shards and skips rollouts already there
(no duplicates, nothing deleted). The whole dataset folder is staged beside `--out` and swapped in
when complete (`staging`): a failed or killed build (a crashed worker process included) leaves the
earlier dataset as it was.
"""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence, cast

import pyarrow as pa
import pyarrow.parquet as pq

from rollout_dataset.builder import staging
from rollout_dataset.builder.aggregates import CardAggregates
from rollout_dataset.builder.audit_card import kept_audit
from rollout_dataset.builder.card import render_card
from rollout_dataset.builder.configs import CONFIG_NAMES, DEFAULT_CONFIG
from rollout_dataset.builder.card_info import (
    CARD_OPTIONS_FILE,
    CardOptions,
    arrow_num_bytes,
    load_card_options,
    save_card_options,
)
from rollout_dataset.builder.inputs import find_artifact_dirs
from rollout_dataset.builder.parts import PartResult, PartSpec, PartStopped, build_part, exit_with_parent, plan_inputs, \
    read_progress, run_part, split_parts
from rollout_dataset.builder.rows import PREVIEW_CHARS, SAMPLES_MODES
from rollout_dataset.builder.tokenizer_files import TokenizerFiles, TokenizerRegistry, stored_tokenizer_sha256, \
    write_tokenizer_files
from rollout_dataset.builder.writer import ROW_GROUP_BYTES, SHARD_BYTES, ConfigWriter, build_prefix, part_shard_name
from rollout_dataset.errors import ArtifactError, ConfigError, RolloutDatasetError
from rollout_dataset.files import write_text_atomic

__all__ = ["BuildResult", "build", "finish_dataset", "find_artifact_dirs", "read_summary_rows", "iter_summary_rows",
           "dataset_rollout_ids", "check_shards"]

log = logging.getLogger(__name__)


@dataclass
class BuildResult:
    """What `build` did.

    Attributes:
        out_dir: the dataset folder.
        added: rollout ids added by this build.
        skipped: rollout ids skipped because the dataset (or an earlier input) already had them.
        refused: ``(folder, first failure)`` of each folder the schema check refused, left out
            with ``skip_invalid`` (the card lists them too).
        rows: rows written per config by this build.
        total_rollouts: rollouts in the dataset after the build.
        bytes_per_config: parquet bytes per config in the whole dataset folder.
        readme: the rendered README.md.
        cut_cells: text cells cut to the cell limit by this build.
    """

    out_dir: Path
    added: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    total_rollouts: int = 0
    bytes_per_config: dict[str, int] = field(default_factory=dict)
    readme: Path | None = None
    cut_cells: int = 0


def _read_shard(shard: Path, columns: list[str] | None = None) -> pa.Table:
    try:
        return pq.read_table(shard, columns=columns)
    except (pa.ArrowException, OSError) as exc:
        raise ArtifactError(f"{shard}: not a readable parquet shard ({exc}); a dataset folder holds only "
                            "complete shards, so move this file away and build again") from None


def check_shards(dataset_dir: str | Path) -> None:
    """Check that every shard of a dataset folder is a complete parquet file (its footer reads).

    Args:
        dataset_dir: the dataset folder.

    Raises:
        ArtifactError: a shard is not readable parquet (named); `load_dataset` would fail on it.
    """
    for shard in sorted((Path(dataset_dir) / "data").rglob("*.parquet")):
        try:
            pq.ParquetFile(shard).close()
        except (pa.ArrowException, OSError) as exc:
            raise ArtifactError(f"{shard}: not a readable parquet shard ({exc}); a dataset folder holds only "
                                "complete shards, so move this file away and build again") from None


def read_summary_rows(dataset_dir: str | Path) -> list[dict[str, Any]]:
    """Every summary row of a dataset folder (the small default config).

    Args:
        dataset_dir: the dataset folder.

    Returns:
        The rows, shard by shard.

    Raises:
        ArtifactError: a summary shard cannot be read (named).
    """
    rows: list[dict[str, Any]] = []
    for shard in sorted((Path(dataset_dir) / "data" / DEFAULT_CONFIG).glob("*.parquet")):
        rows.extend(_read_shard(shard).to_pylist())
    return rows


def iter_summary_rows(shards: Iterable[str | Path], columns: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """The summary rows of some shards, one row group at a time (memory: one row group).

    Args:
        shards: summary shards, in the order wanted.
        columns: only these columns (default: all).

    Yields:
        The rows.

    Raises:
        ArtifactError: a shard cannot be read (named).
    """
    for shard in shards:
        try:
            pf = pq.ParquetFile(str(shard))
            groups = range(pf.num_row_groups)
            for i in groups:
                yield from pf.read_row_group(i, columns=columns).to_pylist()
        except (pa.ArrowException, OSError) as exc:
            raise ArtifactError(f"{shard}: not a readable parquet shard ({exc}); a dataset folder holds only "
                                "complete shards, so move this file away and build again") from None


def dataset_rollout_ids(dataset_dir: str | Path) -> set[str]:
    """The rollout ids a dataset folder already holds (read from its summary shards).

    Raises:
        ArtifactError: a summary shard cannot be read (named).
    """
    ids: set[str] = set()
    for shard in (Path(dataset_dir) / "data" / DEFAULT_CONFIG).glob("*.parquet"):
        # rollout_id is a non-null string column (configs.py), so no None comes back
        ids.update(cast("list[str]", _read_shard(shard, ["rollout_id"]).column("rollout_id").to_pylist()))
    return ids


def build(artifact_dirs: Iterable[str | Path], out_dir: str | Path, *, template: str | Path | None = None,
          progress: bool = False, pretty_name: str = "Agent rollouts (rollout-dataset)",
          license: str = "apache-2.0", row_group_bytes: int = ROW_GROUP_BYTES, samples: str = "preview",
          preview_chars: int = PREVIEW_CHARS, language: Iterable[str] = ("en",), homepage: str | None = None,
          repository: str | None = None, citation: str | None = None, workers: int = 1,
          shard_bytes: int = SHARD_BYTES, skip_invalid: bool = False) -> BuildResult:
    """Build (or extend) a multi-config parquet dataset with its card, atomically, streaming.

    Every artifact folder is checked with the rules of `rollout-dataset validate`
    (`schema.check.check_artifact_dir`) before any of it becomes rows; the first invalid folder stops
    the build, or with `skip_invalid` is left out and named (in `BuildResult.refused`, the log and the
    card). The dataset is written in ``<out_dir>.staging-<pid>`` and swapped into place whole
    when complete (see `builder.staging`): a failed, interrupted or killed build leaves `out_dir`
    as it was. Memory stays flat in the number of rollouts (see the module docstring).

    Args:
        artifact_dirs: artifact folders, or folders holding them.
        out_dir: the dataset folder: new, empty, or a dataset this tool built (extended: rollouts
            already in it are skipped). Anything else is refused.
        template: the card template (default: the repo's `dataset_card.md`).
        progress: show a progress bar on stderr (off by default: the library prints nothing; the CLI turns it on).
        pretty_name: the card's display name.
        license: the card's license id.
        row_group_bytes: Arrow bytes buffered per config (and per worker) before a row group is
            written; with one rollout in memory at a time, this bounds the build's memory.
        samples: the `samples` config's mode: ``"preview"`` (default; one viewer-sized row per rollout:
            header + head + tail of samples.md, `truncated`/`full_chars` say what was cut) or ``"full"``
            (samples.md split into parts, lossless). Same columns either way, so shards of both modes
            can coexist; each rollout's mode is recorded in `summary.samples_mode`.
        preview_chars: characters of samples.md a preview keeps (the cut marker is extra; >= 100).
        language: language codes of the text (the card's `language`).
        homepage: a homepage URL for the card.
        repository: the capture setup's source repository URL for the card.
        citation: a BibTeX entry for the card (default: one generated from the title and repo).
            The card options are kept in ``card_options.json`` so that `push` renders the same card.
        workers: processes that build parts in parallel: this one and ``workers - 1`` spawned ones
            (1: this process only). Each takes one contiguous slice of the inputs and writes its
            own shards; the rows of the dataset are the same, in the same order, whatever the
            number. Spawned processes exit when this one dies (a script calling this with
            workers > 1 needs the ``if __name__ == "__main__":`` guard).
        shard_bytes: a shard is closed and the next one started past this many parquet bytes.
        skip_invalid: leave out (and name) each folder the schema check refuses, or whose tokenizer differs
            from the dataset's, instead of failing.

    Returns:
        A `BuildResult`.

    Raises:
        SchemaValidationError: an artifact folder fails a check of `validate` (a file missing,
            unreadable, not UTF-8, not JSON, off its schema, inconsistent, or a symlink leaving the
            folder); one `(file, json_path, reason)` per failure of that folder.
        ArtifactError: an input path is not a folder or holds no artifact folder, a value does not
            fit its column, a shard of the existing dataset is not complete parquet, or a worker
            process died (each named: the folder it was on).
        DatasetDirError: `out_dir` holds something other than a dataset built by this tool, or
            another build is writing to it.
        TokenizerMismatchError: the rollouts (or the dataset and the rollouts) used different tokenizers;
            nothing of this build is kept (a ValueError).
        ConfigError: `samples` is not "preview" or "full", `preview_chars` is below 100, or
            `workers` is below 1 (a ValueError).
    """
    if samples not in SAMPLES_MODES:
        raise ConfigError(f"samples={samples!r}: valid modes are {', '.join(SAMPLES_MODES)}")
    if preview_chars < 100:
        raise ConfigError(f"preview_chars={preview_chars}: must be >= 100")
    if not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers={workers!r}: give a whole number >= 1")
    options = CardOptions(pretty_name=pretty_name, license=license, language=tuple(language), homepage=homepage,
                          repository=repository, citation=citation)
    folders = find_artifact_dirs(artifact_dirs)
    out = Path(out_dir).absolute()
    staging.check_out_dir(out)
    result = BuildResult(out_dir=Path(out_dir))
    with staging.exclusive(out, staging.check_out_dir, check_shards):  # checked again under the lock
        present = dataset_rollout_ids(out)
        existing_summaries = sorted((out / "data" / DEFAULT_CONFIG).glob("*.parquet"))
        tokenizers = TokenizerRegistry(iter_summary_rows(existing_summaries, ["rollout_id", "tokenizer",
                                                                              "tokenizer_sha256"]),
                                       stored_tokenizer_sha256(out))
        with staging.staged(out) as stage:
            expected, skip = plan_inputs(folders, present)
            present.clear()
            specs = split_parts(folders, expected, skip, workers) if folders else []
            prefix = build_prefix()
            common = dict(stage=str(stage), prefix=prefix, tokenizer_identity=(tokenizers.identity, tokenizers.origin),
                          samples=samples, preview_chars=preview_chars, row_group_bytes=row_group_bytes,
                          shard_bytes=shard_bytes, skip_invalid=skip_invalid)
            parts = _run_parts(specs, common, workers=workers, progress=progress)
            for part in parts:  # one tokenizer over all parts (each part checked its own rollouts)
                for name, where in part.tokenizers:
                    tokenizers.check(name, where)
                result.added.extend(part.added)
                result.skipped.extend(part.skipped)
                result.refused.extend(part.refused)
                result.cut_cells += part.cut_cells
            if result.refused:  # the card keeps naming what earlier builds of this dataset left out too
                earlier = load_card_options(out).refused if (out / CARD_OPTIONS_FILE).is_file() else ()
                # the card names a folder by its own name, never by a path on this machine
                names = tuple((Path(folder).name, reason.replace(str(Path(folder)), Path(folder).name)[:300])
                              for folder, reason in result.refused)
                options = replace(options, refused=tuple(dict.fromkeys(earlier + names)))
            elif (out / CARD_OPTIONS_FILE).is_file():
                options = replace(options, refused=load_card_options(out).refused)
            result.rows = {c: sum(p.rows.get(c, 0) for p in parts) for c in CONFIG_NAMES}
            finished = finish_dataset(stage, parts, prefix=prefix, tokenizer=tokenizers.tokenizer, options=options,
                                      template=template)
            result.bytes_per_config = finished.bytes_per_config
            result.total_rollouts = finished.total_rollouts
    result.readme = Path(out_dir) / "README.md"
    log.info("built %s: %d rollouts added, %d skipped, %d refused, %d in total", out, len(result.added),
             len(result.skipped), len(result.refused), result.total_rollouts)
    return result


@dataclass
class FinishedDataset:
    """What `finish_dataset` wrote.

    Attributes:
        readme: the README.md (the card).
        total_rollouts: rollouts in the whole dataset.
        bytes_per_config: parquet bytes per config over all shards.
        arrow_bytes: Arrow bytes per config over all shards.
        written: every file written (fsynced).
    """

    readme: Path
    total_rollouts: int
    bytes_per_config: dict[str, int]
    arrow_bytes: dict[str, int]
    written: list[Path]


def finish_dataset(stage: str | Path, parts: Sequence[PartResult], *, prefix: str,
                   tokenizer: TokenizerFiles | None = None, options: CardOptions | None = None,
                   template: str | Path | None = None) -> FinishedDataset:
    """Finish a dataset folder from the results of its build parts: everything but the swap.

    The card's statistics are the parts' aggregates merged in part order, with those of the
    summary shards the folder already held (read one row group at a time) placed where their
    names sort (before or after this build's `prefix`): the card is the one a single pass over
    every summary row in shard order would give. Arrow sizes: the parts' own, plus the existing
    shards' (decoded one row group at a time).

    Args:
        stage: the dataset (staging) folder the parts wrote into (it may hold an earlier dataset's shards).
        parts: every part's result (any order; merged by part index).
        prefix: the build's shard-name prefix (`writer.build_prefix`) the parts used.
        tokenizer: the captures' tokenizer files to store (None: none found).
        options: the card options (default: `CardOptions()`).
        template: the card template.

    Returns:
        A `FinishedDataset`.

    Raises:
        TokenizerMismatchError: the folder already stores another tokenizer.
        ArtifactError: an existing summary shard cannot be read.
    """
    stage = Path(stage)
    parts = sorted(parts, key=lambda p: p.part)
    options = options or CardOptions()
    written: list[Path] = [Path(f) for p in parts for f in p.sessions]
    new_shards = {c: [Path(f) for p in parts for f in p.shards.get(c, [])] for c in CONFIG_NAMES}
    arrow: dict[str, int] = {}
    for config in CONFIG_NAMES:
        folder = stage / "data" / config
        existing = sorted(set(folder.glob("*.parquet")) - set(new_shards[config]))
        if not existing and not new_shards[config]:  # every config keeps one (empty) shard: load_dataset needs it
            empty = folder / part_shard_name(prefix, 0, 0)
            ConfigWriter(config, empty).close()
            new_shards[config].append(empty)
        written.extend(new_shards[config])
        arrow[config] = arrow_num_bytes(existing) + sum(p.arrow_bytes.get(config, 0) for p in parts)
    aggregates = CardAggregates()
    old = sorted(set((stage / "data" / DEFAULT_CONFIG).glob("*.parquet")) - set(new_shards[DEFAULT_CONFIG]))
    aggregates.merge(CardAggregates.from_rows(iter_summary_rows([s for s in old if s.name < prefix])))
    for part in parts:
        aggregates.merge(part.aggregates)
    aggregates.merge(CardAggregates.from_rows(iter_summary_rows([s for s in old if s.name > prefix])))
    if tokenizer is not None:
        written.extend(sorted(write_tokenizer_files(tokenizer, stage).iterdir()))
    config_bytes = {c: sum(p.stat().st_size for p in (stage / "data" / c).glob("*.parquet")) for c in CONFIG_NAMES}
    readme = stage / "README.md"
    audit = kept_audit(stage)  # read from the earlier card before it is unlinked
    for rewritten in (readme, stage / CARD_OPTIONS_FILE):
        rewritten.unlink(missing_ok=True)  # hard links to the earlier dataset: never write through them
    written.append(save_card_options(options, stage))
    write_text_atomic(readme, render_card(aggregates, template=template, options=options, config_bytes=config_bytes,
                                          arrow_bytes=arrow, audit=audit))  # names the file on a full disk
    staging.fsync_tree(written + [readme])
    return FinishedDataset(readme=readme, total_rollouts=aggregates.n, bytes_per_config=config_bytes,
                           arrow_bytes=arrow, written=written)


def _run_parts(specs: list[PartSpec], common: dict[str, Any], *, workers: int, progress: bool) -> list[PartResult]:
    """Build the parts: in this process when there is one, else part 0 here and one spawned process per other part.

    This process builds a part itself rather than wait: a spawned process first pays seconds of
    imports (pyarrow, the schemas, the tokenizer), which this one has paid already.

    Raises:
        Whatever a part raises (the earliest failed part's); `ArtifactError` naming the folder a
        worker process was on when it died.
    """
    if len(specs) <= 1 or workers <= 1:
        return [build_part(spec, progress=progress, **common) for spec in specs]
    marks = Path(tempfile.mkdtemp(prefix="rollout-dataset-build-"))
    executor = concurrent.futures.ProcessPoolExecutor(max_workers=len(specs) - 1,
                                                      mp_context=multiprocessing.get_context("spawn"),
                                                      initializer=exit_with_parent, initargs=(os.getpid(),))
    try:
        futures = {executor.submit(run_part, dict(common, spec=spec, progress=progress,
                                                  progress_file=str(marks / f"{spec.part}.at"))): spec
                   for spec in specs[1:]}
        processes = list((getattr(executor, "_processes", None) or {}).values())  # to tell which one died
        a_worker_failed = threading.Event()

        def note_failure(future: concurrent.futures.Future[PartResult]) -> None:
            if not future.cancelled() and future.exception() is not None:  # exception() raises when cancelled
                a_worker_failed.set()

        for future in futures:
            future.add_done_callback(note_failure)
        try:
            here = build_part(specs[0], progress=progress, stop=a_worker_failed.is_set, **common)
        except PartStopped:  # a worker failed: its failure is the one to report, below
            here = None
        done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
        failed = sorted((futures[f].part, f) for f in done if f.exception() is not None)
        if not failed and here is not None:
            return [here, *(f.result() for f in futures)]
        _stop_workers(executor)  # a failed build does not wait for the other parts
        part, future = failed[0]
        exc = future.exception()
        if isinstance(exc, concurrent.futures.process.BrokenProcessPool):
            executor.shutdown(wait=True)  # every process joined: their exit codes are final
            raise ArtifactError(_crash_message(futures, marks, processes)) from None
        if isinstance(exc, (RolloutDatasetError, OSError)):
            raise exc
        raise ArtifactError(f"{_folder_at(specs[part], marks)}: build part {part} failed: "
                            f"{type(exc).__name__}: {exc}") from exc
    except BaseException:  # this part failed, SIGTERM (SystemExit), Ctrl-C: stop the workers first
        _stop_workers(executor)
        raise
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(marks, ignore_errors=True)


def _folder_at(spec: PartSpec, marks: Path) -> str:
    """The folder a part was building when it stopped (from its progress file)."""
    at = read_progress(marks / f"{spec.part}.at")
    return spec.folders[at[1]] if at and 0 <= at[1] < len(spec.folders) else f"(part {spec.part}: not started)"


def _crash_message(futures: dict[concurrent.futures.Future[PartResult], PartSpec], marks: Path,
                   processes: list[multiprocessing.process.BaseProcess]) -> str:
    """Name the folder the dead worker process was on (and where the parts stopped with it were)."""
    exits = {p.pid: p.exitcode for p in processes}
    died, stopped = [], []
    for future, spec in futures.items():
        if future.done() and future.exception() is None:
            continue
        at = read_progress(marks / f"{spec.part}.at")
        code = exits.get(at[0]) if at else None
        if at and code not in (None, 0, -signal.SIGTERM):  # a code means `at` named the pid
            how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            died.append(f"{_folder_at(spec, marks)} (part {spec.part}, pid {at[0]}, {how})")
        else:
            stopped.append(f"{_folder_at(spec, marks)} (part {spec.part})")
    where = "; ".join(died or stopped)
    also = f"; the other parts were stopped at {'; '.join(stopped)}" if died and stopped else ""
    return (f"a build worker process died (killed, out of memory, or crashed) while building {where}{also}. "
            "Nothing was written to the dataset folder; check that folder (rollout-dataset validate) and the "
            "machine's memory, then build again")


def _stop_workers(executor: concurrent.futures.ProcessPoolExecutor) -> None:
    """Terminate the worker processes (a failed build does not wait for the other parts to finish)."""
    for process in list((getattr(executor, "_processes", None) or {}).values()):
        if process.is_alive():
            process.terminate()
