"""Context fitting: lower a call's output limit so prompt plus output fit the model's context.

vLLM 0.32 refuses (HTTP 400, ``max_tokens=32000 cannot be greater than max_model_len=4096``) any
request whose output limit exceeds `max_model_len`, and refuses a prompt that fills the context
(``parameter=input_tokens``); harnesses such as opencode always ask for 32000 output tokens. The
proxy can therefore, per call:

- cap the output limit at a static `max_tokens_cap` (as TRL's opencode example does), and
- with `fit_context`, learn `max_model_len` from the server's `/v1/models` (once per model) and
  the prompt's length from the server's root `/tokenize` (the chat endpoint's exact render, with
  the request's messages and tools; a Responses call's input items as the chat messages vLLM renders),
  then lower the output limit to what is left of the context.

Rules (`plan_output_limits`, a pure function):

1. the output-limit fields are `max_tokens` and `max_completion_tokens` (chat),
   `max_tokens` (completions) and `max_output_tokens` (responses); every one present is fitted;
2. the cap lowers any present limit above it; for chat and responses a missing limit is set to the
   cap (the server's default is "the whole rest of the context");
3. with the prompt length known, any limit above ``max_model_len - prompt_tokens`` is lowered to
   it; with only `max_model_len` known (a server without `/tokenize`), to `max_model_len` (the
   server clamps the rest itself);
4. a prompt that leaves no room at all (``prompt_tokens >= max_model_len``) is *exhausted*: the
   proxy does not call the server and answers HTTP 400 with error type ``context_exhausted``;
   the capture ends the rollout with stop reason ``context_exhausted``.

Limits are only ever lowered, never raised. Every change goes into the call's `upstream_changes`
and effective sampling parameters; why, into its notes. When the server does not report its
`max_model_len`, the call goes out with the cap alone and a note says so.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from rollout_dataset.wire.responses_chat import input_to_messages, tools_to_chat
from rollout_dataset.proxy.jsoncodec import dumps_standard

__all__ = [
    "CONTEXT_EXHAUSTED",
    "OUTPUT_LIMIT_FIELDS",
    "ContextPolicy",
    "FitPlan",
    "ContextFitter",
    "exhausted_call",
    "plan_output_limits",
    "prompt_length_of",
    "summarize_fitting",
    "tokenize_body",
]

log = logging.getLogger(__name__)

#: the error type (and rollout stop reason) of a prompt that leaves no room for any output
CONTEXT_EXHAUSTED = "context_exhausted"

#: endpoint kind -> the request fields that limit the output, the first being the one to add
OUTPUT_LIMIT_FIELDS: dict[str, tuple[str, ...]] = {
    "chat": ("max_tokens", "max_completion_tokens"),
    "completions": ("max_tokens",),
    "responses": ("max_output_tokens",),
}
# kinds whose server default for a missing limit is "the rest of the context" (completions: 16)
_ADD_WHEN_MISSING = frozenset({"chat", "responses"})


@dataclass(frozen=True)
class ContextPolicy:
    """How the proxy fits output limits.

    Args:
        max_tokens_cap: a static upper bound on every call's output limit; None for no cap.
        fit_context: lower the output limit to what is left of the model's context.

    Raises:
        ValueError: a cap below 1.
    """

    max_tokens_cap: int | None = None
    fit_context: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens_cap is not None and (isinstance(self.max_tokens_cap, bool) or self.max_tokens_cap < 1):
            raise ValueError(f"max_tokens_cap must be an integer >= 1, got {self.max_tokens_cap!r}")

    @property
    def active(self) -> bool:
        """Whether the policy can change anything."""
        return self.fit_context or self.max_tokens_cap is not None

    def public_dict(self) -> dict[str, Any]:
        """Returns: the policy as JSON (for task.json and summaries)."""
        return {"max_tokens_cap": self.max_tokens_cap, "fit_context": self.fit_context}


@dataclass
class FitPlan:
    """What fitting decided for one call.

    Attributes:
        changes: output-limit field -> the value to send upstream (only lowered or added fields).
        exhausted: the prompt leaves no room for output: do not call the server.
        max_model_len: the model's context length, when known.
        prompt_tokens: the prompt's length in tokens, when known.
        notes: why each change was made (for the record's notes).
    """

    changes: dict[str, int] = field(default_factory=dict)
    exhausted: bool = False
    max_model_len: int | None = None
    prompt_tokens: int | None = None
    notes: list[str] = field(default_factory=list)


def _limit_value(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def plan_output_limits(kind: str, body: dict[str, Any], policy: ContextPolicy, max_model_len: int | None = None,
                       prompt_tokens: int | None = None) -> FitPlan:
    """Decide the output limits of one call (pure; see the module docstring for the rules).

    Args:
        kind: ``"chat"``, ``"completions"`` or ``"responses"``.
        body: the harness's request body.
        policy: the cap and whether to fit the context.
        max_model_len: the model's context length (None: unknown).
        prompt_tokens: the prompt's length (None: unknown).

    Returns:
        The plan: the fields to change, or `exhausted`.
    """
    plan = FitPlan(max_model_len=max_model_len, prompt_tokens=prompt_tokens)
    fields = OUTPUT_LIMIT_FIELDS.get(kind, ())
    if not fields or not policy.active:
        return plan
    room = None
    if policy.fit_context and max_model_len is not None:
        room = max_model_len if prompt_tokens is None else max_model_len - prompt_tokens
        if room < 1:
            plan.exhausted = True
            plan.notes.append(f"context exhausted: the prompt has {prompt_tokens} tokens and the model's context "
                              f"is {max_model_len} (max_model_len): no room for output; the server was not called")
            return plan
    present = {name: _limit_value(body.get(name)) for name in fields if body.get(name) is not None}
    if not present and kind in _ADD_WHEN_MISSING and policy.max_tokens_cap is not None:
        present = {fields[0]: None}
    for name, value in present.items():
        new = value
        reasons = []
        if policy.max_tokens_cap is not None and (new is None or new > policy.max_tokens_cap):
            new = policy.max_tokens_cap
            reasons.append(f"max_tokens_cap {policy.max_tokens_cap}")
        if room is not None and new is not None and new > room:
            new = room
            reasons.append(f"max_model_len {max_model_len}" if prompt_tokens is None else
                           f"max_model_len {max_model_len} - prompt {prompt_tokens} tokens = {room}")
        if new is not None and new != value:
            plan.changes[name] = new
            asked = "not set" if value is None else str(value)
            plan.notes.append(f"{name} {asked} -> {new} ({'; '.join(reasons)})")
    return plan


def tokenize_body(kind: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """The `/tokenize` request that measures a call's prompt as the server will render it.

    Args:
        kind: ``"chat"``, ``"completions"`` or ``"responses"`` (its input items as the chat messages
            vLLM renders them as).
        body: the harness's request body.

    Returns:
        The JSON body for the server's root `/tokenize`, or None when the prompt cannot be
        measured there (a completions prompt of token ids is measured by `prompt_length_of`).
    """
    model = body.get("model")
    if kind == "chat" and isinstance(body.get("messages"), list):
        out: dict[str, Any] = {"messages": body["messages"], "add_generation_prompt": True}
        for key in ("tools", "chat_template_kwargs", "chat_template", "add_generation_prompt",
                    "continue_final_message", "add_special_tokens"):
            if body.get(key) is not None:
                out[key] = body[key]
        if model is not None:
            out["model"] = model
        return out
    if kind == "responses":  # vLLM renders a Responses prompt as these chat messages (rollout_dataset.wire.responses_chat)
        out = {"messages": input_to_messages(body), "add_generation_prompt": True}
        tools = tools_to_chat(body.get("tools"))
        if tools:
            out["tools"] = tools
        if model is not None:
            out["model"] = model
        return out
    if kind == "completions" and isinstance(body.get("prompt"), str):
        out = {"prompt": body["prompt"]}
        if model is not None:
            out["model"] = model
        return out
    return None


def prompt_length_of(kind: str, body: dict[str, Any]) -> int | None:
    """A prompt's length known without asking the server (a completions prompt given as token ids).

    Args:
        kind: the endpoint kind.
        body: the request body.

    Returns:
        The number of prompt tokens, or None.
    """
    prompt = body.get("prompt")
    if kind == "completions" and isinstance(prompt, list) and prompt and all(
            isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return len(prompt)
    return None


class ContextFitter:
    """Asks the model server what fitting needs: `max_model_len` (cached per model) and prompt lengths.

    Args:
        upstream_root: the server's root URL (no ``/v1``).
        transport: the proxy's upstream transport.
        policy: the cap and whether to fit.
        timeout: seconds for each of these small requests.
        read_body: reads an answer's whole body (the proxy's counts it against the in-flight bound,
            `rollout_dataset.proxy.inflight.read_passing`).
    """

    def __init__(self, upstream_root: str, transport: httpx.AsyncBaseTransport, policy: ContextPolicy,
                 timeout: float = 60.0,
                 read_body: Callable[[httpx.Response], Awaitable[bytes]] = httpx.Response.aread) -> None:
        self.upstream_root = upstream_root.rstrip("/")
        self.transport = transport
        self.policy = policy
        self.read_body = read_body
        self._extensions = {"timeout": httpx.Timeout(timeout).as_dict()}
        self._lengths: dict[str, int | None] = {}
        self._lock = asyncio.Lock()

    async def _request(self, method: str, path: str, headers: list[tuple[bytes, bytes]],
                       body: dict[str, Any] | None = None) -> tuple[int, Any]:
        content = dumps_standard(body) if body is not None else None  # a lone surrogate stays an escape
        hdrs = list(headers) + [(b"accept-encoding", b"identity")]
        if content is not None:
            hdrs.append((b"content-type", b"application/json"))
        request = httpx.Request(method, self.upstream_root + path, content=content, headers=hdrs,
                                extensions=self._extensions)
        response = await self.transport.handle_async_request(request)
        try:
            data = await self.read_body(response)
        finally:
            await response.aclose()
        try:
            return response.status_code, json.loads(data) if data else None
        except ValueError:
            return response.status_code, None

    async def max_model_len(self, model: Any, headers: list[tuple[bytes, bytes]]) -> int | None:
        """The context length `/v1/models` reports for `model` (its first model when unnamed), cached.

        Args:
            model: the request's model name.
            headers: authorization headers to send along.

        Returns:
            The length, or None when the server does not say.
        """
        key = model if isinstance(model, str) else ""
        if key in self._lengths:
            return self._lengths[key]
        async with self._lock:
            if key in self._lengths:
                return self._lengths[key]
            length = None
            try:
                status, data = await self._request("GET", "/v1/models", headers)
            except httpx.HTTPError as exc:
                log.warning("context fitting: GET %s/v1/models failed: %s", self.upstream_root, exc)
                return None  # not cached: try again on the next call
            cards = data.get("data") if isinstance(data, dict) else None
            if status < 400 and isinstance(cards, list):
                for card in cards:
                    if isinstance(card, dict) and (not key or card.get("id") == key):
                        length = _limit_value(card.get("max_model_len"))
                        break
            self._lengths[key] = length
            return length

    async def prompt_tokens(self, kind: str, body: dict[str, Any],
                            headers: list[tuple[bytes, bytes]]) -> tuple[int | None, str | None]:
        """The prompt's length as the server renders it.

        Args:
            kind: the endpoint kind.
            body: the harness's request body.
            headers: authorization headers to send along.

        Returns:
            (length, None), or (None, why it is unknown).
        """
        known = prompt_length_of(kind, body)
        if known is not None:
            return known, None
        request = tokenize_body(kind, body)
        if request is None:
            return None, f"the server's /tokenize cannot measure the prompt of a {kind} call"
        try:
            status, data = await self._request("POST", "/tokenize", headers, request)
        except httpx.HTTPError as exc:
            return None, f"POST {self.upstream_root}/tokenize failed: {type(exc).__name__}: {exc}"
        count = data.get("count") if isinstance(data, dict) else None
        if status >= 400 or _limit_value(count) is None:
            return None, f"POST {self.upstream_root}/tokenize answered HTTP {status} without a token count"
        return count, None

    async def plan(self, kind: str, body: dict[str, Any], headers: list[tuple[bytes, bytes]]) -> FitPlan:
        """Fit one call: learn what is needed from the server, then `plan_output_limits`.

        Args:
            kind: the endpoint kind.
            body: the harness's request body.
            headers: the harness's request headers (only authorization ones are sent along).

        Returns:
            The plan (never raises for a server that cannot answer: the plan notes it).
        """
        auth = [(k, v) for k, v in headers if k in (b"authorization", b"api-key")]
        length = prompt = None
        notes: list[str] = []
        if self.policy.fit_context and kind in OUTPUT_LIMIT_FIELDS:
            length = await self.max_model_len(body.get("model"), auth)
            if length is None:
                notes.append(f"context fitting: {self.upstream_root}/v1/models reports no max_model_len "
                             f"for model {body.get('model')!r}; only the cap applies")
            else:  # measured even without a limit: a prompt that fills the context is exhausted
                prompt, why = await self.prompt_tokens(kind, body, auth)
                if prompt is None:
                    notes.append(f"context fitting: prompt length unknown ({why}); "
                                 f"output limits are fitted to max_model_len {length}")
        plan = plan_output_limits(kind, body, self.policy, length, prompt)
        plan.notes[:0] = notes
        return plan


def exhausted_call(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first trace record the proxy answered with ``context_exhausted``.

    Args:
        records: trace records in arrival order.

    Returns:
        That record, or None.
    """
    for record in records:
        error = record.get("error")
        if isinstance(error, dict) and error.get("kind") == CONTEXT_EXHAUSTED:
            return record
    return None


