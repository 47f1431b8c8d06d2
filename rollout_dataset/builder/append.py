"""`build --append`: add rollouts to an existing local dataset as new shards, atomically.

`append_to_dataset(artifact_dirs, dataset_dir)`:

1. refuses a `dataset_dir` that is not a dataset built by this tool (missing, empty, or anything
   else: `DatasetDirError` naming it) and takes the build lock on it (`staging.exclusive`: a
   second append or build into the same folder is refused while this one runs);
2. skips, without building them, the artifact folders whose ``summary.json`` names a rollout the
   dataset already holds (reported in `BuildResult.skipped`);
3. stages the dataset beside it (``<dir>.staging-<pid>``: every existing file hard-linked, so existing
   shards are the same files, never rewritten) and builds the other folders with `build` into a part
   inside the staging folder;
4. merges the part in (`builder.merge.merge_part`: same tokenizer or `TokenizerMismatchError`;
   rows of rollouts already there dropped exactly as `push` drops them; shards moved in under new
   names that sort after the existing ones), renders the card over old + new
   (`builder.merge.write_card`, with the dataset's stored card options), fsyncs;
5. swaps the staging folder in with one atomic `renameat2(RENAME_EXCHANGE)` (`staging.staged`).

Why the whole folder is swapped rather than the new shards renamed into ``data/<config>/`` one by
one: a reader listing the folder between two such renames would see the new rollout's `summary`
row without its `sequences` rows, or new shards with the old card. With the exchange there is one
moment at which the dataset changes, and a reader (`load_dataset`) sees the whole earlier dataset
or the whole new one. The cost is one hard link per existing file, not a copy. A crash, SIGKILL or
SIGTERM at any point before the exchange leaves `dataset_dir` exactly as it was (the next build or
append deletes the leftover staging folder); after it, the new dataset is complete.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable

from rollout_dataset.builder import staging
from rollout_dataset.builder.build import BuildResult, build
from rollout_dataset.builder.card_info import load_card_options
from rollout_dataset.builder.configs import CONFIG_NAMES
from rollout_dataset.builder.inputs import find_artifact_dirs
from rollout_dataset.builder.merge import PARTS_DIR, BuiltPart, adding_to, merge_parts
from rollout_dataset.builder.rows import PREVIEW_CHARS
from rollout_dataset.builder.writer import ROW_GROUP_BYTES
from rollout_dataset.errors import DatasetDirError

__all__ = ["append_to_dataset", "require_dataset"]

log = logging.getLogger(__name__)


def require_dataset(folder: str | Path) -> None:
    """Refuse a folder that is not a dataset built by rollout-dataset.

    Args:
        folder: the dataset folder to extend.

    Raises:
        DatasetDirError: it is missing, a symlink or a file, or has no README.md with the
            ``rollout-dataset`` tag (the message names it and says what was found).
    """
    folder = Path(folder)
    if folder.is_symlink():
        raise DatasetDirError(f"{folder}: a symlink; give the real dataset folder to append to")
    if not folder.is_dir():
        raise DatasetDirError(f"{folder}: no such dataset folder; --append adds to an existing dataset "
                              "(build it first without --append)")
    if not staging.is_built_dataset(folder):
        entries = sorted(p.name for p in folder.iterdir())
        found = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "") or "nothing"
        raise DatasetDirError(f"{folder}: not a rollout-dataset dataset (it holds {found}; no README.md with the "
                              f"{staging.DATASET_TAG!r} tag); --append adds only to a dataset this tool built")


def _shown(folders: list[Path]) -> str:
    return ", ".join(map(str, folders[:3])) + (f" and {len(folders) - 3} more" if len(folders) > 3 else "")


def append_to_dataset(artifact_dirs: Iterable[str | Path], dataset_dir: str | Path, *,
                      template: str | Path | None = None, progress: bool = False,
                      row_group_bytes: int = ROW_GROUP_BYTES, samples: str = "preview",
                      preview_chars: int = PREVIEW_CHARS, workers: int = 1) -> BuildResult:
    """Add rollouts to an existing dataset folder as new shards (see the module docstring).

    Args:
        artifact_dirs: artifact folders, or folders holding them.
        dataset_dir: a dataset folder this tool built.
        template: the card template (default: the builder's).
        progress: show a progress bar on stderr (off by default; the CLI turns it on).
        row_group_bytes: see `build`.
        samples: see `build` (``"preview"`` or ``"full"``; shards of both modes coexist).
        workers: processes that build the new rollouts (see `build`).
        preview_chars: see `build`.

    Returns:
        A `BuildResult`: `added` (in input order), `skipped` (already in the dataset, or given twice),
        `rows` added per config, `total_rollouts`, `bytes_per_config` of the whole folder.
        When nothing is new the folder is not touched at all (`readme` is None).

    Raises:
        DatasetDirError: `dataset_dir` is not a dataset built by this tool, or another build or
            append is writing to it.
        SchemaValidationError: an artifact folder fails a check of `validate` (nothing is added).
        TokenizerMismatchError: the rollouts used another tokenizer than the dataset (nothing is added).
        ArtifactError: an input is not a folder or holds no artifact folder, or a shard of the
            dataset is not complete parquet (named).
        ConfigError: bad `samples` / `preview_chars`.
    """
    out = Path(dataset_dir).absolute()
    require_dataset(out)
    folders = find_artifact_dirs(artifact_dirs)
    result = BuildResult(out_dir=Path(dataset_dir), rows={c: 0 for c in CONFIG_NAMES})
    with adding_to(out, folders, require_dataset) as seen:
        for folder, rid in seen.there:
            log.info("%s: rollout %s already in %s; skipped", folder, rid, out)
            result.skipped.append(rid)
        if not seen.todo:
            result.total_rollouts = len(seen.present)
            log.info("%s: every rollout given is already there; nothing appended", out)
            return result
        with staging.staged(out) as stage:
            part = stage / PARTS_DIR / "append"
            built = build(seen.todo, part, template=template, progress=progress, row_group_bytes=row_group_bytes,
                          samples=samples, preview_chars=preview_chars, workers=workers)
            # `skipped`: given twice among the inputs
            merge_parts(stage, out, seen.present, [BuiltPart(part, f"the rollouts of {_shown(seen.todo)}", built.added,
                                                             built.skipped, built.cut_cells)],
                        result, load_card_options(stage), template=template)
    result.readme = Path(dataset_dir) / "README.md"
    log.info("appended to %s: %d rollouts added, %d skipped, %d in total", out, len(result.added),
             len(result.skipped), result.total_rollouts)
    return result
