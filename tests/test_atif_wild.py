"""ATIF trajectories with the shapes of files others publish (tests/data/atif_wild, written by
tests/support/atif_wild_fixtures.py): each imports, files of several agents, models and capture levels
build into one dataset, every config the card lists loads with `datasets` alone, and the export of the
dataset gives each file back (docs/atif.md: "Round trip"), logprobs as float32."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from rollout_dataset.atif.export import trajectory_document
from rollout_dataset.atif.importer import AtifSource, import_documents
from support.atif_wild_fixtures import SUMMARISED as SUMMARISED_NAME, fixtures, rendered
from test_builder_contracts import run_without_package

WILD = Path(__file__).parent / "data" / "atif_wild"
FILES = sorted(WILD.glob("*/*.atif.json"))
SUMMARISED = WILD / SUMMARISED_NAME


def _cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rollout_dataset.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def _rows(dataset: Path, config: str) -> list[dict[str, Any]]:
    return [r for p in sorted((dataset / "data" / config).glob("*.parquet")) for r in pq.read_table(p).to_pylist()]


def _as_dataset_stores(value: Any, key: str = "") -> Any:
    """`value` with every logprob rounded to float32, the dataset's type (the one normalisation of a round trip)."""
    if isinstance(value, dict):
        return {k: _as_dataset_stores(v, k) for k, v in value.items()}
    if isinstance(value, list):
        if key == "logprobs":
            return [None if v is None else float(np.float32(v)) for v in value]
        return [_as_dataset_stores(v, key) for v in value]
    return value


def _import(tmp_path: Path, trajectory: dict[str, Any] | str, name: str = "t.atif.json") -> dict[str, Any]:
    path = tmp_path / name
    path.write_text(trajectory if isinstance(trajectory, str) else json.dumps(trajectory), encoding="utf-8")
    return import_documents(AtifSource(path, tmp_path))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Any]:
    """One build of every sample file, and its export."""
    root = tmp_path_factory.mktemp("wild")
    out, exported = root / "ds", root / "exported"
    proc = _cli("build", str(WILD), "--out", str(out), "--no-progress")
    export = _cli("export", "--format", "atif", str(out), "--out", str(exported))
    return {"out": out, "exported": exported, "build": proc, "export": export}


def test_the_sample_files_are_what_their_generator_writes():
    expected = fixtures()
    assert sorted(str(f.relative_to(WILD)) for f in FILES) == sorted(expected)
    for name, document in expected.items():
        assert (WILD / name).read_text(encoding="utf-8") == rendered(document), name


def test_every_sample_file_builds_into_one_dataset_across_agents_models_and_levels(built):
    assert built["build"].returncode == 0, built["build"].stderr
    assert "refused:" not in built["build"].stderr
    summaries = _rows(built["out"], "summary")
    assert len(summaries) == len(FILES)
    assert {s["capture_level"] for s in summaries} == {"tokens", "text"}
    assert len({s["model"] for s in summaries}) >= 3
    assert all(s["tokenizer"] is None for s in summaries if s["capture_level"] == "text")


def test_the_export_of_the_dataset_gives_each_file_back(built):
    assert built["export"].returncode == 0, built["export"].stderr
    for summary in _rows(built["out"], "summary"):
        source = WILD.parent / json.loads(summary["imported_from"])["file"]
        exported = json.loads((built["exported"] / f"{summary['rollout_id']}.atif.json").read_text(encoding="utf-8"))
        assert exported == _as_dataset_stores(json.loads(source.read_text(encoding="utf-8"))), source.name


def test_every_config_the_card_lists_loads_with_datasets_alone(built, tmp_path):
    out = built["out"]
    listed = run_without_package(
        "import json, yaml, sys\n"
        f"text = open({str(out / 'README.md')!r}).read().split('---')[1]\n"
        "print(json.dumps([c['config_name'] for c in yaml.safe_load(text)['configs']]))\n", tmp_path)
    assert listed.returncode == 0, listed.stderr
    configs = json.loads(listed.stdout)
    assert "held_out_tests" not in configs  # no rows: left out of the card, its empty shard kept
    assert list((out / "data" / "held_out_tests").glob("*.parquet"))
    loaded = run_without_package(
        "import datasets, json\n"
        f"print(json.dumps({{c: len(datasets.load_dataset({str(out)!r}, c, split='train')) for c in {configs!r}}}))\n",
        tmp_path)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    counts = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert set(counts) == set(configs) and all(n > 0 for n in counts.values())


def test_text_imports_get_conversations_rows(built):
    text_level = {s["rollout_id"] for s in _rows(built["out"], "summary") if s["capture_level"] == "text"}
    assert text_level <= {c["rollout_id"] for c in _rows(built["out"], "conversations")}


def test_a_prompt_that_restarts_after_summarisation_starts_a_new_sequence(tmp_path):
    documents = _import(tmp_path, SUMMARISED.read_text(encoding="utf-8"))
    assert documents["summary.json"]["capture_level"] == "tokens"
    roots = {s["root_id"] for s in documents["rollout.json"]["sequences"]}
    assert len(roots) >= 2  # the call after the summary is a root of its own, not a refusal


def test_an_empty_first_user_message_imports_with_the_first_user_message_that_has_text(tmp_path):
    trajectory = json.loads(SUMMARISED.read_text(encoding="utf-8"))
    first_user = next(s for s in trajectory["steps"] if s["source"] == "user")
    statement = first_user["message"]
    trajectory["steps"].insert(0, {"step_id": 1, "source": "user", "message": ""})
    for i, step in enumerate(trajectory["steps"]):
        step["step_id"] = i + 1
    documents = _import(tmp_path, trajectory)
    assert documents["task.json"]["instruction"] == statement


