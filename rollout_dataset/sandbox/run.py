"""`Sandbox`: a temporary working directory in which commands run under limits, without network.

    with Sandbox() as box:
        box.write_file("solution.py", source)
        result = box.run([sys.executable, "solution.py"], stdin="3\n1 2 3\n", limits=Limits(wall_s=2))

Every command runs in a new session (its own process group, killed as a whole at the wall-time
limit), with rlimits set between fork and exec, stdout/stderr capped, a scrubbed environment
(HOME and TMPDIR are the working directory) and the namespaces of `isolation.py`.
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
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .isolation import MASK_FAILED_STATUS, default_hidden_paths, isolation_report, wrap_command
from .limits import Limits, RunResult, apply_rlimits, prlimit_args

__all__ = ["Sandbox", "run_in_sandbox", "scrubbed_env"]

log = logging.getLogger(__name__)

# Environment names that must never reach sandboxed code (matched case-insensitively).
_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PROXY", re.IGNORECASE)
_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")
_FILE_MARKERS = ("File too large",)
_CHUNK = 65536


def scrubbed_env(home: str | os.PathLike[str], extra: Mapping[str, str] | None = None,
                 trusted: Iterable[str] = ()) -> dict[str, str]:
    """The environment sandboxed code gets: nothing inherited but a PATH.

    Args:
        home: the working directory, used as HOME and TMPDIR.
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
        "TMPDIR": str(home),
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


def _execute(argv: list[str], *, cwd: Path, stdin: bytes, limits: Limits, env: dict[str, str],
             hidden: Iterable[Path], network: bool = False) -> RunResult:
    wrapped, via_init = wrap_command(argv, hidden, network=network)
    preexec = None
    if _has_prlimit():
        wrapped = prlimit_args(limits) + wrapped
    else:
        preexec = functools.partial(apply_rlimits, limits)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            wrapped, cwd=str(cwd), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, preexec_fn=preexec,
        )
    except OSError as exc:
        return RunResult("", f"could not start {argv[0]!r}: {exc}", 127, False, None,
                         time.monotonic() - start, limits)
    killed_for_output = threading.Event()

    def overflow() -> None:
        killed_for_output.set()
        _kill_group(proc.pid)

    out = _Capped(proc.stdout, limits.output_bytes, overflow)
    err = _Capped(proc.stderr, limits.output_bytes, overflow)
    writer = threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True)
    writer.start()
    timed_out = False
    try:
        proc.wait(timeout=limits.wall_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc.pid)
        proc.wait()
    wall = time.monotonic() - start
    _kill_group(proc.pid)  # leave nothing behind (children that outlived the command)
    for t in (out.thread, err.thread, writer):
        t.join(timeout=2.0)
    code = proc.returncode
    if via_init and code > 128 and code - 128 < 65:
        code = -(code - 128)
    stderr_text = err.text()
    if via_init and code == MASK_FAILED_STATUS and "sandbox-init" in stderr_text:
        log.warning("sandbox: hiding a path failed: %s", stderr_text.strip()[:300])
    limit = None
    if killed_for_output.is_set():
        limit = "output"
    elif timed_out:
        limit = "wall"
    elif code == -signal.SIGXCPU or (code == -signal.SIGKILL and limits.cpu_s is not None):
        limit = "cpu"
    elif code != 0 and limits.memory_mb is not None and any(m in stderr_text for m in _MEMORY_MARKERS):
        limit = "memory"
    elif code == -signal.SIGXFSZ or (code != 0 and any(m in stderr_text for m in _FILE_MARKERS)):
        limit = "file"
    return RunResult(out.text(), stderr_text, code, timed_out, limit, wall, limits)


class Sandbox:
    """A working directory plus a way to run commands in it under limits.

    Args:
        workdir: an existing directory to work in (kept on close), or None for a fresh temporary
            directory (deleted on close).
        limits: default limits of `run`.
        hide_paths: extra files or directories the code must not read (held-out test files, task
            files, artifact folders); covered inside a mount namespace where available, on top of
            `default_hidden_paths()`. A path that contains the working directory is not hidden.
        env: extra environment variables for every command (secret-looking names are dropped).
        trusted_env: names in `env` to pass although they look like secrets (dummy keys only).
        network: keep the host network (default False: no network at all). Only for agent CLIs
            that must reach the recording proxy; hidden paths and limits still apply.

    Raises:
        FileNotFoundError: `workdir` does not exist.
    """

    def __init__(self, workdir: str | os.PathLike[str] | None = None, *, limits: Limits | None = None,
                 hide_paths: Iterable[str | os.PathLike[str]] = (), env: Mapping[str, str] | None = None,
                 trusted_env: Iterable[str] = (), network: bool = False) -> None:
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
        for p in [*default_hidden_paths(), *(Path(p).resolve() for p in hide_paths)]:
            if p == self.workdir or p in self.workdir.parents:
                log.warning("sandbox: not hiding %s: it contains the working directory %s", p, self.workdir)
            else:
                self.hidden_paths.append(p)
        self.env = dict(env or {})
        self.trusted_env = tuple(trusted_env)
        self.network = bool(network)
        self.closed = False

    # -- context manager -------------------------------------------------------------------------
    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Delete the working directory if this sandbox created it."""
        if self._owned and not self.closed:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self.closed = True

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
        """Run a command in the working directory under limits, without network.

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
        """
        if self.closed:
            raise RuntimeError(f"sandbox {self.workdir} is closed")
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]
        if not argv or (isinstance(cmd, str) and not cmd.strip()):
            raise ValueError("sandbox run: empty command")
        data = stdin.encode("utf-8") if isinstance(stdin, str) else (stdin or b"")
        run_cwd = self.path(cwd) if cwd is not None else self.workdir
        result = _execute(argv, cwd=run_cwd, stdin=data, limits=limits or self.limits,
                          env=scrubbed_env(self.workdir, {**self.env, **(env or {})}, self.trusted_env),
                          hidden=self.hidden_paths, network=self.network)
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
                   hide_paths: Iterable[str | os.PathLike[str]] = ()) -> RunResult:
    """Run one command in a fresh temporary sandbox and delete it afterwards.

    Args:
        cmd: an argv list or a shell command string.
        stdin: standard input.
        limits: the limits (default `Limits()`).
        files: files to write into the working directory first, ``{relative path: content}``.
        hide_paths: extra paths to hide from the code.

    Returns:
        The `RunResult`.
    """
    with Sandbox(limits=limits, hide_paths=hide_paths) as box:
        for name, content in (files or {}).items():
            box.write_file(name, content)
        return box.run(cmd, stdin=stdin)
