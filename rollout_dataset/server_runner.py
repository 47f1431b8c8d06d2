"""Run an ASGI server: bind, serve with uvicorn, on this loop, on a thread, or in worker processes.

One runner for the recording proxy and the local backend (and any test server):

* `bind_socket` — a listening TCP socket (loopback, port 0 = any free port, TCP_NODELAY).
* `UvicornServer` — uvicorn (httptools parser, uvloop when installed) serving an app on a bound
  socket in the running event loop; `start()` returns once it accepts connections.
* `LoopThread` and `serve_in_thread` — an event loop on a daemon thread, for synchronous callers:
  `serve_in_thread(factory)` enters an async context manager there and exits it when the block ends.
* `WorkerPool` — N processes serving one pre-bound socket (the kernel hands each new connection to
  one of them, as uvicorn's `workers` does); a worker that dies is replaced.

This module knows no app: it imports neither the proxy nor the backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from typing import Any, AsyncContextManager, Awaitable, Callable, Iterator, TypeVar

import uvicorn

__all__ = ["bind_socket", "new_event_loop", "UvicornServer", "LoopThread", "serve_in_thread", "WorkerPool"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: pending connections the kernel queues before the server accepts them.
DEFAULT_BACKLOG = 2048


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


def bind_socket(host: str = "127.0.0.1", port: int = 0, backlog: int = DEFAULT_BACKLOG,
                what: str = "the server") -> socket.socket:
    """A listening, non-blocking TCP socket on `host:port`.

    Args:
        host: the interface (an IPv6 address binds an IPv6 socket).
        port: the port; 0 picks a free one (read it with ``sock.getsockname()[1]``).
        backlog: the listen queue length.
        what: what is being bound, for the error message.

    Returns:
        The socket (SO_REUSEADDR; TCP_NODELAY, which accepted connections inherit: without it a small
        reply on a kept-alive connection waits for the client's delayed ACK, ~40 ms).

    Raises:
        OSError: the address cannot be bound (the message names it).
        ValueError: the port is outside 0..65535.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot bind {what} to {host}:{port}: {exc.strerror}") from exc
    except OverflowError:  # a port past 65535 or below 0
        sock.close()
        raise ValueError(f"cannot bind {what} to {host}:{port}: the port must be 0..65535") from None
    return sock


@contextlib.contextmanager
def _no_signal_capture() -> Iterator[None]:
    """Stands in for uvicorn's `Server.capture_signals`: the signals stay the caller's."""
    yield


class UvicornServer:
    """uvicorn serving one app on an already bound socket, in the running event loop.

    Args:
        app: the ASGI app.
        sock: a bound, listening socket (`bind_socket`); not closed by `stop` unless `own_socket`.
        keep_alive_s: seconds an idle client connection is kept open.
        graceful_s: seconds in-flight requests get to finish on `stop`.
        own_socket: close the socket on `stop`.
        server_header: send ``server: uvicorn`` and a ``date`` header (as vLLM's server does).
    """

    def __init__(self, app: Any, sock: socket.socket, *, keep_alive_s: float = 5, graceful_s: float = 5,
                 own_socket: bool = True, server_header: bool = False) -> None:
        self.sock = sock
        self.own_socket = own_socket
        # httptools (uvicorn's C parser) as "auto" picks; no proxy-header rewriting (a middleware layer
        # per request that nothing here needs). uvicorn annotates both timeouts `int` but hands them to
        # loop.call_later / asyncio.timeout, which take fractional seconds: its annotation is too narrow.
        config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False,
                                server_header=server_header, date_header=server_header, proxy_headers=False,
                                timeout_graceful_shutdown=graceful_s,  # type: ignore[arg-type]
                                backlog=DEFAULT_BACKLOG, timeout_keep_alive=keep_alive_s)  # type: ignore[arg-type]
        self.server = uvicorn.Server(config)
        # Signals are the caller's (the CLI's handlers, a worker's SIGTERM): uvicorn would otherwise take
        # SIGINT/SIGTERM while it serves from the main thread and raise them again once stopped.
        self.server.capture_signals = _no_signal_capture  # type: ignore[method-assign]
        self._task: asyncio.Task[Any] | None = None

    @property
    def port(self) -> int:
        """The bound port."""
        return self.sock.getsockname()[1]

    async def start(self, timeout: float = 30.0) -> None:
        """Start serving; return once connections are accepted.

        Args:
            timeout: seconds to wait.

        Raises:
            RuntimeError: the server stopped while starting, or did not start in time.
        """
        self._task = asyncio.ensure_future(self.server.serve(sockets=[self.sock]))
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError(f"the server on port {self.port} stopped while starting")
            if time.monotonic() > deadline:
                await self.stop()
                raise RuntimeError(f"the server on port {self.port} did not start within {timeout:g} s")
            await asyncio.sleep(0.005)

    async def serve_until_stopped(self) -> None:
        """Wait for the server to end (after `stop`, or a signal in a worker process)."""
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def stop(self, timeout: float = 15.0) -> None:
        """Stop accepting, let in-flight requests finish (`graceful_s`), close (idempotent).

        Args:
            timeout: seconds to wait before cancelling the server outright.
        """
        task, self._task = self._task, None
        if task is not None:
            self.server.should_exit = True
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout)
            except asyncio.TimeoutError:
                self.server.force_exit = True
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            except (Exception, SystemExit):  # pragma: no cover - uvicorn errors at shutdown
                log.exception("the server on port %s stopped with an error", self.port)
        if self.own_socket:
            self.sock.close()


