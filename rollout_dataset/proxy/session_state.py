"""What a session is beside its calls: its reward and its seal, one small JSON file each.

The proxy's session API (`rollout_dataset.proxy.session_api`) writes them; whoever turns a session
into an artifact folder (`rollout_dataset.capture.session_artifacts`) reads them. They live in
``<trace_dir>/.sessions/``: ``<session>.reward.json`` and ``<session>.seal.json``, each created once
and never rewritten (written to a temporary name, then hard-linked to its own: a second writer, in
this process or another worker's, finds it there and is refused; a crash leaves no half file).
A session's reward and seal are decided under an exclusive ``flock`` of ``<session>.lock``, so a
reward and a seal racing from two workers are ordered (a reward after the seal is refused).

No server here: plain file I/O, called off the event loop.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Iterator

from rollout_dataset.files import read_regular_file
from rollout_dataset.trace_integrity import TraceSeal

__all__ = ["STATE_DIR", "SessionConflict", "SessionFiles", "OPEN", "SEALED", "MAX_STATE_BYTES"]

#: the folder under the trace directory that holds the sessions' reward and seal files.
STATE_DIR = ".sessions"
OPEN = "open"
SEALED = "sealed"
#: largest reward or seal file read back (a reward body is bounded far below it by the API).
MAX_STATE_BYTES = 1024 * 1024
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class SessionConflict(Exception):
    """A change the session's state refuses (a second reward, a reward or a seal after the seal).

    Args:
        code: a short machine-readable reason (``session_sealed``, ``reward_exists``, ``call_in_flight``).
        message: one sentence a user can act on.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class SessionFiles:
    """The reward and seal files of the sessions of one trace directory.

    Args:
        trace_dir: the proxy's trace directory (``<session>.jsonl`` files).
    """

    def __init__(self, trace_dir: str | os.PathLike[str]) -> None:
        self.trace_dir = Path(trace_dir)
        self.state_dir = self.trace_dir / STATE_DIR

    def trace_path(self, session: str) -> Path:
        """The session's trace file (`<trace_dir>/<session>.jsonl`)."""
        return self.trace_dir / f"{session}.jsonl"

    def seal_path(self, session: str) -> Path:
        """The session's seal file."""
        return self.state_dir / f"{session}.seal.json"

    def reward_path(self, session: str) -> Path:
        """The session's reward file."""
        return self.state_dir / f"{session}.reward.json"

    def is_sealed(self, session: str) -> bool:
        """Whether the session has been sealed (one ``stat``).

        Args:
            session: a validated session id.

        Returns:
            True once its seal file exists.
        """
        return os.path.exists(self.seal_path(session))

    def exists(self, session: str) -> bool:
        """Whether the session has a trace file (one call ended) or a state file.

        Args:
            session: a validated session id.

        Returns:
            True when any of its files exists.
        """
        return any(os.path.exists(p) for p in (self.trace_path(session), self.seal_path(session),
                                                self.reward_path(session)))

    def sessions(self) -> list[str]:
        """The ids of every session with a trace file, sorted.

        Returns:
            The session ids (file names without ``.jsonl``).
        """
        try:
            entries = list(os.scandir(self.trace_dir))
        except FileNotFoundError:
            return []
        return sorted(e.name[:-len(".jsonl")] for e in entries
                      if e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False))

    def seal(self, session: str) -> dict[str, Any] | None:
        """The session's seal as written (None while it is open).

        Args:
            session: a validated session id.

        Returns:
            ``{"sealed_at", "records", "head_sha256"}`` or None.

        Raises:
            ValueError: the file is not a JSON object of that shape (named).
        """
        return self._read(self.seal_path(session))

    def reward(self, session: str) -> dict[str, Any] | None:
        """The session's reward as posted (None when none was).

        Args:
            session: a validated session id.

        Returns:
            ``{"reward", "metadata", "posted_at"}`` or None.

        Raises:
            ValueError: the file is not a JSON object (named).
        """
        return self._read(self.reward_path(session))

    def state(self, session: str) -> str:
        """``"sealed"`` or ``"open"``."""
        return SEALED if self.is_sealed(session) else OPEN

    def put_reward(self, session: str, reward: float, metadata: dict[str, Any]) -> dict[str, Any]:
        """Record the session's reward, once, while it is open.

        Args:
            session: a validated session id.
            reward: a finite number.
            metadata: a JSON object kept with it.

        Returns:
            The reward document written.

        Raises:
            SessionConflict: the session is sealed (``session_sealed``) or has a reward (``reward_exists``).
            ValueError: the reward is not a finite number.
            OSError: the file could not be written.
        """
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            raise ValueError(f"reward must be a finite number, got {reward!r}")
        with self._locked(session):
            if self.is_sealed(session):
                raise SessionConflict("session_sealed", f"session {session!r} is sealed: its reward is final")
            document = {"reward": float(reward), "metadata": metadata, "posted_at": time.time()}
            if not self._create(self.reward_path(session), document):
                raise SessionConflict("reward_exists", f"session {session!r} already has a reward")
            return document

    def put_seal(self, session: str, seal: TraceSeal) -> dict[str, Any]:
        """Seal the session: its calls and reward are final from now on.

        Args:
            session: a validated session id.
            seal: what the proxy wrote to the session's file (records and last digest).

        Returns:
            The seal document written.

        Raises:
            SessionConflict: the session is already sealed (``session_sealed``).
            OSError: the file could not be written.
        """
        with self._locked(session):
            document = {"sealed_at": time.time(), **seal.to_dict()}
            if not self._create(self.seal_path(session), document):
                raise SessionConflict("session_sealed", f"session {session!r} is already sealed")
            return document

    @contextlib.contextmanager
    def _locked(self, session: str) -> Iterator[None]:
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.state_dir / f"{session}.lock", os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _create(self, path: Path, document: dict[str, Any]) -> bool:
        """Write `path` once (False when it exists): a whole temporary file, hard-linked to its name."""
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC, 0o600)
        try:
            with open(fd, "w", encoding="utf-8", closefd=False) as f:
                f.write(json.dumps(document, ensure_ascii=False, allow_nan=False) + "\n")
                f.flush()
                os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temporary, path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(temporary)

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        try:
            data = read_regular_file(path, MAX_STATE_BYTES)
        except FileNotFoundError:
            return None
        try:
            value = json.loads(data)
        except ValueError as exc:
            raise ValueError(f"{path}: not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError(f"{path}: not a JSON object")
        return value
