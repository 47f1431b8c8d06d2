"""The upstream transport as the environment asks: proxies and CA certificates, exactly as httpx's ``trust_env``.

Every HTTP client a user knows (curl, requests, httpx and so the openai SDK) honours these variables;
the recording proxy does too, by asking httpx itself rather than re-implementing the rules:

| variable | effect |
| --- | --- |
| ``HTTP_PROXY`` / ``http_proxy`` | forward proxy for ``http://`` upstreams |
| ``HTTPS_PROXY`` / ``https_proxy`` | forward proxy for ``https://`` upstreams (a CONNECT tunnel, TLS end to end) |
| ``ALL_PROXY`` / ``all_proxy`` | forward proxy for both |
| ``NO_PROXY`` / ``no_proxy`` | hosts reached directly (``*``, ``host``, ``.domain``, ``10.0.0.1``, ``::1``, ``localhost``) |
| ``SSL_CERT_FILE`` | the CA bundle that verifies an https upstream (else ``SSL_CERT_DIR``, else certifi's) |
| ``SSL_CERT_DIR`` | a folder of CA certificates (``c_rehash`` form) |

How: an ``httpx.AsyncClient(trust_env=True)`` is built only to read its proxy mounts (httpx's own
``get_environment_proxies`` and URL patterns, NO_PROXY included) and asked which transport it would
use for the upstream URL. Direct: the pooled httptools transport (`rollout_dataset.proxy.transport`)
with httpx's SSL context (``httpx.create_ssl_context``: SSL_CERT_FILE/SSL_CERT_DIR). Through a
proxy: httpx's own transport with that proxy (absolute-form requests for http, CONNECT tunnelling
for https, ``Proxy-Authorization`` from ``user:pass@`` in the proxy URL), so nothing here parses
proxy variables.

The capture's own calls of the upstream (``/v1/models``, ``/tokenize``, ``/detokenize``: `UpstreamTarget.request`)
go the same way (`direct_call_transport`).

``trust_env=False`` (``--no-trust-env`` on ``proxy``, ``capture`` and ``batch``) ignores all of them:
direct connections, certifi's CA bundle, as ``httpx.AsyncClient(trust_env=False)``. A capture's own
local backend (no ``--base-url``) is always reached directly.
"""

from __future__ import annotations

import logging
import ssl

import httpx

from rollout_dataset.proxy.redact import redact_url
from rollout_dataset.proxy.transport import UpstreamTransport

__all__ = ["upstream_transport", "direct_call_transport", "environment_proxy", "upstream_ssl_context"]

log = logging.getLogger(__name__)


def upstream_ssl_context(trust_env: bool = True) -> ssl.SSLContext:
    """The TLS context that verifies an https upstream, as httpx builds it.

    Args:
        trust_env: honour ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``.

    Returns:
        httpx's context: the CA file or folder the environment names, else certifi's bundle.
    """
    return httpx.create_ssl_context(verify=True, trust_env=trust_env)


def _route(url: str, limits: httpx.Limits, context: ssl.SSLContext) -> tuple[httpx.AsyncBaseTransport | None, str | None]:
    """httpx's transport for `url` under ``trust_env`` when it goes through a proxy, and that proxy's URL
    (redacted); ``(None, None)`` when httpx would connect directly."""
    from httpx._utils import get_environment_proxies  # the table httpx's client mounts (private, stable since 0.18)

    client = httpx.AsyncClient(trust_env=True, limits=limits, verify=context)
    chosen = client._transport_for_url(httpx.URL(url))  # httpx's own URL patterns, NO_PROXY included
    if chosen is client._transport:
        return None, None
    proxies = get_environment_proxies()
    proxy_url = next((proxies.get(pattern.pattern) for pattern, mounted in client._mounts.items()
                      if mounted is chosen), None)
    return chosen, redact_url(proxy_url) or "a proxy of the environment"


def environment_proxy(url: str) -> str | None:
    """The forward proxy httpx (``trust_env=True``) would use for `url`, if any.

    Args:
        url: the upstream URL.

    Returns:
        The proxy URL (redacted: no ``user:pass``), or None when `url` is reached directly (no proxy
        variable for its scheme, or NO_PROXY names its host).
    """
    return _route(url, httpx.Limits(), upstream_ssl_context(True))[1]


class _TitleCaseHeaders(httpx.AsyncBaseTransport):
    """Send header names title-cased (``Content-Length``), as curl and requests do, through a forward proxy.

    Header names are case-insensitive, but not every forward proxy matches them so: proxy.py 2.4
    adds its own ``Content-Length`` beside a lowercase ``content-length``, and the model server then
    refuses the duplicate (``400 Invalid HTTP request``). The direct transport writes its own head.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Forward `request` with its header names title-cased.

        Args:
            request: the request.

        Returns:
            The inner transport's response.
        """
        request.headers = httpx.Headers([(name.decode("latin-1").title().encode("latin-1"), value)
                                         for name, value in request.headers.raw])
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self.inner.aclose()


def upstream_transport(upstream_root: str, limits: httpx.Limits, *, trust_env: bool = True) -> httpx.AsyncBaseTransport:
    """The transport of the proxy's upstream calls.

    Args:
        upstream_root: the upstream's root URL (``http(s)://host:port``).
        limits: the connection pool's limits.
        trust_env: honour the proxy and CA variables of the environment (see the module docstring).

    Returns:
        The pooled httptools transport for a direct connection, or httpx's own transport through
        the environment's proxy for this URL.
    """
    https = upstream_root.startswith("https:")
    if trust_env:
        proxied, proxy_url = _route(upstream_root, limits, upstream_ssl_context(True))
        if proxied is not None:
            log.info("upstream %s through the proxy %s (from the environment; --no-trust-env ignores it)",
                     redact_url(upstream_root), proxy_url)
            return _TitleCaseHeaders(proxied)
    context = upstream_ssl_context(trust_env) if https else None  # no certificate loading for plain http
    return UpstreamTransport(limits, verify=https, ssl_context=context)


def direct_call_transport(url: str, *, trust_env: bool = True) -> httpx.BaseTransport:
    """A synchronous transport for one direct call of the upstream (``GET /v1/models``, ``POST /tokenize``).

    Args:
        url: the URL to call.
        trust_env: honour the proxy and CA variables of the environment, as `upstream_transport`.

    Returns:
        httpx's transport through the environment's proxy for `url`, or a plain ``httpx.HTTPTransport``
        (httpx's SSL context); use it as a context manager.
    """
    if trust_env:
        client = httpx.Client(trust_env=True, verify=upstream_ssl_context(True))
        chosen = client._transport_for_url(httpx.URL(url))  # the same pattern match as the async side
        if chosen is not client._transport:
            return chosen
    return httpx.HTTPTransport(verify=upstream_ssl_context(trust_env))
