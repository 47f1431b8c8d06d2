"""Held-out leakage scan: did held-out test text reach anything the agent could read?

After each capture, every recorded request (every string in it, JSON-encoded tool arguments
decoded too) and every file the agent left in its working directory are searched for the input
and the expected output of each held-out test.

What counts as a hit: the held-out text (trailing whitespace of each line and surrounding blank
space dropped, on both sides of the comparison) is at least
`ROLLOUT_LEAK_MIN_CHARS` characters long, does NOT occur in the statement the agent was given (text the
agent legitimately saw cannot leak), and occurs verbatim in a request or a working file. Shorter
texts (``"1"``, ``"YES"``, ``"100"``) occur in any program by chance and say nothing; they are
skipped. (The task set's own rule for statements, `rollout_dataset.tasks`, is stricter, 3
characters: statements are written by us; agent code and tool output are not.)
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

__all__ = ["LeakHit", "ROLLOUT_LEAK_MIN_CHARS", "leak_candidates", "scan_for_leaks", "strings_in"]

logger = logging.getLogger(__name__)

#: held-out texts shorter than this (after stripping) are not searched for.
ROLLOUT_LEAK_MIN_CHARS = 6
_MAX_FILE_BYTES = 2_000_000


@dataclass(frozen=True)
class LeakHit:
    """One place held-out text was found.

    Args:
        test_index: the held-out test's index.
        field: ``"input"`` or ``"output"``.
        where: ``"request[<call index>]"`` or ``"workdir:<relative path>"``.
    """

    test_index: int
    field: str
    where: str

    def to_dict(self) -> dict[str, Any]:
        """The hit as summary.json stores it.

        Returns:
            ``{"test_index", "field", "where"}``.
        """
        return {"test_index": self.test_index, "field": self.field, "where": self.where}


def strings_in(value: Any, _depth: int = 0) -> Iterator[str]:
    """Every string inside a JSON value; strings that hold JSON are decoded and walked too.

    Args:
        value: a parsed JSON value.

    Yields:
        Each string leaf (and the leaves of embedded JSON, e.g. tool-call arguments).
    """
    if isinstance(value, str):
        yield value
        text = value.strip()
        if _depth < 3 and len(text) >= 2 and text[0] in "{[" and text[-1] in "}]":
            try:
                inner = json.loads(text)
            except ValueError:
                return
            yield from strings_in(inner, _depth + 1)
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item, _depth)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item, _depth)


def _norm(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").split("\n")).strip()


def leak_candidates(statement: str, held_out: Sequence[Any]) -> list[tuple[int, str, str]]:
    """The held-out texts worth searching for.

    Args:
        statement: the statement the agent was given.
        held_out: test cases with ``input`` and ``output`` (attributes or keys).

    Returns:
        ``(test_index, field, text)`` triples.
    """
    out = []
    for i, test in enumerate(held_out):
        for field in ("input", "output"):
            raw = test[field] if isinstance(test, dict) else getattr(test, field)
            text = _norm(raw or "")
            if len(text) >= ROLLOUT_LEAK_MIN_CHARS and text not in _norm(statement):
                out.append((i, field, text))
    return out


def _iter_files(workdir: Path) -> Iterator[Path]:
    for path in sorted(workdir.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path


def scan_for_leaks(statement: str, held_out: Sequence[Any], records: Iterable[dict[str, Any]],
                   workdir: str | Path | None) -> list[LeakHit]:
    """Search recorded requests and the agent's working files for held-out test text.

    Args:
        statement: the statement the agent was given (text found there is not a leak).
        held_out: the held-out test cases.
        records: the trace records of the rollout.
        workdir: the agent's working directory (None: skip files).

    Returns:
        Every hit, requests first (in call order), then files; empty when clean.
    """
    candidates = leak_candidates(statement, held_out)
    if not candidates:
        return []
    hits: list[LeakHit] = []

    def search(texts: Iterable[str], where: str) -> None:
        found: set[tuple[int, str]] = set()
        for text in texts:
            text = _norm(text) if ("\r" in text or " \n" in text or "\t\n" in text) else text
            for i, field, needle in candidates:
                if (i, field) not in found and needle in text:
                    found.add((i, field))
                    hits.append(LeakHit(i, field, where))

    for record in records:
        search(strings_in(record.get("request")), f"request[{record.get('index')}]")
    if workdir is not None and Path(workdir).is_dir():
        root = Path(workdir)
        for path in _iter_files(root):
            try:
                if path.stat().st_size > _MAX_FILE_BYTES:
                    continue
                data = path.read_bytes().decode("utf-8", errors="replace")
            except OSError:
                continue
            search([data], f"workdir:{path.relative_to(root).as_posix()}")
    if hits:
        logger.warning("held-out leakage: %d hit(s), first at %s", len(hits), hits[0].where)
    return hits
