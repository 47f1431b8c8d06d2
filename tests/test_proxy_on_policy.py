"""On-policy mode through the real proxy and the local backend: a forced non-canonical tokenization
breaks the prefix chain without the mode; with it every turn extends the previous one exactly, the
harness sees the same text, and what cannot be repaired is recorded with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from rollout_dataset.backend import LocalBackend
from rollout_dataset.backend.template import render_assistant_text
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.schema import schema_errors

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
SYSTEM = {"role": "system", "content": "You are a careful agent."}
TASK = {"role": "user", "content": "List the files, then say what you saw."}
CALL = {"name": "bash", "arguments": {"command": "ls -la"}}


def char_ids(tokenizer, text: str) -> list[int]:
    """One id per character: the same text, never the tokenizer's own split."""
    return [i for ch in text for i in tokenizer.encode(ch, add_special_tokens=False)]


def forced_steps(tokenizer) -> list[dict]:
    """A tool call, then a text answer, then a last answer; all tokenized one character at a time."""
    return [{"token_ids": char_ids(tokenizer, render_assistant_text("Let me look.", [CALL]))},
            {"token_ids": char_ids(tokenizer, "Two files: a.py and b.py.")},
            {"token_ids": char_ids(tokenizer, "You are welcome.")}]


def extends(parent: dict, child: dict) -> bool:
    """Whether the child's prompt starts with the parent's prompt and sampled ids."""
    head = parent["prompt_token_ids"] + parent["completion_token_ids"]
    return child["prompt_token_ids"][: len(head)] == head


def streamed_message(text: str) -> dict:
    """The assistant message of an SSE chat stream (content and tool calls joined from the deltas)."""
    content, calls = "", {}
    for line in text.splitlines():
        if not line.startswith("data: {"):
            continue
        for choice in json.loads(line[6:])["choices"]:
            delta = choice.get("delta") or {}
            content += delta.get("content") or ""
            for call in delta.get("tool_calls") or ():
                slot = calls.setdefault(call["index"], {"id": None, "type": "function",
                                                        "function": {"name": "", "arguments": ""}})
                slot["id"] = call.get("id") or slot["id"]
                slot["function"]["name"] += (call.get("function") or {}).get("name") or ""
                slot["function"]["arguments"] += (call.get("function") or {}).get("arguments") or ""
    return {"content": content or None, "tool_calls": [calls[i] for i in sorted(calls)] or None}


async def agent(proxy: CaptureProxy, *, stream: bool = False, system_from_turn: int | None = None) -> list[str]:
    """A three-turn tool-using conversation, as harnesses keep it (messages, not ids); returns the texts seen."""
    messages = [SYSTEM, TASK]
    seen = []
    async with httpx.AsyncClient(timeout=30) as client:
        for turn in range(3):
            if system_from_turn is not None and turn >= system_from_turn:
                messages[0] = {"role": "system", "content": "You are a fast agent."}
            body = {"model": "local", "messages": messages, "tools": TOOLS, "stream": stream}
            r = await client.post(proxy.session_base_url("s") + "/chat/completions", json=body)
            assert r.status_code == 200, r.text
            message = streamed_message(r.text) if stream else r.json()["choices"][0]["message"]
            seen.append(json.dumps([message["content"], message.get("tool_calls") and
                                    [c["function"] for c in message["tool_calls"]]]))
            reply = {"role": "assistant", "content": message["content"]}
            if message.get("tool_calls"):
                reply["tool_calls"] = message["tool_calls"]
            messages = messages + [reply]
            if message.get("tool_calls"):
                messages.append({"role": "tool", "tool_call_id": message["tool_calls"][0]["id"],
                                 "content": "a.py\nb.py"})
            else:
                messages.append({"role": "user", "content": "Thanks!"})
    return seen


async def run(tmp_path: Path, steps, *, on_policy: bool, tokenizer="builtin", **kw) -> tuple[list[dict], list[str]]:
    async with LocalBackend(policy="script", script=steps, tokenizer=tokenizer) as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path / str(on_policy),
                                on_policy=on_policy) as proxy:
            seen = await agent(proxy, **kw)
            records = read_trace(proxy.trace_path("s"))
    for record in records:
        assert schema_errors(record, "trace_record") == [], record
    return records, seen


async def test_without_the_mode_a_non_canonical_reply_breaks_the_prefix_chain(tmp_path, builtin_tokenizer):
    records, _ = await run(tmp_path, forced_steps(builtin_tokenizer), on_policy=False)
    assert not extends(records[0], records[1]) and not extends(records[1], records[2])
    assert all("continuity" not in r for r in records)


