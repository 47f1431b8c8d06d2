"""Opt-in: the local backend's wire format against a genuine vLLM server, key by key and type by type.

Set REAL_VLLM_URL (e.g. http://127.0.0.1:18000/v1, started by ../shared/tools/real-vllm/start.sh).
The real server's random-weight model is made to say the same text as the local backend's policy
with vLLM's `structured_outputs.regex`, so both answers have the same kind of content (plain text,
or a hermes tool call); token ids and logprob values differ, their shapes must not.
"""

from __future__ import annotations

import json
import os
import re

import httpx
import pytest

from rollout_dataset.backend import PolicyOutput, ToolCallSpec

REAL = os.environ.get("REAL_VLLM_URL", "").rstrip("/")
pytestmark = [pytest.mark.real_vllm, pytest.mark.skipif(not REAL, reason="set REAL_VLLM_URL to compare with vLLM")]

PLAIN = "Hello there, friend."
UTF8 = "é✓ ok"  # multi-byte characters: tokens holding incomplete UTF-8 decode to "" in logprobs
TOOL_ARGS = {"command": "ls -la"}
TOOL_TEXT = 'Ok\n<tool_call>\n{"name": "bash", "arguments": ' + json.dumps(TOOL_ARGS) + "}\n</tool_call>"
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
                                           "parameters": {"type": "object",
                                                          "properties": {"command": {"type": "string"}},
                                                          "required": ["command"]}}}]
HELLO = [{"role": "user", "content": "say hello"}]
TOOL_PLEASE = [{"role": "user", "content": "list the files (TOOL)"}]
ACCENTS = [{"role": "user", "content": "say something accented (UTF8)"}]


class _SamePolicy:
    """Says what the real server is forced to say."""

    def respond(self, request):
        last = request.messages[-1].get("content") if request.messages else ""
        if "TOOL" in str(last):
            return PolicyOutput(text="Ok", tool_calls=[ToolCallSpec("bash", TOOL_ARGS)])
        if "UTF8" in str(last):
            return PolicyOutput(text=UTF8)
        return PolicyOutput(text=PLAIN)


