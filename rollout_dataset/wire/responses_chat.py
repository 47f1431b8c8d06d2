"""The OpenAI Responses API as chat messages: one definition, used by the local backend (to render a
`/v1/responses` prompt with the chat template, as vLLM does), by the graph (to treat recorded
Responses calls like chat calls: same roles, same masks) and by on-policy mode (to ask the server's
`/tokenize` for the render its Responses endpoint makes).

vLLM 0.32 turns a Responses request into chat messages before templating
(`vllm/entrypoints/openai/responses/utils.py`, `construct_input_messages`; seen on the genuine server
serving Qwen3's template: `input_messages` carries the chat template's render of them, equal to
`/tokenize`'s render of these messages):

| Responses input | chat message |
| --- | --- |
| `instructions` and every `developer` message | one leading `system` message, their texts joined by a blank line (wherever the developer messages stand) |
| a string `input` | one `user` message |
| `{"type": "message", "role": R, "content": str or [{"type": "input_text"/"output_text", "text"}]}` | role R, the parts' texts joined by a newline (an assistant's: its first part; it fills the assistant message before it when that one has no content yet) |
| `{"type": "function_call", "call_id", "name", "arguments"}` | a tool call of the assistant message before it, or of a new one |
| `{"type": "function_call_output", "call_id", "output"}` | a `tool` message |
| `{"type": "reasoning", ...}` | `reasoning_content` (its first `reasoning_text` part, else its first summary part) of the assistant message before it when that one has none yet, else of a new assistant message (so a reasoning item, a message and calls, in Codex's order, make one assistant turn) |

Function tools `{"type": "function", "name", "description", "parameters", "strict"}` become chat tools
`{"type": "function", "function": {"name", "description", "parameters", "strict"}}` (`description`
null when absent, `strict` only when set, as vLLM's `FunctionDefinition` writes them); a `namespace`
tool's functions are flattened to `NAMESPACE__NAME`, a `custom` tool becomes a function taking one
string `input`, and other tool types are dropped (vLLM's `get_function_tools`).

A reasoning item with `encrypted_content` set is refused by vLLM 0.32 (HTTP 400 "Encrypted content is
not supported."): `encrypted_reasoning` finds one.
"""

from __future__ import annotations

import json
from typing import Any

from rollout_dataset.wire.chat_tools import function_tool
from rollout_dataset.wire.content import content_text, text_parts

__all__ = ["RESPONSES_ENDPOINT", "ENCRYPTED_REASONING_MESSAGE", "encrypted_reasoning", "input_to_messages",
           "tools_to_chat", "output_to_message", "output_text", "reasoning_item"]

#: the Responses API path
RESPONSES_ENDPOINT = "/v1/responses"
#: vLLM 0.32's refusal of a reasoning item carrying `encrypted_content` (HTTP 400, param `input`)
ENCRYPTED_REASONING_MESSAGE = "Encrypted content is not supported."
#: vLLM's separator of a namespace tool's name and its function's name
NAMESPACE_SEPARATOR = "__"
#: the parameters of the one-string function a `custom` tool is shown as (vLLM's `custom_tool_parameters`)
CUSTOM_TOOL_PARAMETERS = {"type": "object",
                          "properties": {"input": {"type": "string",
                                                   "description": "The freeform text payload for this tool."}},
                          "required": ["input"], "additionalProperties": False}


def _text_of(content: Any) -> str:
    return content_text(content, refusals=True, other=_json_any)


