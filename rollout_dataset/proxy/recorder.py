"""The trace files: one append-only `<session>.jsonl` per session, one line per call.

Each record is encoded once and written with `os.write` on a file opened with ``O_APPEND`` before
the call's last byte goes to the harness: a record is durable against a crash of the proxy
process (kill -9) once the call has succeeded, and lines never interleave. A record that cannot
be written (disk full, too many open files, I/O error) raises `RecordWriteError`, and the proxy
fails the call instead of answering it unrecorded; a partly written line is cut off again, so
the file stays a sequence of whole lines.

Files are opened through a bounded cache of descriptors (least recently used closed first), and
spare descriptors are held for a file that cannot be opened otherwise (`_open_borrowing`), so a proxy
serving more sessions than its descriptor limit, or whose sockets took every descriptor, keeps recording.

Each record carries ``prev_sha256``, the digest of the record before it (see
`rollout_dataset.trace_integrity`); `seal` tells what the proxy wrote to a session. A proxy
started on a directory that already holds a session's file continues it: a last line cut short by
a crash is moved aside to ``<session>.jsonl.cut-<n>`` (logged, and noted in the session's next
record), and the arrival index and the chain continue after the last complete record.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterator

import orjson

from rollout_dataset.errors import RecordWriteError, SchemaValidationError
from rollout_dataset.proxy.descriptors import SPARE_HANDOVER_LOCK, note_out_of_descriptors, out_of_descriptors
from rollout_dataset.proxy.jsoncodec import encode_record, loads
from rollout_dataset.trace_integrity import (
    CHAIN_FIELD,
    TraceSeal,
    canonical_bytes,
    in_arrival_order,
    record_digest,
    verify_chain,
)

__all__ = ["TraceRecorder", "read_trace", "DEFAULT_MAX_OPEN_FILES", "MAX_FIELD_DEPTH"]

log = logging.getLogger(__name__)

#: trace files kept open at once (more sessions than this reopen their file when they write).
DEFAULT_MAX_OPEN_FILES = 32

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class _Session:
    """What the recorder knows about one session file."""

    __slots__ = ("next_index", "records", "head", "size", "notes")

    def __init__(self) -> None:
        self.next_index = 0
        self.records = 0
        self.head: str | None = None
        self.size = 0  # bytes of whole lines in the file
        self.notes: list[str] = []  # for the session's next record

    def take_index(self) -> int:
        """Reserve the next arrival index; returns it."""
        index = self.next_index
        self.next_index += 1
        return index


class _Followed:
    """How far `TraceRecorder.records_by_others` has read a session's file."""

    __slots__ = ("offset", "own")

    def __init__(self) -> None:
        self.offset = 0  # bytes read (whole lines)
        self.own: dict[int, int] = {}  # lines this process wrote past `offset`: start -> length


#: sessions whose read position `TraceRecorder.records_by_others` keeps (a forgotten one is read again).
_MAX_FOLLOWED = 4096
#: own lines remembered per session between two looks; past it they are forgotten and read back once
#: (a session may go on with calls that never look, e.g. non-chat calls in on-policy mode).
_MAX_OWN_LINES = 1024


