"""`build`: artifact folders -> a Hub-ready dataset folder (parquet per config + README.md).

Each rollout is also written as a session of the Hub's agent-trace viewer in `traces/sessions/`
(see `traces`; pushed to a companion repo). The captures' tokenizer is stored in `tokenizer/` (see `tokenizer_files`); one dataset holds one.

Streams: one rollout is read, turned into rows and appended to the config shards before the next
is read, so memory stays flat as the number of rollouts grows. Building into a folder that already
holds a dataset adds new shards and skips rollouts already there (no duplicates, nothing deleted).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import pyarrow.parquet as pq
from tqdm.auto import tqdm

from rollout_dataset.builder.card import render_card
from rollout_dataset.builder.card_info import CardOptions, arrow_num_bytes, save_card_options
from rollout_dataset.builder.configs import CONFIG_NAMES, DEFAULT_CONFIG
from rollout_dataset.builder.rows import PREVIEW_CHARS, SAMPLES_MODES, read_artifact, rollout_rows, tokenizer_name
from rollout_dataset.builder.traces import write_session
from rollout_dataset.builder.tokenizer_files import TokenizerRegistry, stored_tokenizer_sha256, write_tokenizer_files
from rollout_dataset.builder.writer import ROW_GROUP_BYTES, DatasetWriter
from rollout_dataset.errors import ArtifactError, ConfigError

__all__ = ["BuildResult", "build", "find_artifact_dirs", "read_summary_rows", "dataset_rollout_ids"]

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


def find_artifact_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Expand the inputs: an artifact folder, or a folder holding artifact folders (any depth).

    Args:
        paths: folders given by the user.

    Returns:
        Artifact folders (those with a summary.json), in the given order, each tree sorted.

    Raises:
        ArtifactError: a path does not exist or holds no artifact folder.
    """
    out: list[Path] = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise ArtifactError(f"{p}: not a folder (give artifact folders or a folder of them)")
        if (p / "summary.json").is_file():
            found = [p]
        else:
            found = sorted(s.parent for s in p.rglob("summary.json"))
        if not found:
            raise ArtifactError(f"{p}: no artifact folder (summary.json) found in it")
        out.extend(x for x in found if x not in out)
    return out


def read_summary_rows(dataset_dir: str | Path) -> list[dict]:
    """Every summary row of a dataset folder (the small default config).

    Args:
        dataset_dir: the dataset folder.

    Returns:
        The rows, shard by shard.
    """
    rows: list[dict] = []
    for shard in sorted((Path(dataset_dir) / "data" / DEFAULT_CONFIG).glob("*.parquet")):
        rows.extend(pq.read_table(shard).to_pylist())
    return rows


def dataset_rollout_ids(dataset_dir: str | Path) -> set[str]:
    """The rollout ids a dataset folder already holds (read from its summary shards)."""
    ids: set[str] = set()
    for shard in (Path(dataset_dir) / "data" / DEFAULT_CONFIG).glob("*.parquet"):
        ids.update(pq.read_table(shard, columns=["rollout_id"]).column("rollout_id").to_pylist())
    return ids