def _json_any(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _joined(content: Any) -> str:
    """A message's text as vLLM renders it: text parts joined by a newline."""
    if isinstance(content, list):
        texts = text_parts(content, refusals=True)
        if texts is not None:
            return "\n".join(texts)
    return _text_of(content)


def _first_text(content: Any) -> str:
    """An assistant message's text as vLLM reads it: its first part's."""
    if isinstance(content, list):
        texts = text_parts(content[:1], refusals=True)
        return texts[0] if texts else ""
    return _text_of(content)


def _reasoning_text(item: dict[str, Any]) -> str:
    """vLLM's reading of a reasoning item: its first content part's text, else its first summary's."""
    for key in ("content", "summary"):
        parts = item.get(key)
        if isinstance(parts, list) and parts and isinstance(parts[0], dict):
            return _text_of(parts[0].get("text"))
    return ""


def encrypted_reasoning(body: dict[str, Any]) -> bool:
    """Whether a Responses request sends back a reasoning item with `encrypted_content` set.

    Args:
        body: the request body.

    Returns:
        True when vLLM 0.32 refuses it (`ENCRYPTED_REASONING_MESSAGE`).
    """
    items = body.get("input")
    return isinstance(items, list) and any(
        isinstance(item, dict) and item.get("type") == "reasoning" and item.get("encrypted_content")
        for item in items)


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
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type") or ("message" if "role" in item else None)
        # vLLM's `_construct_message_from_response_item`: an assistant item joins the assistant message
        # before it when that message lacks what the item brings (calls always join it)
        last = messages[-1] if messages and messages[-1].get("role") == "assistant" else None
        if kind == "message":
            role = str(item.get("role") or "user")
            if role == "developer":  # vLLM folds developer messages into the leading system message
                system.append(_joined(item.get("content")))
                continue
            if role != "assistant":
                messages.append({"role": role, "content": _joined(item.get("content"))})
            elif last is not None and last.get("content") is None:
                last["content"] = _first_text(item.get("content"))
            else:
                messages.append({"role": "assistant", "content": _first_text(item.get("content"))})
        elif kind == "function_call":
            call = {"id": str(item.get("call_id") or item.get("id") or ""), "type": "function",
                    "function": {"name": str(item.get("name") or ""), "arguments": str(item.get("arguments") or "")}}
            if last is not None:
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": str(item.get("call_id") or ""),
                             "content": output if isinstance(output, str) else _joined(output)})
        elif kind == "reasoning":
            if last is not None and last.get("reasoning_content") is None:
                last["reasoning_content"] = _reasoning_text(item)
            else:  # a turn of its own (rendered empty when the template drops the reasoning)
                messages.append({"role": "assistant", "content": None, "reasoning_content": _reasoning_text(item)})
    return _with_system(system, messages)


def _with_system(system: list[str], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return ([{"role": "system", "content": "\n\n".join(system)}] if system else []) + messages


def tools_to_chat(tools: Any) -> list[dict[str, Any]]:
    """Chat-style tools from Responses tools, as vLLM 0.32 shows them to the template.

    Args:
        tools: the request's `tools`.

    Returns:
        ``[{"type": "function", "function": {"name", "description", "parameters", "strict"?}}]``:
        function tools, a namespace's functions (named `NAMESPACE__NAME`), custom tools (one string
        `input`); other types dropped.
    """
    out = []
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "function":
            out.append(function_tool(tool, str(tool.get("name"))))
        elif tool.get("type") == "namespace":
            for inner in tool.get("tools") or ():
                if isinstance(inner, dict) and inner.get("type") == "function":
                    out.append(function_tool(inner, f"{tool.get('name')}{NAMESPACE_SEPARATOR}{inner.get('name')}"))
        elif tool.get("type") == "custom":
            out.append(function_tool({"description": tool.get("description"), "parameters": CUSTOM_TOOL_PARAMETERS},
                                  str(tool.get("name"))))
    return out


def reasoning_item(item_id: str, text: str | None, status: str | None) -> dict[str, Any]:
    """A Responses `reasoning` output item as vLLM 0.32 writes it.

    Args:
        item_id: its id (`rs_...`).
        text: its reasoning text (None: `content` null, as when a stream adds the item).
        status: its status (null in a whole answer, `in_progress`/`completed` in a stream).

    Returns:
        ``{"id", "summary": [], "type": "reasoning", "content": [{"text", "type": "reasoning_text"}],
        "encrypted_content": null, "status"}``.
    """
    content = None if text is None else [{"text": text, "type": "reasoning_text"}]
    return {"id": item_id, "summary": [], "type": "reasoning", "content": content, "encrypted_content": None,
            "status": status}



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
