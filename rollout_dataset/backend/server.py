"""Running the local backend: in-process uvicorn on 127.0.0.1 (port 0 = any free port).

    async with LocalBackend(policy="script", script="steps.yaml") as backend:
        client = openai.AsyncOpenAI(base_url=backend.base_url, api_key="x")

    with LocalBackend(policy="echo").start_in_thread() as backend:   # from sync code
        requests.post(backend.root_url + "/tokenize", ...)

`run_backend_in_thread(**kwargs)` is the same thread variant as a context manager function.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import threading
from typing import Any, Iterator

import uvicorn

from rollout_dataset.backend.app import create_backend_app

__all__ = ["LocalBackend", "run_backend_in_thread"]

logger = logging.getLogger(__name__)

_START_TIMEOUT_S = 30.0


class _InstanceOrClassStarter:
    """`backend.start_in_thread()` on an instance; `LocalBackend.start_in_thread(**kwargs)` on the class
    builds the backend from `kwargs` first (same as `run_backend_in_thread(**kwargs)`)."""

    def __init__(self, method: Any) -> None:
        self.method = method
        self.__doc__ = method.__doc__

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        if obj is None:
            return lambda **kwargs: run_backend_in_thread(**kwargs)
        return functools.partial(self.method, obj)


class LocalBackend:
    """The local vLLM-compatible backend served by uvicorn in this process.

    Args:
        tokenizer: `"builtin"`, a folder, a Hub id or a loaded tokenizer.
        policy: a policy name or object (`echo`, `script`, `oracle`, ...).
        served_model_name: the model name clients use.
        host: the interface to bind (127.0.0.1 unless told otherwise).
        port: the port (0 picks a free one).
        **app_kwargs: passed to `create_backend_app` (`script=`, `token_delay=`, `max_model_len=`, ...).

    Raises:
        ValueError / FileNotFoundError: from `create_backend_app` (bad policy, missing files).
    """

    def __init__(
        self,
        tokenizer: Any = "builtin",
        policy: Any = "echo",
        served_model_name: str = "local",
        host: str = "127.0.0.1",
        port: int = 0,
        **app_kwargs: Any,
    ) -> None:
        self.app = create_backend_app(tokenizer, policy, served_model_name, **app_kwargs)
        self.host = host
        self.port = port
        self.served_model_name = served_model_name
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task | None = None
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- addresses --------------------------------------------------------------------------
    @property
    def root_url(self) -> str:
        """Returns: `http://HOST:PORT` (where `/tokenize`, `/health` live)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """Returns: the OpenAI base URL, `http://HOST:PORT/v1`."""
        return f"{self.root_url}/v1"

    @property
    def tokenizer(self):
        """Returns: the serving tokenizer."""
        return self.app.state.backend.tokenizer

    # -- async lifecycle ----------------------------------------------------------------------
    async def start(self) -> "LocalBackend":
        """Bind and start serving; returns once the server accepts connections.

        Returns:
            self.

        Raises:
            OSError: the address cannot be bound.
            RuntimeError: the server did not start within 30 s.
        """
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # accepted connections inherit this: without it, small responses on a kept-alive
        # connection wait ~40 ms for the client's delayed ACK (Nagle)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((self.host, self.port))
        sock.listen(2048)
        sock.setblocking(False)
        self._sock = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off",
                                timeout_keep_alive=30, timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._server.install_signal_handlers = lambda: None  # type: ignore[method-assign]  # (uvicorn < 0.29)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _START_TIMEOUT_S
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError(f"local backend on {self.root_url} stopped while starting")
            if loop.time() > deadline:
                raise RuntimeError(f"local backend on {self.root_url} did not start within {_START_TIMEOUT_S} s")
            await asyncio.sleep(0.01)
        logger.info("local backend listening on %s", self.base_url)
        return self

    async def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            try:
                await asyncio.wait_for(self._task, timeout=10)
            except asyncio.TimeoutError:
                self._server.force_exit = True
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task
        if self._sock is not None:
            self._sock.close()
        self._server = self._task = self._sock = None

    async def __aenter__(self) -> "LocalBackend":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    # -- thread lifecycle (for sync code) -------------------------------------------------------
    @_InstanceOrClassStarter
    @contextlib.contextmanager
    def start_in_thread(self) -> Iterator["LocalBackend"]:
        """Serve from a background thread with its own event loop, for sync callers.

        Called on the class (`LocalBackend.start_in_thread(policy="oracle")`) it first builds the
        backend from the keyword arguments.

        Yields:
            self, already accepting connections; stopped when the block exits.

        Raises:
            RuntimeError / OSError: the server failed to start.
        """
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # reported to the caller below
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_until_complete(self._task)
            except BaseException:  # noqa: BLE001 - stopping
                pass
            finally:
                loop.run_until_complete(self.stop())
                loop.close()

        self._thread = threading.Thread(target=run, name="rollout-dataset-backend", daemon=True)
        self._thread.start()
        ready.wait(_START_TIMEOUT_S + 5)
        if failure:
            raise failure[0]
        if not ready.is_set():
            raise RuntimeError("local backend thread did not start")
        try:
            yield self
        finally:
            server = self._server
            if server is not None:
                server.should_exit = True
            self._thread.join(timeout=15)
            self._thread = None


@contextlib.contextmanager
def run_backend_in_thread(**kwargs: Any) -> Iterator[LocalBackend]:
    """Run a `LocalBackend` in a background thread for the duration of a `with` block.

    Args:
        **kwargs: `LocalBackend` arguments.

    Yields:
        The running backend (`.base_url`, `.root_url`).
    """
    backend = LocalBackend(**kwargs)
    with backend.start_in_thread():
        yield backend
