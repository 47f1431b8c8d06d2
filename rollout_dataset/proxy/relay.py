"""The upstream exchange and the relay of its answer to the harness.

Whole answers are read, recorded, then sent; streams are forwarded event by event the moment they
arrive (token fields the harness did not ask for stripped), reassembled for the record, and the
last bytes held until the record is on disk. A harness that goes away cancels the exchange.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx
from httpx_sse import ServerSentEvent

from rollout_dataset.proxy.asgi_types import Receive, Send
from rollout_dataset.proxy.call import RAW_RECORD_CAP, Call, spliceable
from rollout_dataset.proxy.error_answers import call_error_event, unrecorded_message
from rollout_dataset.proxy.jsoncodec import dumps_event, dumps_standard, has_digit_run, loads, loads_event
from rollout_dataset.proxy.messages_capture import translate_whole
from rollout_dataset.proxy.responses_capture import ResponsesAssembler
from rollout_dataset.proxy.streaming import EventBatches, StreamAssembler
from rollout_dataset.proxy.tokens import TokenRequest, strip_response
from rollout_dataset.proxy.redact import redact_url
from rollout_dataset.wire.anthropic_chat import ChatStreamToMessages, anthropic_error, encode_events

__all__ = ["UpstreamRelay", "DROP_RESPONSE", "header_map", "response_headers", "frame", "frame_json"]

log = logging.getLogger(__name__)

# Response headers never copied back (hop-by-hop or recomputed).
DROP_RESPONSE = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
                           "proxy-connection", "content-length"})


class UpstreamRelay:
    """The exchange with the model server (a mixin of `rollout_dataset.proxy.app.ProxyApp`)."""

    transport: httpx.AsyncBaseTransport

    async def _run_with_disconnect_watch(self, call: Call, request: httpx.Request,
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

    async def _exchange(self, call: Call, request: httpx.Request, token_req: TokenRequest | None,
                        send: Send) -> None:
        url = redact_url(str(request.url))  # shown in errors and logs: no credential of the harness's query
        try:
            response = await self._send_upstream(call, request, url, send)
            if response is None:
                return
            if call.translator is not None and response.status_code in (404, 405) and call.native_request is not None:
                await response.aclose()  # no chat endpoint upstream (not vLLM): the Messages call goes as it came
                call.notes.append(f"the model server at {url} has no chat completions endpoint "
                                  f"(HTTP {response.status_code}); the Messages call was forwarded as it came "
                                  "and recorded as text")
                call.translator = call.upstream_request = None
                call.kind, token_req = "messages", None
                call.upstream_changes, call.effective = {}, dict(call.requested)
                request, call.native_request = call.native_request, None
                url = redact_url(str(request.url))
                response = await self._send_upstream(call, request, url, send)
                if response is None:
                    return
            try:
                call.upstream_headers = header_map(response)
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

    async def _send_upstream(self, call: Call, request: httpx.Request, url: str, send: Send) -> httpx.Response | None:
        """The upstream's response (headers read), or None when it could not be had (answered 504/502)."""
        try:
            return await self.transport.handle_async_request(request)
        except httpx.TimeoutException as exc:
            await self._reply_error(call, send, 504, "upstream_timeout",
                                    f"the model server at {url} did not answer in time "
                                    f"({type(exc).__name__}; see upstream_timeout)")
        except httpx.TransportError as exc:
            await self._reply_error(call, send, 502, "upstream_unreachable",
                                    f"could not reach the model server at {url}: {type(exc).__name__}: {exc}")
        return None

    async def _relay_whole(self, call: Call, url: str, response: httpx.Response,
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
            data[:RAW_RECORD_CAP].decode("utf-8", errors="replace") if data else None)
        if parsed is not None and spliceable(data):
            call.raw_response = data
        if token_req is not None and response.status_code < 400 and parsed is not None:
            try:
                edited = strip_response(parsed, token_req)
            except Exception as exc:  # noqa: BLE001 - an answer of unexpected shape goes to the harness as it came
                edited = None
                call.notes.append(f"the answer has an unexpected shape ({type(exc).__name__}: {exc}); "
                                  "forwarded unchanged")
            if edited is not None:
                body = dumps_event(edited, call.nonfinite)
        if call.translator is not None:  # a Messages call sent as chat: answered in the Messages format
            body = self._translated_whole(call, url, parsed, response.status_code)
        headers = response_headers(response, call.upstream_headers)
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

    @staticmethod
    def _translated_whole(call: Call, url: str, parsed: Any, status: int) -> bytes:
        """The Messages answer (or Anthropic error) for a whole chat answer, as bytes for the harness."""
        call.raw_response = None  # the chat bytes are recorded under `upstream`, not as the response
        try:
            translated = translate_whole(parsed, status)
        except Exception as exc:  # noqa: BLE001 - e.g. tool arguments that are not JSON
            call.notes.append(f"the chat answer could not be turned into a message ({type(exc).__name__}: {exc})")
            translated = None
        if translated is None:
            message = f"the model server at {url} answered HTTP {status} with a body that is not a chat answer"
            call.fail("proxy_error" if status < 400 else "upstream_status", message)
            translated = anthropic_error("api_error", message)
        call.translated = translated
        return dumps_standard(translated)

    async def _relay_stream(self, call: Call, url: str, response: httpx.Response, send: Send) -> None:
        """A streamed answer of any other endpoint: bytes through unchanged, recorded as text."""
        call.status = response.status_code
        call.started = True
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": response_headers(response, call.upstream_headers, raw=True)})
        kept = bytearray()
        try:
            async for chunk in response.aiter_raw():
                if call.ttft_ms is None:
                    call.ttft_ms = (time.perf_counter() - call.t0) * 1000.0
                if len(kept) < RAW_RECORD_CAP:
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
        tail = b"" if failure is None else call_error_event(call, 500, unrecorded_message(failure), "record_write_failed")
        call.ended = True
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    async def _relay_generation_stream(self, call: Call, url: str, response: httpx.Response,
                                       token_req: TokenRequest, send: Send) -> None:
        """A streamed chat/completions/responses answer: forward each chunk (stripped), reassemble, record."""
        call.status = response.status_code
        headers = response_headers(response, call.upstream_headers)
        if plain_utf8(call.upstream_headers.get("content-type", "")):
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
        translator = call.translator if isinstance(call.translator, ChatStreamToMessages) else None
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
                        tail = encode_events(translator.done()) if translator is not None else frame(event, data)
                        continue
                    if not self._reserve_nowait(call, len(data)):
                        message = self._overload_message(call, len(data))
                        call.fail("proxy_overloaded", message)
                        tail = call_error_event(call, 503, message, "proxy_overloaded")
                        overloaded = True
                        break
                    if kept < RAW_RECORD_CAP:
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
                            if translator is not None:
                                out.append(encode_events(translator.feed(chunk)))
                                continue
                            edited = strip_response(chunk, token_req) if strip else None
                        except Exception as exc:  # noqa: BLE001 - unexpected types: forwarded as is, kept raw for the record
                            edited = None
                            call.notes.append(f"stream event {len(raw_events) - 1} has an unexpected shape "
                                              f"({type(exc).__name__}: {exc}); forwarded as is")
                        if edited is not None:
                            out.append(frame_json(event, edited, nonfinite))
                            continue
                    out.append(frame(event, data))
                if out:
                    if call.ttft_ms is None:
                        call.ttft_ms = (time.perf_counter() - call.t0) * 1000.0
                    await send({"type": "http.response.body", "body": b"".join(out), "more_body": True})
                if overloaded:
                    break
        except httpx.TimeoutException:
            message = f"the model server at {url} stopped streaming (timeout; see upstream_timeout)"
            call.fail("upstream_timeout", message)
            tail = call_error_event(call, 504, message, "upstream_timeout")
        except httpx.TransportError as exc:
            message = f"the model server at {url} dropped the stream: {type(exc).__name__}: {exc}"
            call.fail("upstream_disconnect", message)
            tail = call_error_event(call, 502, message, "upstream_disconnect")
        except asyncio.CancelledError:  # client gone (or shutdown): keep what arrived for the record
            if translator is not None:
                call.translated = translator.message()
            call.response = assembled(call, assembler, raw_events)
            raise
        if assembler.errors:
            call.fail("upstream_status", f"the model server sent an error event: {str(assembler.errors[0])[:500]}")
        if translator is not None:
            if not tail:  # the stream ended without [DONE]: the harness is told, in its API
                message = f"the model server at {url} ended the stream before it was complete"
                call.fail("upstream_disconnect", message)
                tail = call_error_event(call, 502, message, "upstream_disconnect")
            call.translated = translator.message()
        call.response = assembled(call, assembler, raw_events)
        failure = self._finish(call)
        if failure is not None:
            tail = call_error_event(call, 500, unrecorded_message(failure), "record_write_failed")
        call.ended = True
        await send({"type": "http.response.body", "body": tail, "more_body": False})


