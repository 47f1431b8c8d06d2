"""The dataset builder: configs, features, encodings, card, parquet layout, streaming, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
import yaml

from rollout_dataset.trace_integrity import reseal
from rollout_dataset.builder import (
    CONFIG_NAMES,
    build,
    features,
    sequence_to_trl,
    trace_request,
    turn_prompt_ids,
    turn_token_arrays,
)
from rollout_dataset.builder.card import read_card_metadata
from rollout_dataset.builder.configs import features_yaml, resolved_columns
from rollout_dataset.builder.rows import MAX_CELL_BYTES
from support.synthetic_dataset import write_synthetic_dataset, write_synthetic_rollout
from rollout_dataset.builder.writer import ConfigWriter
from rollout_dataset.errors import ArtifactError, SchemaValidationError
from rollout_dataset.schema import load_schema, schema_errors


def _rows(dataset_dir: Path, config: str) -> list[dict]:
    rows = []
    for shard in sorted((dataset_dir / "data" / config).glob("*.parquet")):
        rows.extend(pq.read_table(shard).to_pylist())
    return rows


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("build")
    folders = write_synthetic_dataset(root / "artifacts", 3, n_turns=6, context_tokens=600, with_retry=True)
    write_synthetic_rollout(root / "artifacts" / "crafter", seed=99, with_tests=False, n_turns=3,
                            context_tokens=200)
    result = build([root / "artifacts"], root / "ds", progress=False)
    return root, folders, result


def test_synthetic_artifacts_follow_the_shipped_schemas(built):
    _, folders, _ = built
    for folder in folders:
        for name in ("summary", "task", "held_out_tests", "trace", "rollout", "turns"):
            assert schema_errors(json.loads((folder / f"{name}.json").read_text()), name) == []
        for call in json.loads((folder / "trace.json").read_text())["calls"]:
            assert schema_errors(call, "trace_record") == []


def test_every_config_loads_with_its_declared_features_and_no_name_gives_summary(built, tmp_path):
    root, _, result = built
    for config in CONFIG_NAMES:
        ds = datasets.load_dataset(str(root / "ds"), config, split="train", cache_dir=str(tmp_path))
        assert ds.features == features(config), config
        assert len(ds) == result.rows[config], config
    default = datasets.load_dataset(str(root / "ds"), split="train", cache_dir=str(tmp_path))
    assert default.column_names == [c.name for c in resolved_columns("summary")]
    assert len(default) == 4


def test_load_dataset_never_serves_a_stale_cache_for_another_dataset_of_the_same_name(tmp_path):
    loaded = []
    for k in range(2):  # same folder name, same number of rollouts, different rollouts
        write_synthetic_rollout(tmp_path / f"art{k}", seed=900 + k, n_turns=2, context_tokens=64)
        build([tmp_path / f"art{k}"], tmp_path / f"v{k}" / "ds", progress=False)
        ds = datasets.load_dataset(str(tmp_path / f"v{k}" / "ds"), "sequences", split="train",
                                   cache_dir=str(tmp_path / "cache"))
        loaded.append(set(ds["rollout_id"]))
    assert loaded[0] != loaded[1]


def test_token_arrays_are_int32_logprobs_float32_masks_int8(built):
    root, _, _ = built
    schema = pq.read_schema(next((root / "ds" / "data" / "sequences").glob("*.parquet")))
    assert str(schema.field("input_ids").type) == "list<element: int32>"
    assert str(schema.field("logprobs").type) == "list<element: float>"
    assert str(schema.field("loss_mask").type) == "list<element: int8>"


def test_columns_mirroring_documents_take_type_and_description_from_the_json_schema():
    summary = {c.name: c for c in resolved_columns("summary")}
    props = load_schema("summary")["properties"]
    assert summary["env_reward"].description == props["env_reward"]["description"]
    assert summary["env_reward"].dtype == "float64"
    assert summary["penalties"].dtype == "json"  # an array of objects is stored as JSON text
    trace = {c.name: c for c in resolved_columns("trace")}
    assert trace["call_index"].description == load_schema("trace_record")["properties"]["index"]["description"]
    assert trace["notes"].dtype == "list<string>"


def test_card_yaml_declares_every_config_with_exactly_one_default_and_its_features(built):
    root, _, _ = built
    meta = read_card_metadata((root / "ds" / "README.md").read_text())
    assert [c["config_name"] for c in meta["configs"]] == list(CONFIG_NAMES)
    assert [c["config_name"] for c in meta["configs"] if c.get("default")] == ["summary"]
    assert {i["config_name"]: i["features"] for i in meta["dataset_info"]} == {c: features_yaml(c) for c in CONFIG_NAMES}
    for key in ("license", "pretty_name", "task_categories", "tags", "size_categories"):
        assert meta[key]


def test_card_body_carries_the_real_numbers(built):
    root, folders, _ = built
    text = (root / "ds" / "README.md").read_text()
    rewards = [json.loads((f / "summary.json").read_text())["env_reward"] for f in folders]
    mean = round(sum(rewards) / len(rewards), 4)
    assert "**4 rollouts**" in text
    assert f"| `env_reward` | 3 | {mean} |" in text
    assert "Unscored rollouts (verifier could not run): 1." in text
    assert "\"seed\": 0" in text  # sampling params seen, as JSON
    assert "turn_prompt_ids" in text  # how to get full prompt_ids back


def test_turns_give_back_every_turns_json_array_exactly(built):
    root, folders, _ = built
    turns = _rows(root / "ds", "turns")
    seqs = _rows(root / "ds", "sequences")
    inline = 0
    for folder in folders:
        doc = json.loads((folder / "turns.json").read_text())
        rid = json.loads((folder / "summary.json").read_text())["rollout_id"]
        mine_t = [t for t in turns if t["rollout_id"] == rid]
        mine_s = [s for s in seqs if s["rollout_id"] == rid]
        arrays = turn_token_arrays(mine_t, mine_s)
        inline += sum(1 for t in mine_t if t["sequence_index"] < 0)
        for t in doc["turns"]:
            got = arrays[t["call_index"]]
            assert got["prompt_ids"] == t["prompt_ids"]
            assert got["output_ids"] == t["output_ids"]
            assert got["mask"] == t["mask"]
            assert got["per_token_logps"] == pytest.approx(t["per_token_logps"], rel=1e-6)
            assert turn_prompt_ids(mine_t, mine_s, t["call_index"]) == t["prompt_ids"]
    assert inline == len(folders)  # exactly the discarded retries are stored inline


def test_turns_store_no_token_array_that_a_sequence_already_holds(built):
    root, _, _ = built
    for t in _rows(root / "ds", "turns"):
        if t["sequence_index"] >= 0:
            assert t["prompt_ids_delta"] == [] and t["output_ids"] == [] and t["per_token_logps"] == []
        else:
            assert t["prefix_len"] > 0 and len(t["prompt_ids_delta"]) < t["n_prompt_ids"]


def test_trace_keeps_requests_restorable_and_drops_token_arrays(built):
    root, folders, _ = built
    rows = _rows(root / "ds", "trace")
    calls = json.loads((folders[0] / "trace.json").read_text())["calls"]
    rid = json.loads((folders[0] / "summary.json").read_text())["rollout_id"]
    mine = [r for r in rows if r["rollout_id"] == rid]
    assert any(r["messages_prefix_len"] > 0 for r in mine)
    for call in calls:
        assert trace_request(mine, call["index"]) == call["request"]
    for r in mine:
        response = json.loads(r["response_json"])
        assert "prompt_token_ids" not in response
        assert all("token_ids" not in c and c["logprobs"] is None for c in response["choices"])
        assert r["n_prompt_ids"] > 0 and r["n_completion_ids"] > 0


def test_sequence_to_trl_splits_at_prompt_len_and_masks_context():
    row = {"prompt_len": 3, "input_ids": [1, 2, 3, 4, 5, 6, 7], "loss_mask": [0, 0, 0, 1, 1, 0, 1],
           "logprobs": [0.0, 0.0, 0.0, -0.1, -0.2, 0.0, -0.3]}
    out = sequence_to_trl(row)
    assert out == {"prompt_ids": [1, 2, 3], "completion_ids": [4, 5, 6, 7], "completion_mask": [1, 1, 0, 1],
                   "logprobs": [-0.1, -0.2, 0.0, -0.3]}


def test_environment_without_tests_has_empty_visible_text_and_no_held_out_rows(built):
    root, _, _ = built
    crafter = json.loads((root / "artifacts" / "crafter" / "summary.json").read_text())["rollout_id"]
    visible = {r["rollout_id"]: r["text"] for r in _rows(root / "ds", "visible_tests")}
    assert visible[crafter] == ""
    assert not [r for r in _rows(root / "ds", "held_out_tests") if r["rollout_id"] == crafter]


def test_shards_have_a_page_index_and_row_groups_under_100_mb(built):
    root, _, _ = built
    for shard in (root / "ds" / "data").rglob("*.parquet"):
        meta = pq.ParquetFile(shard).metadata
        for g in range(meta.num_row_groups):
            assert meta.row_group(g).total_byte_size <= 100 * 1024 * 1024
            assert meta.row_group(g).column(0).has_offset_index and meta.row_group(g).column(0).has_column_index


def test_writer_flushes_a_row_group_whenever_the_buffer_is_full(tmp_path):
    w = ConfigWriter("samples", tmp_path / "s.parquet", row_group_bytes=10_000)
    for k in range(5):
        w.add([{"rollout_id": f"r{k}", "part": 0, "text": "x" * 6_000}])
    w.close()
    meta = pq.ParquetFile(tmp_path / "s.parquet").metadata
    assert meta.num_rows == 5 and meta.num_row_groups >= 2


def test_building_again_into_the_same_folder_adds_only_new_rollouts(built, tmp_path):
    root, folders, _ = built
    ds = tmp_path / "ds"
    shutil.copytree(root / "ds", ds)
    write_synthetic_rollout(tmp_path / "new", seed=500, n_turns=2, context_tokens=100)
    result = build([root / "artifacts", tmp_path / "new"], ds, progress=False)
    assert len(result.added) == 1 and len(result.skipped) == 4
    ids = [r["rollout_id"] for r in _rows(ds, "summary")]
    assert len(ids) == len(set(ids)) == 5
    assert "**5 rollouts**" in (ds / "README.md").read_text()


def test_giant_text_cells_are_split_or_cut_with_a_marker_never_silently_in_full_samples_mode(tmp_path):
    folder = tmp_path / "a"
    write_synthetic_rollout(folder, seed=7, n_turns=2, context_tokens=64)
    (folder / "samples.md").write_text(("line of text\n" * 200_000), encoding="utf-8")  # 2.6 MB
    trace = json.loads((folder / "trace.json").read_text())
    trace["calls"][-1]["request"]["messages"].append({"role": "user", "content": "y" * (MAX_CELL_BYTES + 10)})
    (folder / "trace.json").write_text(json.dumps(reseal(trace)))  # a trusted edit: sealed anew
    result = build([folder], tmp_path / "ds", progress=False, samples="full")
    samples = _rows(tmp_path / "ds", "samples")
    assert len(samples) == 3 and "".join(s["text"] for s in samples) == "line of text\n" * 200_000
    assert all(len(s["text"].encode()) <= MAX_CELL_BYTES for s in samples)
    cut = [r for r in _rows(tmp_path / "ds", "trace") if r["truncated"]]
    assert len(cut) == 1 and "characters cut by rollout-dataset" in cut[0]["request_json"]
    assert result.cut_cells == 1 and _rows(tmp_path / "ds", "summary")[0]["n_cut_cells"] == 1


def test_a_missing_artifact_file_names_the_file_and_leaves_the_dataset_as_it_was(built, tmp_path):
    root, _, _ = built
    ds = tmp_path / "ds"
    shutil.copytree(root / "ds", ds)
    before = sorted(p.name for p in ds.rglob("*.parquet"))
    bad = tmp_path / "bad"
    write_synthetic_rollout(bad, seed=321, n_turns=2, context_tokens=100)
    (bad / "turns.json").unlink()
    with pytest.raises(SchemaValidationError, match=r"bad/turns\.json: \$: missing"):
        build([bad], ds, progress=False)
    assert sorted(p.name for p in ds.rglob("*.parquet")) == before


def test_a_folder_without_artifacts_is_a_clear_error(tmp_path):
    with pytest.raises(ArtifactError, match="no artifact folder"):
        build([tmp_path], tmp_path / "ds", progress=False)


def test_cli_build_writes_the_dataset_and_prints_counts(built, tmp_path, capsys):
    from rollout_dataset.cli import main

    root, _, _ = built
    assert main(["build", str(root / "artifacts"), "--out", str(tmp_path / "ds"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "4 rollouts" in out and "sequences" in out
    assert yaml.safe_load((tmp_path / "ds" / "README.md").read_text().split("---\n")[1])["configs"]


def test_a_value_off_its_schema_names_the_file_and_json_path_and_writes_nothing(tmp_path):
    folder = tmp_path / "odd"
    write_synthetic_rollout(folder, seed=11, n_turns=2, context_tokens=64)
    doc = json.loads((folder / "turns.json").read_text())
    doc["turns"][0]["tool_calls"] = [{"name": "run"}]  # the schema says: names (strings)
    (folder / "turns.json").write_text(json.dumps(doc))
    with pytest.raises(SchemaValidationError, match=r"odd/turns\.json: \$\.turns\[0\]\.tool_calls\[0\]"):
        build([folder], tmp_path / "ds", progress=False)
    assert not (tmp_path / "ds").exists()


def test_a_value_that_does_not_fit_its_column_names_the_folder_config_and_column(tmp_path):
    folder = tmp_path / "odd"
    write_synthetic_rollout(folder, seed=11, n_turns=2, context_tokens=64)
    doc = json.loads((folder / "trace.json").read_text())
    doc["calls"][-1]["index"] = 2**40  # an integer the schema allows, beyond the int32 column
    (folder / "trace.json").write_text(json.dumps(reseal(doc)))  # a trusted edit: sealed anew
    with pytest.raises(ArtifactError, match=r"odd: .*config 'trace', column 'call_index'"):
        build([folder], tmp_path / "ds", progress=False)
    assert not (tmp_path / "ds").exists()


def test_a_token_id_beyond_int32_is_named_by_file_and_json_path(tmp_path):
    folder = tmp_path / "odd"
    write_synthetic_rollout(folder, seed=11, n_turns=2, context_tokens=64)
    doc = json.loads((folder / "rollout.json").read_text())
    doc["sequences"][0]["input_ids"][3] = 2**40
    (folder / "rollout.json").write_text(json.dumps(doc))
    with pytest.raises(SchemaValidationError, match=r"odd/rollout\.json: \$\.sequences\[0\]\.input_ids\[3\]"):
        build([folder], tmp_path / "ds", progress=False)
    assert not (tmp_path / "ds").exists()
