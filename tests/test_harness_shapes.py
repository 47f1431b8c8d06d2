"""The harness shapes of issue 4, each a test: roles and roots come out right by structure alone.

Records are made the way the local backend makes them: prompt ids are the built-in tokenizer's chat
template rendered with ``add_generation_prompt=True``; sampled ids are the assistant text + ``<|im_end|>``.
(``test_harness_shapes_proxy.py`` drives some of the same shapes through the real proxy and backend.)
"""

from __future__ import annotations

import json

import pytest

from rollout_dataset.export import export_rollout
from support.synthetic_records import make_record, tool_manifest

TOOLS = tool_manifest("bash", "read", "write")


@pytest.fixture(scope="module")
def tokenizer():
    from rollout_dataset.tokenizers import load_tokenizer

    return load_tokenizer("builtin")


def think_dropping(tokenizer):
    """A copy of the built-in tokenizer whose template drops think blocks from earlier assistant turns."""
    import copy

    variant = copy.deepcopy(tokenizer)
    original = "{%- set body = text(m.content) -%}"
    assert original in variant.chat_template
    variant.chat_template = variant.chat_template.replace(
        original, original + "{%- if '</think>' in body -%}{%- set body = body.split('</think>')[-1].lstrip('\\n') -%}{%- endif -%}"
    )
    return variant


class Server:
    """Makes trace records as the local backend would answer (server ids from the chat template)."""

    def __init__(self, tokenizer, *, with_ids: bool = True) -> None:
        self.tokenizer = tokenizer
        self.with_ids = with_ids
        self.records: list[dict] = []

    def call(self, messages, text, *, tools=None, tool_call=None, session_header=None):
        from rollout_dataset.backend.template import render_assistant_text
        from rollout_dataset.tokenizers import chat_prompt_ids, encode_text

        calls = [{"name": tool_call[0], "arguments": tool_call[1]}] if tool_call else []
        prompt = chat_prompt_ids(self.tokenizer, messages, tools)
        sampled = encode_text(self.tokenizer, render_assistant_text(text, calls) + "<|im_end|>")
        message = {"role": "assistant", "content": text or None}
        if tool_call:
            message["tool_calls"] = [{"id": f"call_{len(self.records)}", "type": "function",
                                      "function": {"name": tool_call[0], "arguments": json.dumps(tool_call[1])}}]
        record = make_record(
            len(self.records), prompt if self.with_ids else None, sampled if self.with_ids else None,
            messages=messages, response_message=message, tools=tools, harness_session_id=session_header,
            finish_reason="tool_calls" if tool_call else "stop",
        )
        if not self.with_ids:
            record["per_token_logps"] = None
        self.records.append(record)
        return message


