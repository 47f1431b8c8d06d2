"""The optional `audit` config as the dataset card declares it: its name, its data files and its card section.

`rollout-dataset audit DATASET` adds this config (``data/audit/*.parquet``, one row per audited rollout)
with a YAML `configs` entry and a ``## Logprob audit`` section. Every later rendering of the card (a
build or append into the folder, a compaction) must keep both, or `load_dataset(DATASET, "audit")`
fails while the shards stay. This module is the one definition both sides use: `rollout_dataset.audit.writers` adds the entry and
section, the builder's `render_card` keeps them (`kept_audit` reads what a dataset folder holds). It
imports nothing of the audit package, so data still flows builder -> audit.

When the dataset no longer has as many rollouts as the audit has rows (a build added rollouts), the
kept section opens with a note saying how many rollouts the audit covers; a new audit drops the note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pyarrow.parquet as pq

from rollout_dataset.errors import ArtifactError

__all__ = ["AUDIT_CONFIG", "AUDIT_DATA_FILES", "AUDIT_HEADING", "KeptAudit", "audit_config_entry", "audit_section",
           "audit_rows", "kept_audit", "coverage_note", "kept_section"]

#: the config's name (``load_dataset(DATASET, "audit")``)
AUDIT_CONFIG = "audit"
#: its data files, relative to the dataset folder
AUDIT_DATA_FILES = f"data/{AUDIT_CONFIG}/*.parquet"
#: the heading that opens the card's audit section
AUDIT_HEADING = "## Logprob audit"

# the audit section is always appended last: only a heading that no other `## ` heading follows to the
# end of the card counts (a heading injected earlier in the card, e.g. through a rollout's model name,
# is not the section)
_SECTION = re.compile(r"(?:\A|\n)" + re.escape(AUDIT_HEADING) + r"(?:\n(?!## )[^\n]*)*\Z")
_NOTE_PREFIX = "> This audit covers the "
_NOTE = re.compile(r"^" + re.escape(_NOTE_PREFIX) + r".*\n\n?", re.M)


@dataclass(frozen=True)
class KeptAudit:
    """An audit a dataset folder holds: what a re-rendered card keeps.

    Attributes:
        section: the card's audit section (heading included, no coverage note), or None when the
            card has none (the config entry is kept all the same: its rows are there).
        rollouts: rows of the `audit` config (one per audited rollout).
    """

    section: str | None
    rollouts: int


def audit_config_entry() -> dict[str, Any]:
    """The `audit` config's entry in the card's YAML `configs` list.

    Returns:
        ``{"config_name": "audit", "data_files": [{"split": "train", "path": "data/audit/*.parquet"}]}``.
    """
    return {"config_name": AUDIT_CONFIG, "data_files": [{"split": "train", "path": AUDIT_DATA_FILES}]}


def audit_section(body: str) -> tuple[str, str | None]:
    """Split a card body into the text without its audit section and the section (coverage note removed).

    Args:
        body: a card's text (with or without its YAML header).

    Returns:
        ``(rest, section)``: ``section`` starts at the heading and ends with one newline; None when
        the card does not end with an audit section (the section is always the card's last).
    """
    match = _SECTION.search(body)
    if not match:
        return body, None
    section = _NOTE.sub("", match.group(0).lstrip("\n")).rstrip("\n") + "\n"
    return body[:match.start()] + body[match.end():], section


def coverage_note(audited: int, n_rollouts: int) -> str:
    """The line that opens a kept audit section whose rows no longer match the dataset's rollouts.

    Args:
        audited: rollouts the audit ran on (rows of the `audit` config).
        n_rollouts: rollouts the dataset holds now.

    Returns:
        The note (a markdown quote and a blank line), or "" when the counts agree.
    """
    if audited == n_rollouts:
        return ""
    plural = "rollout" if audited == 1 else "rollouts"
    return (f"{_NOTE_PREFIX}{audited} {plural} it was run on (the figures below and the rows of the `audit` "
            f"config); the dataset now holds {n_rollouts}. Run `rollout-dataset audit` on the dataset again to "
            f"audit them all.\n\n")


def kept_section(audit: KeptAudit, n_rollouts: int) -> str:
    """The audit section a re-rendered card ends with: the kept one, opened by the coverage note if due.

    Args:
        audit: from `kept_audit`.
        n_rollouts: rollouts the dataset holds now.

    Returns:
        The section's markdown ("" when the card had none).
    """
    if audit.section is None:
        return ""
    head, _, rest = audit.section.partition("\n")
    return f"{head}\n\n{coverage_note(audit.rollouts, n_rollouts)}{rest.lstrip(chr(10))}"


def kept_audit(dataset_dir: str | Path) -> KeptAudit | None:
    """The audit a dataset folder holds, for a card rendered over it.

    Args:
        dataset_dir: the dataset folder (its ``README.md`` and ``data/audit/``).

    Returns:
        The audit to keep, or None when the folder has no ``data/audit/*.parquet`` (a section left in
        an old card without its rows is not kept).

    Raises:
        ArtifactError: an audit shard is not readable parquet (named).
    """
    folder = Path(dataset_dir)
    shards = sorted(folder.glob(AUDIT_DATA_FILES))
    if not shards:
        return None
    readme = folder / "README.md"
    section = audit_section(readme.read_text(encoding="utf-8"))[1] if readme.is_file() else None
    return KeptAudit(section, audit_rows(shards))


def audit_rows(shards: Iterable[str | Path]) -> int:
    """Rows of the `audit` config's shards (one per audited rollout), read from their parquet footers.

    Args:
        shards: the shard files (local paths).

    Returns:
        The row count.

    Raises:
        ArtifactError: a shard is not readable parquet (named).
    """
    rows = 0
    for shard in shards:
        try:
            rows += pq.ParquetFile(shard).metadata.num_rows
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise ArtifactError(f"{shard}: not readable parquet ({exc}); re-run `rollout-dataset audit`") from exc
    return rows
