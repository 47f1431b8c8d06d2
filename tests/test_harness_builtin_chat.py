"""One assistant turn (`ChatTurnClient`), the piece the coding agent and the Crafter agent share,
against a scripted chat server on loopback."""

from __future__ import annotations

import contextlib
import time

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from proxy_fakes import serve
from rollout_dataset.server_runner import serve_in_thread
from rollout_dataset.errors import UpstreamError, UpstreamStatusError
from rollout_dataset.harness import ChatTurnClient

TOOL_CALL = {"id": "call_1", "type": "function", "index": 0,
             "function": {"name": "act", "arguments": "{\"actions\": [\"noop\"]}"}}


def _reply(message: dict) -> JSONResponse:
    return JSONResponse({"choices": [{"index": 0, "message": {"role": "assistant", **message},
                                      "finish_reason": "stop"}]})


@contextlib.asynccontextmanager
async def _scripted(responses: list[Response]):
    """A chat server answering each POST with the next response of the list; yields its chat URL."""
    queue = list(responses)

    async def chat(request):
        await request.body()
        return queue.pop(0)

    async with serve(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])) as root:
        yield root + "/v1/chat/completions"


def _turns(responses: list[Response], n: int, report_url: str | None = None):
    with serve_in_thread(lambda: _scripted(responses), name="scripted-chat") as url:
        with ChatTurnClient(url, api_key="k", report_url=report_url) as chat:
            deadline = time.monotonic() + 30
            return [chat.turn({"model": "m", "messages": []}, deadline) for _ in range(n)], chat.calls


@pytest.mark.parametrize("key", ["reasoning", "reasoning_content"])  # vLLM 0.32's key, and older servers'
def test_the_assistant_message_carries_tool_calls_in_request_form_and_the_reasoning(key):
    (turn,), calls = _turns([_reply({"content": None, "tool_calls": [TOOL_CALL], key: "think"})], 1)
    assert calls == 1 and turn.stop_reason is None
    assert turn.assistant == {"role": "assistant", "content": None, "reasoning": "think",
                              "tool_calls": [{"id": "call_1", "type": "function", "function": {
                                  "name": "act", "arguments": "{\"actions\": [\"noop\"]}"}}]}
    assert turn.tool_calls == turn.assistant["tool_calls"]


def test_a_first_call_answered_5xx_raises_naming_status_and_the_report_url():
    with pytest.raises(UpstreamStatusError) as info:
        _turns([JSONResponse({"error": {"message": "engine exploded"}}, status_code=503)], 1,
               report_url="http://upstream.example/v1/chat/completions")
    assert info.value.status == 503 and info.value.url == "http://upstream.example/v1/chat/completions"


def test_a_later_failure_or_an_unreadable_answer_is_a_stop_reason_not_an_exception():
    turns, calls = _turns([_reply({"content": "hi"}), JSONResponse({}, status_code=500),
                           Response("not json", media_type="text/plain")], 3)
    assert calls == 3 and turns[0].assistant == {"role": "assistant", "content": "hi"} and turns[0].tool_calls == []
    assert [t.stop_reason for t in turns[1:]] == ["upstream_error", "upstream_error"]
    assert "HTTP 500" in turns[1].error and "unreadable response" in turns[2].error


def test_an_unreachable_server_on_the_first_call_raises_and_a_spent_budget_makes_no_call():
    with ChatTurnClient("http://127.0.0.1:9/v1/chat/completions") as chat:
        assert chat.turn({}, time.monotonic() - 1).stop_reason == "timeout" and chat.calls == 0
        with pytest.raises(UpstreamError, match="unreachable at http://127.0.0.1:9"):
            chat.turn({}, time.monotonic() + 10)
