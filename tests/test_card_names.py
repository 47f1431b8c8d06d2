"""Rollout-derived names in the dataset card: a model, task, harness or folder name holding a backtick,
a ``|``, a line break or HTML stays one piece of text in its code span or table cell.

The card's Markdown is parsed with markdown-it-py (CommonMark, GFM tables, HTML allowed: as the Hub
renders a card), so each test checks the structure a reader sees, not the card's bytes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import pytest
from markdown_it import MarkdownIt

from rollout_dataset.builder import build
from rollout_dataset.builder.card import code_span, markdown_text, one_line, read_card_metadata, table_cell
from rollout_dataset.builder.configs import CONFIGS
from support.synthetic_dataset import write_synthetic_rollout

NAMES = [
    "a`b", "``fenced``", "`", "ends`", " padded ", "  ", "a | b", "a\\|b", "back\\", "two\nlines\r\nthree",
    "<script>window.pwned = 1</script>", '<img src=x onerror="window.pwned = 2">',
    "| `x` | <b>y</b> |\n## Fake heading", "**bold** [link](https://x.test) ![img](https://x.test/t.png) &lt; $x$",
]
# closes a one-backtick code span, opens HTML, breaks the table row, starts a heading on a line of its own
HOSTILE_MODEL = 'evil`<img src=x onerror="alert(1)">` | model\n## Logprob audit'
HOSTILE_TASK = "task``|<script>alert(2)</script>"
HOSTILE_HARNESS = "harness\\|`<b>bold</b>`"
HOSTILE_FOLDER = "refused`|<img src=y onerror=alert(3)>"


def _markdown() -> MarkdownIt:
    """CommonMark with GFM tables and raw HTML allowed, as the Hub renders a dataset card."""
    return MarkdownIt("commonmark", {"html": True}).enable("table")


def _inline(text: str) -> list:
    """The inline tokens `text` parses to."""
    return _markdown().parseInline(text)[0].children


@pytest.mark.parametrize("name", NAMES)
def test_a_code_span_shows_exactly_the_name_on_one_line(name):
    assert [(t.type, t.content) for t in _inline(code_span(name))] == [("code_inline", one_line(name))]


def test_an_empty_name_is_a_code_span_of_one_space():
    assert [(t.type, t.content) for t in _inline(code_span(""))] == [("code_inline", " ")]


@pytest.mark.parametrize("name", NAMES)
def test_a_code_span_in_a_table_cell_keeps_the_row_to_its_two_cells(name):
    table = f"| what | names |\n| --- | --- |\n| models | {table_cell(code_span(name))} (2) |\n"
    tokens = _markdown().parse(table)
    assert [t.type for t in tokens].count("td_open") == 2
    cell = [t for t in tokens if t.type == "inline"][-1].children
    assert [(t.type, t.content) for t in cell] == [("code_inline", one_line(name)), ("text", " (2)")]


@pytest.mark.parametrize("name", NAMES)
def test_markdown_text_shows_exactly_the_text_with_no_markup(name):
    children = _inline(markdown_text(name))
    assert {t.type for t in children} <= {"text", "text_special"}
    assert "".join(t.content for t in children) == one_line(name)


@pytest.fixture(scope="module")
def hostile_dataset(tmp_path_factory) -> tuple[Path, str, list[dict]]:
    """(dataset folder, its README.md, its summary rows): two rollouts by a model whose name holds a
    backtick, a pipe, HTML and a fake heading, on a task and harness with such names, and a refused
    folder named likewise."""
    root = tmp_path_factory.mktemp("card-names")
    folders = [root / "artifacts" / "r0", root / "artifacts" / "r1"]
    for seed, folder in enumerate(folders):
        write_synthetic_rollout(folder, seed=seed, n_turns=2, context_tokens=120, model=HOSTILE_MODEL)
        for name, fields in (("summary.json", {"task_id": HOSTILE_TASK, "harness": HOSTILE_HARNESS}),
                             ("task.json", {"task_id": HOSTILE_TASK}), ("held_out_tests.json", {"task_id": HOSTILE_TASK})):
            document = json.loads((folder / name).read_text())
            (folder / name).write_text(json.dumps(dict(document, **fields)))
        rollout = json.loads((folder / "rollout.json").read_text())
        rollout["metadata"]["task_id"] = HOSTILE_TASK
        (folder / "rollout.json").write_text(json.dumps(rollout))
    refused = root / "artifacts" / HOSTILE_FOLDER
    shutil.copytree(folders[0], refused)
    (refused / "rollout.json").write_text("{")
    result = build([root / "artifacts"], root / "ds", progress=False, skip_invalid=True)
    assert [Path(folder).name for folder, _ in result.refused] == [HOSTILE_FOLDER]
    summary = datasets.load_dataset(str(root / "ds"), "summary", split="train", cache_dir=str(root / "cache"))
    return root / "ds", (root / "ds" / "README.md").read_text(encoding="utf-8"), summary.to_list()


def _table(tokens: list, first_header: str) -> list[list[list]]:
    """The body rows of the table whose first header cell is `first_header`: each cell's inline tokens."""
    rows: list[list[list]] = []
    inside = False
    for k, token in enumerate(tokens):
        if token.type == "table_open":
            inside = tokens[k + 3].type == "th_open" and tokens[k + 4].content == first_header
        elif token.type == "table_close":
            inside = False
        elif inside and token.type == "tr_open":
            rows.append([])
        elif inside and token.type == "inline" and rows:
            rows[-1].append(token.children)
    return rows[1:]  # the header row left out