def build(artifact_dirs: Iterable[str | Path], out_dir: str | Path, *, template: str | Path | None = None,
          progress: bool = True, pretty_name: str = "Agent rollouts (rollout-dataset)",
          license: str = "apache-2.0", row_group_bytes: int = ROW_GROUP_BYTES, samples: str = "preview",
          preview_chars: int = PREVIEW_CHARS, language: Iterable[str] = ("en",), homepage: str | None = None,
          repository: str | None = None, citation: str | None = None) -> BuildResult:
    """Build (or extend) a multi-config parquet dataset with its card.

    Args:
        artifact_dirs: artifact folders, or folders holding them.
        out_dir: the dataset folder; created if missing, extended if it already holds a dataset.
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
        ArtifactError: an input is missing or unreadable (this build's shards are removed; earlier
            shards are untouched).
        SchemaValidationError: summary.json, task.json or held_out_tests.json does not match its schema.
        TokenizerMismatchError: the rollouts (or the dataset and the rollouts) used different tokenizers;
            nothing of this build is kept (a ValueError).
        ConfigError: `samples` is not "preview" or "full", or `preview_chars` is below 100 (a ValueError).
    """
    from rollout_dataset.schema import validate
    from rollout_dataset.errors import SchemaValidationError

    if samples not in SAMPLES_MODES:
        raise ConfigError(f"samples={samples!r}: valid modes are {', '.join(SAMPLES_MODES)}")
    if preview_chars < 100:
        raise ConfigError(f"preview_chars={preview_chars}: must be >= 100")
    options = CardOptions(pretty_name=pretty_name, license=license, language=tuple(language), homepage=homepage,
                          repository=repository, citation=citation)
    folders = find_artifact_dirs(artifact_dirs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    present = dataset_rollout_ids(out)
    tokenizers = TokenizerRegistry(read_summary_rows(out), stored_tokenizer_sha256(out))
    result = BuildResult(out_dir=out)
    sessions: list[Path] = []  # this build's trace-viewer sessions (traces/sessions/<rollout_id>.jsonl)
    writer = DatasetWriter(out, row_group_bytes=row_group_bytes)
    ok = False
    try:
        for folder in tqdm(folders, desc="build", unit="rollout", disable=not progress):
            art = read_artifact(folder)
            for name in ("summary", "task", "held_out_tests"):
                try:
                    validate(art[name], name)
                except SchemaValidationError as exc:
                    raise SchemaValidationError([(str(folder / f"{name}.json"), p, r)
                                                 for _, p, r in exc.failures]) from None
            rid = art["summary"]["rollout_id"]
            if rid in present:
                log.info("%s: rollout %s already in %s; skipped", folder, rid, out)
                result.skipped.append(rid)
                continue
            tok = tokenizers.check(tokenizer_name(art), str(folder))
            art.update(tokenizer_sha256=tok.sha256 if tok else None, tokenizer_revision=tok.revision if tok else None)
            rows, stats = rollout_rows(art, samples, preview_chars=preview_chars)
            try:
                writer.add(rows)
            except ValueError as exc:
                raise ArtifactError(f"{folder}: a value does not fit the dataset schema: {exc}") from None
            sessions.append(write_session(art, out, rows["summary"][0]["group_id"]))
            art = rows = None  # keep one rollout in memory at a time
            present.add(rid)
            result.added.append(rid)
            result.cut_cells += stats["cut_cells"]
        if tokenizers.tokenizer is not None:
            write_tokenizer_files(tokenizers.tokenizer, out)
        ok = True
    finally:
        result.rows = writer.close()
        for config, w in writer.writers.items():
            others = [p for p in w.path.parent.glob("*.parquet") if p != w.path]
            # drop this build's shards on failure, and empty ones where another shard exists
            if not ok or (w.rows == 0 and others):
                w.path.unlink(missing_ok=True)
        for path in sessions if not ok else []:
            path.unlink(missing_ok=True)
    summary_rows = read_summary_rows(out)
    result.bytes_per_config = {c: sum(p.stat().st_size for p in (out / "data" / c).glob("*.parquet"))
                               for c in CONFIG_NAMES}
    readme = out / "README.md"
    arrow = {c: arrow_num_bytes(sorted((out / "data" / c).glob("*.parquet"))) for c in CONFIG_NAMES}
    save_card_options(options, out)
    readme.write_text(render_card(summary_rows, template=template, options=options,
                                  config_bytes=result.bytes_per_config, arrow_bytes=arrow), encoding="utf-8")
    result.readme = readme
    result.total_rollouts = len(summary_rows)
    log.info("built %s: %d rollouts added, %d skipped, %d in total", out, len(result.added),
             len(result.skipped), result.total_rollouts)
    return result
