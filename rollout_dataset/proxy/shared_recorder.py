"""Trace files shared by several proxy processes (`proxy --workers N`): one file, one order, one chain.

Calls of one session may reach different workers at the same time. Each session keeps what the
single-process recorder keeps in memory — the next arrival index, the record count, the last
record's digest, the file's length, notes for the next record — in a small state file,
``<trace_dir>/.proxy-state/<session>.json``, and every step that reads or changes it holds an
exclusive lock (``fcntl.flock``) on the session's trace file:

* a call's arrival index: lock → read state → ``next_index += 1`` → save → unlock (one order per
  session, whichever worker takes the call);
* a record: lock → read state → chain the line after the last digest → save the line's end and
  digest as *pending* → append → save it as written → unlock;
* the seal (`CaptureProxy.seal`): lock → read state → ``(records, head)`` as the proxies wrote them
  (a file cut or edited since does not change it, so checking the file against it shows the edit).

A worker killed with SIGKILL leaves at worst a pending append: the next locker finds the file at the
pending length (the append happened: adopted), at the old length (it did not: dropped), or in
between (a cut line: moved aside to ``<session>.jsonl.cut-<n>`` as the restart repair does, and
noted in the session's next record). A file whose length matches neither was changed by something
other than the proxy: it is read again from the start (index and chain continue after its last
complete record; the next index never goes back) and the next record says so. (The append is saved
as written, not left pending for the next locker to adopt: otherwise a file cut back by exactly its
last record would look like an append that never happened, and the seal would follow the cut.) The
state is written with one ``pwrite`` of a fixed-size block, so a killed worker never leaves it half
written. Calls a killed worker had in flight leave no record (their harness sees the connection
drop); the indices they had reserved stay unused. The state files stay open, like the trace files;
out of descriptors, a state file is opened on a spare one like a trace file (`SPARE_DESCRIPTORS`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterator

import orjson

from rollout_dataset.errors import RecordWriteError
from rollout_dataset.proxy.recorder import (
    DEFAULT_MAX_OPEN_FILES,
    TraceRecorder,
    _Session,
    chained_line,
    write_all,
)
from rollout_dataset.trace_integrity import TraceSeal

__all__ = ["SharedTraceRecorder", "STATE_DIR"]

log = logging.getLogger(__name__)

#: the folder of the per-session state files, inside the trace directory.
STATE_DIR = ".proxy-state"
_STATE_BLOCK = 4096  # bytes: the state file is always exactly one block, written at once
_NOTES_ROOM = 3000  # bytes of pending notes kept in the block (older ones are shortened)
_STATE_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)


class _SharedSession(_Session):
    __slots__ = ("pending",)

    def __init__(self) -> None:
        super().__init__()
        self.pending: dict[str, Any] | None = None


class SharedTraceRecorder(TraceRecorder):
    """A `TraceRecorder` whose sessions any number of processes may append to at once.

    Args:
        trace_dir: the directory of the trace files (created if missing, mode 0700).
        max_open_files: trace files this process keeps open at once.

    Raises:
        NotADirectoryError: `trace_dir` exists and is not a directory.
    """

    #: recording one call holds the session's trace file (locked), its state file and, when the state
    #: must be rebuilt from the trace file, a reading of that file: three descriptors at once.
    SPARE_DESCRIPTORS = 3
    SHARED = True

    def __init__(self, trace_dir: str | os.PathLike[str], max_open_files: int = DEFAULT_MAX_OPEN_FILES) -> None:
        super().__init__(trace_dir, max_open_files)
        self.state_dir = self.trace_dir / STATE_DIR
        self.state_dir.mkdir(mode=0o700, exist_ok=True)
        # the state files' descriptors, kept open like the trace files' (least recently used closed first)
        self._state_fds: OrderedDict[str, int] = OrderedDict()
        self._borrowed_states: set[str] = set()  # state files opened on a spare: closed when the lock goes

    def state_path(self, session: str) -> Path:
        """The state file of a session (see the module docstring).

        Args:
            session: a validated session id.

        Returns:
            ``<trace_dir>/.proxy-state/<session>.json``.
        """
        return self.state_dir / f"{session}.json"

    # ---- the three operations -----------------------------------------------------------------

    def next_index(self, session: str) -> int:
        """Reserve the next arrival index of a session, across every process sharing the directory (see
        `TraceRecorder.next_index`).

        Raises:
            OSError: the session's files could not be opened, locked, read or written.
        """
        with self._locked(session) as state:
            index = state.take_index()
            self._save(session, state)
        return index

    def seal(self, session: str) -> TraceSeal:
        """What the proxies have written to a session's file (records and the last one's digest).

        Args:
            session: a validated session id.

        Returns:
            The seal to check the file against.

        Raises:
            OSError: the session's files could not be read.
        """
        if not self.path(session).exists():  # no call yet: nothing written (and no file created to say so)
            return TraceSeal(0, None)
        with self._lock(session) as fd:
            saved = self._load(session)
            if saved is None:  # no state (or an unreadable one): the file is all there is to go by
                state = self._synced(session, fd)
                return TraceSeal(state.records, state.head)
            # What the proxies wrote, not re-read from the file: a file cut or edited since must not
            # match it. Only an append whose worker died before saving it as written is adopted.
            pending = saved.pending
            if pending is not None and os.fstat(fd).st_size == pending.get("size"):
                return TraceSeal(saved.records + 1, pending.get("head"))
            return TraceSeal(saved.records, saved.head)

    def write(self, session: str, record: dict[str, Any], raw: dict[str, bytes] | None = None,
              nonfinite: bool = False) -> None:
        """Chain and append one record under the session's lock (see `TraceRecorder.write`).

        Raises:
            RecordWriteError: the line could not be written (the file is left without it).
        """
        path = self.path(session)
        try:
            with self._locked(session) as state:
                data, digest = chained_line(record, raw, nonfinite, state.head, state.notes)
                state.pending = {"size": state.size + len(data), "head": digest}
                self._save(session, state)
                fd = self._fds[session]
                try:
                    write_all(fd, data)
                except OSError:
                    try:
                        os.ftruncate(fd, state.size)  # the file stays whole lines
                    except OSError as cut:
                        log.error("could not cut a partly written record off %s: %s", path, cut)
                    state.pending = None
                    self._save(session, state)
                    raise
                self._appended(session, state, len(data), digest)
                state.pending = None
                try:
                    self._save(session, state)
                except OSError as exc:  # the line is whole in the file: the pending entry saved above adopts it
                    log.warning("%s: record written, but its state was not saved (%s); the next lock adopts it",
                                path, exc)
        except RecordWriteError:
            raise
        except OSError as exc:
            raise RecordWriteError(str(path), exc) from exc

    # ---- the lock and the state file -----------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, session: str) -> Iterator[_SharedSession]:
        """Hold the session file's exclusive lock; yield its state, brought up to date with the file."""
        with self._lock(session) as fd:
            yield self._synced(session, fd)

    @contextlib.contextmanager
    def _lock(self, session: str) -> Iterator[int]:
        """Hold the session file's exclusive lock; yield the file's descriptor."""
        fd, borrowed = self._held_fd(session)
        self._pinned.add(session)  # out of descriptors, its files are not the ones given back
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield fd
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            self._pinned.discard(session)
            if session in self._borrowed_states:
                self._borrowed_states.discard(session)
                self._return_borrowed(self._state_fds.pop(session, None))
            if borrowed:
                self._give_back(session)

    def _synced(self, session: str, fd: int) -> _SharedSession:
        """The session's state, reconciled with the file's length (the lock is held)."""
        size = os.fstat(fd).st_size
        saved = self._load(session)
        torn = False
        if saved is not None:
            pending, saved.pending = saved.pending, None
            if pending is not None and size == pending.get("size"):  # appended; its writer died before saying so
                saved.records += 1
                saved.head = pending.get("head")
                saved.size = size
                saved.notes = []
            if size == saved.size:
                if pending is not None:
                    self._save(session, saved)
                return saved
            torn = pending is not None and saved.size < size < pending.get("size", 0)
        state = _SharedSession()
        fresh = self._resume(session)  # cuts a torn last line aside (noted), continues after the rest
        for name in ("records", "head", "size", "notes", "next_index"):
            setattr(state, name, getattr(fresh, name))
        if saved is not None:
            state.next_index = max(state.next_index, saved.next_index)  # reserved indices are never reused
            state.notes = saved.notes + state.notes
            if not torn:
                message = (f"{self.path(session).name} changed outside the proxy ({saved.size} bytes expected, "
                           f"{size} found); the chain continues after its last complete record")
                log.warning("%s", message)
                state.notes.append(message)
        self._save(session, state)
        return state

    def _state_fd(self, session: str) -> int:
        """The session's state file, opened (and created empty) once and kept open."""
        fd = self._state_fds.get(session)
        if fd is not None:
            self._state_fds.move_to_end(session)
            return fd
        while len(self._state_fds) >= self.max_open_files:
            os.close(self._state_fds.popitem(last=False)[1])
        fd, borrowed = self._open_borrowing(self.state_path(session), _STATE_FLAGS)
        if borrowed:  # out of descriptors: held on a spare until the session's lock is released
            self._borrowed_states.add(session)
        self._state_fds[session] = fd
        return fd

    def _close_state_files(self) -> None:
        while self._state_fds:
            os.close(self._state_fds.popitem(last=False)[1])
        self._borrowed_states.clear()

    def _free_idle(self) -> None:
        """Close the cached descriptors, trace and state files alike, of sessions not in use."""
        for session in [s for s in self._state_fds if s not in self._pinned]:
            os.close(self._state_fds.pop(session))
        super()._free_idle()

    def _close_cached(self) -> None:
        """Give back every cached descriptor, trace and state files alike (also what `close` does)."""
        self._close_state_files()
        super()._close_cached()

    def _load(self, session: str) -> _SharedSession | None:
        block = os.pread(self._state_fd(session), _STATE_BLOCK, 0)
        if not block:  # a new state file: nothing saved yet
            return None
        try:
            data = orjson.loads(block)  # the JSON, then the padding (blanks, which JSON allows)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            log.error("%s is not a state block; the session is read again from its trace file",
                      self.state_path(session))
            return None
        state = _SharedSession()
        try:
            state.next_index = int(data["next_index"])
            state.records = int(data["records"])
            state.head = data["head"]
            state.size = int(data["size"])
            state.notes = [str(n) for n in data.get("notes") or []]
            state.pending = data.get("pending")
        except (KeyError, TypeError, ValueError):
            return None
        return state

    def _save(self, session: str, state: _SharedSession) -> None:
        notes = state.notes
        if notes:
            notes = [note[:300] for note in notes]
            dropped = 0
            while len(notes) > 1 and len(orjson.dumps(notes)) > _NOTES_ROOM:  # the state stays one block
                notes.pop(0)
                dropped += 1
            if dropped:
                notes.insert(0, f"{dropped} earlier notes were dropped (the session's state block is full)")
        block = orjson.dumps({"next_index": state.next_index, "records": state.records, "head": state.head,
                              "size": state.size, "notes": notes, "pending": state.pending})
        block = block.ljust(_STATE_BLOCK, b" ")
        if os.pwrite(self._state_fd(session), block, 0) != len(block):
            raise OSError(0, f"short write to {self.state_path(session)}")
