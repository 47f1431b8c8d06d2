"""The stream relay: a streamed answer forwarded to the harness as it arrives and assembled for the record.

A generation stream (chat, completions, responses, and a Messages call sent as chat) is read as
server-sent events through httpx-sse's public API (`httpx_sse.EventSource.aiter_sse`); each event's
data is parsed once, folded into the record (`proxy/streaming.py`, `proxy/responses_capture.py`),
stripped of the token fields the harness did not ask for (or translated to Messages events), and the
events of one upstream read go to the harness in one write. Any other stream goes through byte for
byte. The record is written before the stream's last bytes are sent.
"""

from __future__ import annotations

import asyncio
import codecs
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

import httpx
from httpx_sse import EventSource, ServerSentEvent

from rollout_dataset.proxy.asgi_types import Send
from rollout_dataset.proxy.call import RAW_RECORD_CAP, Call
from rollout_dataset.proxy.call_record import CallRecorder
from rollout_dataset.proxy.error_answers import call_error_event, unrecorded_message
from rollout_dataset.proxy.inflight import InflightBound
from rollout_dataset.proxy.jsoncodec import dumps_event, has_digit_run, loads_event
from rollout_dataset.proxy.responses_capture import ResponsesAssembler, partial_response
from rollout_dataset.proxy.streaming import StreamAssembler
from rollout_dataset.proxy.tokens import TokenRequest, strip_response
from rollout_dataset.wire.anthropic_chat import ChatStreamToMessages, encode_events, stream_end_problem
from rollout_dataset.wire.sse import encode_event

__all__ = ["StreamRelay", "answer_ended", "frame", "frame_json", "plain_utf8"]


