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
    "SchemaValidationError",
    "LeakageError",
    "ArtifactError",
    "PublishError",
    "GuardrailError",
    "ConfigError",
    "TokenizerMismatchError",
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


class SchemaValidationError(RolloutDatasetError, ValueError):
    """A document does not match its JSON Schema or fails a semantic check.

    Args:
        failures: `(file, json_path, reason)` triples, one per failure.
    """

    def __init__(self, failures: list[tuple[str, str, str]]) -> None:
        self.failures = list(failures)
        lines = [f"{f}: {p}: {r}" for f, p, r in self.failures]
        super().__init__("\n".join(lines) if lines else "validation failed")


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


class TokenizerMismatchError(RolloutDatasetError, ValueError):
    """Rollouts captured with different tokenizers were put into one dataset (the message names both)."""
