"""Where the viewer's rollouts come from: artifact folders (one, or a tree) or a built dataset folder.

Both sources hand out the same shapes, so the pages have one code path:

* `index_rows()` — one small record per rollout (ids, rewards, counts; no token arrays), the
  index page's rows. A dataset reads only the `summary` (and `audit`) config's small columns, row
  group by row group, so 10k rollouts list in bounded memory.
* `rollout_rows(rid)` — that rollout's rows of every dataset config (`summary`, `task`, `trace`,
  `turns`, `sequences`, `conversations`, `visible_tests`, `held_out_tests`, `audit`) plus
  ``extra`` (what only an artifact folder holds: the Crafter decisions, `audit.json`). An artifact
  folder is checked with `check_artifact_dir` (the one definition of a valid folder) and turned into
  rows by the builder's own `rollout_rows`, so the viewer shows what a build would publish.

Nothing here writes: files are opened for reading only. A rollout is reached by an id found when the
source was scanned (never by a path taken from a URL), and a symlink whose target leaves PATH is
neither followed into nor read.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterator

from rollout_dataset.artifact_files import ARTIFACT_FILES, ROLLOUT_FILE, SUMMARY_FILE, TRACE_FILE
from rollout_dataset.errors import ArtifactError

__all__ = ["RolloutSource", "ArtifactSource", "DatasetSource", "open_source", "RolloutNotFound", "SUMMARY_FIELDS"]

log = logging.getLogger(__name__)

#: summary fields the index shows (the `summary` config's columns of the same names).
SUMMARY_FIELDS = ("rollout_id", "task_id", "env", "harness", "model", "group_id", "env_reward",
                  "reward_after_penalties", "stepwise", "captured_calls", "agent_turns", "trainable_tokens",
                  "longest_sequence_tokens", "capture_level", "trainable", "findings_count", "continuity",
                  "stop_reason", "timed_out", "held_out_tests", "held_out_passed", "env_metrics")
#: the audit figures the index shows (audit.json ``summary``; the `audit` config's columns).
AUDIT_FIELDS = ("tokens_scored", "mean_abs_diff", "max_abs_diff", "share_over_1e-2", "kl_k3")
_DATASET_MARK = Path("data") / "summary"
_CACHED_ROLLOUTS = 4  # assembled rollouts kept in memory (a 32k x 200-call one is large)
#: columns no page shows (the messages and token arrays again): dropped before a rollout is cached.
_UNSHOWN = {"trace": ("request_json", "response_json"), "turns": ("prompt_ids_delta", "output_ids", "per_token_logps", "mask"),
            "samples": ("text",)}


class RolloutNotFound(ArtifactError, KeyError):
    """No rollout of that id in the source."""


def _inside(path: Path, root: Path) -> bool:
    """Whether `path` (symlinks resolved) stays inside `root`."""
    try:
        return path.resolve(strict=True).is_relative_to(root)
    except (OSError, RuntimeError):
        return False


#: the audit config's JSON-text columns (the config is written by `rollout-dataset audit`).
_AUDIT_JSON_COLUMNS = frozenset({"summary", "sequences", "not_comparable", "worst"})


@functools.lru_cache(maxsize=None)
def _json_columns(config: str) -> frozenset[str]:
    """The columns of a config the builder stores as JSON text (dtype ``json``)."""
    from rollout_dataset.builder.configs import CONFIG_NAMES, resolved_columns

    if config == "audit":
        return _AUDIT_JSON_COLUMNS
    if config not in CONFIG_NAMES:
        return frozenset()
    return frozenset(c.name for c in resolved_columns(config) if c.dtype == "json")


def _decoded(config: str, row: dict[str, Any]) -> dict[str, Any]:
    """A dataset row with its JSON-text columns parsed (a cell that does not parse stays text)."""
    out = dict(row)
    for name in _json_columns(config) & out.keys():
        value = out[name]
        if isinstance(value, str):
            try:
                out[name] = json.loads(value)
            except json.JSONDecodeError:
                pass
    return out


class RolloutSource:
    """What both sources offer (see the module docstring).

    Args:
        root: the folder given to ``view``.
    """

    kind = "source"

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._cache: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._tokenizer: Any = None
        self._tokenizer_error: str | None = None

    def index_rows(self) -> Iterator[dict[str, Any]]:
        """Yield one index record per rollout (see `SUMMARY_FIELDS`)."""
        raise NotImplementedError

    def shown(self, text: str) -> str:
        """A message for a page: the root's path written as its name (a page, or an export uploaded
        beside the dataset, names no path of this machine).

        Args:
            text: an error or validation message.

        Returns:
            The message with every occurrence of the root's path replaced by the root's name.
        """
        return text.replace(str(self.root), self.root.name)

    def _load_rollout(self, rid: str) -> dict[str, Any]:
        raise NotImplementedError

    def rollout_rows(self, rid: str) -> dict[str, Any]:
        """Every config's rows of one rollout (kept in a small LRU cache).

        Args:
            rid: the rollout's id, as `index_rows` gave it.

        Returns:
            ``{"rows": {config: [row, ...]}, "extra": {...}, "errors": [str, ...]}``; a folder that
            fails validation has its failures in ``errors`` and whatever rows could be read.

        Raises:
            RolloutNotFound: no rollout of that id.
        """
        with self._lock:
            if rid in self._cache:
                self._cache.move_to_end(rid)
                return self._cache[rid]
        loaded = self._load_rollout(rid)
        for config, columns in _UNSHOWN.items():
            loaded["rows"][config] = [{k: v for k, v in r.items() if k not in columns}
                                      for r in loaded["rows"].get(config) or []]
        with self._lock:
            self._cache[rid] = loaded
            while len(self._cache) > _CACHED_ROLLOUTS:
                self._cache.popitem(last=False)
        return loaded

    def tokenizer_spec(self, rows: dict[str, Any]) -> str | None:
        """The tokenizer to decode a rollout's ids with (a folder or ``builtin``), or None."""
        raise NotImplementedError

    def _holds(self, path: Path) -> bool:
        """Whether `path` is a folder inside the viewer's root (symlinks resolved)."""
        try:
            resolved = path.resolve(strict=True)
            return resolved.is_dir() and resolved.is_relative_to(Path(self.root).resolve(strict=True))
        except (OSError, RuntimeError):
            return False

    def tokenizer(self, spec: str | None) -> tuple[Any, str | None]:
        """Load a tokenizer for decoding: the built-in one, Harmony, or a folder inside the root, nothing else
        (a Hub id or a path outside the root named in a rollout's files is refused, never fetched).

        Args:
            spec: from `tokenizer_spec`.

        Returns:
            ``(tokenizer or None, error or None)``.
        """
        if spec is None:
            return None, "no tokenizer is recorded for this rollout: ids are shown undecoded"
        from rollout_dataset.harmony import HARMONY_TOKENIZER

        if spec not in ("builtin", HARMONY_TOKENIZER) and not self._holds(Path(spec)):  # both ship with the package
            # a name from the rollout's own files: never a Hub request, never a path outside what was given
            return None, (f"tokenizer {Path(spec).name!r} is not among the files given to the viewer (only the "
                          "built-in one or a tokenizer folder inside PATH is loaded): ids are shown undecoded")
        from rollout_dataset.tokenizers import load_tokenizer

        try:
            return load_tokenizer(spec), None
        except Exception as exc:  # noqa: BLE001 - a Hub id offline, a broken folder: ids shown undecoded
            return None, f"tokenizer {spec!r} could not be loaded ({type(exc).__name__}: {exc}); ids shown undecoded"


