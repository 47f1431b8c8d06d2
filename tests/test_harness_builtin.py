"""The built-in agent against the real local backend (script policy) through the recording proxy."""

from __future__ import annotations

import pytest

from rollout_dataset.backend import run_backend_in_thread
from rollout_dataset.errors import UpstreamError
from rollout_dataset.harness import TOOL_NAMES, BuiltinAgent, ToolBox
from rollout_dataset.proxy import CaptureProxy, read_trace

SOLUTION = "a, b = map(int, input().split())\nprint(a + b)\n"


def _run(tmp_path, steps, **agent_kwargs):
    workdir = tmp_path / "work"
    workdir.mkdir()
    with run_backend_in_thread(policy="script", script={"steps": steps, "final": "All done."}) as backend, \
            CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path / "trace") as proxy:
        agent = BuiltinAgent(proxy.session_base_url("s"), "local", ToolBox(workdir, [("1 2\n", "3\n")]),
                             **agent_kwargs)
        result = agent.run("Add two numbers.")
        return result, read_trace(proxy.trace_path("s")), workdir


def test_it_sends_the_tool_manifest_on_every_call_and_stops_on_submit(tmp_path):
    steps = [{"name": "write_file", "arguments": {"path": "solution.py", "content": SOLUTION}},
             {"name": "run_examples", "arguments": {}}, {"name": "submit", "arguments": {}}]
    result, records, workdir = _run(tmp_path, steps, seed=7)
    assert result.stop_reason == "submit" and result.model_calls == 3 and not result.timed_out
    assert result.tool_calls_by_name == {"run_examples": 1, "submit": 1, "write_file": 1} and result.ran_code
    assert [[t["function"]["name"] for t in r["request"]["tools"]] for r in records] == [list(TOOL_NAMES)] * 3
    assert all(r["request"]["seed"] == 7 for r in records)
    assert (workdir / "solution.py").read_text() == SOLUTION
    assert result.decisions[1]["examples_passed"] == [0]


def test_it_stops_at_the_turn_budget(tmp_path):
    steps = [{"name": "read_file", "arguments": {"path": "missing.txt"}}] * 6
    result, records, _ = _run(tmp_path, steps, max_turns=3)
    assert result.stop_reason == "turn_budget" and result.model_calls == 3 and len(records) == 3


def test_a_text_answer_without_tool_calls_ends_the_rollout(tmp_path):
    result, records, _ = _run(tmp_path, ["I cannot do this."])
    assert result.stop_reason == "final_answer" and len(records) == 1 and not result.ran_code


def test_it_stops_when_its_time_runs_out(tmp_path):
    steps = [{"name": "run", "arguments": {"command": "sleep 20"}}] * 3
    result, records, _ = _run(tmp_path, steps, timeout_s=1.5)
    assert result.stop_reason == "timeout" and result.timed_out and len(records) == 1


def test_an_unreachable_server_on_the_first_call_is_an_upstream_error(tmp_path):
    agent = BuiltinAgent("http://127.0.0.1:9/v1", "local", ToolBox(tmp_path))
    with pytest.raises(UpstreamError, match="127.0.0.1:9"):
        agent.run("x")
