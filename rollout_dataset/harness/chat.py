"""One assistant turn over the OpenAI chat completions API, shared by the built-in agents.

The built-in coding agent (`rollout_dataset.harness.builtin`) and the Crafter agent
(`rollout_dataset.recipes.crafter.harness`) run the same model-call loop; only what they do with the
tool calls differs. `ChatAgentBase` holds the settings they share (URL, model, key, budgets,
sampling) and builds each request; `ChatTurnClient.turn` is the call itself: post one request within the
time budget, and hand back either the assistant message (ready to append to the conversation:
content, tool calls in request form, reasoning) or a stop reason with an error message.

The rule both agents keep: the FIRST model call answering 4xx/5xx raises `UpstreamStatusError`,
and a first call that cannot reach the server raises `UpstreamError` (a misconfigured server must
not look like a bad agent); a later failure ends the run with ``stop_reason="upstream_error"``,
and the time budget running out (before or during a call) with ``stop_reason="timeout"``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx

from rollout_dataset.errors import UpstreamError, UpstreamStatusError
from rollout_dataset.proxy.context_fit import CONTEXT_EXHAUSTED

__all__ = ["ChatAgentBase", "ChatRunResult", "ChatTurn", "ChatTurnClient"]

logger = logging.getLogger(__name__)


@dataclass
class ChatRunResult:
    """What every built-in agent's run reports of its model-call loop (each agent's result adds its own).

    Args:
        stop_reason: why the run ended (each agent lists its reasons; ``timeout`` and
            ``upstream_error`` are the loop's).
        model_calls: chat completion calls made.
        timed_out: whether the time budget ran out.
        tool_calls_by_name: tool calls the model made, per name.
    """

    stop_reason: str
    model_calls: int
    timed_out: bool
    tool_calls_by_name: dict[str, int]


@dataclass
class ChatTurn:
    """What one turn gave: an assistant message, or the reason to stop.

    Args:
        assistant: the assistant message to append (``role``, ``content``, ``tool_calls`` when the
            model called tools, ``reasoning`` when it reasoned); None when the turn failed.
        stop_reason: ``timeout``, ``upstream_error`` or ``context_exhausted`` (the proxy found the
            prompt fills the model's context) when the run must stop, else None.
        error: the failure message for ``upstream_error``.
    """

    assistant: dict[str, Any] | None = None
    stop_reason: str | None = None
    error: str | None = None

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The assistant's tool calls in request form (``[]`` for none or a failed turn)."""
        return list((self.assistant or {}).get("tool_calls") or [])


def _assistant_message(message: dict[str, Any]) -> dict[str, Any]:
    assistant: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    tool_calls = message.get("tool_calls") or []
    if tool_calls:
        assistant["tool_calls"] = [
            {"id": tc.get("id"), "type": "function",
             "function": {"name": tc["function"]["name"], "arguments": tc["function"].get("arguments", "")}}
            for tc in tool_calls]
    reasoning = message.get("reasoning") or message.get("reasoning_content")  # vLLM >= 0.11's key, then the older one
    if isinstance(reasoning, str) and reasoning:
        assistant["reasoning"] = reasoning  # sent back as vLLM's key (its chat endpoint renames reasoning_content to it)
    return assistant


class ChatTurnClient:
    """An HTTP client performing assistant turns against one chat completions URL.

    Use as a context manager (the connection pool is closed on exit); `calls` counts the model
    calls made, including one that timed out or failed.

    Args:
        url: the chat completions URL (e.g. ``{base_url}/chat/completions``).
        api_key: sent as a bearer token (never logged); None sends no Authorization header.
        report_url: the URL named in errors (default: `url`), e.g. the upstream behind a proxy.
        transport: an httpx transport (tests).
    """

    def __init__(self, url: str, *, api_key: str | None = None, report_url: str | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = url
        self.report_url = report_url or url
        self.calls = 0
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(transport=transport, headers=headers)

    def __enter__(self) -> "ChatTurnClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def turn(self, body: dict[str, Any], deadline: float) -> ChatTurn:
        """Make one model call and parse its assistant message.

        Args:
            body: the request body (see `ChatAgentBase.request_body`).
            deadline: `time.monotonic()` value at which the time budget ends.

        Returns:
            The assistant message, or ``stop_reason`` ``timeout`` (budget gone before or during the
            call) / ``upstream_error`` (a later call failed, answered 4xx/5xx or was unreadable).

        Raises:
            UpstreamStatusError: the FIRST call answered 4xx/5xx (status, URL and body named).
            UpstreamError: the first call could not reach the server.
        """
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return ChatTurn(stop_reason="timeout")
        try:
            response = self._client.post(self.url, json=body, timeout=remaining)
        except httpx.TimeoutException:
            self.calls += 1
            return ChatTurn(stop_reason="timeout")
        except httpx.HTTPError as exc:
            if self.calls == 0:
                raise UpstreamError(f"model server unreachable at {self.report_url}: {exc}") from exc
            self.calls += 1
            return ChatTurn(stop_reason="upstream_error", error=f"{self.report_url}: {exc}")
        self.calls += 1
        if response.status_code >= 400:
            if _error_type(response) == CONTEXT_EXHAUSTED:  # the proxy's answer: the context is full
                return ChatTurn(stop_reason=CONTEXT_EXHAUSTED, error=f"context exhausted at {self.report_url}")
            if self.calls == 1:
                raise UpstreamStatusError(response.status_code, self.report_url, response.text)
            return ChatTurn(stop_reason="upstream_error", error=f"HTTP {response.status_code} from {self.report_url}")
        try:
            message = response.json()["choices"][0]["message"]
            assistant = _assistant_message(message)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            return ChatTurn(stop_reason="upstream_error", error=f"unreadable response from {self.report_url}: {exc}")
        logger.debug("model call %d: %d tool call(s)", self.calls, len(assistant.get("tool_calls") or []))
        return ChatTurn(assistant=assistant)


def _error_type(response: httpx.Response) -> str | None:
    """The ``error.type`` of an OpenAI-style error body, if it has one."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return None
    return error.get("type") if isinstance(error, dict) else None


class ChatAgentBase:
    """Settings and request building shared by the built-in tool-calling agents.

    Args:
        base_url: the API base URL (ends in ``/v1``), e.g. the recording proxy's.
        model: the model name to request.
        api_key: sent as a bearer token (never logged).
        max_turns: turn budget (model calls), >= 1.
        timeout_s: wall-time budget of the whole run, > 0.
        seed: the request `seed`; None to omit it.
        temperature: sampling temperature.
        max_tokens: completion cap per call.
        report_url: the URL named in errors (default: the request URL), e.g. the upstream behind a proxy.
        transport: an httpx transport (tests).

    Raises:
        ValueError: a budget out of range.
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None, max_turns: int, timeout_s: float,
                 seed: int | None, temperature: float, max_tokens: int, report_url: str | None,
                 transport: httpx.BaseTransport | None) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.max_turns = max_turns
        self.timeout_s = timeout_s
        self.seed = seed
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.report_url = report_url or self.url
        self.transport = transport

    def request_body(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The chat completions request of one turn (tools offered with ``tool_choice: auto``).

        Args:
            messages: the conversation so far.
            tools: the OpenAI `tools` list (sent on every call).

        Returns:
            The JSON body (with `seed` only when set).
        """
        body: dict[str, Any] = {"model": self.model, "messages": messages, "tools": tools, "tool_choice": "auto",
                                "temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.seed is not None:
            body["seed"] = self.seed
        return body

    def chat_client(self) -> ChatTurnClient:
        """A client for this agent's URL, key and transport (use as a context manager).

        Returns:
            A fresh `ChatTurnClient` (its `calls` start at 0).
        """
        return ChatTurnClient(self.url, api_key=self.api_key, report_url=self.report_url, transport=self.transport)
