"""`CaptureProxy`: run the recording proxy on a local port, from async code or from a thread.

    async with CaptureProxy(upstream="http://127.0.0.1:8000/v1", trace_dir="traces") as proxy:
        client = openai.AsyncOpenAI(base_url=proxy.session_base_url("run1"), api_key="x")

    with CaptureProxy(upstream=..., trace_dir=...) as proxy:   # sync callers: a background thread
        subprocess.run([...harness..., "--base-url", proxy.base_url])
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from rollout_dataset.proxy.app import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_INFLIGHT_BYTES, DEFAULT_SESSION, ProxyApp
from rollout_dataset.proxy.recorder import DEFAULT_MAX_OPEN_FILES, TraceRecorder
from rollout_dataset.proxy.context_fit import ContextPolicy
from rollout_dataset.proxy.redact import valid_session_id
from rollout_dataset.proxy.transport import UpstreamTransport
from rollout_dataset.proxy.upstream import AuthenticatingTransport, UpstreamTarget, parse_upstream
from rollout_dataset.trace_integrity import TraceSeal

__all__ = ["CaptureProxy", "new_event_loop", "upstream_root"]

log = logging.getLogger(__name__)

# Idle upstream connections are dropped before the upstream drops them: uvicorn (vLLM's server)
# closes idle keep-alive connections after 5 s, and a POST sent on a connection the server is
# closing fails without having been processed.
UPSTREAM_KEEPALIVE_S = 3.0
# The proxy keeps idle harness connections longer than common client pools do (httpx/openai: 5 s),
# so a harness never sends a request on a connection the proxy is closing.
CLIENT_KEEPALIVE_S = 75


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A fresh event loop: uvloop's when it is installed (it comes with uvicorn[standard]).

    Returns:
        A new, not yet running event loop.
    """
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is optional
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def upstream_root(upstream: str) -> str:
    """The server root of an upstream base URL (``http://h:p/v1`` and ``http://h:p`` → ``http://h:p``).

    Args:
        upstream: the model server's base URL, with or without the trailing ``/v1``.

    Returns:
        The URL without a trailing ``/v1`` or slash, without userinfo and query (credentials
        travel as headers, see `rollout_dataset.proxy.upstream`).

    Raises:
        ValueError: the URL is not http(s) or has no host (the message shows it redacted).
    """
    return parse_upstream(upstream).root


