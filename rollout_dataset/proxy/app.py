"""The recording proxy as an ASGI application (served by uvicorn, see `rollout_dataset.proxy.server`).

A plain ASGI callable rather than Starlette routes: a proxy needs one catch-all route and full
control over when each byte is sent (chunks forwarded the moment they arrive, the last one held
until the call's record is on disk) and over client disconnects, which ASGI exposes directly.

Every request becomes exactly one trace record in its session's file, whatever happens: upstream
errors are passed through as they came, proxy-side failures become OpenAI-style error JSON.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any, Awaitable, Callable

import httpx
from httpx_sse import ServerSentEvent

from rollout_dataset.errors import RecordWriteError
from rollout_dataset.proxy.context_fit import CONTEXT_EXHAUSTED, ContextFitter, ContextPolicy
from rollout_dataset.proxy.jsoncodec import dumps_event, dumps_standard, has_digit_run, loads, loads_event
from rollout_dataset.proxy.on_policy_upstream import OnPolicyMode, Prepared
from rollout_dataset.proxy.recorder import TraceRecorder
from rollout_dataset.proxy.redact import harness_session_id, recorded_headers, redact_body, redact_url, valid_session_id
from rollout_dataset.proxy.responses import ResponsesAssembler
from rollout_dataset.proxy.streaming import EventBatches, StreamAssembler
from rollout_dataset.proxy.tokens import (
    GENERATION_ENDPOINTS,
    TokenRequest,
    prepare_request,
    sampling_params,
    strip_response,
    token_fields,
)

__all__ = ["ProxyApp", "SESSION_HEADER", "WORKER_HEADER", "DEFAULT_SESSION", "DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_INFLIGHT_BYTES"]

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

SESSION_HEADER = "x-rollout-session"
#: the response header naming the worker process that answered (`proxy --workers N`).
WORKER_HEADER = "x-rollout-proxy-worker"
DEFAULT_SESSION = "default"
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
# Request bodies plus buffered response bytes held by all calls at once; past it calls get 503.
DEFAULT_MAX_INFLIGHT_BYTES = 256 * 1024 * 1024
_RAW_RECORD_CAP = 16 * 1024 * 1024  # bytes of a pass-through body kept for the record

# Request headers never forwarded upstream (hop-by-hop, recomputed, or the proxy's own).
_DROP_REQUEST = frozenset(
    {b"host", b"content-length", b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding",
     b"te", b"trailer", b"upgrade", b"accept-encoding", b"expect", SESSION_HEADER.encode()}
)
# Response headers never copied back (hop-by-hop or recomputed).
_DROP_RESPONSE = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
                            "proxy-connection", "content-length"})
_JSON = [(b"content-type", b"application/json")]


def _error_body(status: int, message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


class _Call:
    """Everything known about one call, until it becomes a record."""

    __slots__ = ("session", "index", "call_id", "started_at", "t0", "method", "endpoint", "stream", "status",
                 "headers", "request", "upstream_changes", "requested", "effective", "response", "ttft_ms",
                 "notes", "error", "kind", "recorded", "client_gone", "raw_request", "raw_response",
                 "nonfinite", "reserved", "started", "ended", "on_policy", "upstream_headers")

    def __init__(self, session: str, method: str, endpoint: str, headers: dict[str, str]) -> None:
        self.session = session
        self.index = -1
        self.call_id = _uuid4_hex()
        self.started_at = time.time()
        self.t0 = time.perf_counter()
        self.method = method
        self.endpoint = endpoint
        self.stream = False
        self.status: int | None = None
        self.headers = headers
        self.request: Any = None
        self.upstream_changes: dict[str, Any] = {}
        self.requested: dict[str, Any] = {}
        self.effective: dict[str, Any] = {}
        self.response: Any = None
        self.ttft_ms: float | None = None
        self.notes: list[str] = []
        self.error: dict[str, str] | None = None
        self.kind: str | None = None
        self.recorded = False
        self.client_gone = False
        self.raw_request: bytes | None = None  # the request's JSON bytes, when they can go into the record as is
        self.raw_response: bytes | None = None
        self.nonfinite = False  # a parsed body held NaN/Infinity: the record is encoded by the standard library
        self.reserved = 0  # bytes of this call counted against the proxy's in-flight limit
        self.started = False  # response headers sent to the harness
        self.ended = False  # the response's last byte sent
        self.on_policy: Prepared | None = None  # on-policy mode's decision for a chat call
        self.upstream_headers: dict[str, str] = {}  # the upstream's response headers (lower-case names)

    def fail(self, kind: str, message: str) -> None:
        """Record the call's first error (later ones are consequences of it)."""
        if self.error is None:
            self.error = {"kind": kind, "message": message}


