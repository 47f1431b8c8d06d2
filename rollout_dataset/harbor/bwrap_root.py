"""The root a Harbor task runs in on bubblewrap, and running one command in it (standard library only).

Used by Harbor's environment (`bwrap_environment`, inside Harbor's venv) and by the host-side
verifier of a Harbor task run by another harness (`verify_task_dir`). See `bwrap_environment` for
what the root holds and what each command gets.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import tempfile
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
        """Create the root: /tmp, /etc (passwd, group, hosts), /root, /logs/*, the workdir, the /bin-style links."""
        for sub in ("tmp", "etc", "root", "logs/agent", "logs/verifier", "logs/artifacts"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "tmp", 0o1777)
        (self.root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
        (self.root / "etc/group").write_text("root:x:0:\n")
        (self.root / "etc/hosts").write_text("127.0.0.1 localhost\n")
        for name in _LINKS:
            host, link = Path("/" + name), self.root / name
            if host.is_symlink() and not link.is_symlink():
                link.symlink_to(os.readlink(host))
        if self.workdir:
            self.host_path(self.workdir).mkdir(parents=True, exist_ok=True)

    def argv(self, command: str, cwd: str | None = None, env: Mapping[str, str] | None = None,
             own_pids: bool = False) -> list[str]:
        """The bwrap command line running ``bash -c command`` in the root.

        The command runs as root with no capabilities: without a PID namespace of its own it may
        signal every root process of the host (``kill -9 -1``). Harbor's environment needs its tmux
        server to outlive each command, so only `own_pids` commands get one.

        Args:
            command: the shell command.
            cwd: its working directory inside the root (default: the workdir, else ``/``).
            env: more variables.
            own_pids: run in a new PID namespace (everything in it dies with the command).

        Returns:
            argv.
        """
        args = ["bwrap", "--bind", str(self.root), "/", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                "--hostname", "sandbox", "--die-with-parent", "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr"]
        if own_pids:
            args[1:1] = ["--unshare-pid"]
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
        return {"preexec_fn": _limits(self.memory_mb)}

    def run(self, command: str, timeout_s: float, cwd: str | None = None) -> tuple[int, str]:
        """Run one command to its end or its timeout (its process group killed), in a PID namespace of
        its own: what it starts cannot signal a host process and dies with it.

        Returns:
            ``(exit code, output)``; `TIMEOUT_EXIT` on timeout.
        """
        proc = subprocess.Popen(self.argv(command, cwd, own_pids=True), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
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
        sweep(self.marker)
        shutil.rmtree(self.state, ignore_errors=True)


def kill_group(pid: int) -> None:
    """SIGKILL the process group `pid` leads."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
