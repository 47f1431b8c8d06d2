"""Three-turn sessions over each generation API, as a harness drives them (for tests through the proxy).

Each driver posts three calls to `root` (the proxy's or a server's base URL, without ``/v1``), sending
each answer back in the API's own form, then a new user message.
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["TOOLS", "chat_session", "messages_session", "recorded_session", "responses_session"]

#: a one-tool manifest, for sessions whose calls should carry tools
TOOLS = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object", "properties": {}}}}]


async def chat_session(client: httpx.AsyncClient, root: str, tools: list[dict[str, Any]] | None = None) -> None:
    """Three chat completions calls (`tools` sent with each when given)."""
    messages = [{"role": "user", "content": "question 0"}]
    for k in range(3):
        body: dict[str, Any] = {"model": "local", "messages": messages, "max_tokens": 16, "logprobs": True}
        if tools:
            body["tools"] = tools
        answer = (await client.post(root + "/v1/chat/completions", json=body)).json()["choices"][0]["message"]
        messages = messages + [{"role": "assistant", "content": answer["content"]},
                               {"role": "user", "content": f"question {k + 1}"}]


async def responses_session(client: httpx.AsyncClient, root: str) -> None:
    """Three Responses API calls, each answer's output items sent back as input."""
    items: list = [{"role": "user", "content": "question 0"}]
    for k in range(3):
        answer = (await client.post(root + "/v1/responses", json={"model": "local", "input": items,
                                                                   "max_output_tokens": 16})).json()
        items = items + answer["output"] + [{"role": "user", "content": f"question {k + 1}"}]


async def messages_session(client: httpx.AsyncClient, root: str) -> None:
    """Three Anthropic Messages calls, each answer's content blocks sent back."""
    messages = [{"role": "user", "content": "question 0"}]
    for k in range(3):
        answer = (await client.post(root + "/v1/messages", json={"model": "local", "max_tokens": 16,
                                                                  "messages": messages})).json()
        messages = messages + [{"role": "assistant", "content": answer["content"]},
                               {"role": "user", "content": f"question {k + 1}"}]


async def recorded_session(trace_dir: Any, drive: Any) -> list[dict[str, Any]]:
    """Run `drive` through the recording proxy in front of the local backend (echo policy).

    Args:
        trace_dir: where the proxy writes its trace.
        drive: one of the session drivers (``async (client, root) -> None``).

    Returns:
        The session's trace records, in arrival order.
    """
    from rollout_dataset.backend import LocalBackend
    from rollout_dataset.proxy import CaptureProxy, read_trace

    async with LocalBackend(policy="echo") as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=trace_dir) as proxy:
            async with httpx.AsyncClient(timeout=30) as client:
                await drive(client, proxy.session_base_url("s").removesuffix("/v1"))
            return read_trace(proxy.trace_path("s"))
