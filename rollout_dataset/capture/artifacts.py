"""Write the artifact folder of one rollout, with every secret redacted before it reaches disk.

Files (see docs/architecture.md): trace.json, rollout.json, turns.json, task.json,
visible_tests.txt, held_out_tests.json, summary.json, samples.md. Each is written to a temporary
name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
from pathlib import Path
from typing import Any, Iterable, Mapping

from rollout_dataset.artifact_files import TRACE_FILE
from rollout_dataset.capture.secrets import redact_text
from rollout_dataset.files import write_text_atomic  # the one atomic write (re-exported here)
from rollout_dataset.trace_integrity import reseal

__all__ = ["write_artifacts", "write_text_atomic"]

logger = logging.getLogger(__name__)



def utc_now() -> str:
    """The current UTC time as ISO 8601 with a ``Z`` suffix, to the second (the one definition).

    Returns:
        e.g. ``"2026-01-02T03:04:05Z"``.
    """
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def write_artifacts(out_dir: str | Path, files: Mapping[str, Any], secrets: Iterable[str]) -> int:
    """Write artifact files, redacting secrets.

    Args:
        out_dir: the artifact folder (created if missing).
        files: file name -> a JSON-ready document (``.json`` names) or text (a ``str``: written as given).
        secrets: values to redact (see `collect_secrets`).

    Returns:
        How many secret occurrences were redacted (0 in a healthy capture).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    secrets = list(secrets)
    redacted = 0
    for name, content in files.items():
        if name.endswith(".json") and not isinstance(content, str):
            text = json.dumps(content, indent=1, ensure_ascii=False) + "\n"
        else:
            text = content if isinstance(content, str) else str(content)
        text, n = redact_text(text, secrets)
        if n and name == TRACE_FILE:
            # The records were checked against the proxy's seal before; the redacted copy is sealed anew.
            text = json.dumps(reseal(json.loads(text)), indent=1, ensure_ascii=False) + "\n"
        if n:
            logger.warning("redacted %d secret occurrence(s) from %s", n, name)
            redacted += n
        write_text_atomic(out / name, text)
    return redacted