class TraceRecorder:
    """Append trace records to `<trace_dir>/<session>.jsonl`.

    Args:
        trace_dir: the directory of the trace files (created if missing, mode 0700).
        max_open_files: trace files kept open at once (at least 1).

    Raises:
        NotADirectoryError: `trace_dir` exists and is not a directory.
    """

    #: descriptors held in reserve: as many as recording one call holds open at once (here one file
    #: at a time: the session's file, read when it is picked up, then appended to).
    SPARE_DESCRIPTORS = 1
    #: whether other processes write the same trace directory (the workers of one proxy): False here, the
    #: only writer (`SharedTraceRecorder` says True).
    SHARED = False

    def __init__(self, trace_dir: str | os.PathLike[str], max_open_files: int = DEFAULT_MAX_OPEN_FILES) -> None:
        self.trace_dir = Path(trace_dir)
        self.trace_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.max_open_files = max(1, max_open_files)
        self._fds: OrderedDict[str, int] = OrderedDict()
        self._sessions: dict[str, _Session] = {}
        # Descriptors held in reserve (`_open_borrowing`): when sockets have taken every other one,
        # they are given up for the moment a record is written (the event loop cannot accept in
        # between), so a proxy at its descriptor limit still records what it answers.
        self._spares: list[int] = []
        self._refill_spares()
        self._pinned: set[str] = set()  # sessions whose descriptors are in use: never closed to free one
        self._followed: OrderedDict[str, _Followed] = OrderedDict()  # see `records_by_others`

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

        Raises:
            OSError: an existing trace file of the session could not be read.
        """
        return self._session(session).take_index()

    def seal(self, session: str) -> TraceSeal:
        """What this recorder has written to a session's file (records and the last one's digest).

        Args:
            session: a validated session id.

        Returns:
            The seal to check the file against (`rollout_dataset.trace_integrity.verify_chain`).
        """
        state = self._session(session)
        return TraceSeal(state.records, state.head)

    def _session(self, session: str) -> _Session:
        state = self._sessions.get(session)
        if state is None:
            state = self._sessions[session] = self._resume(session)
        return state

    def _resume(self, session: str) -> _Session:
        """Pick up an existing file: move a cut last line aside, continue index and chain after the rest."""
        state = _Session()
        path = self.path(session)
        if not path.exists():
            return state
        data = self._read_borrowing(path)
        end = data.rfind(b"\n") + 1
        if end < len(data):
            cut = data[end:]
            aside = _free_name(path)
            self._write_new_borrowing(aside, cut)
            os.truncate(path, end)
            message = (f"the proxy restarted after a crash: the cut last line of {path.name} ({len(cut)} bytes) "
                       f"was moved to {aside.name}")
            log.warning("%s: %s", path, message)
            state.notes.append(message)
        last: dict[str, Any] | None = None
        top = -1
        for number, line in enumerate(data[:end].split(b"\n"), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                log.error("%s: line %d is not JSON; the session continues after it", path, number)
                continue
            state.records += 1
            if isinstance(record, dict):
                last = record
                if isinstance(record.get("index"), int):
                    top = max(top, record["index"])
        state.next_index = top + 1
        state.size = end
        if last is not None:
            state.head = record_digest(last)
        return state

    def _fd(self, session: str) -> tuple[int, bool]:
        """The session's descriptor, and whether it is borrowed from the spare (close it after use)."""
        fd = self._fds.get(session)
        if fd is not None:
            self._fds.move_to_end(session)
            return fd, False
        while len(self._fds) >= self.max_open_files:
            self._close_oldest()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _CLOEXEC
        fd, borrowed = self._open_borrowing(self.path(session), flags)
        if not borrowed:
            self._fds[session] = fd
        return fd, borrowed

    # ---- the spare descriptors -----------------------------------------------------------------

    def _open_borrowing(self, path: Path, flags: int) -> tuple[int, bool]:
        """Open a file even when every descriptor is in use; returns ``(fd, borrowed)``.

        Out of descriptors, the cached ones not in use are given back (`_free_idle`) and the open
        tried again; still out, a spare is given up for it: the descriptor is then borrowed, and
        goes back with `_return_borrowed` once used, before the event loop runs again.
        """
        try:
            return os.open(path, flags, 0o600), False
        except OSError as exc:
            if not out_of_descriptors(exc):
                raise
            note_out_of_descriptors(exc)
        self._free_idle()
        try:
            return os.open(path, flags, 0o600), False
        except OSError as exc:
            if not out_of_descriptors(exc) or not self._spares:
                raise
        with SPARE_HANDOVER_LOCK:  # no thread of the proxy (a name lookup) takes the number the spare frees
            os.close(self._spares.pop())
            try:
                return os.open(path, flags, 0o600), True
            except OSError:
                self._refill_spares()
                raise

    def _return_borrowed(self, fd: int | None) -> None:
        """Close a borrowed descriptor (None: a failure closed it already) and take the spare back."""
        with SPARE_HANDOVER_LOCK:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:  # pragma: no cover - already closed
                    pass
            self._refill_spares()

    def _refill_spares(self) -> None:
        while len(self._spares) < self.SPARE_DESCRIPTORS:
            try:
                self._spares.append(os.open(os.devnull, os.O_RDONLY | _CLOEXEC))
            except OSError:
                return

    def _drop_spares(self) -> None:
        while self._spares:
            os.close(self._spares.pop())

    def _free_idle(self) -> None:
        """Close the cached descriptors of sessions not in use (out of descriptors)."""
        for session in [s for s in self._fds if s not in self._pinned]:
            os.close(self._fds.pop(session))

    @contextlib.contextmanager
    def _opened_borrowing(self, path: Path, flags: int) -> Iterator[int]:
        """A descriptor for one use, opened through `_open_borrowing` and closed after it (a borrowed
        one goes back to the spares)."""
        fd, borrowed = self._open_borrowing(path, flags)
        try:
            yield fd
        finally:
            if borrowed:
                self._return_borrowed(fd)
            else:
                os.close(fd)

    def _read_borrowing(self, path: Path) -> bytes:
        """A whole file's bytes, read through `_open_borrowing`."""
        with self._opened_borrowing(path, os.O_RDONLY | _CLOEXEC) as fd, open(fd, "rb", closefd=False) as f:
            return f.read()

    def _write_new_borrowing(self, path: Path, data: bytes) -> None:
        """Write a file anew, opened through `_open_borrowing`."""
        with self._opened_borrowing(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _CLOEXEC) as fd:
            write_all(fd, data)

    def _close_oldest(self) -> None:
        _, fd = self._fds.popitem(last=False)
        try:
            os.close(fd)
        except OSError:  # pragma: no cover - already closed
            pass

    def write(self, session: str, record: dict[str, Any], raw: dict[str, bytes] | None = None,
              nonfinite: bool = False) -> None:
        """Chain and append one record as one JSON line, handed to the OS before returning.

        Args:
            session: a validated session id.
            record: the trace record, every field parsed (``prev_sha256`` and pending notes are
                added here).
            raw: fields whose value is already JSON (one line of UTF-8, e.g. the request exactly as
                the harness sent it, equal to the record's parsed value); spliced into the line
                verbatim instead of re-encoded.
            nonfinite: the record may hold NaN or infinite floats (see `encode_record`).

        Raises:
            RecordWriteError: the line could not be written (the file is left without it).
        """
        state = self._session(session)
        data, digest = chained_line(record, raw, nonfinite, state.head, state.notes)
        borrowed = False
        try:
            fd, borrowed = self._held_fd(session)
            write_all(fd, data)
        except OSError as exc:
            self._undo_partial(session, state)
            raise RecordWriteError(str(self.path(session)), exc) from exc
        finally:
            if borrowed:
                self._give_back(session)
        self._appended(session, state, len(data), digest)

    def _held_fd(self, session: str) -> tuple[int, bool]:
        """`_fd` for one use: a descriptor borrowed from the spare stays in the cache until `_give_back`
        (so a failed write is cut off like any other)."""
        fd, borrowed = self._fd(session)
        if borrowed:
            self._fds[session] = fd
        return fd, borrowed

    def _give_back(self, session: str) -> None:
        """Close a descriptor `_held_fd` borrowed (unless a failure closed it already); take the spare back."""
        self._return_borrowed(self._fds.pop(session, None))

    def _appended(self, session: str, state: _Session, length: int, digest: str) -> None:
        """Count a line this process appended as written: the chain, count and length go on after it,
        its notes are spent, and `records_by_others` skips it unread."""
        self._wrote_line(session, state.size, length)
        state.head = digest
        state.records += 1
        state.size += length
        state.notes = []

    def _wrote_line(self, session: str, start: int, length: int) -> None:
        """Note a line this process wrote, so that `records_by_others` skips it unread."""
        followed = self._followed.get(session)
        if followed is not None:
            if len(followed.own) >= _MAX_OWN_LINES:
                followed.own.clear()  # a skip is only a saving: those lines are read back, and taken in stride
            followed.own[start] = length

    def records_by_others(self, session: str) -> Iterator[dict[str, Any]]:
        """The records written to a session's file by others since this recorder last looked.

        "Others" are other proxy workers sharing the file (`SharedTraceRecorder`), and this proxy
        before a restart: the first look reads the whole file. It serves state a proxy keeps in
        memory beyond the file's order and chain (on-policy mode's possible parents). Whole lines
        only (one being written is left for the next look), read one at a time, so memory holds one
        record however long the file. Lines this recorder wrote after its first look are skipped
        unread (up to `_MAX_OWN_LINES` between two looks). The others come back too: its lines from
        before its first look or past that count, and every line of a file that shrank (a cut line
        moved aside, an outside edit: read again from its start). So a caller must take a record it
        already holds in its stride.

        Args:
            session: a validated session id.

        Yields:
            The parsed records, in file order (none when the file does not exist yet); a record
            counts as read once yielded.

        Raises:
            OSError: the file exists but could not be read.
        """
        followed = self._followed.pop(session, None) or _Followed()
        while len(self._followed) >= _MAX_FOLLOWED:
            self._followed.popitem(last=False)
        self._followed[session] = followed
        with contextlib.ExitStack() as stack:
            try:  # through the spare descriptors like every other open: on-policy mode reads here at the limit too
                fd = stack.enter_context(self._opened_borrowing(self.path(session), os.O_RDONLY | _CLOEXEC))
            except FileNotFoundError:
                return
            f = stack.enter_context(open(fd, "rb", closefd=False))
            size = os.fstat(f.fileno()).st_size
            if size < followed.offset:
                followed.offset, followed.own = 0, {}
            f.seek(followed.offset)
            while followed.offset < size:
                own = followed.own.pop(followed.offset, None)
                if own is not None:  # a line of ours: skipped unread
                    followed.offset += own
                    f.seek(followed.offset)
                    continue
                line = f.readline()
                if not line.endswith(b"\n"):
                    break  # being written: the next look
                followed.offset += len(line)
                if not line.strip():
                    continue
                try:
                    record = loads(line)[0]
                except ValueError:
                    continue
                if isinstance(record, dict):
                    yield record
        if followed.own:
            followed.own = {at: n for at, n in followed.own.items() if at >= followed.offset}

    def _undo_partial(self, session: str, state: _Session) -> None:
        """Cut a partly written line off again (the file must stay whole lines), and drop the handle."""
        fd = self._fds.pop(session, None)
        try:
            if fd is not None:
                os.ftruncate(fd, state.size)
            elif self.path(session).exists() and self.path(session).stat().st_size > state.size:
                os.truncate(self.path(session), state.size)
        except OSError as exc:
            log.error("could not cut a partly written record off %s: %s", self.path(session), exc)
        finally:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def _close_cached(self) -> None:
        while self._fds:
            self._close_oldest()

    def close(self) -> None:
        """Close every open trace file (and the spare descriptors)."""
        self._close_cached()
        self._drop_spares()


