"""`rollout-dataset validate`: schema and semantic checks name the file and the JSON path of each failure."""

from __future__ import annotations

import json
import shutil

import pytest

from rollout_dataset.capture import capture_rollout
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.cli import main as cli_main
from rollout_dataset.schema.check import check_document


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    out = tmp_path_factory.mktemp("pristine") / "artifact"
    result = capture_rollout(CaptureConfig(out_dir=out, task_index=5, timeout_s=120))
    assert result.ok
    return out


@pytest.fixture
def artifact(pristine, tmp_path):
    copy = tmp_path / "artifact"
    shutil.copytree(pristine, copy)
    return copy


def _edit(path, change):
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _validate(capsys, *paths):
    code = cli_main(["validate", *map(str, paths)])
    captured = capsys.readouterr()  # findings on stdout, the error line on stderr
    return code, (captured.out + captured.err).splitlines()


def test_a_captured_artifact_folder_validates(artifact, capsys):
    code, lines = _validate(capsys, artifact)
    assert code == 0 and lines == [f"OK: {artifact}"]


def test_a_mask_longer_than_prompt_plus_output_is_named_by_file_and_path(artifact, capsys):
    _edit(artifact / "turns.json", lambda d: d["turns"][1]["mask"].append(1))
    code, lines = _validate(capsys, artifact)
    assert code == 1
    assert any(line.startswith(f"{artifact}/turns.json: $.turns[1].mask: has ") and "prompt + output ids" in line
               for line in lines)


def test_a_logprob_count_that_differs_from_the_output_ids_is_named(artifact, capsys):
    _edit(artifact / "turns.json", lambda d: d["turns"][0]["per_token_logps"].pop())
    code, lines = _validate(capsys, artifact)
    assert code == 1 and any(f"{artifact}/turns.json: $.turns[0].per_token_logps: has " in line for line in lines)


def test_a_schema_type_error_is_named_with_its_path(artifact, capsys):
    _edit(artifact / "summary.json", lambda d: d.update(env_reward="high"))
    code, lines = _validate(capsys, artifact)
    assert code == 1 and any(line.startswith(f"{artifact}/summary.json: $.env_reward: 'high' is not")
                             for line in lines)


def test_a_trace_record_missing_a_field_is_named_inside_the_calls_list(artifact, capsys):
    _edit(artifact / "trace.json", lambda d: d["calls"][2].pop("status"))
    code, lines = _validate(capsys, artifact)
    assert code == 1 and f"{artifact}/trace.json: $.calls[2]: 'status' is a required property" in lines


def test_a_stray_float_in_a_token_array_is_reported_at_its_own_index(artifact, capsys):
    _edit(artifact / "turns.json", lambda d: d["turns"][0]["prompt_ids"].__setitem__(7, 1.5))
    code, lines = _validate(capsys, artifact / "turns.json")
    assert code == 1 and any(line.startswith(f"{artifact}/turns.json: $.turns[0].prompt_ids[7]: 1.5 is not")
                             for line in lines)


def test_summary_counts_that_disagree_with_the_turns_are_named(artifact, capsys):
    _edit(artifact / "summary.json", lambda d: d.update(agent_turns=d["agent_turns"] + 1, tool_calls_total=99))
    code, lines = _validate(capsys, artifact)
    assert code == 1
    assert any(line.startswith(f"{artifact}/summary.json: $.agent_turns: is ") and "turns.json" in line
               for line in lines)
    assert any(line.startswith(f"{artifact}/summary.json: $.tool_calls_total: is 99") for line in lines)


def test_a_missing_artifact_file_and_broken_json_are_named(artifact, capsys):
    (artifact / "samples.md").unlink()
    (artifact / "task.json").write_text("{not json")
    code, lines = _validate(capsys, artifact)
    assert code == 1
    assert any(line.startswith(f"{artifact}/samples.md: $: missing") for line in lines)
    assert any(line.startswith(f"{artifact}/task.json: $: not valid JSON") for line in lines)


def test_a_tree_of_folders_reports_only_the_corrupted_one(pristine, tmp_path, capsys):
    shutil.copytree(pristine, tmp_path / "runs" / "a")
    shutil.copytree(pristine, tmp_path / "runs" / "b")
    _edit(tmp_path / "runs" / "b" / "held_out_tests.json", lambda d: d["tests"].pop())
    code, lines = _validate(capsys, tmp_path)
    failures = [line for line in lines if ": $" in line]
    assert code == 1 and failures
    assert all(line.startswith(f"{tmp_path}/runs/b/summary.json: $.held_out_tests: is ") for line in failures)


def test_unknown_files_and_missing_paths_are_refused(tmp_path, capsys):
    odd = tmp_path / "notes.json"
    odd.write_text("{}")
    code, lines = _validate(capsys, odd)
    assert code == 1 and lines[0].startswith(f"{odd}: $: unknown artifact file")
    code, lines = _validate(capsys, tmp_path / "nowhere")
    assert code == 2 and "no such file or folder" in lines[0]


def test_semantic_checks_run_on_documents_in_memory():
    turn = {"turn": 0, "prompt_ids": [1, 2], "output_ids": [3], "per_token_logps": [-0.1], "mask": [0, 1, 1],
            "n_prompt_ids": 2, "n_output_ids": 1}
    failures = check_document({"turns": [turn]}, "turns", "mem")
    assert ("mem", "$.turns[0].mask[1]", "mask must be 0 on the prompt ids and 1 on the output ids") in failures


def test_batch_run_records_are_checked_line_by_line(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "simple.jsonl").write_text('{"seed": "zero"}\n')
    code, lines = _validate(capsys, tmp_path)
    assert code == 1 and f"{runs}/simple.jsonl: $[0].seed: 'zero' is not of type 'integer'" in lines
