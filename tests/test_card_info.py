"""A card a researcher can cite: lengths, language, Arrow num_bytes, intended use, citation,
homepage and repository from build options (kept for push)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from rollout_dataset.builder import CONFIG_NAMES, build
from rollout_dataset.builder.card import read_card_metadata
from rollout_dataset.builder.card_info import CardOptions, load_card_options
from support.synthetic_dataset import write_synthetic_dataset
from rollout_dataset.errors import ConfigError

BIBTEX = "@misc{mine_2026,\n  title = {Mine},\n  year = {2026}\n}"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("card")
    write_synthetic_dataset(root / "in", 3, n_turns=3, context_tokens=200)
    build([root / "in"], root / "ds", progress=False, language=["en", "fr"], homepage="https://example.org/rollouts",
          repository="https://github.com/org/capture", citation=BIBTEX)
    return root / "ds"


def test_num_bytes_is_the_arrow_size_datasets_computes_and_download_size_the_parquet(built):
    meta = read_card_metadata((built / "README.md").read_text())
    for info in meta["dataset_info"]:
        shards = sorted((built / "data" / info["config_name"]).glob("*.parquet"))
        assert info["splits"][0]["num_bytes"] == sum(pq.read_table(p).nbytes for p in shards)
        assert info["download_size"] == sum(p.stat().st_size for p in shards)
    assert {i["config_name"] for i in meta["dataset_info"]} == set(CONFIG_NAMES)


def test_the_card_carries_language_homepage_repository_citation_and_intended_use(built):
    text = (built / "README.md").read_text()
    assert read_card_metadata(text)["language"] == ["en", "fr"]
    assert "**Homepage:** https://example.org/rollouts" in text and "https://github.com/org/capture" in text
    assert "## Intended use" in text and f"```bibtex\n{BIBTEX}\n```" in text


def test_the_card_reports_token_and_turn_length_statistics(built):
    text = (built / "README.md").read_text()
    assert "| longest sequence per rollout (tokens) | 3 |" in text and "| agent turns per rollout | 3 |" in text


def test_card_options_are_kept_for_a_later_push(built):
    assert load_card_options(built) == CardOptions(language=("en", "fr"), homepage="https://example.org/rollouts",
                                                   repository="https://github.com/org/capture", citation=BIBTEX)


def test_a_homepage_that_is_not_a_url_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="homepage='example.org': give an http"):
        build([tmp_path], tmp_path / "ds", progress=False, homepage="example.org")


def test_without_a_citation_one_is_generated_from_the_repo(built):
    from rollout_dataset.builder.card import render_card
    from rollout_dataset.builder.build import read_summary_rows

    text = render_card(read_summary_rows(built), repo_id="org/rollouts")
    assert "@misc{org_rollouts_" in text and "huggingface.co/datasets/org/rollouts" in text


@pytest.mark.parametrize("text", ["[1, 2]", "null", '"en"', '{"homepage": 5}', '{"language": 5}'])
def test_a_card_options_file_of_the_wrong_shape_falls_back_to_the_defaults_with_a_warning(tmp_path, caplog, text):
    (tmp_path / "card_options.json").write_text(text)
    assert load_card_options(tmp_path) == CardOptions()
    assert f"{tmp_path / 'card_options.json'}: unreadable" in caplog.text
