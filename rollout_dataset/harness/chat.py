"""One assistant turn over the OpenAI chat completions API, shared by the built-in agents.

The built-in coding agent (`rollout_dataset.harness.builtin`) and the Crafter agent
(`rollout_dataset.envs.crafter.harness`) run the same model-call loop; only what they do with the
tool calls differs. `ChatTurnClient.turn` is the part they share: post one request within the
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

__all__ = ["ChatTurn", "ChatTurnClient", "chat_request_body"]

logger = logging.getLogger(__name__)


def chat_request_body(model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
                      temperature: float, max_tokens: int, seed: int | None) -> dict[str, Any]:
    """The chat completions request of one agent turn (tools offered with ``tool_choice: auto``).

    Args:
        model: the model name.
        messages: the conversation so far.
        tools: the OpenAI `tools` list (sent on every call).
        temperature: sampling temperature.
        max_tokens: completion cap.
        seed: the request `seed`; None leaves it out.

    Returns:
        The JSON body.
    """
    body: dict[str, Any] = {"model": model, "messages": messages, "tools": tools, "tool_choice": "auto",
                            "temperature": temperature, "max_tokens": max_tokens}
    if seed is not None:
        body["seed"] = seed
    return body


@dataclass
class ChatTurn:
    """What one turn gave: an assistant message, or the reason to stop.

    Args:
        assistant: the assistant message to append (``role``, ``content``, ``tool_calls`` when the
            model called tools, ``reasoning_content`` when it reasoned); None when the turn failed.
        stop_reason: ``timeout`` or ``upstream_error`` when the run must stop, else None.
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
    if message.get("reasoning_content"):
        assistant["reasoning_content"] = message["reasoning_content"]
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
            body: the request body (see `chat_request_body`).
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
