"""The allow-list root every sandboxed command runs in, built by bubblewrap (``bwrap``).

Untrusted code (the agent's commands, external harnesses, the verifier's runs of a solution) sees a
new, empty root holding only:

- its working directory, read-write, at its host path (its size is watched by the runner);
- a private ``/tmp``: a fresh size-capped tmpfs, gone when the command ends;
- a read-only runtime: ``/usr`` (and the ``/bin``, ``/lib*`` links), the Python installation this
  process runs on and its virtual environment (``sys.base_prefix``, ``sys.prefix``), plus whatever
  read-only paths the caller names (e.g. an npm tool folder for an external harness);
- a generated ``/etc`` (``passwd``/``group`` naming the sandbox user, ``hosts``) and the few host
  files the runtime needs (``ld.so.cache``, ``alternatives``, ``localtime``); no other host file;
- a private ``/proc`` (new PID namespace), a minimal ``/dev``;
- no network: a new network namespace with only loopback. An external harness reaches the recording
  proxy through one forwarded port (see `rollout_dataset.sandbox.forward`), nothing else.

The code runs as an unprivileged user with no capabilities: when this process is root, bwrap builds
the root with root's rights and the command then drops to a fresh high host uid (util-linux
``setpriv``: all capabilities, the bounding set and supplementary groups cleared), so the process
limit (``RLIMIT_NPROC``, which does not bind uid 0) holds; otherwise bwrap runs unprivileged in a new
user namespace (the code keeps the caller's host uid). Either way ``no_new_privs`` is set, a new
session is started (no terminal injection) and everything dies with the runner.

The project checkout, the built-in task data, other rollouts' artifacts and temp folders, trace
files and host secrets are simply not in the root. `probe_isolation()` checks once that such a root
can be built here; `isolation_report()` says what holds.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

__all__ = ["IsolationMode", "RootSpec", "probe_isolation", "task_data_dir", "mask_targets", "isolation_report", "bwrap_argv", "runtime_paths",
           "ISOLATION_LEVELS", "SANDBOX_UID_RANGE", "require_isolation", "check_sandbox_ro_paths", "fresh_sandbox_uid", "write_etc"]

log = logging.getLogger(__name__)

#: the values summary.json's ``isolation`` field takes
ISOLATION_LEVELS = ("allow-list", "unsafe")
#: host uids a root runner draws sandbox users from (one per `Sandbox`, so process counts are per sandbox)
SANDBOX_UID_RANGE = (2_000_000, 3_000_000)
#: the uid/gid the code sees when bwrap runs unprivileged (user namespace)
_USERNS_ID = 1000
#: host files under /etc the runtime needs (dynamic linker cache, Debian alternatives, time zone)
_ETC_FILES = ("/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime")
#: the system's TLS trust stores (public CA certificates), read-only: a harness inherits SSL_CERT_FILE /
#: SSL_CERT_DIR (e.g. /etc/ssl/certs/ca-certificates.crt) and its SDK opens them when it builds a client
TLS_TRUST_PATHS = ("/etc/ssl/certs", "/etc/pki/tls/certs", "/etc/pki/ca-trust", "/etc/ca-certificates")
#: the capabilities bwrap keeps when running as root (setpriv needs them, and bwrap enters the workdir
#: owned by the sandbox user); setpriv then drops them all
_SETPRIV_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH")


@dataclass(frozen=True)
class IsolationMode:
    """Whether the allow-list root can be built on this machine, and how.

    Args:
        allow_list: bwrap builds the allow-list root here.
        privileged: this process is root: bwrap runs with root's rights and the command drops to a
            fresh unprivileged uid; False: bwrap runs in a user namespace as the caller.
        reason: why the allow-list root is unavailable ("" when it is available).
    """

    allow_list: bool
    privileged: bool = False
    reason: str = ""

    @property
    def level(self) -> str:
        """``"allow-list"`` or ``"unsafe"`` (one of `ISOLATION_LEVELS`)."""
        return ISOLATION_LEVELS[0] if self.allow_list else ISOLATION_LEVELS[1]


@dataclass
class RootSpec:
    """What one sandboxed command's root holds besides the fixed runtime.

    Args:
        workdir: the working directory (bound read-write at its host path; the command starts there).
        rw_paths: further host directories bound read-write at their own path (an external
            harness's HOME).
        ro_paths: host paths bound read-only, as ``(source, destination)`` pairs.
        masks: paths covered by an empty read-only directory or file wherever a bound tree shows them
            (others are not in the root anyway and are left out); the package's task data
            (`task_data_dir`) is always masked.
        tmp_mb: size of the private ``/tmp`` tmpfs in MiB.
        uid: the host uid the command runs as (root runner only; None in user-namespace mode).
        etc_dir: a folder holding the generated ``passwd``, ``group`` and ``hosts`` (see `write_etc`).
        extra_args: bwrap arguments appended last (e.g. the proxy forwarder's socket bind).
    """

    workdir: Path
    rw_paths: Sequence[Path] = ()
    ro_paths: Sequence[tuple[Path, Path]] = ()
    masks: Sequence[Path] = ()
    tmp_mb: int = 64
    uid: int | None = None
    etc_dir: Path | None = None
    extra_args: list[str] = field(default_factory=list)


def fresh_sandbox_uid() -> int:
    """A random host uid from `SANDBOX_UID_RANGE` for one sandbox (root runner only).

    Returns:
        The uid (also used as gid).
    """
    low, high = SANDBOX_UID_RANGE
    return low + secrets.randbelow(high - low)


def write_etc(folder: Path, uid: int) -> Path:
    """Write the generated ``/etc`` files of a sandbox whose user has id `uid` (and an empty file for masks).

    Args:
        folder: an existing private folder (outside every sandbox's working directory).
        uid: the uid and gid the code sees.

    Returns:
        `folder`.
    """
    (folder / "passwd").write_text(f"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
                                   f"sandbox:x:{uid}:{uid}:sandbox:/tmp:/bin/sh\n"
                                   f"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    (folder / "group").write_text(f"root:x:0:\nsandbox:x:{uid}:\nnogroup:x:65534:\n")
    (folder / "hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
    (folder / "empty").write_bytes(b"")  # what a masked file reads as
    for name in ("passwd", "group", "hosts", "empty"):
        os.chmod(folder / name, 0o644)
    os.chmod(folder, 0o755)
    return folder


def runtime_paths() -> list[tuple[Path, Path]]:
    """The runtime bound read-only besides ``/usr``: the Python installation and its venv.

    Returns:
        ``(source, destination)`` pairs: ``sys.base_prefix`` and ``sys.prefix`` resolved, each also
        at its unresolved path when a symlink leads there (a worktree's ``.venv`` link), nothing
        under ``/usr``, no path nested in another.
    """
    literal = [sys.base_prefix, sys.prefix, os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))]
    pairs: list[tuple[Path, Path]] = []
    for c in literal:
        source = Path(c).resolve()
        for dest in (source, Path(os.path.abspath(c))):
            if dest == Path("/usr") or Path("/usr") in dest.parents or dest == Path("/"):
                continue
            if any(dest == d or d in dest.parents for _, d in pairs):
                continue
            pairs = [(s, d) for s, d in pairs if dest not in d.parents] + [(source, dest)]
    return pairs


#: the variables naming the CA certificates a TLS client inside the sandbox loads (OpenSSL, httpx, requests)
TLS_ENV_VARS = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
#: at most this many files of a CA folder are checked (a larger folder is not mounted)
_MAX_CA_DIR_FILES = 5000
_MAX_CA_FILE_BYTES = 16 * 1024 * 1024


def _certificates_only(path: Path) -> bool:
    """Whether `path` is a readable file of public certificates: no private key in it."""
    try:
        if not path.is_file() or path.stat().st_size > _MAX_CA_FILE_BYTES:
            return False
        return b"PRIVATE KEY" not in path.read_bytes()
    except OSError:
        return False


def _certificate_folder(path: Path) -> bool:
    """Whether `path` is a folder whose files are all certificates (no private key), checked one level deep."""
    try:
        entries = list(path.iterdir())
    except OSError:
        return False
    if len(entries) > _MAX_CA_DIR_FILES:
        return False
    return all(_certificates_only(e) for e in entries if e.is_file() and not e.is_symlink()) and all(
        not e.is_dir() or e.is_symlink() for e in entries)


def tls_trust_mounts(env: Mapping[str, str]) -> list[tuple[Path, Path]]:
    """The CA certificates a sandboxed TLS client is told to load, as read-only mounts.

    A harness inherits ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` (and requests' and curl's bundle variables)
    and its SDK (openai, anthropic: httpx) opens them when it builds a client; certifi's bundle is
    the fallback. Each named file or folder is mounted read-only at the path the variable names (its
    target when it is a symlink), unless it is already in the root (under ``/usr``, the runtime, a
    `TLS_TRUST_PATHS` folder). A file or folder holding anything but certificates (a ``PRIVATE KEY``
    block, a subfolder) is not mounted and is logged: it would hand a secret to the code.

    Args:
        env: the environment the sandboxed command gets.

    Returns:
        ``(source, destination)`` pairs.
    """
    named: list[tuple[str, str]] = []
    for name in TLS_ENV_VARS:
        value = env.get(name) or ""
        values = value.split(os.pathsep) if name == "SSL_CERT_DIR" else [value]  # OpenSSL: a list of folders
        named += [(name, v.strip()) for v in values if v.strip()]
    try:
        import certifi

        named.append(("certifi", certifi.where()))
    except ImportError:
        pass
    inside = [Path("/usr"), *(Path(p) for p in TLS_TRUST_PATHS), *(d for _, d in runtime_paths())]
    mounts: list[tuple[Path, Path]] = []
    for name, value in named:
        dest = Path(os.path.abspath(value))
        source = dest.resolve()
        if any(dest == d or d in dest.parents for d in inside):
            continue  # already in the root (a symlink there resolves as on the host)
        if not (_certificates_only(source) or (source.is_dir() and _certificate_folder(source))):
            log.warning("sandbox: %s names %s, which is not a file or folder of certificates only; not mounted",
                        name, value)
            continue
        if all(d != dest for _, d in mounts):
            mounts.append((source, dest))
    return mounts


def _parents_args(dest: Path, made: set[Path]) -> list[str]:
    """``--dir`` arguments creating every missing ancestor of `dest` world-traversable (0755)."""
    args: list[str] = []
    for parent in reversed(dest.parents):
        if parent == Path("/") or parent in made:
            continue
        made.add(parent)
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


def task_data_dir() -> Path:
    """The package's task data (built-in held-out tests, reference solutions, Harbor task folders).

    A wheel install puts it under ``sys.prefix``, which every root binds read-only as the runtime:
    `bwrap_argv` masks it in every root, at every path a bind shows it.

    Returns:
        The resolved folder.
    """
    from rollout_dataset.package_paths import TASK_PACKAGE_DIR

    return TASK_PACKAGE_DIR / "data"


def mask_targets(mask: Path, binds: Sequence[tuple[Path, Path]]) -> list[Path]:
    """Every path inside the root at which the host path `mask` shows, through the root's binds.

    Args:
        mask: a host path (or a path inside the root) that must read as empty.
        binds: the root's ``(source, destination)`` binds.

    Returns:
        `mask` itself when a destination holds it, and the path it appears at under each bind whose
        (resolved) source holds it (a venv reached through a symlink is bound twice), without duplicates.
    """
    targets: list[Path] = []
    real = mask.resolve()
    for source, dest in binds:
        if mask == dest or dest in mask.parents:
            found = [mask]
        else:
            src = source.resolve()
            found = [dest / real.relative_to(src)] if (real == src or src in real.parents) else []
        targets += [t for t in found if t not in targets]
    return targets


def bwrap_argv(argv: Sequence[str], spec: RootSpec, *, privileged: bool) -> list[str]:
    """The command line running `argv` in the allow-list root `spec` describes.

    Args:
        argv: the command.
        spec: the root's contents.
        privileged: this process is root (see `IsolationMode.privileged`).

    Returns:
        ``["bwrap", ..., "--", (setpriv ...), *argv]``.
    """
    args = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--hostname", "sandbox", "--cap-drop", "ALL"]
    if privileged:
        for cap in _SETPRIV_CAPS:
            args += ["--cap-add", cap]
    else:
        args += ["--unshare-user", "--uid", str(_USERNS_ID), "--gid", str(_USERNS_ID)]
    args += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/" + name)
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(int(spec.tmp_mb) * 1024 * 1024),
             "--perms", "1777", "--tmpfs", "/tmp", "--perms", "0755", "--dir", "/etc"]
    made = {Path("/tmp"), Path("/etc")}
    for path in _ETC_FILES:
        args += ["--ro-bind-try", path, path]
    for path in TLS_TRUST_PATHS:
        if os.path.isdir(path):  # its parents world-traversable, so the sandbox user reaches it
            args += _parents_args(Path(path), made) + ["--ro-bind", path, path]
    if spec.etc_dir is not None:
        for name in ("passwd", "group", "hosts"):
            args += ["--ro-bind", str(spec.etc_dir / name), f"/etc/{name}"]
    for source, dest in runtime_paths():
        args += _parents_args(dest, made) + ["--ro-bind", str(source), str(dest)]
    for source, dest in spec.ro_paths:
        args += _parents_args(Path(dest), made) + ["--ro-bind", str(source), str(dest)]
    for rw_path in [*spec.rw_paths, spec.workdir]:
        args += _parents_args(Path(rw_path), made) + ["--bind", str(rw_path), str(rw_path)]
    binds = [*runtime_paths(), *((Path(s), Path(d)) for s, d in spec.ro_paths),
             *((Path(p), Path(p)) for p in [*spec.rw_paths, spec.workdir])]
    masked: set[Path] = set()
    for mask in [*spec.masks, task_data_dir()]:
        is_dir = os.path.isdir(mask)
        for target in mask_targets(Path(mask), binds):  # none: not in the root at all
            if target in masked:
                continue
            masked.add(target)
            if is_dir:
                args += ["--perms", "0555", "--tmpfs", str(target), "--remount-ro", str(target)]
            elif os.path.exists(mask) and spec.etc_dir is not None:
                args += ["--ro-bind", str(spec.etc_dir / "empty"), str(target)]
    args += list(spec.extra_args)
    args += ["--chdir", str(spec.workdir), "--"]
    if privileged:
        uid = spec.uid if spec.uid is not None else fresh_sandbox_uid()
        args += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                 "--bounding-set=-all", "--"]
    return args + list(argv)


def _probe() -> IsolationMode:
    if os.environ.get("ROLLOUT_DATASET_SANDBOX_ISOLATION", "").lower() in ("0", "off", "none"):
        return IsolationMode(False, reason="disabled by ROLLOUT_DATASET_SANDBOX_ISOLATION")
    if not shutil.which("bwrap"):
        return IsolationMode(False, reason="bubblewrap (`bwrap`) is not installed: install the Debian package "
                                           "`bubblewrap` (`make test` does)")
    privileged = os.geteuid() == 0
    if privileged and not shutil.which("setpriv"):
        return IsolationMode(False, reason="util-linux `setpriv` not found on PATH (needed to drop root)")
    with tempfile.TemporaryDirectory(prefix="rd-sandbox-probe-") as tmp:
        work, etc = Path(tmp, "work"), Path(tmp, "etc")
        work.mkdir()
        etc.mkdir()
        uid = fresh_sandbox_uid() if privileged else None
        write_etc(etc, uid if uid is not None else _USERNS_ID)
        if uid is not None:
            os.chown(work, uid, uid)
            os.chmod(tmp, 0o755)
        argv = bwrap_argv(["/bin/sh", "-c", "test ! -e /etc/shadow && echo ok > probe"],
                          RootSpec(workdir=work, uid=uid, etc_dir=etc), privileged=privileged)
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=20,
                                  env={"PATH": os.defpath})
        except (OSError, subprocess.SubprocessError) as exc:
            return IsolationMode(False, privileged, f"bwrap could not start: {exc}")
        if proc.returncode != 0 or not (work / "probe").is_file():
            err = proc.stderr.decode("utf-8", errors="replace").strip()[:300]
            return IsolationMode(False, privileged, f"bwrap could not build the allow-list root "
                                                    f"(exit status {proc.returncode}): {err}")
    return IsolationMode(True, privileged)


@functools.lru_cache(maxsize=1)
def probe_isolation() -> IsolationMode:
    """Check, once per process, that the allow-list root can be built on this machine.

    ``ROLLOUT_DATASET_SANDBOX_ISOLATION=off`` makes it report unavailable (to test the refusal).

    Returns:
        The `IsolationMode` every sandbox of this process uses.
    """
    mode = _probe()
    if not mode.allow_list:
        log.warning("sandbox: no allow-list root on this machine: %s", mode.reason)
    return mode


def require_isolation(unsafe: bool = False) -> str:
    """Refuse to go on without the allow-list root, unless the caller opted out explicitly.

    Args:
        unsafe: the explicit opt-out (`--unsafe-sandbox`).

    Returns:
        The isolation level the run will have: ``"allow-list"``, or ``"unsafe"`` when opted out on a
        machine that cannot build the root.

    Raises:
        SandboxUnavailableError: the root cannot be built and `unsafe` is False (the message says why
            and how to fix or opt out).
    """
    from rollout_dataset.errors import SandboxUnavailableError

    mode = probe_isolation()
    if mode.allow_list:
        return mode.level
    if not unsafe:
        raise SandboxUnavailableError(
            f"the allow-list sandbox cannot be built on this machine ({mode.reason}); refusing to run untrusted "
            "code. Install bubblewrap (`make system-deps`, or `apt-get install bubblewrap`), or opt out explicitly "
            "with --unsafe-sandbox.")
    log.warning("sandbox: running untrusted code WITHOUT isolation (--unsafe-sandbox): %s", mode.reason)
    return mode.level


def check_sandbox_ro_paths(paths: Iterable[str | os.PathLike[str]], protected: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Refuse extra read-only paths that would put held-out data into the root.

    Args:
        paths: what the user asks to expose (`--sandbox-ro`).
        protected: further paths that must stay out (the capture's output folder).

    Raises:
        ValueError: a path does not exist, or is, holds or lies inside the package's task data or
            a protected path (the message names both).
    """
    from rollout_dataset.package_paths import TASK_PACKAGE_DIR

    banned = [TASK_PACKAGE_DIR, *(Path(p).resolve() for p in protected)]
    for raw in paths:
        path = Path(raw).resolve()
        if not path.exists():
            raise ValueError(f"--sandbox-ro {raw}: no such file or folder")
        for b in banned:
            if path == b or path in b.parents or b in path.parents:
                raise ValueError(f"--sandbox-ro {raw}: it would expose {b} (task data or the output folder) "
                                 "to the agent; name a narrower path")


def isolation_report() -> dict[str, Any]:
    """Say plainly what the sandbox guarantees on this machine and what it does not.

    Returns:
        A JSON-ready dict: ``level`` (``"allow-list"`` or ``"unsafe"``), ``filesystem``, ``network``,
        ``processes``, ``privileges``, ``limits``, ``environment``, ``not_isolated`` (sentences) and
        ``reason`` (why the allow-list root is unavailable, "" when it is available).
    """
    mode = probe_isolation()
    limits = ("rlimits (util-linux prlimit): CPU (RLIMIT_CPU), address space (RLIMIT_AS), file size "
              "(RLIMIT_FSIZE), no core files; wall time, output size and the working directory's size "
              "enforced by the runner (the whole sandbox is killed)")
    environment = ("scrubbed: only PATH, HOME (the working directory), TMPDIR, locale and Python settings; "
                   "no tokens, API keys or proxy settings")
    if not mode.allow_list:
        return {
            "level": mode.level,
            "filesystem": "none: the code sees the whole host filesystem and may write wherever the caller may",
            "network": "none: the host network",
            "processes": "shared with the host; no process limit",
            "privileges": f"runs as the caller (uid {os.geteuid()}) with its capabilities",
            "limits": limits,
            "environment": environment,
            "not_isolated": ["everything but the limits and the environment: the held-out tests, the project "
                             "checkout, other rollouts and trace files are readable and writable"],
            "reason": mode.reason,
        }
    user = ("a fresh unprivileged host uid per sandbox (root runner, util-linux setpriv), no capabilities, "
            "empty bounding set, no supplementary groups, no_new_privs" if mode.privileged else
            f"the caller's uid (uid {_USERNS_ID} inside a user namespace), no capabilities, no_new_privs")
    return {
        "level": mode.level,
        "filesystem": ("allow-list root (bubblewrap): the working directory (read-write, size watched), a private "
                       "size-capped /tmp, read-only /usr, the Python installation and its venv, generated "
                       "/etc/passwd, /etc/group, /etc/hosts; nothing else of the host"),
        "network": ("new network namespace with only loopback; an external harness reaches the recording "
                    "proxy through one forwarded port and nothing else"),
        "processes": "new PID namespace with a private /proc; a process-count limit (RLIMIT_NPROC); "
                     "everything dies with the runner",
        "privileges": user,
        "limits": limits,
        "environment": environment,
        "not_isolated": [
            "the read-only runtime is readable: /usr, the Python installation and the venv's installed "
            "packages (the project's own source tree and task data are not in it)",
            "the kernel is shared: a kernel exploit escapes any namespace sandbox",
            "the working directory's size is checked by polling, so a burst may overshoot the cap briefly "
            "(each file is still capped by RLIMIT_FSIZE)",
            "CPU and memory are per-process rlimits, not a cgroup: many processes each get the limits "
            "(bounded by the process-count limit)",
        ],
        "reason": "",
    }
