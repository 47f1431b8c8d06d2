"""`--keep-workdir`: copy the agent's final working directory into the artifacts, safely.

The working directory is written by untrusted code (the harness and the agent's commands), so
the copy trusts nothing in it:

- only regular files and folders are copied, each file up to `MAX_FILE_BYTES` and all together up
  to `MAX_TOTAL_BYTES` (a harness can fill its workdir); a symlink is never followed (it could point at any
  host file) and neither is a FIFO, socket or device: each is listed as skipped with its reason;
- files are opened with ``O_NOFOLLOW`` (a file swapped for a link after the walk is skipped too);
- every copied file has the known secrets (the real upstream key, the harness's dummy key, URL
  credentials, credential-named environment values) redacted, as the other artifacts do.

What was copied, skipped and redacted is written to ``workdir_copy.json`` next to ``workdir/``.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from rollout_dataset.capture.secrets import REDACTED, redact_text

__all__ = ["WORKDIR_FOLDER", "WORKDIR_MANIFEST", "WorkdirCopy", "copy_workdir"]

logger = logging.getLogger(__name__)

#: the copied working directory, inside the artifact folder
WORKDIR_FOLDER = "workdir"
#: what the copy did, inside the artifact folder
WORKDIR_MANIFEST = "workdir_copy.json"
#: files larger than this are not copied (each is read whole to redact it)
MAX_FILE_BYTES = 16 * 1024 * 1024
#: the copy stops taking files past this many bytes in total
MAX_TOTAL_BYTES = 128 * 1024 * 1024


@dataclass
class WorkdirCopy:
    """What `copy_workdir` did.

    Args:
        copied: relative paths of the files copied.
        skipped: ``{"path", "reason"}`` for every entry not copied (symlink, not a regular file,
            too large, unreadable).
        redacted: how many secret occurrences were replaced in the copied files.
    """

    copied: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    redacted: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The manifest document (``workdir_copy.json``)."""
        return {"schema_version": 1, "copied": self.copied, "skipped": self.skipped, "redacted": self.redacted}


def _redact_bytes(data: bytes, secrets: list[str]) -> tuple[bytes, int]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:  # binary: the secrets' bytes only
        count = 0
        for secret in secrets:
            form = secret.encode("utf-8")
            if form and form in data:
                count += data.count(form)
                data = data.replace(form, REDACTED.encode())
        return data, count
    clean, count = redact_text(text, secrets)
    return (clean.encode("utf-8"), count) if count else (data, 0)


def _clean_path(rel: Path, secrets: list[str]) -> Path:
    """The relative path with secrets redacted from its names (a file may be named after a key)."""
    return Path(*[redact_text(part, secrets)[0] for part in rel.parts]) if rel.parts else rel


def _read_regular(path: Path, budget: int) -> bytes | str:
    """The file's bytes, or the reason it is not copied (a link swapped in after the walk, too large, ...)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        return "symlink" if os.path.islink(path) else f"unreadable: {exc.strerror}"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        if info.st_size > MAX_FILE_BYTES:
            return f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB ({info.st_size} bytes)"
        if info.st_size > budget:
            return f"the copy's total budget of {MAX_TOTAL_BYTES // (1024 * 1024)} MiB is used up"
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            return handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    finally:
        if fd >= 0:
            os.close(fd)


def copy_workdir(source: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                 secrets: Iterable[str]) -> WorkdirCopy:
    """Copy the regular files of `source` to ``out_dir/workdir``, secrets redacted, links skipped.

    Args:
        source: the agent's working directory.
        out_dir: the artifact folder (``workdir/`` and ``workdir_copy.json`` are written there).
        secrets: values to redact (see `rollout_dataset.capture.collect_secrets`).

    Returns:
        What was copied, skipped and redacted (also written to ``workdir_copy.json``).
    """
    source = Path(source)
    target = Path(out_dir) / WORKDIR_FOLDER
    secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
    result = WorkdirCopy()
    budget = MAX_TOTAL_BYTES
    target.mkdir(parents=True, exist_ok=True)
    pending = [Path()]
    while pending:
        rel_dir = pending.pop()
        try:
            entries = sorted(os.scandir(source / rel_dir), key=lambda e: e.name)
        except OSError as exc:
            result.skipped.append({"path": str(rel_dir), "reason": f"unreadable: {exc.strerror}"})
            continue
        for entry in entries:
            rel = rel_dir / entry.name
            if entry.is_symlink():
                result.skipped.append({"path": str(rel), "reason": "symlink"})
            elif entry.is_dir(follow_symlinks=False):
                (target / _clean_path(rel, secrets)).mkdir(parents=True, exist_ok=True)
                pending.append(rel)
            elif not entry.is_file(follow_symlinks=False):
                result.skipped.append({"path": str(rel), "reason": "not a regular file"})
            else:
                data = _read_regular(source / rel, budget)
                if isinstance(data, str):
                    result.skipped.append({"path": str(rel), "reason": data})
                    continue
                budget -= len(data)
                data, count = _redact_bytes(data, secrets)
                if count:
                    logger.warning("keep-workdir: redacted %d secret occurrence(s) from %s", count, rel)
                    result.redacted += count
                clean = _clean_path(rel, secrets)
                (target / clean).write_bytes(data)
                result.copied.append(str(clean))
    result.copied.sort()
    for item in result.skipped:
        item["path"] = str(_clean_path(Path(item["path"]), secrets))
    if result.skipped:
        logger.warning("keep-workdir: %d entr%s not copied (symlinks are never followed): %s", len(result.skipped),
                       "y" if len(result.skipped) == 1 else "ies",
                       ", ".join(f"{s['path']} ({s['reason']})" for s in result.skipped[:5]))
    (Path(out_dir) / WORKDIR_MANIFEST).write_text(json.dumps(result.to_dict(), indent=1) + "\n", encoding="utf-8")
    return result
