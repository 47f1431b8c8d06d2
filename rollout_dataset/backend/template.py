"""The chat template of the built-in tokenizer, and the text form of hermes tool calls.

The template is ChatML with hermes-style tools (the layout Qwen2.5-style models and vLLM's `hermes`
tool parser use):

- the system turn carries the system prompt and, when tools are given, a manifest
  (`<tools>` ... `</tools>`, one JSON function signature per line);
- an assistant turn renders its content verbatim, then each tool call as
  `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`, and ends with `<|im_end|>`;
- tool results go into a user turn as `<tool_response>\\n...\\n</tool_response>` blocks (consecutive
  tool messages share one turn);
- a `reasoning_content` field is rendered as a `<think>` block before the content; `<think>` text
  already in the content is kept as is;
- `chat_template_kwargs={"enable_thinking": false}` pre-fills an empty think block after the
  generation prompt.

Assistant turns render exactly as the backend emits them (`render_assistant_text` below is the
single place that decides that text), so for a tool-call round trip the next prompt's token ids
start with the previous prompt's ids followed by the completion ids (which end in `<|im_end|>`).
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

__all__ = [
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "CONTROL_TOKENS",
    "TOOL_CALL_START",
    "TOOL_CALL_END",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "format_tool_call",
    "render_assistant_text",
]

EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"

# Tokens that are never split by the tokenizer. The first three are "special" in the
# transformers sense (dropped by `skip_special_tokens`); the tag tokens are kept in decoded text,
# as in Qwen-style tokenizers, so a tool parser sees them.
CONTROL_TOKENS: tuple[str, ...] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
SPECIAL_TOKENS: tuple[str, ...] = CONTROL_TOKENS + (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)

# Every output goes through a `{{- '...' }}` expression and every tag strips the whitespace around
# it, so the layout of this source never leaks into the rendered text.
CHAT_TEMPLATE = r"""
{%- macro text(c) -%}
    {%- if c is string -%}{{- c -}}
    {%- elif c is none -%}
    {%- elif c is mapping -%}{{- c.text if c.text is defined else '' -}}
    {%- elif c is iterable -%}
        {%- for p in c -%}
            {%- if p is string -%}{{- p -}}
            {%- elif p.type == 'text' -%}{{- p.text -}}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}{{- c -}}
    {%- endif -%}
{%- endmacro -%}
{%- set has_system = messages | length > 0 and messages[0].role in ['system', 'developer'] -%}
{%- if tools -%}
    {{- '<|im_start|>system\n' -}}
    {%- if has_system -%}{{- text(messages[0].content) + '\n\n' -}}{%- endif -%}
    {{- '# Tools\n\nYou may call one or more functions to help with the request.\n\n' -}}
    {{- 'Function signatures, one per line, inside <tools></tools>:\n<tools>' -}}
    {%- for t in tools -%}
        {{- '\n' + ((t.function if t.function is defined else t) | tojson) -}}
    {%- endfor -%}
    {{- '\n</tools>\n\nTo call a function, answer with one JSON object per call inside <tool_call></tool_call> tags:\n' -}}
    {{- '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif has_system -%}
    {{- '<|im_start|>system\n' + text(messages[0].content) + '<|im_end|>\n' -}}
{%- endif -%}
{%- for m in messages -%}
    {%- if loop.first and has_system -%}
    {%- elif m.role == 'tool' -%}
        {%- if loop.first or loop.previtem.role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
        {{- '\n<tool_response>\n' + text(m.content) + '\n</tool_response>' -}}
        {%- if loop.last or loop.nextitem.role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
    {%- elif m.role == 'assistant' -%}
        {{- '<|im_start|>assistant\n' -}}
        {%- if m.reasoning_content is defined and m.reasoning_content is string and m.reasoning_content -%}
            {{- '<think>\n' + m.reasoning_content + '\n</think>\n\n' -}}
        {%- endif -%}
        {%- set body = text(m.content) -%}
        {{- body -}}
        {%- if m.tool_calls is defined and m.tool_calls -%}
            {%- if body and not body.endswith('\n') -%}{{- '\n' -}}{%- endif -%}
            {%- for tc in m.tool_calls -%}
                {%- set f = tc.function if tc.function is defined else tc -%}
                {%- if not loop.first -%}{{- '\n' -}}{%- endif -%}
                {{- '<tool_call>\n{"name": ' + (f.name | tojson) + ', "arguments": ' -}}
                {%- if f.arguments is string -%}{{- f.arguments -}}{%- else -%}{{- f.arguments | tojson -}}{%- endif -%}
                {{- '}\n</tool_call>' -}}
            {%- endfor -%}
        {%- endif -%}
        {{- '<|im_end|>\n' -}}
    {%- else -%}
        {{- '<|im_start|>' + m.role + '\n' + text(m.content) + '<|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- if enable_thinking is defined and not enable_thinking -%}{{- '<think>\n\n</think>\n\n' -}}{%- endif -%}
{%- endif -%}
""".strip()


def format_tool_call(name: str, arguments: Any) -> str:
    """Render one tool call exactly as the chat template renders it (hermes form).

    Args:
        name: the function name.
        arguments: the arguments, a mapping or an already-encoded JSON string.

    Returns:
        `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`.
    """
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return f'{TOOL_CALL_START}\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {args}}}\n{TOOL_CALL_END}'


def render_assistant_text(content: str | None, tool_calls: Iterable[Mapping[str, Any]] = ()) -> str:
    """The text an assistant turn emits (without the final `<|im_end|>`), as the template renders it.

    Args:
        content: the visible text (may be empty or None).
        tool_calls: `{"name": str, "arguments": mapping or JSON string}` items.

    Returns:
        The content followed by the hermes tool-call blocks; a newline separates content that does not
        end in one from the first call, and calls are separated by newlines.
    """
    body = content or ""
    calls = [format_tool_call(c["name"], c.get("arguments", {})) for c in tool_calls]
    if not calls:
        return body
    if body and not body.endswith("\n"):
        body += "\n"
    return body + "\n".join(calls)
