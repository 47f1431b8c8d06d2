"""The README fits in a sitting, and README, docs and the dataset card describe the project as it is:
no history (that goes in CHANGELOG.md), no broken links between the docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").glob("*.md"))
CURRENT = [REPO / "README.md", REPO / "dataset_card.md", *DOCS]

# docs that other branches add (linked from the README's map already); empty this set once they exist
PENDING: set[str] = set()

# words that date a text: a change log's, not a description's
HISTORY = re.compile(r"previous main|this stop|the stop before|before this change|after this change|"
                     r"shared with other engineers|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def test_the_readme_fits_in_one_sitting():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines (at most 300): move detail to docs/"


@pytest.mark.parametrize("path", CURRENT, ids=lambda p: str(p.relative_to(REPO)))
def test_readme_docs_and_card_hold_no_history(path):
    found = [f"{path.name}:{n}: {m.group(0)!r}" for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             for m in [HISTORY.search(line)] if m]
    assert not found, f"history belongs in CHANGELOG.md: {found}"


def test_the_readme_maps_every_doc():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert all(f"docs/{d.name}" in readme for d in DOCS), [d.name for d in DOCS if f"docs/{d.name}" not in readme]


def test_every_relative_link_between_the_docs_resolves():
    broken = []
    for path in [REPO / "README.md", REPO / "CHANGELOG.md", *DOCS]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)", path.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://")) or Path(target).name in PENDING:
                continue
            if not (path.parent / target).exists():
                broken.append(f"{path.name} -> {target}")
    assert not broken, broken
