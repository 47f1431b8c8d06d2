"""ATIF in and out (docs/atif.md): every rollout exports as a valid ATIF v1.8 trajectory (checked by
the PyPI `atif` models), export -> import gives the same sequences, and `build` imports Harbor trials
and bare ATIF files, naming each bad one in one stderr line and building the rest."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import atif
import httpx
import pytest

from rollout_dataset.atif.export import trajectory_document, trajectory_of_folder
from rollout_dataset.atif.importer import AtifSource, import_documents
from rollout_dataset.atif.residue import as_float32
from rollout_dataset.errors import SchemaValidationError
from rollout_dataset.export import export_rollout
from rollout_dataset.schema.check import check_document
from support.api_sessions import TOOLS, chat_session, messages_session, recorded_session, responses_session
from support.synthetic_dataset import write_synthetic_rollout

GOLDEN = Path(__file__).parent / "data" / "golden"
GOLDEN_FOLDERS = ["coding_oracle", "coding_cmd_harness", "crafter_scripted"]


def _rows(document: dict) -> list[tuple]:
    """Sequence rows as a dataset holds them (logprobs are float32 there, and an export writes them so)."""
    return [(s["role"], s["input_ids"], s["loss_mask"], as_float32(s["logprobs"])) for s in document["sequences"]]


def _import(tmp_path: Path, trajectory: dict, name: str = "t.atif.json") -> dict:
    path = tmp_path / name
    path.write_text(json.dumps(trajectory), encoding="utf-8")
    return import_documents(AtifSource(path, tmp_path))


def _round_trip(tmp_path: Path, records: list[dict], summary: dict) -> None:
    """Export the records' rollout as ATIF, import it back: the same sequence rows (ids, masks, logprobs)."""
    original = export_rollout(records, session_id="s", capture_level="tokens")
    trajectory = trajectory_document(records, original, summary)
    atif.Trajectory.model_validate(trajectory)
    documents = _import(tmp_path, trajectory)
    assert _rows(documents["rollout.json"]) == _rows(original)
    assert documents["summary.json"]["capture_level"] == "tokens"
    for name, schema in (("trace.json", "trace"), ("rollout.json", "rollout"), ("turns.json", "turns"),
                         ("summary.json", "summary"), ("task.json", "task")):
        assert check_document(documents[name], schema, name) == []


@pytest.fixture
def synthetic(tmp_path) -> Path:
    folder = tmp_path / "art"
    write_synthetic_rollout(folder, n_turns=3, context_tokens=300, with_aux=True, with_retry=True)
    return folder


def test_a_rollout_exports_as_a_valid_atif_trajectory_with_ids_logprobs_and_side_branches(synthetic):
    trajectory = trajectory_of_folder(synthetic)
    model = atif.Trajectory.model_validate(trajectory)
    assert model.schema_version == "ATIF-v1.8"
    agent_steps = [s for s in model.steps if s.source == "agent"]
    assert len(agent_steps) == 3 and all(s.metrics.prompt_token_ids and s.metrics.logprobs for s in agent_steps)
    assert len(agent_steps[0].metrics.logprobs) == len(agent_steps[0].metrics.completion_token_ids)
    roles = sorted(t.extra["rollout_dataset"]["role"] for t in model.subagent_trajectories)
    assert roles == ["auxiliary", "discarded"]  # the title generator and the retried turn


def test_tool_calls_keep_their_ids_and_their_results_point_at_them():
    model = atif.Trajectory.model_validate(trajectory_of_folder(GOLDEN / "coding_oracle"))
    agent_steps = [s for s in model.steps if s.source == "agent"]
    tool_ids = [c.tool_call_id for s in agent_steps for c in s.tool_calls or []]
    observed = [r.source_call_id for s in agent_steps for r in (s.observation.results if s.observation else [])]
    assert len(tool_ids) == 3 and observed == tool_ids[:2]  # the last call's result never reached the model
    assert model.agent.name == "builtin" and model.agent.tool_definitions


@pytest.mark.parametrize("name", GOLDEN_FOLDERS)
def test_export_then_import_gives_the_same_sequences_for_each_golden_capture(tmp_path, name):
    records = json.loads((GOLDEN / name / "trace.json").read_text())["calls"]
    summary = json.loads((GOLDEN / name / "summary.json").read_text())
    summary["rollout_id"] = "0" * 32
    _round_trip(tmp_path, records, summary)


async def _chat_with_tools(client: httpx.AsyncClient, root: str) -> None:
    await chat_session(client, root, TOOLS)