def summarize_fitting(records: list[dict[str, Any]], policy: ContextPolicy) -> dict[str, Any]:
    """The per-rollout summary of context fitting (summary.json's ``context_fit``).

    Args:
        records: the rollout's trace records.
        policy: the policy the proxy ran with.

    Returns:
        ``{"max_tokens_cap", "fit_context", "calls_lowered", "lowered": [{"index", "field",
        "requested", "effective"}], "context_exhausted"}``; ``requested`` is None when the harness
        set no limit and the cap added one.
    """
    lowered = []
    for record in records:
        changes = record.get("upstream_changes") or {}
        request = record.get("request")
        if not isinstance(request, dict):
            request = {}
        requested = record.get("requested_sampling_params") or {}
        for name in OUTPUT_LIMIT_FIELDS.get(_kind_of(record), ()):
            if name in changes:
                asked = requested.get(name, request.get(name))
                lowered.append({"index": record.get("index"), "field": name, "requested": asked,
                                "effective": changes[name]})
    return {**policy.public_dict(), "calls_lowered": len({entry["index"] for entry in lowered}),
            "lowered": lowered, "context_exhausted": exhausted_call(records) is not None}


def _kind_of(record: dict[str, Any]) -> str:
    endpoint = record.get("endpoint") or ""
    for suffix, kind in (("/chat/completions", "chat"), ("/completions", "completions"), ("/responses", "responses")):
        if endpoint.endswith(suffix):
            return kind
    return ""