def chained_line(record: dict[str, Any], raw: dict[str, bytes] | None, nonfinite: bool, head: str | None,
                 notes: list[str]) -> tuple[bytes, str]:
    """A record as its trace line, chained after `head`, and the record's digest.

    Args:
        record: the record (``prev_sha256`` and `notes` are added to it here).
        raw: fields whose value is already one line of JSON, spliced in verbatim (see `TraceRecorder.write`).
        nonfinite: the record may hold NaN or infinite floats.
        head: the digest of the session's last record (None for the first).
        notes: pending notes of the session, appended to the record's.

    Returns:
        ``(line with its newline, sha256 hex digest of the record's canonical form)``.

    Raises:
        TypeError: a value no encoder takes.
    """
    if notes:
        record["notes"] = list(record.get("notes") or []) + notes
    record[CHAIN_FIELD] = head
    try:
        digest_bytes = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)  # canonical_bytes' fast path
    except TypeError:  # big ints, lone surrogates or deep nesting: see what it is
        raw = dict(raw or {})  # the caller's stays as it was
        _flatten_too_deep(record, raw)
        digest_bytes = canonical_bytes(record)
    if not raw:
        return encode_record(record, nonfinite) + b"\n", hashlib.sha256(digest_bytes).hexdigest()
    unspliced = record.copy()  # a copy and a pop each: cheaper than a comprehension over every field
    for key in raw:
        unspliced.pop(key, None)
    line = encode_record(unspliced, nonfinite)
    parts = [line[:-1]]  # the spliced fields go in at the end, the line's bytes copied once (the join)
    for key, value in raw.items():
        parts += (_raw_key(key), value)
    parts.append(b"}\n")
    return b"".join(parts), hashlib.sha256(digest_bytes).hexdigest()