@pytest.mark.parametrize("drive", [_chat_with_tools, responses_session, messages_session], ids=["chat", "responses", "messages"])
async def test_export_then_import_gives_the_same_sequences_for_every_api(tmp_path, drive):
    records = await recorded_session(tmp_path, drive)
    _round_trip(tmp_path, records, {"rollout_id": "1" * 32, "harness": "builtin", "model": "local"})


def test_a_trajectory_without_token_ids_imports_at_level_text_with_the_reason(tmp_path, synthetic):
    trajectory = trajectory_of_folder(synthetic)
    del trajectory["steps"][2]["metrics"]["prompt_token_ids"]
    documents = _import(tmp_path, trajectory)
    summary = documents["summary.json"]
    assert summary["capture_level"] == "text" and summary["trainable"] is False
    assert summary["imported_from"]["level_reason"].startswith("$.steps[2].metrics.prompt_token_ids is missing")
    assert all(s["input_ids"] == [] for s in documents["rollout.json"]["sequences"])


@pytest.mark.parametrize("break_it, field", [
    (lambda t: t["steps"].__setitem__(1, {**t["steps"][1], "step_id": 7}), "$.steps[1].step_id"),
    (lambda t: t["steps"][2]["metrics"].__setitem__("logprobs", [0.0]), "$.steps[2].metrics.logprobs"),
    (lambda t: t.pop("agent"), "$"),
    (lambda t: t["steps"][0].__setitem__("source", "robot"), "$.steps[0].source"),
    (lambda t: t.__setitem__("steps", []), "$.steps"),
], ids=["out-of-order", "logprobs-misaligned", "no-agent", "bad-source", "no-steps"])
def test_a_bad_trajectory_is_refused_naming_the_file_and_field(tmp_path, synthetic, break_it, field):
    trajectory = copy.deepcopy(trajectory_of_folder(synthetic))
    break_it(trajectory)
    with pytest.raises(SchemaValidationError) as caught:
        _import(tmp_path, trajectory)
    file, path, _reason = caught.value.failures[0]
    assert file.endswith("t.atif.json") and path == field


def _trial(root: Path, name: str, trajectory: dict | str, result: dict) -> Path:
    trial = root / name
    (trial / "agent").mkdir(parents=True)
    text = trajectory if isinstance(trajectory, str) else json.dumps(trajectory)
    (trial / "agent" / "trajectory.json").write_text(text, encoding="utf-8")
    (trial / "result.json").write_text(json.dumps(result), encoding="utf-8")
    return trial


def _result(name: str, reward: float | None, crashed: bool = False) -> dict:
    return {"id": "5f0c3e4a-1b2c-4d5e-8f90-0123456789ab" if name == "good" else None, "task_name": f"task-{name}",
            "trial_name": name, "agent_info": {"name": "terminus-2", "version": "2.0"},
            "verifier_result": None if crashed else {"rewards": {"reward": reward}},
            "exception_info": {"exception_type": "VerifierTimeoutError", "exception_message": "test.sh ran 600 s",
                               "exception_traceback": "", "occurred_at": "2026-01-01T00:00:00"} if crashed else None,
            "started_at": "2026-01-01T00:00:00"}


def test_build_imports_a_harbor_job_and_names_each_bad_trial_in_one_line(tmp_path, synthetic):
    good = trajectory_of_folder(synthetic)
    job = tmp_path / "job"
    _trial(job, "good", good, _result("good", 1.0))
    _trial(job, "truncated", json.dumps(good)[:500], _result("truncated", 1.0))
    shuffled = copy.deepcopy(good)
    shuffled["steps"][0]["step_id"], shuffled["steps"][1]["step_id"] = 2, 1
    _trial(job, "shuffled", shuffled, _result("shuffled", 0.0))
    _trial(job, "crashed", good, _result("crashed", None, crashed=True))
    out = tmp_path / "ds"
    proc = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "build", str(job), "--out", str(out),
                           "--no-progress"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    refused = [line for line in proc.stderr.splitlines() if line.startswith("refused:")]
    assert len(refused) == 3
    assert any("crashed/result.json: $.verifier_result: is null" in line and "VerifierTimeoutError" in line
               for line in refused)
    assert any("truncated/agent/trajectory.json: $: not valid JSON" in line for line in refused)
    assert any("shuffled/agent/trajectory.json: $.steps[0].step_id" in line for line in refused)
    assert "1 rollouts" in proc.stdout
    assert not list(tmp_path.glob("*.atif-import-*"))  # the import folder is gone
    import pyarrow.parquet as pq

    summary = pq.read_table(out / "data" / "summary").to_pylist()[0]
    assert summary["harness"] == "atif:builtin" and summary["env_reward"] == 1.0
    assert summary["rollout_id"] == good["trajectory_id"]
    sequences = pq.read_table(out / "data" / "sequences").to_pylist()
    original = json.loads((synthetic / "trace.json").read_text())["calls"]
    expected = export_rollout(original, session_id="s", capture_level="tokens")["sequences"]
    assert sorted(r["input_ids"] for r in sequences) == sorted(s["input_ids"] for s in expected)


