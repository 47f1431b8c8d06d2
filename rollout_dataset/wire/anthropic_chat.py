"""The Anthropic Messages API as chat completions, and chat answers as Messages answers.

One definition of the mapping vLLM 0.32's own Anthropic layer applies
(`vllm/entrypoints/anthropic/serving.py`, read there): the proxy sends a `/v1/messages` call upstream
as the chat completion vLLM would build from it (so the engine sees the same prompt, and can return
token ids and logprobs, which the native endpoint cannot), then answers the harness in the Messages
format vLLM's native endpoint would have produced; the graph reads recorded Messages calls as chat.

| Messages request | chat completion |
| --- | --- |
| `system` (string, or text blocks joined with no separator; blocks starting `x-anthropic-billing-header` dropped) | one leading `system` message |
| a `system` message inside `messages` | a `system` message in place (or merged into the leading one: `merge_inline_system`) |
| text blocks | `content` (a string when one text block, else parts) |
| `thinking` blocks | the assistant message's `reasoning` |
| `tool_use` blocks | `tool_calls` (`arguments` = `json.dumps(input)`) |
| `tool_result` in a user message | a `tool` message (`tool_call_id`, its texts joined by newlines) |
| `tools` (`input_schema`) | function tools (`parameters`); `tool_choice` auto/any/none/tool -> auto/required/none/named |
| `max_tokens`, `stop_sequences`, `temperature`, `top_p`, `top_k` | `max_tokens` + `max_completion_tokens`, `stop`, the same |
| `thinking` enabled / disabled | `thinking_token_budget` / `reasoning_effort` |
| `output_config.format` / `.effort` | `response_format` / `reasoning_effort` |
| `kv_transfer_params`, `chat_template_kwargs`, `vllm_xargs`, `cache_salt` | passed through |
| `metadata`, `context_management`, `service_tier`, `container`, `mcp_servers` | not sent (vLLM ignores them) |

Pure functions: no I/O, nothing of the package imported.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterable, Iterator

from httpx_sse import ServerSentEvent

from rollout_dataset.wire.content import is_json
from rollout_dataset.wire.chat_tools import function_tool
from rollout_dataset.wire.sse import encode_json_event, iter_events

__all__ = [
    "BILLING_HEADER_PREFIX",
    "IGNORED_FIELDS",
    "ChatStreamToMessages",
    "chat_to_message",
    "message_to_chat_message",
    "messages_to_chat",
    "anthropic_error",
    "assemble_events",
    "message_to_assistant",
    "request_messages",
    "encode_events",
    "anthropic_error_type",
    "stop_reason",
    "stream_end_problem",
    "usage",
]

#: Claude Code's per-request attribution block in `system`, which vLLM drops (it defeats prefix caching).
BILLING_HEADER_PREFIX = "x-anthropic-billing-header"
#: Messages request fields vLLM 0.32 accepts and ignores: the proxy does not send them upstream (they stay
#: in the record's `request`).
IGNORED_FIELDS = ("metadata", "context_management", "service_tier", "container", "mcp_servers")
_PASSED = ("watermarking", "cache_salt", "kv_transfer_params", "ec_transfer_params", "vllm_xargs",
           "chat_template_kwargs")
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _system_text(content: Any) -> str | None:
    if isinstance(content, str):
        return None if content.startswith(BILLING_HEADER_PREFIX) else content
    parts = [text for b in content or () if isinstance(b, dict) and b.get("type") == "text"
             and (text := b.get("text")) and not text.startswith(BILLING_HEADER_PREFIX)]
    return "".join(parts) if parts else None


def _image_url(source: dict[str, Any]) -> str:
    if source.get("type") == "url":
        return source.get("url", "")
    return f"data:{source.get('media_type', 'image/jpeg')};base64,{source.get('data', '')}"


def _tool_result_messages(block: dict[str, Any]) -> list[dict[str, Any]]:
    content = block.get("content")
    text, images, refs = "", [], []
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts = []
        for item in content:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "text":
                texts.append(item.get("text", ""))
            elif item.get("type") == "image":
                url = _image_url(item.get("source") or {})
                if url:
                    images.append(url)
            elif item.get("type") == "tool_reference":
                name = item.get("tool_name") or item.get("name")
                if name:
                    refs.append({"type": "tool_reference", "name": name})
        text = "\n".join(texts)
    out: list[dict[str, Any]] = [{"role": "tool", "tool_call_id": block.get("tool_use_id") or "", "content": text or ""}]
    if images:
        out.append({"role": "user", "content": [{"type": "image_url", "image_url": {"url": u}} for u in images]})
    if refs:
        out.append({"role": "tool", "tool_call_id": block.get("tool_use_id") or "", "content": refs})
    return out


def message_to_chat_message(message: dict[str, Any], out: list[dict[str, Any]]) -> None:
    """Append the chat messages of one Messages-API message (not a system one) to `out`.

    Args:
        message: ``{"role", "content"}`` with a string or a list of content blocks.
        out: the chat messages built so far; `tool` messages for tool results go before the message.
    """
    role = message.get("role")
    chat: dict[str, Any] = {"role": role}
    content = message.get("content")
    if isinstance(content, str):
        chat["content"] = content
    else:
        parts: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        reasoning: list[str] = []
        for block in content or ():
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and block.get("text"):
                parts.append({"type": "text", "text": block["text"]})
            elif kind == "image" and block.get("source"):
                parts.append({"type": "image_url", "image_url": {"url": _image_url(block["source"])}})
            elif kind == "thinking" and block.get("thinking") is not None:
                reasoning.append(block["thinking"])
            elif kind == "tool_use":
                calls.append({"id": block.get("id") or "call_0", "type": "function",
                              "function": {"name": block.get("name") or "",
                                           "arguments": json.dumps(block.get("input") or {})}})
            elif kind == "tool_result":
                if role == "user":
                    out.extend(_tool_result_messages(block))
                else:
                    result = block.get("content")
                    parts.append({"type": "text", "text": f"Tool result: {str(result) if result else ''}"})
        if reasoning:
            chat["reasoning"] = "".join(reasoning)
        if calls:
            chat["tool_calls"] = calls
        if parts:
            chat["content"] = parts[0]["text"] if len(parts) == 1 and parts[0]["type"] == "text" else parts
    if not (role == "user" and "content" not in chat):
        out.append(chat)


def messages_to_chat(body: dict[str, Any], *, merge_inline_system: bool = False,
                     disabled_thinking_effort: str = "none", count_tokens: bool = False) -> dict[str, Any]:
    """The chat completion request vLLM's Anthropic layer builds from a Messages request.

    Args:
        body: the Messages request (not modified).
        merge_inline_system: merge `system` messages found in `messages` into the leading one (vLLM
            does when the chat template requires system-first ordering).
        disabled_thinking_effort: the `reasoning_effort` sent for ``thinking: {"type": "disabled"}``.
        count_tokens: build the request of `/v1/messages/count_tokens` (messages, tools and template
            arguments only).

    Returns:
        The chat completion body (without the proxy's token fields).
    """
    messages: list[dict[str, Any]] = []
    system: list[str] = []
    if body.get("system"):
        text = _system_text(body["system"])
        if text:
            system.append(text)
    turns = [m for m in body.get("messages") or () if isinstance(m, dict)]
    if merge_inline_system:
        system.extend(t for t in (_system_text(m.get("content")) for m in turns if m.get("role") == "system") if t)
    if system:
        messages.append({"role": "system", "content": "".join(system)})
    for message in turns:
        if message.get("role") == "system":
            text = None if merge_inline_system else _system_text(message.get("content"))
            if text:
                messages.append({"role": "system", "content": text})
            continue
        message_to_chat_message(message, messages)
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    if count_tokens:
        if body.get("chat_template_kwargs") is not None:
            chat["chat_template_kwargs"] = body["chat_template_kwargs"]
    else:
        if body.get("max_tokens") is not None:
            chat["max_tokens"] = chat["max_completion_tokens"] = body["max_tokens"]
        for src, dst in (("stop_sequences", "stop"), ("temperature", "temperature"), ("top_p", "top_p"),
                         ("top_k", "top_k")):
            if body.get(src) is not None:
                chat[dst] = body[src]
        for key in _PASSED:
            if body.get(key) is not None:
                chat[key] = body[key]
        if body.get("stream"):
            chat["stream"] = True
            chat["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    config = body.get("output_config") or {}
    if isinstance(config, dict):
        fmt = config.get("format")
        if not count_tokens and isinstance(fmt, dict) and fmt.get("json_schema"):
            chat["response_format"] = {"type": fmt.get("type"),
                                       "json_schema": {"schema": fmt["json_schema"], "name": fmt.get("type")}}
        if config.get("effort") is not None:
            chat["reasoning_effort"] = config["effort"]
    thinking = body.get("thinking")
    if isinstance(thinking, dict):
        if thinking.get("type") == "disabled":
            chat["reasoning_effort"] = disabled_thinking_effort
        elif thinking.get("type") == "enabled" and thinking.get("budget_tokens") is not None:
            chat["thinking_token_budget"] = thinking["budget_tokens"]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        chat["parallel_tool_calls"] = not choice.get("disable_parallel_tool_use", False)
        named = {"auto": "auto", "any": "required", "none": "none"}
        if choice.get("type") in named:
            chat["tool_choice"] = named[choice["type"]]
        elif choice.get("type") == "tool":
            chat["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    tools = body.get("tools")
    if isinstance(tools, list):
        chat["tools"] = [_chat_tool(t) for t in tools if isinstance(t, dict)]
        chat.setdefault("tool_choice", "auto")
    return chat


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """vLLM's chat tool of an Anthropic tool: an `input_schema` without `type` gains `"type": "object"`
    (last, as vLLM's validator adds it)."""
    schema = tool.get("input_schema")
    if isinstance(schema, dict) and "type" not in schema:
        schema = {**schema, "type": "object"}
    return function_tool({**tool, "parameters": schema}, tool.get("name"))


def stop_reason(finish_reason: str | None, matched: Any, tool_used: bool, tool_complete: bool) -> tuple[str | None, str | None]:
    """The Messages ``(stop_reason, stop_sequence)`` of a chat finish.

    Args:
        finish_reason: the chat choice's `finish_reason`.
        matched: the choice's `stop_reason` (vLLM: the matched stop string, a stop token id or None).
        tool_used: a tool_use block was produced.
        tool_complete: the tool calls' arguments are complete JSON.

    Returns:
        ``stop_reason`` (end_turn, max_tokens, stop_sequence, tool_use or None) and the matched stop string.
    """
    if finish_reason == "length":
        return "max_tokens", None
    if finish_reason not in ("stop", "tool_calls"):
        return None, None
    if tool_complete:
        return "tool_use", None
    if isinstance(matched, str):
        return "stop_sequence", matched
    if finish_reason == "tool_calls" or tool_used:
        return "tool_use", None
    return "end_turn", None


def usage(chat_usage: dict[str, Any] | None) -> dict[str, int]:
    """Messages `usage` from chat `usage` (cached prompt tokens counted apart, as Anthropic does).

    Args:
        chat_usage: the chat answer's `usage`, or None.

    Returns:
        ``{"input_tokens", "output_tokens"}`` plus the cache fields when the server reported them.
    """
    if not chat_usage:
        return {"input_tokens": 0, "output_tokens": 0}
    out: dict[str, int] = {"input_tokens": 0, "output_tokens": chat_usage.get("completion_tokens") or 0}
    total = chat_usage.get("prompt_tokens") or 0
    details = chat_usage.get("prompt_tokens_details") or {}
    if details.get("cached_tokens") is not None:
        total -= details["cached_tokens"]
        out["cache_read_input_tokens"] = details["cached_tokens"]
    if details.get("created_cache_tokens") is not None:
        total -= details["created_cache_tokens"]
        out["cache_creation_input_tokens"] = details["created_cache_tokens"]
    out["input_tokens"] = max(0, total)
    return {k: out[k] for k in ("input_tokens", "output_tokens", "cache_creation_input_tokens",
                                "cache_read_input_tokens") if k in out}


def chat_to_message(chat: dict[str, Any]) -> dict[str, Any]:
    """The Messages answer vLLM's native endpoint gives for a (whole) chat completion.

    Args:
        chat: the chat completion answer.

    Returns:
        The message object (``None`` values left out, as vLLM serialises it).
    """
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    calls = message.get("tool_calls") or []
    reason, sequence = stop_reason(choice.get("finish_reason"), choice.get("stop_reason"), bool(calls), bool(calls))
    content: list[dict[str, Any]] = []
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    if reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": uuid.uuid4().hex})
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in calls:
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"),
                        "input": json.loads(function.get("arguments") or "{}")})
    if not content:
        content.append({"type": "text", "text": ""})
    out: dict[str, Any] = {"id": chat.get("id"), "type": "message", "role": "assistant", "content": content,
                           "model": chat.get("model"), "stop_reason": reason, "stop_sequence": sequence,
                           "usage": usage(chat.get("usage")), "kv_transfer_params": chat.get("kv_transfer_params")}
    return {k: v for k, v in out.items() if v is not None}




