"""Readers that stream the rollouts to audit out of artifact folders, trees of them, or a built dataset.

A built dataset is read from its parquet `sequences` config in pyarrow record batches (a rollout's
rows at a time), and the per-call sampling from the `trace` config's `effective_sampling_params`
column alone, so a 10k-rollout dataset is never loaded whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from rollout_dataset.artifact_files import ROLLOUT_FILE
from rollout_dataset.errors import ArtifactError

__all__ = ["AuditSequence", "AuditRollout", "iter_rollouts", "is_dataset", "artifact_folders"]

_SEQ_COLUMNS = ["rollout_id", "sequence_index", "trainable", "node_ids", "turn_lengths", "input_ids", "loss_mask",
                "logprobs"]


@dataclass
class AuditSequence:
    """One sequence to score: ids, mask, captured logprobs, and the call owning each sampled position."""

    sequence_index: int
    input_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    node_ids: list[int]
    turn_lengths: list[int]
    trainable: bool

    def sampled_calls(self) -> list[tuple[int, int]]:
        """Returns: ``(position, call_index)`` of every loss-mask one, the calls taken in path order."""
        out, turn, used = [], 0, 0
        for pos, m in enumerate(self.loss_mask):
            if not m:
                continue
            while turn < len(self.turn_lengths) and used >= self.turn_lengths[turn]:
                turn, used = turn + 1, 0
            call = self.node_ids[min(turn, len(self.node_ids) - 1)] if self.node_ids else -1
            out.append((pos, call))
            used += 1
        return out


@dataclass
class AuditRollout:
    """One rollout: its id, where it came from, its sequences and each call's effective sampling."""

    rollout_id: str
    source: Path
    sequences: list[AuditSequence]
    sampling: dict[int, dict[str, Any]] = field(default_factory=dict)
    folder: Path | None = None  # an artifact folder (audit.json is written there)


def is_dataset(path: Path) -> bool:
    """Whether `path` is a built dataset folder (it has ``data/sequences/*.parquet``)."""
    return (path / "data" / "sequences").is_dir()


def artifact_folders(path: Path) -> list[Path]:
    """The artifact folders at or under `path` (folders holding a rollout.json), sorted.

    Raises:
        ArtifactError: `path` does not exist, or holds neither a dataset nor any rollout.json.
    """
    if not path.exists():
        raise ArtifactError(f"{path}: no such file or folder")
    if (path / ROLLOUT_FILE).is_file():
        return [path]
    found = sorted(p.parent for p in path.rglob(ROLLOUT_FILE))
    if not found:
        raise ArtifactError(f"{path}: neither a built dataset (data/sequences/) nor a folder holding rollout.json")
    return found


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ArtifactError(f"{path}: file missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{path}: not readable JSON ({exc})") from None


def _folder_rollout(folder: Path) -> AuditRollout:
    doc = _read_json(folder / ROLLOUT_FILE)
    if not isinstance(doc, dict) or not isinstance(doc.get("sequences"), list):
        raise ArtifactError(f"{folder / 'rollout.json'}: field 'sequences' missing or not a list")
    try:
        seqs = [AuditSequence(i, list(s["input_ids"]), list(s["loss_mask"]), list(s["logprobs"]),
                              list(s["node_ids"]), list(s["turn_lengths"]), bool(s["trainable"]))
                for i, s in enumerate(doc["sequences"])]
        sampling = {int(c["index"]): dict(c.get("effective_sampling_params") or {}) for c in doc.get("calls", [])}
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(f"{folder / 'rollout.json'}: malformed sequence or call ({exc!r})") from None
    rid = str((doc.get("metadata") or {}).get("rollout_id") or folder.name)
    return AuditRollout(rid, folder, seqs, sampling, folder=folder)


def _parquet_files(dataset: Path, config: str) -> list[str]:
    files = sorted(str(p) for p in (dataset / "data" / config).glob("*.parquet"))
    if not files:
        raise ArtifactError(f"{dataset}: config {config!r} has no parquet files under data/{config}/")
    return files


def _dataset_sampling(dataset: Path) -> dict[str, dict[int, dict[str, Any]]]:
    import pyarrow.dataset as pads

    out: dict[str, dict[int, dict[str, Any]]] = {}
    try:
        ds = pads.dataset(_parquet_files(dataset, "trace"), format="parquet")
        for batch in ds.to_batches(columns=["rollout_id", "call_index", "effective_sampling_params"]):
            for rid, idx, params in zip(*(batch.column(i).to_pylist() for i in range(3))):
                out.setdefault(rid, {})[int(idx)] = json.loads(params) if params else {}
    except ArtifactError:
        return {}  # no trace config: every call then reads as "the server did not say"
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds for a corrupt file
        raise ArtifactError(f"{dataset}/data/trace: unreadable parquet ({exc})") from None
    return out


def _dataset_rollouts(dataset: Path, batch_rows: int = 64) -> Iterator[AuditRollout]:
    import pyarrow.dataset as pads

    sampling = _dataset_sampling(dataset)
    try:
        ds = pads.dataset(_parquet_files(dataset, "sequences"), format="parquet")
        batches = ds.to_batches(columns=_SEQ_COLUMNS, batch_size=batch_rows)
        current: AuditRollout | None = None
        for batch in batches:
            cols: dict[str, list[Any]] = {name: batch.column(name).to_pylist() for name in _SEQ_COLUMNS}
            for i in range(batch.num_rows):
                rid = cols["rollout_id"][i]
                if current is not None and current.rollout_id != rid:
                    yield current
                    current = None
                if current is None:
                    current = AuditRollout(rid, dataset, [], sampling.get(rid, {}))
                current.sequences.append(AuditSequence(
                    int(cols["sequence_index"][i]), cols["input_ids"][i] or [], cols["loss_mask"][i] or [],
                    cols["logprobs"][i] or [], cols["node_ids"][i] or [], cols["turn_lengths"][i] or [],
                    bool(cols["trainable"][i])))
        if current is not None:
            yield current
    except ArtifactError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds for a corrupt shard; named as ArtifactError
        raise ArtifactError(f"{dataset}/data/sequences: unreadable parquet ({exc})") from None


def iter_rollouts(path: str | Path) -> Iterator[AuditRollout]:
    """Stream the rollouts under `path`: an artifact folder, a tree of them, or a built dataset.

    Args:
        path: the input.

    Yields:
        One `AuditRollout` at a time (a dataset's rollouts in their row order).

    Raises:
        ArtifactError: the input is absent, of neither kind, or corrupt (named with the file).
    """
    path = Path(path)
    if is_dataset(path):
        yield from _dataset_rollouts(path)
        return
    for folder in artifact_folders(path):
        yield _folder_rollout(folder)
