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

Placeholders are substituted shell-quoted. HOME and the XDG directories point into a fresh
temporary folder so a harness reads no user config. Inherited environment variables whose names
look like credentials (`*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*API_KEY*`) are dropped: the harness
gets exactly one key, `OPENAI_API_KEY`. The run stops on exit, on the time budget
(process group: SIGTERM, then SIGKILL), or when `should_stop()` returns a reason (the capture
uses it to stop at once when the first model call failed).

External harnesses run as ordinary processes: they need the loopback network to reach the proxy,
so they are not in the sandbox's network namespace. Only the verifier runs their code sandboxed.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

__all__ = ["ExternalResult", "run_external_harness", "substitute_placeholders", "PLACEHOLDERS"]

logger = logging.getLogger(__name__)

PLACEHOLDERS = ("base_url", "model", "task_file", "workdir")
_TAIL = 4000


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


def _kill_group(proc: subprocess.Popen, grace_s: float = 2.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-_TAIL:].decode("utf-8", errors="replace")


def run_external_harness(command: str, *, base_url: str, model: str, workdir: str | Path, instruction: str,
                         api_key: str = "EMPTY", timeout_s: float = 900.0, env: Mapping[str, str] | None = None,
                         should_stop: Callable[[], str | None] | None = None,
                         poll_s: float = 0.1) -> ExternalResult:
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

    Returns:
        The harness's result.

    Raises:
        ValueError: empty command or non-positive timeout.
    """
    if not command.strip():
        raise ValueError("the external harness command is empty (expected cmd:\"...\")")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    workdir = Path(workdir)
    with tempfile.TemporaryDirectory(prefix="rollout-harness-") as home_dir:
        home = Path(home_dir)
        task_file = home / "task.md"
        task_file.write_text(instruction, encoding="utf-8")
        values = {"base_url": base_url, "model": model, "task_file": str(task_file), "workdir": str(workdir)}
        full_env = {k: v for k, v in os.environ.items()
                    if not any(s in k.upper() for s in ("TOKEN", "SECRET", "PASSWORD", "API_KEY"))}
        xdg = {name: home / sub for name, sub in (("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share"),
                                                   ("XDG_CACHE_HOME", ".cache"), ("XDG_STATE_HOME", ".local/state"))}
        for path in xdg.values():
            path.mkdir(parents=True, exist_ok=True)
        full_env.update({name: str(path) for name, path in xdg.items()})
        full_env.update({
            "HOME": str(home), "OPENAI_BASE_URL": base_url, "OPENAI_API_BASE": base_url, "OPENAI_API_KEY": api_key,
            "ROLLOUT_MODEL": model, "ROLLOUT_TASK_FILE": str(task_file), "ROLLOUT_WORKDIR": str(workdir),
        })
        for key, value in (env or {}).items():
            full_env[key] = value.replace("{base_url}", base_url).replace("{model}", model) \
                .replace("{task_file}", str(task_file)).replace("{workdir}", str(workdir))
        cmd = substitute_placeholders(command, values)
        out_path, err_path = home / "stdout.log", home / "stderr.log"
        start = time.monotonic()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(["bash", "-c", cmd], cwd=workdir, env=full_env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, start_new_session=True)
            reason = "harness_exit"
            timed_out = False
            try:
                while proc.poll() is None:
                    if time.monotonic() - start >= timeout_s:
                        timed_out, reason = True, "timeout"
                        break
                    stop = should_stop() if should_stop else None
                    if stop:
                        reason = stop
                        break
                    time.sleep(poll_s)
            finally:
                if proc.poll() is None:
                    _kill_group(proc)
        wall = time.monotonic() - start
        exit_code = proc.returncode if reason == "harness_exit" else None
        result = ExternalResult(exit_code, timed_out, reason, _tail(out_path), _tail(err_path), wall)
        logger.info("external harness stopped: %s (exit code %s) after %.1f s", reason, exit_code, wall)
        return result
