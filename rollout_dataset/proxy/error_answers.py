"""Error answers: how the proxy tells the harness a call failed, always with a record first.

Proxy-side failures become OpenAI-style error JSON (or a final SSE error event once a stream has
started); a record that cannot be written turns the answer into a 500 naming why.
"""

from __future__ import annotations

import logging
from typing import Any

from rollout_dataset.errors import RecordWriteError
from rollout_dataset.proxy.asgi_types import Send
from rollout_dataset.proxy.call import Call
from rollout_dataset.proxy.call_record import CallRecorder
from rollout_dataset.proxy.jsoncodec import dumps_standard
from rollout_dataset.wire.anthropic_chat import anthropic_error, anthropic_error_type
from rollout_dataset.wire.responses_chat import RESPONSES_ENDPOINT
from rollout_dataset.wire.sse import encode_event

__all__ = ["ErrorAnswerer", "send_json", "JSON_HEADERS", "error_body", "error_event", "call_error_body", "call_error_event",
           "unrecorded_message"]

log = logging.getLogger(__name__)

JSON_HEADERS = [(b"content-type", b"application/json")]


def error_body(status: int, message: str, kind: str, param: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error body.

    Args:
        status: the HTTP status (the body's ``code``).
        message: one line naming what failed.
        kind: the error ``type``.
        param: the request field at fault, when one is.

    Returns:
        ``{"error": {"message", "type", "param", "code"}}``.
    """
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}

def error_event(status: int, message: str, kind: str) -> bytes:
    """An SSE event carrying an OpenAI-style error: how a stream that cannot finish normally ends."""
    return encode_event(dumps_standard(error_body(status, message, kind)))

#: the Anthropic error type of each proxy error kind (the kind itself stays in the record's `error`)
ANTHROPIC_ERROR_TYPES = {"bad_request": "invalid_request_error", "context_exhausted": "invalid_request_error",
                         "proxy_overloaded": "overloaded_error"}


#: the OpenAI error type of each proxy error kind on the Responses API (its published error shape)
RESPONSES_ERROR_TYPES = {"bad_request": "invalid_request_error"}


def _anthropic_type(status: int, kind: str) -> str:
    return ANTHROPIC_ERROR_TYPES.get(kind) or anthropic_error_type(status)


def call_error_body(call: Call, status: int, message: str, kind: str, param: str | None = None) -> dict[str, Any]:
    """The error body in the call's own API: Anthropic-shaped for `/v1/messages`, OpenAI-shaped otherwise
    (on `/v1/responses` with OpenAI's type names, `invalid_request_error` for a refused body)."""
    if call.asked.anthropic:
        return anthropic_error(_anthropic_type(status, kind), message)
    if call.endpoint == RESPONSES_ENDPOINT:
        return error_body(status, message, RESPONSES_ERROR_TYPES.get(kind, kind), param)
    return error_body(status, message, kind, param)


def call_error_event(call: Call, status: int, message: str, kind: str) -> bytes:
    """The SSE event that ends a stream of the call's API with an error (Anthropic: an ``error`` event)."""
    if call.asked.anthropic:
        return encode_event(dumps_standard(anthropic_error(_anthropic_type(status, kind), message)), "error")
    return error_event(status, message, kind)


def unrecorded_message(failure: RecordWriteError) -> str:
    """The message that tells the harness its call was not delivered because it could not be recorded."""
    return f"{failure}; the call was not delivered because it could not be recorded (record_write_failed)"


async def send_json(call: Call, send: Send, status: int, body: dict[str, Any]) -> None:
    """Answer the harness with a whole JSON body (marking the call's delivery started and ended).

    Args:
        call: the call answered.
        send: the ASGI send callable.
        status: the HTTP status.
        body: the JSON body.
    """
    data = dumps_standard(body)
    call.delivery.started = True
    await send({"type": "http.response.start", "status": status,
                "headers": JSON_HEADERS + [(b"content-length", str(len(data)).encode())]})
    call.delivery.ended = True
    await send({"type": "http.response.body", "body": data, "more_body": False})


class ErrorAnswerer:
    """The error-answering stage: records a failed call, then tells the harness why, in the call's API.

    Args:
        record: the recording stage (every error answer is recorded first).
    """

    def __init__(self, record: CallRecorder) -> None:
        self.record = record

    async def reply_error(self, call: Call, send: Send, status: int, kind: str, message: str,
                          param: str | None = None) -> None:
        """Fail the call with an error of the proxy's own, record it, and answer it (whole JSON).

        Args:
            call: the call.
            send: the ASGI send callable.
            status: the HTTP status to answer.
            kind: the error kind (the record's ``error.kind`` and the OpenAI error ``type``).
            message: one line naming what failed.
            param: the request field at fault, when one is (OpenAI's ``error.param``).
        """
        body = call_error_body(call, status, message, kind, param)
        call.fail(kind, message)
        call.answer.status = status
        call.answer.body = body
        failure = self.record.finish(call)
        if failure is not None:
            await self.reply_unrecorded(call, send, failure)
            return
        await send_json(call, send, status, body)

    async def reply_unrecorded(self, call: Call, send: Send, failure: RecordWriteError) -> None:
        """The record could not be written: the harness gets a 500 naming why, never the answer.

        Args:
            call: the call.
            send: the ASGI send callable.
            failure: why the record could not be written.
        """
        await send_json(call, send, 500, call_error_body(call, 500, unrecorded_message(failure), "record_write_failed"))

    async def fail_unexpected(self, call: Call, send: Send, exc: Exception, where: str = "") -> None:
        """An exception nobody foresaw: record it, and end the harness's response whatever state it is in.

        Args:
            call: the call.
            send: the ASGI send callable.
            exc: the exception.
            where: where it happened (`` while talking to <url>``; empty: in the proxy itself).
        """
        message = f"the proxy failed{where}: {type(exc).__name__}: {exc}"[:2000]
        call.fail("proxy_error", message)
        delivery = call.delivery
        if not delivery.started:
            status = 502 if where else 500
            await self.reply_error(call, send, status, "proxy_error", message)
            return
        failure = self.record.finish(call)
        if not delivery.ended:
            if failure is not None:
                message = unrecorded_message(failure)
            delivery.ended = True
            try:
                await send({"type": "http.response.body", "body": call_error_event(call, 500, message, "proxy_error"),
                            "more_body": False})
            except Exception:  # noqa: BLE001 - pragma: no cover - the connection is gone
                pass
