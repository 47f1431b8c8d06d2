"""`--harness claude-code`: Anthropic's Claude Code (real, `claude -p`) captured through the proxy over the
Messages API, offline against the local backend's `script` policy driving its `Bash` tool."""

from __future__ import annotations

import json

import pytest

from rollout_dataset.capture import capture_rollout
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.harness import resolve_harness
from rollout_dataset.harness.claude_code import find_claude_code
from rollout_dataset.schema.check import validate_path
from rollout_dataset.tasks import load_tasks

TASK_INDEX = 3


def test_the_claude_code_preset_points_claude_at_the_proxy_with_limits_from_the_context():
    preset = resolve_harness("claude-code", context_tokens=32768)
    assert 'ANTHROPIC_BASE_URL="${OPENAI_BASE_URL%/v1}"' in preset.command
    assert 'ANTHROPIC_AUTH_TOKEN="$OPENAI_API_KEY"' in preset.command and " -p " in preset.command
    assert preset.env["ANTHROPIC_MODEL"] == preset.env["ANTHROPIC_SMALL_FAST_MODEL"] == "{model}"
    assert preset.env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and preset.env["DISABLE_TELEMETRY"] == "1"
    assert "CLAUDE_CODE_MAX_OUTPUT_TOKENS=8192 " in preset.command
    assert "CLAUDE_CODE_MAX_CONTEXT_TOKENS=32768 " in preset.command
    assert not any("KEY" in name or "TOKEN" in name and "MAX" not in name for name in preset.env)


@pytest.mark.harness
@pytest.mark.skipif(not find_claude_code(), reason="Claude Code is not installed: run `make npm-tools`")
def test_claude_code_solves_through_the_proxy_and_its_capture_is_token_level(tmp_path):
    task = load_tasks("builtin", seed=0)[TASK_INDEX]
    write = "cat > solution.py <<'EOF'\n" + task.reference_solution.rstrip() + "\nEOF"
    steps = [{"text": "", "tool_calls": [{"name": "Bash", "arguments": {"command": write, "description": "write"}}]}]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": steps, "final": "solution.py is written."}))
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", task_index=TASK_INDEX, harness="claude-code",
                                           policy="script", script=script, timeout_s=200))
    assert result.ok, (result.errors, result.validation_failures)
    assert validate_path(result.out_dir) == []
    summary = result.summary
    assert summary["harness"] == "claude-code" and summary["env_reward"] == 1.0
    calls = json.loads((result.out_dir / "trace.json").read_text())["calls"]
    generation = [c for c in calls if c["endpoint"] == "/v1/messages"]
    assert len(generation) >= 2
    assert all(c["capture_level"] == "tokens" and c["prompt_token_ids"] and c["completion_token_ids"]
               and c["per_token_logps"] for c in generation)
    document = json.loads((result.out_dir / "rollout.json").read_text())
    agent = [s for s in document["sequences"] if s["role"] == "agent"]
    assert agent and agent[0]["n_turns"] >= 2
    assert summary["capture_level"] == "tokens" and summary["trainable"]
    assert summary["tool_calls_by_name"].get("Bash") == 1
    from rollout_dataset.builder.rows import conversation_rows, read_artifact, sequence_rows

    art = read_artifact(result.out_dir)
    (conversation,) = conversation_rows(art, sequence_rows(art))
    roles = [m["role"] for m in conversation["messages"]]
    assert roles[0] == "system" and "tool" in roles and roles[-1] == "assistant"
    calling = [m for m in conversation["messages"] if m["tool_calls"]]
    assert calling and "solution.py" in calling[0]["tool_calls"][0]["function"]["arguments"]
    assert conversation["tools"] and '"Bash"' in conversation["tools"]


@pytest.mark.harness
@pytest.mark.skipif(not find_claude_code(), reason="Claude Code is not installed: run `make npm-tools`")
def test_claude_code_never_gets_the_real_key_only_the_proxy_sends_it(tmp_path):
    real_key = "sk-real-upstream-claude-1a2b3c4d"
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": [], "final": "done"}))
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", task_index=TASK_INDEX, harness="claude-code",
                                           policy="script", script=script, timeout_s=200, api_key=real_key))
    calls = json.loads((result.out_dir / "trace.json").read_text())["calls"]
    assert calls and all(c["endpoint"].startswith("/v1/messages") for c in calls)
    for call in calls:  # what Claude Code sent: its own dummy key, never the real one
        assert real_key not in json.dumps(call)
    for path in result.out_dir.rglob("*"):
        if path.is_file():
            assert real_key.encode() not in path.read_bytes()


@pytest.mark.harness
@pytest.mark.skipif(not find_claude_code(), reason="Claude Code is not installed: run `make npm-tools`")
def test_a_claude_code_rollout_reads_as_a_trace_viewer_session(tmp_path):
    from rollout_dataset.builder.rows import read_artifact
    from rollout_dataset.builder.traces import session_lines, validate_session

    task = load_tasks("builtin", seed=0)[TASK_INDEX]
    write = "cat > solution.py <<'EOF'\n" + task.reference_solution.rstrip() + "\nEOF"
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": [{"text": "Writing it.", "tool_calls": [
        {"name": "Bash", "arguments": {"command": write, "description": "write"}}]}], "final": "Done."}))
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", task_index=TASK_INDEX, harness="claude-code",
                                           policy="script", script=script, timeout_s=200))
    lines = session_lines(read_artifact(result.out_dir))
    validate_session(lines)
    roles = [line["message"]["role"] for line in lines[1:]]
    assert roles[0] == "system" and "tool" in roles and roles[-1] == "assistant"
    assert lines[-1]["message"].get("model") == "local"


@pytest.mark.harness
@pytest.mark.skipif(not find_claude_code(), reason="Claude Code is not installed: run `make npm-tools`")
def test_a_batch_runs_claude_code_with_the_oracle_on_the_embedded_default(tmp_path):
    from rollout_dataset.cli import main

    out = tmp_path / "batch"
    assert main(["batch", "--smoke", "--env-option", "harness=claude-code", "--concurrency", "1", "--no-progress",
                 "--no-dataset", "--out", str(out)]) == 0
    summaries = [json.loads(p.read_text()) for p in sorted((out / "rollouts").glob("*/summary.json"))]
    assert len(summaries) == 2 and {s["harness"] for s in summaries} == {"claude-code"}
    assert all(s["capture_level"] == "tokens" and s["agent_turns"] >= 2 and s["env_reward"] > 0 for s in summaries)


def test_a_batch_refuses_an_unknown_harness_option_naming_it(tmp_path, capsys):
    from rollout_dataset.cli import main

    assert main(["batch", "--smoke", "--env-option", "harness=claude", "--no-progress", "--out", str(tmp_path / "b")]) == 2
    assert "--env-option harness=claude: unknown harness" in capsys.readouterr().err
