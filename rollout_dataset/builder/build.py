"""`build`: artifact folders -> a Hub-ready dataset folder (parquet per config + README.md).

Each rollout is also written as a session of the Hub's agent-trace viewer in `traces/sessions/`
(see `traces`; pushed to a companion repo). The captures' tokenizer is stored in `tokenizer/` (see
`tokenizer_files`); one dataset holds one.

Streams: one rollout is read, checked (the rules of `validate`), turned into rows and appended to
the config shards before the next is read, so memory stays flat as the number of rollouts grows.
Building into a folder that already holds a dataset adds new shards and skips rollouts already there
(no duplicates, nothing deleted). The whole dataset folder is staged beside `--out` and swapped in
when complete (`staging`): a failed or killed build leaves the earlier dataset as it was.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from rollout_dataset.builder import staging
from rollout_dataset.builder.card import render_card
from rollout_dataset.builder.configs import CONFIG_NAMES, DEFAULT_CONFIG
from rollout_dataset.builder.card_info import CARD_OPTIONS_FILE, CardOptions, arrow_num_bytes, save_card_options
from rollout_dataset.builder.inputs import find_artifact_dirs, load_checked_artifact
from rollout_dataset.builder.rows import PREVIEW_CHARS, SAMPLES_MODES, rollout_rows, tokenizer_name
from rollout_dataset.builder.tokenizer_files import TokenizerRegistry, stored_tokenizer_sha256, write_tokenizer_files
from rollout_dataset.builder.traces import write_session
from rollout_dataset.builder.writer import ROW_GROUP_BYTES, DatasetWriter
from rollout_dataset.errors import ArtifactError, ConfigError

__all__ = ["BuildResult", "build", "find_artifact_dirs", "read_summary_rows", "dataset_rollout_ids", "check_shards"]

log = logging.getLogger(__name__)


@dataclass
class BuildResult:
    """What `build` did.

    Attributes:
        out_dir: the dataset folder.
        added: rollout ids added by this build.
        skipped: rollout ids skipped because the dataset (or an earlier input) already had them.
        rows: rows written per config by this build.
        total_rollouts: rollouts in the dataset after the build.
        bytes_per_config: parquet bytes per config in the whole dataset folder.
        readme: the rendered README.md.
        cut_cells: text cells cut to the cell limit by this build.
    """

    out_dir: Path
    added: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
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


def read_summary_rows(dataset_dir: str | Path) -> list[dict]:
    """Every summary row of a dataset folder (the small default config).

    Args:
        dataset_dir: the dataset folder.

    Returns:
        The rows, shard by shard.

    Raises:
        ArtifactError: a summary shard cannot be read (named).
    """
    rows: list[dict] = []
    for shard in sorted((Path(dataset_dir) / "data" / DEFAULT_CONFIG).glob("*.parquet")):
        rows.extend(_read_shard(shard).to_pylist())
    return rows


def dataset_rollout_ids(dataset_dir: str | Path) -> set[str]:
    """The rollout ids a dataset folder already holds (read from its summary shards).

    Raises:
        ArtifactError: a summary shard cannot be read (named).
    """
    ids: set[str] = set()
    for shard in (Path(dataset_dir) / "data" / DEFAULT_CONFIG).glob("*.parquet"):
        ids.update(_read_shard(shard, ["rollout_id"]).column("rollout_id").to_pylist())
    return ids


def build(artifact_dirs: Iterable[str | Path], out_dir: str | Path, *, template: str | Path | None = None,
          progress: bool = True, pretty_name: str = "Agent rollouts (rollout-dataset)",
          license: str = "apache-2.0", row_group_bytes: int = ROW_GROUP_BYTES, samples: str = "preview",
          preview_chars: int = PREVIEW_CHARS, language: Iterable[str] = ("en",), homepage: str | None = None,
          repository: str | None = None, citation: str | None = None) -> BuildResult:
    """Build (or extend) a multi-config parquet dataset with its card, atomically.

    Every artifact folder is checked with the rules of `rollout-dataset validate`
    (`schema.check.check_artifact_dir`) before any of it becomes rows; the first invalid folder stops
    the build. The dataset is written in ``<out_dir>.staging-<pid>`` and swapped into place whole
    when complete (see `builder.staging`): a failed, interrupted or killed build leaves `out_dir`
    as it was.

    Args:
        artifact_dirs: artifact folders, or folders holding them.
        out_dir: the dataset folder: new, empty, or a dataset this tool built (extended: rollouts
            already in it are skipped). Anything else is refused.
        template: the card template (default: the repo's `dataset_card.md`).
        progress: show a progress bar.
        pretty_name: the card's display name.
        license: the card's license id.
        row_group_bytes: Arrow bytes buffered per config before a row group is written; with one
            rollout in memory at a time, this bounds the build's memory.
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

    Returns:
        A `BuildResult`.

    Raises:
        SchemaValidationError: an artifact folder fails a check of `validate` (a file missing,
            unreadable, not UTF-8, not JSON, off its schema, inconsistent, or a symlink leaving the
            folder); one `(file, json_path, reason)` per failure of that folder.
        ArtifactError: an input path is not a folder or holds no artifact folder, a value does not
            fit its column, or a shard of the existing dataset is not complete parquet (named).
        DatasetDirError: `out_dir` holds something other than a dataset built by this tool, or
            another build is writing to it.
        TokenizerMismatchError: the rollouts (or the dataset and the rollouts) used different tokenizers;
            nothing of this build is kept (a ValueError).
        ConfigError: `samples` is not "preview" or "full", or `preview_chars` is below 100 (a ValueError).
    """
    if samples not in SAMPLES_MODES:
        raise ConfigError(f"samples={samples!r}: valid modes are {', '.join(SAMPLES_MODES)}")
    if preview_chars < 100:
        raise ConfigError(f"preview_chars={preview_chars}: must be >= 100")
    options = CardOptions(pretty_name=pretty_name, license=license, language=tuple(language), homepage=homepage,
                          repository=repository, citation=citation)
    folders = find_artifact_dirs(artifact_dirs)
    out = Path(out_dir).absolute()
    staging.check_out_dir(out)
    result = BuildResult(out_dir=Path(out_dir))
    with staging.terminate_raises(), staging.locked_out_dir(out):
        staging.check_out_dir(out)  # again, under the lock
        check_shards(out)
        present = dataset_rollout_ids(out)
        tokenizers = TokenizerRegistry(read_summary_rows(out), stored_tokenizer_sha256(out))
        with staging.staging_folder(out) as stage:
            written = _write_rollouts(folders, stage, present, tokenizers, result, row_group_bytes=row_group_bytes,
                                      samples=samples, preview_chars=preview_chars, progress=progress)
            if tokenizers.tokenizer is not None:
                written.extend(sorted(write_tokenizer_files(tokenizers.tokenizer, stage).iterdir()))
            summary_rows = read_summary_rows(stage)
            result.bytes_per_config = {c: sum(p.stat().st_size for p in (stage / "data" / c).glob("*.parquet"))
                                       for c in CONFIG_NAMES}
            arrow = {c: arrow_num_bytes(sorted((stage / "data" / c).glob("*.parquet"))) for c in CONFIG_NAMES}
            readme = stage / "README.md"
            for rewritten in (readme, stage / CARD_OPTIONS_FILE):
                rewritten.unlink(missing_ok=True)  # hard links to the earlier dataset: never write through them
            written.append(save_card_options(options, stage))
            readme.write_text(render_card(summary_rows, template=template, options=options,
                                          config_bytes=result.bytes_per_config, arrow_bytes=arrow), encoding="utf-8")
            staging.fsync_tree(written + [readme])
            staging.checkpoint("staged")
            staging.commit(stage, out)
    result.readme = Path(out_dir) / "README.md"
    result.total_rollouts = len(summary_rows)
    log.info("built %s: %d rollouts added, %d skipped, %d in total", out, len(result.added),
             len(result.skipped), result.total_rollouts)
    return result


def _write_rollouts(folders: list[Path], stage: Path, present: set[str], tokenizers: TokenizerRegistry,
                    result: BuildResult, *, row_group_bytes: int, samples: str, preview_chars: int,
                    progress: bool) -> list[Path]:
    """Check each folder and append its rows to new shards in `stage`; fills `result`.

    Args:
        present: rollout ids already in the dataset (skipped; grows as rollouts are added).
        tokenizers: the dataset's tokenizer so far (a rollout with another one is refused).

    Returns:
        The files written: shards (a config without rows keeps no empty shard beside others) and
        trace-viewer sessions.
    """
    writer = DatasetWriter(stage, row_group_bytes=row_group_bytes)
    sessions: list[Path] = []  # this build's trace-viewer sessions (traces/sessions/<rollout_id>.jsonl)
    try:
        for folder in tqdm(folders, desc="build", unit="rollout", disable=not progress):
            art = load_checked_artifact(folder)
            rid = art["summary"]["rollout_id"]
            if rid in present:
                log.info("%s: rollout %s already in the dataset; skipped", folder, rid)
                result.skipped.append(rid)
                continue
            tok = tokenizers.check(tokenizer_name(art), str(folder))
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
            sessions.append(write_session(art, stage, rows["summary"][0]["group_id"]))
            art = rows = None  # keep one rollout in memory at a time
            present.add(rid)
            result.added.append(rid)
            result.cut_cells += stats["cut_cells"]
            staging.checkpoint("rollout")
    finally:
        result.rows = writer.close()
    written = list(sessions)
    for w in writer.writers.values():
        if w.rows == 0 and any(p != w.path for p in w.path.parent.glob("*.parquet")):
            w.path.unlink()  # an empty shard beside others adds nothing
        else:
            written.append(w.path)
    return written
