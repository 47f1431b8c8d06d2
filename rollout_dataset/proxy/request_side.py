"""The request side of a call: session and index, body reading within the limits, parsing a generation
request, context fitting and the upstream body (token fields added), then the upstream exchange.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx

from rollout_dataset.errors import RecordWriteError
from rollout_dataset.proxy.asgi_types import Receive, Scope, Send
from rollout_dataset.proxy.call import DEFAULT_SESSION, RAW_RECORD_CAP, SESSION_HEADER, Call, spliceable
from rollout_dataset.proxy.context_fit import CONTEXT_EXHAUSTED, ContextFitter
from rollout_dataset.proxy.error_answers import error_body, unrecorded_message
from rollout_dataset.proxy.jsoncodec import loads
from rollout_dataset.proxy.on_policy_upstream import OnPolicyMode
from rollout_dataset.proxy.recorder import TraceRecorder
from rollout_dataset.proxy.redact import recorded_headers, redact_body, valid_session_id
from rollout_dataset.proxy.messages_capture import CHAT_ENDPOINT, MESSAGES_ENDPOINT, messages_problem
from rollout_dataset.proxy.tokens import GENERATION_ENDPOINTS, TokenRequest, prepare_request, sampling_params
from rollout_dataset.schema.api_requests import problem_field, responses_request_problem
from rollout_dataset.wire.anthropic_chat import IGNORED_FIELDS, ChatStreamToMessages, messages_to_chat

__all__ = ["RequestSide"]

log = logging.getLogger(__name__)

# Request headers never forwarded upstream (hop-by-hop, recomputed, or the proxy's own).
DROP_REQUEST = frozenset(
    {b"host", b"content-length", b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding",
     b"te", b"trailer", b"upgrade", b"accept-encoding", b"expect", SESSION_HEADER.encode()}
)


class RequestSide:
    """Reading and preparing each request (a mixin of `rollout_dataset.proxy.app.ProxyApp`)."""

    recorder: TraceRecorder
    max_body_bytes: int
    on_policy: OnPolicyMode | None
    fitter: ContextFitter | None

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        raw_headers: list[tuple[bytes, bytes]] = scope["headers"]
        headers = recorded_headers(raw_headers)
        session: str | None = None
        endpoint = path
        if path.startswith("/sessions/"):
            session, _, tail = path[len("/sessions/"):].partition("/")
            endpoint = "/" + tail
        if session is None:
            session = headers.get(SESSION_HEADER) or DEFAULT_SESSION
        call = Call(session, scope["method"], endpoint, headers)
        if not valid_session_id(session):
            call.session = DEFAULT_SESSION
            if not await self._take_index(call, send):
                return
            message = (f"invalid session id {session[:200]!r} in {path[:300]!r} or header {SESSION_HEADER}: "
                       "use 1-128 letters, digits, '.', '_' or '-'")
            await self._reply_error(call, send, 400, "bad_request", message)
            return
        if not await self._take_index(call, send):
            return
        try:
            await self._handle_call(call, scope, raw_headers, receive, send)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug or an input nobody foresaw: still one record, and an answer
            log.exception("proxy failed on %s %s", call.method, path[:300])
            await self._fail_unexpected(call, send, exc)
        finally:
            self._release(call)

    async def _take_index(self, call: Call, send: Send) -> bool:
        """Give the call its arrival index; a session file that cannot be read fails the call with 503."""
        try:
            call.index = self.recorder.next_index(call.session)
            return True
        except OSError as exc:
            failure = RecordWriteError(str(self.recorder.path(call.session)), exc)
            log.error("call %s refused: %s", call.call_id, failure)
            call.recorded = True  # nothing can be recorded: the harness is told why
            await self._send_json(call, send, 503, error_body(503, unrecorded_message(failure),
                                                               "record_write_failed"))
            return False

    async def _handle_call(self, call: Call, scope: Scope, raw_headers: list[tuple[bytes, bytes]],
                           receive: Receive, send: Send) -> None:
        endpoint = call.endpoint
        body = await self._read_body(call, raw_headers, receive, send)
        if body is None:
            return
        original = body
        kind = GENERATION_ENDPOINTS.get(endpoint) if call.method == "POST" else None
        token_req: TokenRequest | None = None
        query = scope.get("query_string") or b""
        if call.method == "POST" and endpoint == MESSAGES_ENDPOINT:
            call.anthropic = True
            prepared = await self._prepare_messages(call, raw_headers, body, send)
            if prepared is None:
                return
            parsed, token_req = prepared
            kind, endpoint, query, body = "chat", CHAT_ENDPOINT, b"", token_req.body
        elif kind is not None:
            parsed = await self._parse_generation(call, raw_headers, body, send)
            if parsed is None:
                return
            call.kind = kind
            call.request = redact_body(parsed)
            if call.request is parsed and spliceable(body):
                call.raw_request = body  # recorded as received: no re-encoding of a long context
            call.stream = parsed.get("stream") is True
            if kind == "responses" and (problem := responses_request_problem(parsed)) is not None:
                call.requested = sampling_params(parsed)
                call.effective = dict(call.requested)
                await self._reply_error(call, send, 400, "bad_request", f"request body of {endpoint}: {problem}",
                                        param=problem_field(problem))
                return
            limits: dict[str, int] = {}
            if self.fitter is not None:
                plan = await self.fitter.plan(kind, parsed, raw_headers)
                call.notes.extend(plan.notes)
                if plan.exhausted:
                    call.requested = sampling_params(parsed)
                    call.effective = dict(call.requested)
                    await self._reply_error(call, send, 400, CONTEXT_EXHAUSTED, plan.notes[-1])
                    return
                limits = plan.changes
            token_req = prepare_request(kind, parsed, body, limits)
            call.upstream_changes = token_req.changes
            call.requested = sampling_params(parsed)
            call.effective = {**call.requested, **token_req.changes}
            body = token_req.body
        else:
            call.request = self._recordable_body(call, body)

        up_headers = [(k, v) for k, v in raw_headers if k not in DROP_REQUEST]
        up_headers.append((b"accept-encoding", b"identity"))
        if kind == "chat" and self.on_policy is not None:  # Messages calls too, as the chat sent upstream
            body = await self._on_policy_body(call, parsed, body, up_headers)
        url, host = self._url(endpoint, query)
        up_headers.append((b"host", host))
        if body:
            up_headers.append((b"content-length", str(len(body)).encode()))
        # the stream given whole: httpx skips re-deriving Host and Content-Length, set just above
        request = httpx.Request(call.method, url, stream=httpx.ByteStream(body or b""), headers=up_headers,
                                extensions=self._extensions)
        request.read()  # the body as `request.content`, as httpx does for bytes content
        if call.translator is not None:  # kept in case the upstream has no chat endpoint (not vLLM)
            call.native_request = self._native_messages_request(call, scope, raw_headers, original)
        await self._run_with_disconnect_watch(call, request, token_req, receive, send)

    def _native_messages_request(self, call: Call, scope: Scope, raw_headers: list[tuple[bytes, bytes]],
                                 body: bytes) -> httpx.Request:
        """The Messages request as the harness sent it, to forward natively (recorded at level `text`)."""
        url, host = self._url(call.endpoint, scope.get("query_string") or b"")
        headers = [(k, v) for k, v in raw_headers if k not in DROP_REQUEST]
        headers += [(b"accept-encoding", b"identity"), (b"host", host), (b"content-length", str(len(body)).encode())]
        request = httpx.Request(call.method, url, stream=httpx.ByteStream(body), headers=headers,
                                extensions=self._extensions)
        request.read()
        return request

    async def _prepare_messages(self, call: Call, raw_headers: list[tuple[bytes, bytes]], body: bytes,
                                send: Send) -> tuple[dict[str, Any], TokenRequest] | None:
        """A `/v1/messages` call: the chat completion vLLM's Anthropic layer would build, with token fields.

        Returns:
            The chat body and its `TokenRequest`, or None when the call was answered (bad body, full context).
        """
        parsed = await self._parse_generation(call, raw_headers, body, send)
        if parsed is None:
            return None
        call.kind = "chat"
        call.request = redact_body(parsed)
        if call.request is parsed and spliceable(body):
            call.raw_request = body
        call.stream = parsed.get("stream") is True
        call.requested = sampling_params(parsed)
        problem = messages_problem(parsed)
        if problem is not None:
            call.effective = dict(call.requested)
            await self._reply_error(call, send, 400, "bad_request", f"request body of {MESSAGES_ENDPOINT}: {problem}")
            return None
        chat = messages_to_chat(parsed)
        limits: dict[str, int] = {}
        if self.fitter is not None:
            plan = await self.fitter.plan("chat", chat, raw_headers)
            call.notes.extend(plan.notes)
            if plan.exhausted:
                call.effective = dict(call.requested)
                await self._reply_error(call, send, 400, CONTEXT_EXHAUSTED, plan.notes[-1])
                return None
            limits = plan.changes
            if "max_tokens" in limits:
                limits["max_completion_tokens"] = limits["max_tokens"]
        encoded = json.dumps(chat, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
        token_req = prepare_request("chat", chat, encoded, limits)
        ignored = [key for key in IGNORED_FIELDS if key in parsed]
        call.upstream_changes = {"endpoint": CHAT_ENDPOINT, **token_req.changes}
        if ignored:  # accepted and ignored by vLLM: kept in the record's request, not sent
            call.upstream_changes["not_sent"] = ignored
        call.upstream_request = {**chat, **token_req.changes}
        call.effective = {**sampling_params(chat), **token_req.changes}
        call.translator = ChatStreamToMessages() if call.stream else True
        return chat, token_req

    async def _on_policy_body(self, call: Call, parsed: dict[str, Any], body: bytes,
                              headers: list[tuple[bytes, bytes]]) -> bytes:
        """On-policy mode: the chat body to send (with the proxy's prompt ids when it built them)."""
        assert self.on_policy is not None
        call.on_policy = prepared = await self.on_policy.prepare(call.session, parsed, body, headers)
        if prepared.target is not None:
            call.upstream_changes = {**call.upstream_changes,
                                     "kv_transfer_params": {"prompt_token_ids_count": len(prepared.target)}}
        return prepared.body

    async def _read_body(self, call: Call, raw_headers: list[tuple[bytes, bytes]], receive: Receive,
                         send: Send) -> bytes | None:
        limit = self.max_body_bytes
        for name, value in raw_headers:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    call.notes.append(f"request body of {declared} bytes (content-length) was not read")
                    await self._reply_error(call, send, 413, "bad_request",
                                            f"request body of {declared} bytes exceeds the proxy's limit of "
                                            f"{limit} bytes (max_body_bytes)")
                    return None
                if declared > 0 and not await self._reserve(call, declared, send):
                    return None
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                call.client_gone = True
                call.fail("client_disconnect", "the client disconnected before sending the whole request body")
                self._finish(call)
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                call.notes.append(f"request body cut off after {size} bytes")
                await self._reply_error(call, send, 413, "bad_request",
                                        f"request body exceeds the proxy's limit of {limit} bytes (max_body_bytes)")
                return None
            if size > call.reserved and not await self._reserve(call, size - call.reserved, send):
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                break
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def _parse_generation(self, call: Call, raw_headers: list[tuple[bytes, bytes]], body: bytes,
                                send: Send) -> dict[str, Any] | None:
        ctype = ""
        for name, value in raw_headers:
            if name == b"content-type":
                ctype = value.decode("latin-1").split(";")[0].strip().lower()
        if ctype and ctype != "application/json" and not ctype.endswith("+json"):
            call.request = self._recordable_body(call, body)
            await self._reply_error(call, send, 415, "bad_request",
                                    f"{call.endpoint} expects content-type application/json, got {ctype!r}")
            return None
        try:
            parsed, nonfinite = loads(body)
        except ValueError as exc:
            call.request = self._recordable_body(call, body)
            await self._reply_error(call, send, 400, "bad_request",
                                    f"request body of {call.endpoint} is not valid JSON: {exc}")
            return None
        call.nonfinite = call.nonfinite or nonfinite
        if not isinstance(parsed, dict):
            call.request = redact_body(parsed)
            await self._reply_error(call, send, 400, "bad_request",
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
