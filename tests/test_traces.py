"""Each rollout as a session of the Hub's agent-trace viewer (STS JSONL): validated, round-tripped,
and pushed append-safe to a companion repo."""

from __future__ import annotations

import json

import pytest

from rollout_dataset.builder import build
from rollout_dataset.builder.rows import chat_message, read_artifact, response_message
from rollout_dataset.builder.traces import final_agent_call, session_lines, session_messages, validate_session
from rollout_dataset.capture import capture_rollout
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.errors import SchemaValidationError


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    root = tmp_path_factory.mktemp("sts")
    capture_rollout(CaptureConfig(out_dir=root / "art", timeout_s=120))  # oracle: tool calls
    build([root / "art"], root / "ds", progress=False)
    return root


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_rollout_gets_a_session_file_that_validates(captured):
    art = read_artifact(captured / "art")
    path = captured / "ds" / "traces" / "sessions" / f"{art['summary']['rollout_id']}.jsonl"
    lines = _lines(path)
    validate_session(lines, str(path))
    assert lines[0]["type"] == "session" and lines[0]["id"] == art["summary"]["rollout_id"]
    assert any("toolCalls" in line["message"] for line in lines[1:])
    stamped = [line["message"] for line in lines[1:] if line["message"]["role"] == "assistant"]
    assert stamped and all(isinstance(m.get("timestamp"), int) and m.get("model") for m in stamped)


def test_session_messages_round_trip_to_the_final_agent_conversation(captured):
    art = read_artifact(captured / "art")
    call = final_agent_call(art)
    final = call["request"]["messages"] + [response_message(call["response"])]
    lines = _lines(next((captured / "ds" / "traces" / "sessions").glob("*.jsonl")))
    assert session_messages(lines) == [chat_message(m) for m in final]


def test_a_bad_session_is_refused_with_the_file_and_line():
    good = session_lines({"summary": {"rollout_id": "r" * 32, "harness": "builtin"}, "trace": {"calls": []},
                          "rollout": {"calls": []}})
    bad = good + [{"type": "message", "message": {"role": "user", "content": 3}}]
    with pytest.raises(SchemaValidationError, match=r"x\.jsonl: \$\[1\]"):
        validate_session(bad, "x.jsonl")
    with pytest.raises(SchemaValidationError, match="first line must be the session header"):
        validate_session(bad[1:], "x.jsonl")


def test_sessions_are_pushed_append_safe_to_the_companion_repo(captured, tmp_path):
    import os
    import subprocess
    import sys

    from hub_fixture import FakeHub

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PUSH_", "HUGGINGFACE"))}
    with FakeHub() as hub:
        env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "home"), HF_HUB_DISABLE_TELEMETRY="1")
        cmd = [sys.executable, "-m", "rollout_dataset.cli", "push", str(captured / "ds"), "--repo", "org/r",
               "--traces-repo", "org/sessions"]
        first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
        again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
        files = hub.files("org/sessions")
    assert first.returncode == 0 and again.returncode == 0, first.stderr[-2000:] + again.stderr[-2000:]
    assert "org/sessions: 1 trace-viewer session(s) added" in first.stdout
    assert "org/sessions: 0 trace-viewer session(s) added" in again.stdout
    assert len([f for f in files if f.startswith("sessions/")]) == 1
    readme = files["README.md"].decode()
    assert "agent-traces" in readme and "datasets/org/r" in readme