def _shape(x):
    if isinstance(x, dict):
        return {k: _top_shape(v) if k == "top_logprobs" else _shape(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_shape(x[0])] if x else []
    if x is None:
        return "null"
    return type(x).__name__


def _top_shape(x):
    # completions' top_logprobs are maps keyed by token text: compare their value types only
    if isinstance(x, list) and x and isinstance(x[0], dict) and "token" not in x[0]:
        return [{"<token>": sorted({_shape(v) for d in x for v in d.values()})}]
    return _shape(x)


def _stream_shapes(text: str) -> tuple[set[str], list[str]]:
    events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    tail = events[-1:]
    shapes = set()
    for e in events[:-1]:
        shape = _shape(json.loads(e))
        for choice in shape.get("choices", []):
            # vLLM sometimes folds the last text token and the end token into one finishing chunk
            # (delta with or without content): compare the finishing chunk's other keys only
            if choice.get("finish_reason") != "null" and "delta" in choice:
                choice["delta"] = "<final delta>"
        shapes.add(json.dumps(shape, sort_keys=False))
    return shapes, tail


@pytest.fixture
async def pair(start_local_backend):
    local = await start_local_backend(policy=_SamePolicy(), served_model_name="local")
    async with httpx.AsyncClient(timeout=120) as h:
        real_model = (await h.get(f"{REAL}/models")).json()["data"][0]["id"]
        yield h, local, real_model


def _regex_for(text: str) -> str:
    return re.escape(text)


async def _both(pair, path: str, body: dict, forced: str | None = None, root: bool = False):
    h, local, real_model = pair
    real_base = REAL[: -len("/v1")] if root else REAL
    local_base = local.root_url if root else local.base_url
    real_body = dict(body, model=real_model)
    if forced is not None:
        real_body["structured_outputs"] = {"regex": _regex_for(forced)}
    local_body = dict(body, model="local")
    r = await h.post(real_base + path, json=real_body)
    l_ = await h.post(local_base + path, json=local_body)
    return r, l_


CHAT_CASES = {
    "plain": ({"messages": HELLO}, PLAIN),
    "ids_logprobs": ({"messages": HELLO, "return_token_ids": True, "logprobs": True, "top_logprobs": 2}, PLAIN),
    "length": ({"messages": HELLO, "max_tokens": 3, "return_token_ids": True}, PLAIN),
    "n2_token_id_strings": ({"messages": HELLO, "n": 2, "logprobs": True, "top_logprobs": 1,
                             "return_tokens_as_token_ids": True}, PLAIN),
    "tools_no_call": ({"messages": HELLO, "tools": TOOLS, "return_token_ids": True}, PLAIN),
    "tool_call": ({"messages": TOOL_PLEASE, "tools": TOOLS, "return_token_ids": True, "logprobs": True}, TOOL_TEXT),
    "utf8": ({"messages": ACCENTS, "logprobs": True, "top_logprobs": 1}, UTF8),
    "utf8_plain": ({"messages": ACCENTS}, UTF8),
}


@pytest.mark.parametrize("case", sorted(CHAT_CASES))
async def test_chat_completion_has_vllms_keys_and_types(pair, case):
    body, forced = CHAT_CASES[case]
    real, local = await _both(pair, "/chat/completions", body, forced)
    assert real.status_code == local.status_code == 200
    assert _shape(local.json()) == _shape(real.json())


@pytest.mark.parametrize("case", sorted(CHAT_CASES))
async def test_chat_stream_has_vllms_chunk_shapes(pair, case):
    body, forced = CHAT_CASES[case]
    for usage in (False, True):
        streamed = dict(body, stream=True, **({"stream_options": {"include_usage": True}} if usage else {}))
        real, local = await _both(pair, "/chat/completions", streamed, forced)
        assert real.headers["content-type"].startswith("text/event-stream")
        assert local.headers["content-type"].startswith("text/event-stream")
        real_shapes, real_tail = _stream_shapes(real.text)
        local_shapes, local_tail = _stream_shapes(local.text)
        assert local_tail == real_tail == ["[DONE]"]
        assert local_shapes == real_shapes


COMPLETION_CASES = {
    "plain": {"prompt": "say hello"},
    "ids_logprobs": {"prompt": "say hello", "return_token_ids": True, "logprobs": 2},
    "length": {"prompt": "say hello", "max_tokens": 3},
}


@pytest.mark.parametrize("case", sorted(COMPLETION_CASES))
async def test_completion_has_vllms_keys_and_types(pair, case):
    body = dict(COMPLETION_CASES[case], max_tokens=COMPLETION_CASES[case].get("max_tokens", 50))
    real, local = await _both(pair, "/completions", body, PLAIN)
    assert _shape(local.json()) == _shape(real.json())
    streamed = dict(body, stream=True, stream_options={"include_usage": True})
    real, local = await _both(pair, "/completions", streamed, PLAIN)
    assert _stream_shapes(local.text) == _stream_shapes(real.text)


@pytest.mark.parametrize(
    "path, body",
    [
        ("/tokenize", {"prompt": "hello world"}),
        ("/tokenize", {"prompt": "hello world", "return_token_strs": True}),
        ("/tokenize", {"messages": HELLO, "tools": TOOLS}),
        ("/detokenize", {"tokens": [1, 2, 3]}),
    ],
)
async def test_tokenizer_endpoints_have_vllms_keys_and_types(pair, path, body):
    real, local = await _both(pair, path, body, root=True)
    assert real.status_code == local.status_code == 200
    assert _shape(local.json()) == _shape(real.json())


async def test_models_has_vllms_keys_and_types(pair):
    h, local, _ = pair
    real = (await h.get(f"{REAL}/models")).json()
    mine = (await h.get(f"{local.base_url}/models")).json()
    assert _shape(mine) == _shape(real)


ERROR_CASES = [
    {"messages": HELLO, "model": "no-such-model"},
    {"messages": HELLO, "top_logprobs": 2},
    {"messages": HELLO, "max_tokens": 10**6},
    {"messages": HELLO, "temperature": -1},
    {"messages": HELLO, "n": 0},
    {"messages": "x"},
    {"messages": HELLO, "stream": True, "prompt_logprobs": 1},
    {"messages": HELLO, "max_tokens": 0},
    {"messages": HELLO, "stream_options": {"include_usage": True}},
    {"messages": HELLO, "logprobs": True, "top_logprobs": 21},
    {"messages": HELLO, "stop": 5},
    {"messages": HELLO, "n": "x"},
]


@pytest.mark.parametrize("body", ERROR_CASES, ids=lambda b: ",".join(k for k in b if k != "messages") or "messages")
async def test_error_bodies_match_vllms(pair, body):
    h, local, real_model = pair
    real = await h.post(f"{REAL}/chat/completions", json={"model": real_model, **body})
    mine = await h.post(f"{local.base_url}/chat/completions", json={"model": "local", **body})
    assert mine.status_code == real.status_code
    r, m = real.json()["error"], mine.json()["error"]
    assert _shape(m) == _shape(r)
    assert (m["type"], m["param"], m["code"]) == (r["type"], r["param"], r["code"])


async def test_malformed_json_error_matches_vllms(pair):
    h, local, _ = pair
    real = await h.post(f"{REAL}/chat/completions", content=b"{bad", headers={"content-type": "application/json"})
    mine = await h.post(f"{local.base_url}/chat/completions", content=b"{bad",
                        headers={"content-type": "application/json"})
    assert mine.status_code == real.status_code == 400
    assert _shape(mine.json()) == _shape(real.json())
    assert mine.json()["error"]["type"] == real.json()["error"]["type"]