class StreamRelay:
    """The streaming stage.

    Args:
        record: the recording stage (the record is written before the stream's last bytes).
        bound: the in-flight bound each event's data is counted against.
    """

    def __init__(self, record: CallRecorder, bound: InflightBound) -> None:
        self.record = record
        self.bound = bound

    async def pass_through(self, call: Call, url: str, response: httpx.Response,
                           headers: list[tuple[bytes, bytes]], send: Send) -> None:
        """A streamed answer of any other endpoint (or an error stream): bytes through, recorded as text.

        Args:
            call: the call.
            url: the upstream URL (credentials redacted), for messages.
            response: the upstream response, headers read.
            headers: the response headers to send (content-encoding kept: the bytes are not decoded).
            send: the ASGI send callable.
        """
        answer, delivery = call.answer, call.delivery
        answer.status = response.status_code
        delivery.started = True
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        kept = bytearray()
        tail = b""
        try:
            async for chunk in response.aiter_raw():
                call.timing.first_byte()
                if len(kept) < RAW_RECORD_CAP:  # held for the record: counted against the in-flight bound
                    if not self.bound.reserve_nowait(call, len(chunk)):
                        message = self.bound.overload_message(len(chunk))
                        call.fail("proxy_overloaded", message)
                        if _between_events(answer.upstream_headers, kept):  # an error event can follow cleanly
                            tail = call_error_event(call, 503, message, "proxy_overloaded")
                        break
                    kept += chunk
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.TimeoutException:
            call.fail("upstream_timeout", f"the model server at {url} stopped streaming (timeout)")
        except httpx.TransportError as exc:
            call.fail("upstream_disconnect", f"the model server at {url} dropped the stream: {exc}")
        except asyncio.CancelledError:
            answer.body = bytes(kept).decode("utf-8", errors="replace") if kept else None
            raise
        answer.body = bytes(kept).decode("utf-8", errors="replace") if kept else None
        if call.asked.kind == "messages" and answer.status < 400 and len(kept) < RAW_RECORD_CAP and \
                answer.upstream_headers.get("content-encoding", "identity").strip().lower() == "identity":
            problem = stream_end_problem(answer.body or "")  # a native Messages stream, kept whole
            if problem is not None:
                call.fail(problem[0], f"{problem[1]} ({url})")
        failure = self.record.finish(call)
        if failure is not None:
            tail = call_error_event(call, 500, unrecorded_message(failure), "record_write_failed")
        delivery.ended = True
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    async def generation(self, call: Call, url: str, response: httpx.Response, token_req: TokenRequest,
                         headers: list[tuple[bytes, bytes]], send: Send) -> None:
        """A streamed chat/completions/responses answer: forward each event (stripped), reassemble, record.

        Args:
            call: the call.
            url: the upstream URL (credentials redacted), for messages.
            response: the upstream response (status < 400, an event stream), headers read.
            token_req: what the proxy added to the request (what to strip again).
            headers: the response headers to send.
            send: the ASGI send callable.
        """
        answer, delivery = call.answer, call.delivery
        names = answer.upstream_headers
        answer.status = response.status_code
        if plain_utf8(names.get("content-type", "")):
            encoding = "utf-8"  # what httpx would pick anyway, without its per-call charset parsing
        else:
            encoding = response.encoding or "utf-8"
            # events are decoded with the upstream's charset and re-framed as UTF-8: say so
            headers = [(k, b"text/event-stream; charset=utf-8" if k == b"content-type" else v) for k, v in headers]
        delivery.started = True
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        assembler = ResponsesAssembler() if token_req.kind == "responses" else StreamAssembler(token_req.kind)
        raw_events: list[str] = []  # the events as they came, for the record if they cannot be assembled
        kept = 0
        tail = b""
        strip = token_req.needs_strip
        translator = call.asked.translator if isinstance(call.asked.translator, ChatStreamToMessages) else None
        identity = names.get("content-encoding", "identity").strip().lower() == "identity"
        out: list[bytes] = []  # the events of the current read, re-framed
        timing = call.timing

        async def flush() -> None:  # one send per upstream read: every complete event it held
            if out:
                if timing.ttft_ms is None:
                    timing.first_byte()
                data = b"".join(out)
                out.clear()
                await send({"type": "http.response.body", "body": data, "more_body": True})

        text = _EventText(response, encoding, identity, flush)  # long integers looked for once per read
        try:
            async with aclosing(EventSource(text).aiter_sse()) as events:
                async for event in events:
                    data = event.data
                    if data == "[DONE]":
                        tail = encode_events(translator.done()) if translator is not None else frame(event, data)
                        continue
                    if not self.bound.reserve_nowait(call, len(data)):
                        message = self.bound.overload_message(len(data))
                        call.fail("proxy_overloaded", message)
                        tail = call_error_event(call, 503, message, "proxy_overloaded")
                        break
                    if kept < RAW_RECORD_CAP:
                        raw_events.append(data)
                        kept += len(data)
                    try:
                        chunk, nonfinite = loads_event(data, digits_checked=not text.careful)
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
                            if translator is not None:  # a chat chunk has no place in a Messages stream
                                call.notes.append(f"stream event {len(raw_events) - 1} has an unexpected shape "
                                                  f"({type(exc).__name__}: {exc}); left out of the Messages stream")
                                continue
                            call.notes.append(f"stream event {len(raw_events) - 1} has an unexpected shape "
                                              f"({type(exc).__name__}: {exc}); forwarded as is")
                        if edited is not None:
                            out.append(frame_json(event, edited, nonfinite))
                            continue
                    out.append(frame(event, data))
            await flush()  # the events of the last read (or those before an overload)
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
                answer.translated = translator.message()
            answer.body = assembled(call, assembler, raw_events)
            # a harness that closes once it has read the final event (Codex, at response.completed) got it whole
            delivery.whole = answer_ended(assembler, answer.body)
            raise
        if assembler.errors:
            call.fail("upstream_status", f"the model server sent an error event: {str(assembler.errors[0])[:500]}")
        if isinstance(assembler, ResponsesAssembler) and not assembler.finished:
            call.fail("upstream_disconnect", f"the model server at {url} ended the Responses stream before its final "
                                             "event (response.completed, .incomplete or .failed)")
        if translator is not None:
            if not tail and not translator.failed:  # the stream ended without [DONE]: the harness is told, in its API
                message = f"the model server at {url} ended the stream before it was complete"
                call.fail("upstream_disconnect", message)
                tail = call_error_event(call, 502, message, "upstream_disconnect")
            answer.translated = translator.message()
        answer.body = assembled(call, assembler, raw_events)
        failure = self.record.finish(call)
        if failure is not None:
            tail = call_error_event(call, 500, unrecorded_message(failure), "record_write_failed")
        delivery.ended = True
        await send({"type": "http.response.body", "body": tail, "more_body": False})


