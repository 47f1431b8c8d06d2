"""The Anthropic Messages API through the proxy, against the local backend's chat endpoint: the harness
gets Messages answers, the record holds the Messages exchange and the chat ids and logprobs."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx
import pytest

from rollout_dataset.backend import LocalBackend
from rollout_dataset.proxy import CaptureProxy, read_trace
from proxy_fakes import valid
from rollout_dataset.wire.anthropic_chat import messages_to_chat

SECRET = "sk-ant-harness-key-5e4d3c2b1a"
BODY = {"model": "local", "max_tokens": 12, "temperature": 0, "system": [{"type": "text", "text": "You are terse."}],
        "messages": [{"role": "user", "content": "count to three please"}],
        "metadata": {"user_id": "u-1"}, "context_management": {"edits": []}}


@pytest.fixture
async def stack(tmp_path: Path):
    async with LocalBackend(policy="echo") as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path / "traces") as proxy:
            yield backend, proxy


async def chat_truth(backend: LocalBackend, body: dict) -> dict:
    """The backend's own chat answer (ids and logprobs) for the chat vLLM would build from `body`."""
    chat = {**messages_to_chat({**body, "stream": False}), "return_token_ids": True, "logprobs": True}
    async with httpx.AsyncClient() as client:
        return (await client.post(backend.base_url + "/chat/completions", json=chat)).json()


def messages_url(proxy: CaptureProxy) -> str:
    return proxy.base_url.removesuffix("/v1") + "/v1/messages?beta=true"


async def test_whole_answer_is_a_message_and_the_record_holds_chat_ids_and_logprobs(stack):
    backend, proxy = stack
    async with httpx.AsyncClient() as client:
        answer = (await client.post(messages_url(proxy), json=BODY, headers={"x-api-key": SECRET})).json()
    truth = await chat_truth(backend, BODY)
    assert answer["type"] == "message" and answer["role"] == "assistant"
    assert answer["content"] == [{"type": "text", "text": truth["choices"][0]["message"]["content"]}]
    assert answer["stop_reason"] == {"stop": "end_turn", "length": "max_tokens"}[truth["choices"][0]["finish_reason"]]
    assert answer["usage"] == {"input_tokens": truth["usage"]["prompt_tokens"],
                               "output_tokens": truth["usage"]["completion_tokens"]}
    (record,) = valid(read_trace(proxy.trace_path()))
    assert record["endpoint"] == "/v1/messages" and record["request"]["metadata"] == {"user_id": "u-1"}
    assert record["response"] == answer
    assert record["prompt_token_ids"] == truth["prompt_token_ids"]
    assert record["completion_token_ids"] == truth["choices"][0]["token_ids"]
    assert record["per_token_logps"] == [c["logprob"] for c in truth["choices"][0]["logprobs"]["content"]]
    assert record["capture_level"] == "tokens"
    assert record["upstream"]["endpoint"] == "/v1/chat/completions"
    assert "metadata" not in record["upstream"]["request"] and record["upstream"]["request"]["return_token_ids"]
    assert record["effective_sampling_params"]["max_tokens"] == 12
    assert record["upstream_changes"]["not_sent"] == ["metadata", "context_management"] and record["notes"] == []


async def test_stream_events_are_the_messages_sequence_and_the_record_holds_ids(stack):
    backend, proxy = stack
    async with httpx.AsyncClient() as client:
        async with client.stream("POST", messages_url(proxy), json={**BODY, "stream": True}) as response:
            raw = (await response.aread()).decode()
    events = [(block.split("\n")[0].removeprefix("event: "), json.loads(block.split("\n")[1].removeprefix("data: ")))
              for block in raw.strip().split("\n\n")]
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert all(data["type"] == name for name, data in events)
    truth = await chat_truth(backend, BODY)
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert text == truth["choices"][0]["message"]["content"]
    (record,) = valid(read_trace(proxy.trace_path()))
    assert record["stream"] is True and record["capture_level"] == "tokens"
    assert record["prompt_token_ids"] == truth["prompt_token_ids"]
    assert record["completion_token_ids"] == truth["choices"][0]["token_ids"]
    assert record["response"]["content"] == [{"type": "text", "text": text}]