def header_map(response: httpx.Response) -> dict[str, str]:
    """The response's headers by lower-case name, repeated ones joined with ``", "`` (as httpx's ``get``)."""
    out: dict[str, str] = {}
    encoding = response.headers.encoding  # httpx works it out anew on every access
    for name, value in response.headers.raw:
        key = name.decode("latin-1").lower()
        text = value.decode(encoding)
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out

def response_headers(response: httpx.Response, names: dict[str, str], raw: bool = False) -> list[tuple[bytes, bytes]]:
    """Upstream response headers to copy back; `raw` keeps content-encoding (bytes not decoded).

    `names` is `header_map` of the response."""
    decoded = not raw and names.get("content-encoding", "identity").lower() != "identity"
    out = []
    for name, value in response.headers.raw:
        low = name.lower()
        if low.decode("latin-1") in DROP_RESPONSE:
            continue
        if decoded and low == b"content-encoding":
            continue
        out.append((low, value))
    return out

def plain_utf8(ctype: str) -> bool:
    """Whether a content type says UTF-8 plainly: no charset (UTF-8 by default) or just ``charset=utf-8``."""
    _, _, params = ctype.lower().partition(";")
    params = params.replace(" ", "")
    return "charset" not in params or params in ("charset=utf-8", "charset=utf-8;")

