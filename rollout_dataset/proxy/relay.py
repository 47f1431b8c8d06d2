"""The upstream relay: the request forwarded, and a whole answer relayed.

It sends the rewritten request to the model server (falling back to the Messages request as it came
when the upstream has no chat endpoint), reads the answer's headers, and hands a stream to the
stream relay (`proxy/stream_relay.py`); a whole answer is read (counted against the in-flight bound),
recorded, then sent. A harness that goes away cancels the exchange. A Responses call the server refuses
because of the proxy's logprob request (vLLM's gpt-oss path) is sent once more without it
(`proxy/responses_capture.py`), and later calls to that model go without it from the start.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx

from rollout_dataset.proxy.asgi_types import Receive, Send
from rollout_dataset.proxy.call import RAW_RECORD_CAP, Call, spliceable
from rollout_dataset.proxy.call_record import CallRecorder
from rollout_dataset.proxy.error_answers import ErrorAnswerer
from rollout_dataset.proxy.inflight import InflightBound
from rollout_dataset.proxy.jsoncodec import dumps_event, dumps_standard, loads
from rollout_dataset.proxy.messages_capture import translate_whole
from rollout_dataset.proxy.redact import redact_url
from rollout_dataset.proxy.responses_capture import (LOGPROBS_REFUSED_NOTE, REFUSAL_BODY_CAP, LogprobRefusals,
                                                     refuses_logprobs, without_logprobs)
from rollout_dataset.proxy.rewrite import Outgoing, with_body
from rollout_dataset.proxy.stream_relay import StreamRelay
from rollout_dataset.proxy.tokens import TokenRequest, strip_response
from rollout_dataset.wire.anthropic_chat import anthropic_error

__all__ = ["UpstreamRelay", "DROP_RESPONSE", "header_map", "response_headers"]

log = logging.getLogger(__name__)

# Response headers never copied back (hop-by-hop or recomputed).
DROP_RESPONSE = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
                           "proxy-connection", "content-length"})


class UpstreamRelay:
    """The forwarding stage.

    Args:
        transport: the shared httpx transport (connection pool) for upstream calls.
        record: the recording stage (a whole answer is recorded before it is sent).
        answers: the error answerer.
        bound: the in-flight bound a whole answer's bytes are counted against.
        streams: the stream relay, for answers that are event streams.
    """

    def __init__(self, transport: httpx.AsyncBaseTransport, record: CallRecorder, answers: ErrorAnswerer,
                 bound: InflightBound, streams: StreamRelay) -> None:
        self.transport = transport
        self.record = record
        self.answers = answers
        self.bound = bound
        self.streams = streams
        self.logprob_refusals = LogprobRefusals()  # models whose server refused the Responses logprobs

    async def forward(self, call: Call, outgoing: Outgoing, receive: Receive, send: Send) -> None:
        """Run the exchange in this task while a watcher cancels it if the harness goes away.

        Args:
            call: the call.
            outgoing: the upstream request (from the rewriter).
            receive: the ASGI receive callable (watched for the harness's disconnect).
            send: the ASGI send callable.
        """
        task = asyncio.current_task()
        watch = asyncio.get_running_loop().create_task(_cancel_on_disconnect(receive, call, task))
        try:
            await self._exchange(call, outgoing.request, outgoing.token_req, outgoing.shown, send)
        except asyncio.CancelledError:
            if not call.delivery.client_gone:
                raise  # shutdown, not the harness
            if task is not None and hasattr(task, "uncancel"):
                task.uncancel()
        finally:
            # An answer sent whole ends the watch by itself: the server's next `receive` tells the watcher the
            # exchange is over (`http.disconnect`), and it returns, with no cancellation to throw.
            if not call.delivery.ended:
                watch.cancel()

    async def _exchange(self, call: Call, request: httpx.Request, token_req: TokenRequest | None, url: str,
                        send: Send) -> None:
        """The exchange with the model server; `url` is the request's URL as errors and logs show it (redacted)."""
        asked, answer = call.asked, call.answer
        try:
            source = _logprobs_added(token_req)
            if source is not None and source.get("model") in self.logprob_refusals:
                request, token_req = _without_logprobs(call, request, token_req, "remembered from an earlier call")
                if not await self.bound.reserve(call, len(request.content), send):  # held with the first body
                    return
            response = await self._send_upstream(call, request, url, send)
            if response is None:
                return
            source = _logprobs_added(token_req)
            if source is not None and response.status_code == 400:
                try:
                    read = await self._read_refusal(call, response, send)
                except httpx.TransportError as exc:
                    await response.aclose()
                    await self._reply_read_failure(call, url, exc, send)
                    return
                if read is None:  # its bytes would pass the in-flight limit: answered 503
                    await response.aclose()
                    return
                response, refused = read
                if refused:  # the proxy's doing, not the harness's: sent again as the harness could send it
                    await response.aclose()
                    request, token_req = _without_logprobs(call, request, token_req, "sent again")
                    if not await self.bound.reserve(call, len(request.content), send):  # held with the first body
                        return
                    response = await self._send_upstream(call, request, url, send)
                    if response is None:
                        return
                    if response.status_code < 400:  # remembered only once the call went through without them
                        self.logprob_refusals.add(source.get("model"))
            if asked.translator is not None and response.status_code in (404, 405) and asked.native_request is not None:
                await response.aclose()  # no chat endpoint upstream (not vLLM): the Messages call goes as it came
                call.notes.append(f"the model server at {url} has no chat completions endpoint "
                                  f"(HTTP {response.status_code}); the Messages call was forwarded as it came "
                                  "and recorded as text")
                request, token_req = asked.as_received(), None
                url = redact_url(str(request.url))
                response = await self._send_upstream(call, request, url, send)
                if response is None:
                    return
            try:
                answer.upstream_headers = header_map(response)
                ctype = answer.upstream_headers.get("content-type", "")
                if response.status_code >= 400:
                    call.fail("upstream_status", f"the model server at {url} answered HTTP {response.status_code}")
                if "text/event-stream" in ctype:
                    answer.event_stream = True
                    if (token_req is not None and response.status_code < 400
                            and "text/event-stream" in ctype.partition(";")[0]):
                        await self.streams.generation(call, url, response, token_req,
                                                      response_headers(response, answer.upstream_headers), send)
                    else:
                        await self.streams.pass_through(
                            call, url, response, response_headers(response, answer.upstream_headers, raw=True), send)
                else:
                    await self._relay_whole(call, url, response, token_req, send)
            finally:
                await response.aclose()
        except asyncio.CancelledError:
            if call.delivery.client_gone and call.delivery.whole:  # not an error: the answer was whole
                call.notes.append("the client closed the connection once it had the answer's final event")
            elif call.delivery.client_gone:
                call.fail("client_disconnect", "the client disconnected before the call ended")
            else:
                call.fail("proxy_error", "the call was cancelled (proxy shutting down)")
            raise
        except Exception as exc:
            log.exception("proxy error on %s", url)
            await self.answers.fail_unexpected(call, send, exc, f" while talking to {url}")
        finally:
            self.record.finish(call)

    async def _send_upstream(self, call: Call, request: httpx.Request, url: str, send: Send) -> httpx.Response | None:
        """The upstream's response (headers read), or None when it could not be had (answered 504/502)."""
        try:
            return await self.transport.handle_async_request(request)
        except httpx.TimeoutException as exc:
            await self.answers.reply_error(call, send, 504, "upstream_timeout",
                                           f"the model server at {url} did not answer in time "
                                           f"({type(exc).__name__}; see upstream_timeout)")
        except httpx.TransportError as exc:
            await self.answers.reply_error(call, send, 502, "upstream_unreachable",
                                           f"could not reach the model server at {url}: {type(exc).__name__}: {exc}")
        return None

    async def _reply_read_failure(self, call: Call, url: str, exc: httpx.TransportError, send: Send) -> None:
        """Answer a failure while reading the upstream's body: 504 `upstream_timeout` on a timeout, else 502
        `upstream_disconnect` (the model server's fault, not the proxy's)."""
        if isinstance(exc, httpx.TimeoutException):
            await self.answers.reply_error(call, send, 504, "upstream_timeout",
                                           f"the model server at {url} stopped sending its answer "
                                           "(timeout; see upstream_timeout)")
        else:
            await self.answers.reply_error(call, send, 502, "upstream_disconnect",
                                           f"the model server at {url} dropped the connection: {exc}")

    async def _relay_whole(self, call: Call, url: str, response: httpx.Response,
                           token_req: TokenRequest | None, send: Send) -> None:
        """A non-streamed answer: read it, record it, then send it."""
        answer = call.answer
        try:
            data = await self.bound.read_counted(call, response, send)
            if data is None:
                return
        except httpx.TransportError as exc:
            await self._reply_read_failure(call, url, exc, send)
            return
        body = data
        ctype = answer.upstream_headers.get("content-type", "")
        parsed: Any = None
        if data and "json" in ctype:
            try:
                parsed, nonfinite = loads(data)
                call.nonfinite = call.nonfinite or nonfinite
            except ValueError:
                parsed = None
                call.notes.append("the model server's body is not valid JSON although its content-type says so")
        answer.body = parsed if parsed is not None else (
            data[:RAW_RECORD_CAP].decode("utf-8", errors="replace") if data else None)
        if parsed is not None and spliceable(data):
            answer.raw_body = data
        if token_req is not None and response.status_code < 400 and parsed is not None:
            try:
                edited = strip_response(parsed, token_req)
            except Exception as exc:  # noqa: BLE001 - an answer of unexpected shape goes to the harness as it came
                edited = None
                call.notes.append(f"the answer has an unexpected shape ({type(exc).__name__}: {exc}); "
                                  "forwarded unchanged")
            if edited is not None:
                body = dumps_event(edited, call.nonfinite)
        if call.asked.translator is not None:  # a Messages call sent as chat: answered in the Messages format
            body = _translated_whole(call, url, parsed, response.status_code)
        headers = response_headers(response, answer.upstream_headers)
        answer.status = response.status_code
        failure = self.record.finish(call)
        if failure is not None:
            await self.answers.reply_unrecorded(call, send, failure)
            return
        headers.append((b"content-length", str(len(body)).encode()))
        call.delivery.started = True
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        call.delivery.ended = True
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _read_refusal(self, call: Call, response: httpx.Response,
                            send: Send) -> tuple[httpx.Response, bool] | None:
        """Whether an HTTP 400 is the server's refusal of output logprobs, and the response to relay otherwise.

        Up to `REFUSAL_BODY_CAP` bytes of the body are read, each read counted against the in-flight
        bound; the returned response gives the same bytes. The bytes of a refusal (dropped) are given
        back; those of any other answer stay counted while the replay holds them.

        Args:
            call: the call.
            response: the upstream's HTTP 400, headers read.
            send: the ASGI send callable (for the 503).

        Returns:
            ``(response to relay, refused)``, or None when the call was refused with a 503 (the bytes
            read would pass the in-flight limit).

        Raises:
            httpx.TransportError: the upstream failed while the body was read.
        """
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if "json" not in response.headers.get("content-type", "") or encoding != "identity":
            return response, False
        head = bytearray()
        chunks = response.aiter_raw()
        whole = True
        async for chunk in chunks:
            if not await self.bound.reserve(call, len(chunk), send):
                return None
            head += chunk
            if len(head) > REFUSAL_BODY_CAP:
                whole = False
                break
        if whole and refuses_logprobs(response.status_code, bytes(head)):
            self.bound.give_back(call, len(head))
            return response, True
        replay = httpx.Response(response.status_code, headers=response.headers.raw,
                                stream=_Replayed(bytes(head), None if whole else chunks, response),
                                request=response.request, extensions=response.extensions)
        return replay, False


def _logprobs_added(token_req: TokenRequest | None) -> dict[str, Any] | None:
    """The harness's body of a Responses call whose output-text logprobs only the proxy asked for, else None."""
    if token_req is None or token_req.kind != "responses" or "include" not in token_req.changes:
        return None
    return token_req.source


def _without_logprobs(call: Call, request: httpx.Request, token_req: TokenRequest | None,
                      how: str) -> tuple[httpx.Request, TokenRequest]:
    """The call's upstream request and `TokenRequest` without the proxy's logprob request (noted, recorded)."""
    assert token_req is not None and token_req.source is not None, "only for `_logprobs_added` calls"
    changes, body = without_logprobs(token_req.source, token_req.changes)
    asked = call.asked
    asked.upstream_changes = changes
    asked.effective = {**asked.requested, **changes}
    call.notes.append(f"{LOGPROBS_REFUSED_NOTE} ({how})")
    return with_body(request, body), dataclasses.replace(token_req, changes=changes, body=body)


class _Replayed(httpx.AsyncByteStream):
    """A response body's first bytes (already read), then the rest of it from the same read."""

    def __init__(self, head: bytes, rest: AsyncIterator[bytes] | None, original: httpx.Response) -> None:
        self.head = head
        self.rest = rest
        self.original = original

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.head:
            yield self.head
        if self.rest is not None:
            async for chunk in self.rest:
                yield chunk

    async def aclose(self) -> None:
        await self.original.aclose()


def _translated_whole(call: Call, url: str, parsed: Any, status: int) -> bytes:
    """The Messages answer (or Anthropic error) for a whole chat answer, as bytes for the harness."""
    call.answer.raw_body = None  # the chat bytes are recorded under `upstream`, not as the response
    try:
        translated = translate_whole(parsed, status)
    except Exception as exc:  # noqa: BLE001 - e.g. tool arguments that are not JSON
        call.notes.append(f"the chat answer could not be turned into a message ({type(exc).__name__}: {exc})")
        translated = None
    if translated is None:
        message = f"the model server at {url} answered HTTP {status} with a body that is not a chat answer"
        call.fail("proxy_error" if status < 400 else "upstream_status", message)
        translated = anthropic_error("api_error", message)
    call.answer.translated = translated
    return dumps_standard(translated)


def header_map(response: httpx.Response) -> dict[str, str]:
    """The response's headers by lower-case name, repeated ones joined with ``", "`` (as httpx's ``get``).

    Args:
        response: the upstream response.

    Returns:
        ``{name: value}``.
    """
    raw = response.headers.raw
    out: dict[str, str] = {}
    try:  # nearly always: every name and value ASCII, the encoding httpx then picks (one pass, no second decode)
        for name, value in raw:
            key = name.decode("ascii").lower()
            text = value.decode("ascii")
            out[key] = f"{out[key]}, {text}" if key in out else text
        return out
    except UnicodeDecodeError:
        out.clear()
    encoding = response.headers.encoding  # httpx's choice: utf-8 if every header takes it, else latin-1
    for name, value in raw:
        key = name.decode("latin-1").lower()
        text = value.decode(encoding)
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out

def response_headers(response: httpx.Response, names: dict[str, str], raw: bool = False) -> list[tuple[bytes, bytes]]:
    """Upstream response headers to copy back; `raw` keeps content-encoding (bytes not decoded).

    Args:
        response: the upstream response.
        names: `header_map` of the response.
        raw: the body goes through undecoded (keep its content-encoding).

    Returns:
        The headers, names lower-case.
    """
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

async def _cancel_on_disconnect(receive: Receive, call: Call, task: asyncio.Task[Any] | None) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
    if not call.delivery.recorded and task is not None:  # recorded: the disconnect is the response ending
        call.delivery.client_gone = True
        task.cancel()