def _openai_sequence_errors(messages: list[dict[str, Any]]) -> list[str]:
    """Where a chat breaks OpenAI's rule: an assistant message's tool calls are each answered by a tool message."""
    errors = []
    for i, message in enumerate(messages):
        ids = [c["id"] for c in message.get("tool_calls") or []]
        following = []
        for later in messages[i + 1:]:
            if later["role"] != "tool":
                break
            following.append(later["tool_call_id"])
        if ids and sorted(ids) != sorted(following):
            errors.append(f"message {i}: calls {ids} answered by {following}")
    return errors


def test_tool_calls_in_the_rebuilt_chat_are_answered_by_tool_messages(tmp_path):
    records = _import(tmp_path, SUMMARISED.read_text(encoding="utf-8"))["trace.json"]["calls"]
    assert any(m.get("tool_calls") for r in records for m in r["request"]["messages"])
    for record in records:
        assert _openai_sequence_errors(record["request"]["messages"]) == []


def test_an_image_part_is_kept_as_an_image_reference_never_as_text(tmp_path):
    trajectory = {"schema_version": "ATIF-v1.6", "session_id": "s", "agent": {"name": "a", "version": "1"},
                  "steps": [{"step_id": 1, "source": "user", "message": [
                      {"type": "text", "text": "what is on the screen?"},
                      {"type": "image", "source": {"media_type": "image/png", "path": "screenshots/after.png"}}]},
                            {"step_id": 2, "source": "agent", "message": "a login form", "model_name": "m"}]}
    documents = _import(tmp_path, trajectory)
    content = documents["trace.json"]["calls"][0]["request"]["messages"][0]["content"]
    assert content == [{"type": "text", "text": "what is on the screen?"},
                       {"type": "image_url", "image_url": {"url": "screenshots/after.png"}}]
    summary = documents["summary.json"]
    assert trajectory_document(documents["trace.json"]["calls"], documents["rollout.json"], summary) == trajectory


def test_a_harbor_trial_gives_its_model_and_an_unscored_trial_says_why(tmp_path):
    trajectory = json.loads((WILD / "qa-runner" / "signup.atif.json").read_text(encoding="utf-8"))
    del trajectory["agent"]["model_name"]
    trial = tmp_path / "trial"
    (trial / "agent").mkdir(parents=True)
    (trial / "agent" / "trajectory.json").write_text(json.dumps(trajectory), encoding="utf-8")
    (trial / "result.json").write_text(json.dumps({
        "task_name": "login", "trial_name": "trial", "started_at": "2026-01-01T00:00:00",
        "agent_info": {"name": "qa", "version": "1", "model_info": {"name": "gpt-5.5", "provider": "openai"}},
        "verifier_result": {"rewards": {}}}), encoding="utf-8")
    summary = import_documents(AtifSource(trial / "agent" / "trajectory.json", tmp_path,
                                          trial / "result.json"))["summary.json"]
    assert summary["model"] == "openai/gpt-5.5"
    assert summary["env_reward"] is None and "no numeric verifier reward" in summary["unscored_reason"]


def test_export_import_export_is_stable(tmp_path):
    source = json.loads(SUMMARISED.read_text(encoding="utf-8"))
    first = _import(tmp_path, source, "a.atif.json")
    once = trajectory_document(first["trace.json"]["calls"], first["rollout.json"], first["summary.json"])
    second = _import(tmp_path, once, "b.atif.json")
    twice = trajectory_document(second["trace.json"]["calls"], second["rollout.json"], second["summary.json"])
    assert twice == once == _as_dataset_stores(source)
    assert second["summary.json"]["harness"] == "atif:terminus-2"


def test_a_text_rollout_never_conflicts_but_two_tokenizers_are_named_by_their_source_files(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    tokens = json.loads(SUMMARISED.read_text(encoding="utf-8"))
    other = copy.deepcopy(tokens)
    other["agent"]["model_name"] = "someone/other-model"
    other["session_id"] = "other"
    (inputs / "a.atif.json").write_text(json.dumps(tokens), encoding="utf-8")
    (inputs / "b.atif.json").write_text(json.dumps(other), encoding="utf-8")
    failed = _cli("build", str(inputs), "--out", str(tmp_path / "ds"), "--no-progress")
    assert failed.returncode == 1
    error = [line for line in failed.stderr.splitlines() if line.startswith("error:")][0]
    assert str(inputs / "b.atif.json") in error and ".atif-import-" not in error
    skipped = _cli("build", str(inputs), "--out", str(tmp_path / "ds"), "--no-progress", "--skip-invalid")
    assert skipped.returncode == 0, skipped.stderr
    assert f"refused: {inputs / 'b.atif.json'}" in skipped.stderr and "1 rollouts" in skipped.stdout


def test_text_rollouts_of_another_model_append_to_a_dataset_of_tokens_rollouts(tmp_path):
    out = tmp_path / "ds"
    first = _cli("build", str(SUMMARISED), "--out", str(out), "--no-progress")
    assert first.returncode == 0, first.stderr
    appended = _cli("build", str(WILD / "mini-swe-agent"), "--out", str(out), "--append", "--no-progress")
    assert appended.returncode == 0, appended.stderr
    levels = sorted((s["capture_level"], s["tokenizer"]) for s in _rows(out, "summary"))
    assert levels == [("text", None), ("tokens", "openai/gpt-4o")]
