"""A config with no rows is left out of the card's YAML header (docs/dataset.md): `datasets` cannot load a
split without rows, so every config the header lists loads; the default config is always listed."""

from __future__ import annotations

from rollout_dataset.builder.card import card_metadata
from rollout_dataset.builder.configs import CONFIGS, DEFAULT_CONFIG


def _stats(rows: dict[str, int]) -> dict:
    return {"n_rollouts": rows.get(DEFAULT_CONFIG, 0), "rows": rows}


def test_a_config_without_rows_is_not_listed_and_the_others_are():
    rows = {spec.name: 3 for spec in CONFIGS}
    rows["held_out_tests"] = 0
    meta = card_metadata(_stats(rows), pretty_name="x", license="mit")
    listed = [c["config_name"] for c in meta["configs"]]
    assert "held_out_tests" not in listed
    assert listed == [s.name for s in CONFIGS if s.name != "held_out_tests"]
    assert [i["config_name"] for i in meta["dataset_info"]] == listed


def test_the_default_config_is_listed_even_without_rows():
    meta = card_metadata(_stats({spec.name: 0 for spec in CONFIGS}), pretty_name="x", license="mit")
    assert [c["config_name"] for c in meta["configs"]] == [DEFAULT_CONFIG]
