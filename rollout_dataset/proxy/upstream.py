"""Where the proxy sends calls and with which credentials: the upstream URL taken apart.

The upstream URL given to the proxy (``--upstream``, ``capture --base-url``, `CaptureProxy(upstream=)`)
may carry credentials. They are taken out of the URL once, here, and only ever travel as headers
and query parameters of the forwarded requests:

- userinfo ``user:pass@`` (a colon present) becomes ``Authorization: Basic base64(user:pass)``;
  a userinfo without a colon, ``token@``, becomes ``Authorization: Bearer token`` (the form
  OpenAI-compatible servers such as vLLM ``--api-key`` check). Both are percent-decoded.
- an API key given to the proxy (``api_key=``, `OPENAI_API_KEY`) becomes
  ``Authorization: Bearer KEY``; a URL with userinfo and an API key at once is refused (which one
  should win is not guessable).
- query parameters of the upstream URL (``?api_key=...&api-version=...``) are added to every
  forwarded request.

When the proxy holds credentials it replaces whatever ``Authorization`` the harness sent (the
harness only ever has a dummy key). The URL shown in logs and errors is `redact_url` of it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, unquote_plus, urlsplit, urlunsplit

import httpx

from rollout_dataset.proxy.redact import REDACTED, is_credential_name, redact_url, redact_urls_in_text

__all__ = ["UpstreamTarget", "parse_upstream", "AuthenticatingTransport"]


@dataclass(frozen=True, repr=False)
class UpstreamTarget:
    """An upstream URL taken apart.

    Args:
        root: the server root without credentials, query or trailing ``/v1`` (``http://h:8000``).
        display: the URL as it may be printed or written (`redact_url`).
        authorization: the ``Authorization`` header value to send, or None.
        query: the raw query string to add to every forwarded request (may hold a key), or "".
        secrets: the credential values taken from the URL and the key (to scrub from messages).
        api_key: the API key in use (sent as Bearer), or None (none given, or the URL's userinfo is used).
        trust_env: direct calls (`request`) honour HTTP(S)_PROXY / NO_PROXY / SSL_CERT_FILE as httpx
            does (`rollout_dataset.proxy.trust_env`); False ignores them.
    """

    root: str
    display: str
    authorization: str | None = None
    query: str = ""
    secrets: tuple[str, ...] = field(default=())
    api_key: str | None = None
    trust_env: bool = True

    def __repr__(self) -> str:  # never the credentials
        return f"UpstreamTarget({self.display!r})"

    def headers(self) -> dict[str, str]:
        """The headers to send with direct calls to the upstream (e.g. ``GET /v1/models``).

        Returns:
            ``{"Authorization": ...}`` when the target holds credentials, else ``{}``.
        """
        return {"Authorization": self.authorization} if self.authorization else {}

    def url(self, endpoint: str) -> str:
        """The full URL of an endpoint, credentials in the query included (never print it).

        Args:
            endpoint: e.g. ``/v1/models``.

        Returns:
            ``root + endpoint`` plus the upstream's own query string.
        """
        return self.root + endpoint + ("?" + self.query if self.query else "")

    def shown(self, endpoint: str) -> str:
        """The URL of an endpoint as it may be printed (redacted).

        Args:
            endpoint: e.g. ``/v1/chat/completions``.

        Returns:
            `redact_url` of `url(endpoint)`.
        """
        return redact_url(self.url(endpoint)) or ""

    def get(self, endpoint: str, timeout: float = 30.0) -> httpx.Response:
        """A direct ``GET`` of an endpoint (``/v1/models``, ``/version``); see `request`."""
        return self.request("GET", endpoint, timeout=timeout)

    def request(self, method: str, endpoint: str, *, json: Any = None, timeout: float = 30.0) -> httpx.Response:
        """A direct call of an endpoint (``GET /v1/models``, ``POST /detokenize``), credentials included.

        Sent through a bare transport, not an `httpx.Client`: a client logs every URL it requests,
        and the upstream's query may hold a key.

        Args:
            method: ``GET`` or ``POST``.
            endpoint: e.g. ``/v1/models``.
            json: a JSON body to send.
            timeout: seconds for connecting and reading.

        Returns:
            The response, body read.

        Raises:
            httpx.HTTPError: the server is unreachable (the message may name the URL: `scrub` it).
        """
        request = httpx.Request(method, self.url(endpoint), headers=self.headers(), json=json,
                                extensions={"timeout": httpx.Timeout(timeout).as_dict()})
        from rollout_dataset.proxy.trust_env import direct_call_transport

        with direct_call_transport(str(request.url), trust_env=self.trust_env) as transport:
            response = transport.handle_request(request)
            response.read()
        return response

    def scrub(self, text: str) -> str:
        """A message with this target's secrets and any URL credentials removed.

        Args:
            text: e.g. an exception message.

        Returns:
            The text, safe to log or record.
        """
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return redact_urls_in_text(text)


def parse_upstream(upstream: str, api_key: str | None = None) -> UpstreamTarget:
    """Take an upstream base URL apart into root, credentials and query.

    Args:
        upstream: ``http(s)://[userinfo@]host[:port][/path][/v1][?query]``.
        api_key: a key to send as ``Authorization: Bearer``; None or "" sends none.

    Returns:
        The `UpstreamTarget`.

    Raises:
        ValueError: not an http(s) URL with a host, or userinfo and `api_key` both given (the
            message shows the URL redacted).
    """
    shown = redact_url(upstream) or ""
    try:
        parts = urlsplit(upstream)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise ValueError(f"upstream URL {shown!r} must look like http://HOST:PORT/v1 (or the server root)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"upstream URL {shown!r} must look like http://HOST:PORT/v1 (or the server root)")
    userinfo, at, hostport = parts.netloc.rpartition("@")
    authorization = None
    secrets: list[str] = []
    if at and userinfo:
        if api_key:
            raise ValueError(f"upstream URL {shown!r} carries credentials (user:pass@) and an API key was given "
                             "too: give one of them")
        user, colon, password = userinfo.partition(":")
        if colon:
            plain = f"{unquote(user)}:{unquote(password)}"
            authorization = "Basic " + base64.b64encode(plain.encode("utf-8")).decode("ascii")
            secrets += [s for s in (unquote(password), password) if s]
        else:
            authorization = f"Bearer {unquote(user)}"
            secrets += [s for s in (unquote(user), user) if s]
    elif api_key:
        authorization = f"Bearer {api_key}"
        secrets.append(api_key)
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    root = urlunsplit((parts.scheme, hostport, path, "", ""))
    if parts.query:
        for name, _, value in (pair.partition("=") for pair in parts.query.split("&")):
            if value and is_credential_name(unquote_plus(name)):
                secrets += [value, unquote_plus(value)]
    if authorization:
        secrets.append(authorization.split(" ", 1)[1])
    unique = sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True)
    return UpstreamTarget(root=root, display=shown, authorization=authorization, query=parts.query,
                          secrets=tuple(unique), api_key=api_key or None if not (at and userinfo) else None)


class AuthenticatingTransport(httpx.AsyncBaseTransport):
    """Adds the upstream's credentials and query to every forwarded request.

    Args:
        inner: the transport that sends the request.
        target: the parsed upstream.
        forward_client_auth: when the target holds no credentials, pass the harness's own
            ``Authorization`` header through (True, the standalone proxy) or drop it (False: the
            harness holds a dummy key that the upstream must not see).
    """

    def __init__(self, inner: httpx.AsyncBaseTransport, target: UpstreamTarget, *,
                 forward_client_auth: bool = True) -> None:
        self.inner = inner
        self.target = target
        self.forward_client_auth = forward_client_auth
        self._merged: dict[str, httpx.URL] = {}

    def _with_query(self, url: httpx.URL) -> httpx.URL:
        """The URL with the upstream's query appended (parsed once per URL: parsing costs ~50 us)."""
        key = str(url)
        merged = self._merged.get(key)
        if merged is None:
            query = url.query
            merged = url.copy_with(query=(query + b"&" if query else b"") + self.target.query.encode("ascii", "replace"))
            if len(self._merged) < 1024:
                self._merged[key] = merged
        return merged

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send one request with the upstream's credentials; failures name the URL redacted.

        Args:
            request: the request the proxy built (harness headers, upstream root URL).

        Returns:
            The inner transport's response.

        Raises:
            httpx.TransportError: as the inner transport, with any credential removed from the message.
        """
        target = self.target
        if target.authorization:
            request.headers["Authorization"] = target.authorization
        elif not self.forward_client_auth:
            request.headers.pop("Authorization", None)
        if target.query:
            request.url = self._with_query(request.url)
        try:
            return await self.inner.handle_async_request(request)
        except httpx.HTTPError as exc:
            message = str(exc)
            clean = target.scrub(message)
            if clean == message:
                raise
            try:
                scrubbed = type(exc)(clean, request=request)  # type: ignore[call-arg]  # most httpx errors take it
            except TypeError:  # an httpx error that needs more than a message: a plain transport error
                scrubbed = httpx.TransportError(clean, request=request)
            raise scrubbed from None

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self.inner.aclose()
