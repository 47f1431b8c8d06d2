"""The local backend's Anthropic Messages API (`/v1/messages`, `/v1/messages/count_tokens`), as vLLM serves it.

vLLM 0.32 builds a chat completion from a Messages request and runs its chat endpoint, then turns
the chat answer (or stream) into the Messages answer (`vllm/entrypoints/anthropic/serving.py`). The
backend does the same with the same mapping (`rollout_dataset.wire.anthropic_chat`) over its own
chat endpoint, so a harness that speaks Messages (Claude Code) runs against the embedded default
with no server. Like vLLM's native endpoint, it returns no token ids and no logprobs: the proxy
gets those by sending the chat completion itself.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterable, AsyncIterator, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from rollout_dataset.backend.params import RequestError, chat_inputs, json_body
from rollout_dataset.schema.api_requests import messages_request_problem
from rollout_dataset.tokenizers import encode_text, render_chat
from rollout_dataset.wire.sse import DONE, aiter_events
from rollout_dataset.wire.anthropic_chat import (
    ChatStreamToMessages,
    anthropic_error,
    chat_to_message,
    encode_events,
    anthropic_error_type,
    messages_to_chat,
)

__all__ = ["messages_endpoint", "count_tokens_endpoint"]

ChatHandler = Callable[[Request, Any], Awaitable[Response]]


def _error(exc: RequestError) -> JSONResponse:
    error = exc.body.get("error")
    if not isinstance(error, dict):
        error = exc.body
    return JSONResponse(anthropic_error(anthropic_error_type(exc.code), str(error.get("message"))), status_code=exc.code)


async def _anthropic_body(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    problem = messages_request_problem(body)
    if problem is not None:
        raise RequestError(problem, param=problem.split(":")[0], type_="Bad Request")
    return body


def _chat_request(request: Request, chat: dict[str, Any]) -> Request:
    """A request to the chat endpoint carrying `chat` (the same app and state)."""
    data = json.dumps(chat, ensure_ascii=False).encode("utf-8", "surrogatepass")
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": data, "more_body": False}

    scope = {**request.scope, "path": "/v1/chat/completions", "query_string": b"",
             "headers": [(b"content-type", b"application/json")]}
    return Request(scope, receive)


async def messages_endpoint(request: Request, state: Any, chat: ChatHandler) -> Response:
    """`POST /v1/messages`: the chat endpoint's answer in the Messages format.

    Args:
        request: the HTTP request.
        state: the backend's state.
        chat: the backend's chat-completions handler ``(request, state) -> Response``.

    Returns:
        The message object, an SSE stream of Messages events, or an Anthropic error body.
    """
    try:
        body = await _anthropic_body(request)
        answer = await chat(_chat_request(request, messages_to_chat(body)), state)
    except RequestError as exc:
        return _error(exc)
    if isinstance(answer, StreamingResponse):
        return StreamingResponse(_events(answer.body_iterator), media_type="text/event-stream")
    parsed = json.loads(bytes(answer.body))
    if answer.status_code >= 400:
        error = parsed.get("error") or {}
        return JSONResponse(anthropic_error(str(error.get("type")), str(error.get("message"))),
                            status_code=answer.status_code)
    return JSONResponse(chat_to_message(parsed))


async def _events(chunks: AsyncIterable[Any]) -> AsyncIterator[bytes]:
    converter = ChatStreamToMessages()
    async for event in aiter_events(chunks):
        if event.data == DONE:
            yield encode_events(converter.done())
        else:
            yield encode_events(converter.feed(json.loads(event.data)))


async def count_tokens_endpoint(request: Request, state: Any) -> Response:
    """`POST /v1/messages/count_tokens`: the prompt's length under the chat template, as vLLM counts it.

    Args:
        request: the HTTP request.
        state: the backend's state (tokenizer).

    Returns:
        ``{"input_tokens": n, "context_management": {"original_input_tokens": n}}`` or an Anthropic error.
    """
    try:
        body = await json_body(request)
        if not isinstance(body.get("messages"), list) or not body.get("model"):
            raise RequestError("model and messages are required", param="messages", type_="Bad Request")
        messages, tools, _, kwargs = chat_inputs(messages_to_chat(body, count_tokens=True))
        try:
            text = render_chat(state.tokenizer, messages, tools, True, kwargs)
        except ValueError as exc:
            raise RequestError(str(exc), param="messages") from None
    except RequestError as exc:
        return _error(exc)
    count = len(encode_text(state.tokenizer, text))
    return JSONResponse({"input_tokens": count, "context_management": {"original_input_tokens": count}})