def message_to_assistant(message: Any) -> dict[str, Any] | None:
    """A Messages answer as the chat assistant message it stands for (how the graph reads it).

    ``text`` blocks -> `content` (joined), ``tool_use`` -> `tool_calls` (arguments as JSON text),
    ``thinking`` -> `reasoning_content`.

    Args:
        message: the recorded message object.

    Returns:
        The chat message, or None when `message` is not a message object.
    """
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return None
    texts, calls, thinking = [], [], []
    for block in message["content"]:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(block.get("text") or "")
        elif block.get("type") == "thinking":
            thinking.append(block.get("thinking") or "")
        elif block.get("type") == "tool_use":
            arguments = block.get("input")
            calls.append({"id": block.get("id"), "type": "function",
                          "function": {"name": block.get("name"),
                                       "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments or {})}})
    out: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if thinking:
        out["reasoning_content"] = "".join(thinking)
    if calls:
        out["tool_calls"] = calls
    return out


def request_messages(body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A Messages request as the chat messages and tools vLLM renders (reasoning as `reasoning_content`).

    Args:
        body: the recorded Messages request.

    Returns:
        ``(messages, tools)`` in chat form.
    """
    chat = messages_to_chat(body)
    messages = []
    for message in chat["messages"]:
        if "reasoning" in message:
            message = {("reasoning_content" if k == "reasoning" else k): v for k, v in message.items()}
        messages.append(message)
    return messages, chat.get("tools") or []


#: the Anthropic error type of each HTTP status the Messages API answers with (its published list).
ANTHROPIC_ERROR_TYPES_BY_STATUS = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
                                   403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                                   429: "rate_limit_error", 500: "api_error", 504: "timeout_error",
                                   529: "overloaded_error"}


def anthropic_error_type(status: int) -> str:
    """The Anthropic error type for an HTTP status (another 4xx: invalid_request_error; 5xx: api_error).

    Args:
        status: the HTTP status of the error answer.

    Returns:
        e.g. ``"invalid_request_error"`` for 400 or 422.
    """
    if status in ANTHROPIC_ERROR_TYPES_BY_STATUS:
        return ANTHROPIC_ERROR_TYPES_BY_STATUS[status]
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def anthropic_error(kind: str, message: str) -> dict[str, Any]:
    """An Anthropic error body (``{"type": "error", "error": {"type", "message"}}``).

    Args:
        kind: the error's type.
        message: what went wrong.

    Returns:
        The body.
    """
    return {"type": "error", "error": {"type": kind, "message": message}}


class ChatStreamToMessages:
    """Turns a chat completion stream into the Messages events vLLM's native endpoint sends.

    Feed each parsed chat chunk to `feed` and call `done` at ``[DONE]``; each returns
    ``(event_name, data)`` pairs in order. `message()` is the whole answer the events add up to.
    """

    def __init__(self) -> None:
        self._first = True
        self._index = 0
        self._type: str | None = None
        self._block_index: int | None = None
        self._signature: str | None = None
        self._signed = False
        self._tool_id: str | None = None
        self._pending: list[str] = []
        self._finish: str | None = None
        self._matched: Any = None
        self._tool_used = False
        self._tool_args: list[str] = []
        self._tool_ids: dict[int, str] = {}
        self._blocks: list[dict[str, Any]] = []
        self._message: dict[str, Any] = {}
        self.failed = False  # an error chunk came: its `error` event was the stream's last

    def _start(self, block: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._type = block["type"]
        self._block_index = self._index
        self._signature = uuid.uuid4().hex if block["type"] == "thinking" else None
        self._signed = block["type"] != "thinking"
        self._tool_id = block.get("id") if block["type"] == "tool_use" else None
        self._blocks.append(json.loads(json.dumps(block)))
        return "content_block_start", {"type": "content_block_start", "index": self._index, "content_block": block}

    def _delta(self, delta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        block = self._blocks[-1]
        for key, field in (("text", "text"), ("thinking", "thinking"), ("signature", "signature")):
            if key in delta and delta.get("type") in (f"{key}_delta",):
                block[field] = block.get(field, "") + delta[key]
        if delta.get("type") == "input_json_delta":
            block["_json"] = block.get("_json", "") + delta["partial_json"]
        index = self._block_index if self._block_index is not None else self._index
        return "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}

    def _stop(self) -> list[tuple[str, dict[str, Any]]]:
        if self._type is None:
            return []
        events = []
        if self._type == "thinking" and self._signature is not None and not self._signed:
            events.append(self._delta({"type": "signature_delta", "signature": self._signature}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": self._block_index}))
        self._type = self._block_index = self._signature = self._tool_id = None
        self._pending = []
        self._index += 1
        return events

    def _stop_and_flush(self) -> list[tuple[str, dict[str, Any]]]:
        buffered, self._pending = "".join(self._pending), []
        events = self._stop()
        if buffered:
            events.append(self._start({"type": "text", "text": ""}))
            events.append(self._delta({"type": "text_delta", "text": buffered}))
            events.extend(self._stop())
        return events

    def feed(self, chunk: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """The events for one chat chunk.

        Args:
            chunk: a parsed chat completion chunk.

        Returns:
            ``(event_name, data)`` pairs.

        Raises:
            TypeError: the chunk is not a JSON object (nothing is sent for it; the next chunk opens
                the message).
        """
        if not isinstance(chunk, dict):
            raise TypeError(f"a chat chunk is a JSON {type(chunk).__name__}, not an object")
        if self.failed:
            return []
        if "error" in chunk and "choices" not in chunk:  # the server failed mid-stream: tell the harness, end
            self.failed = True
            return ([] if self._first else self._stop_and_flush()) + [("error", _stream_error(chunk["error"]))]
        if self._first:
            self._first = False
            self._message = {"id": chunk.get("id"), "type": "message", "role": "assistant", "content": [],
                             "model": chunk.get("model"), "stop_reason": None, "stop_sequence": None,
                             "usage": usage(chunk.get("usage"))}
            start = [("message_start", {"type": "message_start", "message": dict(self._message)})]
            # vLLM's first chunk holds the role only, and vLLM's own layer reads nothing more of it;
            # an upstream that puts text (or a finish) there would otherwise lose it
            return start + (self._choice_events(chunk["choices"][0]) if _first_choice(chunk) else [])
        choices = chunk.get("choices") or []
        events: list[tuple[str, dict[str, Any]]]
        if not choices:
            events = self._stop_and_flush()
            reason, sequence = stop_reason(self._finish or "stop", self._matched, self._tool_used,
                                           self._tool_used and is_json("".join(self._tool_args)))
            self._message.update(stop_reason=reason, stop_sequence=sequence, usage=usage(chunk.get("usage")))
            events.append(("message_delta", {"type": "message_delta",
                                             "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                             "usage": usage(chunk.get("usage"))}))
            return events
        return self._choice_events(choices[0])

    def _choice_events(self, choice: Any) -> list[tuple[str, dict[str, Any]]]:
        """The events of one chunk's first choice (its delta, its finish)."""
        events: list[tuple[str, dict[str, Any]]] = []
        if choice.get("finish_reason") is not None:
            self._finish = choice["finish_reason"]
            self._matched = choice.get("stop_reason")
        delta = choice.get("delta") or {}
        reasoning = delta.get("reasoning", delta.get("reasoning_content"))
        if reasoning:
            if self._type != "thinking":
                events += self._stop_and_flush()
                events.append(self._start({"type": "thinking", "thinking": ""}))
            events.append(self._delta({"type": "thinking_delta", "thinking": reasoning}))
        text = delta.get("content")
        if text:
            if self._type == "tool_use":
                self._pending.append(text)
            else:
                if self._type != "text":
                    events += self._stop_and_flush()
                    events.append(self._start({"type": "text", "text": ""}))
                events.append(self._delta({"type": "text_delta", "text": text}))
        for call in delta.get("tool_calls") or ():
            function = call.get("function") or {}
            args = function.get("arguments")
            if call.get("id") is not None:
                self._tool_ids[call.get("index", 0)] = call["id"]
                if self._tool_id != call["id"] and function.get("name") is not None:
                    events += self._stop_and_flush()
                    self._tool_used = True
                    self._tool_args = []
                    events.append(self._start({"type": "tool_use", "id": call["id"], "name": function["name"],
                                               "input": {}}))
                target = call["id"]
            else:
                target = self._tool_ids.get(call.get("index", 0))
            if args and target is not None and self._tool_id == target:
                self._tool_args.append(args)
                events.append(self._delta({"type": "input_json_delta", "partial_json": args}))
        return events

    def done(self) -> list[tuple[str, dict[str, Any]]]:
        """The events at the chat stream's ``[DONE]``: open blocks closed, then ``message_stop`` (none
        after an error event)."""
        if self.failed:
            return []
        return self._stop_and_flush() + [("message_stop", {"type": "message_stop"})]

    def message(self) -> dict[str, Any]:
        """The whole message the events so far add up to (tool inputs parsed where they are complete JSON)."""
        blocks = []
        for block in self._blocks:
            block = dict(block)
            raw = block.pop("_json", None)
            if raw is not None:
                block["input"] = json.loads(raw) if is_json(raw) else raw
            blocks.append(block)
        return {**self._message, "content": blocks}


def _stream_error(error: Any) -> dict[str, Any]:
    """The Anthropic ``error`` event for a chat stream's error chunk (``{"error": {"message", "code"}}``)."""
    error = error if isinstance(error, dict) else {"message": error}
    code = error.get("code")
    kind = anthropic_error_type(code) if isinstance(code, int) and code >= 400 else "api_error"
    return anthropic_error(kind, str(error.get("message") or error)[:4000])


def _first_choice(chunk: dict[str, Any]) -> bool:
    """Whether a chunk's first choice carries anything beyond the role (text, reasoning, tool calls, a finish)."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    delta = choices[0].get("delta") or {}
    carried = ("content", "reasoning", "reasoning_content", "tool_calls")
    return choices[0].get("finish_reason") is not None or (isinstance(delta, dict) and any(delta.get(k) for k in carried))


def _typed_events(text: str) -> Iterator[tuple[ServerSentEvent, Any, Any]]:
    """Each event of a Messages SSE stream whose data is JSON: ``(event, its data parsed, its "type")``."""
    for sse in iter_events(text):
        try:
            event = json.loads(sse.data)
        except ValueError:
            continue
        yield sse, event, event.get("type") if isinstance(event, dict) else None


def assemble_events(text: str) -> dict[str, Any] | None:
    """The message a Messages SSE stream adds up to (for a stream forwarded as it came).

    Args:
        text: the stream's bytes as text.

    Returns:
        The message object (tool inputs parsed where complete), or None when no ``message_start`` came.
    """
    message: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    for _, event, kind in _typed_events(text):
        if kind == "message_start" and isinstance(event.get("message"), dict):
            message = dict(event["message"])
        elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            blocks[event.get("index", len(blocks))] = dict(event["content_block"])
        elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
            block = blocks.setdefault(event.get("index", 0), {"type": "text", "text": ""})
            delta = event["delta"]
            for key in ("text", "thinking", "signature"):
                if delta.get("type") == f"{key}_delta":
                    block[key] = block.get(key, "") + str(delta.get(key) or "")
            if delta.get("type") == "input_json_delta":
                block["_json"] = block.get("_json", "") + str(delta.get("partial_json") or "")
        elif kind == "message_delta" and message is not None:
            message.update({k: v for k, v in (event.get("delta") or {}).items()})
            if isinstance(event.get("usage"), dict):
                message["usage"] = {**(message.get("usage") or {}), **event["usage"]}
    if message is None:
        return None
    content = []
    for index in sorted(blocks):
        block = dict(blocks[index])
        raw = block.pop("_json", None)
        if raw is not None:
            block["input"] = json.loads(raw) if is_json(raw) else raw
        content.append(block)
    return {**message, "content": content}


def stream_end_problem(text: str) -> tuple[str, str] | None:
    """What is wrong with how a Messages SSE stream ended, or None when it reached ``message_stop``.

    Args:
        text: the whole stream's bytes as text.

    Returns:
        None, or ``(error kind, message)``: ``upstream_status`` for an ``error`` event,
        ``upstream_disconnect`` for a stream that stopped before ``message_stop``.
    """
    for sse, _, kind in _typed_events(text):
        if kind == "message_stop":
            return None
        if kind == "error":
            return "upstream_status", f"the model server sent an error event: {sse.data[:500]}"
    return "upstream_disconnect", "the Messages stream ended before its message_stop event"


def encode_events(events: Iterable[tuple[str, dict[str, Any]]]) -> bytes:
    """SSE bytes of Messages events, framed as vLLM frames them (``event:`` line, then ``data:``).

    Args:
        events: ``(event_name, data)`` pairs.

    Returns:
        The bytes to send.
    """
    return b"".join(encode_json_event(data, name) for name, data in events)
