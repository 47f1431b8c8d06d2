"""Atomic dataset folders: build beside `--out`, then swap the whole folder into place.

A build never writes inside the dataset folder (`out`). It works in a staging folder next to it,
``<out>.staging-<pid>`` (same parent, so the same file system): the existing dataset's files are
hard-linked in (shards are immutable, so linking shares them safely), new shards and README.md are
written and fsynced there, and only then is the staging folder swapped with `out`:

- on Linux, one `renameat2(RENAME_EXCHANGE)` call swaps the two folders atomically: a reader (or
  `load_dataset`) of `out` sees the complete earlier dataset or the complete new one, never a mix,
  and `out` never disappears; the earlier dataset, now at the staging path, is then deleted;
- where the kernel or file system cannot exchange, `out` is renamed to ``<out>.old-<pid>`` and the
  staging folder renamed to `out` (two renames; a crash between them leaves `out` missing, and the
  next build renames ``<out>.old-<pid>`` back before anything else).

A build killed at any moment (SIGKILL included) therefore leaves `out` holding the earlier dataset
(or the finished new one) plus, at most, a leftover ``<out>.staging-<pid>`` / ``<out>.old-<pid>``;
a running build holds an `flock` on each of its folders (the kernel drops it when the process dies),
so the next build into `out` knows a leftover from a folder in use, and deletes it (or renames an
aside folder back when `out` is missing). The ATIF import folder of a build
(``<out>.atif-import-<pid>``, `atif.importer.imported_inputs`) follows the same rule: `owned_folder`
makes and locks each such folder, `clean_stale` removes those no live process holds. SIGTERM is
turned into `SystemExit` during a build so the staging folder is removed on the way out, and is held
back during the swap itself.

`out` must be new, an empty folder, or a dataset this tool built (README.md whose YAML header carries
the ``rollout-dataset`` tag): anything else is refused, so ``--out ~`` cannot replace a home folder.
One build at a time per `out` (an exclusive `flock` on the folder; a second build is refused).
Linux (or another system with `flock`); `renameat2` is looked up in the C library at run time.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import logging
import os
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import yaml

from rollout_dataset.errors import DatasetDirError

__all__ = ["DATASET_TAG", "STAGING_INFIX", "ASIDE_INFIX", "IMPORT_INFIX", "sibling_folder", "is_abandoned",
           "lock_folder", "leftover_folders", "owned_folder", "is_built_dataset", "check_out_dir", "restore_aside",
           "clean_stale", "locked_out_dir", "staging_folder", "fsync_tree", "commit", "terminate_raises", "checkpoint",
           "exchange_folders", "link_or_copy", "exclusive", "staged"]

log = logging.getLogger(__name__)

#: the card tag (`builder.card.card_metadata`) that marks a folder as a dataset built by this tool.
DATASET_TAG = "rollout-dataset"
#: the folders a build keeps beside the dataset folder `out`, each named ``<out><infix><pid>``
#: (`sibling_folder`): the staging folder, the earlier dataset set aside during a two-rename swap,
#: and the folder the ATIF trajectories among the inputs are imported into.
STAGING_INFIX = ".staging-"
ASIDE_INFIX = ".old-"
IMPORT_INFIX = ".atif-import-"
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def checkpoint(step: str) -> None:
    """A named point of a build (``rollout``, ``staged``, ``aside``, ``swapped``); does nothing.

    Tests replace it to stop a build at an exact moment (and kill it there) instead of sleeping.

    Args:
        step: the point reached.
    """


def is_built_dataset(folder: str | Path) -> bool:
    """Whether a folder holds a dataset built by this tool (README.md with the `DATASET_TAG` tag).

    Args:
        folder: the folder.

    Returns:
        True when its README.md is a regular file whose YAML header lists the tag.
    """
    from rollout_dataset.builder.card import read_card_metadata

    readme = Path(folder) / "README.md"
    if readme.is_symlink() or not readme.is_file():
        return False
    try:
        meta = read_card_metadata(readme.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):  # unreadable, not UTF-8, not YAML: not ours
        return False
    return isinstance(meta, dict) and isinstance(meta.get("tags"), list) and DATASET_TAG in meta["tags"]


def check_out_dir(out: str | Path) -> None:
    """Refuse an output folder that is not new, empty, or a dataset built by this tool.

    Args:
        out: the dataset folder a build will replace.

    Raises:
        DatasetDirError: `out` is a symlink, a file, or a folder holding something else (named).
    """
    out = Path(out)
    if out.is_symlink():
        raise DatasetDirError(f"{out}: a symlink (to {os.readlink(out)!r}); give the real folder as --out")
    if not out.exists():
        return
    if not out.is_dir():
        raise DatasetDirError(f"{out}: a file, not a dataset folder; give a new or empty folder as --out")
    entries = sorted(p.name for p in out.iterdir())
    if not entries or is_built_dataset(out):
        return
    shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
    raise DatasetDirError(f"{out}: holds {shown}, and is not a dataset built by rollout-dataset (no README.md "
                          f"with the {DATASET_TAG!r} tag); a build replaces --out whole, so give a new or "
                          "empty folder")


def sibling_folder(out: str | Path, infix: str, pid: int | None = None) -> Path:
    """The folder ``<out><infix><pid>`` beside the dataset folder `out` (same parent, same file system).

    Args:
        out: the dataset folder.
        infix: `STAGING_INFIX`, `ASIDE_INFIX` or `IMPORT_INFIX`.
        pid: the owning process (default: this one).

    Returns:
        The folder's path (not created).
    """
    out = Path(out)
    return out.parent / f"{out.name}{infix}{os.getpid() if pid is None else pid}"


def _lock_if_free(folder: Path) -> int | None:
    """The fd of `folder` with its build lock taken, or None when another process holds it (or it is gone)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def is_abandoned(folder: str | Path) -> bool:
    """Whether no process holds the build lock on `folder` (its build ended or was killed).

    Args:
        folder: a folder beside a dataset (`sibling_folder`).

    Returns:
        True when the lock was free (a folder that cannot be opened is not abandoned: it is left alone).
    """
    fd = _lock_if_free(Path(folder))
    if fd is None:
        return False
    os.close(fd)  # releases the probe's lock
    return True


