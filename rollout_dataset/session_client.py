"""A Python client of the recording proxy's session API (docs/session-api.md), sync and async.

    from rollout_dataset.session_client import SessionClient

    with SessionClient("http://127.0.0.1:41719", token="...") as api:
        ...                                             # the harness runs against .../sessions/run1/v1
        batch = api.wait_settled("run1")                # its sequences once no call is in flight
        api.post_reward("run1", 1.0, {"passed": 3})
        api.seal("run1")

`AsyncSessionClient` has the same methods as coroutines. Both speak plain HTTP through httpx and
import nothing of the proxy, so a trainer process needs only this module and httpx. Every refusal
raises `rollout_dataset.errors.SessionApiError` with the API's status and error code.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from rollout_dataset.errors import SessionApiError

__all__ = ["SessionClient", "AsyncSessionClient", "proxy_root"]

#: seconds between two reads while waiting for a session's calls to settle.
POLL_S = 0.05


def proxy_root(url: str) -> str:
    """The proxy's root URL from any URL it printed or served (``/v1``, ``/sessions/<id>/v1`` stripped).

    Args:
        url: ``http://host:port``, ``http://host:port/v1`` or a session's base URL.

    Returns:
        ``http://host:port`` (with any path before ``/sessions`` or ``/v1`` kept).
    """
    url = url.rstrip("/")
    at = url.find("/sessions/")
    if at >= 0:
        return url[:at]
    for tail in ("/sessions", "/v1"):
        if url.endswith(tail):
            return url[:-len(tail)]
    return url


def _headers(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


def _answer(response: httpx.Response) -> dict[str, Any]:
    """The JSON body of a 2xx answer; a `SessionApiError` with the API's code for anything else."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code // 100 == 2 and isinstance(body, dict):
        return body
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        raise SessionApiError(response.status_code, str(error.get("code")), str(error.get("message")))
    raise SessionApiError(response.status_code, "unexpected_answer", response.text[:300])


def _settled(document: dict[str, Any]) -> bool:
    return int(document.get("calls_in_flight") or 0) == 0