async def test_with_the_mode_every_turn_extends_the_previous_one_and_the_harness_sees_the_same_text(
        tmp_path, builtin_tokenizer):
    steps = forced_steps(builtin_tokenizer)
    off, seen_off = await run(tmp_path, steps, on_policy=False)
    on, seen_on = await run(tmp_path, steps, on_policy=True)
    assert seen_on == seen_off
    assert extends(on[0], on[1]) and extends(on[1], on[2])
    assert [r["continuity"]["status"] for r in on] == ["exact", "repaired", "repaired"]
    assert on[0]["continuity"]["reason"] == "new_conversation"
    drift = on[1]["continuity"]["drift"]
    assert drift["position"] == len(on[0]["prompt_token_ids"])  # the reply is where the render drifted
    assert drift["sent_tokens"] > drift["server_tokens"]  # one id per character vs merged tokens
    assert [r["continuity"]["parent_index"] for r in on] == [None, 0, 1]
    assert on[1]["upstream_changes"]["kv_transfer_params"] == {"prompt_token_ids_count": len(on[1]["prompt_token_ids"])}


async def test_a_canonical_reply_is_forwarded_unchanged_and_recorded_exact(tmp_path):
    steps = [{"text": "Let me look.", "tool_calls": [CALL]}, "Two files.", "Bye."]
    records, _ = await run(tmp_path, steps, on_policy=True)
    assert [r["continuity"]["status"] for r in records] == ["exact", "exact", "exact"]
    assert all("kv_transfer_params" not in r["upstream_changes"] for r in records)
    assert extends(records[0], records[1]) and extends(records[1], records[2])


async def test_streamed_calls_are_repaired_too(tmp_path, builtin_tokenizer):
    records, _ = await run(tmp_path, forced_steps(builtin_tokenizer), on_policy=True, stream=True)
    assert all(r["stream"] for r in records)
    assert [r["continuity"]["status"] for r in records] == ["exact", "repaired", "repaired"]
    assert extends(records[0], records[1]) and extends(records[1], records[2])


async def test_a_rewritten_system_prompt_is_not_repaired_and_says_why(tmp_path, builtin_tokenizer):
    records, _ = await run(tmp_path, forced_steps(builtin_tokenizer), on_policy=True, system_from_turn=2)
    last = records[2]["continuity"]
    assert last["status"] == "not_repaired" and last["reason"] == "no_parent"
    assert "message 0" in last["detail"] and "'system'" in last["detail"]
    assert records[1]["continuity"]["status"] == "repaired"


async def test_a_think_dropping_template_is_reasoning_dropped_and_says_why(tmp_path, builtin_tokenizer):
    from test_harness_shapes import think_dropping

    steps = [{"token_ids": char_ids(builtin_tokenizer, "<think>\nplan\n</think>\n\nLet me look.\n"
                                    '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>')},
             "Two files.", "Bye."]
    records, _ = await run(tmp_path, steps, on_policy=True, tokenizer=think_dropping(builtin_tokenizer))
    second = records[1]["continuity"]
    # the template drops the think block whatever the harness sends: by design, not a break
    assert second["status"] == "reasoning_dropped" and second["reason"] == "template_dropped_reasoning"
    assert "reasoning" in second["detail"]


def ignoring_prompt_ids(app):
    """The backend as a server that does not know `kv_transfer_params` (drops it before the app sees it)."""

    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if body:
            parsed = json.loads(body)
            parsed.pop("kv_transfer_params", None)
            body = json.dumps(parsed).encode()
        headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        delivered = False

        async def replay():
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app({**scope, "headers": headers}, replay, send)

    return wrapped


async def test_a_server_that_ignores_given_prompt_ids_turns_the_mode_off_once_and_every_record_says_so(
        tmp_path, builtin_tokenizer, caplog):
    from rollout_dataset.backend import create_backend_app

    app = ignoring_prompt_ids(create_backend_app(policy="script", script=forced_steps(builtin_tokenizer)))
    async with CaptureProxy(upstream="http://upstream.test/v1", trace_dir=tmp_path, on_policy=True,
                            transport=httpx.ASGITransport(app)) as proxy:
        with caplog.at_level("WARNING"):
            seen = await agent(proxy)
        records = read_trace(proxy.trace_path("s"))
    assert len(seen) == 3 and all(r["status"] == 200 for r in records)
    assert [r["continuity"]["reason"] for r in records[1:]] == ["server_ignores_prompt_ids"] * 2
    assert all(r["continuity"]["status"] == "not_repaired" for r in records[1:])
    assert not extends(records[0], records[1])  # the answer came from the server's own render, as sent
    assert all("kv_transfer_params" not in r["upstream_changes"] for r in records)
    assert sum("on-policy mode is off" in m for m in caplog.messages) == 1


def header_newline_only_in_history(tokenizer):
    """A copy of the built-in tokenizer whose generation prompt lacks the newline history puts after
    the assistant header (as the tiny model of shared/tools/real-vllm, and several real templates)."""
    import copy

    variant = copy.deepcopy(tokenizer)
    original = "{{- '<|im_start|>assistant\\n' -}}\n    {%- if enable_thinking"
    assert original in variant.chat_template
    variant.chat_template = variant.chat_template.replace(
        original, "{{- '<|im_start|>assistant' -}}\n    {%- if enable_thinking")
    return variant


