"""Fenced code blocks of a markdown file (README, docs, a dataset card), and what each needs.

A block runs alone, as written. One that cannot says so in the line right above its fence, either
as ``<!-- example: fragment -->`` / ``<!-- example: shell, REASON -->`` (docs only: a piece of a
larger program, compiled; commands for a terminal, parsed) or as a visible line
``*Needs: WHAT.*``, where WHAT names each need in words `NEEDS` knows (the tests provide exactly
those, and refuse a line that names none).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Block", "NEEDS", "code_blocks", "contracts_source"]

_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"^<!--\s*example:\s*(fragment|shell)\b[^>]*-->\s*$")
_NEEDS_LINE = re.compile(r"^\*Needs: (.+)\.\*\s*$")
#: need -> how the line names it
NEEDS = {
    "helpers": "the helpers' source",  # the contracts' source is run first
    "trl": "`trl`",  # runs in a trainer's venv (the opt-in `trl` tier)
    "dataset": "a dataset at `path/to/DATASET_DIR`",  # that path leads to a built dataset
    "cli": "the `rollout-dataset` command",  # on PATH
    "server": "`OPENAI_BASE_URL`",  # a local backend's URL
    "hub": "`HF_TOKEN`",  # a loopback stand-in of the Hub (HF_ENDPOINT + HF_TOKEN)
    "model": "`MODEL`",  # a model folder (trl tier)
    "above": "the block above",  # runs in the previous block's folder, after it
}


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its marker and needs, its code."""

    path: Path
    line: int
    language: str
    code: str
    marker: str | None = None
    needs: frozenset[str] = field(default_factory=frozenset)
    needs_line: str | None = None


def code_blocks(path: Path, text: str | None = None) -> list[Block]:
    """Every fenced block of a markdown file (or of `text`), with the marker or needs line above it."""
    lines = (path.read_text(encoding="utf-8") if text is None else text).splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        start, language = i, fence.group(1)
        above = lines[i - 1] if i else ""
        marker = _MARKER.match(above)
        needs_line = _NEEDS_LINE.match(above)
        i += 1
        body = []
        while i < len(lines) and lines[i] != "```":
            body.append(lines[i])
            i += 1
        needs = frozenset(k for k, words in NEEDS.items() if needs_line and words in needs_line.group(1))
        blocks.append(Block(path, start + 1, language, "\n".join(body) + "\n", marker.group(1) if marker else None,
                            needs, needs_line.group(1) if needs_line else None))
        i += 1
    return blocks


def contracts_source() -> str:
    """The helpers a block that needs them gets first (what the card pastes)."""
    from rollout_dataset.builder.card import contracts_source as source

    return source() + "\n"
