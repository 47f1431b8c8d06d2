"""Opt-in: `serve --tokenizer harmony --reasoning-parser openai_gptoss` against a genuine vLLM 0.32 gpt-oss.

The genuine server serves a tiny `gpt_oss` model whose Harmony reply is set by its weights
(`real_model/build_scripted_gptoss.py`: script `call` says a tool call, `final` a final answer):

    .venv/bin/python real_model/build_scripted_gptoss.py tokenizer /tmp/gptoss-call
    $REAL_VLLM_HOME/venv/bin/python real_model/build_scripted_gptoss.py weights /tmp/gptoss-call call
    VLLM_SYSTEM_START_DATE=2026-12-04 VLLM_CPU_KVCACHE_SPACE=1 $REAL_VLLM_HOME/venv/bin/python \\
        -m vllm.entrypoints.openai.api_server --model /tmp/gptoss-call --served-model-name gptoss \\
        --port 18017 --dtype bfloat16 --max-model-len 4096 --enable-auto-tool-choice --tool-call-parser openai \\
        --reasoning-parser openai_gptoss --logprobs-mode processed_logprobs
    REAL_VLLM_HARMONY_URL=http://127.0.0.1:18017/v1 REAL_VLLM_HARMONY_DATE=2026-12-04 \\
        pytest -m real_vllm tests/test_real_vllm_harmony.py

For each request the local backend emits exactly the ids the genuine server sampled; the two answers
must then agree on the prompt ids (vLLM's Harmony render of the messages), every key and type, the
reasoning/content/tool-call split, finish and stop reasons, `usage` and, streamed, every chunk's delta
and ids. Only ids of responses and tool calls, timestamps, fingerprints and logprob values may differ.
The same holds on `/v1/responses` (`test_local_harmony_responses_match_genuine_vllm`; what it compares
is recorded in tests/data/real_vllm_harmony_responses.json for the default run), the prefix cache's
figures aside.
"""

from __future__ import annotations

import datetime
import json
import os
from typing import Any

import httpx
import pytest

from rollout_dataset.backend import LocalBackend, PolicyOutput
from support.vllm_compare import chunk_view, message_view, one_token_chunks, post_chat, stream_chat

REAL = os.environ.get("REAL_VLLM_HARMONY_URL", "").rstrip("/")
DATE = os.environ.get("REAL_VLLM_HARMONY_DATE") or datetime.date.today().isoformat()
pytestmark = [pytest.mark.real_vllm,
              pytest.mark.skipif(not REAL, reason="set REAL_VLLM_HARMONY_URL to compare with vLLM's gpt-oss path")]

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
SYSTEM = {"role": "system", "content": "Be brief."}
#: case -> (messages before the case's user message, request extras)
CASES: dict[str, tuple[list[dict], dict[str, Any]]] = {
    "with_tools": ([SYSTEM], {"tools": TOOLS}),
    "without_tools": ([], {}),
    "cut_in_header": ([], {"tools": TOOLS, "max_tokens": 3}),
    "cut_in_body": ([], {"tools": TOOLS, "max_tokens": 12}),
    "include_reasoning_false": ([], {"tools": TOOLS, "include_reasoning": False}),
    "reasoning_effort_high": ([SYSTEM], {"tools": TOOLS, "reasoning_effort": "high"}),
    "tool_loop_history": ([SYSTEM, {"role": "user", "content": "w"},
                           {"role": "assistant", "content": None, "reasoning": "Need it.", "tool_calls": [CALL]},
                           {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}], {"tools": TOOLS}),
    "history_with_final_answer": ([{"role": "user", "content": "w"},
                                   {"role": "assistant", "content": "Sunny.", "reasoning": "Think."}], {}),
}
_IDS: dict[str, list[int]] = {}


class _Replay:
    """Emits, for the case named in the last user message, the ids the genuine server sampled."""

    run_in_thread = False

    def respond(self, request):
        name = next(m["content"] for m in reversed(request.messages) if m.get("role") in ("user", "tool"))
        return PolicyOutput(token_ids=_IDS[name])


@pytest.fixture(scope="module")
def local():
    with LocalBackend.start_in_thread(tokenizer="harmony", policy=_Replay(), served_model_name="gptoss",
                                      reasoning_parser="openai_gptoss", harmony_start_date=DATE) as backend:
        yield backend


