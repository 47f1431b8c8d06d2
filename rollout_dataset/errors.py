"""Every exception the library raises on purpose.

Each class also inherits the built-in exception it resembles, so callers can catch either the
specific class or the familiar built-in (`except ValueError` still works for bad input).
Messages name what the user can act on: the file, the field, the URL, the status, the valid range.
"""

from __future__ import annotations

__all__ = [
    "RolloutDatasetError",
    "UpstreamError",
    "UpstreamStatusError",
    "TaskIndexError",
    "TaskSourceError",
    "SandboxLimitError",
    "SandboxUnavailableError",
    "SchemaValidationError",
    "LeakageError",
    "ArtifactError",
    "PublishError",
    "GuardrailError",
    "ConfigError",
    "TraceIntegrityError",
    "RecordWriteError",
    "SessionApiError",
    "InflightLimitError",
    "DatasetDirError",
    "TokenizerMismatchError",
    "DistributedBuildError",
    "ToolNotInstalledError",
]


class RolloutDatasetError(Exception):
    """Base class of every error this package raises on purpose."""


class UpstreamError(RolloutDatasetError, ConnectionError):
    """The model server could not be reached or dropped the connection."""


class UpstreamStatusError(UpstreamError):
    """The model server answered with an HTTP error status (4xx/5xx).

    Args:
        status: the HTTP status code.
        url: the URL that answered.
        body: the beginning of the response body, for the message.
    """

    def __init__(self, status: int, url: str, body: str = "") -> None:
        self.status = status
        self.url = url
        self.body = body
        detail = f": {body[:300]}" if body else ""
        super().__init__(f"model server answered HTTP {status} for {url}{detail}")


class TaskIndexError(RolloutDatasetError, IndexError):
    """A task index outside the task set."""


class TaskSourceError(RolloutDatasetError, ValueError):
    """A task file or dataset could not be read or lacks a required column."""


class SandboxLimitError(RolloutDatasetError, RuntimeError):
    """Code run in the sandbox hit a wall-time, CPU, memory or output limit."""


class SandboxUnavailableError(RolloutDatasetError, RuntimeError):
    """The allow-list sandbox cannot be built on this machine and no explicit opt-out was given."""


class SchemaValidationError(RolloutDatasetError, ValueError):
    """A document does not match its JSON Schema or fails a semantic check.

    Args:
        failures: `(file, json_path, reason)` triples, one per failure.
    """

    def __init__(self, failures: list[tuple[str, str, str]]) -> None:
        self.failures = list(failures)
        lines = [f"{f}: {p}: {r}" for f, p, r in self.failures]
        super().__init__("\n".join(lines) if lines else "validation failed")

    # picklable (a build part in another process raises it)
    def __reduce__(self) -> tuple[type[SchemaValidationError], tuple[list[tuple[str, str, str]]]]:
        return type(self), (self.failures,)


class LeakageError(RolloutDatasetError, RuntimeError):
    """Held-out test text reached something the agent could read."""


class ArtifactError(RolloutDatasetError, FileNotFoundError):
    """An artifact folder lacks a file or holds one that cannot be read."""


class PublishError(RolloutDatasetError, RuntimeError):
    """Pushing to the Hub failed (the message never contains the token)."""


class GuardrailError(RolloutDatasetError, RuntimeError):
    """A batch or capture guardrail tripped (no agent turns, first call failed, ...)."""


class ConfigError(RolloutDatasetError, ValueError):
    """A configuration file, block or flag is invalid (the message names the file, key and valid values)."""


class TraceIntegrityError(RolloutDatasetError, ValueError):
    """A trace's hash chain or seal is broken: records were cut, removed, reordered or edited.

    Args:
        file: the trace file (``<session>.jsonl`` or an artifact's ``trace.json``).
        index: the position of the first record that does not fit (0-based, file order).
        reason: what does not fit.
    """

    def __init__(self, file: str, index: int, reason: str) -> None:
        self.file = file
        self.index = index
        self.reason = reason
        super().__init__(f"{file}: record {index}: {reason}")


class SessionApiError(RolloutDatasetError, RuntimeError):
    """The proxy's session API refused a request or could not be reached (`rollout_dataset.session_client`).

    Args:
        status: the HTTP status (0 when the proxy could not be reached).
        code: the API's error code (``unknown_session``, ``session_sealed``, ...; ``unreachable``).
        message: the API's sentence, or the connection failure.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status = status
        self.code = code
        super().__init__(f"session API: {f'HTTP {status} ' if status else ''}{code}: {message}")


class RecordWriteError(RolloutDatasetError, OSError):
    """The proxy could not make a call's trace record durable (disk full, too many open files, I/O error).

    Args:
        path: the trace file.
        cause: the underlying OS error.
    """

    def __init__(self, path: str, cause: OSError) -> None:
        self.path = path
        self.cause = cause
        super().__init__(cause.errno, f"could not write the trace record to {path}: {cause.strerror or cause}")


class InflightLimitError(RolloutDatasetError, MemoryError):
    """The proxy's in-flight byte limit (``--max-inflight-mb``) refused more bytes for a call; the
    message names how many it holds, how many more were asked for, and the limit."""


class DatasetDirError(RolloutDatasetError, FileExistsError):
    """A dataset output folder cannot be used: it holds something other than a dataset built by this
    tool, is a file or a symlink, or another build is writing to it (the message names what was found)."""


class TokenizerMismatchError(RolloutDatasetError, ValueError):
    """Rollouts captured with different tokenizers were put into one dataset (the message names both)."""


class DistributedBuildError(RolloutDatasetError, RuntimeError):
    """A part of a Ray build failed on its worker, or its task died (the message names the part, its
    folders and the node); the dataset folder is left as it was."""


class ToolNotInstalledError(RolloutDatasetError, FileNotFoundError):
    """A harness or system tool a run needs is not installed (the message names it and the command that
    installs it, e.g. ``make npm-tools``); raised before anything starts.

    Args:
        tool: the missing program (``opencode``, ``bwrap``, ...).
        install: the command that installs it, or (with `is_command` False) what to do instead.
        needed_for: what needs it (``--harness opencode``, ``the sandbox``, ...).
        is_command: `install` is a command to run (shown as ``run `...` ``).
    """

    def __init__(self, tool: str, install: str, needed_for: str, is_command: bool = True) -> None:
        self.tool = tool
        self.install = install
        self.needed_for = needed_for
        self.is_command = is_command
        remedy = f"run `{install}`" if is_command else install
        super().__init__(f"{needed_for} needs {tool}, which is not installed: {remedy}")

    def __str__(self) -> str:  # the message alone, not OSError's "[Errno ...]" form
        return str(self.args[0])

    # picklable (raised in a batch worker process)
    def __reduce__(self) -> tuple[type[ToolNotInstalledError], tuple[str, str, str, bool]]:
        return type(self), (self.tool, self.install, self.needed_for, self.is_command)


class ScorerError(RolloutDatasetError, RuntimeError):
    """The logprob audit's scorer could not score (server unreachable or refusing, model not loadable)."""
