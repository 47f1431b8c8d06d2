"""The dataset card a reader scans: what it is, the notice, how to load, rewards, groups and the
trainer contracts (folded) fit above the column tables; the column tables and reference come after."""

from __future__ import annotations

import json

import pytest

from rollout_dataset import demo
from rollout_dataset.builder.card import CARD_PROSE_MAX_LINES, card_prose_lines, read_card_metadata, render_card
from rollout_dataset.builder.card_info import CardOptions
from rollout_dataset.builder.configs import CONFIG_NAMES


@pytest.fixture(scope="module")
def demo_card(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("demo-card")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PUSH_TO_DATASET", raising=False)
        assert demo.main(["--out", str(root / "artifacts"), "--dataset", str(root / "dataset"), "--n", "2"]) == 0
    return (root / "dataset" / "README.md").read_text(encoding="utf-8")


def _heading_order(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("## ")]


def test_the_prose_above_the_first_column_table_of_a_built_dataset_fits_in_150_lines(demo_card):
    prose = card_prose_lines(demo_card)
    assert len(prose) <= CARD_PROSE_MAX_LINES == 150, f"{len(prose)} lines above the first column table"
    assert len(prose) < len(demo_card.split("\n---\n", 1)[1].splitlines())  # column tables do follow


def test_what_it_is_the_notice_loading_rewards_groups_and_contracts_come_before_the_columns(demo_card):
    prose = "\n".join(card_prose_lines(demo_card))
    assert "> **Notice: 2 of 2 rollouts came from a scripted policy" in prose  # the demo's oracle policy
    assert "**2 rollouts**" in prose and "token-exact" in prose
    assert all(f'"{name}"' in prose for name in CONFIG_NAMES if name != "summary")  # one load_dataset line each
    headings = _heading_order(card_prose_lines(demo_card))
    assert [h for h in headings if h in ("## How to load", "## Rewards", "## Intended use")] == [
        "## How to load", "## Rewards", "## Intended use"]
    assert "**Groups.**" in prose and "<details>" in prose and "grpo_rollout_output" in prose


def test_the_yaml_header_stays_complete(demo_card):
    meta = read_card_metadata(demo_card)
    assert [c["config_name"] for c in meta["configs"]] == list(CONFIG_NAMES)
    assert {i["config_name"] for i in meta["dataset_info"]} == set(CONFIG_NAMES)


def test_the_prose_stays_within_bounds_with_every_optional_paragraph(tmp_path):
    continuity = {"agent_turns": 4, "exact": 1, "repaired": 2, "not_repaired": 1,
                  "not_repaired_reasons": {"content_changed": 1, "no_parent": 0}}
    rows = [{"rollout_id": str(i), "scripted": True, "policy": "oracle", "continuity": json.dumps(continuity)}
            for i in range(3)]
    text = render_card(rows, traces_repo_id="org/r-traces",
                       options=CardOptions(homepage="https://example.org", repository="https://github.com/org/r"))
    prose = "\n".join(card_prose_lines(text))
    assert "Notice:" in prose and "On-policy mode" in prose and "**Homepage:**" in prose and "org/r-traces" in prose
    assert len(card_prose_lines(text)) <= CARD_PROSE_MAX_LINES


def test_the_on_policy_paragraph_counts_reasoning_dropped_once_apart_from_not_repaired():
    continuity = {"agent_turns": 4, "exact": 1, "repaired": 1, "reasoning_dropped": 2, "not_repaired": 0,
                  "not_repaired_reasons": {}}
    rows = [{"rollout_id": "0", "scripted": True, "policy": "oracle", "continuity": json.dumps(continuity)}]
    prose = "\n".join(card_prose_lines(render_card(rows)))
    assert prose.count("`reasoning_dropped`") == 1
    assert "50.0% starting a new sequence because the chat template drops earlier reasoning" in prose
    assert "0.0% not repaired" in prose