class ProxyApp:
    """ASGI app that forwards to a model server and records every call.

    Args:
        upstream_root: the model server's root URL (no trailing ``/v1``).
        recorder: where records go.
        transport: the shared httpx transport (connection pool) for upstream calls. It is called
            directly, not through `httpx.AsyncClient`: a proxy wants no cookie jar shared between
            harnesses, no auth and no redirects, and skipping them halves the per-call CPU.
        timeout: seconds for connect/pool (`connect`) and for each read (`read`).
        max_body_bytes: largest request body accepted (larger → 413).
        max_inflight_bytes: request bodies plus buffered response bytes held by all calls at once
            (past it → 503, recorded).
        on_policy: build multi-turn chat prompts from the sampled ids (see `rollout_dataset.proxy.on_policy`).
        context: how to fit output limits to the model's context (`rollout_dataset.proxy.context_fit`);
            None changes no limit.
        worker_header: add ``x-rollout-proxy-worker: <pid>`` to every response (multi-worker proxies:
            which process answered).
    """

    def __init__(self, upstream_root: str, recorder: TraceRecorder, transport: httpx.AsyncBaseTransport,
                 timeout: httpx.Timeout | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES, on_policy: bool = False,
                 context: ContextPolicy | None = None, worker_header: bool = False) -> None:
        self.upstream_root = upstream_root.rstrip("/")
        self._worker = (WORKER_HEADER.encode(), str(os.getpid()).encode()) if worker_header else None
        self.recorder = recorder
        self.transport = transport
        timeout = timeout or httpx.Timeout(600.0, connect=10.0)
        self._extensions = {"timeout": timeout.as_dict()}
        self._urls: dict[tuple[str, bytes], tuple[httpx.URL, bytes]] = {}
        self.max_body_bytes = max_body_bytes
        self.max_inflight_bytes = max_inflight_bytes
        self.inflight_bytes = 0
        # A session's earlier calls may have been answered by another worker, or by this proxy before a
        # restart: each parent lookup first reads what those wrote to the session's file.
        self.on_policy = (OnPolicyMode(self.upstream_root, transport, self._extensions,
                                       others=recorder.records_by_others) if on_policy else None)
        self.fitter = ContextFitter(self.upstream_root, transport, context) if context and context.active else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point: every HTTP request is forwarded and recorded; nothing escapes as a crash.

        Args:
            scope: the ASGI connection scope.
            receive: the ASGI receive callable.
            send: the ASGI send callable.
        """
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if self._worker is not None:
            send = _with_header(send, self._worker)
        try:
            await self._handle(scope, receive, send)
        except Exception:  # never crash the server: the record is already written by _handle's paths
            log.exception("proxy failed on %s %s", scope.get("method"), scope.get("path"))

    def _url(self, endpoint: str, query: bytes) -> tuple[httpx.URL, bytes]:
        """The upstream URL and its Host header, parsed once per (endpoint, query) (a visible per-call cost)."""
        key = (endpoint, query)
        known = self._urls.get(key)
        if known is None:
            text = self.upstream_root + endpoint + ("?" + query.decode("latin-1") if query else "")
            url = httpx.URL(text)
            known = (url, url.netloc)
            if len(self._urls) < 1024:
                self._urls[key] = known
        return known

    # ---- request side -------------------------------------------------------------------------

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
        call = _Call(session, scope["method"], endpoint, headers)
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

    async def _take_index(self, call: _Call, send: Send) -> bool:
        """Give the call its arrival index; a session file that cannot be read fails the call with 503."""
        try:
            call.index = self.recorder.next_index(call.session)
            return True
        except OSError as exc:
            failure = RecordWriteError(str(self.recorder.path(call.session)), exc)
            log.error("call %s refused: %s", call.call_id, failure)
            call.recorded = True  # nothing can be recorded: the harness is told why
            await self._send_json(call, send, 503, _error_body(503, _unrecorded_message(failure),
                                                               "record_write_failed"))
            return False

    async def _handle_call(self, call: _Call, scope: Scope, raw_headers: list[tuple[bytes, bytes]],
                           receive: Receive, send: Send) -> None:
        endpoint = call.endpoint
        body = await self._read_body(call, raw_headers, receive, send)
        if body is None:
            return
        kind = GENERATION_ENDPOINTS.get(endpoint) if call.method == "POST" else None
        token_req: TokenRequest | None = None
        if kind is not None:
            parsed = await self._parse_generation(call, raw_headers, body, send)
            if parsed is None:
                return
            call.kind = kind
            call.request = redact_body(parsed)
            if call.request is parsed and _spliceable(body):
                call.raw_request = body  # recorded as received: no re-encoding of a long context
            call.stream = parsed.get("stream") is True
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

        up_headers = [(k, v) for k, v in raw_headers if k not in _DROP_REQUEST]
        up_headers.append((b"accept-encoding", b"identity"))
        if kind == "chat" and self.on_policy is not None:
            body = await self._on_policy_body(call, parsed, body, up_headers)
        url, host = self._url(endpoint, scope.get("query_string") or b"")
        up_headers.append((b"host", host))
        if body:
            up_headers.append((b"content-length", str(len(body)).encode()))
        # the stream given whole: httpx skips re-deriving Host and Content-Length, set just above
        request = httpx.Request(call.method, url, stream=httpx.ByteStream(body or b""), headers=up_headers,
                                extensions=self._extensions)
        request.read()  # the body as `request.content`, as httpx does for bytes content
        await self._run_with_disconnect_watch(call, request, token_req, receive, send)

    async def _on_policy_body(self, call: _Call, parsed: dict[str, Any], body: bytes,
                              headers: list[tuple[bytes, bytes]]) -> bytes:
        """On-policy mode: the chat body to send (with the proxy's prompt ids when it built them)."""
        assert self.on_policy is not None
        call.on_policy = prepared = await self.on_policy.prepare(call.session, parsed, body, headers)
        if prepared.target is not None:
            call.upstream_changes = {**call.upstream_changes,
                                     "kv_transfer_params": {"prompt_token_ids_count": len(prepared.target)}}
        return prepared.body

    async def _read_body(self, call: _Call, raw_headers: list[tuple[bytes, bytes]], receive: Receive,
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

    async def _parse_generation(self, call: _Call, raw_headers: list[tuple[bytes, bytes]], body: bytes,
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
    def _recordable_body(call: _Call, body: bytes) -> Any:
        if not body:
            return None
        try:
            parsed, nonfinite = loads(body)
        except ValueError:
            return body[:_RAW_RECORD_CAP].decode("utf-8", errors="replace")
        call.nonfinite = call.nonfinite or nonfinite
        return redact_body(parsed)

    # ---- upstream exchange --------------------------------------------------------------------

    async def _run_with_disconnect_watch(self, call: _Call, request: httpx.Request,
                                         token_req: TokenRequest | None, receive: Receive, send: Send) -> None:
        """Run the exchange in this task while a watcher cancels it if the harness goes away."""
        task = asyncio.current_task()
        watch = asyncio.ensure_future(_cancel_on_disconnect(receive, call, task))
        try:
            await self._exchange(call, request, token_req, send)
        except asyncio.CancelledError:
            if not call.client_gone:
                raise  # shutdown, not the harness
            if task is not None and hasattr(task, "uncancel"):
                task.uncancel()
        finally:
            watch.cancel()

    async def _exchange(self, call: _Call, request: httpx.Request, token_req: TokenRequest | None,
                        send: Send) -> None:
        url = redact_url(str(request.url))  # shown in errors and logs: no credential of the harness's query
        try:
            try:
                response = await self.transport.handle_async_request(request)
            except httpx.TimeoutException as exc:
                await self._reply_error(call, send, 504, "upstream_timeout",
                                        f"the model server at {url} did not answer in time "
                                        f"({type(exc).__name__}; see upstream_timeout)")
                return
            except httpx.TransportError as exc:
                await self._reply_error(call, send, 502, "upstream_unreachable",
                                        f"could not reach the model server at {url}: {type(exc).__name__}: {exc}")
                return
            try:
                call.upstream_headers = _header_map(response)
                ctype = call.upstream_headers.get("content-type", "")
                if response.status_code >= 400:
                    call.fail("upstream_status", f"the model server at {url} answered HTTP {response.status_code}")
                if "text/event-stream" in ctype:
                    call.stream = True
                    if token_req is not None and response.status_code < 400:
                        await self._relay_generation_stream(call, url, response, token_req, send)
                    else:
                        await self._relay_stream(call, url, response, send)
                else:
                    await self._relay_whole(call, url, response, token_req, send)
            finally:
                await response.aclose()
        except asyncio.CancelledError:
            if call.client_gone:
                call.fail("client_disconnect", "the client disconnected before the call ended")
            else:
                call.fail("proxy_error", "the call was cancelled (proxy shutting down)")
            raise
        except Exception as exc:
            log.exception("proxy error on %s", url)
            await self._fail_unexpected(call, send, exc, f" while talking to {url}")
        finally:
            self._finish(call)

    async def _relay_whole(self, call: _Call, url: str, response: httpx.Response,
                           token_req: TokenRequest | None, send: Send) -> None:
        """A non-streamed answer: read it, record it, then send it."""
        try:
            data = await self._read_counted(call, response, send)
            if data is None:
                return
        except httpx.TimeoutException:
            await self._reply_error(call, send, 504, "upstream_timeout",
                                    f"the model server at {url} stopped sending its answer "
                                    "(timeout; see upstream_timeout)")
            return
        except httpx.TransportError as exc:
            await self._reply_error(call, send, 502, "upstream_disconnect",
                                    f"the model server at {url} dropped the connection: {exc}")
            return
        body = data
        ctype = call.upstream_headers.get("content-type", "")
        parsed: Any = None
        if data and "json" in ctype:
            try:
                parsed, nonfinite = loads(data)
                call.nonfinite = call.nonfinite or nonfinite
            except ValueError:
                parsed = None
                call.notes.append("the model server's body is not valid JSON although its content-type says so")
        call.response = parsed if parsed is not None else (
            data[:_RAW_RECORD_CAP].decode("utf-8", errors="replace") if data else None)
        if parsed is not None and _spliceable(data):
            call.raw_response = data
        if token_req is not None and response.status_code < 400 and parsed is not None:
            try:
                edited = strip_response(parsed, token_req)
            except Exception as exc:  # an answer of unexpected shape goes to the harness as it came
                edited = None
                call.notes.append(f"the answer has an unexpected shape ({type(exc).__name__}: {exc}); "
                                  "forwarded unchanged")
            if edited is not None:
                body = dumps_event(edited, call.nonfinite)
        headers = _response_headers(response, call.upstream_headers)
        call.status = response.status_code
        failure = self._finish(call)
        if failure is not None:
            await self._reply_unrecorded(call, send, failure)
            return
        headers.append((b"content-length", str(len(body)).encode()))
        call.started = True
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        call.ended = True
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _relay_stream(self, call: _Call, url: str, response: httpx.Response, send: Send) -> None:
        """A streamed answer of any other endpoint: bytes through unchanged, recorded as text."""
        call.status = response.status_code
        call.started = True
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": _response_headers(response, call.upstream_headers, raw=True)})
        kept = bytearray()
        try:
            async for chunk in response.aiter_raw():
                if call.ttft_ms is None:
                    call.ttft_ms = (time.perf_counter() - call.t0) * 1000.0
                if len(kept) < _RAW_RECORD_CAP:
                    kept += chunk
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.TimeoutException:
            call.fail("upstream_timeout", f"the model server at {url} stopped streaming (timeout)")
        except httpx.TransportError as exc:
            call.fail("upstream_disconnect", f"the model server at {url} dropped the stream: {exc}")
        except asyncio.CancelledError:
            call.response = bytes(kept).decode("utf-8", errors="replace") if kept else None
            raise
        call.response = bytes(kept).decode("utf-8", errors="replace") if kept else None
        failure = self._finish(call)
        tail = b"" if failure is None else _error_event(500, _unrecorded_message(failure), "record_write_failed")
        call.ended = True
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    async def _relay_generation_stream(self, call: _Call, url: str, response: httpx.Response,
                                       token_req: TokenRequest, send: Send) -> None:
        """A streamed chat/completions/responses answer: forward each chunk (stripped), reassemble, record."""
        call.status = response.status_code
        headers = _response_headers(response, call.upstream_headers)
        if _plain_utf8(call.upstream_headers.get("content-type", "")):
            encoding = "utf-8"  # what httpx would pick anyway, without its per-call charset parsing
        else:
            # events are decoded with the upstream's charset and re-framed as UTF-8: say so
            encoding = response.encoding or "utf-8"
            headers = [(k, b"text/event-stream; charset=utf-8" if k == b"content-type" else v) for k, v in headers]
        call.started = True
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        assembler = ResponsesAssembler() if token_req.kind == "responses" else StreamAssembler(token_req.kind)
        raw_events: list[str] = []  # the events as they came, for the record if they cannot be assembled
        kept = 0
        tail = b""
        strip = token_req.needs_strip
        events = EventBatches(encoding)
        identity = call.upstream_headers.get("content-encoding", "identity").strip().lower() == "identity"
        # Long integers (which orjson cannot parse exactly) are looked for once per read, over the read
        # and the 18 bytes before it: from the first read with 19 digits in a row on, each event is
        # looked at on its own. Only for UTF-8, where digits are single bytes.
        careful = encoding != "utf-8"
        before = b""
        try:
            async for raw in (response.aiter_raw() if identity else response.aiter_bytes()):
                if not careful:
                    window = before + raw
                    careful = has_digit_run(window)
                    before = window[-18:]
                # One send per upstream read: every complete event it held, each parsed once.
                out: list[bytes] = []
                overloaded = False
                for event in events.feed(raw):
                    data = event.data
                    if data == "[DONE]":
                        tail = _frame(event, data)
                        continue
                    if not self._reserve_nowait(call, len(data)):
                        message = self._overload_message(call, len(data))
                        call.fail("proxy_overloaded", message)
                        tail = _error_event(503, message, "proxy_overloaded")
                        overloaded = True
                        break
                    if kept < _RAW_RECORD_CAP:
                        raw_events.append(data)
                        kept += len(data)
                    try:
                        chunk, nonfinite = loads_event(data, digits_checked=not careful)
                        call.nonfinite = call.nonfinite or nonfinite
                    except ValueError:
                        chunk = None
                        call.notes.append("a stream event's data is not JSON; forwarded as is")
                    if chunk is not None:
                        try:
                            assembler.add(chunk)
                            edited = strip_response(chunk, token_req) if strip else None
                        except Exception as exc:  # unexpected types: forwarded as is, kept raw for the record
                            edited = None
                            call.notes.append(f"stream event {len(raw_events) - 1} has an unexpected shape "
                                              f"({type(exc).__name__}: {exc}); forwarded as is")
                        if edited is not None:
                            out.append(_frame_json(event, edited, nonfinite))
                            continue
                    out.append(_frame(event, data))
                if out:
                    if call.ttft_ms is None:
                        call.ttft_ms = (time.perf_counter() - call.t0) * 1000.0
                    await send({"type": "http.response.body", "body": b"".join(out), "more_body": True})
                if overloaded:
                    break
        except httpx.TimeoutException:
            message = f"the model server at {url} stopped streaming (timeout; see upstream_timeout)"
            call.fail("upstream_timeout", message)
            tail = _error_event(504, message, "upstream_timeout")
        except httpx.TransportError as exc:
            message = f"the model server at {url} dropped the stream: {type(exc).__name__}: {exc}"
            call.fail("upstream_disconnect", message)
            tail = _error_event(502, message, "upstream_disconnect")
        except asyncio.CancelledError:  # client gone (or shutdown): keep what arrived for the record
            call.response = _assembled(call, assembler, raw_events)
            raise
        if assembler.errors:
            call.fail("upstream_status", f"the model server sent an error event: {str(assembler.errors[0])[:500]}")
        call.response = _assembled(call, assembler, raw_events)
        failure = self._finish(call)
        if failure is not None:
            tail = _error_event(500, _unrecorded_message(failure), "record_write_failed")
        call.ended = True
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    # ---- replies and records ------------------------------------------------------------------

    async def _reply_error(self, call: _Call, send: Send, status: int, kind: str, message: str) -> None:
        body = _error_body(status, message, kind)
        call.fail(kind, message)
        call.status = status
        call.response = body
        failure = self._finish(call)
        if failure is not None:
            await self._reply_unrecorded(call, send, failure)
            return
        await self._send_json(call, send, status, body)

    @staticmethod
    async def _send_json(call: _Call, send: Send, status: int, body: dict[str, Any]) -> None:
        data = dumps_standard(body)
        call.started = True
        await send({"type": "http.response.start", "status": status,
                    "headers": _JSON + [(b"content-length", str(len(data)).encode())]})
        call.ended = True
        await send({"type": "http.response.body", "body": data, "more_body": False})

    async def _reply_unrecorded(self, call: _Call, send: Send, failure: RecordWriteError) -> None:
        """The record could not be written: the harness gets a 500 naming why, never the answer."""
        await self._send_json(call, send, 500, _error_body(500, _unrecorded_message(failure), "record_write_failed"))

    async def _fail_unexpected(self, call: _Call, send: Send, exc: Exception, where: str = "") -> None:
        """An exception nobody foresaw: record it, and end the harness's response whatever state it is in."""
        message = f"the proxy failed{where}: {type(exc).__name__}: {exc}"[:2000]
        call.fail("proxy_error", message)
        if not call.started:
            status = 502 if where else 500
            await self._reply_error(call, send, status, "proxy_error", message)
            return
        failure = self._finish(call)
        if not call.ended:
            if failure is not None:
                message = _unrecorded_message(failure)
            call.ended = True
            try:
                await send({"type": "http.response.body", "body": _error_event(500, message, "proxy_error"),
                            "more_body": False})
            except Exception:  # pragma: no cover - the connection is gone
                pass

    # ---- the in-flight byte bound -------------------------------------------------------------

    def _reserve_nowait(self, call: _Call, size: int) -> bool:
        """Count `size` more bytes of a call against the in-flight limit; False when they do not fit."""
        if self.inflight_bytes + size > self.max_inflight_bytes:
            return False
        self.inflight_bytes += size
        call.reserved += size
        return True

    def _overload_message(self, call: _Call, size: int) -> str:
        return (f"the proxy is holding {self.inflight_bytes} bytes of request and response bodies; {size} more "
                f"for this call would pass its limit of {self.max_inflight_bytes} bytes "
                "(max_inflight_bytes): retry later")

    async def _reserve(self, call: _Call, size: int, send: Send) -> bool:
        """Reserve bytes or answer 503 (recorded); returns whether the call may go on."""
        if self._reserve_nowait(call, size):
            return True
        call.notes.append(f"refused: {size} more bytes past the in-flight limit")
        await self._reply_error(call, send, 503, "proxy_overloaded", self._overload_message(call, size))
        return False

    def _release(self, call: _Call) -> None:
        self.inflight_bytes -= call.reserved
        call.reserved = 0

    async def _read_counted(self, call: _Call, response: httpx.Response, send: Send) -> bytes | None:
        """The whole upstream body, counted against the in-flight limit (None: refused with 503)."""
        declared = call.upstream_headers.get("content-length")
        if declared is not None and declared.strip().isdigit():
            if not await self._reserve(call, int(declared), send):
                return None
            data = await _read_whole(response, call.upstream_headers)
            if len(data) > int(declared):
                self._reserve_nowait(call, len(data) - int(declared))  # counted even when over: it is here
            return data
        if call.upstream_headers.get("content-encoding", "identity").strip().lower() != "identity":
            data = await response.aread()  # decoded by httpx; counted once here
            if not await self._reserve(call, len(data), send):
                return None
            return data
        parts: list[bytes] = []
        async for chunk in response.aiter_raw():
            if not await self._reserve(call, len(chunk), send):
                return None
            parts.append(chunk)
        return b"".join(parts)

    def _finish(self, call: _Call) -> RecordWriteError | None:
        """Write the call's record once (before its last byte reaches the harness).

        Returns:
            None when the record is durable (or was written before); the error when it could not be
            written, so the caller fails the call instead of answering it unrecorded.
        """
        if call.recorded:
            return None
        call.recorded = True
        ended = time.time()
        latency = max(0.0, (time.perf_counter() - call.t0) * 1000.0)
        ok = call.error is None or call.error["kind"] in ("client_disconnect", "upstream_disconnect",
                                                          "upstream_timeout")
        try:
            fields = token_fields(call.response if ok else None, call.kind)
        except Exception as exc:  # an answer of unexpected shape: recorded as it came, without token fields
            fields = token_fields(None, call.kind)
            fields["notes"] = [f"no token fields: the answer has an unexpected shape ({type(exc).__name__}: {exc})"]
        record = {
            "schema_version": 1,
            "index": call.index,
            "call_id": call.call_id,
            "session": call.session,
            "harness_session_id": harness_session_id(call.headers),
            "started_at": call.started_at,
            "ended_at": ended,
            "latency_ms": latency,
            "ttft_ms": call.ttft_ms,
            "method": call.method,
            "endpoint": call.endpoint,
            "stream": call.stream,
            "status": call.status,
            "request_headers": call.headers,
            "request": call.request,
            "upstream_changes": call.upstream_changes,
            "response": call.response,
            "prompt_token_ids": fields["prompt_token_ids"],
            "completion_token_ids": fields["completion_token_ids"],
            "per_token_logps": fields["per_token_logps"],
            "finish_reason": fields["finish_reason"],
            "usage": fields["usage"],
            "requested_sampling_params": call.requested,
            "effective_sampling_params": call.effective,
            "capture_level": fields["capture_level"],
            "token_source": fields["token_source"],
            "choices_token_ids": fields["choices_token_ids"],
            "notes": call.notes + fields["notes"],
            "error": call.error,
        }
        if call.on_policy is not None and self.on_policy is not None:
            good = call.status == 200 and call.error is None
            record["notes"] += self.on_policy.finish(call.session, call.index, call.on_policy, good, fields)
            record["continuity"] = call.on_policy.continuity.as_record()
        raw = {}
        if call.raw_request is not None:
            raw["request"] = call.raw_request
        if call.raw_response is not None:
            raw["response"] = call.raw_response
        try:
            self.recorder.write(call.session, record, raw, nonfinite=call.nonfinite)
        except RecordWriteError as exc:
            log.error("call %s (%s %s) failed: %s", call.call_id, call.method, call.endpoint, exc)
            return exc
        except Exception as exc:  # e.g. a value no encoder takes: never a success without a record
            log.exception("could not encode the trace record of call %s", call.call_id)
            return RecordWriteError(str(self.recorder.path(call.session)), OSError(0, f"{type(exc).__name__}: {exc}"))
        return None


def _uuid4_hex() -> str:
    """A random (version 4) UUID as 32 hex digits, as ``uuid.uuid4().hex`` gives, at a quarter of its cost."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return raw.hex()


def _header_map(response: httpx.Response) -> dict[str, str]:
    """The response's headers by lower-case name, repeated ones joined with ``", "`` (as httpx's ``get``)."""
    out: dict[str, str] = {}
    encoding = response.headers.encoding  # httpx works it out anew on every access
    for name, value in response.headers.raw:
        key = name.decode("latin-1").lower()
        text = value.decode(encoding)
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out


def _response_headers(response: httpx.Response, names: dict[str, str], raw: bool = False) -> list[tuple[bytes, bytes]]:
    """Upstream response headers to copy back; `raw` keeps content-encoding (bytes not decoded).

    `names` is `_header_map` of the response."""
    decoded = not raw and names.get("content-encoding", "identity").lower() != "identity"
    out = []
    for name, value in response.headers.raw:
        low = name.lower()
        if low.decode("latin-1") in _DROP_RESPONSE:
            continue
        if decoded and low == b"content-encoding":
            continue
        out.append((low, value))
    return out


async def _read_whole(response: httpx.Response, names: dict[str, str]) -> bytes:
    """The whole response body; one read from the default transport when nothing needs decoding."""
    read_all = getattr(response.stream, "read_all", None)
    if read_all is not None and names.get("content-encoding", "identity").strip().lower() == "identity":
        return await read_all()
    return await response.aread()


def _plain_utf8(ctype: str) -> bool:
    """Whether a content type says UTF-8 plainly: no charset (UTF-8 by default) or just ``charset=utf-8``."""
    _, _, params = ctype.lower().partition(";")
    params = params.replace(" ", "")
    return "charset" not in params or params in ("charset=utf-8", "charset=utf-8;")


def _spliceable(data: bytes) -> bool:
    """Whether JSON bytes can be spliced into a trace line verbatim: one line, UTF-8, an object."""
    head = data[:4]
    if not (head[:1] == b"{" and b"\x00" not in head and b"\n" not in data and b"\r" not in data):
        return False
    if b"\xed" in data:  # maybe an encoded lone surrogate (parsed with surrogatepass): strict UTF-8 only
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True


def _error_event(status: int, message: str, kind: str) -> bytes:
    """An SSE event carrying an OpenAI-style error: how a stream that cannot finish normally ends."""
    return b"data: " + dumps_standard(_error_body(status, message, kind)) + b"\n\n"


def _unrecorded_message(failure: RecordWriteError) -> str:
    return f"{failure}; the call was not delivered because it could not be recorded (record_write_failed)"


def _assembled(call: _Call, assembler: StreamAssembler, raw_events: list[str]) -> Any:
    """The reassembled stream, or the events as they came when they do not fold into a response."""
    if not assembler.chunks and not raw_events:
        return None
    try:
        return assembler.response() if assembler.chunks else "\n".join(raw_events)
    except Exception as exc:
        call.notes.append(f"the stream could not be reassembled ({type(exc).__name__}: {exc}); "
                          "response holds the events' data as they came, one per line")
        return "\n".join(raw_events)



def _frame(event: ServerSentEvent, data: str) -> bytes:
    """One event re-framed for the harness, its data unchanged (single-line data: no copy but the encode)."""
    if not event.id and (not event.event or event.event == "message") and "\n" not in data:
        return b"data: " + data.encode("utf-8") + b"\n\n"
    head = ""
    if event.event and event.event != "message":
        head += f"event: {event.event}\n"
    if event.id:
        head += f"id: {event.id}\n"
    if "\n" in data:
        body = "".join(f"data: {line}\n" for line in data.split("\n"))
    else:
        body = f"data: {data}\n"
    return (head + body + "\n").encode("utf-8")


def _frame_json(event: ServerSentEvent, value: Any, nonfinite: bool) -> bytes:
    """An edited (stripped) event, its data encoded once (see `rollout_dataset.proxy.jsoncodec.dumps_event`)."""
    data = dumps_event(value, nonfinite)
    if not event.id and (not event.event or event.event == "message"):
        return b"data: " + data + b"\n\n"
    return _frame(event, data.decode("utf-8"))


def _with_header(send: Send, header: tuple[bytes, bytes]) -> Send:
    """`send` with one more header on the response start."""
    async def sender(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), header]}
        await send(message)
    return sender


async def _cancel_on_disconnect(receive: Receive, call: _Call, task: asyncio.Task[Any] | None) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
    if not call.recorded and task is not None:  # recorded: the disconnect is the response ending
        call.client_gone = True
        task.cancel()
