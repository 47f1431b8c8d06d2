"""Opt-in: the local backend's `/v1/responses` against a genuine vLLM server, key by key, and the proxy's
token-exact Responses capture in front of it.

Set REAL_VLLM_URL (e.g. http://127.0.0.1:18000/v1, started by ../shared/tools/real-vllm/start.sh).
As in test_real_vllm_wire.py, the real model is forced with `structured_outputs.regex` to say what the
local backend's policy says, so both answers have the same kind of content (text, or text and a
hermes tool call); ids and logprob values differ, shapes must not.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import httpx
import pytest

from rollout_dataset.backend import PolicyOutput, ToolCallSpec
from rollout_dataset.proxy import CaptureProxy, read_trace

REAL = os.environ.get("REAL_VLLM_URL", "").rstrip("/")
pytestmark = [pytest.mark.real_vllm, pytest.mark.skipif(not REAL, reason="set REAL_VLLM_URL to compare with vLLM")]

PLAIN = "Hello there, friend."
TOOL_ARGS = {"command": "ls -la"}
TOOL_TEXT = 'Ok\n<tool_call>\n{"name": "bash", "arguments": ' + json.dumps(TOOL_ARGS) + "}\n</tool_call>"
TOOLS = [{"type": "function", "name": "bash", "description": "Run a shell command.",
          "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]
ASKED = {"enable_response_messages": True, "include": ["message.output_text.logprobs"]}


class _SamePolicy:
    def respond(self, request):
        last = request.messages[-1].get("content") if request.messages else ""
        if "TOOL" in str(last):
            return PolicyOutput(text="Ok", tool_calls=[ToolCallSpec("bash", TOOL_ARGS)])
        return PolicyOutput(text=PLAIN)


def _shape(x):
    if isinstance(x, dict):
        return {k: _shape(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_shape(x[0])] if x else []
    if x is None:
        return "null"
    return type(x).__name__


CASES = {
    "plain": ({"input": "say hello"}, PLAIN),
    "plain_asked": ({"input": "say hello", **ASKED}, PLAIN),
    "items_and_instructions": ({"instructions": "be terse", "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "say hello"}]}], **ASKED}, PLAIN),
    "tool_call": ({"input": "list the files (TOOL)", "tools": TOOLS, **ASKED}, TOOL_TEXT),
}


@pytest.fixture
async def pair(start_local_backend):
    local = await start_local_backend(policy=_SamePolicy(), served_model_name="local")
    async with httpx.AsyncClient(timeout=180) as h:
        real_model = (await h.get(f"{REAL}/models")).json()["data"][0]["id"]
        yield h, local, real_model


async def _both(pair, body: dict, forced: str, stream: bool = False):
    h, local, real_model = pair
    real_body = dict(body, model=real_model, structured_outputs={"regex": re.escape(forced)}, stream=stream)
    local_body = dict(body, model="local", stream=stream)
    out = []
    for url, payload in ((REAL, real_body), (local.base_url, local_body)):
        r = await h.post(url + "/responses", json=payload)
        assert r.status_code == 200, r.text
        out.append(r.json() if not stream else _events(r.text))
    return out


def _events(text: str) -> list[dict]:
    return [json.loads(block.split("data: ", 1)[1]) for block in text.split("\n\n") if "data: " in block]


@pytest.mark.parametrize("case", sorted(CASES))
async def test_response_has_vllms_keys_and_types(pair, case):
    body, forced = CASES[case]
    real, local = await _both(pair, body, forced)
    assert _shape(local) == _shape(real)
    assert [item["type"] for item in local["output"]] == [item["type"] for item in real["output"]]


@pytest.mark.parametrize("case", sorted(CASES))
async def test_stream_has_vllms_event_sequence_and_shapes(pair, case):
    body, forced = CASES[case]
    real, local = await _both(pair, body, forced, stream=True)

    def kinds(events):  # runs of deltas collapse: token boundaries differ between tokenizers
        out = []
        for e in events:
            if not (out and out[-1] == e["type"] and e["type"].endswith(".delta")):
                out.append(e["type"])
        return out

    assert kinds(local) == kinds(real) and "[DONE]" not in json.dumps(local)
    def key(e):  # output_item events come for message and function_call items alike
        return e["type"], (e.get("item") or {}).get("type")

    by_kind = {}
    for e in real:
        by_kind.setdefault(key(e), _shape(e))
    for e in local:
        assert _shape(e) == by_kind[key(e)], key(e)


async def test_the_proxy_captures_vllms_responses_token_exact(tmp_path: Path):
    async with CaptureProxy(upstream=REAL, trace_dir=tmp_path) as proxy:
        async with httpx.AsyncClient(timeout=180) as h:
            model = (await h.get(f"{REAL}/models")).json()["data"][0]["id"]
            body = {"model": model, "input": "say hello", "structured_outputs": {"regex": re.escape(PLAIN)}}
            plain = await h.post(proxy.base_url + "/responses", json=body)
            streamed = await h.post(proxy.base_url + "/responses", json={**body, "stream": True})
    assert plain.json()["input_messages"] is None and plain.json()["output"][0]["content"][0]["logprobs"] is None
    assert all(e.get("logprobs") in (None, []) for e in _events(streamed.text))
    whole, stream = read_trace(proxy.trace_path())
    for record in (whole, stream):
        assert record["capture_level"] == "tokens" and record["token_source"] == "response_messages"
        assert record["completion_token_ids"] and record["prompt_token_ids"]
        assert record["usage"]["input_tokens"] == len(record["prompt_token_ids"])
    assert len(whole["per_token_logps"]) == len(whole["completion_token_ids"])
    # a vLLM stream leaves the end-of-sequence token without a logprob: none are recorded, a note says why
    assert stream["per_token_logps"] is None and any("end-of-sequence" in n for n in stream["notes"])


async def test_a_responses_prompt_rendered_as_chat_messages_is_vllms_own_prompt():
    from rollout_dataset.proxy.context_fit import tokenize_body

    items = [{"type": "message", "role": "developer", "content": "be terse"},
             {"role": "user", "content": [{"type": "input_text", "text": "list files"}]},
             {"type": "function_call", "call_id": "call_1", "name": "bash", "arguments": '{"command": "ls"}'},
             {"type": "function_call_output", "call_id": "call_1", "output": "a.py\nb.py"},
             {"type": "message", "role": "developer", "content": "late developer note"}]
    root = REAL[: -len("/v1")]
    async with httpx.AsyncClient(timeout=180) as h:
        model = (await h.get(f"{REAL}/models")).json()["data"][0]["id"]
        for body in ({"model": model, "input": items, "tools": TOOLS, "instructions": "sys"},
                     {"model": model, "input": "hi"}):
            real = (await h.post(REAL + "/responses", json={**body, "max_output_tokens": 2,
                                                            "enable_response_messages": True})).json()
            measured = (await h.post(root + "/tokenize", json=tokenize_body("responses", body))).json()
            assert measured["tokens"] == real["input_messages"][0]["tokens"]