def lock_folder(folder: str | Path) -> int:
    """Open `folder` and take its exclusive build lock (released when the fd closes or the process dies).

    Args:
        folder: the folder (a symlink is refused).

    Returns:
        The open fd holding the lock.

    Raises:
        BlockingIOError: another process holds it.
        OSError: the folder cannot be opened.
    """
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


def leftover_folders(out: str | Path, infix: str) -> list[Path]:
    """The ``<out><infix><pid>`` folders beside `out`, in use or not (`is_abandoned` tells).

    Args:
        out: the dataset folder.
        infix: `STAGING_INFIX`, `ASIDE_INFIX` or `IMPORT_INFIX`.

    Returns:
        The folders (real folders only, no symlinks), sorted.
    """
    out = Path(out)
    prefix = out.name + infix
    with contextlib.suppress(FileNotFoundError):
        return sorted(entry for entry in out.parent.iterdir()
                      if entry.name.startswith(prefix) and entry.name[len(prefix):].isdigit()
                      and not entry.is_symlink() and entry.is_dir())
    return []


def restore_aside(out: str | Path) -> Path | None:
    """Put back the earlier dataset of a build killed between its two renames (`out` missing).

    Args:
        out: the dataset folder.

    Returns:
        The ``<out>.old-<pid>`` folder renamed back to `out`, or None.
    """
    out = Path(out)
    if os.path.lexists(out):
        return None
    for aside in leftover_folders(out, ASIDE_INFIX):
        if is_abandoned(aside):
            try:
                os.rename(aside, out)
            except OSError:  # another build restored it first
                continue
            log.warning("%s: restored the earlier dataset from %s (a build was killed while swapping)", out, aside)
            return aside
    return None


def clean_stale(out: str | Path, infixes: tuple[str, ...] = (ASIDE_INFIX, STAGING_INFIX, IMPORT_INFIX)) -> list[Path]:
    """Delete the ``<out>.staging-<pid>`` / ``<out>.old-<pid>`` / ``<out>.atif-import-<pid>`` folders
    that killed builds left.

    A folder is a leftover when no process holds its build lock (a running build holds the locks of
    its folders until it ends; the kernel drops them when a process dies, SIGKILL included). The lock
    is held while the folder is deleted, so a build creating a folder of that name sees it go
    (`owned_folder`). An aside folder is swept only after `restore_aside` (it may be the only copy).

    Args:
        out: the dataset folder.
        infixes: the kinds of folder to sweep (default: all).

    Returns:
        The folders removed (each logged).
    """
    out = Path(out)
    removed = []
    for folder in [f for infix in infixes for f in leftover_folders(out, infix)]:
        fd = _lock_if_free(folder)
        if fd is None:
            continue
        try:
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            os.close(fd)
        if os.path.lexists(folder):
            log.warning("%s: could not remove %s, left by a killed build (check its permissions)", out, folder)
            continue
        log.info("%s: removed %s, left by a killed build", out, folder)
        removed.append(folder)
    return removed


