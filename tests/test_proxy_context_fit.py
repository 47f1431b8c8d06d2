"""Context fitting in the proxy: `max_tokens_cap` and `fit_context` against the local backend
configured with a small `max_model_len` (vLLM refuses prompt + max_tokens > max_model_len)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from rollout_dataset.backend import LocalBackend
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.proxy.context_fit import (
    CONTEXT_EXHAUSTED,
    ContextPolicy,
    plan_output_limits,
    summarize_fitting,
)
from rollout_dataset.schema import schema_errors

MESSAGES = [{"role": "user", "content": "count to three please"}]
SMALL = 256


# ---- the rules, as a pure function -----------------------------------------------------------------

def test_fit_lowers_every_output_limit_to_the_room_left():
    plan = plan_output_limits("chat", {"max_tokens": 32000, "max_completion_tokens": 900},
                              ContextPolicy(fit_context=True), max_model_len=4096, prompt_tokens=3000)
    assert plan.changes == {"max_tokens": 1096} and not plan.exhausted
    plan = plan_output_limits("chat", {"max_completion_tokens": 5000}, ContextPolicy(fit_context=True), 4096, 96)
    assert plan.changes == {"max_completion_tokens": 4000}


def test_limits_are_never_raised_and_a_missing_limit_is_left_to_the_server_without_a_cap():
    assert plan_output_limits("chat", {"max_tokens": 10}, ContextPolicy(fit_context=True), 4096, 100).changes == {}
    assert plan_output_limits("chat", {}, ContextPolicy(fit_context=True), 4096, 100).changes == {}


def test_the_cap_lowers_a_limit_and_sets_a_missing_one_for_chat_and_responses_only():
    cap = ContextPolicy(max_tokens_cap=512)
    assert plan_output_limits("chat", {"max_tokens": 32000}, cap).changes == {"max_tokens": 512}
    assert plan_output_limits("chat", {}, cap).changes == {"max_tokens": 512}
    assert plan_output_limits("responses", {}, cap).changes == {"max_output_tokens": 512}
    assert plan_output_limits("completions", {}, cap).changes == {}  # the server's default is 16


def test_cap_and_room_together_take_the_smaller():
    both = ContextPolicy(max_tokens_cap=512, fit_context=True)
    assert plan_output_limits("chat", {"max_tokens": 32000}, both, 4096, 3900).changes == {"max_tokens": 196}
    assert plan_output_limits("chat", {"max_tokens": 32000}, both, 4096, 100).changes == {"max_tokens": 512}


def test_a_prompt_that_fills_the_context_is_exhausted():
    plan = plan_output_limits("chat", {"max_tokens": 10}, ContextPolicy(fit_context=True), 4096, 4096)
    assert plan.exhausted and plan.changes == {} and "4096" in plan.notes[0]


def test_a_cap_below_one_is_refused():
    with pytest.raises(ValueError, match="max_tokens_cap"):
        ContextPolicy(max_tokens_cap=0)


# ---- the proxy against the local backend with a small context ----------------------------------------

@pytest.fixture
async def small_backend():
    async with LocalBackend(policy="echo", max_model_len=SMALL) as backend:
        yield backend


async def _post(proxy: CaptureProxy, body: dict) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.post(proxy.base_url + "/chat/completions", json=body, timeout=30)


async def test_without_fitting_the_servers_400_reaches_the_harness_as_it_came(small_backend, tmp_path: Path):
    async with CaptureProxy(upstream=small_backend.base_url, trace_dir=tmp_path) as proxy:
        r = await _post(proxy, {"model": "local", "messages": MESSAGES, "max_tokens": 32000})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith(
        "max_tokens=32000 cannot be greater than max_model_len=256")
    (record,) = read_trace(proxy.trace_path())
    assert record["error"]["kind"] == "upstream_status" and "max_tokens" not in record["upstream_changes"]


async def test_fitting_lowers_max_tokens_to_the_room_left_and_records_it(small_backend, tmp_path: Path):
    async with httpx.AsyncClient() as client:
        counted = (await client.post(small_backend.root_url + "/tokenize",
                                     json={"model": "local", "messages": MESSAGES})).json()["count"]
    async with CaptureProxy(upstream=small_backend.base_url, trace_dir=tmp_path,
                            context=ContextPolicy(fit_context=True)) as proxy:
        r = await _post(proxy, {"model": "local", "messages": MESSAGES, "max_tokens": 32000, "stream": True})
    assert r.status_code == 200 and "data: [DONE]" in r.text
    (record,) = read_trace(proxy.trace_path())
    assert schema_errors(record, "trace_record") == []
    room = SMALL - counted
    assert record["upstream_changes"]["max_tokens"] == room
    assert record["requested_sampling_params"]["max_tokens"] == 32000
    assert record["effective_sampling_params"]["max_tokens"] == room
    assert len(record["prompt_token_ids"]) == counted and record["capture_level"] == "tokens"
    assert any(f"max_tokens 32000 -> {room}" in note for note in record["notes"])
    summary = summarize_fitting([record], ContextPolicy(fit_context=True))
    assert summary["calls_lowered"] == 1 and summary["lowered"][0] == {
        "index": 0, "field": "max_tokens", "requested": 32000, "effective": room}


async def test_the_cap_is_applied_and_recorded(small_backend, tmp_path: Path):
    async with CaptureProxy(upstream=small_backend.base_url, trace_dir=tmp_path,
                            context=ContextPolicy(max_tokens_cap=5)) as proxy:
        r = await _post(proxy, {"model": "local", "messages": MESSAGES, "max_tokens": 32000})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 5
    (record,) = read_trace(proxy.trace_path())
    assert record["upstream_changes"]["max_tokens"] == 5 and record["effective_sampling_params"]["max_tokens"] == 5


async def test_a_prompt_that_fills_the_context_is_answered_by_the_proxy_as_context_exhausted(small_backend,
                                                                                             tmp_path: Path):
    long = [{"role": "user", "content": "word " * (2 * SMALL)}]
    async with CaptureProxy(upstream=small_backend.base_url, trace_dir=tmp_path,
                            context=ContextPolicy(fit_context=True)) as proxy:
        r = await _post(proxy, {"model": "local", "messages": long, "max_tokens": 10})
    assert r.status_code == 400 and r.json()["error"]["type"] == CONTEXT_EXHAUSTED
    (record,) = read_trace(proxy.trace_path())
    assert schema_errors(record, "trace_record") == []
    assert record["error"]["kind"] == CONTEXT_EXHAUSTED and record["response"]["error"]["type"] == CONTEXT_EXHAUSTED
    assert summarize_fitting([record], ContextPolicy(fit_context=True))["context_exhausted"] is True


async def test_a_server_without_tokenize_gets_the_call_unchanged_with_a_note(tmp_path: Path):
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def models(request):
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def chat(request):
        return JSONResponse({"seen": await request.json()})

    app = Starlette(routes=[Route("/v1/models", models), Route("/v1/chat/completions", chat, methods=["POST"])])
    async with CaptureProxy(upstream="http://upstream/v1", trace_dir=tmp_path, transport=httpx.ASGITransport(app),
                            context=ContextPolicy(fit_context=True)) as proxy:
        r = await _post(proxy, {"model": "m", "messages": MESSAGES, "max_tokens": 32000})
    assert r.json()["seen"]["max_tokens"] == 32000
    (record,) = read_trace(proxy.trace_path())
    assert "max_tokens" not in record["upstream_changes"]
    assert any("reports no max_model_len" in note for note in record["notes"])


def test_without_a_prompt_length_the_limit_is_fitted_to_max_model_len():
    plan = plan_output_limits("responses", {"max_output_tokens": 32000}, ContextPolicy(fit_context=True), 4096)
    assert plan.changes == {"max_output_tokens": 4096} and "max_model_len 4096" in plan.notes[0]


async def test_a_responses_prompt_is_measured_as_the_chat_messages_vllm_renders(small_backend, tmp_path: Path):
    body = {"model": "local", "input": "count to three please", "max_output_tokens": 250}
    async with httpx.AsyncClient() as client:
        truth = (await client.post(small_backend.base_url + "/responses",
                                   json={**body, "max_output_tokens": 8, "enable_response_messages": True})).json()
    prompt = len(truth["input_messages"][0]["tokens"])
    async with CaptureProxy(upstream=small_backend.base_url, trace_dir=tmp_path,
                            context=ContextPolicy(fit_context=True)) as proxy:
        async with httpx.AsyncClient() as client:
            r = await client.post(proxy.base_url + "/responses", json=body, timeout=30)
    assert r.status_code == 200
    (record,) = read_trace(proxy.trace_path())
    assert record["upstream_changes"]["max_output_tokens"] == SMALL - prompt
    assert len(record["prompt_token_ids"]) == prompt


async def test_a_tokenize_answer_past_the_in_flight_limit_gets_the_call_a_503_and_it_is_not_sent(tmp_path: Path):
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    sent: list[dict] = []

    async def models(request):
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 4096}]})

    async def tokenize(request):  # a 200 kB answer (JSON padded with spaces) to the proxy's own call
        return Response(json.dumps({"count": 3, "max_model_len": 4096, "tokens": [1, 2, 3]}) + " " * 200_000,
                        media_type="application/json")

    async def chat(request):
        sent.append(await request.json())
        return JSONResponse({"seen": sent[-1]})

    app = Starlette(routes=[Route("/v1/models", models), Route("/tokenize", tokenize, methods=["POST"]),
                            Route("/v1/chat/completions", chat, methods=["POST"])])
    async with CaptureProxy(upstream="http://upstream/v1", trace_dir=tmp_path, transport=httpx.ASGITransport(app),
                            context=ContextPolicy(fit_context=True), max_inflight_bytes=100_000) as proxy:
        r = await _post(proxy, {"model": "m", "messages": MESSAGES, "max_tokens": 32000})
    assert r.status_code == 503 and "max_inflight_bytes" in r.json()["error"]["message"] and sent == []
    (record,) = read_trace(proxy.trace_path())
    assert record["status"] == 503 and record["error"]["kind"] == "proxy_overloaded"