class ArtifactSource(RolloutSource):
    """One artifact folder, or a tree of them (found by their ``summary.json``).

    Args:
        root: the folder.
    """

    kind = "artifacts"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.folders: dict[str, Path] = {}
        for folder in self._walk():
            rid = folder.relative_to(self.root).as_posix() or "."
            self.folders[rid] = folder

    def _walk(self) -> list[Path]:
        found = []
        for dirpath, dirnames, filenames in os.walk(self.root, followlinks=False):
            here = Path(dirpath)
            # a symlinked folder is never walked into (os.walk lists it in dirnames but does not follow)
            dirnames[:] = sorted(d for d in dirnames if not (here / d).is_symlink() and not d.startswith("."))
            if SUMMARY_FILE in filenames or ROLLOUT_FILE in filenames:
                found.append(here)
        return found

    def _read(self, folder: Path, name: str, schema: str | None) -> tuple[Any, str | None]:
        from rollout_dataset.schema.check import check_document, file_problem, format_failure, load_json_file

        path = folder / name
        problem = file_problem(path, folder)
        if problem is None and not _inside(path, self.root):
            problem = "outside the folder given to view; refused"
        if problem is not None:
            return None, f"{path.relative_to(self.root)}: {problem}"
        doc, failures = load_json_file(path)
        if not failures and schema is not None:
            failures = check_document(doc, schema, str(path))
        if failures:
            return None, "; ".join(format_failure(f) for f in failures[:5])
        return doc, None

    def index_rows(self) -> Iterator[dict[str, Any]]:
        """Yield one index record per artifact folder (summary.json; token counts from rollout.json)."""
        from rollout_dataset.builder.rows import group_id_of

        for rid, folder in self.folders.items():
            summary, error = self._read(folder, SUMMARY_FILE, "summary")
            row: dict[str, Any] = {"id": rid, "error": error}
            if summary is not None:
                row.update({k: summary.get(k) for k in SUMMARY_FIELDS if k in summary})
                row["group_id"] = group_id_of(summary)
            rollout, rollout_error = self._read(folder, ROLLOUT_FILE, None)
            if isinstance(rollout, dict):
                seqs = [s for s in rollout.get("sequences") or [] if isinstance(s, dict)]
                row["longest_sequence_tokens"] = max((len(s.get("input_ids") or []) for s in seqs), default=0)
            elif row["error"] is None:
                row["error"] = rollout_error
            audit, _ = self._read(folder, "audit.json", None) if (folder / "audit.json").exists() else (None, None)
            if isinstance(audit, dict):
                row["audit"] = audit.get("summary")
            yield row

    def _load_rollout(self, rid: str) -> dict[str, Any]:
        from rollout_dataset.builder.rows import rollout_rows as build_rows
        from rollout_dataset.schema.check import check_artifact_dir, format_failure

        folder = self.folders.get(rid)
        if folder is None:
            raise RolloutNotFound(f"no rollout {rid!r} under {self.root}")
        docs: dict[str, Any] = {}
        errors = [format_failure(f) for f in check_artifact_dir(folder, documents=docs)]
        art: dict[str, Any] = {"folder": str(folder)}
        for name in ARTIFACT_FILES:
            art[name.split(".")[0]] = docs.get(name)
        rows: dict[str, list[dict[str, Any]]] = {}
        if not errors:
            try:
                built, _ = build_rows(art)
                rows = {config: [_decoded(config, r) for r in found] for config, found in built.items()}
            except Exception as exc:  # noqa: BLE001 - a shape the builder cannot take: shown in the page
                errors.append(f"{folder}: the builder could not read this folder: {type(exc).__name__}: {exc}")
        elif isinstance(docs.get(SUMMARY_FILE), dict):
            rows["summary"] = [dict(docs[SUMMARY_FILE], group_id=None)]
        extra: dict[str, Any] = {"folder": rid}
        trace = docs.get(TRACE_FILE)
        if isinstance(trace, dict):  # per-call on-policy continuity: in trace.json, not in a dataset config
            extra["call_continuity"] = {c.get("index"): c.get("continuity") for c in trace.get("calls") or []
                                        if isinstance(c, dict) and c.get("continuity") is not None}
        rollout = docs.get(ROLLOUT_FILE)
        if isinstance(rollout, dict):
            extra["calls"] = rollout.get("calls")
            extra["crafter"] = (rollout.get("metadata") or {}).get("crafter")
            extra["continuity"] = rollout.get("continuity")
        for name, key in (("audit.json", "audit"), ("achievements.json", "achievements")):
            if (folder / name).exists():
                doc, error = self._read(folder, name, None)
                extra[key] = doc
                if error:
                    errors.append(error)
        return {"rows": rows, "extra": extra, "errors": errors}

    def tokenizer_spec(self, rows: dict[str, Any]) -> str | None:
        """The tokenizer the capture named (task.json config; ``builtin`` or a folder)."""
        summary = (rows.get("summary") or [{}])[0]
        return summary.get("tokenizer") or None