def agent_loop(server, system, task, n_turns, *, tools=TOOLS, system_from=None, think=False):
    """A tool-using agent: each turn calls bash, gets a result, and the history grows unbroken."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": task}]
    for turn in range(n_turns):
        if system_from and turn >= system_from[0]:
            messages[0] = {"role": "system", "content": system_from[1]}
        text = f"<think>\nplan step {turn}\n</think>\n\nrunning step {turn}" if think else f"step {turn}"
        reply = server.call(list(messages), text, tools=tools, tool_call=("bash", {"cmd": f"echo {turn}"}))
        messages += [reply, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": f"out {turn}"}]
    return messages


def _roles(doc):
    return [s["role"] for s in doc["sequences"]]


def _export(server, level="tokens"):
    return export_rollout(server.records, session_id="shape", metadata={}, capture_level=level)


def test_opencode_toolless_title_root_plus_agent_root_is_auxiliary_plus_agent(tokenizer):
    server = Server(tokenizer)
    server.call([{"role": "system", "content": "You are a title generator."}, {"role": "user", "content": "fix the bug"}],
                "Fix the bug", session_header="ses_1")
    agent_loop(server, "You are opencode.", "fix the bug", 3)
    doc = _export(server)
    assert doc["stats"]["n_roots"] == 2
    assert _roles(doc) == ["auxiliary", "agent"]
    assert [s["trainable"] for s in doc["sequences"]] == [False, True]
    assert not [f for f in doc["findings"] if f["code"] == "prefix_break"]  # the title root is unrelated


def test_claude_code_system_prompt_rewrite_at_call_6_gives_two_trainable_agent_roots(tokenizer):
    server = Server(tokenizer)
    agent_loop(server, "You are Claude Code." * 3, "fix the bug", 9, system_from=(6, "You are Claude Code, v2." * 3))
    doc = _export(server)
    assert doc["stats"]["n_roots"] == 2
    assert _roles(doc) == ["agent", "agent"]
    assert [s["n_turns"] for s in doc["sequences"]] == [6, 3]
    assert all(s["trainable"] for s in doc["sequences"])
    (brk,) = [f for f in doc["findings"] if f["code"] == "prefix_break"]
    assert brk["level"] == "INFO" and brk["call_index"] == 6 and "system prompt changed" in brk["message"]


def test_terminus_2_without_any_tool_manifest_makes_every_live_path_agent(tokenizer):
    server = Server(tokenizer)
    server.call([{"role": "user", "content": "summarise the task"}], "a summary")
    agent_loop(server, "You are terminus.", "fix the bug", 3, tools=None)
    doc = _export(server)
    assert _roles(doc) == ["agent", "agent"]
    assert doc["stats"]["n_trainable_sequences"] == 2


def test_retry_of_the_same_prompt_with_one_continued_is_one_discarded_sequence(tokenizer):
    server = Server(tokenizer)
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    server.call(list(messages), "a first try that the harness threw away", tools=TOOLS)
    reply = server.call(list(messages), "", tools=TOOLS, tool_call=("bash", {"cmd": "ls"}))
    messages += [reply, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": "a.py"}]
    server.call(list(messages), "done", tools=TOOLS)
    doc = _export(server)
    assert _roles(doc) == ["discarded", "agent"]
    assert doc["stats"]["n_discarded"] == 1
    assert [c["discarded"] for c in doc["calls"]] == [True, False, False]


def test_template_that_drops_earlier_think_blocks_gives_a_root_per_turn_with_info_finding(tokenizer):
    server = Server(think_dropping(tokenizer))
    agent_loop(server, "You think first.", "fix the bug", 4, think=True)
    doc = export_rollout(server.records, session_id="shape", metadata={}, capture_level="tokens",
                         tokenizer=server.tokenizer)  # decodes the ids and re-renders the history: names the cause
    assert doc["stats"]["n_roots"] == 4
    assert _roles(doc) == ["agent"] * 4 and all(s["trainable"] for s in doc["sequences"])
    breaks = [f for f in doc["findings"] if f["code"] == "prefix_break"]
    assert [f["call_index"] for f in breaks] == [1, 2, 3]
    assert all(f["level"] == "INFO" and "[template_dropped_reasoning]" in f["message"] for f in breaks)
    assert all(s["earlier_reasoning_absent"] == (s["node_ids"][0] > 0) for s in doc["sequences"])


def test_eval_capture_without_ids_keeps_structure_and_trains_nothing(tokenizer):
    server = Server(tokenizer, with_ids=False)
    server.call([{"role": "system", "content": "You are a title generator."}, {"role": "user", "content": "x"}], "Title")
    agent_loop(server, "You are opencode.", "fix the bug", 3)
    doc = _export(server, level="text")
    assert doc["stats"]["mode"] == "messages"
    assert doc["stats"]["n_roots"] == 2 and doc["stats"]["max_depth"] == 3
    assert _roles(doc) == ["auxiliary", "agent"]
    assert doc["trainable"] is False and doc["stats"]["n_trainable_tokens"] == 0
    assert all(s["input_ids"] == [] and not s["trainable"] for s in doc["sequences"])


# --- The same shapes through the real recording proxy in front of the local backend (script policy) ---

STEPS = [{"text": f"step {k}", "tool_calls": [{"name": "bash", "arguments": {"cmd": f"echo {k}"}}]} for k in range(8)]
THINK_STEPS = [{"text": f"<think>\nplan {k}\n</think>\n\nstep {k}", "tool_calls": [{"name": "bash", "arguments": {"cmd": f"echo {k}"}}]}
               for k in range(4)]


async def _captured(tmp_path, drive, *, tokenizer="builtin", steps=STEPS):
    """Serve the backend, put the proxy in front, let `drive(client)` talk to it, return the records."""
    import openai

    from rollout_dataset.backend import LocalBackend
    from rollout_dataset.proxy import CaptureProxy, read_trace

    async with LocalBackend(tokenizer=tokenizer, policy="script", script={"steps": steps, "final": "Done."}) as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path / "traces") as proxy:
            async with openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-test", max_retries=0) as client:
                await drive(client)
            return read_trace(proxy.trace_path())


async def _ask(client, messages, *, tools=TOOLS, stream=False, headers=None):
    kwargs = {"tools": tools} if tools else {}
    if stream:
        text, calls = "", {}
        response = await client.chat.completions.create(model="local", messages=messages, stream=True,
                                                        stream_options={"include_usage": True}, extra_headers=headers, **kwargs)
        async for chunk in response:
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for tc in choice.delta.tool_calls or []:
                    slot = calls.setdefault(tc.index, {"id": tc.id, "type": "function", "function": {"name": "", "arguments": ""}})
                    slot["function"]["name"] += (tc.function.name or "") if tc.function else ""
                    slot["function"]["arguments"] += (tc.function.arguments or "") if tc.function else ""
        message = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = [calls[k] for k in sorted(calls)]
        return message
    response = await client.chat.completions.create(model="local", messages=messages, extra_headers=headers, **kwargs)
    return response.choices[0].message.model_dump(exclude_none=True, exclude={"refusal", "annotations", "audio", "function_call"})


async def _loop(client, system, n, *, stream=False, rewrite=None, headers=None):
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "fix the bug"}]
    for turn in range(n):
        if rewrite and turn == rewrite[0]:
            messages[0] = {"role": "system", "content": rewrite[1]}
        reply = await _ask(client, list(messages), stream=stream, headers=headers)
        messages += [reply, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": f"out {turn}"}]


def _doc(records):
    assert all(r["capture_level"] == "tokens" for r in records)
    return export_rollout(records, session_id="proxy", metadata={}, capture_level="tokens")


async def test_proxy_opencode_shape_streams_title_root_and_agent_root(tmp_path):
    headers = {"x-session-id": "ses_42"}

    async def drive(client):
        await _ask(client, [{"role": "system", "content": "You are a title generator."}, {"role": "user", "content": "fix the bug"}],
                   tools=None, stream=True, headers=headers)
        await _loop(client, "You are opencode.", 3, stream=True, headers=headers)

    doc = _doc(await _captured(tmp_path, drive))
    assert _roles(doc) == ["auxiliary", "agent"]
    assert [s["n_turns"] for s in doc["sequences"]] == [1, 3]
    assert doc["sequences"][1]["trainable"] and not doc["sequences"][0]["trainable"]
    assert {c["harness_session_id"] for c in doc["calls"]} == {"ses_42"}


async def test_proxy_claude_code_shape_rewrites_system_at_call_6(tmp_path):
    async def drive(client):
        await _loop(client, "You are Claude Code.", 8, rewrite=(6, "You are Claude Code (compacted)."))

    doc = _doc(await _captured(tmp_path, drive))
    assert _roles(doc) == ["agent", "agent"]
    assert [s["n_turns"] for s in doc["sequences"]] == [6, 2]
    assert all(s["trainable"] for s in doc["sequences"])
    assert [f["call_index"] for f in doc["findings"] if f["code"] == "prefix_break"] == [6]


async def test_proxy_retry_of_the_same_request_is_discarded(tmp_path):
    async def drive(client):
        messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
        await _ask(client, list(messages))
        reply = await _ask(client, list(messages))  # the harness retried and kept this answer
        messages += [reply, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": "ok"}]
        await _ask(client, messages)

    doc = _doc(await _captured(tmp_path, drive))
    assert _roles(doc) == ["discarded", "agent"]
    assert [c["discarded"] for c in doc["calls"]] == [True, False, False]


async def test_proxy_think_dropping_template_gives_a_root_per_turn(tmp_path, tokenizer):
    async def drive(client):
        await _loop(client, "You think first.", 3)

    records = await _captured(tmp_path, drive, tokenizer=think_dropping(tokenizer), steps=THINK_STEPS)
    doc = export_rollout(records, session_id="proxy", metadata={}, capture_level="tokens",
                         tokenizer=think_dropping(tokenizer))
    assert doc["stats"]["n_roots"] == 3
    breaks = [f for f in doc["findings"] if f["code"] == "prefix_break"]
    assert [f["call_index"] for f in breaks] == [1, 2]
    assert all("[template_dropped_reasoning]" in f["message"] for f in breaks)
