"""Parquet encodings of the builder: lossless, declared per column kind, schema equal to the features."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from rollout_dataset.builder import CONFIG_NAMES, build, features
from rollout_dataset.builder.configs import arrow_schema
from support.synthetic_dataset import write_synthetic_dataset
from rollout_dataset.builder.writer import LIST_LEVEL, TEXT_LEVEL, ConfigWriter, column_options


def _sequence_row(logprobs: np.ndarray) -> dict:
    n = len(logprobs)
    return {"rollout_id": "r", "sequence_index": 0, "role": "agent", "trainable": True, "root_id": 0,
            "node_ids": [0], "n_turns": 1, "prompt_len": 0, "n_trainable": n, "turn_lengths": [n],
            "input_ids": list(range(n)), "loss_mask": [1] * n, "logprobs": logprobs, "findings": "[]",
            "env_reward": 1.0, "reward_after_penalties": 1.0}


def test_logprobs_come_back_bit_for_bit_through_byte_stream_split(tmp_path):
    rng = np.random.default_rng(0)
    special = np.array([np.nan, -0.0, 0.0, -np.inf, np.finfo(np.float32).tiny / 2, -1e-30], np.float32)
    logprobs = np.concatenate([special, -rng.exponential(2.0, 5000).astype(np.float32)])
    w = ConfigWriter("sequences", tmp_path / "s.parquet")
    w.add([_sequence_row(logprobs)])
    w.close()
    back = pq.read_table(tmp_path / "s.parquet").column("logprobs").combine_chunks().values.to_numpy()
    assert back.dtype == np.float32
    assert np.array_equal(back.view(np.uint32), logprobs.view(np.uint32))
    encodings = pq.ParquetFile(tmp_path / "s.parquet").metadata.row_group(0).column(12).encodings
    assert "BYTE_STREAM_SPLIT" in encodings


def test_each_column_kind_gets_its_declared_encoding_and_level():
    opts = column_options(arrow_schema("sequences"))
    assert opts["column_encoding"] == {"logprobs.list.element": "BYTE_STREAM_SPLIT"}
    assert opts["compression_level"]["input_ids.list.element"] == LIST_LEVEL
    assert opts["compression_level"]["role"] == TEXT_LEVEL
    assert "input_ids" not in opts["use_dictionary"] and "role" in opts["use_dictionary"]
    trace = column_options(arrow_schema("trace"))
    assert trace["compression_level"]["request_json"] == TEXT_LEVEL and trace["column_encoding"] == {}


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("enc")
    write_synthetic_dataset(root / "artifacts", 2, n_turns=4, context_tokens=400, with_retry=True)
    build([root / "artifacts"], root / "ds", progress=False)
    return root / "ds"


@pytest.mark.parametrize("config", CONFIG_NAMES)
def test_every_shard_schema_equals_the_declared_features_so_loading_casts_nothing(small_dataset, config):
    for shard in (small_dataset / "data" / config).glob("*.parquet"):
        schema = pq.read_schema(shard).remove_metadata()
        assert schema == features(config).arrow_schema.remove_metadata()
        assert schema == arrow_schema(config)


def test_sequences_read_back_equal_rollout_json_arrays_exactly(small_dataset):
    rows = {}
    for shard in (small_dataset / "data" / "sequences").glob("*.parquet"):
        for r in pq.read_table(shard).to_pylist():
            rows[(r["rollout_id"], r["sequence_index"])] = r
    for folder in sorted((small_dataset.parent / "artifacts").iterdir()):
        rid = json.loads((folder / "summary.json").read_text())["rollout_id"]
        for i, s in enumerate(json.loads((folder / "rollout.json").read_text())["sequences"]):
            row = rows[(rid, i)]
            assert row["input_ids"] == s["input_ids"] and row["loss_mask"] == s["loss_mask"]
            want = np.asarray([np.nan if v is None else v for v in s["logprobs"]], np.float32)
            assert np.array_equal(np.asarray(row["logprobs"], np.float32).view(np.uint32), want.view(np.uint32))
