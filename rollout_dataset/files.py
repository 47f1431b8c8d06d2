"""File helpers every layer shares: the one atomic write, and a folder shipped as bytes.

Atomic writes (`write_bytes_atomic`, `write_text_atomic`) go through a fresh temporary file in the
destination's folder (unique per call, so two threads or processes never share one) and one
`os.replace`: a reader sees the whole old file or the whole new one, never half of either; a
destination that is a hard link to another dataset's file is replaced, never written through. A
failed write removes its temporary file. The file gets the mode a plain ``open(path, "w")`` gives
(0666 less the process's umask), not `tempfile.mkstemp`'s owner-only 0600: a dataset's card and
tokenizer files are read by whoever reads the folder (a shared disk, a web server).

`folder_files` / `write_folder_files` carry a folder across a process or machine boundary (a Ray
task returns the bytes, the driver writes them): paths are relative and must stay inside the
destination.

`read_regular_file` reads a file that untrusted code may have written (a solution, a reward file):
never through a link, never a FIFO or device, never past a size.

This module imports nothing of the package, so capture, builder, hub and batch can all use it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import threading
from pathlib import Path

__all__ = ["write_bytes_atomic", "write_text_atomic", "current_umask", "folder_files", "write_folder_files", "read_regular_file",
           "IrregularFileError"]


class IrregularFileError(OSError):
    """`read_regular_file` refused a file: not a regular file, or larger than its limit (`strerror` says which)."""


_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process's umask, read without changing it (Linux: ``/proc/self/status``).

    Elsewhere it is read by setting and restoring it under a lock (another thread creating a file in
    that instant would get mode 0o077's masking, never a looser one).

    Returns:
        The umask bits (e.g. ``0o022``).
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def read_regular_file(path: str | Path, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, opened without following a link (``O_NOFOLLOW``).

    For files untrusted code wrote: a link (even one swapped in after a check) is never followed, and a
    FIFO or device is never read (opened non-blocking, then checked on the open descriptor).

    Args:
        path: the file.
        limit: the largest size read.

    Returns:
        The file's bytes.

    Raises:
        FileNotFoundError: nothing is at `path`.
        IrregularFileError: not a regular file, or larger than `limit` bytes.
        OSError: any other failure to open or read it (a symlink: errno ``ELOOP``).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise IrregularFileError(errno.EINVAL, "not a regular file", str(path))
        if info.st_size > limit:
            raise IrregularFileError(errno.EFBIG, f"larger than {limit} bytes ({info.st_size})", str(path))
        return handle.read(limit)


def write_bytes_atomic(path: str | Path, data: bytes, *, fsync: bool = False, mode: int = 0o666) -> None:
    """Write bytes to `path` through a temporary file in the same folder and a rename.

    Args:
        path: the destination (its folder must exist).
        data: the content.
        fsync: flush the file to disk before the rename (for files that must survive a power loss).
        mode: the file's permission bits before the umask is applied, as ``os.open``'s (default
            0o666: with umask 022 the file is 0644, as ``open(path, "w")`` makes it).

    Raises:
        OSError: the folder is missing or not writable, the disk is full (the destination is then
            left as it was, and the temporary file removed); it names `path` when the OS error
            named no file.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode & ~current_umask())  # mkstemp makes 0600 whatever the umask
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None and exc.errno is not None:
            # a write/fsync error (a full disk) names no file: name the destination (same errno, same subclass)
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise


def write_text_atomic(path: str | Path, text: str, *, fsync: bool = False, mode: int = 0o666) -> None:
    """Write text (UTF-8) to `path` atomically (see `write_bytes_atomic`).

    A lone surrogate (e.g. undecodable tool output) has no UTF-8 form: it is written as the escape
    ``\\udcff``, which is exactly its JSON escape inside a JSON string, and readable text elsewhere.

    Args:
        path: the destination.
        text: the content.
        fsync: flush the file to disk before the rename.
        mode: the permission bits before the umask (see `write_bytes_atomic`).

    Raises:
        OSError: as `write_bytes_atomic`.
    """
    write_bytes_atomic(path, text.encode("utf-8", "backslashreplace"), fsync=fsync, mode=mode)


def folder_files(folder: str | Path) -> dict[str, bytes]:
    """Every regular file under `folder`, by relative POSIX path (symlinks are not followed).

    Args:
        folder: the folder.

    Returns:
        ``{relative path: bytes}``, sorted by path.
    """
    folder = Path(folder)
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            files[path.relative_to(folder).as_posix()] = path.read_bytes()
    return files


def write_folder_files(folder: str | Path, files: dict[str, bytes]) -> list[Path]:
    """Write files returned by `folder_files` (e.g. from another machine) under `folder`.

    Args:
        folder: the destination folder (created if missing).
        files: ``{relative path: bytes}``.

    Returns:
        The files written.

    Raises:
        ValueError: a path is absolute or leaves `folder` (``..``, a symlink inside it); nothing
            is written outside `folder`.
    """
    root = Path(folder).resolve()
    written = []
    for rel, data in files.items():
        target = (root / rel).resolve()
        if root not in target.parents:
            raise ValueError(f"file path {rel!r} escapes {root}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written.append(target)
    return written
