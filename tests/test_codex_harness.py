"""`--harness codex`: OpenAI's Codex CLI (real, `codex exec`) captured through the proxy over the
Responses API, offline against the local backend's `script` policy driving its `exec_command` tool."""

from __future__ import annotations

import json

import pytest

from rollout_dataset.capture import capture_rollout
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.harness import find_codex, resolve_harness
from rollout_dataset.schema.check import validate_path
from rollout_dataset.tasks import load_tasks

TASK_INDEX = 3


def test_the_codex_preset_points_a_responses_provider_at_the_proxy():
    preset = resolve_harness("codex", context_tokens=32768)
    config = preset.env["ROLLOUT_CODEX_CONFIG"]
    assert 'wire_api = "responses"' in config and 'base_url = "{base_url}"' in config
    assert 'env_key = "OPENAI_API_KEY"' in config and "model_context_window = 32768" in config
    assert "codex" in preset.command and " exec " in preset.command and "{task_file}" in preset.command


@pytest.mark.harness
@pytest.mark.skipif(not find_codex(), reason="Codex is not installed: run `make npm-tools` (or set CODEX_BIN)")
def test_codex_solves_through_the_proxy_and_its_capture_is_token_level_with_roles_and_masks(tmp_path):
    task = load_tasks("builtin", seed=0)[TASK_INDEX]
    write = "cat > solution.py <<'EOF'\n" + task.reference_solution.rstrip() + "\nEOF"
    steps = [{"text": "", "tool_calls": [{"name": "exec_command", "arguments": {"cmd": write}}]}]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": steps, "final": "solution.py is written."}))
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", task_index=TASK_INDEX, harness="codex",
                                           policy="script", script=script, timeout_s=150))
    assert result.ok, (result.errors, result.validation_failures)
    assert validate_path(result.out_dir) == []
    summary = result.summary
    assert summary["harness"] == "codex" and summary["env_reward"] == 1.0 and summary["harness_exit_code"] == 0
    assert summary["capture_level"] == "tokens" and summary["trainable"]
    calls = json.loads((result.out_dir / "trace.json").read_text())["calls"]
    generation = [c for c in calls if c["endpoint"] == "/v1/responses"]
    assert len(generation) >= 2 and all(c["stream"] and c["capture_level"] == "tokens" for c in generation)
    document = json.loads((result.out_dir / "rollout.json").read_text())
    agent = [s for s in document["sequences"] if s["role"] == "agent"]
    assert agent and agent[0]["n_turns"] >= 2
    assert summary["tool_calls_by_name"].get("exec_command") == 1
