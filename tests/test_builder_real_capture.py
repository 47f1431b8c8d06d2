"""The builder on a REAL capture: local backend (oracle policy), proxy, built-in harness, verifier."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from rollout_dataset.builder import build, trace_request, turn_token_arrays


def _rows(dataset_dir, config):
    return pq.read_table(sorted((dataset_dir / "data" / config).glob("*.parquet"))).to_pylist()


def test_a_real_capture_builds_and_every_turn_and_request_comes_back_exactly(tmp_path):
    capture = pytest.importorskip("rollout_dataset.capture")
    result = capture.capture_rollout(capture.CaptureConfig(out_dir=tmp_path / "a", policy="oracle", task_index=0,
                                                           push=False))
    assert result.ok
    built = build([tmp_path / "a"], tmp_path / "ds", progress=False)
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