def assembled(call: Call, assembler: StreamAssembler, raw_events: list[str]) -> Any:
    """The reassembled stream, or the events as they came when they do not fold into a response."""
    if not assembler.chunks and not raw_events:
        return None
    try:
        return assembler.response() if assembler.chunks else "\n".join(raw_events)
    except Exception as exc:  # noqa: BLE001 - a stream of any unexpected shape is still recorded as it came
        call.notes.append(f"the stream could not be reassembled ({type(exc).__name__}: {exc}); "
                          "response holds the events' data as they came, one per line")
        return "\n".join(raw_events)

def frame(event: ServerSentEvent, data: str) -> bytes:
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

def frame_json(event: ServerSentEvent, value: Any, nonfinite: bool) -> bytes:
    """An edited (stripped) event, its data encoded once (see `rollout_dataset.proxy.jsoncodec.dumps_event`)."""
    data = dumps_event(value, nonfinite)
    if not event.id and (not event.event or event.event == "message"):
        return b"data: " + data + b"\n\n"
    return frame(event, data.decode("utf-8"))

async def _cancel_on_disconnect(receive: Receive, call: Call, task: asyncio.Task[Any] | None) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
    if not call.recorded and task is not None:  # recorded: the disconnect is the response ending
        call.client_gone = True
        task.cancel()
