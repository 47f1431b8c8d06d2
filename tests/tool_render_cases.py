"""Requests whose tools (and tool messages) vLLM 0.32 normalises before rendering; shared by
tests/test_backend_tool_render.py (against ids recorded from the genuine server) and
tests/test_real_vllm_tool_render.py (against a live one)."""

from __future__ import annotations

from typing import Any

PARAMS = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
HI = [{"role": "user", "content": "hi"}]


def _chat(tools: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": HI, "tools": tools}


#: chat-shaped requests (for /tokenize and /v1/chat/completions), by case
TOKENIZE_CASES: dict[str, dict[str, Any]] = {
    "described": _chat([{"type": "function", "function": {"name": "bash", "description": "Run.", "parameters": PARAMS}}]),
    "no_description": _chat([{"type": "function", "function": {"name": "bash", "parameters": PARAMS}}]),
    "odd_key_order": _chat([{"function": {"parameters": PARAMS, "description": "Run.", "name": "bash"}, "type": "function"}]),
    "extra_keys": _chat([{"type": "function", "x_vendor": 1,
                          "function": {"name": "bash", "description": "Run.", "parameters": PARAMS, "examples": ["ls"]}}]),
    "no_type": _chat([{"function": {"name": "bash", "description": "Run.", "parameters": PARAMS}}]),
    "no_parameters": _chat([{"type": "function", "function": {"name": "bash", "description": "Run."}}]),
    "strict_true": _chat([{"type": "function", "function": {"name": "bash", "description": "Run.", "parameters": PARAMS,
                                                            "strict": True}}]),
    "strict_null": _chat([{"type": "function", "function": {"name": "bash", "description": "Run.", "parameters": PARAMS,
                                                            "strict": None}}]),
    "strict_as_string": _chat([{"type": "function", "function": {"name": "bash", "parameters": PARAMS, "strict": "yes"}}]),
    "tool_level_defer_loading": _chat([{"type": "function", "defer_loading": True,
                                        "function": {"name": "bash", "description": "Run.", "parameters": PARAMS}}]),
    "two_tools_mixed": _chat([{"type": "function", "function": {"name": "bash", "parameters": PARAMS}},
                              {"function": {"description": "Read a file.", "name": "read",
                                            "parameters": {"type": "object", "properties": {}}}}]),
    "empty_tools": _chat([]),
    "custom_type_refused": _chat([{"type": "custom", "function": {"name": "bash", "parameters": PARAMS}}]),
    "no_name_refused": _chat([{"type": "function", "function": {"description": "Run.", "parameters": PARAMS}}]),
    "numeric_description_refused": _chat([{"type": "function", "function": {"name": "bash", "description": 5}}]),
    "list_parameters_refused": _chat([{"type": "function", "function": {"name": "bash", "parameters": [1]}}]),
    "tool_message_text_parts": {"model": "tiny", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                                                             "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}]},
    "tool_call_odd_keys": {"model": "tiny", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"arguments": '{"b": 1, "a": 2}', "name": "bash"},
                                                               "type": "function", "id": "c1", "extra": 3}]},
        {"role": "tool", "tool_call_id": "c1", "name": "bash", "content": "ok"}]},
    "reasoning_content_sent_back": {"model": "tiny", "messages": [
        {"role": "user", "content": "go"}, {"role": "assistant", "content": "ans", "reasoning_content": "think"},
        {"role": "user", "content": "more"}]},
    "reasoning_sent_back": {"model": "tiny", "messages": [
        {"role": "user", "content": "go"}, {"role": "assistant", "content": "ans", "reasoning": "think"},
        {"role": "user", "content": "more"}]},
}

#: Anthropic Messages requests (for /v1/messages/count_tokens), by case
MESSAGES_CASES: dict[str, dict[str, Any]] = {
    name: {"model": "tiny", "max_tokens": 5, "messages": HI, "tools": tools} for name, tools in {
        "described": [{"name": "bash", "description": "Run.", "input_schema": PARAMS}],
        "no_description": [{"name": "bash", "input_schema": PARAMS}],
        "odd_key_order_extra_keys": [{"input_schema": PARAMS, "cache_control": {"type": "ephemeral"}, "name": "bash"}],
        "schema_without_type": [{"name": "bash", "input_schema": {"properties": {"command": {"type": "string"}}}}],
    }.items()
}
