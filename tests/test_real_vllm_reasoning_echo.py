"""Opt-in: harnesses' echoes of a thinking model's reply through the proxy to a genuine vLLM 0.32.

The server serves the scripted tiny Qwen3 (see tests/test_real_vllm_reasoning.py for how to build and
start it, with `--reasoning-parser qwen3 --enable-auto-tool-choice --tool-call-parser hermes`); it says
`<think>Plan: list files.\\n</think>\\n\\nListing.<tool_call>{"name":"ls","arguments":{}}</tool_call>`
after every generation prompt, so its `content` is `"\\n\\nListing."`. Set REAL_VLLM_REASONING_URL.

Each echo shape of tests/support/harness_echo.py goes back through the on-policy proxy: a tool loop is
one sequence, a chat's turns `reasoning_dropped`, none `not_repaired`. The harnesses' own reasoning
shapes: a Responses `reasoning` item (Codex) is rendered by vLLM as the turn's reasoning, one with
`encrypted_content` is refused (HTTP 400, recorded); a Messages `thinking` block (Claude Code) is
rendered as reasoning whatever its signature, and on-policy mode bridges the Messages turns.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.genuine_templates import qwen3_tokenizer_dir
from support.harness_echo import ECHOES

from rollout_dataset.export import export_rollout
from rollout_dataset.export.continuity import continuity_of
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.tokenizers import load_tokenizer

REAL = os.environ.get("REAL_VLLM_REASONING_URL", "").rstrip("/")
MODEL = "scripted-qwen3"
pytestmark = [pytest.mark.real_vllm,
              pytest.mark.skipif(not REAL, reason="set REAL_VLLM_REASONING_URL (the scripted Qwen3 on vLLM 0.32)")]
TOOLS = [{"type": "function", "function": {"name": "ls", "description": "list files",
                                           "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture(scope="module")
def qwen3():
    return load_tokenizer(str(qwen3_tokenizer_dir()))


async def session(tmp_path: Path, kind: str, echo: str, turns: int = 3) -> list[dict]:
    """`turns` chat calls through the on-policy proxy; each reply goes back as `echo` makes it."""
    async with CaptureProxy(upstream=REAL, trace_dir=tmp_path, on_policy=True) as proxy:
        url = proxy.session_base_url("s") + "/chat/completions"
        async with httpx.AsyncClient(timeout=120) as client:
            messages: list[dict[str, Any]] = [{"role": "user", "content": "list the files"}]
            for k in range(turns):
                body: dict[str, Any] = {"model": MODEL, "messages": messages, "max_tokens": 40}
                if kind == "tool_loop":
                    body["tools"] = TOOLS
                response = await client.post(url, json=body)
                assert response.status_code == 200, response.text
                reply = response.json()["choices"][0]["message"]
                sent = ECHOES[echo](reply)
                if kind == "tool_loop":
                    sent["tool_calls"] = reply["tool_calls"]
                    messages += [sent, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": "a.txt"}]
                else:
                    messages += [sent, {"role": "user", "content": f"and now {k}"}]
        return read_trace(proxy.trace_path("s"), seal=proxy.seal("s"))


def statuses(records: list[dict]) -> list[str]:
    by_index = continuity_of(records)
    return [by_index[r["index"]]["status"] for r in records]


@pytest.mark.parametrize("echo", ["verbatim", "content_only", "reasoning_content", "think_block", "stripped"])
async def test_a_tool_loop_to_genuine_vllm_is_one_sequence_whatever_the_harness_sends_back(tmp_path, qwen3, echo):
    records = await session(tmp_path, "tool_loop", echo)
    assert records[0]["response"]["choices"][0]["message"]["content"] == "\n\nListing."
    assert statuses(records) == ["exact", "repaired", "repaired"]
    doc = export_rollout(records, session_id="s", capture_level="tokens", tokenizer=qwen3)
    assert [s["n_turns"] for s in doc["sequences"] if s["role"] == "agent"] == [3]


@pytest.mark.parametrize("echo", ["verbatim", "content_only", "reasoning_content", "think_block", "stripped"])
async def test_a_chat_to_genuine_vllm_is_reasoning_dropped_never_not_repaired(tmp_path, echo):
    records = await session(tmp_path, "chat", echo)
    assert statuses(records) == ["exact", "reasoning_dropped", "reasoning_dropped"]


async def test_a_codex_reasoning_item_is_rendered_and_an_encrypted_one_refused(tmp_path):
    tool = {"type": "function", "name": "ls", "description": "list files", "parameters": {"type": "object", "properties": {}}}
    async with CaptureProxy(upstream=REAL, trace_dir=tmp_path, on_policy=True) as proxy:
        url = proxy.session_base_url("s") + "/responses"
        async with httpx.AsyncClient(timeout=120) as client:
            first = (await client.post(url, json={"model": MODEL, "input": [{"role": "user", "content": "list the files"}],
                                                  "tools": [tool], "max_output_tokens": 40})).json()
            reasoning = next(i for i in first["output"] if i["type"] == "reasoning")
            assert reasoning["content"][0]["text"] == "Plan: list files.\n" and reasoning["encrypted_content"] is None
            call = next(i for i in first["output"] if i["type"] == "function_call")
            items = [{"role": "user", "content": "list the files"}, *first["output"],
                     {"type": "function_call_output", "call_id": call["call_id"], "output": "a.txt"}]
            again = await client.post(url, json={"model": MODEL, "input": items, "tools": [tool], "max_output_tokens": 40})
            sealed = [dict(i, encrypted_content="gAAAA") if i.get("type") == "reasoning" else i for i in items]
            refused = await client.post(url, json={"model": MODEL, "input": sealed, "tools": [tool],
                                                   "max_output_tokens": 40})
        records = read_trace(proxy.trace_path("s"), seal=proxy.seal("s"))
    assert again.status_code == 200 and refused.status_code == 400
    assert "Encrypted content is not supported" in refused.text and records[2]["status"] == 400
    # the reasoning item was rendered into the next prompt as the turn's think block
    think_end = 151668
    assert think_end in records[1]["prompt_token_ids"][len(records[0]["prompt_token_ids"]):]


async def test_a_claude_code_thinking_block_is_rendered_whatever_its_signature_and_bridged(tmp_path):
    tools = [{"name": "ls", "description": "list files", "input_schema": {"type": "object", "properties": {}}}]
    async with CaptureProxy(upstream=REAL, trace_dir=tmp_path, on_policy=True) as proxy:
        url = proxy.session_base_url("s") + "/messages"
        async with httpx.AsyncClient(timeout=120) as client:
            user = {"role": "user", "content": "list the files"}
            first = (await client.post(url, json={"model": MODEL, "max_tokens": 40, "tools": tools,
                                                  "messages": [user]})).json()["content"]
            assert first[0]["type"] == "thinking" and first[0]["signature"]  # vLLM signs with a random hex
            use = next(b for b in first if b["type"] == "tool_use")
            signed = [dict(b, signature="a-signature-vllm-never-made") if b["type"] == "thinking" else b for b in first]
            second = await client.post(url, json={"model": MODEL, "max_tokens": 40, "tools": tools, "messages": [
                user, {"role": "assistant", "content": signed},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "a.txt"}]}]})
        records = read_trace(proxy.trace_path("s"), seal=proxy.seal("s"))
    assert second.status_code == 200
    assert statuses(records) == ["exact", "repaired"]
    held = records[0]["prompt_token_ids"] + records[0]["completion_token_ids"]
    assert records[1]["prompt_token_ids"][:len(held)] == held
