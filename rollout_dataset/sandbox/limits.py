"""Resource limits for sandboxed code and the result of one sandboxed run.

`Limits` is what a caller asks for; `RunResult` is what came back, with `limit` naming the limit
that hit (``"wall"``, ``"cpu"``, ``"memory"``, ``"output"``, ``"file"``, ``"disk"``, ``"processes"``)
or ``None``.
"""

from __future__ import annotations

import resource
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Limits", "RunResult", "LIMIT_NAMES", "apply_rlimits", "prlimit_args"]

#: what `RunResult.error` says for each value `RunResult.limit` can take besides None (a `str.format`
#: template over `limits` (the `Limits`), `exit_code` and `signal` (the signal that killed the process))
_LIMIT_ERRORS = {
    "wall": "wall-time limit of {limits.wall_s:g} s exceeded (process group killed)",
    "cpu": "CPU-time limit of {limits.cpu_s:g} s exceeded (killed by signal {signal})",
    "memory": "memory limit of {limits.memory_mb} MiB exceeded (exit status {exit_code})",
    "output": "output limit of {limits.output_bytes} bytes exceeded (output truncated, process killed)",
    "file": "file-size limit of {limits.file_mb} MiB exceeded",
    "disk": "working-directory size limit of {limits.workdir_mb} MiB exceeded (sandbox killed)",
    "processes": "process limit of {limits.processes} processes reached (fork failed)",
}
#: every value `RunResult.limit` can take besides None
LIMIT_NAMES = tuple(_LIMIT_ERRORS)


@dataclass(frozen=True)
class Limits:
    """What one sandboxed process may use.

    Args:
        wall_s: wall-clock seconds before the whole process group is killed.
        cpu_s: CPU seconds (``RLIMIT_CPU``; SIGXCPU at the limit, SIGKILL one second later);
            None: no CPU limit.
        memory_mb: address-space size in MiB (``RLIMIT_AS``); None: no memory limit (needed by
            runtimes that reserve huge address ranges, such as Node.js).
        output_bytes: bytes kept of stdout and of stderr each; more kills the process and the kept
            text ends with a truncation note.
        file_mb: largest file the process may write, in MiB (``RLIMIT_FSIZE``); None: no limit.
        workdir_mb: largest total size of the working directory, in MiB (the runner polls it and
            kills the sandbox past it); None: no limit.
        tmp_mb: size of the private ``/tmp`` (a tmpfs) in MiB.
        processes: most processes (threads included) the sandbox user may have (``RLIMIT_NPROC``);
            None: no limit.

    Raises:
        ValueError: a limit is not positive.
    """

    wall_s: float = 10.0
    cpu_s: float | None = 10.0
    memory_mb: int | None = 1024
    output_bytes: int = 1_000_000
    file_mb: int | None = 64
    workdir_mb: int | None = 256
    tmp_mb: int = 64
    processes: int | None = 256

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "memory_mb", "output_bytes", "file_mb", "workdir_mb", "tmp_mb", "processes"):
            value = getattr(self, name)
            if value is None and name in ("cpu_s", "memory_mb", "file_mb", "workdir_mb", "processes"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive number, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        """The limits as a plain dict (for task.json / summary.json).

        Returns:
            ``{"wall_s", "cpu_s", "memory_mb", "output_bytes", "file_mb", "workdir_mb", "tmp_mb", "processes"}``.
        """
        return asdict(self)


def apply_rlimits(limits: Limits) -> None:
    """Set the CPU, address-space, file-size and process-count rlimits of the calling process.

    Meant to run in the child between fork and exec (``preexec_fn``); it only calls
    ``resource.setrlimit``, which is safe there.

    Args:
        limits: the limits to apply.
    """
    if limits.cpu_s is not None:
        cpu = max(1, int(round(limits.cpu_s)))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if limits.memory_mb is not None:
        memory = int(limits.memory_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    if limits.file_mb is not None:
        fsize = int(limits.file_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    if limits.processes is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (int(limits.processes), int(limits.processes)))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def prlimit_args(limits: Limits) -> list[str]:
    """The same rlimits as `apply_rlimits`, as a util-linux ``prlimit`` command prefix.

    Starting ``prlimit ... -- CMD`` costs one small exec, while a ``preexec_fn`` forces Python to
    fork instead of vfork (measured ~10x more expensive here); the runner prefers this form.

    Args:
        limits: the limits to apply.

    Returns:
        ``["prlimit", "--cpu=S:H", "--as=B", "--fsize=B", "--core=0", "--"]`` (absent limits left out).
    """
    args = ["prlimit"]
    if limits.cpu_s is not None:
        cpu = max(1, int(round(limits.cpu_s)))
        args.append(f"--cpu={cpu}:{cpu + 1}")
    if limits.memory_mb is not None:
        args.append(f"--as={int(limits.memory_mb) * 1024 * 1024}")
    if limits.file_mb is not None:
        args.append(f"--fsize={int(limits.file_mb) * 1024 * 1024}")
    if limits.processes is not None:
        args.append(f"--nproc={int(limits.processes)}")
    args += ["--core=0", "--"]
    return args


@dataclass(frozen=True)
class RunResult:
    """The outcome of one sandboxed process.

    Args:
        stdout: standard output, decoded as UTF-8 (invalid bytes replaced), maybe truncated.
        stderr: standard error, likewise.
        exit_code: the exit status; negative ``-N`` when the process died of signal N.
        timed_out: the wall-time limit killed it.
        limit: the limit that hit (one of `LIMIT_NAMES`) or None.
        wall_s: wall-clock seconds from start to exit.
        limits: the limits the process ran under.
    """

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    limit: str | None
    wall_s: float
    limits: Limits | None = None

    @property
    def ok(self) -> bool:
        """True when the process exited 0 and no limit hit."""
        return self.exit_code == 0 and self.limit is None

    @property
    def error(self) -> str | None:
        """A one-line description of what went wrong, or None when the run is `ok`.

        Returns:
            e.g. ``"wall-time limit of 2 s exceeded (killed)"`` or ``"exited with status 1"``.
        """
        if self.limit in _LIMIT_ERRORS:
            return _LIMIT_ERRORS[self.limit].format(limits=self.limits or Limits(), exit_code=self.exit_code,
                                                    signal=-self.exit_code)
        if self.exit_code < 0:
            return f"killed by signal {-self.exit_code}"
        if self.exit_code != 0:
            return f"exited with status {self.exit_code}"
        return None

    def to_dict(self) -> dict[str, Any]:
        """The result as a plain dict, with the `error` text added.

        Returns:
            A JSON-ready dict.
        """
        out = asdict(self)
        out["limits"] = self.limits.to_dict() if self.limits else None
        out["error"] = self.error
        return out
