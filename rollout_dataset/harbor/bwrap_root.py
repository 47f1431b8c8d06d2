"""The root a Harbor task runs in on bubblewrap, and running one command in it (standard library only).

Used by Harbor's environment (`bwrap_environment`, inside Harbor's venv) and by the host-side
verifier of a Harbor task run by another harness (`verify_task_dir`). See `bwrap_environment` for
what the root holds and what each command gets.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable, Mapping

try:
    from rollout_dataset.harbor.reaper import MARKER_VAR, sweep
except ImportError:  # pragma: no cover - PYTHONPATH holds this folder only
    from reaper import MARKER_VAR, sweep  # type: ignore[no-redef]

__all__ = ["TaskRoot", "TIMEOUT_EXIT", "REWARD_FILES"]

_ETC_FILES = ("/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime")
_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_FILE_MB = 1024
_NOFILE = 4096
_DEFAULT_MEMORY_MB = 4096
#: the exit code of a command killed on its timeout (as `timeout(1)`)
TIMEOUT_EXIT = 124
#: where a Harbor verifier writes its reward, inside the root
REWARD_FILES = ("/logs/verifier/reward.txt", "/logs/verifier/reward.json")
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _limits(memory_mb: int | None) -> Callable[[], None]:
    """A preexec function: a process group of its own, and rlimits (address space, file size, open files)."""
    def apply() -> None:
        os.setpgrp()
        mem = int(memory_mb or _DEFAULT_MEMORY_MB) * 1024 * 1024 * 2  # address space: twice the memory
        for kind, value in ((resource.RLIMIT_AS, mem), (resource.RLIMIT_FSIZE, _FILE_MB * 1024 * 1024),
                            (resource.RLIMIT_NOFILE, _NOFILE)):
            try:
                resource.setrlimit(kind, (value, value))
            except (ValueError, OSError):
                pass
    return apply


class TaskRoot:
    """One environment's root folder on the host, and the bwrap command lines that run in it.

    Args:
        workdir: the task's working directory inside the root (``task.toml`` ``workdir``), or None.
        env: variables every command gets (the task's ``[environment] env``).
        memory_mb: the task's memory, for the address-space limit.
    """

    def __init__(self, workdir: str | None = None, env: Mapping[str, str] | None = None,
                 memory_mb: int | None = None) -> None:
        self.marker = uuid.uuid4().hex
        self.state = Path(tempfile.mkdtemp(prefix="rollout-harbor-env-")).resolve()
        self.root = self.state / "root"
        self.workdir = workdir
        self.env = dict(env or {})
        self.memory_mb = memory_mb
        self._holder: subprocess.Popen | None = None  # pid 1's parent of the shared PID namespace
        self._pidns_fd: int | None = None
        self._pid1: int | None = None  # the namespace's pid 1, by its host pid

    def host_path(self, path: str) -> Path:
        """The host path of `path` inside the root; never outside it (symlinks resolved).

        Raises:
            PermissionError: the path leads out of the root (``..``, a symlink planted inside).
        """
        candidate = self.root / Path("/", path.lstrip("/")).relative_to("/")
        real = Path(os.path.realpath(candidate))
        if real != self.root and self.root not in real.parents:
            raise PermissionError(f"{path}: leads outside the environment's root")
        return candidate

    def build(self) -> None:
        """Create the root: /tmp, /etc (passwd, group, hosts), /root, /logs/*, the workdir, the /bin-style links.

        Run again before the verifier, over what the agent left: nothing in the root is followed. A
        link (or file) the agent put where one of these folders or files belongs is removed first (a
        ``/etc`` linked to the host's ``/etc`` would have had the host's ``passwd`` overwritten), and
        the ``/bin``-style links are put back as the host has them (a ``/bin`` of the agent's would
        hold the ``bash`` a ``#!/bin/bash`` verifier runs).
        """
        for sub in ("tmp", "etc", "root", "logs/agent", "logs/verifier", "logs/artifacts"):
            self._own_folder(sub)
        os.chmod(self.root / "tmp", 0o1777)
        for name, text in (("passwd", "root:x:0:0:root:/root:/bin/bash\n"), ("group", "root:x:0:\n"),
                           ("hosts", "127.0.0.1 localhost\n")):
            self._own_file(f"etc/{name}", text)
        for name in _LINKS:
            host, link = Path("/" + name), self.root / name
            if host.is_symlink() and not (link.is_symlink() and os.readlink(link) == os.readlink(host)):
                _remove(link)
                link.symlink_to(os.readlink(host))
        if self.workdir:
            self.host_path(self.workdir).mkdir(parents=True, exist_ok=True)

    def _own_folder(self, relative: str) -> Path:
        """The root's folder `relative`, made a real folder at each level (a link or file there removed)."""
        path = self.root
        path.mkdir(parents=True, exist_ok=True)
        for part in Path(relative).parts:
            path = path / part
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                _remove(path)
            path.mkdir(exist_ok=True)
        return path

    def _own_file(self, relative: str, text: str) -> None:
        """Write the root's file `relative` afresh, never through a link the agent put there."""
        path = self._own_folder(str(Path(relative).parent)) / Path(relative).name
        _remove(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as out:
            out.write(text)

    def argv(self, command: str, cwd: str | None = None, env: Mapping[str, str] | None = None) -> list[str]:
        """The bwrap command line running ``bash -c command`` in the root.

        The command runs in the root's PID namespace while `start_processes` holds one (so what it
        leaves running, tmux, persists to the next command), else in a PID namespace of its own that
        ends with it; never in the host's, whose processes it could see and signal.

        Args:
            command: the shell command.
            cwd: its working directory inside the root (default: the workdir, else ``/``).
            env: more variables.

        Returns:
            argv (run it with `popen_kwargs`, which passes the namespace's descriptor).
        """
        pid_namespace = ["--unshare-pid"] if self._pidns_fd is None else ["--pidns", str(self._pidns_fd)]
        return self._argv(command, cwd, env, pid_namespace)

    def _argv(self, command: str, cwd: str | None, env: Mapping[str, str] | None, pid_namespace: list[str]) -> list[str]:
        args = ["bwrap", "--bind", str(self.root), "/", *pid_namespace, "--unshare-net", "--unshare-ipc", "--unshare-uts",
                "--hostname", "sandbox", "--die-with-parent", "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr"]
        for name in _LINKS:
            host = Path("/" + name)
            if host.is_dir() and not host.is_symlink():  # symlinks (merged /usr) are made in the root
                args += ["--ro-bind", str(host), str(host)]
        for path in _ETC_FILES:
            args += ["--ro-bind-try", path, path]
        args += ["--proc", "/proc", "--dev", "/dev", "--clearenv"]
        variables = {"PATH": _PATH, "HOME": "/root", "TERM": "xterm-256color", "LANG": "C.UTF-8", "SHELL": "/bin/bash",
                     **self.env, **(env or {}), MARKER_VAR: self.marker}
        for key, value in variables.items():
            args += ["--setenv", str(key), str(value)]
        return args + ["--chdir", cwd or self.workdir or "/", "--", "bash", "-c", command]

    def popen_kwargs(self) -> dict:
        """Keyword arguments for `subprocess.Popen`/`asyncio.create_subprocess_exec` of an `argv`."""
        kwargs: dict = {"preexec_fn": _limits(self.memory_mb)}
        if self._pidns_fd is not None:
            kwargs["pass_fds"] = (self._pidns_fd,)
        return kwargs

    def start_processes(self) -> None:
        """Start the root's PID namespace: every later `argv` command joins it (see `argv`).

        Its pid 1 is a bwrap child of this process (``--die-with-parent``): when it ends, whether by
        `stop_processes`, `close` or this process's death, the kernel kills every process in the
        namespace, those that dropped the marker variable included.

        Raises:
            OSError: bwrap did not start the namespace.
        """
        self.stop_processes()
        read_end, write_end = os.pipe()
        try:
            argv = self._argv("exec sleep infinity", None, None, ["--unshare-pid", "--info-fd", str(write_end)])
            self._holder = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, pass_fds=(write_end,), **self.popen_kwargs())
            os.close(write_end)
            write_end = -1
            info = b""
            while not info.rstrip().endswith(b"}"):
                chunk = os.read(read_end, 4096)
                if not chunk:
                    raise OSError(f"bwrap did not start the environment's PID namespace (exit {self._holder.wait()})")
                info += chunk
            self._pid1 = int(json.loads(info)["child-pid"])
            self._pidns_fd = os.open(f"/proc/{self._pid1}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        except BaseException:
            self.stop_processes()
            raise
        finally:
            os.close(read_end)
            if write_end != -1:
                os.close(write_end)

    def stop_processes(self) -> None:
        """End the root's PID namespace: every process the commands left running is killed."""
        if self._pidns_fd is not None:
            os.close(self._pidns_fd)
            self._pidns_fd = None
        if self._holder is not None:
            kill_group(self._holder.pid)
            self._holder.wait()
            self._holder = None
        if self._pid1 is not None:  # its exit completes only once every process of the namespace is gone
            _wait_gone(self._pid1)
            self._pid1 = None
        sweep(self.marker)

    def run(self, command: str, timeout_s: float, cwd: str | None = None) -> tuple[int, str]:
        """Run one command to its end or its timeout (its process group killed).

        Returns:
            ``(exit code, output)``; `TIMEOUT_EXIT` on timeout.
        """
        proc = subprocess.Popen(self.argv(command, cwd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, **self.popen_kwargs())
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            proc.communicate()
            return TIMEOUT_EXIT, f"timed out after {timeout_s} s"
        return proc.returncode, out.decode("utf-8", "replace")[-100_000:]

    def close(self) -> None:
        """Kill every process started in the root (tmux included) and remove it."""
        self.stop_processes()
        shutil.rmtree(self.state, ignore_errors=True)


def _remove(path: Path) -> None:
    """Remove a link, file or folder at `path` (a link is removed, never followed); nothing there is fine."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _wait_gone(pid: int, timeout_s: float = 10.0) -> None:
    """Kill `pid` (not a child of ours) and wait until it has exited (gone, or a zombie)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.01)


def kill_group(pid: int) -> None:
    """SIGKILL the process group `pid` leads."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