@functools.lru_cache(maxsize=64)
def _raw_key(key: str) -> bytes:
    """``,"key":`` for a field spliced into a line (a handful of names, encoded once)."""
    return b"," + json.dumps(key).encode() + b":"


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to a descriptor (`os.write` may take part of it).

    Args:
        fd: an open descriptor.
        data: the bytes.

    Raises:
        OSError: a write failed (what came before it is in the file).
    """
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _free_name(path: Path) -> Path:
    n = 1
    while True:
        candidate = path.with_name(f"{path.name}.cut-{n}")
        if not candidate.exists():
            return candidate
        n += 1


#: deepest nesting of a record field kept as JSON (orjson writes 255 levels; every reader parses it).
MAX_FIELD_DEPTH = 200


def _too_deep(value: Any, limit: int) -> bool:
    """Whether a JSON value nests deeper than `limit` levels (iterative: no recursion limit)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list):
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in item if isinstance(child, (dict, list)))
    return False


def _flatten_too_deep(record: dict[str, Any], raw: dict[str, bytes]) -> None:
    """Keep fields nested deeper than `MAX_FIELD_DEPTH` as JSON text, so every line stays readable."""
    for key, value in list(record.items()):
        if not isinstance(value, (dict, list)) or not _too_deep(value, MAX_FIELD_DEPTH):
            continue
        if key in raw:
            text = raw.pop(key).decode("utf-8", "replace")
        else:
            try:
                text = json.dumps(value, ensure_ascii=False)
            except (RecursionError, ValueError):
                text = "<nested too deep to encode>"
        record[key] = text
        notes = record.setdefault("notes", [])
        if isinstance(notes, list):
            notes.append(f"{key} is nested deeper than {MAX_FIELD_DEPTH} levels: kept as JSON text")