def test_hostile_names_each_stay_in_one_code_span_in_their_table_cell(hostile_dataset):
    _, readme, _ = hostile_dataset
    rows = _table(_markdown().parse(readme), "what was captured")
    assert len(rows) == 8 and all(len(cells) == 2 for cells in rows)
    shown = {cells[0][0].content: [t.content for t in cells[1] if t.type == "code_inline"] for cells in rows}
    assert shown["models"] == [one_line(HOSTILE_MODEL)]
    assert shown["harnesses"] == [HOSTILE_HARNESS]


def test_hostile_names_put_no_html_and_no_heading_in_the_card(hostile_dataset):
    _, readme, _ = hostile_dataset
    tokens = _markdown().parse(readme)
    html = [t.content for t in tokens if t.type == "html_block"]
    html += [c.content for t in tokens if t.type == "inline" for c in t.children if c.type == "html_inline"]
    assert not [h for h in html if "onerror" in h or "script" in h or "<b>bold" in h], html
    headings = [tokens[k + 1].content for k, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings.count("Logprob audit") == 0 and "Fake heading" not in " ".join(headings)


def test_a_refused_folders_hostile_name_is_one_code_span_and_its_reason_plain_text(hostile_dataset):
    _, readme, _ = hostile_dataset
    tokens = _markdown().parse(readme)
    item = next(t for t in tokens if t.type == "inline" and t.children and t.children[0].type == "code_inline"
                and t.children[0].content == HOSTILE_FOLDER)
    assert {c.type for c in item.children[1:]} <= {"text", "text_special"}
    assert "rollout.json" in "".join(c.content for c in item.children[1:])


def test_a_card_over_hostile_names_keeps_its_yaml_header_and_every_config_loads(hostile_dataset, tmp_path):
    dataset, readme, summary = hostile_dataset
    meta = read_card_metadata(readme)
    assert [c["config_name"] for c in meta["configs"]] == [spec.name for spec in CONFIGS]
    for spec in CONFIGS:
        rows = datasets.load_dataset(str(dataset), spec.name, split="train", cache_dir=str(tmp_path))
        assert len(rows) == next(i for i in meta["dataset_info"] if i["config_name"] == spec.name)["splits"][0]["num_examples"]
    assert {(r["model"], r["task_id"], r["harness"]) for r in summary} == {(HOSTILE_MODEL, HOSTILE_TASK, HOSTILE_HARNESS)}


def test_a_served_models_hostile_name_in_the_audit_statement_is_one_code_span():
    from types import SimpleNamespace

    from rollout_dataset.audit.writers import card_statement

    # a server scorer names the model its /v1/models lists first: the server's word, not the operator's
    scorer = SimpleNamespace(kind="server", url="http://127.0.0.1:8000/v1", model=HOSTILE_MODEL, dtype=None)
    figures = dict.fromkeys(("tokens_scored", "mean_abs_diff", "max_abs_diff", "share_over_1e-2", "kl_k1", "kl_k3"), 0)
    statement = card_statement(dict(figures, ratio_quantiles=dict.fromkeys(("p01", "p50", "p99"), 1.0)), scorer, 2, 0)
    tokens = _markdown().parse(statement)
    inline = [c for t in tokens if t.type == "inline" for c in t.children]
    assert [c.content for c in inline if c.type == "code_inline"].count(one_line(HOSTILE_MODEL)) == 1
    assert not [c for c in inline if c.type == "html_inline"]
    assert [t.type for t in tokens].count("heading_open") == 1  # its own "## Logprob audit", no other