def _body(case: str) -> dict:
    before, extras = CASES[case]
    last = {"role": "tool", "tool_call_id": "call_1", "content": case} if case == "tool_loop_history" else \
        {"role": "user", "content": case}
    messages = before[:-1] + [last] if case == "tool_loop_history" else before + [last]
    return {"model": "gptoss", "messages": messages, "return_token_ids": True, "logprobs": True, "top_logprobs": 1,
            "temperature": 0, "max_tokens": 40, **extras}


@pytest.mark.parametrize("case", list(CASES))
def test_local_harmony_answer_matches_genuine_vllm(local, case):
    body = _body(case)
    real = post_chat(REAL, body)
    _IDS[case] = post_chat(REAL, {**body, "include_reasoning": True})["choices"][0]["token_ids"]
    mine = post_chat(local.base_url, body)
    assert message_view(mine, stop_reason=True) == message_view(real, stop_reason=True)
    assert chunk_view(stream_chat(local.base_url, body), stop_reason=True) == \
        chunk_view(one_token_chunks(REAL, body), stop_reason=True)


def test_genuine_vllm_tokenize_does_not_render_harmony():
    """vLLM 0.32's /tokenize renders chat messages with the model's chat template, not Harmony (this
    model ships none, so it is refused); the local backend renders Harmony there (docs/backend.md)."""
    r = httpx.post(f"{REAL.removesuffix('/v1')}/tokenize", timeout=60,
                   json={"model": "gptoss", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and "chat template" in r.json()["error"]["message"]


RESPONSES_TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather of a city",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
#: /v1/responses cases (the ones recorded in tests/data/real_vllm_harmony_responses.json)
RESPONSES_CASES: dict[str, dict[str, Any]] = {
    "tools": {"tools": RESPONSES_TOOLS, "instructions": "Be brief."}, "no_tools": {},
    "cut3": {"tools": RESPONSES_TOOLS, "max_output_tokens": 3}, "cut12": {"tools": RESPONSES_TOOLS, "max_output_tokens": 12},
    "logprobs": {"tools": RESPONSES_TOOLS, "include": ["message.output_text.logprobs"]},
    "messages": {"tools": RESPONSES_TOOLS, "enable_response_messages": True},
    "history": {"tools": RESPONSES_TOOLS, "input": [
        {"role": "user", "content": "w"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]},
}


def _responses_view(value: Any) -> Any:
    """An answer or event without its random ids and timestamps, and without the prefix cache's figures
    (vLLM caches a repeated prompt; the local backend has no cache)."""
    if isinstance(value, dict):
        out = {k: ("ID" if k in ("id", "call_id", "item_id", "created_at") else _responses_view(v))
               for k, v in value.items()}
        if "cache_write_tokens" in out:
            out.update(cached_tokens=0, cache_write_tokens=0, cached_tokens_per_turn=[0])
        return out
    if isinstance(value, list):
        return [_responses_view(v) for v in value]
    return value


def _responses_events(base_url: str, body: dict) -> list[dict]:
    with httpx.stream("POST", f"{base_url}/responses", json={**body, "stream": True}, timeout=120) as r:
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]


@pytest.mark.parametrize("case", list(RESPONSES_CASES))
def test_local_harmony_responses_match_genuine_vllm(case):
    """Re-records what tests/data/real_vllm_harmony_responses.json holds: the same request to both servers,
    the local backend emitting the ids the genuine model samples, answers and event streams equal."""
    sampled = post_chat(REAL, {"model": "gptoss", "messages": [{"role": "user", "content": "w"}], "max_tokens": 40,
                               "temperature": 0, "return_token_ids": True})["choices"][0]["token_ids"]
    body = {"model": "gptoss", "input": "w", "temperature": 0, "max_output_tokens": 40, **RESPONSES_CASES[case]}
    with LocalBackend.start_in_thread(tokenizer="harmony", policy=_Fixed(sampled), served_model_name="gptoss",
                                      reasoning_parser="openai_gptoss", harmony_start_date=DATE) as local:
        real, mine = (httpx.post(f"{url}/responses", json=body, timeout=120) for url in (REAL, local.base_url))
        assert mine.status_code == real.status_code
        assert _responses_view(mine.json()) == _responses_view(real.json())
        if real.status_code == 200:
            assert _responses_view(_responses_events(local.base_url, body)) == \
                _responses_view(_responses_events(REAL, body))


class _Fixed:
    """Emits the given ids whatever the request."""

    run_in_thread = False

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def respond(self, request):
        return PolicyOutput(token_ids=self.ids)