_CLAIM_TRIES = 40
_CLAIM_WAIT_S = 0.05  # x 40: a sweep's delete of a folder just made (empty) is long over in 2 s


@contextlib.contextmanager
def owned_folder(out: str | Path, infix: str) -> Iterator[Path]:
    """A new, empty ``<out><infix><pid>`` beside `out`, locked while the block runs, then removed.

    A killed process leaves it unlocked, so the next build's `clean_stale` removes it; a folder of
    that name a dead process with the same pid left is removed first.

    Args:
        out: the dataset folder.
        infix: `STAGING_INFIX` or `IMPORT_INFIX`.

    Yields:
        The folder.

    Raises:
        DatasetDirError: a folder of that name stays held (another thread of this process builds
            beside the same dataset, or another build keeps removing it).
        OSError: the folder cannot be made (a full disk, permissions).
    """
    folder = sibling_folder(out, infix)
    fd = _claim(folder)
    try:
        yield folder
    finally:
        try:
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            os.close(fd)


def _claim(folder: Path) -> int:
    """Make `folder` (mode 0700) and lock it; returns the fd.

    A folder of that name whose lock is free was left by a dead process with our pid: removed, then
    made again. One whose lock is held is being removed by another build's sweep (it locks before
    deleting), or is another thread's of this process: waited for, up to `_CLAIM_TRIES` times.
    """
    for _ in range(_CLAIM_TRIES):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            stale = _lock_if_free(folder)
            if stale is not None:
                try:
                    shutil.rmtree(folder, ignore_errors=True)  # a dead process with our pid left it
                finally:
                    os.close(stale)
            elif folder.exists():
                time.sleep(_CLAIM_WAIT_S)  # held: a sweeper finishing its delete, or another thread here
            continue
        try:
            fd = lock_folder(folder)
        except (BlockingIOError, FileNotFoundError):
            continue  # a sweeper saw it before the lock was taken and is deleting it
        try:
            now = os.stat(folder, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        held = os.fstat(fd)
        if now is not None and (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
            return fd
        os.close(fd)
    raise DatasetDirError(f"{folder}: held by another build all the while it was being made (another thread of "
                          "this process building beside the same dataset, or other builds removing it); "
                          "wait for it to finish")


@contextlib.contextmanager
def locked_out_dir(out: str | Path) -> Iterator[bool]:
    """Hold the exclusive build lock on the dataset folder `out` (created empty if missing).

    First puts back an earlier dataset a killed build left aside (`restore_aside`); once locked,
    deletes the leftovers of killed builds (`clean_stale`).

    Args:
        out: the dataset folder.

    Yields:
        True when this call created `out` (it is removed again if still empty at the end).

    Raises:
        DatasetDirError: another build holds the lock.
    """
    out = Path(out)
    restore_aside(out)
    created = False
    for _ in range(20):
        try:
            out.mkdir(parents=True)
            created = True
        except FileExistsError:
            pass
        try:
            fd = lock_folder(out)
        except BlockingIOError:
            raise DatasetDirError(f"{out}: another build is writing to it; wait for it to finish") from None
        held, now = os.fstat(fd), os.stat(out, follow_symlinks=False)
        if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
            break
        os.close(fd)  # the folder was swapped by the build that held the lock: lock the new one
    else:
        raise DatasetDirError(f"{out}: replaced again and again by other builds; try again")
    try:
        clean_stale(out)
        yield created
    finally:
        os.close(fd)
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()  # only when empty: the build failed before anything was swapped in


@contextlib.contextmanager
def staging_folder(out: str | Path) -> Iterator[Path]:
    """A locked ``<out>.staging-<pid>`` holding the existing dataset's files (hard links); removed at the end.

    Shards are immutable, so linking shares them safely; a file the build rewrites (README.md) must
    be unlinked first, never written through.

    Args:
        out: the dataset folder (locked by `locked_out_dir`).

    Yields:
        The staging folder.
    """
    out = Path(out)
    with owned_folder(out, STAGING_INFIX) as stage:
        shutil.copytree(out, stage, symlinks=True, copy_function=_link_or_copy, dirs_exist_ok=True)
        yield stage


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)


#: past this many files, one syncfs(2) of the file system replaces one fsync per file and folder.
SYNCFS_FILES = 64


def fsync_tree(paths: list[Path]) -> None:
    """Flush files and their folders to disk, so a swapped-in dataset survives a power loss.

    A build writes one trace-viewer session file per rollout: past `SYNCFS_FILES` files, the whole
    file system holding them is flushed by one ``syncfs`` call (Linux) instead of one ``fsync`` per
    file (thousands of disk flushes); the guarantee is the same (every written file and folder
    entry of that file system is on disk when it returns). Elsewhere, or if it fails, one fsync each.

    Args:
        paths: files written by this build.
    """
    folders = {p.parent for p in paths}
    if len(paths) > SYNCFS_FILES and _syncfs(sorted(folders)):
        return
    for path in list(paths) + sorted(folders):
        flags = os.O_RDONLY | (os.O_DIRECTORY if path in folders else 0)
        fd = os.open(path, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def exchange_folders(a: str | Path, b: str | Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``): the one definition, used by
    builds, appends and compaction.

    Args:
        a: a path.
        b: another path on the same file system.

    Returns:
        True when swapped; False where the kernel, C library or file system cannot exchange (the
        caller falls back to two renames).

    Raises:
        OSError: the exchange failed for another reason (a path missing, permissions).
    """
    return _exchange(Path(a), Path(b))


def link_or_copy(src: str | Path, dst: str | Path) -> None:
    """Hard-link `src` at `dst` (shards are immutable, so sharing is safe); copy where linking fails.

    Args:
        src: the existing file (a symlink is linked/copied as a link).
        dst: the new path.
    """
    _link_or_copy(str(src), str(dst))


def _syncfs(folders: list[Path]) -> bool:
    """syncfs(2) the one file system holding every folder; False when not done (several, or no syncfs)."""
    fn = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    if fn is None or not folders or len({os.stat(f).st_dev for f in folders}) != 1:
        return False
    fd = os.open(folders[0], os.O_RDONLY | os.O_DIRECTORY)
    try:
        return fn(fd) == 0
    finally:
        os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically with renameat2(RENAME_EXCHANGE); False where unsupported."""
    fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def commit(staging: str | Path, out: str | Path, *, exchange: bool = True) -> None:
    """Swap the finished staging folder into place as `out`, then delete the earlier dataset.

    SIGTERM is held back while the folders are swapped (it is delivered right after).

    Args:
        staging: the complete new dataset folder (next to `out`).
        out: the dataset folder (exists, possibly empty).
        exchange: try the atomic exchange first (False: the two-rename way, for tests).
    """
    staging, out = Path(staging), Path(out)
    blocked = _block_sigterm()
    try:
        if exchange and _exchange(staging, out):
            old = staging
        else:
            old = sibling_folder(out, ASIDE_INFIX)
            os.rename(out, old)
            checkpoint("aside")
            os.rename(staging, out)
        fsync_tree([out])
        checkpoint("swapped")
        shutil.rmtree(old, ignore_errors=True)
    finally:
        if blocked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _block_sigterm() -> bool:
    if not hasattr(signal, "pthread_sigmask"):
        return False
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    return True


@contextlib.contextmanager
def terminate_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises `SystemExit(143)` (so `finally` clauses clean up).

    Only in the main thread (signal handlers can be set nowhere else), and only where SIGTERM has
    its default action: a program that ignores SIGTERM or handles it itself keeps its own way. The
    earlier handler is restored at the end.
    """
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def _raise(signum: int, frame: object) -> None:
        log.warning("SIGTERM: stopping the build; the dataset folder is left as it was")
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# The staging sequence, once: every writer of a dataset folder (build, append, the distributed build)
# runs `with exclusive(out, checks...):` then `with staged(out) as stage:` and writes only in `stage`.


@contextlib.contextmanager
def exclusive(out: str | Path, *checks: Callable[[Path], None]) -> Iterator[None]:
    """Own the dataset folder `out`: SIGTERM raises, the build lock is held, and `checks` pass under it.

    Args:
        out: the dataset folder (created empty if missing; removed again if still empty at the end).
        checks: each called with `out` once the lock is held (what was true before the lock may not be).

    Raises:
        DatasetDirError: another build holds the lock.
        Exception: whatever a check raises.
    """
    out = Path(out)
    with terminate_raises(), locked_out_dir(out):
        for check in checks:
            check(out)
        yield


@contextlib.contextmanager
def staged(out: str | Path) -> Iterator[Path]:
    """A staging folder holding `out`'s files, swapped in as `out` when the block ends normally.

    The writer fsyncs what it wrote (`fsync_tree`); an exception (SIGTERM included, inside
    `exclusive`) leaves `out` as it was and removes the staging folder.

    Args:
        out: the dataset folder, held by `exclusive`.

    Yields:
        The staging folder to write the new dataset in.
    """
    with staging_folder(out) as stage:
        yield stage
        checkpoint("staged")
        commit(stage, out)
