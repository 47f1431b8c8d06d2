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
from typing import Any, Sequence

import httpx

from rollout_dataset.proxy.app import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_INFLIGHT_BYTES, DEFAULT_SESSION, ProxyApp
from rollout_dataset.proxy.recorder import DEFAULT_MAX_OPEN_FILES, TraceRecorder
from rollout_dataset.proxy.shared_recorder import SharedTraceRecorder
from rollout_dataset.proxy.context_fit import ContextPolicy
from rollout_dataset.proxy.redact import valid_session_id
from rollout_dataset.proxy.session_api import SESSION_API_TOKEN_ENV, SessionApi, is_loopback_host
from rollout_dataset.proxy.trust_env import upstream_transport
from rollout_dataset.proxy.upstream import AuthenticatingTransport, UpstreamTarget, parse_upstream
from rollout_dataset.proxy.upstream_pool import PLACEMENT_DIR
from rollout_dataset.server_runner import LoopThread, UvicornServer, WorkerPool, bind_socket, new_event_loop
from rollout_dataset.trace_integrity import TraceSeal

__all__ = ["CaptureProxy", "new_event_loop", "upstream_root", "session_api_mode"]

log = logging.getLogger(__name__)

# Idle upstream connections are dropped before the upstream drops them: uvicorn (vLLM's server)
# closes idle keep-alive connections after 5 s, and a POST sent on a connection the server is
# closing fails without having been processed.
UPSTREAM_KEEPALIVE_S = 3.0
# The proxy keeps idle harness connections longer than common client pools do (httpx/openai: 5 s),
# so a harness never sends a request on a connection the proxy is closing.
CLIENT_KEEPALIVE_S = 75
#: seconds between checks for a dead worker process (`workers` > 1), which is then replaced.
WORKER_CHECK_S = 0.5


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


def session_api_mode(wanted: bool | None, host: str, token: str | None) -> tuple[bool, str]:
    """Whether a proxy serves the session API, and if not, why (the sentence its 404 says).

    Args:
        wanted: True (serve it), None (serve it on loopback or with a token), False (off).
        host: the address the proxy binds.
        token: the session API's token, if any.

    Returns:
        ``(enabled, reason it is off)``.

    Raises:
        ValueError: `wanted` is True on a non-loopback `host` without a token, or False with a token.
    """
    if wanted is False:
        if token:
            raise ValueError("a session API token was given, but the session API is off (session_api=False)")
        return False, "the session API is off on this proxy (rollout-dataset proxy serves it; library: " \
                      "CaptureProxy(session_api=True))"
    if token or is_loopback_host(host):
        return True, ""
    if wanted:
        raise ValueError(f"the session API on a non-loopback bind ({host}) needs a token (session_api_token)")
    return False, ("the session API is off: a proxy bound beyond loopback serves it only with a token "
                   f"(--session-api-token, or the environment variable {SESSION_API_TOKEN_ENV})")