class CaptureProxy:
    """The recording proxy, listening on `host:port` and forwarding to `upstream`.

    Use it as ``async with`` (in the current event loop) or as a plain ``with`` (a background
    thread with its own loop, for synchronous callers such as subprocess-driven harnesses).

    Args:
        upstream: the model server's base URL (``http://host:port/v1`` or its root).
        trace_dir: directory for the `<session>.jsonl` trace files.
        host: interface to bind (loopback unless told otherwise).
        port: port to bind; 0 picks a free one (read `base_url` after start).
        transport: an httpx transport for upstream calls (e.g. ``httpx.ASGITransport(app)``), for tests.
        upstream_timeout: seconds to wait for the upstream's answer and between stream chunks;
            a timeout becomes HTTP 504 (or an error event mid-stream), recorded.
        connect_timeout: seconds to wait for a connection to the upstream.
        max_body_bytes: largest request body accepted (larger → 413).
        max_connections: connection pool size towards the upstream.
        max_inflight_bytes: request bodies plus buffered response bytes held by all calls at once
            (past it → 503, recorded).
        max_open_files: trace files kept open at once (least recently used closed first).
        api_key: the real upstream key, sent as ``Authorization: Bearer`` in place of whatever the
            harness sent; None sends none (userinfo in `upstream` still does).
        forward_client_auth: with no credentials of its own (no `api_key`, no userinfo), pass
            the harness's ``Authorization`` through (default) or drop it (a capture: the harness
            holds a dummy key).

    Credentials in `upstream` (``user:pass@`` → Basic, ``token@`` → Bearer, query parameters)
    are sent as headers/query to the upstream and never printed: `upstream` holds the URL
    redacted (see `rollout_dataset.proxy.upstream`).
        on_policy: on-policy mode: multi-turn chat prompts built from the ids the model sampled
            (`rollout_dataset.proxy.on_policy`; needs vLLM >= 0.32 or the local backend).
        context: output-limit fitting (`ContextPolicy(max_tokens_cap=..., fit_context=...)`); None: none.

    Raises:
        ValueError: `upstream` is not an http(s) URL, or it has userinfo and `api_key` is given.
    """

    def __init__(self, upstream: str, trace_dir: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 0,
                 transport: httpx.AsyncBaseTransport | None = None, *, upstream_timeout: float = 600.0,
                 connect_timeout: float = 10.0, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 max_connections: int = 512, max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
                 max_open_files: int = DEFAULT_MAX_OPEN_FILES, api_key: str | None = None,
                 forward_client_auth: bool = True, on_policy: bool = False,
                 context: ContextPolicy | None = None) -> None:
        self._target: UpstreamTarget = parse_upstream(upstream, api_key)
        self.upstream = self._target.display
        self.upstream_root = self._target.root
        self.forward_client_auth = forward_client_auth
        self.trace_dir = Path(trace_dir)
        self.host = host
        self.port = port
        self.transport = transport
        self.upstream_timeout = upstream_timeout
        self.connect_timeout = connect_timeout
        self.max_body_bytes = max_body_bytes
        self.max_connections = max_connections
        self.max_inflight_bytes = max_inflight_bytes
        self.max_open_files = max_open_files
        self.on_policy = on_policy
        self.context = context
        self._server: uvicorn.Server | None = None
        self._serve_task: asyncio.Task[Any] | None = None
        self._own_transport: httpx.AsyncBaseTransport | None = None
        self._recorder: TraceRecorder | None = None
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None
        self._thread_stop: asyncio.Event | None = None
        self._thread_error: BaseException | None = None

    # ---- addresses ----------------------------------------------------------------------------

    @property
    def root_url(self) -> str:
        """``http://host:port`` of the running proxy (vLLM root endpoints such as /tokenize live here).

        Raises:
            RuntimeError: the proxy is not running.
        """
        if self._server is None:
            raise RuntimeError("the proxy is not running: use `async with CaptureProxy(...)` or `with ...`")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL of the default session (ends in ``/v1``)."""
        return f"{self.root_url}/v1"

    def session_base_url(self, session: str) -> str:
        """The OpenAI base URL that records into one session (``.../sessions/{session}/v1``).

        Args:
            session: 1-128 letters, digits, '.', '_' or '-'.

        Returns:
            The base URL to give the harness.

        Raises:
            ValueError: the session id is not usable as a file name.
        """
        if not valid_session_id(session):
            raise ValueError(f"session id {session!r}: use 1-128 letters, digits, '.', '_' or '-'")
        return f"{self.root_url}/sessions/{session}/v1"

    def trace_path(self, session: str = DEFAULT_SESSION) -> Path:
        """The trace file of a session (it exists once the session's first call ended).

        Args:
            session: the session id.

        Returns:
            `<trace_dir>/<session>.jsonl`.
        """
        return self.trace_dir / f"{session}.jsonl"

    def seal(self, session: str = DEFAULT_SESSION) -> TraceSeal:
        """What this proxy wrote to a session's trace file, from its own memory (not the file).

        Read the file with ``read_trace(proxy.trace_path(s), seal=proxy.seal(s))`` to catch a cut
        tail or an edited last record; store ``seal.to_dict()`` next to the records (``trace.json``).
        Call it once the session's calls have ended.

        Args:
            session: the session id.

        Returns:
            The number of records written and the last one's digest.

        Raises:
            RuntimeError: the proxy is not running.
        """
        recorder = self._recorder
        if recorder is None:
            raise RuntimeError("the proxy is not running: the seal is read while it runs")
        loop = self._thread_loop
        if (loop is not None and self._thread is not None and not loop.is_closed()
                and threading.current_thread() is not self._thread):
            async def read() -> TraceSeal:
                return recorder.seal(session)
            return asyncio.run_coroutine_threadsafe(read(), loop).result(30)
        return recorder.seal(session)

    # ---- async lifecycle ----------------------------------------------------------------------

    async def start(self) -> "CaptureProxy":
        """Bind, start serving in the running loop, and return once the port accepts connections.

        Returns:
            self.

        Raises:
            OSError: the address cannot be bound.
        """
        if self._server is not None:
            raise RuntimeError("the proxy is already running")
        self._recorder = TraceRecorder(self.trace_dir, self.max_open_files)
        limits = httpx.Limits(max_connections=self.max_connections,
                              max_keepalive_connections=min(self.max_connections, 256),
                              keepalive_expiry=UPSTREAM_KEEPALIVE_S)
        timeout = httpx.Timeout(self.upstream_timeout, connect=self.connect_timeout)
        transport = self.transport
        if transport is None:
            # aiohttp's C HTTP parser behind httpx's transport API: a third of httpcore's CPU per call.
            verify = self.upstream_root.startswith("https:")  # no certificate loading for plain http
            transport = self._own_transport = UpstreamTransport(limits, verify=verify)
        transport = AuthenticatingTransport(transport, self._target, forward_client_auth=self.forward_client_auth)
        app = ProxyApp(self.upstream_root, self._recorder, transport, timeout, self.max_body_bytes,
                       self.max_inflight_bytes, on_policy=self.on_policy, context=self.context)
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Without it, replies on kept-alive connections wait for the client's delayed ACK (~40 ms).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            await self._close_client()
            raise OSError(exc.errno, f"cannot bind the proxy to {self.host}:{self.port}: {exc.strerror}") from exc
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False, server_header=False,
                                date_header=False, timeout_graceful_shutdown=5, backlog=2048,
                                timeout_keep_alive=CLIENT_KEEPALIVE_S)
        server = uvicorn.Server(config)
        self._server = server
        self._serve_task = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started:
            if self._serve_task.done():
                self._server = None
                await self._close_client()
                self._serve_task.result()
                raise RuntimeError(f"the proxy on {self.host}:{self.port} stopped while starting")
            await asyncio.sleep(0.005)
        log.info("recording proxy on %s -> %s, traces in %s", self.base_url, self.upstream, self.trace_dir)
        return self

    async def stop(self) -> None:
        """Stop serving (in-flight calls finish and are recorded) and close the trace files."""
        server, task = self._server, self._serve_task
        if server is not None and task is not None:
            server.should_exit = True
            try:
                await task
            except (Exception, SystemExit):  # pragma: no cover - uvicorn errors at shutdown
                log.exception("the proxy server stopped with an error")
        self._server = None
        self._serve_task = None
        await self._close_client()
        if self._recorder is not None:
            self._recorder.close()
            self._recorder = None

    async def _close_client(self) -> None:
        if self._own_transport is not None:
            await self._own_transport.aclose()
            self._own_transport = None

    async def __aenter__(self) -> "CaptureProxy":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ---- thread lifecycle (sync callers) ------------------------------------------------------

    def start_in_thread(self, timeout: float = 30.0) -> "CaptureProxy":
        """Run the proxy in a background thread with its own event loop; return once it listens.

        Args:
            timeout: seconds to wait for the proxy to listen.

        Returns:
            self (read `base_url`; call `stop_thread()` when done).

        Raises:
            OSError: the address cannot be bound.
            TimeoutError: the proxy did not start in time.
        """
        if self._thread is not None:
            raise RuntimeError("the proxy thread is already running")
        ready = threading.Event()
        self._thread_error = None

        def main() -> None:
            loop = new_event_loop()
            self._thread_loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._thread_main(ready))
            except BaseException as exc:  # reported to the starting thread
                self._thread_error = exc
                ready.set()
            finally:
                loop.close()

        self._thread = threading.Thread(target=main, name="rollout-dataset-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise TimeoutError(f"the proxy did not start listening on {self.host}:{self.port} within {timeout}s")
        if self._thread_error is not None:
            self._thread.join()
            self._thread = None
            raise self._thread_error
        return self

    async def _thread_main(self, ready: threading.Event) -> None:
        self._thread_stop = asyncio.Event()
        await self.start()
        ready.set()
        try:
            await self._thread_stop.wait()
        finally:
            await self.stop()

    def stop_thread(self, timeout: float = 30.0) -> None:
        """Stop a proxy started with `start_in_thread` (in-flight calls finish and are recorded).

        Args:
            timeout: seconds to wait for the thread to end.
        """
        thread, loop, stop = self._thread, self._thread_loop, self._thread_stop
        if thread is None:
            return
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        thread.join(timeout)
        self._thread = None
        self._thread_loop = None
        self._thread_stop = None

    def __enter__(self) -> "CaptureProxy":
        return self.start_in_thread()

    def __exit__(self, *exc: object) -> None:
        self.stop_thread()
