"""What the sandbox can isolate on this machine, detected once and cached.

The strongest mode wraps every command as

    unshare --net --mount --pid --fork --mount-proc --kill-child -- /bin/sh -c INIT ... \
        setpriv --bounding-set=-sys_admin,... -- COMMAND

- a new network namespace: only a loopback interface, and it is down, so nothing connects anywhere
  (not even 127.0.0.1 of the host);
- a new mount namespace in which each hidden path (the built-in task data, task files, the Hugging
  Face cache) is covered by an empty read-only tmpfs (a directory) or by /dev/null (a file);
- a new PID namespace with its own /proc: the code sees no other process (so not the environment
  or memory of the process holding the held-out tests), and everything in it dies with it;
- the capabilities to undo this (``CAP_SYS_ADMIN`` to unmount, ``CAP_SYS_PTRACE``, ...) dropped
  from the bounding set, so even as root the code cannot lift the masks.

Each layer is probed once with ``true``; what works is used, and `isolation_report()` says plainly
what is and is not isolated. Nothing here makes the filesystem read-only: the code can read any
other world-readable file and write wherever its user may.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterable

__all__ = ["IsolationMode", "probe_isolation", "isolation_report", "wrap_command", "default_hidden_paths"]

log = logging.getLogger(__name__)

#: capabilities removed from the bounding set of sandboxed code (util-linux setpriv names)
DROPPED_CAPS = ("sys_admin", "sys_ptrace", "net_admin", "sys_module", "sys_rawio", "sys_boot", "mknod")

# Runs as PID 1 of the new PID namespace: cover each hidden path, then run the command as a child
# (not exec: PID 1 ignores default-action signals, so CPU-limit signals must hit a child). A child
# killed by signal N comes back as exit status 128+N, which the runner maps to -N.
_INIT_SCRIPT = r"""
n=$1; shift
while [ "$n" -gt 0 ]; do
  if [ -d "$1" ]; then mount -t tmpfs -o ro,nosuid,nodev,size=4k,mode=0555 sandbox-hidden "$1" || exit 125
  elif [ -e "$1" ]; then mount --bind /dev/null "$1" || exit 125
  fi
  shift; n=$((n-1))
