"""The Responses API through the proxy to a gpt-oss server (the local backend with
`--tokenizer harmony`, which answers `/v1/responses` as vLLM 0.32 serves gpt-oss): the server refuses
the output-text logprobs the proxy asks for, so the proxy sends the call again without them, the
harness gets the answer it gets directly, and the record says why it holds text, not tokens. A
harness that asks for logprobs itself gets the server's refusal unchanged."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from rollout_dataset.backend import LocalBackend
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.schema import schema_errors

TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
SCRIPT = {"steps": [{"reasoning": "Need the weather tool.", "text": "Checking.",
                     "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}],
          "final": "Sunny in Paris."}
BODY = {"model": "local", "input": "Weather in Paris?", "tools": TOOLS, "seed": 1}
VOLATILE = {"id", "created_at", "call_id", "item_id"}  # differ between any two calls, proxy or not
REFUSED = "the server refuses output logprobs on /v1/responses"
#: a genuine vLLM 0.32 serving the scripted tiny gpt-oss (tests/test_real_vllm_harmony.py says how to start it)
REAL_HARMONY = os.environ.get("REAL_VLLM_HARMONY_URL", "").rstrip("/")


def _stable(obj: Any) -> Any:
    if isinstance(obj, dict):  # a genuine vLLM's prefix cache may count a repeated prompt's tokens as cached
        return {k: _stable(v) for k, v in obj.items() if k not in VOLATILE and k != "input_tokens_details"}
    if isinstance(obj, list):
        return [_stable(v) for v in obj]
    return obj


@pytest.fixture
async def stack(tmp_path: Path):
    async with LocalBackend(tokenizer="harmony", policy="script", script=SCRIPT, reasoning_parser="openai_gptoss",
                            harmony_start_date="2026-12-04") as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path / "traces") as proxy:
            yield backend, proxy


async def _post(base_url: str, **extra: Any) -> httpx.Response:
    async with httpx.AsyncClient(timeout=60) as client:
        return await client.post(f"{base_url}/responses", json={**BODY, **extra})


async def _events(base_url: str, **extra: Any) -> tuple[int, list[dict]]:
    async with httpx.AsyncClient(timeout=60) as client:
        async with client.stream("POST", f"{base_url}/responses", json={**BODY, "stream": True, **extra}) as r:
            lines = [line async for line in r.aiter_lines()]
    return r.status_code, [_stable(json.loads(line[6:])) for line in lines if line.startswith("data: ")]


async def test_a_responses_call_gets_the_answer_it_gets_directly_and_the_record_names_the_refusal(stack):
    backend, proxy = stack
    direct, proxied = await _post(backend.base_url), await _post(proxy.base_url)
    assert proxied.status_code == direct.status_code == 200
    assert _stable(proxied.json()) == _stable(direct.json())
    (record,) = read_trace(proxy.trace_path())
    assert schema_errors(record, "trace_record") == [] and record["error"] is None
    assert record["upstream_changes"] == {"enable_response_messages": True}
    assert record["per_token_logps"] is None and any(n.startswith(REFUSED) for n in record["notes"])
    # gpt-oss gives Harmony messages, not ids: text level, and the notes say so
    assert record["capture_level"] == "text" and record["completion_token_ids"] is None
    assert any("Harmony messages without token ids" in n for n in record["notes"])


async def test_a_streamed_responses_call_gets_the_events_it_gets_directly(stack):
    backend, proxy = stack
    (status, direct), (proxied_status, proxied) = await _events(backend.base_url), await _events(proxy.base_url)
    assert status == proxied_status == 200 and proxied == direct and proxied[-1]["type"] == "response.completed"
    (record,) = read_trace(proxy.trace_path())
    assert record["stream"] is True and record["error"] is None and record["capture_level"] == "text"
    assert any(n.startswith(REFUSED) for n in record["notes"])


async def test_later_calls_to_a_refusing_model_are_sent_without_logprobs_at_once(stack):
    _, proxy = stack
    for _ in range(2):
        assert (await _post(proxy.base_url)).status_code == 200
    first, second = read_trace(proxy.trace_path())
    assert any(n.startswith(REFUSED) and n.endswith("(sent again)") for n in first["notes"])
    assert any(n.startswith(REFUSED) and n.endswith("(remembered from an earlier call)") for n in second["notes"])
    assert second["upstream_changes"] == {"enable_response_messages": True}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_harness_that_asks_for_logprobs_itself_gets_the_servers_400_unchanged(stack, stream):
    backend, proxy = stack
    extra = {"include": ["message.output_text.logprobs"], "stream": stream}
    direct, proxied = await _post(backend.base_url, **extra), await _post(proxy.base_url, **extra)
    assert proxied.status_code == direct.status_code == 400
    assert proxied.json() == direct.json()
    (record,) = read_trace(proxy.trace_path())
    assert record["status"] == 400 and not any(n.startswith(REFUSED) for n in record["notes"])


async def test_a_400_that_is_not_about_logprobs_is_forwarded_unchanged_and_not_sent_again(stack):
    backend, proxy = stack
    extra = {"max_output_tokens": 10**9}
    direct, proxied = await _post(backend.base_url, **extra), await _post(proxy.base_url, **extra)
    assert proxied.status_code == direct.status_code == 400
    assert proxied.content == direct.content and "max_output_tokens" in proxied.json()["error"]["message"]
    (record,) = read_trace(proxy.trace_path())
    assert record["upstream_changes"]["include"] == ["message.output_text.logprobs"]
    assert not any(n.startswith(REFUSED) for n in record["notes"])


async def test_a_400_larger_than_the_refusal_check_reads_reaches_the_harness_whole(tmp_path):
    from proxy_fakes import serve
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    big = json.dumps({"error": {"message": "logprobs " + "x" * 200_000, "type": "invalid_request_error"}})
    sent: list[dict] = []

    async def responses(request):
        sent.append(json.loads(await request.body()))
        return Response(big, status_code=400, media_type="application/json")

    app = Starlette(routes=[Route("/v1/responses", responses, methods=["POST"])])
    async with serve(app) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces") as proxy:
            reply = await _post(proxy.base_url)
    assert reply.status_code == 400 and reply.text == big and len(sent) == 1
    (record,) = read_trace(proxy.trace_path())
    assert record["status"] == 400 and not any(n.startswith(REFUSED) for n in record["notes"])


@pytest.mark.real_vllm
@pytest.mark.skipif(not REAL_HARMONY, reason="set REAL_VLLM_HARMONY_URL to run against vLLM's gpt-oss path")
@pytest.mark.parametrize("stream", [False, True])
async def test_genuine_vllm_gpt_oss_responses_calls_through_the_proxy_get_the_direct_answer(tmp_path, stream):
    root = REAL_HARMONY.removesuffix("/v1")
    body = {"model": "gptoss", "temperature": 0, "max_output_tokens": 40, "stream": stream}
    async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces") as proxy:
        if stream:
            (status, direct), (proxied_status, proxied) = (await _events(REAL_HARMONY, **body),
                                                           await _events(proxy.base_url, **body))
            assert status == proxied_status == 200 and proxied == direct
        else:
            direct, proxied = await _post(REAL_HARMONY, **body), await _post(proxy.base_url, **body)
            assert proxied.status_code == direct.status_code == 200
            assert _stable(proxied.json()) == _stable(direct.json())
    (record,) = read_trace(proxy.trace_path())
    assert record["error"] is None and record["capture_level"] == "text"
    assert record["upstream_changes"] == {"enable_response_messages": True}
    assert any(n.startswith(REFUSED) for n in record["notes"])
    assert any("Harmony messages without token ids" in n for n in record["notes"])


def _answer(body: dict[str, Any], logprobs: bool) -> dict[str, Any]:
    """A Responses answer with ids, and with an output-text logprob when `logprobs`."""
    entries = [{"token": "hi", "logprob": -0.1, "bytes": [104, 105], "top_logprobs": []}] if logprobs else None
    return {"id": "r1", "object": "response", "status": "completed", "model": body["model"],
            "output": [{"type": "message", "id": "m", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": "hi", "annotations": [], "logprobs": entries}]}],
            "input_messages": [{"tokens": [1, 2]}], "output_messages": [{"tokens": [3]}],
            "usage": {"input_tokens": 2, "output_tokens": 1, "total_tokens": 3}}


async def test_a_400_that_merely_echoes_logprob_reaches_the_harness_unchanged_and_later_calls_keep_logprobs(tmp_path):
    from proxy_fakes import serve
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    # vLLM 0.32's validation handler echoes the harness's bad input value into the 400's message
    echo = json.dumps({"error": {"message": "1 validation error:\n  {'type': 'model_attributes_type', 'loc': "
                                            "'body.prompt', 'msg': 'Input should be a valid dictionary', "
                                            "'input': 'logprobs are not supported with gpt-oss models'}",
                                 "type": "Bad Request", "param": "logprobs", "code": 400}})
    sent: list[dict] = []

    async def responses(request):
        body = json.loads(await request.body())
        sent.append(body)
        if "prompt" in body:
            return Response(echo, status_code=400, media_type="application/json")
        return JSONResponse(_answer(body, "message.output_text.logprobs" in (body.get("include") or [])))

    app = Starlette(routes=[Route("/v1/responses", responses, methods=["POST"])])
    async with serve(app) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces") as proxy:
            hostile = await _post(proxy.base_url, prompt="logprobs are not supported with gpt-oss models")
            later = await _post(proxy.base_url)
    assert hostile.status_code == 400 and hostile.text == echo and len(sent) == 2
    assert sent[1]["include"] == ["message.output_text.logprobs"]
    assert later.status_code == 200 and later.json()["output"][0]["content"][0]["logprobs"] is None
    first, second = read_trace(proxy.trace_path())
    assert first["status"] == 400 and not any(n.startswith(REFUSED) for n in first["notes"])
    assert second["per_token_logps"] == [-0.1] and not any(n.startswith(REFUSED) for n in second["notes"])


async def test_a_refusing_model_is_remembered_only_once_the_call_without_logprobs_succeeds(tmp_path):
    from proxy_fakes import serve
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    refusal = {"error": {"message": "logprobs are not supported with gpt-oss models", "type": "invalid_request_error",
                         "param": "logprobs", "code": 400}}
    sent: list[bool] = []

    async def responses(request):
        body = json.loads(await request.body())
        sent.append("message.output_text.logprobs" in (body.get("include") or []))
        if sent[-1]:
            return JSONResponse(refusal, status_code=400)
        if sent.count(False) == 1:  # the first call sent again fails for a reason of its own
            return JSONResponse({"error": {"message": "busy", "type": "ServiceUnavailable", "code": 503}}, 503)
        return JSONResponse(_answer(body, False))

    app = Starlette(routes=[Route("/v1/responses", responses, methods=["POST"])])
    async with serve(app) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces") as proxy:
            statuses = [(await _post(proxy.base_url)).status_code for _ in range(3)]
    assert statuses == [503, 200, 200]
    assert sent == [True, False, True, False, False]  # the failed resend did not make the model remembered


@pytest.mark.parametrize("close", [True, False])
async def test_an_upstream_that_fails_while_its_400_is_read_is_named_the_model_servers_fault(tmp_path, close, caplog):
    from proxy_fakes import serve_raw

    async def answer(head: bytes) -> tuple[bytes, bool]:  # a 400's head and part of its body, then close or stall
        return (b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n"
                b'{"error": {"message": "x', close)

    kind, status = ("upstream_disconnect", 502) if close else ("upstream_timeout", 504)
    async with serve_raw(answer) as (root, _):
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces",
                                upstream_timeout=1.0) as proxy:
            reply = await _post(proxy.base_url)
    assert reply.status_code == status and "the model server at" in reply.json()["error"]["message"]
    (record,) = read_trace(proxy.trace_path())
    assert record["status"] == status and record["error"]["kind"] == kind
    assert not any(r.exc_info for r in caplog.records)  # no traceback: not the proxy's failure


# ---- the in-flight bound: the refusal read and the body sent again are counted --------------------

REFUSAL = {"error": {"message": "logprobs are not supported with gpt-oss models", "type": "invalid_request_error",
                     "param": "logprobs", "code": 400}}


def _refusing_server(sent: list[bool], refusal: str = json.dumps(REFUSAL)):
    """A gpt-oss-like server on /v1/responses: vLLM's logprob refusal while asked for them, else an answer."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    async def responses(request):
        body = json.loads(await request.body())
        sent.append("message.output_text.logprobs" in (body.get("include") or []))
        if sent[-1]:
            return Response(refusal, status_code=400, media_type="application/json")
        return JSONResponse(_answer(body, False))

    return Starlette(routes=[Route("/v1/responses", responses, methods=["POST"])])


