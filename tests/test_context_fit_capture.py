"""Context fitting in captures: opencode (real, it always asks max_tokens 32000) on a local backend with
a small context completes with fitting and fails with the server's 400 without it; a built-in rollout
whose prompt outgrows the context ends with stop reason `context_exhausted`."""

from __future__ import annotations

import json

import pytest

from rollout_dataset.capture import capture_rollout
from rollout_dataset.recipes.coding import CaptureConfig
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
                         script=script_file, timeout_s=150, local_max_model_len=SMALL_CONTEXT, **kwargs)


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
                                           max_turns=10, local_max_model_len=2000, max_tokens=400))
    assert validate_path(result.out_dir) == []
    summary = result.summary
    assert summary["stop_reason"] == "context_exhausted" and summary["context_fit"]["context_exhausted"]
    assert not [e for e in summary["errors"] if e["kind"] == "upstream_error"]
    calls = json.loads((result.out_dir / "trace.json").read_text())["calls"]
    assert calls[-1]["error"]["kind"] == "context_exhausted" and calls[-1]["status"] == 400
    assert all(c["status"] == 200 for c in calls[:-1]) and summary["capture_level"] == "tokens"


def test_an_external_harness_whose_prompt_fills_the_context_is_stopped_as_context_exhausted(tmp_path):
    import sys

    client = tmp_path / "client.py"
    client.write_text(
        "import json, os, time, urllib.request, urllib.error\n"
        "body = {'model': os.environ['ROLLOUT_MODEL'], 'messages': [{'role': 'user', 'content': 'word ' * 3000}],"
        " 'max_tokens': 10}\n"
        "req = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions',"
        " data=json.dumps(body).encode(), headers={'content-type': 'application/json'})\n"
        "try:\n    urllib.request.urlopen(req)\nexcept urllib.error.HTTPError as exc:\n    print(exc.code)\n"
        "time.sleep(60)  # a harness that keeps going: the capture stops it\n")
    out = tmp_path / "runs" / "out"  # the sandbox hides the output folder's parent, not the client
    result = capture_rollout(CaptureConfig(out_dir=out, task_index=0, harness=f"cmd:{sys.executable} {client}",
                                           timeout_s=60, local_max_model_len=1000))
    assert validate_path(result.out_dir) == []
    assert result.summary["stop_reason"] == "context_exhausted" and result.summary["timings"]["agent_s"] < 30
    assert result.summary["context_fit"]["context_exhausted"] and not result.summary["errors"]


def test_the_context_options_reach_capture_and_batch_configs_and_the_bare_proxy_does_not_fit_by_default():
    import argparse

    from rollout_dataset.cli import batch_cmd, capture_cmd, proxy_cmd

    def parse(module, argv):
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        return parser.parse_args(argv)

    capture = capture_cmd.config_from_args(parse(capture_cmd, ["--max-tokens-cap", "512"]))
    assert capture.max_tokens_cap == 512 and capture.fit_context is True
    assert capture_cmd.config_from_args(parse(capture_cmd, ["--no-fit-context"])).fit_context is False
    batch = batch_cmd.config_from_args(parse(batch_cmd, ["--out", "b", "--num-seeds", "1", "--max-tokens-cap", "64"]),
                                       argv=[])
    assert batch.max_tokens_cap == 64 and batch.fit_context is True
    policy = proxy_cmd.context_policy(parse(proxy_cmd, ["--upstream", "http://h/v1", "--trace-dir", "t"]))
    assert policy.fit_context is False and policy.max_tokens_cap is None
