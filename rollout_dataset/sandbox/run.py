"""`Sandbox`: a working directory in which commands run in an allow-list root, under limits.

    with Sandbox() as box:
        box.write_file("solution.py", source)
        result = box.run([sys.executable, "solution.py"], stdin="3\n1 2 3\n", limits=Limits(wall_s=2))

Every command runs in the allow-list root of `isolation.py` (bubblewrap: only the working directory,
a private size-capped /tmp and a read-only runtime; no network; an unprivileged user without
capabilities), in a new session killed as a whole at the wall-time limit, with rlimits (CPU, address
space, file size, process count), stdout/stderr capped, the working directory's size watched, and a
scrubbed environment. Where the root cannot be built the sandbox refuses to run anything
(`SandboxUnavailableError`) unless it was created with ``unsafe=True``; then only the limits and the
environment scrubbing apply.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rollout_dataset.errors import SandboxUnavailableError

from .isolation import (RootSpec, bwrap_argv, fresh_sandbox_uid, isolation_report, probe_isolation,
                        require_isolation, tls_trust_mounts, write_etc)
from .limits import Limits, RunResult, apply_rlimits, prlimit_args

__all__ = ["Sandbox", "run_in_sandbox", "scrubbed_env", "tree_size"]

log = logging.getLogger(__name__)

# Environment names that must never reach sandboxed code (matched case-insensitively).
_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PROXY", re.IGNORECASE)
_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")
_FILE_MARKERS = ("File too large",)
_PROCESS_MARKERS = ("Cannot fork", "Resource temporarily unavailable", "can't fork", "fork: retry")
#: how often the runner measures the working directory's size, in seconds
DISK_POLL_S = 0.2
_CHUNK = 65536


def scrubbed_env(home: str | os.PathLike[str], extra: Mapping[str, str] | None = None,
                 trusted: Iterable[str] = ()) -> dict[str, str]:
    """The environment sandboxed code gets: nothing inherited but a PATH.

    Args:
        home: the working directory, used as HOME (TMPDIR is the sandbox's private ``/tmp``;
            `Sandbox` points it at the working directory in unsafe mode).
        extra: variables the caller wants to add; any whose name looks like a secret (token, key,
            password, auth, proxy, ...) is dropped with a warning naming only the variable.
        trusted: names in `extra` the caller vouches for although they look secret (e.g. a dummy
            ``OPENAI_API_KEY`` for the local recording proxy).

    Returns:
        The environment dict.
    """
    trusted = set(trusted)
    python_dir = os.path.dirname(sys.executable)
    env = {
        "PATH": os.pathsep.join([python_dir, "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home),
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONHASHSEED": "0",
    }
    for name, value in (extra or {}).items():
        if _SECRET_NAME.search(name) and name not in trusted:
            log.warning("sandbox: not passing environment variable %s (looks like a secret)", name)
            continue
        env[name] = str(value)
    return env


class _Capped:
    """Reads one pipe to the end, keeping at most `cap` bytes; calls `on_overflow` once past it."""

    def __init__(self, pipe: Any, cap: int, on_overflow: Any) -> None:
        self.pipe = pipe
        self.cap = cap
        self.on_overflow = on_overflow
        self.data = bytearray()
        self.overflowed = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while True:
                chunk = self.pipe.read1(_CHUNK) if hasattr(self.pipe, "read1") else self.pipe.read(_CHUNK)
                if not chunk:
                    break
                room = self.cap - len(self.data)
                if len(chunk) > room:
                    self.data += chunk[: max(room, 0)]
                    if not self.overflowed:
                        self.overflowed = True
                        self.on_overflow()
                    # keep draining so the writer is not blocked while it is being killed
                else:
                    self.data += chunk
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        out = self.data.decode("utf-8", errors="replace")
        if self.overflowed:
            out += f"\n[output truncated at {self.cap} bytes]"
        return out


def _feed(pipe: Any, data: bytes) -> None:
    try:
        if data:
            pipe.write(data)
    except (BrokenPipeError, OSError, ValueError):
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


@functools.lru_cache(maxsize=1)
def _has_prlimit() -> bool:
    path = shutil.which("prlimit")
    if not path:
        return False
    try:
        return subprocess.run([path, "--cpu=5:6", "--", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def tree_size(paths: Iterable[Path]) -> int:
    """Bytes allocated by the files under `paths` (symlinks not followed; unreadable entries skipped).

    Args:
        paths: directories.

    Returns:
        The total of ``st_blocks * 512`` (so sparse files count what they really use).
    """
    total = 0
    stack = [str(p) for p in paths]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += getattr(st, "st_blocks", 0) * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


def _execute(wrapped: list[str], *, cwd: Path, stdin: bytes, limits: Limits, env: dict[str, str],
             via_init: bool, watched: Sequence[Path] = (), preexec: Any = None) -> RunResult:
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            wrapped, cwd=str(cwd), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, preexec_fn=preexec,
        )
    except OSError as exc:
        return RunResult("", f"could not start {wrapped[0]!r}: {exc}", 127, False, None,
                         time.monotonic() - start, limits)
    killed_for_output = threading.Event()

    def overflow() -> None:
        killed_for_output.set()
        _kill_group(proc.pid)

    out = _Capped(proc.stdout, limits.output_bytes, overflow)
    err = _Capped(proc.stderr, limits.output_bytes, overflow)
    writer = threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True)
    writer.start()
    cap = limits.workdir_mb * 1024 * 1024 if (limits.workdir_mb is not None and watched) else None
    deadline = start + limits.wall_s
    done = threading.Event()
    hit: list[str] = []

    def watch() -> None:  # the wall-time and working-directory limits, while this thread blocks in wait()
        while not done.wait(max(0.0, min(DISK_POLL_S if cap is not None else limits.wall_s,
                                         deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                hit.append("wall")
            elif cap is not None and tree_size(watched) > cap:
                hit.append("disk")
            if hit:
                _kill_group(proc.pid)
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    proc.wait()  # a blocking waitpid: returns the moment the sandbox exits (no polling delay)
    done.set()
    watcher.join()
    timed_out, over_disk = hit == ["wall"], hit == ["disk"]
    wall = time.monotonic() - start
    _kill_group(proc.pid)  # leave nothing behind (children that outlived the command)
    for t in (out.thread, err.thread, writer):
        t.join(timeout=2.0)
    code = proc.returncode
    if via_init and code > 128 and code - 128 < 65:
        code = -(code - 128)
    stderr_text = err.text()
    if not over_disk and cap is not None and code != 0 and tree_size(watched) > cap:
        over_disk = True
    limit = None
    if killed_for_output.is_set():
        limit = "output"
    elif over_disk:
        limit = "disk"
    elif timed_out:
        limit = "wall"
    elif code == -signal.SIGXCPU or (code == -signal.SIGKILL and limits.cpu_s is not None):
        limit = "cpu"
    elif code != 0 and limits.memory_mb is not None and any(m in stderr_text for m in _MEMORY_MARKERS):
        limit = "memory"
    elif code == -signal.SIGXFSZ or (code != 0 and any(m in stderr_text for m in _FILE_MARKERS)):
        limit = "file"
    elif limits.processes is not None and any(m in stderr_text for m in _PROCESS_MARKERS):
        limit = "processes"
    return RunResult(out.text(), stderr_text, code, timed_out, limit, wall, limits)


class Sandbox:
    """A working directory plus a way to run commands in it, in the allow-list root, under limits.

    Args:
        workdir: an existing directory to work in (kept on close), or None for a fresh temporary
            directory (deleted on close).
        limits: default limits of `run`.
        hide_paths: paths inside the root's read-only or read-write trees that must read as empty
            (the root holds nothing else of the host anyway; a path containing the working
            directory is not hidden).
        env: extra environment variables for every command (secret-looking names are dropped).
        trusted_env: names in `env` to pass although they look like secrets (dummy keys only).
        ro_paths: further host paths the code may read, bound read-only at their own path (an
            external harness's tool folder); ``(source, destination)`` pairs are accepted too.
        rw_paths: further host directories the code may write (an external harness's HOME); their
            size counts towards ``workdir_mb``.
        extra_bwrap_args: bwrap arguments appended to the root (e.g. `HostForwarder.bind_args`).
        unsafe: run without the allow-list root when this machine cannot build it (only limits and
            the scrubbed environment then apply). Without it such a sandbox raises
            `SandboxUnavailableError` on `run`.

    When this process is root, each sandbox draws a fresh unprivileged host uid: the writable trees
    are handed to it before each command, and a given `workdir` is handed back to its owner on close.

    Raises:
        FileNotFoundError: `workdir` does not exist.
    """

    def __init__(self, workdir: str | os.PathLike[str] | None = None, *, limits: Limits | None = None,
                 hide_paths: Iterable[str | os.PathLike[str]] = (), env: Mapping[str, str] | None = None,
                 trusted_env: Iterable[str] = (), ro_paths: Iterable[Any] = (),
                 rw_paths: Iterable[str | os.PathLike[str]] = (), extra_bwrap_args: Sequence[str] = (),
                 unsafe: bool = False) -> None:
        if workdir is None:
            self._owned = True
            self.workdir = Path(tempfile.mkdtemp(prefix="rd-sandbox-")).resolve()
        else:
            self._owned = False
            self.workdir = Path(workdir).resolve()
            if not self.workdir.is_dir():
                raise FileNotFoundError(f"sandbox working directory {self.workdir} does not exist")
        self.limits = limits or Limits()
        self.hidden_paths = []
        for p in (Path(p).resolve() for p in hide_paths):
            if p == self.workdir or p in self.workdir.parents:
                log.warning("sandbox: not hiding %s: it contains the working directory %s", p, self.workdir)
            else:
                self.hidden_paths.append(p)
        self.env = dict(env or {})
        self.trusted_env = tuple(trusted_env)
        self.ro_paths = [(Path(p[0]), Path(p[1])) if isinstance(p, tuple) else (Path(p), Path(p)) for p in ro_paths]
        self.rw_paths = [Path(p).resolve() for p in rw_paths]
        self.extra_bwrap_args = list(extra_bwrap_args)
        self.unsafe = bool(unsafe)
        self.mode = probe_isolation()
        self.uid = fresh_sandbox_uid() if (self.mode.allow_list and self.mode.privileged) else None
        st = self.workdir.stat()
        self._owner = (st.st_uid, st.st_gid)  # a given workdir is handed back to its owner on close
        self._etc_dir: Path | None = None
        self.closed = False

    @property
    def isolation_level(self) -> str:
        """``"allow-list"`` when commands run in the allow-list root, else ``"unsafe"``."""
        return self.mode.level

    # -- context manager -------------------------------------------------------------------------
    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Delete the working directory if this sandbox created it (else hand its files back to the
        directory's owner), and the generated /etc files."""
        if not self.closed:
            if self._owned:
                shutil.rmtree(self.workdir, ignore_errors=True)
            else:
                self._chown_tree([self.workdir, *self.rw_paths], self._owner, only_from=self.uid)
            if self._etc_dir is not None:
                shutil.rmtree(self._etc_dir, ignore_errors=True)
        self.closed = True

    # -- the root --------------------------------------------------------------------------------
    @staticmethod
    def _chown_tree(tops: Sequence[Path], owner: tuple[int, int], only_from: int | None = None) -> None:
        """lchown every entry under `tops` to `owner` (symlinks not followed); `only_from`: just that uid's."""
        for top in tops:
            for dirpath, dirnames, filenames in os.walk(top):
                for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
                    try:
                        st = os.lstat(name)
                        if (st.st_uid, st.st_gid) != owner and (only_from is None or st.st_uid == only_from):
                            os.lchown(name, *owner)
                    except OSError:
                        continue

    def _grant(self) -> None:
        """Hand the writable trees to the sandbox user (root runner: files the host wrote are root's)."""
        if self.uid is not None:
            self._chown_tree([self.workdir, *self.rw_paths], (self.uid, self.uid))

    def wrap(self, argv: Sequence[str], limits: Limits | None = None) -> tuple[list[str], bool, Any]:
        """The command line that runs `argv` in this sandbox's root under `limits`.

        Args:
            argv: the command.
            limits: the limits (default: the sandbox's).

        Returns:
            ``(argv, via_init, preexec_fn)``: what to start, whether a signal death comes back as
            128+N, and the rlimit setter to pass as ``preexec_fn`` when util-linux prlimit is missing.

        Raises:
            SandboxUnavailableError: no allow-list root here and the sandbox is not ``unsafe``.
        """
        limits = limits or self.limits
        if self.mode.allow_list:
            if self._etc_dir is None:
                self._etc_dir = write_etc(Path(tempfile.mkdtemp(prefix="rd-sandbox-etc-")),
                                          self.uid if self.uid is not None else 1000)
                # removed on close, or when an unclosed sandbox is garbage-collected
                weakref.finalize(self, shutil.rmtree, str(self._etc_dir), True)
            self._grant()
            ro_paths = [*self.ro_paths, *tls_trust_mounts(self.environment())]  # the CA certificates TLS loads
            spec = RootSpec(workdir=self.workdir, rw_paths=self.rw_paths, ro_paths=ro_paths,
                            masks=self.hidden_paths, tmp_mb=limits.tmp_mb, uid=self.uid, etc_dir=self._etc_dir,
                            extra_args=self.extra_bwrap_args)
            inner = bwrap_argv(list(argv), spec, privileged=self.mode.privileged)
            via_init = True
        elif self.unsafe:
            inner, via_init = list(argv), False
        else:
            require_isolation(False)  # raises SandboxUnavailableError naming why
            raise SandboxUnavailableError("the allow-list sandbox is unavailable")  # pragma: no cover
        if _has_prlimit():
            return prlimit_args(limits) + inner, via_init, None
        return inner, via_init, functools.partial(apply_rlimits, limits)

    def environment(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The scrubbed environment of a command (see `scrubbed_env`).

        Args:
            env: extra variables for this command.

        Returns:
            The environment dict.
        """
        out = scrubbed_env(self.workdir, {**self.env, **(env or {})}, self.trusted_env)
        if not self.mode.allow_list and "TMPDIR" not in self.env and "TMPDIR" not in (env or {}):
            out["TMPDIR"] = str(self.workdir)  # unsafe mode: no private /tmp, so not the host's shared one
        return out

    def over_disk_limit(self, limits: Limits | None = None) -> bool:
        """Whether the writable trees together exceed ``workdir_mb``.

        Args:
            limits: the limits (default: the sandbox's).

        Returns:
            True past the cap.
        """
        limits = limits or self.limits
        return limits.workdir_mb is not None and tree_size([self.workdir, *self.rw_paths]) > limits.workdir_mb << 20

    # -- files -----------------------------------------------------------------------------------
    def path(self, relpath: str | os.PathLike[str]) -> Path:
        """Resolve a path inside the working directory.

        Args:
            relpath: a path relative to the working directory.

        Returns:
            The absolute path.

        Raises:
            ValueError: the path leaves the working directory.
        """
        target = (self.workdir / relpath).resolve()
        if target != self.workdir and self.workdir not in target.parents:
            raise ValueError(f"path {relpath!r} is outside the sandbox working directory {self.workdir}")
        return target

    def write_file(self, relpath: str | os.PathLike[str], text: str | bytes) -> Path:
        """Write a file into the working directory (parents created).

        Args:
            relpath: where, relative to the working directory.
            text: the content (str is written as UTF-8).

        Returns:
            The path written.

        Raises:
            ValueError: the path leaves the working directory.
        """
        target = self.path(relpath)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
        return target

    def read_file(self, relpath: str | os.PathLike[str]) -> str:
        """Read a text file of the working directory.

        Args:
            relpath: the file, relative to the working directory.

        Returns:
            Its text (UTF-8, invalid bytes replaced).

        Raises:
            FileNotFoundError: no such file.
            ValueError: the path leaves the working directory.
        """
        return self.path(relpath).read_bytes().decode("utf-8", errors="replace")

    # -- running ---------------------------------------------------------------------------------
    def run(self, cmd: str | Sequence[str], stdin: str | bytes | None = None, limits: Limits | None = None,
            env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None) -> RunResult:
        """Run a command in the working directory, in the allow-list root, under limits.

        Args:
            cmd: an argv list, or a shell command string (run with ``/bin/sh -c``).
            stdin: text or bytes fed on standard input (nothing: stdin is empty).
            limits: overrides the sandbox's default limits for this run.
            env: extra environment variables for this run (secret-looking names dropped).
            cwd: a sub-directory of the working directory to run in.

        Returns:
            A `RunResult`; a limit that hit is in ``.limit`` and described by ``.error``.

        Raises:
            RuntimeError: the sandbox is closed.
            ValueError: `cwd` leaves the working directory, or `cmd` is empty.
            SandboxUnavailableError: no allow-list root here and the sandbox is not ``unsafe``.
        """
        if self.closed:
            raise RuntimeError(f"sandbox {self.workdir} is closed")
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]
        if not argv or (isinstance(cmd, str) and not cmd.strip()):
            raise ValueError("sandbox run: empty command")
        data = stdin.encode("utf-8") if isinstance(stdin, str) else (stdin or b"")
        run_cwd = self.path(cwd) if cwd is not None else self.workdir
        limits = limits or self.limits
        if cwd is not None:
            argv = ["/bin/sh", "-c", 'cd "$1" && shift && exec "$@"', "cd", str(run_cwd), *argv]
        wrapped, via_init, preexec = self.wrap(argv, limits)
        result = _execute(wrapped, cwd=self.workdir, stdin=data, limits=limits, env=self.environment(env),
                          via_init=via_init, watched=[self.workdir, *self.rw_paths], preexec=preexec)
        if result.limit:
            log.info("sandbox: %s: %s", argv[-1][:80], result.error)
        return result

    @staticmethod
    def isolation() -> dict[str, Any]:
        """What sandboxes isolate on this machine (detected once, cached).

        Returns:
            See `isolation_report`.
        """
        return isolation_report()


def run_in_sandbox(cmd: str | Sequence[str], stdin: str | bytes | None = None, limits: Limits | None = None,
                   files: Mapping[str, str | bytes] | None = None,
                   hide_paths: Iterable[str | os.PathLike[str]] = (), unsafe: bool = False) -> RunResult:
    """Run one command in a fresh temporary sandbox and delete it afterwards.

    Args:
        cmd: an argv list or a shell command string.
        stdin: standard input.
        limits: the limits (default `Limits()`).
        files: files to write into the working directory first, ``{relative path: content}``.
        hide_paths: extra paths to hide from the code.
        unsafe: run even where the allow-list root cannot be built (see `Sandbox`).

    Returns:
        The `RunResult`.

    Raises:
        SandboxUnavailableError: no allow-list root here and not `unsafe`.
    """
    with Sandbox(limits=limits, hide_paths=hide_paths, unsafe=unsafe) as box:
        for name, content in (files or {}).items():
            box.write_file(name, content)
        return box.run(cmd, stdin=stdin)
