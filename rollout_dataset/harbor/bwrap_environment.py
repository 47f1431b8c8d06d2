"""A Harbor environment on bubblewrap: `--env rollout_dataset.harbor.bwrap_environment:BwrapEnvironment`.

Harbor's `BaseEnvironment` contract (`start`, `stop`, `exec` with cwd/env/timeout/user,
`upload_file/upload_dir/download_file/download_dir`) on the host's own files, no Docker:

- the environment's root is a host folder (``<state>/root``) bound as ``/``; the host's ``/usr``
  (and the ``/bin``, ``/lib*`` links) are bound read-only over it, with ``ld.so.cache``, the Debian
  alternatives and the time zone; ``/etc/passwd`` and ``/etc/group`` are generated. Nothing else of
  the host is in it: no checkout, no task folder (``tests/`` and ``solution/`` arrive only when
  Harbor uploads them, the tests after the agent has finished), no trace, no secret;
- every `exec` is a fresh ``bwrap``: new network namespace (loopback only: the model is reached by
  terminus-2 from the host through the recording proxy, never from inside), new IPC/UTS namespaces,
  all capabilities dropped, ``no_new_privs``; the environment's own PID namespace (no host process
  visible) and ``/tmp`` (inside the root) are shared, so the tmux server terminus-2 starts in one
  `exec` persists to the next;
- limits: address space from the task's ``memory_mb``, file size, open files; a timed-out command's
  process group is killed (SIGKILL);
- the task's ``environment/Dockerfile`` ``WORKDIR`` (unless ``task.toml`` sets ``workdir``) is the
  working directory of every command, and its ``ENV`` values (under ``[environment] env``) are set in
  each; its ``FROM`` image is stood in for by the host's ``/usr`` (a task that needs the image itself
  never gets here: `rollout_dataset.harbor.environments.choose_environment`);
- every command carries a marker variable, so `stop()` kills every process the environment started
  (tmux included) and removes the root; a detached reaper (`reaper.py`) does the same when Harbor
  dies without stopping it.

This module runs in Harbor's venv: it imports Harbor, the standard library, `bwrap_root`/`reaper`
(standard library only; `rollout_dataset`'s own `__init__` imports nothing eagerly) and, for the
Dockerfile, `rollout_dataset.harbor.environments.read_dockerfile` (``dockerfile-parse``, which
`make harbor` installs there).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities

try:  # imported as rollout_dataset.harbor.bwrap_environment (the usual way) or from its folder
    from rollout_dataset.harbor.bwrap_root import REWARD_FILES, TIMEOUT_EXIT, TaskRoot, kill_group
except ImportError:  # pragma: no cover - PYTHONPATH holds this folder only
    from bwrap_root import REWARD_FILES, TIMEOUT_EXIT, TaskRoot, kill_group  # type: ignore[no-redef]

__all__ = ["BwrapEnvironment", "ENV_TYPE"]

#: the environment's type name (Harbor's `type()`)
ENV_TYPE = "rollout-bwrap"
_OUTPUT_CAP = 1_000_000  # characters of stdout/stderr kept per exec


class BwrapEnvironment(BaseEnvironment):
    """Harbor's environment contract on bubblewrap (see the module docstring).

    A task whose Dockerfile installs anything is refused before a trial starts, by the adapter
    (`rollout_dataset.harbor.adapter.environment_for`); here only ``bwrap`` is required.
    """

    @staticmethod
    def type() -> str:
        """Returns: the type name, ``rollout-bwrap``."""
        return ENV_TYPE

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        """No network ever (``disable_internet``); no GPUs, no allow-lists, no host mounts."""
        return EnvironmentCapabilities(disable_internet=True)

    def _validate_definition(self) -> None:
        """Refuse where bwrap is missing; set up the (not yet built) root."""
        if shutil.which("bwrap") is None:
            raise FileNotFoundError("bwrap (bubblewrap) is not installed: run `make system-deps`")
        config = self.task_env_config
        dockerfile = self._read_dockerfile()
        workdir = config.workdir or dockerfile.get("workdir")
        env = {**(dockerfile.get("env") or {}), **(config.env or {})}
        self._task_root = TaskRoot(workdir, env, config.memory_mb)
        self._reaper: subprocess.Popen | None = None

    def _read_dockerfile(self) -> dict:
        """The task's Dockerfile's WORKDIR and ENV (`environments.read_dockerfile`); none without a Dockerfile."""
        try:
            from rollout_dataset.harbor.environments import read_dockerfile
        except ImportError as exc:  # dockerfile-parse missing from Harbor's venv
            raise FileNotFoundError(f"the bwrap environment reads the task's Dockerfile with dockerfile-parse, which "
                                    f"Harbor's venv lacks ({exc}): run `make harbor`") from None
        return read_dockerfile(Path(self.environment_dir) / "Dockerfile")

    async def start(self, force_build: bool) -> None:
        """Build the root, start its PID namespace and the reaper that cleans up if Harbor dies."""
        self._task_root.build()
        self._task_root.start_processes()
        reaper = Path(__file__).with_name("reaper.py")
        self._reaper = subprocess.Popen(
            [sys.executable, str(reaper), str(os.getpid()), self._task_root.marker, str(self._task_root.state)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    async def stop(self, delete: bool) -> None:
        """Kill every process of the environment (tmux included) and remove its root."""
        self._task_root.close()
        if self._reaper is not None and self._reaper.poll() is None:
            self._reaper.kill()
            self._reaper.wait()

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        """Run `command` with ``bash -c`` in a fresh bwrap; on timeout its process group is killed.

        Returns:
            Exit code (124 on timeout, as `timeout(1)`), stdout and stderr (capped).
        """
        user = self._resolve_user(user)
        if user not in (None, "root", 0, "0"):
            self.logger.debug("bwrap environment: user %r runs as root (one user in this environment)", user)
        proc = await asyncio.create_subprocess_exec(
            *self._task_root.argv(command, cwd, self._merge_env(env)), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, **self._task_root.popen_kwargs())
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout_sec)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            kill_group(proc.pid)
            await proc.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return ExecResult(stdout="", stderr=f"command timed out after {timeout_sec} s", return_code=TIMEOUT_EXIT)
        return ExecResult(stdout=out.decode("utf-8", "replace")[-_OUTPUT_CAP:],
                          stderr=err.decode("utf-8", "replace")[-_OUTPUT_CAP:], return_code=proc.returncode or 0)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        """Copy a host file into the root."""
        target = self._task_root.host_path(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source_path, target)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        """Copy a host folder's contents into the root (merged with what is there).

        ``/tests`` comes with the verifier: every process the agent left running is killed first (a
        fresh PID namespace), so none can rewrite the tests or the reward while the verifier runs;
        then ``/tests`` is emptied (nothing the agent planted there runs), and the reward files are
        removed again (one written between Harbor's removal and the kill counts for nothing)."""
        verifier_next = target_dir.rstrip("/") == "/tests"
        if verifier_next:
            self._task_root.start_processes()
        target = self._task_root.host_path(target_dir)
        if verifier_next and (target.exists() or target.is_symlink()):
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink()
        shutil.copytree(source_dir, target, dirs_exist_ok=True)
        if verifier_next:  # its log folder exists even if the agent removed it, and holds no reward yet
            self._task_root.build()
            for reward in REWARD_FILES:
                self._task_root.host_path(reward).unlink(missing_ok=True)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        """Copy a file of the root to the host (a symlink leading out of the root is refused)."""
        source = self._task_root.host_path(source_path)
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        """Copy a folder of the root to the host; symlinks are copied as links, never followed.

        A link is copied only when it is relative and stays inside the folder: any other, once on the
        host, would name a host file (a ``reward.txt`` linked to a host file holding ``1`` would be
        read as the verifier's reward). A file already on the host is never replaced: what the
        agent wrote in ``/logs/agent`` would otherwise overwrite what terminus-2, on the host, wrote
        there (its ``trajectory.json``). Each one left out is logged.
        """
        source = self._task_root.host_path(source_dir)
        shutil.copytree(source, target_dir, symlinks=True, dirs_exist_ok=True, ignore=self._links_leaving(source),
                        copy_function=self._copy_new)

    def _copy_new(self, source: str, target: str) -> str:
        """`copytree`'s copy: a file the host already has is left as it is (logged)."""
        if os.path.lexists(target):
            self.logger.warning("bwrap environment: %s is already on the host; the environment's %s is not copied "
                                "over it", target, source)
            return target
        return shutil.copy2(source, target)

    def _links_leaving(self, top: Path) -> Callable[[str, list[str]], set[str]]:
        """A `copytree` ignore function: the names of links that are absolute or lead out of `top`."""
        top = Path(os.path.abspath(top))

        def ignore(folder: str, names: list[str]) -> set[str]:
            out = set()
            for name in names:
                path = Path(folder) / name
                if not path.is_symlink():
                    continue
                target = os.readlink(path)
                if os.path.isabs(target) or not Path(os.path.normpath(path.parent / target)).is_relative_to(top):
                    self.logger.warning("bwrap environment: %s is a symlink to %r, outside the folder downloaded; "
                                        "left out", path, target)
                    out.add(name)
            return out
        return ignore
