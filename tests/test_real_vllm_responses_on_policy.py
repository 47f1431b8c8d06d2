"""Opt-in: on-policy mode on `/v1/responses` (Codex's API) through the proxy to a genuine vLLM 0.32.

The server serves the scripted tiny Qwen3 (see tests/test_real_vllm_reasoning.py for how to build and
start it, with `--reasoning-parser qwen3 --enable-auto-tool-choice --tool-call-parser hermes`); after
every generation prompt it says `<think>Plan: list files.\\n</think>\\n\\nListing.<tool_call>{"name":
"ls","arguments":{}}</tool_call>`, so a Responses answer is a `reasoning` item, a message
`"\\n\\nListing."` and an `ls` call. Set REAL_VLLM_REASONING_URL.

What vLLM does with each shape a client sends back, and what the capture records: every tool loop is
one sequence (`exact`, `repaired`, `repaired`), a chat's later turns `reasoning_dropped`, a reasoning
item with `encrypted_content` a recorded 400; and the server's Responses render of a Codex-shaped input
equals its `/tokenize` render of the chat request on-policy mode reads it as.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.genuine_templates import qwen3_tokenizer_dir
from support.responses_echo import USER, drive

from rollout_dataset.export import export_rollout
from rollout_dataset.export.continuity import continuity_of
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.proxy.on_policy import as_chat_endpoint_reads, responses_as_chat
from rollout_dataset.tokenizers import load_tokenizer
from rollout_dataset.wire.sse import iter_events

REAL = os.environ.get("REAL_VLLM_REASONING_URL", "").rstrip("/")
MODEL = "scripted-qwen3"
pytestmark = [pytest.mark.real_vllm,
              pytest.mark.skipif(not REAL, reason="set REAL_VLLM_REASONING_URL (the scripted Qwen3 on vLLM 0.32)")]
LS = {"type": "function", "name": "ls", "description": "list files", "strict": False,
      "parameters": {"type": "object", "properties": {}}}


@pytest.fixture(scope="module")
def qwen3():
    return load_tokenizer(str(qwen3_tokenizer_dir()))


async def session(tmp_path: Path, kind: str, echo: str, stream: bool = False) -> tuple[list[dict], list[int]]:
    """Three Responses calls through the on-policy proxy; each answer's output goes back as `echo` makes it."""
    codes: list[int] = []
    async with CaptureProxy(upstream=REAL, trace_dir=tmp_path, on_policy=True) as proxy:
        url = proxy.session_base_url("s") + "/responses"
        async with httpx.AsyncClient(timeout=120) as client:
            async def post(items: list[dict]) -> dict | None:
                body: dict[str, Any] = {"model": MODEL, "input": items, "instructions": "You are careful.",
                                        "max_output_tokens": 40, "temperature": 0, "stream": stream, "store": False}
                if kind == "tool_loop":
                    body["tools"] = [LS]
                response = await client.post(url, json=body)
                codes.append(response.status_code)
                if response.status_code != 200:
                    return None
                if not stream:
                    return response.json()
                done = [json.loads(e.data) for e in iter_events(response.text)]
                return next(e["response"] for e in done if e["type"] == "response.completed")

            await drive(post, kind, 3, echo)
        return read_trace(proxy.trace_path("s"), seal=proxy.seal("s")), codes


def statuses(records: list[dict]) -> list[str]:
    by_index = continuity_of(records)
    return [by_index[r["index"]]["status"] for r in records]


@pytest.mark.parametrize("echo", ["verbatim", "summary_only", "no_reasoning", "empty_reasoning"])
async def test_a_responses_tool_loop_to_genuine_vllm_is_one_sequence_whatever_the_client_sends_back(tmp_path, qwen3,
                                                                                                    echo):
    records, _ = await session(tmp_path, "tool_loop", echo)
    assert [i["type"] for i in records[0]["response"]["output"]] == ["reasoning", "message", "function_call"]
    assert statuses(records) == ["exact", "repaired", "repaired"]
    doc = export_rollout(records, session_id="s", capture_level="tokens", tokenizer=qwen3)
    assert [s["n_turns"] for s in doc["sequences"] if s["role"] == "agent"] == [3]


