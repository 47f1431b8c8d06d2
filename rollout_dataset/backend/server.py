"""Running the local backend: in-process uvicorn on 127.0.0.1 (port 0 = any free port).

    async with LocalBackend(policy="script", script="steps.yaml") as backend:
        client = openai.AsyncOpenAI(base_url=backend.base_url, api_key="x")

    with LocalBackend(policy="echo").start_in_thread() as backend:   # from sync code
        requests.post(backend.root_url + "/tokenize", ...)

`run_backend_in_thread(**kwargs)` is the same thread variant as a context manager function.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any, Iterator

from rollout_dataset.backend.app import create_backend_app
from rollout_dataset.server_runner import UvicornServer, bind_socket, serve_in_thread

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
        self._server: UvicornServer | None = None

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
    def tokenizer(self) -> Any:
        """Returns: the serving tokenizer."""
        return self.app.state.backend.tokenizer

    @property
    def _sock(self) -> Any:
        """The listening socket while serving (None otherwise)."""
        return self._server.sock if self._server is not None else None

    # -- async lifecycle ----------------------------------------------------------------------
    async def start(self) -> "LocalBackend":
        """Bind and start serving; returns once the server accepts connections.

        Returns:
            self.

        Raises:
            OSError: the address cannot be bound.
            RuntimeError: the server did not start within 30 s.
        """
        sock = bind_socket(self.host, self.port, what="the local backend")
        self.port = sock.getsockname()[1]
        server = UvicornServer(self.app, sock, keep_alive_s=30, graceful_s=2, server_header=True)
        try:
            await server.start(_START_TIMEOUT_S)
        except BaseException:
            sock.close()
            raise
        self._server = server
        logger.info("local backend listening on %s", self.base_url)
        return self

    async def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(timeout=10)

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
        with serve_in_thread(lambda: self, name="rollout-dataset-backend", start_timeout_s=_START_TIMEOUT_S + 5,
                             stop_timeout_s=15):
            yield self


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
