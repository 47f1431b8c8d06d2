"""The OpenAI Responses API as chat messages: one definition, used by the local backend (to render a
`/v1/responses` prompt with the chat template, as vLLM does) and by the graph (to treat recorded
Responses calls like chat calls: same roles, same masks).

vLLM 0.32 turns a Responses request into chat messages before templating (seen on the genuine
server: `input_messages` carries the chat template's render of them):

| Responses input | chat message |
| --- | --- |
| `instructions` and every `developer` message | one leading `system` message, their texts joined by a blank line (wherever the developer messages stand) |
| a string `input` | one `user` message |
| `{"type": "message", "role": R, "content": str or [{"type": "input_text"/"output_text", "text"}]}` | role R, the texts joined |
| `{"type": "function_call", "call_id", "name", "arguments"}` | an `assistant` tool call (consecutive calls join one assistant message) |
| `{"type": "function_call_output", "call_id", "output"}` | a `tool` message |
| `{"type": "reasoning", ...}` | the next assistant message's `reasoning_content` |

Function tools `{"type": "function", "name", "description", "parameters"}` become chat tools
`{"type": "function", "function": {...}}`.
"""

from __future__ import annotations

import json
from typing import Any

from rollout_dataset.wire.content import content_text

__all__ = ["RESPONSES_ENDPOINT", "input_to_messages", "tools_to_chat", "output_to_message", "output_text"]

#: the Responses API path
RESPONSES_ENDPOINT = "/v1/responses"



def _text_of(content: Any) -> str:
    return content_text(content, refusals=True, other=_json_any)


def _json_any(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _reasoning_text(item: dict[str, Any]) -> str:
    texts = [_text_of(part.get("text")) for part in item.get("content") or [] if isinstance(part, dict)]
    if not any(texts):
        texts = [_text_of(part.get("text")) for part in item.get("summary") or [] if isinstance(part, dict)]
    return "".join(texts)


def input_to_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat messages of a Responses request (see the module docstring for the mapping).

    Args:
        body: the request body (`instructions`, `input`).

    Returns:
        Chat messages; unknown item types are skipped.
    """
    messages: list[dict[str, Any]] = []
    system = [body["instructions"]] if isinstance(body.get("instructions"), str) and body["instructions"] else []
    items = body.get("input")
    if isinstance(items, str):
        return _with_system(system, [{"role": "user", "content": items}])
    pending_reasoning: str | None = None
    joinable = False  # the last message is an assistant message function calls may join
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = str(item.get("role") or "user")
            if role == "developer":  # vLLM folds developer messages into the leading system message
                system.append(_text_of(item.get("content")))
                continue
            message: dict[str, Any] = {"role": role, "content": _text_of(item.get("content"))}
            if role == "assistant" and pending_reasoning:
                message["reasoning_content"], pending_reasoning = pending_reasoning, None
            messages.append(message)
            joinable = role == "assistant"
        elif kind == "function_call":
            call = {"id": str(item.get("call_id") or item.get("id") or ""), "type": "function",
                    "function": {"name": str(item.get("name") or ""), "arguments": str(item.get("arguments") or "")}}
            if joinable:
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                message = {"role": "assistant", "content": None, "tool_calls": [call]}
                if pending_reasoning:
                    message["reasoning_content"], pending_reasoning = pending_reasoning, None
                messages.append(message)
                joinable = True
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": str(item.get("call_id") or ""),
                             "content": output if isinstance(output, str) else _text_of(output)})
            joinable = False
        elif kind == "reasoning":
            pending_reasoning = (pending_reasoning or "") + _reasoning_text(item)
    return _with_system(system, messages)


def _with_system(system: list[str], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return ([{"role": "system", "content": "\n\n".join(system)}] if system else []) + messages


def tools_to_chat(tools: Any) -> list[dict[str, Any]]:
    """Chat-style tools from Responses function tools (other tool types are dropped).

    Args:
        tools: the request's `tools`.

    Returns:
        ``[{"type": "function", "function": {"name", "description", "parameters"}}]``.
    """
    out = []
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict) and tool.get("type") == "function":
            fn = {"name": tool.get("name"), "description": tool.get("description"),
                  "parameters": tool.get("parameters")}
            out.append({"type": "function", "function": {k: v for k, v in fn.items() if v is not None}})
    return out


def output_text(response: dict[str, Any]) -> str:
    """The text of a Responses answer's message items, joined."""
    texts = []
    for item in response.get("output") or ():
        if isinstance(item, dict) and item.get("type") == "message":
            texts.append(_text_of(item.get("content")))
    return "".join(texts)


def output_to_message(response: Any) -> dict[str, Any] | None:
    """The assistant chat message of a Responses answer: its text, function calls and reasoning.

    Args:
        response: the parsed Responses object (or a stream's final ``response.completed`` object).

    Returns:
        ``{"role": "assistant", "content", "tool_calls"?, "reasoning_content"?}``, or None when the
        answer has no ``output`` list.
    """
    if not isinstance(response, dict) or not isinstance(response.get("output"), list):
        return None
    calls, reasoning = [], []
    for item in response["output"]:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call":
            calls.append({"id": str(item.get("call_id") or ""), "type": "function",
                          "function": {"name": str(item.get("name") or ""),
                                       "arguments": str(item.get("arguments") or "")}})
        elif item.get("type") == "reasoning":
            reasoning.append(_reasoning_text(item))
    text = output_text(response)
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        message["tool_calls"] = calls
    if any(reasoning):
        message["reasoning_content"] = "".join(reasoning)
    return message