class DatasetSource(RolloutSource):
    """A built dataset folder (``data/<config>/*.parquet``), read with pyarrow by row group.

    Args:
        root: the dataset folder.
    """

    kind = "dataset"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self._locations: dict[str, dict[str, list[tuple[Path, int]]]] = {}

    def _files(self, config: str) -> list[Path]:
        folder = self.root / "data" / config
        if not folder.is_dir() or folder.is_symlink():
            return []
        return [p for p in sorted(folder.glob("*.parquet")) if not p.is_symlink() and p.is_file()]

    def _row_groups(self, config: str, columns: list[str]) -> Iterator[Any]:
        import pyarrow.parquet as pq

        for path in self._files(config):
            try:
                parquet = pq.ParquetFile(path)
            except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds for a file that is not parquet
                raise ArtifactError(f"{path.relative_to(self.root)}: not a readable parquet file: {exc}") from None
            names = set(parquet.schema_arrow.names)
            for group in range(parquet.num_row_groups):
                yield path, group, parquet.read_row_group(group, columns=[c for c in columns if c in names])

    def index_rows(self) -> Iterator[dict[str, Any]]:
        """Yield one index record per `summary` row (small columns only, one row group at a time)."""
        audits = self._audit_summaries()
        for _, _, table in self._row_groups("summary", list(SUMMARY_FIELDS)):
            for row in table.to_pylist():
                row = _decoded("summary", row)
                row["id"] = row["rollout_id"]
                row["error"] = None
                if row["rollout_id"] in audits:
                    row["audit"] = audits[row["rollout_id"]]
                yield row

    def _audit_summaries(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if not self._files("audit"):
            return out
        for _, _, table in self._row_groups("audit", ["rollout_id", "summary"]):
            for row in table.to_pylist():
                out[row["rollout_id"]] = _decoded("audit", row).get("summary")
        return out

    def _where(self, config: str) -> dict[str, list[tuple[Path, int]]]:
        """rollout_id -> the (file, row group) pairs holding its rows (the id column alone is read)."""
        with self._lock:
            known = self._locations.get(config)
        if known is not None:
            return known
        where: dict[str, list[tuple[Path, int]]] = {}
        for path, group, table in self._row_groups(config, ["rollout_id"]):
            for rid in set(table.column("rollout_id").to_pylist()):
                where.setdefault(rid, []).append((path, group))
        with self._lock:
            self._locations[config] = where
        return where

    def _load_rollout(self, rid: str) -> dict[str, Any]:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from rollout_dataset.builder.configs import CONFIG_NAMES

        if rid not in self._where("summary"):
            raise RolloutNotFound(f"no rollout {rid!r} in {self.root}")
        rows: dict[str, list[dict[str, Any]]] = {}
        errors: list[str] = []
        for config in (*CONFIG_NAMES, "audit"):
            found = []
            try:
                for path, group in self._where(config).get(rid, []):
                    table = pq.ParquetFile(path).read_row_group(group)
                    found.extend(table.filter(pc.equal(table.column("rollout_id"), pa.scalar(rid))).to_pylist())
            except Exception as exc:  # noqa: BLE001 - a broken shard is shown as an error in the page, the rest still listed
                errors.append(f"config {config}: {type(exc).__name__}: {exc}")
            rows[config] = [_decoded(config, r) for r in found]
        extra: dict[str, Any] = {}
        if rows.get("audit"):
            extra["audit"] = rows["audit"][0]
        return {"rows": rows, "extra": extra, "errors": errors}

    def tokenizer_spec(self, rows: dict[str, Any]) -> str | None:
        """The dataset's own ``tokenizer/`` folder when it ships one, else the summary's name."""
        folder = self.root / "tokenizer"
        if folder.is_dir() and not folder.is_symlink() and (folder / "tokenizer.json").is_file():
            return str(folder)
        summary = (rows.get("summary") or [{}])[0]
        return summary.get("tokenizer") or None


def open_source(path: str | Path) -> RolloutSource:
    """The source for a folder given to ``view``.

    Args:
        path: an artifact folder, a tree of them, or a built dataset folder.

    Returns:
        A `DatasetSource` when ``path/data/summary`` exists, else an `ArtifactSource`.

    Raises:
        ArtifactError: the path is not a folder, or holds no rollout.
    """
    root = Path(path)
    if not root.is_dir():
        raise ArtifactError(f"{root}: not a folder (give an artifact folder, a tree of them, or a dataset folder)")
    if (root / _DATASET_MARK).is_dir():
        return DatasetSource(root)
    source = ArtifactSource(root)
    if not source.folders:
        raise ArtifactError(f"{root}: no rollout here (no summary.json or rollout.json in it or below it, "
                            "and no data/summary/ of a built dataset)")
    return source
