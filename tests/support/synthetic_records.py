"""Synthetic trace records built from token lists, for tests, benchmarks and examples.

Real traces come from the recording proxy; these helpers make records with the same layout
(``trace_record.schema.json``) from plain token lists and messages, so graph and export behaviour
can be pinned down without a server.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

__all__ = ["make_record", "tool_manifest", "synthetic_chain"]


def tool_manifest(*names: str) -> list[dict[str, Any]]:
    """A minimal OpenAI tool manifest with one function per name.

    Args:
        names: function names.

    Returns:
        The ``tools`` list of a chat request.
    """
    return [
        {"type": "function", "function": {"name": n, "description": n, "parameters": {"type": "object", "properties": {}}}}
        for n in names
    ]


def make_record(
    index: int,
    prompt_ids: list[int] | None,
    sampled_ids: list[int] | None,
    *,
    messages: list[dict[str, Any]] | None = None,
    response_message: dict[str, Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    logprobs: list[float] | None | str = "auto",
    finish_reason: str = "stop",
    sampling: dict[str, Any] | None = None,
    session: str = "default",
    harness_session_id: str | None = None,
    endpoint: str = "/v1/chat/completions",
    usage: dict[str, Any] | None | str = "auto",
    notes: list[str] | None = None,
) -> dict[str, Any]:
    """One trace record of a chat completion call.

    Args:
        index: arrival index.
        prompt_ids: the server's prompt ids (None: the server returned none).
        sampled_ids: the server's sampled ids (None: none).
        messages: request messages (default: one user message naming the index).
        response_message: the response's message (default: assistant text naming the index).
        tools: the request's tool manifest.
        logprobs: per-token logprobs; ``"auto"`` makes -0.5 per sampled id, None means missing.
        finish_reason: the first choice's finish reason.
        sampling: requested (= effective) sampling params.
        session: proxy session id.
        harness_session_id: the harness's session header value.
        endpoint: upstream path.
        usage: the usage object; ``"auto"`` derives it from the id counts.
        notes: proxy notes.

    Returns:
        The record.
    """
    has_ids = prompt_ids is not None and sampled_ids is not None
    if logprobs == "auto":
        logprobs = [-0.5] * len(sampled_ids) if sampled_ids is not None else None
    if usage == "auto":
        usage = (
            {"prompt_tokens": len(prompt_ids), "completion_tokens": len(sampled_ids), "total_tokens": len(prompt_ids) + len(sampled_ids)}
            if has_ids
            else None
        )
    messages = messages if messages is not None else [{"role": "user", "content": f"call {index}"}]
    message = response_message if response_message is not None else {"role": "assistant", "content": f"answer {index}"}
    request: dict[str, Any] = {"model": "local", "messages": messages}
    if tools:
        request["tools"] = tools
    params = dict(sampling or {})
    request.update(params)
    return {
        "schema_version": 1,
        "index": index,
        "call_id": uuid.uuid5(uuid.NAMESPACE_OID, f"{session}/{index}").hex,
        "session": session,
        "harness_session_id": harness_session_id,
        "started_at": 1000.0 + index,
        "ended_at": 1000.5 + index,
        "latency_ms": 500.0,
        "method": "POST",
        "endpoint": endpoint,
        "stream": False,
        "status": 200,
        "request_headers": {},
        "request": request,
        "upstream_changes": {"return_token_ids": True, "logprobs": True},
        "response": {
            "id": f"chatcmpl-{index}",
            "object": "chat.completion",
            "model": "local",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": usage,
        },
        "prompt_token_ids": None if prompt_ids is None else list(prompt_ids),
        "completion_token_ids": None if sampled_ids is None else list(sampled_ids),
        "per_token_logps": logprobs,
        "finish_reason": finish_reason,
        "usage": usage,
        "requested_sampling_params": params,
        "effective_sampling_params": {**params, "logprobs": True},
        "capture_level": "tokens" if has_ids else "text",
        "token_source": "return_token_ids" if has_ids else None,
        "notes": list(notes or []),
        "error": None,
    }


def synthetic_chain(n_calls: int, context_tokens: int, *, n_tools: int = 3, seed: int = 0) -> list[dict[str, Any]]:
    """A prefix-clean agent rollout whose context grows to about ``context_tokens``.

    Each call's prompt is the previous prompt + sampled ids + a tool-result chunk; messages grow the
    same way (assistant tool call, tool result).

    Args:
        n_calls: number of calls.
        context_tokens: approximate length of the last prompt.
        n_tools: size of the tool manifest on every call.
        seed: varies the token values.

    Returns:
        The records, in arrival order.
    """
    step = max(2, context_tokens // max(1, n_calls))
    sampled_len = max(1, step // 4)
    result_len = step - sampled_len
    tools = tool_manifest(*[f"tool{k}" for k in range(n_tools)])
    prompt = [(seed * 7919 + k) % 50000 for k in range(step)]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "agent"}, {"role": "user", "content": "task"}]
    records = []
    for i in range(n_calls):
        sampled = [(seed + i * 31 + k) % 50000 for k in range(sampled_len)]
        call = {"id": f"c{i}", "type": "function", "function": {"name": "tool0", "arguments": json.dumps({"i": i})}}
        reply = {"role": "assistant", "content": None, "tool_calls": [call]}
        records.append(make_record(i, prompt, sampled, messages=list(messages), response_message=reply, tools=tools, finish_reason="tool_calls"))
        messages = messages + [reply, {"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i}"}]
        prompt = prompt + sampled + [(i * 13 + k) % 50000 for k in range(result_len)]
    return records