def read_trace(path: str | os.PathLike[str], seal: TraceSeal | None = None) -> list[dict[str, Any]]:
    """Read a `<session>.jsonl` trace file and check its chain.

    A last line cut short by a crash (no trailing newline, not valid JSON) is dropped with a
    warning; every other line must parse, and the records must form an unbroken chain (see
    `rollout_dataset.trace_integrity`). With `seal`, the file must also hold exactly the records the
    proxy wrote, so a cut tail or an edited last record is caught too.

    Args:
        path: the trace file.
        seal: what the proxy wrote to the session (`TraceRecorder.seal` / `CaptureProxy.seal`).

    Returns:
        The records by arrival index (`trace_integrity.in_arrival_order`); the file holds them in the
        order calls ended, which differs when a harness overlaps calls.

    Raises:
        FileNotFoundError: the file does not exist.
        SchemaValidationError: a line other than a truncated last one is not a JSON object.
        TraceIntegrityError: records were removed, reordered, inserted or edited (names the file
            and the record's position).
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
        except (ValueError, RecursionError) as exc:
            if is_last:
                log.warning("%s: dropping truncated last line %d (%d bytes)", path, number, len(line))
                continue
            raise SchemaValidationError([(str(path), f"line {number}", f"not valid JSON: {exc}")]) from exc
        if not isinstance(record, dict):
            raise SchemaValidationError([(str(path), f"line {number}", "not a JSON object")])
        records.append(record)
    verify_chain(records, str(path), seal)
    return in_arrival_order(records)
