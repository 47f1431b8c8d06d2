"""Downstream reads recorded `/v1/messages` calls like chat calls: the graph links turns by prefix, a
toolless small-model call beside the tool-using agent is auxiliary, and the leak scan reads their content
blocks. Records come from the real proxy in front of the local backend."""

from __future__ import annotations

from pathlib import Path

import httpx

from rollout_dataset.backend import LocalBackend
from rollout_dataset.export.sequences import assign_roles, build_sequences
from rollout_dataset.graph import build_graph
from rollout_dataset.proxy import CaptureProxy, read_trace

TOOLS = [{"name": "Bash", "description": "run a command", "input_schema": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]


async def _record_session(tmp_path: Path) -> list[dict]:
    async with LocalBackend(policy="echo") as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path) as proxy:
            url = proxy.session_base_url("s").removesuffix("/v1") + "/v1/messages?beta=true"
            messages = [{"role": "user", "content": "look at the files"}]
            async with httpx.AsyncClient(timeout=30) as client:
                title = {"model": "local", "max_tokens": 8, "system": "Write a 3-word title.",
                         "messages": [{"role": "user", "content": "look at the files"}]}
                assert (await client.post(url, json=title)).status_code == 200
                for _ in range(2):
                    body = {"model": "local", "max_tokens": 16, "system": "You are an agent.", "tools": TOOLS,
                            "messages": messages, "stream": True}
                    r = await client.post(url, json=body)
                    assert r.status_code == 200
                    answer = read_trace(proxy.trace_path("s"))[-1]["response"]
                    messages = messages + [{"role": "assistant", "content": answer["content"]},
                                           {"role": "user", "content": "go on"}]
            return read_trace(proxy.trace_path("s"))


async def test_agent_turns_chain_by_prefix_and_the_toolless_call_is_auxiliary(tmp_path):
    records = await _record_session(tmp_path)
    assert [r["capture_level"] for r in records] == ["tokens"] * 3
    graph = build_graph(records)
    assert graph.mode == "tokens"
    sequences = build_sequences(graph)
    roles = assign_roles(graph, sequences)
    by_role = {role: seq for role, seq in zip(roles, sequences)}
    assert sorted(roles) == ["agent", "auxiliary"]
    assert by_role["agent"].node_ids == [1, 2] and by_role["auxiliary"].node_ids == [0]
    node = graph.get(1)
    assert node.n_tools == 1 and node.request_messages[0] == {"role": "system", "content": "You are an agent."}
    assert node.response_message["role"] == "assistant" and node.response_message["content"]


async def test_the_leak_scan_finds_held_out_text_in_a_tool_result_block(tmp_path):
    from rollout_dataset.recipes.coding.leakage import scan_for_leaks

    secret = "12345 67890 held-out expected output"
    async with LocalBackend(policy="echo") as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path) as proxy:
            body = {"model": "local", "max_tokens": 8, "tools": TOOLS, "messages": [
                {"role": "user", "content": "run the tests"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                                   "input": {"command": "cat tests.txt"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                              "content": [{"type": "text", "text": secret}]}]}]}
            async with httpx.AsyncClient() as client:
                url = proxy.base_url.removesuffix("/v1") + "/v1/messages"
                assert (await client.post(url, json=body)).status_code == 200
            records = read_trace(proxy.trace_path())
    hits = scan_for_leaks("write a solver", [{"input": "x", "output": secret}], records, None)
    assert [(h.test_index, h.field, h.where) for h in hits] == [(0, "output", "request[0]")]
