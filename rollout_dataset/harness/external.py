"""External harnesses: run any CLI agent with its OpenAI base URL pointed at the recording proxy.

`--harness cmd:"..."` runs the command with ``bash -c`` in the sandbox working directory. The
command and the environment get:

| placeholder | environment variable | value |
| --- | --- | --- |
| `{base_url}` | `OPENAI_BASE_URL`, `OPENAI_API_BASE` | the proxy's base URL (ends in `/v1`) |
| `{model}` | `ROLLOUT_MODEL` | the model name to request |
| `{task_file}` | `ROLLOUT_TASK_FILE` | a file holding the task statement (outside the workdir) |
| `{workdir}` | `ROLLOUT_WORKDIR` | the working directory; the solution goes to `solution.py` there |
| — | `OPENAI_API_KEY` | the API key (never put it in the command: commands are recorded) |

Placeholders are substituted shell-quoted. HOME, TMPDIR and the XDG directories point into a fresh
temporary folder so a harness reads no user config.

The harness runs inside the sandbox (`rollout_dataset.sandbox.Sandbox`), like the code it writes:
the allow-list root (bubblewrap) holding only the working directory and the harness's HOME
(read-write), a private /tmp, the read-only runtime (/usr, the Python installation and its venv)
and the read-only paths the harness needs (`ro_paths`, e.g. opencode's npm folder). The project
checkout, the task data, other rollouts and the trace files are not in it.

- network: none but one port. The proxy URL's loopback port is carried in through a Unix socket
  (`rollout_dataset.sandbox.HostForwarder`, socat on both ends), so the harness reaches the proxy at
  the very URL it was given and nothing else (no other host service, no internet);
- the environment is inherited (PATH included, to find the agent CLI) without every name that
  looks like a credential or a proxy setting (``*TOKEN*``, ``*KEY*``, ``*SECRET*``, ``*PASSW*``,
  ``*AUTH*``, ``*SESSION*``, ``*PROXY*``, ...), plus the variables above and `env`: the harness gets
  exactly one key, `OPENAI_API_KEY`;
- no CPU or address-space limit (Node.js reserves a huge address range); file size, process count
  and the size of the working directory plus HOME are limited; its own PID namespace means no
  process outlives the run.

The run stops on exit, on the time budget (the sandbox is killed), or when `should_stop()` returns a
reason (the capture uses it to stop at once when the first model call failed). Where the machine
cannot build the allow-list root the harness does not run (`SandboxUnavailableError`) unless
``unsafe=True``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Callable, Iterable, Mapping

from rollout_dataset.processes import CHILD_EXIT, watch_child
from rollout_dataset.sandbox import HostForwarder, Limits, Sandbox
from rollout_dataset.sandbox.forward import inner_wrapper, loopback_port
from rollout_dataset.sandbox.isolation import runtime_paths

__all__ = ["ExternalResult", "run_external_harness", "command_files", "substitute_placeholders", "PLACEHOLDERS", "HARNESS_LIMITS"]

logger = logging.getLogger(__name__)

PLACEHOLDERS = ("base_url", "model", "task_file", "workdir")
_TAIL = 4000

#: the limits of an external harness (``wall_s`` is replaced by the time budget): no CPU or
#: address-space limit (Node.js agents reserve a huge address range; the wall time bounds the run),
#: files up to 1 GiB (logs included), 2 GiB in the working directory and HOME together, 1024
#: processes/threads (runtimes start many threads)
HARNESS_LIMITS = Limits(wall_s=900.0, cpu_s=None, memory_mb=None, file_mb=1024, workdir_mb=2048, tmp_mb=256,
                        processes=1024)
#: the one credential a harness gets
TRUSTED_ENV = ("OPENAI_API_KEY",)
#: inherited variables not passed on (the sandbox's rule for secret-looking names), dropped silently
_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PROXY", re.IGNORECASE)


@dataclass
class ExternalResult:
    """What running an external harness gave.

    Args:
        exit_code: the process's exit code (None when it was killed).
        timed_out: the time budget ran out.
        stop_reason: harness_exit, timeout, or the reason `should_stop` gave.
        stdout_tail: the end of its standard output.
        stderr_tail: the end of its standard error.
        wall_s: how long it ran.
    """

    exit_code: int | None
    timed_out: bool
    stop_reason: str
    stdout_tail: str
    stderr_tail: str
    wall_s: float


def substitute_placeholders(command: str, values: Mapping[str, str]) -> str:
    """Replace `{name}` placeholders with shell-quoted values; other braces are left alone.

    Args:
        command: the command template.
        values: placeholder name -> value.

    Returns:
        The command to run.
    """
    for name, value in values.items():
        command = command.replace("{" + name + "}", shlex.quote(str(value)))
    return command


_INTERPRETER = re.compile(r"^(python[0-9.]*|node|bash|sh|dash|perl|ruby)$")


def command_files(command: str, exclude: Iterable[str | os.PathLike[str]] = ()) -> list[Path]:
    """The program file a harness command runs, to bind read-only into its sandbox.

    A `cmd:` harness such as ``python /opt/agents/agent.py {base_url}`` needs its script, which the
    allow-list root does not hold otherwise. Taken: the command's first word when it is a file given
    by absolute path, and the word right after an interpreter (python, node, bash, sh, perl, ruby)
    when that is one. Nothing else the command names is exposed (a `cat /data/held_out.json` in it
    finds nothing), never a folder (name those with `ro_paths`), never a file already in the root,
    inside `exclude`, or in the package's own task data.

    Args:
        command: the command template.
        exclude: folders or files that must stay out of the root (the capture's masked paths).

    Returns:
        The files, as named (absolute), without duplicates.
    """
    from rollout_dataset.package_paths import TASK_PACKAGE_DIR

    try:
        words = shlex.split(command)
    except ValueError:
        return []
    candidates = words[:1]
    if words and _INTERPRETER.match(os.path.basename(words[0])):
        candidates += [w for w in words[1:] if not w.startswith("-")][:1]
    banned = [TASK_PACKAGE_DIR, *(Path(p).resolve() for p in exclude)]
    in_root = [Path("/usr"), *(dest for _, dest in runtime_paths())]
    found: list[Path] = []
    for word in candidates:
        path = Path(word)
        if not path.is_absolute() or not path.is_file() or any(path == d or d in path.parents for d in in_root):
            continue  # not an absolute file, or already in the root (the interpreter, /usr/bin tools)
        real = path.resolve()
        if any(real == b or b in real.parents for b in banned):
            logger.warning("external harness: not exposing %s to the harness (held-out or task data)", path)
            continue
        if path not in found:
            found.append(path)
    return found


def _disk_check(box: Sandbox, poll_s: float) -> Callable[[], str | None]:
    """A `watch_child` check: ``disk_limit`` once the working directory and HOME outgrow the box's
    limit, measured about once a second (every ``1 / poll_s`` polls)."""
    every = max(1, int(1.0 / poll_s))
    polls = 0

    def check() -> str | None:
        nonlocal polls
        polls += 1
        if polls % every == 0 and box.over_disk_limit():
            logger.warning("external harness: working directory and HOME exceed %d MiB; stopped", box.limits.workdir_mb)
            return "disk_limit"
        return None

    return check


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-_TAIL:].decode("utf-8", errors="replace")


def _spawn(box: Sandbox, argv: list[str], out: IO[bytes], err: IO[bytes]) -> subprocess.Popen:
    """Start `argv` in `box` (allow-list root, rlimits, scrubbed environment), without waiting."""
    wrapped, _, preexec = box.wrap(argv)
    return subprocess.Popen(wrapped, cwd=box.workdir, env=box.environment(), stdin=subprocess.DEVNULL, stdout=out,
                            stderr=err, start_new_session=True, preexec_fn=preexec)


def _harness_env(home: Path, values: Mapping[str, str], api_key: str,
                 extra: Mapping[str, str] | None) -> dict[str, str]:
    """The variables a harness gets on top of the sandbox's scrubbed environment."""
    env = {k: v for k, v in os.environ.items() if not _SECRET_NAME.search(k)}
    env.update({"PATH": os.environ.get("PATH") or os.defpath, "HOME": str(home), "TMPDIR": str(home / "tmp")})
    for name, sub in (("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share"),
                      ("XDG_CACHE_HOME", ".cache"), ("XDG_STATE_HOME", ".local/state")):
        env[name] = str(home / sub)
    for name in ("TMPDIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        Path(env[name]).mkdir(parents=True, exist_ok=True)
    base_url = values["base_url"]
    env.update({
        "OPENAI_BASE_URL": base_url, "OPENAI_API_BASE": base_url, "OPENAI_API_KEY": api_key,
        "ROLLOUT_MODEL": values["model"], "ROLLOUT_TASK_FILE": values["task_file"], "ROLLOUT_WORKDIR": values["workdir"],
    })
    for key, value in (extra or {}).items():
        for name in PLACEHOLDERS:
            value = value.replace("{" + name + "}", values[name])
        env[key] = value
    return env


def run_external_harness(command: str, *, base_url: str, model: str, workdir: str | Path, instruction: str,
                         api_key: str = "EMPTY", timeout_s: float = 900.0, env: Mapping[str, str] | None = None,
                         should_stop: Callable[[], str | None] | None = None, poll_s: float = 0.1,
                         hide_paths: Iterable[str | os.PathLike[str]] = (),
                         ro_paths: Iterable[str | os.PathLike[str]] = (), unsafe: bool = False) -> ExternalResult:
    """Run one external harness command to completion, timeout, or a stop request.

    Args:
        command: the shell command (the part after ``cmd:``), with optional placeholders.
        base_url: the OpenAI base URL the harness must use (the proxy's).
        model: the model name.
        workdir: the working directory the harness runs in and leaves `solution.py` in.
        instruction: the task statement (written to the task file).
        api_key: the key exported as OPENAI_API_KEY.
        timeout_s: wall-time budget.
        env: extra environment variables (values may use the placeholders too).
        should_stop: polled while the harness runs; a returned string stops it with that reason.
        poll_s: polling interval in seconds.
        hide_paths: paths inside the root that must read as empty (the root holds no host file
            outside the runtime anyway).
        ro_paths: host paths the harness needs read-only (its tool folder; see `HarnessPreset.ro_paths`);
            the program file the command runs is added (`command_files`).
        unsafe: run even where the allow-list root cannot be built (host network, host filesystem).

    Returns:
        The harness's result.

    Raises:
        ValueError: empty command or non-positive timeout.
        FileNotFoundError: `workdir` does not exist, or socat (the port forwarder) is missing.
        SandboxUnavailableError: no allow-list root here and not `unsafe`.
    """
    if not command.strip():
        raise ValueError("the external harness command is empty (expected cmd:\"...\")")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    workdir = Path(workdir)
    hide_paths = list(hide_paths)
    with contextlib.ExitStack() as stack:
        home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rollout-harness-"))).resolve()
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rollout-harness-logs-")))
        task_file = home / "task.md"
        task_file.write_text(instruction, encoding="utf-8")
        values = {"base_url": base_url, "model": model, "task_file": str(task_file), "workdir": str(workdir)}
        harness_env = _harness_env(home, values, api_key, env)
        box = stack.enter_context(Sandbox(workdir, limits=replace(HARNESS_LIMITS, wall_s=timeout_s),
                                          hide_paths=hide_paths, env=harness_env, trusted_env=TRUSTED_ENV,
                                          ro_paths=[*ro_paths, *command_files(command, hide_paths)],
                                          rw_paths=[home], unsafe=unsafe))
        argv = ["bash", "-c", substitute_placeholders(command, values)]
        port = loopback_port(base_url)
        if box.mode.allow_list and port is not None:
            forwarder = stack.enter_context(HostForwarder(port))
            box.extra_bwrap_args = forwarder.bind_args()
            argv = inner_wrapper(port) + argv
        out_path, err_path = logs / "stdout.log", logs / "stderr.log"
        start = time.monotonic()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = _spawn(box, argv, out, err)
            checks = [_disk_check(box, poll_s), *([should_stop] if should_stop else [])]
            reason, timed_out = watch_child(proc, start=start, limit_s=timeout_s, checks=checks, poll_s=poll_s,
                                            first_signal=signal.SIGTERM, grace_s=2.0)
        wall = time.monotonic() - start
        exit_code = proc.returncode if reason == CHILD_EXIT else None
        result = ExternalResult(exit_code, timed_out, reason, _tail(out_path), _tail(err_path), wall)
        logger.info("external harness stopped: %s (exit code %s) after %.1f s", reason, exit_code, wall)
        return result