class LoopThread:
    """An event loop running on a daemon thread, for synchronous callers of async servers.

    Args:
        name: the thread's name (for logs).
    """

    def __init__(self, name: str = "server") -> None:
        self.name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Whether the thread and its loop are running."""
        return self._thread is not None and self._thread.is_alive()

    def start(self, main: Callable[[], Awaitable[Any]]) -> None:
        """Run `main()` on a new loop in a new thread (the loop closes when it returns).

        Args:
            main: builds the coroutine to run (called on the thread).
        """
        loop = self.loop = new_event_loop()

        def target() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(main())
            finally:
                loop.close()

        self._thread = threading.Thread(target=target, name=self.name, daemon=True)
        self._thread.start()

    def on_thread(self) -> bool:
        """Whether the caller is this loop's thread."""
        return threading.current_thread() is self._thread

    def call(self, coro: Awaitable[T], timeout: float = 30.0) -> T:
        """Run a coroutine on the loop and wait for its result (from another thread).

        Args:
            coro: the coroutine.
            timeout: seconds to wait.

        Returns:
            Its result.

        Raises:
            RuntimeError: the loop is not running.
        """
        loop = self.loop
        if loop is None or loop.is_closed():
            raise RuntimeError(f"{self.name}: the event loop is not running")
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)  # type: ignore[arg-type]

    def call_soon(self, callback: Callable[[], Any]) -> None:
        """Schedule a plain callback on the loop (ignored when the loop has ended)."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(callback)

    def join(self, timeout: float = 30.0) -> None:
        """Wait for the thread to end.

        Args:
            timeout: seconds to wait.
        """
        if self._thread is not None:
            self._thread.join(timeout)
        self._thread = None


@contextlib.contextmanager
def serve_in_thread(factory: Callable[[], AsyncContextManager[T]], *, name: str = "server",
                    start_timeout_s: float = 60.0, stop_timeout_s: float = 30.0) -> Iterator[T]:
    """Enter `factory()` on a private event loop in a thread; exit it when the block ends.

    Args:
        factory: builds the async context manager (called on the thread).
        name: thread name (for logs).
        start_timeout_s: how long to wait for it to start.
        stop_timeout_s: how long to wait for it to stop.

    Yields:
        What the async context manager's ``__aenter__`` returned.

    Raises:
        TimeoutError: it did not start in time.
        Exception: whatever starting it raised.
    """
    started = threading.Event()
    box: dict[str, Any] = {}
    runner = LoopThread(name)

    async def main() -> None:
        stop = box["stop"] = asyncio.Event()
        try:
            async with factory() as obj:
                box["obj"] = obj
                started.set()
                await stop.wait()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc
            started.set()

    runner.start(main)
    if not started.wait(start_timeout_s):
        raise TimeoutError(f"{name} did not start within {start_timeout_s:g} s")
    if "error" in box:
        runner.join(stop_timeout_s)
        raise box["error"]
    try:
        yield box["obj"]
    finally:
        runner.call_soon(box["stop"].set)
        runner.join(stop_timeout_s)


class WorkerPool:
    """N processes serving one listening socket; a worker that dies is started again.

    Each worker runs ``target(sock, ready, *args)`` in a fresh interpreter (multiprocessing
    "spawn": nothing of the parent's threads or loop is inherited); it must set `ready` once it
    accepts connections and return when it receives SIGTERM. The kernel hands each new connection
    to one worker; a connection stays with the worker that accepted it.

    Args:
        target: a module-level function (picklable).
        sock: the bound, listening socket (`bind_socket`), shared with every worker.
        workers: how many processes (at least 1).
        args: more picklable arguments for `target`.
        name: the processes' name prefix.
    """

    def __init__(self, target: Callable[..., Any], sock: socket.socket, workers: int, args: tuple[Any, ...] = (),
                 name: str = "worker") -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.target = target
        self.sock = sock
        self.workers = workers
        self.args = args
        self.name = name
        self._ctx = multiprocessing.get_context("spawn")
        self._procs: list[Any] = []
        self._stopping = False
        self.restarts = 0

    @property
    def pids(self) -> list[int]:
        """The process ids of the live workers."""
        return [p.pid for p in self._procs if p.is_alive()]

    def _spawn(self, number: int) -> tuple[Any, Any]:
        ready = self._ctx.Event()
        proc = self._ctx.Process(target=self.target, args=(self.sock, ready, *self.args),
                                 name=f"{self.name}-{number}", daemon=True)
        proc.start()
        return proc, ready

    def start(self, timeout: float = 60.0) -> None:
        """Start every worker; return once each accepts connections.

        Args:
            timeout: seconds to wait for all of them.

        Raises:
            RuntimeError: a worker exited while starting, or did not start in time (all are stopped).
        """
        started = [self._spawn(n) for n in range(self.workers)]
        self._procs = [proc for proc, _ in started]
        deadline = time.monotonic() + timeout
        for proc, ready in started:
            while not ready.wait(0.05):
                if not proc.is_alive() or time.monotonic() > deadline:
                    self.stop()
                    why = f"exited with {proc.exitcode}" if proc.exitcode is not None else \
                        f"did not start within {timeout:g} s"
                    raise RuntimeError(f"{self.name} worker {proc.name} {why}")

    def replace_dead(self) -> list[int]:
        """Start a new worker for each one that died (killed, or failed; not one that stopped cleanly).

        Returns:
            The exit codes of the workers replaced.
        """
        codes = []
        for n, proc in enumerate(self._procs):
            if self._stopping or proc.is_alive() or proc.exitcode == 0:
                continue  # exit code 0: it was told to stop (a terminal's Ctrl-C reaches every worker)
            codes.append(proc.exitcode)
            log.warning("%s worker pid %s exited with %s; starting another", self.name, proc.pid, proc.exitcode)
            self._procs[n], _ = self._spawn(n)
            self.restarts += 1
        return codes

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM every worker (in-flight requests finish), wait, SIGKILL those still running.

        Args:
            timeout: seconds to wait for them all.
        """
        self._stopping = True
        for proc in self._procs:
            if proc.is_alive() and proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                log.error("%s worker pid %s did not stop in %g s: killed", self.name, proc.pid, timeout)
                proc.kill()
                proc.join(5)
        self._procs = []
