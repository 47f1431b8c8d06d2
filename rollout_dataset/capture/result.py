"""What a capture of any environment produced (`CaptureResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CaptureResult"]


@dataclass
class CaptureResult:
    """What a capture produced.

    Args:
        out_dir: the artifact folder.
        rollout_id: the rollout's id.
        summary: the summary.json document.
        errors: the capture's errors (leakage, validation, harness); empty when clean.
        validation_failures: `(file, json_path, reason)` triples from validating the artifacts.
        decisions: the built-in harness's per-turn record (tools used, solution changed or run,
            examples passed); empty for external harnesses.
    """

    out_dir: Path
    rollout_id: str
    summary: dict[str, Any]
    errors: list[dict[str, str]] = field(default_factory=list)
    validation_failures: list[tuple[str, str, str]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the capture has no error and its artifacts validate."""
        return not self.errors and not self.validation_failures

    @property
    def exit_code(self) -> int:
        """0 when `ok`, else 1 (what the CLI exits with)."""
        return 0 if self.ok else 1