async def test_anthropic_sdk_sees_no_token_field_the_proxy_added_and_its_key_stays_out_of_the_record(stack, tmp_path):
    _, proxy = stack
    client = anthropic.AsyncAnthropic(base_url=proxy.base_url.removesuffix("/v1"), api_key=SECRET, max_retries=0)
    body = {k: v for k, v in BODY.items() if k not in ("metadata", "context_management", "temperature")}
    message = await client.messages.create(**body)
    dumped = message.model_dump()
    assert "prompt_token_ids" not in json.dumps(dumped) and "logprobs" not in json.dumps(dumped)
    async with client.messages.stream(**body) as stream:
        final = await stream.get_final_message()
    assert final.content[0].text == message.content[0].text
    for path in (tmp_path / "traces").rglob("*"):
        assert SECRET.encode() not in path.read_bytes()


async def test_malformed_body_gets_an_anthropic_400_and_a_record(stack):
    _, proxy = stack
    async with httpx.AsyncClient() as client:
        response = await client.post(messages_url(proxy), json={"model": "local", "messages": "hi"})
    assert response.status_code == 400
    assert response.json()["type"] == "error" and "max_tokens" in response.json()["error"]["message"]
    assert response.json()["error"]["type"] == "invalid_request_error"
    (record,) = valid(read_trace(proxy.trace_path()))
    assert record["status"] == 400 and record["error"]["kind"] == "bad_request"
    assert record["response"] == response.json()


async def test_upstream_error_comes_back_as_an_anthropic_error_with_its_status(stack):
    _, proxy = stack
    async with httpx.AsyncClient() as client:
        response = await client.post(messages_url(proxy), json={**BODY, "max_tokens": 10**7})
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    (record,) = valid(read_trace(proxy.trace_path()))
    assert record["status"] == 400 and record["response"] == body


@pytest.fixture
async def fake_stack(tmp_path: Path):
    from proxy_fakes import FakeVLLM, serve

    fake = FakeVLLM()
    async with serve(fake.app) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces", upstream_timeout=0.5) as proxy:
            async with httpx.AsyncClient(timeout=10) as client:
                yield fake, proxy, client


