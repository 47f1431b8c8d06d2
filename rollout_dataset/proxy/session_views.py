"""A session's settled calls as the session API shows them (pure: records in, JSON documents out).

The calls are read from the session's trace file as whole lines only (a line being appended is a
call not yet settled), their chain checked, and turned into the rollout document by the same
`export_rollout` a capture uses; a sequence is served as `export.rows.sequence_row`, the row the
dataset's `sequences` config holds. Shapes: ``schema/schemas/session_api.schema.json``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rollout_dataset.export import capture_level_of, export_rollout
from rollout_dataset.export.rows import sequence_row
from rollout_dataset.proxy.jsoncodec import loads
from rollout_dataset.trace_integrity import TraceSeal, in_arrival_order, verify_chain

__all__ = ["SessionSnapshot", "read_settled", "snapshot", "session_document", "sequences_document", "call_summary"]

#: the fields of a call the session document shows (the rest is in the trace file).
_CALL_FIELDS = ("index", "call_id", "endpoint", "status", "stream", "started_at", "ended_at", "latency_ms",
                "finish_reason", "capture_level", "harness_session_id")


class SessionSnapshot:
    """A session's settled calls and their rollout document, as of one read of its trace file.

    Attributes:
        key: ``(inode, size, mtime_ns)`` of the file when read (a cache of snapshots compares it).
        records: the settled records, in arrival order.
        document: the rollout document (`export_rollout`).
    """

    __slots__ = ("key", "records", "document")

    def __init__(self, key: tuple[int, int, int], records: list[dict[str, Any]], document: dict[str, Any]) -> None:
        self.key = key
        self.records = records
        self.document = document


def file_key(path: Path) -> tuple[int, int, int] | None:
    """``(inode, size, mtime_ns)`` of a trace file (None when it does not exist)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


def read_settled(path: Path, seal: TraceSeal | None = None) -> list[dict[str, Any]]:
    """The settled records of a trace file: every whole line, chain checked, in arrival order.

    Args:
        path: the session's trace file.
        seal: the session's seal; with it, exactly the sealed records are read (a call recorded after
            the seal, or a cut or edited file, is an error).

    Returns:
        The records (empty when the file does not exist).

    Raises:
        TraceIntegrityError: the chain or the seal does not hold (names the file and the record).
        ValueError: a whole line is not a JSON object.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    end = data.rfind(b"\n") + 1  # a line without its newline is being written: not settled
    records: list[dict[str, Any]] = []
    for number, line in enumerate(data[:end].split(b"\n"), start=1):
        if not line.strip():
            continue
        record = loads(line)[0]  # exactly as `json.loads` (the chain's digests are of those values)
        if not isinstance(record, dict):
            raise ValueError(f"{path.name}: line {number} is not a JSON object")
        records.append(record)
    if seal is not None:
        records = records[:seal.records] if len(records) > seal.records else records
    verify_chain(records, path.name, seal)
    return in_arrival_order(records)


def snapshot(path: Path, key: tuple[int, int, int], seal: TraceSeal | None, tokenizer: Any = None,
             session: str = "") -> SessionSnapshot:
    """Read a session's settled calls and export them (run it off the event loop).

    Args:
        path: the session's trace file.
        key: its `file_key` before the read.
        seal: its seal, when sealed.
        tokenizer: passed to `export_rollout` (retokenization findings), as a capture would.
        session: the session id (the document's ``session_id``).

    Returns:
        The snapshot.

    Raises:
        TraceIntegrityError, ValueError: as `read_settled`, or a record the export refuses.
    """
    records = read_settled(path, seal)
    document = export_rollout(records, session_id=session, capture_level=capture_level_of(records),
                              tokenizer=tokenizer)
    return SessionSnapshot(key, records, document)


def call_summary(record: dict[str, Any]) -> dict[str, Any]:
    """One call as the session document lists it.

    Args:
        record: a trace record.

    Returns:
        Its `_CALL_FIELDS`, ``error`` (the error's kind or None) and its token counts.
    """
    out = {name: record.get(name) for name in _CALL_FIELDS}
    error = record.get("error")
    out["error"] = error.get("kind") if isinstance(error, dict) else None
    out["n_prompt_ids"] = len(record.get("prompt_token_ids") or [])
    out["n_completion_ids"] = len(record.get("completion_token_ids") or [])
    return out


def _state_fields(session: str, state: str, in_flight: int, snap: SessionSnapshot | None,
                  reward: dict[str, Any] | None, seal: dict[str, Any] | None) -> dict[str, Any]:
    return {"session": session, "state": state, "calls_in_flight": in_flight,
            "settled_calls": len(snap.records) if snap else 0,
            "reward": reward.get("reward") if reward else None,
            "reward_metadata": reward.get("metadata") if reward else None,
            "seal": seal}


def session_document(session: str, state: str, in_flight: int, snap: SessionSnapshot | None,
                     reward: dict[str, Any] | None, seal: dict[str, Any] | None) -> dict[str, Any]:
    """``GET /sessions/{id}``: the session's state, its settled calls and the export's findings.

    Args:
        session: the session id.
        state: ``open`` or ``sealed``.
        in_flight: calls of the session this proxy is still answering.
        snap: the settled calls (None: none yet).
        reward: the reward document, if posted.
        seal: the seal document, if sealed.

    Returns:
        The document (``session_api.schema.json#/$defs/session``).
    """
    doc = snap.document if snap else None
    return {**_state_fields(session, state, in_flight, snap, reward, seal),
            "capture_level": doc["capture_level"] if doc else "none",
            "trainable": bool(doc["trainable"]) if doc else False,
            "stats": doc["stats"] if doc else None,
            "calls": [call_summary(r) for r in snap.records] if snap else [],
            "findings": doc["findings"] if doc else []}


def sequences_document(session: str, state: str, in_flight: int, snap: SessionSnapshot | None,
                       reward: dict[str, Any] | None, seal: dict[str, Any] | None) -> dict[str, Any]:
    """``GET /sessions/{id}/sequences``: the trainable sequences of the settled calls.

    Each sequence is the dataset's `sequences` row without its rollout-level columns
    (`export.rows.sequence_row`), plus ``finish_reasons``: each of its calls' finish reason.

    Args:
        session: the session id.
        state: ``open`` or ``sealed``.
        in_flight: calls of the session this proxy is still answering.
        snap: the settled calls (None: none yet).
        reward: the reward document, if posted.
        seal: the seal document, if sealed.

    Returns:
        The document (``session_api.schema.json#/$defs/sequences``).
    """
    doc = snap.document if snap else None
    sequences = []
    if doc is not None:
        finish = {c["index"]: c.get("finish_reason") for c in doc["calls"]}
        for i, seq in enumerate(doc["sequences"]):
            row = sequence_row(seq, i)
            row["finish_reasons"] = [finish.get(n) for n in row["node_ids"]]
            sequences.append(row)
    return {**_state_fields(session, state, in_flight, snap, reward, seal),
            "capture_level": doc["capture_level"] if doc else "none",
            "trainable": bool(doc["trainable"]) if doc else False,
            "sequences": sequences}
