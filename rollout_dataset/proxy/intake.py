"""The request reader: a call received and checked.

It opens the call (session from the path or header, its arrival index), reads the body within the
body and in-flight limits, and checks a generation request (JSON object, content type, a Responses or
Messages body vLLM would take); it writes the call's `RequestPart` as received. Every refusal is
answered and recorded by the error answerer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from rollout_dataset.errors import RecordWriteError
from rollout_dataset.proxy.asgi_types import Receive, Scope, Send
from rollout_dataset.proxy.call import DEFAULT_SESSION, RAW_RECORD_CAP, SESSION_HEADER, Call, spliceable
from rollout_dataset.proxy.call_record import CallRecorder
from rollout_dataset.proxy.error_answers import ErrorAnswerer, error_body, send_json, unrecorded_message
from rollout_dataset.proxy.inflight import InflightBound
from rollout_dataset.proxy.jsoncodec import loads
from rollout_dataset.proxy.messages_capture import MESSAGES_ENDPOINT, messages_problem
from rollout_dataset.proxy.recorder import TraceRecorder
from rollout_dataset.proxy.redact import recorded_headers, redact_body, valid_session_id
from rollout_dataset.proxy.tokens import GENERATION_ENDPOINTS, sampling_params
from rollout_dataset.schema.api_requests import (
    MESSAGES_REQUEST_SCHEMA,
    RESPONSES_REQUEST_SCHEMA,
    load_request_validators,
    problem_field,
    responses_request_problem,
    surely_valid,
)

__all__ = ["RequestReader", "Checked"]


async def _problem(name_problem: Callable[[Any], str | None], parsed: Any, schema: str) -> str | None:
    """A request body's shape problem, or None; a body not surely valid is judged off the event loop
    (the reference validator can take ~150 ms on a large bad body: other calls must not wait on it)."""
    if surely_valid(parsed, schema):
        return None
    return await asyncio.to_thread(name_problem, parsed)

log = logging.getLogger(__name__)


class Checked:
    """A request as checked: what kind it is, its parsed body (generation calls) and its bytes.

    Args:
        kind: ``"chat"``, ``"completions"`` or ``"responses"`` (a generation call), ``"messages"`` (an
            Anthropic Messages call, sent upstream as chat), or None (forwarded as it came).
        parsed: the parsed JSON object (generation and Messages calls), else None.
        body: the body's bytes as received.
    """

    __slots__ = ("kind", "parsed", "body")

    def __init__(self, kind: str | None, parsed: dict[str, Any] | None, body: bytes) -> None:
        self.kind = kind
        self.parsed = parsed
        self.body = body


class RequestReader:
    """The reading and checking stage.

    Args:
        recorder: the trace files (each call's arrival index comes from its session's file).
        record: the recording stage (a call whose harness left mid-body is recorded at once).
        max_body_bytes: largest request body accepted (larger → 413).
        bound: the in-flight bound the body's bytes are counted against.
        answers: the error answerer.
    """

    def __init__(self, recorder: TraceRecorder, record: CallRecorder, max_body_bytes: int, bound: InflightBound,
                 answers: ErrorAnswerer) -> None:
        self.recorder = recorder
        self.record = record
        self.max_body_bytes = max_body_bytes
        self.bound = bound
        self.answers = answers
        # Built here, on the event loop: a body is judged in a worker thread (`_problem`), and a thread that
        # opened a schema file could take the descriptor the recorder frees for a trace file at the limit.
        load_request_validators()

    @staticmethod
    def open(scope: Scope) -> Call:
        """A new call for an HTTP request: its session (``/sessions/<id>/...`` or the header) and endpoint.

        Args:
            scope: the ASGI HTTP scope.

        Returns:
            The call, not yet given its index.
        """
        path: str = scope["path"]
        headers = recorded_headers(scope["headers"])
        session: str | None = None
        endpoint = path
        if path.startswith("/sessions/"):
            session, _, tail = path[len("/sessions/"):].partition("/")
            endpoint = "/" + tail
        if session is None:
            session = headers.get(SESSION_HEADER) or DEFAULT_SESSION
        return Call(session, scope["method"], endpoint, headers)

    async def admit(self, call: Call, scope: Scope, send: Send) -> bool:
        """Give the call its arrival index; an invalid session id is answered 400 (in the default session).

        Args:
            call: the call from `open`.
            scope: the ASGI HTTP scope.
            send: the ASGI send callable.

        Returns:
            Whether the call goes on (False: it was answered).
        """
        if valid_session_id(call.session):
            return await self._take_index(call, send)
        session = call.session
        call.session = DEFAULT_SESSION
        if not await self._take_index(call, send):
            return False
        path: str = scope["path"]
        message = (f"invalid session id {session[:200]!r} in {path[:300]!r} or header {SESSION_HEADER}: "
                   "use 1-128 letters, digits, '.', '_' or '-'")
        await self.answers.reply_error(call, send, 400, "bad_request", message)
        return False

    async def refuse_sealed(self, call: Call, scope: Scope, send: Send) -> None:
        """Answer a call to a sealed session 409, recorded in the default session (the sealed file stays as sealed).

        Args:
            call: the call from `open`.
            scope: the ASGI HTTP scope.
            send: the ASGI send callable.
        """
        session = call.session
        call.session = DEFAULT_SESSION
        if await self._take_index(call, send):
            path: str = scope["path"]
            await self.answers.reply_error(call, send, 409, "bad_request",
                                           f"session {session!r} is sealed (POST /sessions/{session}/seal): no call is "
                                           f"taken for it any more ({path[:300]!r})")

    async def _take_index(self, call: Call, send: Send) -> bool:
        """Give the call its arrival index; a session file that cannot be read fails the call with 503."""
        try:
            call.index = self.recorder.next_index(call.session)
            return True
        except OSError as exc:
            failure = RecordWriteError(str(self.recorder.path(call.session)), exc)
            log.error("call %s refused: %s", call.call_id, failure)
            call.delivery.recorded = True  # nothing can be recorded: the harness is told why
            await send_json(call, send, 503, error_body(503, unrecorded_message(failure), "record_write_failed"))
            return False

    async def read_body(self, call: Call, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The whole request body, within the body limit and counted against the in-flight bound.

        Args:
            call: the call.
            scope: the ASGI HTTP scope.
            receive: the ASGI receive callable.
            send: the ASGI send callable.

        Returns:
            The body, or None when the call ended (answered 413/503, or the harness went away).
        """
        limit = self.max_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    call.notes.append(f"request body of {declared} bytes (content-length) was not read")
                    await self.answers.reply_error(call, send, 413, "bad_request",
                                                   f"request body of {declared} bytes exceeds the proxy's limit of "
                                                   f"{limit} bytes (max_body_bytes)")
                    return None
                if declared > 0 and not await self.bound.reserve(call, declared, send):
                    return None
        parts: list[bytes] = []
        size = 0
        delivery = call.delivery
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                delivery.client_gone = True
                call.fail("client_disconnect", "the client disconnected before sending the whole request body")
                self.record.finish(call)
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                call.notes.append(f"request body cut off after {size} bytes")
                await self.answers.reply_error(call, send, 413, "bad_request",
                                               f"request body exceeds the proxy's limit of {limit} bytes "
                                               "(max_body_bytes)")
                return None
            if size > delivery.reserved and not await self.bound.reserve(call, size - delivery.reserved, send):
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                break
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def check(self, call: Call, scope: Scope, body: bytes, send: Send) -> Checked | None:
        """What the request is; a generation or Messages body parsed and checked, recorded as received.

        Args:
            call: the call.
            scope: the ASGI HTTP scope.
            body: the body's bytes.
            send: the ASGI send callable.

        Returns:
            The checked request, or None when it was refused (answered 400/415, recorded).
        """
        asked = call.asked
        if call.method != "POST":
            asked.body = self._recordable_body(call, body)
            return Checked(None, None, body)
        if call.endpoint == MESSAGES_ENDPOINT:
            asked.anthropic = True
            kind: str | None = "messages"
        else:
            kind = GENERATION_ENDPOINTS.get(call.endpoint)
            if kind is None:
                asked.body = self._recordable_body(call, body)
                return Checked(None, None, body)
        parsed = await self._parse_generation(call, scope, body, send)
        if parsed is None:
            return None
        asked.kind = "chat" if kind == "messages" else kind
        asked.body = redact_body(parsed)
        if asked.body is parsed and spliceable(body):
            asked.raw_body = body  # recorded as received: no re-encoding of a long context
        asked.stream = parsed.get("stream") is True
        if kind == "responses" and (problem := await _problem(responses_request_problem, parsed,
                                                              RESPONSES_REQUEST_SCHEMA)) is not None:
            asked.requested = sampling_params(parsed)
            asked.effective = dict(asked.requested)
            await self.answers.reply_error(call, send, 400, "bad_request", f"request body of {call.endpoint}: {problem}",
                                           param=problem_field(problem))
            return None
        if kind == "messages":
            asked.requested = sampling_params(parsed)
            problem = await _problem(messages_problem, parsed, MESSAGES_REQUEST_SCHEMA)
            if problem is not None:
                asked.effective = dict(asked.requested)
                await self.answers.reply_error(call, send, 400, "bad_request",
                                               f"request body of {MESSAGES_ENDPOINT}: {problem}")
                return None
        return Checked(kind, parsed, body)

    async def _parse_generation(self, call: Call, scope: Scope, body: bytes, send: Send) -> dict[str, Any] | None:
        ctype = ""
        for name, value in scope["headers"]:
            if name == b"content-type":
                ctype = value.decode("latin-1").split(";")[0].strip().lower()
        if ctype and ctype != "application/json" and not ctype.endswith("+json"):
            call.asked.body = self._recordable_body(call, body)
            await self.answers.reply_error(call, send, 415, "bad_request",
                                           f"{call.endpoint} expects content-type application/json, got {ctype!r}")
            return None
        try:
            parsed, nonfinite = loads(body)
        except ValueError as exc:
            call.asked.body = self._recordable_body(call, body)
            await self.answers.reply_error(call, send, 400, "bad_request",
                                           f"request body of {call.endpoint} is not valid JSON: {exc}")
            return None
        call.nonfinite = call.nonfinite or nonfinite
        if not isinstance(parsed, dict):
            call.asked.body = redact_body(parsed)
            await self.answers.reply_error(call, send, 400, "bad_request",
                                           f"request body of {call.endpoint} must be a JSON object, "
                                           f"got {type(parsed).__name__}")
            return None
        return parsed

    @staticmethod
    def _recordable_body(call: Call, body: bytes) -> Any:
        if not body:
            return None
        try:
            parsed, nonfinite = loads(body)
        except ValueError:
            return body[:RAW_RECORD_CAP].decode("utf-8", errors="replace")
        call.nonfinite = call.nonfinite or nonfinite
        return redact_body(parsed)
