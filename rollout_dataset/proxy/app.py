"""The recording proxy as an ASGI application (served by uvicorn, see `rollout_dataset.proxy.server`).

A plain ASGI callable rather than Starlette routes: a proxy needs one catch-all route and full
control over when each byte is sent (chunks forwarded the moment they arrive, the last one held
until the call's record is on disk) and over client disconnects, which ASGI exposes directly.

Every request becomes exactly one trace record in its session's file, whatever happens: upstream
errors are passed through as they came, proxy-side failures become OpenAI-style error JSON
(Anthropic-shaped for `/v1/messages`, which goes upstream as chat: `rollout_dataset.proxy.messages_capture`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any, Sequence

import httpx

from rollout_dataset.proxy.asgi_types import Receive, Scope, Send
from rollout_dataset.proxy.call import DEFAULT_SESSION, SESSION_HEADER, Call
from rollout_dataset.proxy.call_record import CallRecorder
from rollout_dataset.proxy.context_fit import ContextFitter, ContextPolicy
from rollout_dataset.proxy.error_answers import ErrorAnswerer
from rollout_dataset.proxy.inflight import InflightBound, read_passing
from rollout_dataset.proxy.intake import RequestReader
from rollout_dataset.proxy.on_policy import SessionMemory
from rollout_dataset.proxy.on_policy_upstream import OnPolicyMode
from rollout_dataset.proxy.recorder import TraceRecorder
from rollout_dataset.proxy.relay import UpstreamRelay
from rollout_dataset.proxy.rewrite import RequestRewriter, UpstreamUrls
from rollout_dataset.proxy.session_api import SessionApi
from rollout_dataset.proxy.stream_relay import StreamRelay
from rollout_dataset.proxy.upstream_pool import UpstreamLane, UpstreamPool

__all__ = ["ProxyApp", "SESSION_HEADER", "WORKER_HEADER", "DEFAULT_SESSION", "DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_INFLIGHT_BYTES"]

log = logging.getLogger(__name__)

#: the response header naming the worker process that answered (`proxy --workers N`).
WORKER_HEADER = "x-rollout-proxy-worker"
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
# Request bodies plus buffered response bytes held by all calls at once; past it calls get 503.
DEFAULT_MAX_INFLIGHT_BYTES = 256 * 1024 * 1024


class ProxyApp:
    """ASGI app that forwards to a model server and records every call.

    It is a pipeline of stages, each an object with one job, given only what that job needs:

    ========================  ===============================  =========================================
    stage                     file                             job
    ========================  ===============================  =========================================
    `RequestReader`           ``proxy/intake.py``              received, checked (session, index, body
                                                               limits, JSON, Responses and Messages bodies)
    `RequestRewriter`         ``proxy/rewrite.py``             rewritten (context fit, token fields,
                                                               on-policy prompt, Messages → chat)
    `UpstreamRelay`           ``proxy/relay.py``               forwarded; a whole answer relayed
    `StreamRelay`             ``proxy/stream_relay.py``        streamed (events forwarded, assembled)
    `CallRecorder`            ``proxy/call_record.py``         recorded (once, before the last byte)
    `ErrorAnswerer`           ``proxy/error_answers.py``       failures recorded, then answered
    `InflightBound`           ``proxy/inflight.py``            bytes held by all calls, bounded
    ========================  ===============================  =========================================

    The call's life is `_serve`, one method.

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
        upstreams: several model servers, each ``(root, display URL, transport)``; when given, they
            replace `upstream_root` and `transport` (`rollout_dataset.proxy.upstream_pool`: sticky
            sessions, least loaded, health checked; each record names its ``model_server``).
        placement_dir: where the workers of a multi-worker proxy share session placements (None: one
            process).
        sessions: the session API (`rollout_dataset.proxy.session_api`); None: its paths are model
            traffic like any other.
    """

    def __init__(self, upstream_root: str, recorder: TraceRecorder, transport: httpx.AsyncBaseTransport,
                 timeout: httpx.Timeout | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES, on_policy: bool = False,
                 context: ContextPolicy | None = None, worker_header: bool = False,
                 upstreams: Sequence[tuple[str, str, httpx.AsyncBaseTransport]] | None = None,
                 placement_dir: Path | None = None, sessions: SessionApi | None = None) -> None:
        self.upstream_root = upstream_root.rstrip("/")
        self._worker = (WORKER_HEADER.encode(), str(os.getpid()).encode()) if worker_header else None
        timeout = timeout or httpx.Timeout(600.0, connect=10.0)
        extensions: dict[str, Any] = {"timeout": timeout.as_dict()}
        self.record = CallRecorder(recorder, None)
        self.answers = ErrorAnswerer(self.record)
        self.bound = InflightBound(max_inflight_bytes, self.answers)
        self.reader = RequestReader(recorder, self.record, max_body_bytes, self.bound, self.answers)
        targets = list(upstreams) if upstreams else [(self.upstream_root, self.upstream_root, transport)]
        memory = SessionMemory() if on_policy else None  # shared: a session moved keeps its parents
        lanes = []
        for i, (root, display, lane_transport) in enumerate(targets):
            root = root.rstrip("/")
            # A session's earlier calls may have been answered by another worker, or by this proxy before a
            # restart: each parent lookup first reads what those wrote to the session's file.
            policy = (OnPolicyMode(root, lane_transport, extensions, memory=memory, others=recorder.records_by_others,
                                   read_body=read_passing) if on_policy else None)
            fitter = (ContextFitter(root, lane_transport, context, read_body=read_passing)
                      if context and context.active else None)
            rewriter = RequestRewriter(UpstreamUrls(root), extensions, fitter, policy, self.answers, self.bound)
            relay = UpstreamRelay(lane_transport, self.record, self.answers, self.bound,
                                  StreamRelay(self.record, self.bound))
            lanes.append(UpstreamLane(i, display, lane_transport, rewriter, relay, policy, root))
        self.pool = UpstreamPool(lanes, placement_dir)
        self.record.on_policy = lanes[0].on_policy
        if len(lanes) > 1:
            self.record.lane_policies = [lane.on_policy for lane in lanes]
        self.rewriter, self.relay = lanes[0].rewriter, lanes[0].relay  # the first upstream's (one upstream: the only)
        self.sessions = sessions

    async def aclose(self) -> None:
        """Stop what runs beside the calls (the upstreams' health checks)."""
        await self.pool.aclose()

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
                    await self.pool.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if self._worker is not None:
            send = _with_header(send, self._worker)
        if self.sessions is not None:
            route = self.sessions.route(scope)
            if route is not None:
                await self.sessions.serve(route, scope, receive, send)
                return
        try:
            await self._serve(scope, receive, send)
        except Exception:  # never crash the server: the record is already written by _serve's paths
            log.exception("proxy failed on %s %s", scope.get("method"), scope.get("path"))

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One call's life: received → checked → rewritten → forwarded → streamed → recorded.

        Each stage that ends the call early (a refusal, an error, a harness gone) has already recorded
        it and answered the harness when it returns None or False. The record is written by the relays
        before the answer's last byte goes out (`CallRecorder.finish`, once per call).
        """
        call = self.reader.open(scope)  # received: session and endpoint
        sessions, session = self.sessions, call.session
        if sessions is not None:  # the session API tells a reader the session has a call in flight
            sessions.started(session)
            try:
                await self._serve_call(call, scope, receive, send)
            finally:
                sessions.ended(session)
        else:
            await self._serve_call(call, scope, receive, send)

    async def _serve_call(self, call: Call, scope: Scope, receive: Receive, send: Send) -> None:
        """`_serve` once the call is open (the session API counts it in flight around this)."""
        if self.sessions is not None and self.sessions.sealed(call.session):  # 409, recorded in the default session
            await self.reader.refuse_sealed(call, scope, send)
            return
        if not await self.reader.admit(call, scope, send):  # its arrival index (or a 400/503)
            return
        try:
            body = await self.reader.read_body(call, scope, receive, send)  # within the body and in-flight limits
            if body is None:
                return
            checked = await self.reader.check(call, scope, body, send)  # checked: JSON, Responses and Messages bodies
            if checked is None:
                return
            served = call.served = self.pool.place(call.session)  # its upstream: sticky, least loaded, healthy
            call.record_server = self.pool.several
            lane = self.pool.lanes[served.index]
            self.pool.started(served)
            try:
                outgoing = await lane.rewriter.rewrite(call, scope, checked, send)  # rewritten
                if outgoing is None:
                    return
                await lane.relay.forward(call, outgoing, receive, send)  # forwarded, streamed, recorded
            finally:
                error = call.error
                self.pool.ended(served, error["kind"] if error else None, error["message"] if error else "")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug or an input nobody foresaw: still one record, and an answer
            log.exception("proxy failed on %s %s", call.method, str(scope["path"])[:300])
            await self.answers.fail_unexpected(call, send, exc)
        finally:
            self.bound.release(call)


def _with_header(send: Send, header: tuple[bytes, bytes]) -> Send:
    """`send` with one more header on the response start."""
    async def sender(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), header]}
        await send(message)
    return sender