async def test_a_history_only_header_newline_is_replaced_by_the_sampled_ids(tmp_path, builtin_tokenizer):
    variant = header_newline_only_in_history(builtin_tokenizer)
    records, _ = await run(tmp_path, forced_steps(builtin_tokenizer), on_policy=True, tokenizer=variant)
    assert [r["continuity"]["status"] for r in records] == ["exact", "repaired", "repaired"]
    assert extends(records[0], records[1]) and extends(records[1], records[2])
    newline = builtin_tokenizer.encode("\n", add_special_tokens=False)
    parent_prompt = records[0]["prompt_token_ids"]
    assert parent_prompt[-len(newline):] != newline  # the model generated right after the header


async def test_a_reply_cut_by_max_tokens_is_closed_with_the_templates_end_of_turn(tmp_path, builtin_tokenizer):
    steps = forced_steps(builtin_tokenizer)
    async with LocalBackend(policy="script", script=steps) as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path, on_policy=True) as proxy:
            async with httpx.AsyncClient(timeout=30) as client:
                url = proxy.session_base_url("s") + "/chat/completions"
                first = (await client.post(url, json={"messages": [TASK], "max_tokens": 5})).json()
                cut = first["choices"][0]["message"]["content"]
                assert first["choices"][0]["finish_reason"] == "length"
                await client.post(url, json={"messages": [TASK, {"role": "assistant", "content": cut},
                                                          {"role": "user", "content": "go on"}]})
            records = read_trace(proxy.trace_path("s"))
    assert records[1]["continuity"]["status"] == "repaired"
    assert extends(records[0], records[1])
    end = records[1]["prompt_token_ids"][len(records[0]["prompt_token_ids"]) + 5]
    assert end == builtin_tokenizer.eos_token_id  # the template's <|im_end|> closes the cut turn


async def test_a_restarted_proxy_finds_the_parents_its_earlier_run_recorded(tmp_path):
    messages = [SYSTEM, TASK]

    async def turn(proxy: CaptureProxy) -> None:
        nonlocal messages
        async with httpx.AsyncClient(timeout=30) as client:
            r = await client.post(proxy.session_base_url("s") + "/chat/completions",
                                  json={"model": "local", "messages": messages, "max_tokens": 6})
        assert r.status_code == 200, r.text
        messages = messages + [r.json()["choices"][0]["message"], {"role": "user", "content": "go on"}]

    async with LocalBackend(policy="echo") as backend:
        for _run in range(2):  # the second proxy starts on the first one's trace files
            async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path, on_policy=True) as proxy:
                await turn(proxy)
                await turn(proxy)
    records = read_trace(tmp_path / "s.jsonl")
    assert [r["index"] for r in records] == [0, 1, 2, 3]
    assert [r["continuity"]["parent_index"] for r in records] == [None, 0, 1, 2]  # 2 continues the first run's 1
    assert all(r["continuity"]["status"] == "exact" for r in records)


def padding_tokenize_answers(app, padding: int):
    """The app, whose ``/tokenize`` answers end with `padding` spaces (still JSON)."""
    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or scope["path"] != "/tokenize":
            return await app(scope, receive, send)

        async def padded(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [(k, v) for k, v in message["headers"] if k != b"content-length"]}
            elif not message.get("more_body", False):
                message = {**message, "body": message.get("body", b"") + b" " * padding}
            await send(message)

        await app(scope, receive, padded)

    return wrapped


async def test_a_tokenize_answer_past_the_in_flight_limit_gets_the_continuing_call_a_503(tmp_path, builtin_tokenizer):
    from rollout_dataset.backend import create_backend_app

    app = padding_tokenize_answers(create_backend_app(policy="script", script=forced_steps(builtin_tokenizer)),
                                   200_000)
    async with CaptureProxy(upstream="http://upstream.test/v1", trace_dir=tmp_path, on_policy=True,
                            transport=httpx.ASGITransport(app), max_inflight_bytes=100_000) as proxy:
        async with httpx.AsyncClient(timeout=30) as client:
            url = proxy.session_base_url("s") + "/chat/completions"
            first = await client.post(url, json={"model": "local", "messages": [SYSTEM, TASK]})
            reply = {"role": "assistant", "content": first.json()["choices"][0]["message"]["content"]}
            second = await client.post(url, json={"model": "local", "messages": [SYSTEM, TASK, reply,
                                                                                 {"role": "user", "content": "Thanks!"}]})
        records = read_trace(proxy.trace_path("s"))
    assert first.status_code == 200  # a new conversation: no server call of the mode's
    assert second.status_code == 503 and "max_inflight_bytes" in second.json()["error"]["message"]
    assert records[1]["status"] == 503 and records[1]["error"]["kind"] == "proxy_overloaded"