class CaptureProxy:
    """The recording proxy, listening on `host:port` and forwarding to `upstream`.

    Use it as ``async with`` (in the current event loop) or as a plain ``with`` (a background
    thread with its own loop, for synchronous callers such as subprocess-driven harnesses).

    Args:
        upstream: the model server's base URL (``http://host:port/v1`` or its root), or a list of several
            serving the same model: each session sticks to one, new sessions go to the least loaded
            healthy one, and each record names its ``model_server`` (`rollout_dataset.proxy.upstream_pool`).
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
        workers: processes serving the port (see `rollout_dataset.proxy.shared_recorder`): each
            session keeps one file, one gap-free arrival order and one chain whichever worker
            takes its calls; `max_inflight_bytes`, `max_connections` and `max_open_files` hold
            per worker. A worker that dies is replaced. With 1 (default) the proxy runs in this
            process. Workers are spawned processes: a script that starts such a proxy needs the
            usual ``if __name__ == "__main__":`` guard.
        session_api: the session API (`rollout_dataset.proxy.session_api`, docs/session-api.md): True
            serves it (a non-loopback `host` needs `session_api_token`), None serves it on a loopback
            bind or with a token, False (default) leaves it off (its paths answer 404 saying so).
        session_api_token: the bearer token every session API call must carry (None: none; then only
            a loopback bind serves it).
        session_api_tokenizer: a tokenizer name or path (`rollout_dataset.tokenizers.load_tokenizer`)
            the session API's export uses, as a capture's does; None: none.
        trust_env: honour HTTP_PROXY / HTTPS_PROXY / ALL_PROXY / NO_PROXY and SSL_CERT_FILE /
            SSL_CERT_DIR for the upstream, exactly as httpx's ``trust_env`` (default True; see
            `rollout_dataset.proxy.trust_env`); False connects directly with certifi's CA bundle.

    Raises:
        ValueError: `upstream` is not an http(s) URL, or it has userinfo and `api_key` is given, or
            `workers` is below 1, or `workers` > 1 with a `transport` (an in-process test seam), or
            `session_api` is True on a non-loopback `host` without a `session_api_token`, or False with one.
    """

    def __init__(self, upstream: str | Sequence[str], trace_dir: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 0,
                 transport: httpx.AsyncBaseTransport | None = None, *, upstream_timeout: float = 600.0,
                 connect_timeout: float = 10.0, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 max_connections: int = 512, max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
                 max_open_files: int = DEFAULT_MAX_OPEN_FILES, api_key: str | None = None,
                 forward_client_auth: bool = True, on_policy: bool = False,
                 context: ContextPolicy | None = None, workers: int = 1, trust_env: bool = True,
                 session_api: bool | None = False, session_api_token: str | None = None,
                 session_api_tokenizer: str | None = None) -> None:
        given = [upstream] if isinstance(upstream, str) else list(upstream)
        if not given:
            raise ValueError("at least one upstream URL is needed")
        self._targets: list[UpstreamTarget] = [parse_upstream(url, api_key) for url in given]
        self._target = self._targets[0]
        self.session_api, self.session_api_off_reason = session_api_mode(session_api, host, session_api_token)
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if workers > 1 and transport is not None:
            raise ValueError("a transport is an in-process test seam: it cannot be used with workers > 1")
        self.workers = workers
        # What a worker process needs to build its own proxy (credentials travel through the spawn
        # pipe, never on a command line).
        self._settings = _WorkerSettings(
            upstream=upstream, trace_dir=str(trace_dir), host=host, upstream_timeout=upstream_timeout,
            connect_timeout=connect_timeout, max_body_bytes=max_body_bytes, max_connections=max_connections,
            max_inflight_bytes=max_inflight_bytes, max_open_files=max_open_files, api_key=api_key,
            forward_client_auth=forward_client_auth, on_policy=on_policy, context=context, trust_env=trust_env,
            session_api=session_api, session_api_token=session_api_token, session_api_tokenizer=session_api_tokenizer)
        self._session_api_token = session_api_token
        self.session_api_tokenizer = session_api_tokenizer
        self.upstream = " ".join(target.display for target in self._targets)
        self.upstreams = [target.display for target in self._targets]
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
        self.trust_env = trust_env
        self._server: UvicornServer | None = None
        self._own_transports: list[httpx.AsyncBaseTransport] = []
        self._app: ProxyApp | None = None
        self._recorder: TraceRecorder | None = None
        self._pool: WorkerPool | None = None
        self._pool_sock: socket.socket | None = None
        self._watch: asyncio.Task[Any] | None = None
        self._runner: LoopThread | None = None
        self._thread_stop: asyncio.Event | None = None
        self._thread_error: BaseException | None = None

    # ---- addresses ----------------------------------------------------------------------------

    @property
    def root_url(self) -> str:
        """``http://host:port`` of the running proxy (vLLM root endpoints such as /tokenize live here).

        Raises:
            RuntimeError: the proxy is not running.
        """
        if self._server is None and self._pool is None:
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
            The number of records written and the last one's digest (with workers: as the
            session's state file says, read under the file's lock).

        Raises:
            RuntimeError: the proxy is not running.
        """
        recorder = self._recorder
        if recorder is None:
            raise RuntimeError("the proxy is not running: the seal is read while it runs")
        runner = self._runner
        if runner is not None and runner.running and not runner.on_thread():
            async def read() -> TraceSeal:
                return recorder.seal(session)
            return runner.call(read(), 30)
        return recorder.seal(session)

    def upstream_status(self) -> list[dict[str, Any]]:
        """Each model server's URL, health and calls in flight, as this process sees them.

        Returns:
            One dict (``url``, ``healthy``, ``problem``, ``inflight``) per upstream, in the order given.

        Raises:
            RuntimeError: the proxy is not running in this process (not started, or `workers` > 1).
        """
        if self._app is None:
            raise RuntimeError("the upstreams' status is known while the proxy runs in this process (workers=1)")
        return self._app.pool.status()

    async def check_upstreams(self) -> list[dict[str, Any]]:
        """Check every model server's health now (``GET /v1/models``), as the periodic check does.

        Returns:
            `upstream_status` after the check.

        Raises:
            RuntimeError: the proxy is not running in this process (not started, or `workers` > 1).
        """
        if self._app is None:
            raise RuntimeError("the upstreams are checked while the proxy runs in this process (workers=1)")
        await self._app.pool.check_all()
        return self._app.pool.status()

    @property
    def worker_pids(self) -> list[int]:
        """The process ids of the live worker processes (empty when the proxy runs in this process)."""
        return self._pool.pids if self._pool is not None else []

    # ---- async lifecycle ----------------------------------------------------------------------

    async def start(self) -> "CaptureProxy":
        """Bind, start serving (here, or in `workers` processes), and return once the port accepts connections.

        Returns:
            self.

        Raises:
            OSError: the address cannot be bound.
            RuntimeError: already running, or a worker process did not start.
        """
        if self._server is not None or self._pool is not None:
            raise RuntimeError("the proxy is already running")
        sock = bind_socket(self.host, self.port, what="the proxy")
        self.port = sock.getsockname()[1]
        if self.workers > 1:
            await self._start_workers(sock)
            return self
        self._recorder = TraceRecorder(self.trace_dir, self.max_open_files)
        server = UvicornServer(self._build_app(self._recorder), sock, keep_alive_s=CLIENT_KEEPALIVE_S)
        self._server = server
        try:
            await server.start()
        except BaseException:
            self._server = None
            sock.close()
            await self._close_client()
            self._recorder.close()
            self._recorder = None
            raise
        log.info("recording proxy on %s -> %s, traces in %s", self.base_url, self.upstream, self.trace_dir)
        return self

    def _build_app(self, recorder: TraceRecorder, worker_header: bool = False) -> ProxyApp:
        """The ASGI app with its upstream transports (one connection pool per upstream and process)."""
        limits = httpx.Limits(max_connections=self.max_connections,
                              max_keepalive_connections=min(self.max_connections, 256),
                              keepalive_expiry=UPSTREAM_KEEPALIVE_S)
        timeout = httpx.Timeout(self.upstream_timeout, connect=self.connect_timeout)
        lanes: list[tuple[str, str, httpx.AsyncBaseTransport]] = []
        for target in self._targets:
            transport = self.transport
            if transport is None:
                # pooled HTTP/1.1 connections parsed by httptools (transport.py), or httpx's own transport
                # through the forward proxy HTTP(S)_PROXY/ALL_PROXY name for this upstream (trust_env.py)
                transport = upstream_transport(target.root, limits, trust_env=self.trust_env)
                self._own_transports.append(transport)
            lanes.append((target.root, target.display,
                          AuthenticatingTransport(transport, target, forward_client_auth=self.forward_client_auth)))
        placements = self.trace_dir / PLACEMENT_DIR if worker_header and len(lanes) > 1 else None
        tokenizer = None
        if self.session_api and self.session_api_tokenizer:
            from rollout_dataset.tokenizers import load_tokenizer

            tokenizer = load_tokenizer(self.session_api_tokenizer)
        sessions = SessionApi(recorder, enabled=self.session_api, token=self._session_api_token, tokenizer=tokenizer,
                              off_reason=self.session_api_off_reason)
        self._app = ProxyApp(self.upstream_root, recorder, lanes[0][2], timeout, self.max_body_bytes,
                             self.max_inflight_bytes, on_policy=self.on_policy, context=self.context,
                             worker_header=worker_header, upstreams=lanes if len(lanes) > 1 else None,
                             placement_dir=placements, sessions=sessions)
        return self._app

    async def _start_workers(self, sock: socket.socket) -> None:
        """Serve `sock` from `workers` processes; this process keeps the seal reader and replaces dead workers."""
        self._recorder = SharedTraceRecorder(self.trace_dir, self.max_open_files)
        pool = WorkerPool(_serve_worker, sock, self.workers, args=(self._settings,), name="rollout-dataset-proxy")
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, pool.start)
        except BaseException:
            sock.close()
            self._recorder.close()
            self._recorder = None
            raise
        self._pool, self._pool_sock = pool, sock
        self._watch = asyncio.ensure_future(self._replace_dead_workers())
        log.info("recording proxy on %s (%d workers, pids %s) -> %s, traces in %s", self.base_url, self.workers,
                 pool.pids, self.upstream, self.trace_dir)

    async def _replace_dead_workers(self) -> None:
        while self._pool is not None:
            await asyncio.sleep(WORKER_CHECK_S)
            if self._pool is not None:
                self._pool.replace_dead()

    async def stop(self) -> None:
        """Stop serving (in-flight calls finish and are recorded) and close the trace files."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop()
        pool, self._pool = self._pool, None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if pool is not None:
            await asyncio.get_running_loop().run_in_executor(None, pool.stop)
        if self._pool_sock is not None:
            self._pool_sock.close()
            self._pool_sock = None
        await self._close_client()
        if self._recorder is not None:
            self._recorder.close()
            self._recorder = None

    async def _close_client(self) -> None:
        app, self._app = self._app, None
        if app is not None:
            await app.aclose()
        transports, self._own_transports = self._own_transports, []
        for transport in transports:
            await transport.aclose()

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
        if self._runner is not None:
            raise RuntimeError("the proxy thread is already running")
        ready = threading.Event()
        self._thread_error = None
        runner = self._runner = LoopThread("rollout-dataset-proxy")

        async def main() -> None:
            try:
                await self._thread_main(ready)
            except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
                self._thread_error = exc
                ready.set()

        runner.start(main)
        if not ready.wait(timeout):
            raise TimeoutError(f"the proxy did not start listening on {self.host}:{self.port} within {timeout}s")
        if self._thread_error is not None:
            runner.join()
            self._runner = None
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
        runner, stop = self._runner, self._thread_stop
        if runner is None:
            return
        if stop is not None:
            runner.call_soon(stop.set)
        runner.join(timeout)
        self._runner = None
        self._thread_stop = None

    def __enter__(self) -> "CaptureProxy":
        return self.start_in_thread()

    def __exit__(self, *exc: object) -> None:
        self.stop_thread()


class _WorkerSettings(dict[str, Any]):
    """`CaptureProxy` arguments for a worker process; shown redacted (they hold the upstream's credentials)."""

    def __repr__(self) -> str:
        return f"_WorkerSettings(<{len(self)} arguments, redacted>)"


def _serve_worker(sock: socket.socket, ready: Any, settings: dict[str, Any]) -> None:
    """One worker process of a multi-worker proxy: serve `sock` until SIGTERM/SIGINT.

    Args:
        sock: the listening socket shared by every worker.
        ready: set once this worker accepts connections.
        settings: `CaptureProxy` arguments (the worker's own proxy runs in this process).
    """
    import signal

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    proxy = CaptureProxy(**settings)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        proxy.port = sock.getsockname()[1]
        proxy._recorder = SharedTraceRecorder(proxy.trace_dir, proxy.max_open_files)
        server = proxy._server = UvicornServer(proxy._build_app(proxy._recorder, worker_header=True), sock,
                                               keep_alive_s=CLIENT_KEEPALIVE_S, own_socket=False)
        await server.start()
        ready.set()
        await stop.wait()
        await proxy.stop()

    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
