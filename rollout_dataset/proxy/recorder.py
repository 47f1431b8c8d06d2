"""The trace files: one append-only `<session>.jsonl` per session, one line per call.

Each record is encoded once and written with a single `os.write` on a file opened with
``O_APPEND``, so it reaches the operating system before the call's last byte goes to the harness
(a crash of the proxy process loses at most the calls in flight) and lines never interleave.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from rollout_dataset.errors import SchemaValidationError
from rollout_dataset.proxy.jsoncodec import encode_record

__all__ = ["TraceRecorder", "read_trace"]

log = logging.getLogger(__name__)


class TraceRecorder:
    """Append trace records to `<trace_dir>/<session>.jsonl`.

    Args:
        trace_dir: the directory of the trace files (created if missing).

    Raises:
        NotADirectoryError: `trace_dir` exists and is not a directory.
    """

    def __init__(self, trace_dir: str | os.PathLike[str]) -> None:
        self.trace_dir = Path(trace_dir)
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        self._fds: dict[str, int] = {}
        self._next: dict[str, int] = {}

    def path(self, session: str) -> Path:
        """The trace file of a session.

        Args:
            session: a validated session id.

        Returns:
            `<trace_dir>/<session>.jsonl`.
        """
        return self.trace_dir / f"{session}.jsonl"

    def next_index(self, session: str) -> int:
        """Reserve the next arrival index of a session (continues an existing file's count).

        Args:
            session: a validated session id.

        Returns:
            The 0-based arrival index of the new call.
        """
        index = self._next.get(session)
        if index is None:
            index = self._existing_count(session)
        self._next[session] = index + 1
        return index

    def _existing_count(self, session: str) -> int:
        path = self.path(session)
        if not path.exists():
            return 0
        with open(path, "rb") as fh:
            return sum(1 for line in fh if line.strip())

    def _fd(self, session: str) -> int:
        fd = self._fds.get(session)
        if fd is None:
            fd = os.open(self.path(session), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._fds[session] = fd
        return fd

    def write(self, session: str, record: dict[str, Any], raw: dict[str, bytes] | None = None,
              nonfinite: bool = False) -> None:
        """Append one record as one JSON line, handed to the OS before returning.

        Args:
            session: a validated session id.
            record: the trace record (JSON-serialisable).
            raw: fields whose value is already JSON (one line of UTF-8, e.g. the request exactly as
                the harness sent it); spliced into the line verbatim instead of re-encoded.
            nonfinite: the record may hold NaN or infinite floats (see `encode_record`).

        Raises:
            OSError: the file could not be written.
        """
        line = encode_record(record, nonfinite)
        if raw:
            parts = [line[:-1]]
            for key, value in raw.items():
                parts.append(b"," + json.dumps(key).encode() + b":" + value)
            parts.append(b"}")
            line = b"".join(parts)
        data = line + b"\n"
        fd = self._fd(session)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]

    def close(self) -> None:
        """Close every open trace file."""
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:  # pragma: no cover - already closed
                pass
        self._fds.clear()


def read_trace(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a `<session>.jsonl` trace file.

    A last line cut short by a crash (no trailing newline, not valid JSON) is dropped with a
    warning; every other line must parse.

    Args:
        path: the trace file.

    Returns:
        The records in file order (calls in the order they ended).

    Raises:
        FileNotFoundError: the file does not exist.
        SchemaValidationError: a line other than a truncated last one is not a JSON object.
    """
    path = Path(path)
    data = path.read_bytes()
    lines = data.split(b"\n")
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        is_last = number == len(lines)  # no newline after it: the write may have been cut short
        try:
            record = json.loads(line)
        except ValueError as exc:
            if is_last:
                log.warning("%s: dropping truncated last line %d (%d bytes)", path, number, len(line))
                continue
            raise SchemaValidationError([(str(path), f"line {number}", f"not valid JSON: {exc}")]) from exc
        if not isinstance(record, dict):
            raise SchemaValidationError([(str(path), f"line {number}", "not a JSON object")])
        records.append(record)
    return records
