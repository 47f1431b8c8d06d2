"""The rewriter: a checked request turned into the request sent upstream.

A generation call gets its output limits fitted to the model's context (`proxy/context_fit.py`), the
token fields the proxy needs added (`rollout_dataset.proxy.tokens.prepare_request`) and, in on-policy
mode, its prompt built from the sampled ids (`proxy/on_policy_upstream.py`; a Responses call as the
chat request vLLM renders for it, `proxy.on_policy.responses_as_chat`); a Messages call becomes
the chat completion vLLM's Anthropic layer would build (`proxy/messages_capture.py`). The rewriter
writes what it changed into the call's `RequestPart` (`upstream_changes`, `effective`, ...) and
builds the `httpx.Request` for the relay.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from rollout_dataset.errors import InflightLimitError
from rollout_dataset.proxy.asgi_types import Scope, Send
from rollout_dataset.proxy.call import SESSION_HEADER, Call
from rollout_dataset.proxy.context_fit import CONTEXT_EXHAUSTED, ContextFitter
from rollout_dataset.proxy.error_answers import ErrorAnswerer
from rollout_dataset.proxy.inflight import InflightBound
from rollout_dataset.proxy.intake import Checked
from rollout_dataset.proxy.messages_capture import CHAT_ENDPOINT
from rollout_dataset.proxy.on_policy import responses_as_chat
from rollout_dataset.proxy.on_policy_upstream import OnPolicyMode
from rollout_dataset.proxy.redact import redact_url
from rollout_dataset.proxy.tokens import TokenRequest, prepare_request, sampling_params
from rollout_dataset.wire.anthropic_chat import IGNORED_FIELDS, ChatStreamToMessages, messages_to_chat
from rollout_dataset.wire.responses_chat import RESPONSES_ENDPOINT

__all__ = ["RequestRewriter", "Outgoing", "UpstreamUrls", "DROP_REQUEST", "build_upstream_request", "with_body"]

# Request headers never forwarded upstream (hop-by-hop, recomputed, or the proxy's own).
DROP_REQUEST = frozenset(
    {b"host", b"content-length", b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding",
     b"te", b"trailer", b"upgrade", b"accept-encoding", b"expect", SESSION_HEADER.encode()}
)


def build_upstream_request(method: str, url: httpx.URL, headers: list[tuple[bytes, bytes]], body: bytes,
                     extensions: dict[str, Any]) -> httpx.Request:
    """The request sent upstream: the body given whole, its Content-Length set here, the body read.

    The stream is given whole, so httpx skips re-deriving Host and Content-Length (set by the caller
    and here), and the body is read so that it is `request.content`, as httpx does for bytes content.

    Args:
        method: the HTTP method.
        url: the upstream URL.
        headers: the headers to send, Host included, without Content-Length.
        body: the body (may be empty: then no Content-Length is sent).
        extensions: httpx request extensions (the upstream timeouts).

    Returns:
        The request, its body read.
    """
    if body:
        headers = [*headers, (b"content-length", str(len(body)).encode())]
    request = httpx.Request(method, url, stream=httpx.ByteStream(body), headers=headers, extensions=extensions)
    request.read()
    return request


def with_body(request: httpx.Request, body: bytes) -> httpx.Request:
    """An upstream request sent again with another body (the same method, URL, headers and timeouts).

    Args:
        request: a request built by `build_upstream_request`.
        body: the new body.

    Returns:
        The new request, its body read and its Content-Length that of `body`.
    """
    headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
    return build_upstream_request(request.method, request.url, headers, body, request.extensions)


class Outgoing:
    """The request to send upstream, and what the proxy asked for in it (None: forwarded as it came).

    Args:
        request: the upstream request, its body read.
        token_req: the token fields added to a generation call (None for any other call).
        shown: the request's URL as errors and logs may show it (`redact_url`).
    """

    __slots__ = ("request", "token_req", "shown")

    def __init__(self, request: httpx.Request, token_req: TokenRequest | None, shown: str) -> None:
        self.request = request
        self.token_req = token_req
        self.shown = shown


class UpstreamUrls:
    """Upstream URLs, their Host header and their redacted text, made once per (endpoint, query) (a
    visible per-call cost: parsing a URL, or printing one, takes microseconds).

    Args:
        root: the model server's root URL (no trailing ``/v1`` or ``/``).
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self._known: dict[tuple[str, bytes], tuple[httpx.URL, bytes, str]] = {}

    def get(self, endpoint: str, query: bytes) -> tuple[httpx.URL, bytes, str]:
        """The URL of an endpoint (with the harness's query string), its Host header value, and the URL
        as errors and logs may show it (`redact_url`: no credential of the harness's query).

        Args:
            endpoint: the path, e.g. ``/v1/chat/completions``.
            query: the raw query string (may be empty).

        Returns:
            ``(url, host, shown)``.
        """
        key = (endpoint, query)
        known = self._known.get(key)
        if known is None:
            text = self.root + endpoint + ("?" + query.decode("latin-1") if query else "")
            url = httpx.URL(text)
            known = (url, url.netloc, redact_url(str(url)))
            if len(self._known) < 1024:
                self._known[key] = known
        return known