def _overloaded(reply: httpx.Response, record: dict[str, Any]) -> bool:
    return (reply.status_code == 503 and "max_inflight_bytes" in reply.json()["error"]["message"]
            and record["status"] == 503 and record["error"]["kind"] == "proxy_overloaded")


async def test_a_refusal_whose_bytes_pass_the_in_flight_limit_gets_a_503_and_is_not_sent_again(tmp_path):
    from proxy_fakes import serve

    sent: list[bool] = []
    padded = json.dumps(REFUSAL) + " " * 40_000  # still vLLM's refusal, as JSON; 40 kB to read
    async with serve(_refusing_server(sent, padded)) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces", max_inflight_bytes=30_000) as proxy:
            reply = await _post(proxy.base_url)
    assert sent == [True]
    (record,) = read_trace(proxy.trace_path())
    assert _overloaded(reply, record)


async def test_the_body_sent_again_without_logprobs_is_counted_against_the_in_flight_limit(tmp_path):
    from proxy_fakes import serve

    sent: list[bool] = []
    async with serve(_refusing_server(sent)) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces", max_inflight_bytes=50_000) as proxy:
            big = await _post(proxy.base_url, input="x" * 30_000)  # its body once as received, once sent again
            small = await _post(proxy.base_url)
    assert sent == [True, True, False]  # the big one was not sent again; the small one was
    assert small.status_code == 200  # the refused call gave its bytes back
    refused, ok = read_trace(proxy.trace_path())
    assert _overloaded(big, refused) and any(n.startswith(REFUSED) for n in refused["notes"])
    assert ok["error"] is None


async def test_the_body_of_a_call_to_a_remembered_refusing_model_is_counted_against_the_in_flight_limit(tmp_path):
    from proxy_fakes import serve

    sent: list[bool] = []
    async with serve(_refusing_server(sent)) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces", max_inflight_bytes=50_000) as proxy:
            first = await _post(proxy.base_url)  # refused, sent again: the model is remembered
            big = await _post(proxy.base_url, input="x" * 30_000)
    assert first.status_code == 200 and sent == [True, False]  # the big one never went upstream
    _, refused = read_trace(proxy.trace_path())
    assert _overloaded(big, refused)
    assert any(n.startswith(REFUSED) and n.endswith("(remembered from an earlier call)") for n in refused["notes"])