async def test_a_streamed_responses_tool_loop_to_genuine_vllm_is_one_sequence(tmp_path):
    records, _ = await session(tmp_path, "tool_loop", "verbatim", stream=True)
    assert statuses(records) == ["exact", "repaired", "repaired"]


async def test_a_responses_chat_to_genuine_vllm_is_reasoning_dropped_never_not_repaired(tmp_path):
    records, _ = await session(tmp_path, "chat", "verbatim")
    assert statuses(records) == ["exact", "reasoning_dropped", "reasoning_dropped"]


async def test_an_encrypted_reasoning_item_is_refused_by_genuine_vllm_and_recorded(tmp_path):
    records, codes = await session(tmp_path, "tool_loop", "encrypted")
    assert codes == [200, 400] and records[1]["status"] == 400
    assert "Encrypted content is not supported" in json.dumps(records[1]["response"])


async def test_the_responses_render_of_a_codex_shaped_input_is_the_tokenize_render_of_its_chat_reading():
    developer = {"type": "message", "role": "developer",
                 "content": [{"type": "input_text", "text": "Rules."}, {"type": "input_text", "text": "More rules."}]}
    tools = [LS, {"type": "namespace", "name": "agents", "description": "subagents",
                  "tools": [{"type": "function", "name": "spawn", "description": "spawn one", "strict": False,
                             "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}]},
             {"type": "custom", "name": "apply_patch", "description": "apply a patch"},
             {"type": "web_search", "external_web_access": False},
             {"type": "function", "name": "bare", "parameters": {"type": "object", "properties": {}}}]
    body = {"model": MODEL, "instructions": "You are careful.", "input": [developer, USER], "tools": tools}
    async with httpx.AsyncClient(timeout=120) as client:
        answer = (await client.post(REAL + "/responses", json={**body, "max_output_tokens": 1,
                                                                    "enable_response_messages": True})).json()
        chat = responses_as_chat(body)
        rendered = (await client.post(REAL.removesuffix("/v1") + "/tokenize", json={
            "model": MODEL, "messages": as_chat_endpoint_reads(chat["messages"]), "tools": chat["tools"],
            "add_generation_prompt": True})).json()["tokens"]
    assert answer["input_messages"][0]["tokens"] == rendered


def _think(text: str) -> dict:
    return {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": text}]}


def _said(text: str) -> dict:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


@pytest.mark.parametrize("items", [
    [USER, _think("R"), USER],                                # a reasoning item with no assistant item after it
    [USER, _think("R1"), _think("R2"), _said("A"), USER],     # two reasoning items before one message
    [USER, _said("A"), _think("R"), _said("B")],              # reasoning after a message: it joins that one
    [USER, {"type": "function_call", "call_id": "c", "name": "ls", "arguments": "{}"}, _said("A"),
     {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_text", "text": "x"},
                                                                 {"type": "input_text", "text": "y"}]}],
], ids=["reasoning_alone", "two_reasonings", "reasoning_after_message", "call_then_message"])
async def test_the_responses_render_of_unusual_item_orders_is_the_tokenize_render_of_their_chat_reading(items):
    body = {"model": MODEL, "input": items}
    async with httpx.AsyncClient(timeout=120) as client:
        answer = (await client.post(REAL + "/responses", json={**body, "max_output_tokens": 1,
                                                                 "enable_response_messages": True})).json()
        rendered = (await client.post(REAL.removesuffix("/v1") + "/tokenize", json={
            "model": MODEL, "messages": as_chat_endpoint_reads(responses_as_chat(body)["messages"]),
            "add_generation_prompt": True})).json()["tokens"]
    assert answer["input_messages"][0]["tokens"] == rendered