class RequestRewriter:
    """The rewriting stage.

    Args:
        urls: the upstream's URLs.
        timeout_extensions: httpx request extensions carrying the upstream timeouts.
        fitter: context fitting (None: no limit is changed).
        on_policy: on-policy mode (None: off).
        answers: the error answerer (a context with no room left is answered 400).
        bound: the in-flight bound the answers of the server calls made here are counted against.
    """

    def __init__(self, urls: UpstreamUrls, timeout_extensions: dict[str, Any], fitter: ContextFitter | None,
                 on_policy: OnPolicyMode | None, answers: ErrorAnswerer, bound: InflightBound) -> None:
        self.urls = urls
        self.extensions = timeout_extensions
        self.fitter = fitter
        self.on_policy = on_policy
        self.answers = answers
        self.bound = bound

    async def rewrite(self, call: Call, scope: Scope, checked: Checked, send: Send) -> Outgoing | None:
        """The upstream request for a checked call.

        The answers of the server calls context fitting and on-policy mode make for it
        (``/tokenize``, ...) are counted against the in-flight bound as the call's own bytes.

        Args:
            call: the call.
            scope: the ASGI HTTP scope (headers, query string).
            checked: the request as the reader checked it.
            send: the ASGI send callable.

        Returns:
            What to send, or None when the call was answered (no room left in the context, or a
            server's answer past the in-flight limit: 503).
        """
        if self.fitter is None and self.on_policy is None:  # no server call is made here: nothing to count
            return await self._rewrite(call, scope, checked, send)
        with self.bound.counting(call):
            try:
                return await self._rewrite(call, scope, checked, send)
            except InflightLimitError as exc:
                await self.answers.reply_error(call, send, 503, "proxy_overloaded", str(exc))
                return None

    async def _rewrite(self, call: Call, scope: Scope, checked: Checked, send: Send) -> Outgoing | None:
        raw_headers: list[tuple[bytes, bytes]] = scope["headers"]
        endpoint = call.endpoint
        query: bytes = scope.get("query_string") or b""
        body = checked.body
        kind = checked.kind
        parsed = checked.parsed
        token_req: TokenRequest | None = None
        if kind == "messages":
            assert parsed is not None
            prepared = await self._messages_as_chat(call, raw_headers, parsed, send)
            if prepared is None:
                return None
            parsed, token_req = prepared
            kind, endpoint, query, body = "chat", CHAT_ENDPOINT, b"", token_req.body
        elif kind is not None:
            assert parsed is not None
            token_req = await self._with_token_fields(call, kind, raw_headers, parsed, body, send)
            if token_req is None:
                return None
            body = token_req.body
        up_headers = [(k, v) for k, v in raw_headers if k not in DROP_REQUEST]
        up_headers.append((b"accept-encoding", b"identity"))
        if kind == "chat" and self.on_policy is not None:  # Messages calls too, as the chat sent upstream
            assert parsed is not None
            body = await self._on_policy_body(call, parsed, body, up_headers)
        elif kind == "responses" and self.on_policy is not None:  # as the chat request vLLM renders for it
            assert parsed is not None and token_req is not None
            view = responses_as_chat({**parsed, **token_req.changes})
            body = await self._on_policy_body(call, view, body, up_headers, RESPONSES_ENDPOINT)
        url, host, shown = self.urls.get(endpoint, query)
        up_headers.append((b"host", host))
        request = build_upstream_request(call.method, url, up_headers, body or b"", self.extensions)
        if call.asked.translator is not None:  # kept in case the upstream has no chat endpoint (not vLLM)
            call.asked.native_request = self._native_messages_request(call, scope, checked.body)
        return Outgoing(request, token_req, shown)

    async def _with_token_fields(self, call: Call, kind: str, raw_headers: list[tuple[bytes, bytes]],
                                 parsed: dict[str, Any], body: bytes, send: Send) -> TokenRequest | None:
        """A generation call's limits fitted and token fields added (None: answered, no room left)."""
        asked = call.asked
        limits: dict[str, int] = {}
        if self.fitter is not None:
            plan = await self.fitter.plan(kind, parsed, raw_headers)
            call.notes.extend(plan.notes)
            if plan.exhausted:
                asked.requested = sampling_params(parsed)
                asked.effective = dict(asked.requested)
                await self.answers.reply_error(call, send, 400, CONTEXT_EXHAUSTED, plan.notes[-1])
                return None
            limits = plan.changes
        token_req = prepare_request(kind, parsed, body, limits)
        asked.upstream_changes = token_req.changes
        asked.requested = sampling_params(parsed)
        asked.effective = {**asked.requested, **token_req.changes}
        return token_req

    def _native_messages_request(self, call: Call, scope: Scope, body: bytes) -> httpx.Request:
        """The Messages request as the harness sent it, to forward natively (recorded at level `text`)."""
        url, host, _ = self.urls.get(call.endpoint, scope.get("query_string") or b"")
        headers = [(k, v) for k, v in scope["headers"] if k not in DROP_REQUEST]
        headers += [(b"accept-encoding", b"identity"), (b"host", host)]
        return build_upstream_request(call.method, url, headers, body, self.extensions)

    async def _messages_as_chat(self, call: Call, raw_headers: list[tuple[bytes, bytes]], parsed: dict[str, Any],
                                send: Send) -> tuple[dict[str, Any], TokenRequest] | None:
        """A `/v1/messages` call: the chat completion vLLM's Anthropic layer would build, with token fields.

        Returns:
            The chat body and its `TokenRequest`, or None when the call was answered (full context).
        """
        asked = call.asked
        chat = messages_to_chat(parsed)
        limits: dict[str, int] = {}
        if self.fitter is not None:
            plan = await self.fitter.plan("chat", chat, raw_headers)
            call.notes.extend(plan.notes)
            if plan.exhausted:
                asked.effective = dict(asked.requested)
                await self.answers.reply_error(call, send, 400, CONTEXT_EXHAUSTED, plan.notes[-1])
                return None
            limits = plan.changes
            if "max_tokens" in limits:
                limits["max_completion_tokens"] = limits["max_tokens"]
        encoded = json.dumps(chat, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
        token_req = prepare_request("chat", chat, encoded, limits)
        ignored = [key for key in IGNORED_FIELDS if key in parsed]
        asked.upstream_changes = {"endpoint": CHAT_ENDPOINT, **token_req.changes}
        if ignored:  # accepted and ignored by vLLM: kept in the record's request, not sent
            asked.upstream_changes["not_sent"] = ignored
        asked.upstream_request = {**chat, **token_req.changes}
        asked.effective = {**sampling_params(chat), **token_req.changes}
        asked.translator = ChatStreamToMessages() if asked.stream else True
        return chat, token_req

    async def _on_policy_body(self, call: Call, parsed: dict[str, Any], body: bytes,
                              headers: list[tuple[bytes, bytes]], endpoint: str = CHAT_ENDPOINT) -> bytes:
        """On-policy mode: the body to send (with the proxy's prompt ids when it built them).

        Args:
            call: the call.
            parsed: the request as a chat request (a Responses call: `responses_as_chat`).
            body: the upstream body so far.
            headers: headers for the server.
            endpoint: the call's endpoint.

        Returns:
            The body, with ``kv_transfer_params.prompt_token_ids`` when the proxy built the prompt.
        """
        assert self.on_policy is not None
        call.asked.on_policy = prepared = await self.on_policy.prepare(call.session, parsed, body, headers, endpoint)
        if prepared.target is not None:
            call.asked.upstream_changes = {**call.asked.upstream_changes,
                                           "kv_transfer_params": {"prompt_token_ids_count": len(prepared.target)}}
        return prepared.body