async def test_stream_the_upstream_cuts_ends_with_an_anthropic_error_event_and_a_record(fake_stack):
    _, proxy, client = fake_stack
    body = {"model": "drop", "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with client.stream("POST", messages_url(proxy), json=body) as response:
        raw = (await response.aread()).decode()
    last = raw.strip().split("\n\n")[-1].split("\n")
    assert last[0] == "event: error"
    error = json.loads(last[1].removeprefix("data: "))
    assert error["type"] == "error" and error["error"]["type"] == "api_error"
    (record,) = valid(read_trace(proxy.trace_path()))
    assert record["error"]["kind"] == "upstream_disconnect"
    assert record["response"]["content"] == [{"type": "text", "text": "Hello there"}]
    assert len(record["completion_token_ids"]) == 2


async def test_body_that_is_not_json_gets_an_anthropic_400_and_a_record(fake_stack):
    fake, proxy, client = fake_stack
    response = await client.post(messages_url(proxy), content=b'{"model": ', headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    (record,) = valid(read_trace(proxy.trace_path()))
    assert record["status"] == 400 and record["response"] == response.json() and fake.requests == []


async def test_local_backend_answers_messages_as_the_chat_it_builds(stack):
    backend, _ = stack
    async with httpx.AsyncClient() as client:
        native = (await client.post(backend.base_url.removesuffix("/v1") + "/v1/messages", json=BODY)).json()
    truth = await chat_truth(backend, BODY)
    assert native["content"] == [{"type": "text", "text": truth["choices"][0]["message"]["content"]}]
    assert native["usage"]["input_tokens"] == len(truth["prompt_token_ids"])
    assert "prompt_token_ids" not in native  # like vLLM's native endpoint: no ids


async def test_proxy_answer_equals_the_backends_native_messages_answer_streaming_and_not(stack):
    backend, proxy = stack
    volatile = {"id"}
    async with httpx.AsyncClient() as client:
        native = (await client.post(backend.base_url.removesuffix("/v1") + "/v1/messages", json=BODY)).json()
        proxied = (await client.post(messages_url(proxy), json=BODY)).json()
        assert {k: v for k, v in proxied.items() if k not in volatile} == {k: v for k, v in native.items() if k not in volatile}
        streams = []
        for url in (backend.base_url.removesuffix("/v1") + "/v1/messages", messages_url(proxy)):
            raw = (await client.post(url, json={**BODY, "stream": True})).text
            events = [json.loads(b.split("\n")[1][6:]) for b in raw.strip().split("\n\n")]
            events[0]["message"].pop("id")
            streams.append(events)
    assert streams[0] == streams[1]


async def test_count_tokens_is_forwarded_and_recorded_as_a_non_generation_call(stack):
    backend, proxy = stack
    body = {"model": "local", "messages": BODY["messages"], "system": BODY["system"]}
    async with httpx.AsyncClient() as client:
        answer = (await client.post(messages_url(proxy).replace("/v1/messages", "/v1/messages/count_tokens"),
                                    json=body)).json()
    truth = await chat_truth(backend, BODY)
    assert answer == {"input_tokens": len(truth["prompt_token_ids"]),
                      "context_management": {"original_input_tokens": len(truth["prompt_token_ids"])}}
    (record,) = valid(read_trace(proxy.trace_path()))
    assert record["endpoint"] == "/v1/messages/count_tokens" and record["capture_level"] == "none"
    assert record["response"] == answer and "upstream" not in record


async def test_anthropic_sdk_never_sees_the_upstream_key_the_proxy_adds(tmp_path):
    upstream_key = "sk-real-upstream-7c6b5a4f3e2d"
    async with LocalBackend(policy="echo") as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path / "traces", api_key=upstream_key) as proxy:
            client = anthropic.AsyncAnthropic(base_url=proxy.base_url.removesuffix("/v1"), api_key="dummy",
                                              max_retries=0)
            body = {k: v for k, v in BODY.items() if k not in ("metadata", "context_management", "temperature")}
            raw = await client.messages.with_raw_response.create(**body)
            async with client.messages.stream(**body) as stream:
                events = [event.model_dump_json() async for event in stream]
    assert upstream_key not in raw.http_response.text and upstream_key not in str(raw.http_response.headers)
    assert events and not any(upstream_key in event for event in events)
    for path in (tmp_path / "traces").rglob("*"):
        assert upstream_key.encode() not in path.read_bytes()


def _messages_only_upstream():
    """A Messages-only server (no chat endpoint, as Anthropic's own API): answers whole or streamed."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn",
               "stop_sequence": None, "content": [{"type": "text", "text": "Hi there"}],
               "usage": {"input_tokens": 5, "output_tokens": 2}}

    async def messages(request):
        body = await request.json()
        if not body.get("stream"):
            return JSONResponse(message)
        start = {**message, "content": [], "stop_reason": None, "usage": {"input_tokens": 5, "output_tokens": 0}}
        events = [("message_start", {"type": "message_start", "message": start}),
                  ("content_block_start", {"type": "content_block_start", "index": 0,
                                           "content_block": {"type": "text", "text": ""}}),
                  ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                           "delta": {"type": "text_delta", "text": "Hi there"}}),
                  ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                  ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                     "usage": {"output_tokens": 2}}),
                  ("message_stop", {"type": "message_stop"})]
        text = "".join(f"event: {n}\ndata: {json.dumps(d)}\n\n" for n, d in events)
        return Response(text, media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_an_upstream_without_chat_gets_the_call_natively_and_it_is_recorded_as_text(tmp_path, stream):
    from proxy_fakes import serve

    async with serve(_messages_only_upstream()) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces") as proxy:
            async with httpx.AsyncClient() as client:
                response = await client.post(messages_url(proxy), json={**BODY, "stream": stream})
    assert response.status_code == 200
    assert ("Hi there" in response.text) and ("event: message_stop" in response.text) == stream
    (record,) = valid(read_trace(proxy.trace_path()))
    assert record["capture_level"] == "text" and record["prompt_token_ids"] is None
    assert record["response"]["content"] == [{"type": "text", "text": "Hi there"}]
    assert "upstream" not in record and any("no chat completions endpoint" in n for n in record["notes"])


def _chat_stream_upstream(chunks: list) -> object:
    """A model server whose chat endpoint streams `chunks` (parsed JSON values), then ``[DONE]``."""
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    async def chat(request):
        text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return Response(text, media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def _chunk(delta: dict, finish: str | None = None) -> dict:
    return {"id": "c1", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


async def _messages_stream(tmp_path: Path, chunks: list) -> tuple[str, dict]:
    from proxy_fakes import serve

    async with serve(_chat_stream_upstream(chunks)) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces") as proxy:
            async with httpx.AsyncClient(timeout=10) as client:
                response = await client.post(messages_url(proxy), json={**BODY, "stream": True})
    (record,) = valid(read_trace(proxy.trace_path()))
    return response.text, record


async def test_a_chat_chunk_the_translation_cannot_read_is_not_forwarded_into_the_messages_stream(tmp_path):
    text, record = await _messages_stream(tmp_path, [[1], _chunk({"role": "assistant", "content": ""}),
                                                     _chunk({"content": "hi"}), _chunk({}, "stop")])
    data = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    assert all(isinstance(d, dict) and "type" in d for d in data), data
    assert data[0]["type"] == "message_start" and record["response"]["content"] == [{"type": "text", "text": "hi"}]
    assert any("stream event 0" in note for note in record["notes"])


async def test_text_in_the_first_chat_chunk_reaches_the_messages_answer(tmp_path):
    text, record = await _messages_stream(tmp_path, [_chunk({"role": "assistant", "content": "Hel"}),
                                                     _chunk({"content": "lo"}), _chunk({}, "stop")])
    assert record["response"]["content"] == [{"type": "text", "text": "Hello"}]
    assert '"text":"Hel"' in text


def _native_stream_upstream(events: list[dict]) -> object:
    """A Messages-only server (no chat endpoint) that streams `events`, and nothing after."""
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    async def messages(request):
        text = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
        return Response(text, media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])


_NATIVE_START = {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                                                       "model": "m", "content": [], "usage": {"input_tokens": 5}}}


async def _native_stream(tmp_path: Path, events: list[dict]) -> tuple[str, list[dict]]:
    from proxy_fakes import serve

    async with serve(_native_stream_upstream(events)) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces") as proxy:
            async with httpx.AsyncClient(timeout=10) as client:
                response = await client.post(messages_url(proxy), json={**BODY, "stream": True})
    return response.text, valid(read_trace(proxy.trace_path()))


async def test_a_native_messages_stream_with_an_event_of_odd_shape_is_recorded_as_it_came(tmp_path):
    odd = {"type": "content_block_start", "index": [0], "content_block": {"type": "text", "text": ""}}
    text, records = await _native_stream(tmp_path, [_NATIVE_START, odd, {"type": "message_stop"}])
    (record,) = records
    assert isinstance(record["response"], str) and '"index": [0]' in record["response"]
    assert any("could not be assembled" in note for note in record["notes"])
    assert "api_error" not in text


async def test_a_native_messages_stream_that_ends_before_message_stop_is_recorded_as_cut_short(tmp_path):
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}
    _, (record,) = await _native_stream(tmp_path, [_NATIVE_START, delta])
    assert record["error"]["kind"] == "upstream_disconnect" and "message_stop" in record["error"]["message"]


async def test_an_error_in_the_chat_stream_reaches_the_harness_as_an_anthropic_error_event(tmp_path):
    error = {"error": {"object": "error", "message": "engine died", "type": "InternalServerError", "code": 500}}
    text, record = await _messages_stream(tmp_path, [_chunk({"role": "assistant", "content": ""}),
                                                     _chunk({"content": "Hel"}), error])
    events = [line[7:] for line in text.splitlines() if line.startswith("event: ")]
    assert events[-1] == "error" and "message_delta" not in events, events
    last = json.loads([line for line in text.splitlines() if line.startswith("data: ")][-1][6:])
    assert last == {"type": "error", "error": {"type": "api_error", "message": "engine died"}}
    assert record["error"]["kind"] == "upstream_status"