class _EventText(httpx.Response):
    """The upstream's event stream as httpx-sse reads it, decoded one upstream read at a time.

    `httpx_sse.EventSource` reads a response's text (`aiter_text`); this one decodes each read of the
    upstream body straight away (undecodable bytes become U+FFFD, as httpx's text decoding does) and
    awaits `before_next` before the next read: httpx-sse asks for more text only once every event of
    the read before has been taken, so `before_next` sends those events to the harness together (one
    write per upstream read).

    `careful` says whether any read so far, with the 18 bytes before it, held 19 digits in a row (an
    integer orjson could not parse exactly; `rollout_dataset.proxy.jsoncodec.has_digit_run`): until
    then events need no look of their own. It starts True for any body but identity-encoded UTF-8,
    where digits are single bytes.

    Args:
        upstream: the upstream response, headers read.
        encoding: the body's charset.
        identity: the body is not content-encoded (read raw; else decoded by httpx).
        before_next: awaited after the events of a read were taken, before the next read.
    """

    def __init__(self, upstream: httpx.Response, encoding: str, identity: bool,
                 before_next: Callable[[], Awaitable[None]]) -> None:
        super().__init__(upstream.status_code, headers=upstream.headers)
        self._upstream = upstream
        self._charset = encoding
        self._identity = identity
        self._before_next = before_next
        self.careful = encoding != "utf-8" or not identity

    async def aiter_text(self, chunk_size: int | None = None) -> AsyncIterator[str]:
        """The body's text, one piece per upstream read (`chunk_size` is not used)."""
        decode = codecs.getincrementaldecoder(self._charset)(errors="replace").decode
        upstream = self._upstream
        # identity: the transport's reads as they come (what `aiter_raw` yields, without its chunker layer)
        reads = upstream.stream if self._identity else upstream.aiter_bytes()
        before = b""
        async for raw in reads:  # type: ignore[union-attr]  # an async transport's stream is async
            if not self.careful:
                window = before + raw
                self.careful = has_digit_run(window)
                before = window[-18:]
            text = decode(raw)
            if text:
                yield text
            await self._before_next()


def plain_utf8(ctype: str) -> bool:
    """Whether a content type says UTF-8 plainly: no charset (UTF-8 by default) or just ``charset=utf-8``."""
    _, _, params = ctype.lower().partition(";")
    params = params.replace(" ", "")
    return "charset" not in params or params in ("charset=utf-8", "charset=utf-8;")

def assembled(call: Call, assembler: StreamAssembler | ResponsesAssembler, raw_events: list[str]) -> Any:
    """The reassembled stream, or the events as they came when they do not fold into a response."""
    if not assembler.chunks and not raw_events:
        return None
    if isinstance(assembler, ResponsesAssembler) and not assembler.finished and assembler.chunks:
        call.notes.append("the Responses stream was cut before its final event; response.output holds the "
                          "items and text deltas that arrived")  # its in_progress object has an empty output
        return partial_response(assembler.response(), raw_events)
    try:
        return assembler.response() if assembler.chunks else "\n".join(raw_events)
    except Exception as exc:  # noqa: BLE001 - a stream of any unexpected shape is still recorded as it came
        call.notes.append(f"the stream could not be reassembled ({type(exc).__name__}: {exc}); "
                          "response holds the events' data as they came, one per line")
        return "\n".join(raw_events)

def answer_ended(assembler: StreamAssembler | ResponsesAssembler, body: Any) -> bool:
    """Whether the events handed to the harness hold the answer's end: a Responses final event, or a
    finish reason on every choice of a chat/completions stream."""
    if isinstance(assembler, ResponsesAssembler):
        return assembler.finished
    choices = body.get("choices") if isinstance(body, dict) else None
    return isinstance(choices, list) and bool(choices) and all(isinstance(c, dict) and c.get("finish_reason") is not None for c in choices)


def _between_events(names: dict[str, str], sent: bytearray) -> bool:
    """Whether the bytes sent so far of an undecoded stream end between two events (an event may follow)."""
    if names.get("content-encoding", "identity").strip().lower() != "identity":
        return False
    return not sent or sent.endswith((b"\n\n", b"\r\n\r\n", b"\r\r"))


def frame(event: ServerSentEvent, data: str) -> bytes:
    """One event re-framed for the harness, its data unchanged (`rollout_dataset.wire.sse.encode_event`)."""
    return encode_event(data, event.event, event.id)

def frame_json(event: ServerSentEvent, value: Any, nonfinite: bool) -> bytes:
    """An edited (stripped) event, its data encoded once (see `rollout_dataset.proxy.jsoncodec.dumps_event`)."""
    return encode_event(dumps_event(value, nonfinite), event.event, event.id)