done
"$@"
"""

#: exit status of the init script when a mask could not be mounted
MASK_FAILED_STATUS = 125


class IsolationMode:
    """The isolation layers that work here (attributes are booleans).

    Args:
        network: new network namespace available.
        mount: new mount namespace (hidden paths) available.
        pid: new PID namespace with private /proc available.
        drop_caps: setpriv can drop capabilities from the bounding set.
        reason: why a stronger mode was not available ("" when all are).
    """

    def __init__(self, network: bool, mount: bool, pid: bool, drop_caps: bool, reason: str = "") -> None:
        self.network = network
        self.mount = mount
        self.pid = pid
        self.drop_caps = drop_caps
        self.reason = reason

    def __repr__(self) -> str:
        return (f"IsolationMode(network={self.network}, mount={self.mount}, pid={self.pid}, "
                f"drop_caps={self.drop_caps})")


def _unshare_flags(network: bool, mount: bool, pid: bool) -> list[str]:
    flags = []
    if network:
        flags.append("--net")
    if mount:
        flags.append("--mount")
    if pid:
        flags += ["--pid", "--fork", "--mount-proc", "--kill-child"]
    return flags


def _setpriv_prefix() -> list[str]:
    return ["setpriv", "--bounding-set=" + ",".join("-" + c for c in DROPPED_CAPS), "--"]


def _try(argv: list[str]) -> tuple[bool, str]:
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=10, env={"PATH": os.defpath})
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{argv[0]}: {exc}"
    if proc.returncode != 0:
        return False, f"{' '.join(argv[:8])} ... exited {proc.returncode}: {proc.stderr.decode(errors='replace').strip()[:200]}"
    return True, ""


@functools.lru_cache(maxsize=1)
def probe_isolation() -> IsolationMode:
    """Detect, once per process, which isolation layers work on this machine.

    Returns:
        The `IsolationMode` every sandbox in this process uses.
    """
    if os.environ.get("ROLLOUT_DATASET_SANDBOX_ISOLATION", "").lower() in ("0", "off", "none"):
        return IsolationMode(False, False, False, False, "disabled by ROLLOUT_DATASET_SANDBOX_ISOLATION")
    if not shutil.which("unshare"):
        return IsolationMode(False, False, False, False, "util-linux `unshare` not found on PATH")
    drop = bool(shutil.which("setpriv")) and _try([*_setpriv_prefix(), "true"])[0]
    reasons = []
    for network, mount, pid in ((True, True, True), (True, True, False), (True, False, False)):
        argv = ["unshare", *_unshare_flags(network, mount, pid), "--", "/bin/sh", "-c", _INIT_SCRIPT, "init", "0", "true"]
        ok, why = _try(argv)
        if ok:
            mode = IsolationMode(network, mount, pid, drop, "; ".join(reasons))
            log.debug("sandbox isolation: %r", mode)
            return mode
        reasons.append(why)
    reason = "; ".join(reasons)
    log.warning("sandbox: no namespace isolation available (%s); code runs with the host network", reason)
    return IsolationMode(False, False, False, drop, reason)


def default_hidden_paths() -> list[Path]:
    """Paths every sandbox hides from the code it runs (when a mount namespace is available).

    Returns:
        The built-in task data directory and, when it exists, the Hugging Face cache.
    """
    paths = [Path(__file__).resolve().parent.parent / "tasks" / "data"]
    hf_home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    if os.path.isdir(hf_home):
        paths.append(Path(hf_home).resolve())
    return [p for p in paths if p.exists()]


def wrap_command(argv: list[str], hidden: Iterable[Path], network: bool = False) -> tuple[list[str], bool]:
    """Wrap a command in the available namespaces.

    Args:
        argv: the command to run.
        hidden: paths to cover inside the mount namespace (ignored without one).
        network: keep the host network (for an agent CLI that must reach the recording proxy);
            the other layers still apply.

    Returns:
        ``(argv, via_init)``: the command to start, and whether it runs under the init script (whose
        exit status 128+N means the command died of signal N).
    """
    mode = probe_isolation()
    new_net = mode.network and not network
    if not (new_net or mode.mount or mode.pid):
        return list(argv), False
    masks = [str(p) for p in hidden if os.path.exists(p)] if mode.mount else []
    inner = (_setpriv_prefix() if mode.drop_caps else []) + list(argv)
    wrapped = ["unshare", *_unshare_flags(new_net, mode.mount, mode.pid), "--",
               "/bin/sh", "-c", _INIT_SCRIPT, "sandbox-init", str(len(masks)), *masks, *inner]
    return wrapped, True


def isolation_report(hidden: Iterable[Path] | None = None) -> dict[str, Any]:
    """Say plainly what the sandbox isolates on this machine and what it does not.

    Args:
        hidden: the paths a particular sandbox hides (default: `default_hidden_paths()`).

    Returns:
        A JSON-ready dict: ``network``, ``filesystem``, ``processes``, ``privileges``, ``limits``,
        ``environment``, ``not_isolated`` (a list of sentences) and ``reason``.
    """
    mode = probe_isolation()
    hidden = [str(p) for p in (default_hidden_paths() if hidden is None else hidden)]
    not_isolated = ["the rest of the filesystem: world-readable files can be read, and the code may write "
                    "wherever its user may (it runs as the calling user)"]
    if not mode.network:
        not_isolated.append("network: the code can reach the host's network, including loopback services")
    if not mode.mount:
        not_isolated.append("hidden paths: no mount namespace, so task data files are readable")
    if not mode.pid:
        not_isolated.append("processes: the code can see other processes of the same user in /proc")
    if not mode.drop_caps:
        not_isolated.append("privileges: capabilities are not dropped")
    return {
        "network": ("network namespace (no interfaces up); Sandbox(network=True) keeps the host network "
                    "for agent CLIs that must reach the proxy") if mode.network else "none (host network)",
        "filesystem": (f"own temporary working directory; mount namespace hiding {hidden}" if mode.mount
                       else "own temporary working directory only"),
        "processes": "PID namespace with private /proc" if mode.pid else "shared with the host",
        "privileges": (f"runs as uid {os.getuid()}; bounding set without {', '.join(DROPPED_CAPS)}"
                       if mode.drop_caps else f"runs as uid {os.getuid()} with its capabilities"),
        "limits": "rlimits (util-linux prlimit, else setrlimit in the child): CPU (RLIMIT_CPU), address "
                  "space (RLIMIT_AS), file size (RLIMIT_FSIZE), no core files; "
                  "wall time and output size enforced by the runner (process group killed)",
        "environment": "scrubbed: only PATH, HOME/TMPDIR (the working directory), locale and Python "
                       "settings; no tokens, API keys or proxy settings",
        "not_isolated": not_isolated,
        "reason": mode.reason,
    }