class SessionClient:
    """The session API from synchronous code.

    Args:
        url: the proxy's URL (its root, its ``/v1`` base URL or a session's base URL).
        token: the session API's bearer token (None when the proxy needs none).
        timeout: seconds for each request.
        transport: an httpx transport (tests); None: httpx's own.
    """

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.root = proxy_root(url)
        self._client = httpx.Client(base_url=self.root, headers=_headers(token), timeout=timeout,
                                    transport=transport, trust_env=False)

    def _call(self, method: str, path: str, json: Any = None) -> dict[str, Any]:
        try:
            response = self._client.request(method, path, json=json)
        except httpx.HTTPError as exc:
            raise SessionApiError(0, "unreachable", f"{self.root}{path}: {type(exc).__name__}: {exc}") from exc
        return _answer(response)

    def sessions(self) -> list[dict[str, Any]]:
        """Every session of the proxy: ``[{"session", "state", "calls_in_flight"}, ...]``.

        Raises:
            SessionApiError: refused (401 without the right token, 404 when the API is off) or unreachable.
        """
        return list(self._call("GET", "/sessions")["sessions"])

    def session(self, session: str) -> dict[str, Any]:
        """A session's state, settled calls, findings and reward (``GET /sessions/{id}``).

        Args:
            session: the session id.

        Returns:
            The session document.

        Raises:
            SessionApiError: 404 ``unknown_session``, 400 ``invalid_session_id``, 401, or unreachable.
        """
        return self._call("GET", f"/sessions/{session}")

    def sequences(self, session: str) -> dict[str, Any]:
        """A session's sequences as the dataset's rows (``GET /sessions/{id}/sequences``).

        Args:
            session: the session id.

        Returns:
            The sequences document (``sequences``: rows with ``input_ids``, ``loss_mask``,
            ``logprobs``, ``role``, ``trainable``, ``finish_reasons``, ...; ``calls_in_flight``).

        Raises:
            SessionApiError: as `session`.
        """
        return self._call("GET", f"/sessions/{session}/sequences")

    def wait_settled(self, session: str, timeout: float = 60.0) -> dict[str, Any]:
        """The session's sequences once none of its calls is in flight.

        Args:
            session: the session id.
            timeout: seconds to wait.

        Returns:
            The sequences document with ``calls_in_flight`` 0.

        Raises:
            SessionApiError: as `session`.
            TimeoutError: calls were still in flight after `timeout` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            document = self.sequences(session)
            if _settled(document):
                return document
            if time.monotonic() > deadline:
                raise TimeoutError(f"session {session!r}: {document['calls_in_flight']} call(s) still in flight "
                                   f"after {timeout}s")
            time.sleep(POLL_S)

    def post_reward(self, session: str, reward: float, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
        """Record the session's reward (once, while it is open).

        Args:
            session: the session id.
            reward: a finite number.
            metadata: a JSON object kept with it.

        Returns:
            ``{"session", "reward", "reward_metadata"}``.

        Raises:
            SessionApiError: 400 ``invalid_reward``, 409 ``session_sealed`` / ``reward_exists``, 404, 413.
        """
        return self._call("POST", f"/sessions/{session}/reward", {"reward": reward, "metadata": metadata or {}})

    def seal(self, session: str) -> dict[str, Any]:
        """Seal the session: its calls and reward are final; calls to it are refused from now on.

        Args:
            session: the session id.

        Returns:
            ``{"session", "state": "sealed", "seal": {"records", "head_sha256", "sealed_at"}}``.

        Raises:
            SessionApiError: 409 ``call_in_flight`` / ``session_sealed``, 404, 400 ``default_session``.
        """
        return self._call("POST", f"/sessions/{session}/seal")

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def __enter__(self) -> "SessionClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncSessionClient:
    """The session API from asyncio code: `SessionClient`'s methods as coroutines.

    Args:
        url: the proxy's URL (its root, its ``/v1`` base URL or a session's base URL).
        token: the session API's bearer token (None when the proxy needs none).
        timeout: seconds for each request.
        transport: an httpx async transport (tests); None: httpx's own.
    """

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.root = proxy_root(url)
        self._client = httpx.AsyncClient(base_url=self.root, headers=_headers(token), timeout=timeout,
                                         transport=transport, trust_env=False)

    async def _call(self, method: str, path: str, json: Any = None) -> dict[str, Any]:
        try:
            response = await self._client.request(method, path, json=json)
        except httpx.HTTPError as exc:
            raise SessionApiError(0, "unreachable", f"{self.root}{path}: {type(exc).__name__}: {exc}") from exc
        return _answer(response)

    async def sessions(self) -> list[dict[str, Any]]:
        """Every session of the proxy (see `SessionClient.sessions`)."""
        return list((await self._call("GET", "/sessions"))["sessions"])

    async def session(self, session: str) -> dict[str, Any]:
        """A session's document (see `SessionClient.session`).

        Args:
            session: the session id.
        """
        return await self._call("GET", f"/sessions/{session}")

    async def sequences(self, session: str) -> dict[str, Any]:
        """A session's sequences (see `SessionClient.sequences`).

        Args:
            session: the session id.
        """
        return await self._call("GET", f"/sessions/{session}/sequences")

    async def wait_settled(self, session: str, timeout: float = 60.0) -> dict[str, Any]:
        """The session's sequences once none of its calls is in flight (see `SessionClient.wait_settled`).

        Args:
            session: the session id.
            timeout: seconds to wait.

        Raises:
            SessionApiError: as `session`.
            TimeoutError: calls were still in flight after `timeout` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            document = await self.sequences(session)
            if _settled(document):
                return document
            if time.monotonic() > deadline:
                raise TimeoutError(f"session {session!r}: {document['calls_in_flight']} call(s) still in flight "
                                   f"after {timeout}s")
            await asyncio.sleep(POLL_S)

    async def post_reward(self, session: str, reward: float,
                          metadata: dict[str, Any] | None = None) -> dict[str, Any]:
        """Record the session's reward (see `SessionClient.post_reward`).

        Args:
            session: the session id.
            reward: a finite number.
            metadata: a JSON object kept with it.
        """
        return await self._call("POST", f"/sessions/{session}/reward", {"reward": reward, "metadata": metadata or {}})

    async def seal(self, session: str) -> dict[str, Any]:
        """Seal the session (see `SessionClient.seal`).

        Args:
            session: the session id.
        """
        return await self._call("POST", f"/sessions/{session}/seal")

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def __aenter__(self) -> "AsyncSessionClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
