"""The batch's report.md shows a task id and a model name as text: no Markdown, HTML or extra table cells."""

from __future__ import annotations

import json
from pathlib import Path

from markdown_it import MarkdownIt

from rollout_dataset.batch.report import render_report

GOLDEN = Path(__file__).parent / "data" / "golden" / "batch_smoke" / "summary"
HOSTILE = "<img src=x onerror=alert(1)> | *bold* [link](http://x) `tick` & $x$\n# heading"
SHOWN = " ".join(HOSTILE.splitlines())  # what a reader must see: the name, on one line


def _parsed_report(tmp_path: Path) -> list:
    summary = json.loads((GOLDEN / "summary.json").read_text())
    by_seed = json.loads((GOLDEN / "stats_by_seed.json").read_text())
    snapshot = json.loads((GOLDEN / "config_snapshot.json").read_text())
    summary["model"] = HOSTILE
    for seeds in by_seed["strategies"].values():
        for seed in seeds:
            seed["task_id"] = HOSTILE
    text = render_report(summary=summary, stats_by_seed=by_seed, snapshot=snapshot, plots={}, out_dir=tmp_path)
    return MarkdownIt("commonmark", {"html": True}).enable("table").parse(text)


def _plain(inline) -> tuple[set[str], str]:
    """The kinds of an inline token's children, and the text they show."""
    return {c.type for c in inline.children}, "".join(c.content for c in inline.children if c.type == "text")


def test_a_hostile_task_id_is_one_table_cell_showing_its_text(tmp_path):
    tokens = _parsed_report(tmp_path)
    task_cells = [_plain(tokens[i + 1]) for i, t in enumerate(tokens)
                  if t.type == "td_open" and "heading" in tokens[i + 1].content]
    seeds = sum(len(s) for s in json.loads((GOLDEN / "stats_by_seed.json").read_text())["strategies"].values())
    assert task_cells == [({"text"}, SHOWN)] * seeds


def test_a_hostile_model_name_shows_as_text_and_the_report_holds_no_html_or_injected_heading(tmp_path):
    tokens = _parsed_report(tmp_path)
    model_line = next(t for t in tokens if t.type == "inline" and t.content.startswith("**Model:**"))
    children = [c for c in model_line.children if c.type != "text" or c.content]  # markdown-it's empty text pieces
    assert [c.type for c in children][:3] == ["strong_open", "text", "strong_close"]
    assert {c.type for c in children[3:]} == {"text"}
    assert "".join(c.content for c in children[3:]).strip() == SHOWN
    assert not {t.type for t in tokens} & {"html_block", "html_inline"}
    assert not any(c.type == "html_inline" for t in tokens for c in t.children or [])
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert not [h for h in headings if "heading" in h]