def test_export_command_writes_one_valid_trajectory_per_rollout(tmp_path, synthetic):
    out = tmp_path / "atif"
    proc = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "export", "--format", "atif",
                           str(synthetic.parent), "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    files = list(out.glob("*.atif.json"))
    assert len(files) == 1
    atif.Trajectory.model_validate_json(files[0].read_text())


def test_the_card_says_which_rollouts_came_from_atif(tmp_path, synthetic):
    job = tmp_path / "job"
    trajectory = trajectory_of_folder(synthetic)
    del trajectory["trajectory_id"]  # the trial's own id then: not the captured rollout's
    _trial(job, "good", trajectory, _result("good", 1.0))
    out = tmp_path / "ds"
    proc = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "build", str(job), str(synthetic), "--out",
                           str(out), "--no-progress"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "2 rollouts (2 added" in proc.stdout
    card = (out / "README.md").read_text()
    assert "`atif:builtin" in card and "imported from an ATIF trajectory" in card


def test_export_from_a_built_dataset_gives_the_trajectory_of_the_artifact_folder(tmp_path, synthetic):
    out = tmp_path / "ds"
    subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "build", str(synthetic), "--out", str(out),
                    "--no-progress"], capture_output=True, text=True, timeout=120, check=True)
    proc = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "export", "--format", "atif", str(out),
                           "--out", str(tmp_path / "atif")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (file,) = (tmp_path / "atif").glob("*.atif.json")
    from_dataset = atif.Trajectory.model_validate_json(file.read_text())
    from_folder = atif.Trajectory.model_validate(trajectory_of_folder(synthetic))
    assert [s.metrics.completion_token_ids if s.metrics else None for s in from_dataset.steps] == \
        [s.metrics.completion_token_ids if s.metrics else None for s in from_folder.steps]
    assert [s.message for s in from_dataset.steps] == [s.message for s in from_folder.steps]
    assert len(from_dataset.subagent_trajectories) == len(from_folder.subagent_trajectories)
    assert json.loads(file.read_text()) == trajectory_of_folder(synthetic)  # logprobs too: float32 in both


def test_a_capture_exported_imported_and_exported_again_is_the_same_trajectory(tmp_path, synthetic):
    once = trajectory_of_folder(synthetic)
    documents = _import(tmp_path, once)
    again = trajectory_document(documents["trace.json"]["calls"], documents["rollout.json"], documents["summary.json"],
                                documents["task.json"])
    assert again == once  # the agent's name is not prefixed again, its version and every step kept


def test_a_folder_with_neither_artifacts_nor_trajectories_is_still_named(tmp_path, synthetic):
    job = tmp_path / "job"
    _trial(job, "good", trajectory_of_folder(synthetic), _result("good", 1.0))
    (tmp_path / "empty").mkdir()
    proc = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "build", str(job), str(tmp_path / "empty"),
                           "--out", str(tmp_path / "ds"), "--no-progress"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "empty: no artifact folder" in proc.stderr
    assert not (tmp_path / "ds").exists() and not list(tmp_path.glob("*.atif-import-*"))


def test_a_library_build_takes_atif_files_through_imported_inputs_and_leaves_no_import_folder(tmp_path, synthetic):
    from rollout_dataset import build
    from rollout_dataset.atif.importer import imported_inputs

    bare = tmp_path / "one.atif.json"
    bare.write_text(json.dumps(trajectory_of_folder(synthetic)))
    broken = tmp_path / "broken.atif.json"
    broken.write_text("{")
    out = tmp_path / "ds"
    with imported_inputs([bare, broken], out) as inputs:
        result = build(inputs.paths, out)
    assert result.total_rollouts == 1
    assert [Path(file).name for file, _ in inputs.refused] == ["broken.atif.json"]
    assert not list(tmp_path.glob("*.atif-import-*"))
