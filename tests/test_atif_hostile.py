"""A hostile or broken ATIF producer (docs/atif.md, "Bad input"): values no artifact can hold, times
out of range, and fields the importer's own extras hold are refused by file and field, and one bad
trajectory among good ones is left out by name while the others build."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import atif
import pytest

from rollout_dataset.atif.export import trajectory_of_folder
from rollout_dataset.atif.importer import AtifSource, import_documents
from rollout_dataset.errors import SchemaValidationError
from rollout_dataset.schema.check import check_document
from support.synthetic_dataset import write_synthetic_rollout


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("art") / "art"
    write_synthetic_rollout(folder, n_turns=3, context_tokens=300, with_aux=True, with_retry=True)
    return trajectory_of_folder(folder)


def _model_step(trajectory: dict[str, Any], k: int = 0) -> dict[str, Any]:
    return [s for s in trajectory["steps"] if s["source"] == "agent" and s.get("metrics")][k]


def _write(path: Path, trajectory: dict[str, Any] | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = trajectory if isinstance(trajectory, str) else json.dumps(trajectory)  # ensure_ascii: surrogates as escapes
    path.write_text(text, encoding="utf-8")
    return path


def _refusal(tmp_path: Path, trajectory: dict[str, Any] | str) -> tuple[str, str, str]:
    path = _write(tmp_path / "t.atif.json", trajectory)
    with pytest.raises(SchemaValidationError) as caught:
        import_documents(AtifSource(path, tmp_path))
    return caught.value.failures[0]


UNSTORABLE: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "nan-logprob": (lambda t: _model_step(t)["metrics"]["logprobs"].__setitem__(0, float("nan")),
                    ".metrics.logprobs[0]"),
    "infinite-reward": (lambda t: t["final_metrics"]["extra"]["rollout_dataset"].__setitem__("env_reward", float("inf")),
                        "$.final_metrics.extra.rollout_dataset.env_reward"),
    "lone-surrogate-in-text": (lambda t: _model_step(t).__setitem__("message", "ok \ud800 then"), ".message"),
    "lone-surrogate-in-model": (lambda t: t["agent"].__setitem__("model_name", "m\udc00"), "$.agent.model_name"),
}


@pytest.mark.parametrize("name", UNSTORABLE)
def test_nan_infinity_and_lone_surrogates_are_refused_naming_the_field(tmp_path, good, name):
    trajectory = copy.deepcopy(good)
    break_it, field = UNSTORABLE[name]
    break_it(trajectory)
    file, where, reason = _refusal(tmp_path, trajectory)
    assert file.endswith("t.atif.json") and where.endswith(field), (where, reason)


def test_json_nested_beyond_the_parsers_depth_is_refused_as_not_valid_json(tmp_path):
    file, where, reason = _refusal(tmp_path, "[" * 200_000)
    assert file.endswith("t.atif.json") and where == "$" and "not valid JSON" in reason



@pytest.mark.parametrize("moment", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_a_time_whose_utc_form_is_outside_the_datetime_range_imports_with_the_fixed_creation_time(tmp_path, good,
                                                                                                 moment):
    trajectory = copy.deepcopy(good)
    for step in trajectory["steps"]:
        step["timestamp"] = moment
    documents = import_documents(AtifSource(_write(tmp_path / "t.atif.json", trajectory), tmp_path))
    assert documents["summary.json"]["created_at"] == "1970-01-01T00:00:00Z"
    assert check_document(documents["summary.json"], "summary", "summary.json") == []


LEFT_OUT: dict[str, Callable[[dict[str, Any]], Any]] = {
    "positive-logprob": lambda t: _model_step(t)["metrics"]["logprobs"].__setitem__(0, 5.0),
    "float-token-id": lambda t: _model_step(t, -1)["metrics"]["completion_token_ids"].__setitem__(0, 3.0),
    "token-id-beyond-64-bits": lambda t: _model_step(t, -1)["metrics"]["completion_token_ids"].__setitem__(0, 2**64),
    "finish-reason-object": lambda t: _model_step(t)["extra"]["rollout_dataset"].__setitem__("finish_reason", {"a": 1}),
    "call-index-beyond-64-bits": lambda t: [s["extra"]["rollout_dataset"].__setitem__("call_index", 2**64 + i)
                                            for i, s in enumerate(t["steps"]) if s.get("metrics")],
    "reward-above-one": lambda t: t["final_metrics"]["extra"]["rollout_dataset"].__setitem__("env_reward", 5),
    "no-steps": lambda t: t.__setitem__("steps", []),
}


def test_each_trajectory_the_build_could_not_take_is_left_out_by_name_and_the_rest_build(tmp_path, good):
    inputs = tmp_path / "in"
    _write(inputs / "good.atif.json", good)
    for name, break_it in LEFT_OUT.items():
        trajectory = copy.deepcopy(good)
        break_it(trajectory)
        _write(inputs / f"{name}.atif.json", trajectory)
    out = tmp_path / "ds"
    proc = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "build", str(inputs), "--out", str(out),
                           "--no-progress"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    refused = [line for line in proc.stderr.splitlines() if line.startswith("refused:")]
    assert sorted(line.split(f"{inputs}/")[1].split(".atif.json")[0] for line in refused) == sorted(LEFT_OUT)
    assert "1 rollouts" in proc.stdout
    assert not list(tmp_path.glob("*.atif-import-*"))


def test_a_capture_whose_server_gave_no_logprobs_keeps_its_ids_through_export_and_import(tmp_path):
    from rollout_dataset.atif.export import trajectory_document
    from rollout_dataset.export import export_rollout
    from support.synthetic_records import make_record

    later = [{"role": "user", "content": "call 0"}, {"role": "assistant", "content": "answer 0"},
             {"role": "user", "content": "more"}]
    records = [make_record(0, [1, 2, 3], [4, 5], logprobs=None),
               make_record(1, [1, 2, 3, 4, 5, 6], [7, 8], logprobs=None, messages=later)]
    captured = export_rollout(records, session_id="s", capture_level="tokens")  # a streamed Responses capture's shape
    trajectory = trajectory_document(records, captured, {"rollout_id": "a" * 32, "harness": "h", "model": "m"})
    documents = import_documents(AtifSource(_write(tmp_path / "t.atif.json", trajectory), tmp_path))
    assert documents["summary.json"]["capture_level"] == "tokens"
    rows = [(s["input_ids"], s["loss_mask"], s["logprobs"]) for s in documents["rollout.json"]["sequences"]]
    assert rows == [(s["input_ids"], s["loss_mask"], s["logprobs"]) for s in captured["sequences"]]
    assert all(c["per_token_logps"] is None for c in documents["trace.json"]["calls"])
    assert check_document(documents["rollout.json"], "rollout", "rollout.json") == []


def test_tool_call_arguments_keep_their_text_as_sampled_through_export_and_import(tmp_path):
    from rollout_dataset.atif.export import trajectory_document
    from rollout_dataset.export import export_rollout
    from support.synthetic_records import make_record

    sampled = '{"cmd":"ls -la","n":1.0,"s":"caf\\u00e9"}'  # compact, a float written 1.0, an escape: as gpt-oss samples
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": sampled}}
    records = [make_record(0, [1, 2, 3], [4, 5], response_message={"role": "assistant", "content": None,
                                                                   "tool_calls": [call]}, finish_reason="tool_calls")]
    captured = export_rollout(records, session_id="s", capture_level="tokens")
    trajectory = trajectory_document(records, captured, {"rollout_id": "a" * 32, "harness": "h", "model": "m"})
    documents = import_documents(AtifSource(_write(tmp_path / "t.atif.json", trajectory), tmp_path))
    (record,) = documents["trace.json"]["calls"]
    assert record["response"]["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == sampled


def test_a_reply_the_harness_sent_back_changed_comes_back_from_export_and_import_as_sent(tmp_path):
    from rollout_dataset.atif.export import trajectory_document
    from rollout_dataset.export import export_rollout
    from support.synthetic_records import make_record

    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}
    first = [{"role": "user", "content": "list the files"}]
    answer = {"role": "assistant", "content": None, "reasoning": "ls will do", "tool_calls": [call]}
    sent_back = {"role": "assistant", "content": None, "tool_calls": [call]}  # the harness dropped the reasoning
    second = first + [sent_back, {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}]
    records = [make_record(0, [1, 2, 3], [4, 5], messages=first, response_message=answer, finish_reason="tool_calls"),
               make_record(1, [1, 2, 3, 4, 5, 6], [7, 8], messages=second,
                           response_message={"role": "assistant", "content": "a.txt"})]
    captured = export_rollout(records, session_id="s", capture_level="tokens")
    trajectory = trajectory_document(records, captured, {"rollout_id": "a" * 32, "harness": "h", "model": "m"})
    atif.Trajectory.model_validate(trajectory)
    documents = import_documents(AtifSource(_write(tmp_path / "t.atif.json", trajectory), tmp_path))
    imported = documents["trace.json"]["calls"]
    assert imported[1]["request"]["messages"][1] == sent_back  # not the answer with its reasoning
    assert imported[0]["response"]["choices"][0]["message"]["content"] is None  # null, not ""
    assert imported[0]["response"]["choices"][0]["message"]["reasoning_content"] == "ls will do"


def test_exporting_a_dataset_whose_rollout_id_is_a_path_writes_nothing_outside_out(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_synthetic_rollout(tmp_path / "art", n_turns=2, context_tokens=100)
    subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "build", str(tmp_path / "art"), "--out",
                    str(tmp_path / "ds"), "--no-progress"], check=True, capture_output=True, timeout=120)
    for shard in (tmp_path / "ds" / "data").glob("*/*.parquet"):  # a hostile dataset: its rows name a path
        table = pq.read_table(shard)
        if "rollout_id" in table.column_names:
            column = pa.array(["../../escaped"] * table.num_rows)
            pq.write_table(table.set_column(table.column_names.index("rollout_id"), "rollout_id", column), shard)
    out = tmp_path / "out" / "x" / "y"
    proc = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "export", "--format", "atif",
                           str(tmp_path / "ds"), "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "rollout_id '../../escaped' is not a rollout id" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert list(tmp_path.rglob("*.atif.json")) == []


def test_a_trajectory_in_a_folder_that_links_out_of_it_is_refused(tmp_path, good):
    elsewhere = _write(tmp_path / "elsewhere" / "private.atif.json", good)
    job = tmp_path / "job" / "trial" / "agent"
    job.mkdir(parents=True)
    (job / "trajectory.json").symlink_to(elsewhere)
    from rollout_dataset.atif.importer import find_atif_sources

    (source,) = find_atif_sources([tmp_path / "job"])
    with pytest.raises(SchemaValidationError) as caught:
        import_documents(source)
    file, where, reason = caught.value.failures[0]
    assert file.endswith("agent/trajectory.json") and "outside the input" in reason


def _tool_trajectory(observation: str) -> dict[str, Any]:
    """A small text-level trajectory: a user task, a tool call whose result is `observation`, a final answer."""
    return {"schema_version": "ATIF-v1.6", "session_id": "s", "agent": {"name": "a", "version": "1", "model_name": "m"},
            "steps": [{"step_id": 1, "source": "user", "message": "list the files"},
                      {"step_id": 2, "source": "agent", "message": "",
                       "tool_calls": [{"tool_call_id": "c1", "function_name": "ls", "arguments": {}}],
                       "observation": {"results": [{"source_call_id": "c1", "content": observation}]}},
                      {"step_id": 3, "source": "agent", "message": "done"}]}


def test_a_file_with_a_utf8_byte_order_mark_imports(tmp_path):
    path = tmp_path / "t.atif.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(_tool_trajectory("a b c")).encode())
    documents = import_documents(AtifSource(path, tmp_path))
    assert documents["summary.json"]["captured_calls"] == 2


@pytest.mark.parametrize("version", ["1.4", "ATIF-v9.0"])
def test_a_version_that_is_no_atif_version_is_refused_naming_the_field(tmp_path, version):
    trajectory = {**_tool_trajectory("x"), "schema_version": version}
    file, where, reason = _refusal(tmp_path, trajectory)
    assert file.endswith("t.atif.json") and where == "$.schema_version" and version in reason


def test_a_trial_without_a_trajectory_is_named_and_the_other_trials_of_the_job_build(tmp_path):
    job = tmp_path / "job"
    for name in ("good", "empty"):
        (job / name / "agent").mkdir(parents=True)
        (job / name / "result.json").write_text(json.dumps({"trial_name": name, "task_name": f"t-{name}",
                                                            "verifier_result": {"rewards": {"reward": 1.0}}}))
    (job / "good" / "agent" / "trajectory.json").write_text(json.dumps(_tool_trajectory("a b")))
    (job / "result.json").write_text(json.dumps({"id": "job", "n_total_trials": 2}))  # the job's own result
    proc = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "build", str(job), "--out",
                           str(tmp_path / "ds"), "--no-progress"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    refused = [line for line in proc.stderr.splitlines() if line.startswith("refused:")]
    assert refused == [f"refused: {job / 'empty' / 'agent' / 'trajectory.json'}: $: is missing: the Harbor trial "
                       "folder has result.json but no agent/trajectory.json (its agent wrote no trajectory) "
                       "(left out of the dataset)"]
    assert "1 rollouts" in proc.stdout


def test_an_observation_over_the_cell_limit_builds_and_its_export_names_the_rollout_and_writes_nothing(tmp_path):
    source = _write(tmp_path / "in" / "huge.atif.json", _tool_trajectory("x" * 3_000_000))
    out, exported = tmp_path / "ds", tmp_path / "exported"
    built = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "build", str(source.parent), "--out", str(out),
                            "--no-progress"], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    proc = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "export", "--format", "atif", str(out),
                           "--out", str(exported)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("error: ") and "rollout " in error and "cut to the cell limit" in error
    assert "(imported from in/huge.atif.json)" in error
    assert not exported.exists()


def test_an_object_that_looks_like_the_imports_own_reference_comes_back_as_it_was(tmp_path):
    trajectory = _tool_trajectory("a result long enough to be stored by reference, not inline")
    trajectory["extra"] = {"rollout_dataset:sha256": "0" * 64, "note": {"rollout_dataset:ids": [0, "logprobs"]}}
    documents = import_documents(AtifSource(_write(tmp_path / "t.atif.json", trajectory), tmp_path))
    from rollout_dataset.atif.export import trajectory_document

    assert trajectory_document(documents["trace.json"]["calls"], documents["rollout.json"],
                               documents["summary.json"]) == trajectory
