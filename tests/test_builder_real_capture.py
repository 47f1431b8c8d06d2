"""The builder on a REAL capture: local backend (oracle policy), proxy, built-in harness, verifier."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from rollout_dataset.builder import build, trace_request, turn_token_arrays
from rollout_dataset.capture import capture_rollout
from rollout_dataset.recipes.coding import CaptureConfig


def _rows(dataset_dir, config):
    return pq.read_table(sorted((dataset_dir / "data" / config).glob("*.parquet"))).to_pylist()


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    root = tmp_path_factory.mktemp("real")
    result = capture_rollout(CaptureConfig(out_dir=root / "a", policy="oracle", task_index=0))
    assert result.ok
    built = build([root / "a"], root / "ds", progress=False)
    return root, built


def test_a_real_capture_builds_and_every_turn_and_request_comes_back_exactly(captured):
    tmp_path, built = captured
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert built.added == [summary["rollout_id"]]

    turns, seqs = _rows(tmp_path / "ds", "turns"), _rows(tmp_path / "ds", "sequences")
    arrays = turn_token_arrays(turns, seqs)
    for t in json.loads((tmp_path / "a" / "turns.json").read_text())["turns"]:
        got = arrays[t["call_index"]]
        assert (got["prompt_ids"], got["output_ids"], got["mask"]) == (t["prompt_ids"], t["output_ids"], t["mask"])
    trace = _rows(tmp_path / "ds", "trace")
    for call in json.loads((tmp_path / "a" / "trace.json").read_text())["calls"]:
        assert trace_request(trace, call["index"]) == call["request"]
    row = _rows(tmp_path / "ds", "summary")[0]
    assert row["env_reward"] == summary["env_reward"] and row["n_turn_rows"] == len(turns)
    # how the rollout was isolated and how its output limits were fitted travel with each summary row
    assert row["isolation"] == summary["isolation"] == "allow-list"
    assert json.loads(row["context_fit"]) == summary["context_fit"]


def test_a_real_sample_previews_with_its_header_and_the_cards_snippet_gives_its_token_stream(captured):
    from rollout_dataset.tokenizers import load_tokenizer

    tmp_path, _ = captured
    samples_md = (tmp_path / "a" / "samples.md").read_text(encoding="utf-8")
    (sample,) = _rows(tmp_path / "ds", "samples")
    header = samples_md.split("\n## ")[0]
    assert header.startswith("# Rollout ") and sample["text"].startswith(header)
    assert sample["full_chars"] == len(samples_md) and sample["truncated"] == (len(samples_md) > len(sample["text"]))
    # the card's snippet: sequences + the rollout's tokenizer give the rendered token stream back
    summary_row, sequence_row = _rows(tmp_path / "ds", "summary")[0], _rows(tmp_path / "ds", "sequences")[0]
    tokenizer = load_tokenizer(summary_row["tokenizer"])
    text = tokenizer.decode(sequence_row["input_ids"], skip_special_tokens=False)
    assert sequence_row["role"] == "agent" and text in samples_md
