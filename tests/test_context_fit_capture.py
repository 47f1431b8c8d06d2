"""Context fitting in captures: opencode (real, it always asks max_tokens 32000) on a local backend with
a small context completes with fitting and fails with the server's 400 without it; a built-in rollout
whose prompt outgrows the context ends with stop reason `context_exhausted`."""

from __future__ import annotations

import json

import pytest

from rollout_dataset.capture import CaptureConfig, capture_rollout
from rollout_dataset.errors import UpstreamStatusError
from rollout_dataset.harness import find_opencode
from rollout_dataset.schema.check import validate_path
from rollout_dataset.tasks import load_tasks

TASK_INDEX = 3
SMALL_CONTEXT = 24000  # below opencode's max_tokens 32000, above its ~10k-token prompt

needs_opencode = pytest.mark.skipif(not find_opencode(), reason="opencode is not installed: run `make npm-tools`")


@pytest.fixture(scope="module")
def script_file(tmp_path_factory):
    task = load_tasks("builtin", seed=0)[TASK_INDEX]
    write = "cat > solution.py <<'EOF'\n" + task.reference_solution.rstrip() + "\nEOF"
    steps = [{"text": "I will write the solution.",
              "tool_calls": [{"name": "bash", "arguments": {"command": write, "description": "Write solution.py"}}]}]
    path = tmp_path_factory.mktemp("fit-script") / "script.json"
    path.write_text(json.dumps({"steps": steps, "final": "solution.py is written."}))
    return path


def _config(tmp_path, script_file, **kwargs) -> CaptureConfig:
    return CaptureConfig(out_dir=tmp_path / "out", task_index=TASK_INDEX, harness="opencode", policy="script",
                         script=script_file, timeout_s=150, push=False, local_max_model_len=SMALL_CONTEXT, **kwargs)


def _generation(result) -> list[dict]:
    calls = json.loads((result.out_dir / "trace.json").read_text())["calls"]
    return [c for c in calls if c["endpoint"] == "/v1/chat/completions"]


@pytest.mark.harness
@needs_opencode
def test_opencode_completes_on_a_small_context_with_fitting_told_the_models_limits(tmp_path, script_file):
    result = capture_rollout(_config(tmp_path, script_file))  # fit_context is the default
    assert result.ok, (result.errors, result.validation_failures)
    assert validate_path(result.out_dir) == []
    summary = result.summary
    assert summary["env_reward"] == 1.0 and summary["capture_level"] == "tokens"
    assert summary["stop_reason"] == "harness_exit" and summary["context_fit"]["fit_context"] is True
    generation = _generation(result)
    assert generation and all(c["status"] == 200 for c in generation)
    # the preset wrote the model's limits into opencode's config: it asks a quarter of the context
    # (room for its own prompt before it compacts), not its default 32000
    assert {c["requested_sampling_params"]["max_tokens"] for c in generation} == {SMALL_CONTEXT // 4}
    assert all(c["requested_sampling_params"]["max_tokens"] + len(c["prompt_token_ids"]) <= SMALL_CONTEXT
               for c in generation)


@pytest.mark.harness
@needs_opencode
def test_opencode_asking_32000_completes_under_the_cap_and_every_lowered_limit_is_recorded(tmp_path,
                                                                                            script_file):
    result = capture_rollout(_config(tmp_path, script_file, fit_context=False, max_tokens_cap=4000))
    assert result.ok, (result.errors, result.validation_failures)
    assert result.summary["env_reward"] == 1.0
    generation = _generation(result)
    assert generation and all(c["status"] == 200 for c in generation)
    assert {c["requested_sampling_params"]["max_tokens"] for c in generation} == {32000}
    assert {c["upstream_changes"]["max_tokens"] for c in generation} == {4000}
    assert {c["effective_sampling_params"]["max_tokens"] for c in generation} == {4000}
    fit = result.summary["context_fit"]
    assert fit["max_tokens_cap"] == 4000 and fit["calls_lowered"] == len(generation)
    assert fit["lowered"][0] == {"index": generation[0]["index"], "field": "max_tokens", "requested": 32000,
                                 "effective": 4000}


@pytest.mark.harness
@needs_opencode
def test_opencode_without_fitting_gets_the_servers_400_as_before(tmp_path, script_file):
    with pytest.raises(UpstreamStatusError) as failure:
        capture_rollout(_config(tmp_path, script_file, fit_context=False))
    assert failure.value.status == 400 and "cannot be greater than max_model_len=24000" in str(failure.value)


def test_a_builtin_rollout_whose_prompt_outgrows_the_context_ends_as_context_exhausted(tmp_path):
    long_file = {"name": "write_file", "arguments": {"path": "notes.txt", "content": "note " * 150}}
    script = tmp_path / "script.json"
    read = {"name": "read_file", "arguments": {"path": "notes.txt"}}  # a short call, a long tool result
    steps = [{"text": "", "tool_calls": [long_file]}] + [{"text": "", "tool_calls": [read]}] * 8
    script.write_text(json.dumps({"steps": steps, "final": "done"}))
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", task_index=0, policy="script", script=script,
                                           max_turns=10, push=False, local_max_model_len=2000, max_tokens=400))
    assert validate_path(result.out_dir) == []
    summary = result.summary
    assert summary["stop_reason"] == "context_exhausted" and summary["context_fit"]["context_exhausted"]
    assert not [e for e in summary["errors"] if e["kind"] == "upstream_error"]
    calls = json.loads((result.out_dir / "trace.json").read_text())["calls"]
    assert calls[-1]["error"]["kind"] == "context_exhausted" and calls[-1]["status"] == 400
    assert all(c["status"] == 200 for c in calls[:-1]) and summary["capture_level"] == "tokens"
