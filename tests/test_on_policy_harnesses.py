"""On-policy mode through whole captures: the built-in harness, mini-swe-agent and opencode, offline
against the local backend whose script emits every reply one character per token (a tokenization the
tokenizer never produces). Without the mode the prefix graph breaks at every turn (the built-in harness
runs both ways; for the slower external harnesses the recorded drift shows where the server's own render
breaks it); with it every agent turn extends the previous one exactly, and the harness sees the same text."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from rollout_dataset.tokenizers import load_tokenizer
from rollout_dataset.backend.template import render_assistant_text
from rollout_dataset.capture import capture_rollout
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.harness import find_mini, find_opencode
from rollout_dataset.schema.check import validate_path
from rollout_dataset.tasks import load_tasks

TASK_INDEX = 3


def forced(steps: list[dict], final: str) -> dict:
    """The script with each step's text and tool calls emitted one character per token."""
    tok = load_tokenizer("builtin")

    def ids(text: str) -> list[int]:
        return [i for ch in text for i in tok.encode(ch, add_special_tokens=False)]

    return {"steps": [{"token_ids": ids(render_assistant_text(s.get("text", ""), s.get("tool_calls", [])))}
                      for s in steps] + [{"token_ids": ids(final)}] * 3, "final": final}


def builtin_steps(task) -> list[dict]:
    return [{"text": "Writing it.", "tool_calls": [{"name": "write_file", "arguments": {
                "path": "solution.py", "content": task.reference_solution}}]},
            {"text": "", "tool_calls": [{"name": "submit", "arguments": {}}]}]


def external_steps(task) -> list[dict]:
    write = "cat > solution.py <<'EOF'\n" + task.reference_solution.rstrip() + "\nEOF"
    return [{"text": "I will write the solution.",
             "tool_calls": [{"name": "bash", "arguments": {"command": write, "description": "Write solution.py"}}]},
            {"text": "Done.", "tool_calls": [{"name": "bash", "arguments": {
                "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "description": "Finish"}}]}]


def agent_seen(trace: dict) -> list[str]:
    """What the harness read of each agent answer (content and tool calls)."""
    out = []
    for call in trace["calls"]:
        message = ((call.get("response") or {}).get("choices") or [{}])[0].get("message") or {}
        calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls") or ()]
        out.append(json.dumps([message.get("content"), calls]))
    return out


def capture(tmp_path_factory, harness: str, on_policy: bool, script_doc: dict):
    root = tmp_path_factory.mktemp(f"{harness}-{on_policy}")
    script = root / "script.json"
    script.write_text(json.dumps(script_doc))
    result = capture_rollout(CaptureConfig(out_dir=root / "out", task_index=TASK_INDEX, harness=harness,
                                           policy="script", script=script, timeout_s=150,
                                           on_policy=on_policy))
    read = lambda name: json.loads((root / "out" / name).read_text())  # noqa: E731
    return result, read("trace.json"), read("rollout.json")


def check_pair(off, on):
    """The graph breaks without the mode; with it one agent sequence holds every agent turn."""
    (r_off, trace_off, doc_off), (r_on, trace_on, doc_on) = off, on
    assert validate_path(r_on.out_dir) == [] and validate_path(r_off.out_dir) == []
    agent_off = [s for s in doc_off["sequences"] if s["role"] == "agent"]
    agent_on = [s for s in doc_on["sequences"] if s["role"] == "agent"]
    n_agent = r_on.summary["agent_turns"]
    assert n_agent >= 2
    assert max(s["n_turns"] for s in agent_off) < r_off.summary["agent_turns"]  # broken chain
    assert len(agent_on) == 1 and agent_on[0]["n_turns"] == n_agent
    assert doc_off["continuity"] is None and r_off.summary["continuity"] is None
    continuity = r_on.summary["continuity"]
    assert continuity == doc_on["continuity"]
    assert continuity["not_repaired"] == 0 and continuity["repaired"] == n_agent - 1
    assert continuity["exact"] == 1  # the first turn: nothing sampled before it
    assert agent_seen(trace_on) == agent_seen(trace_off)
    assert '"prefix_break"' in json.dumps(doc_off)
    assert '"prefix_break"' not in json.dumps(doc_on) and "retokenization_skew" not in json.dumps(doc_on)
    assert r_on.summary["env_reward"] == r_off.summary["env_reward"] == 1.0


def test_builtin_harness_extends_every_turn_exactly_with_the_mode(tmp_path_factory):
    task = load_tasks("builtin", seed=0)[TASK_INDEX]
    script = forced(builtin_steps(task), "Done.")  # loads the tokenizer before the threads start
    with ThreadPoolExecutor(max_workers=2) as pool:
        off, on = pool.map(lambda mode: capture(tmp_path_factory, "builtin", mode, script), (False, True))
    check_pair(off, on)


def check_on_alone(on, steps, final):
    """Mode on only (the external harnesses are slow): the drift each repair recorded lies inside the
    parent's prompt + sampled ids, so without the mode the server's render breaks the chain there."""
    result, trace, document = on
    assert validate_path(result.out_dir) == []
    n_agent = result.summary["agent_turns"]
    agent = [s for s in document["sequences"] if s["role"] == "agent"]
    assert n_agent >= 2 and len(agent) == 1 and agent[0]["n_turns"] == n_agent
    continuity = result.summary["continuity"]
    assert (continuity["exact"], continuity["repaired"], continuity["not_repaired"]) == (1, n_agent - 1, 0)
    records = trace["calls"]
    for record in records:
        if (record.get("continuity") or {}).get("status") == "repaired":
            parent = records[record["continuity"]["parent_index"]]
            assert record["continuity"]["drift"]["position"] < (len(parent["prompt_token_ids"])
                                                                + len(parent["completion_token_ids"]))
    # the harness read the script's answers, as it would without the mode
    from rollout_dataset.backend.hermes import parse_tool_calls

    said = [parse_tool_calls(render_assistant_text(s.get("text", ""), s.get("tool_calls", []))) for s in steps]
    expected = [json.dumps([p.content, [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                                        for c in p.tool_calls]]) for p in said] + [json.dumps([final, []])]
    seen = [text for call, text in zip(records, agent_seen(trace))
            if any(c["index"] == call["index"] and c["role"] == "agent" for c in document["calls"])]
    assert seen == expected[: len(seen)] and len(seen) == n_agent
    assert result.summary["env_reward"] == 1.0


@pytest.fixture(scope="module")
def external(tmp_path_factory):
    """mini-swe-agent and opencode (when installed), with the mode on."""
    assert find_mini(), "mini-swe-agent is a test dependency (pip install -e '.[test]')"
    task = load_tasks("builtin", seed=0)[TASK_INDEX]
    names = ["mini-swe-agent"] + (["opencode"] if find_opencode() else [])
    steps, final = external_steps(task), "solution.py is written."
    script = forced(steps, final)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda name: capture(tmp_path_factory, name, True, script), names))
    return {name: (result, steps, final) for name, result in zip(names, results)}


@pytest.mark.harness
def test_mini_swe_agent_extends_every_turn_exactly_with_the_mode(external):
    check_on_alone(*external["mini-swe-agent"])


@pytest.mark.harness
def test_opencode_extends_every_agent_turn_exactly_with_the_mode(external):
    if "opencode" not in external:
        pytest.skip("opencode is not installed: run `make npm-tools` (make test does)")
    check_on_alone(*external["opencode"])
