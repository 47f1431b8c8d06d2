"""The local backend's tool-call parsers (vLLM's `--tool-call-parser`): `hermes` and `deepseek_v3`.

A parser decides three things, one definition each: the text the backend emits for a policy's tool
calls (the chat template's layout, so a history sent back renders to the ids sampled), how a reply's
content splits into content and tool calls, and how a streamed reply reads token by token.
`hermes` is `rollout_dataset.backend.hermes` (Qwen-style templates, the built-in tokenizer);
`deepseek_v3` is `rollout_dataset.backend.deepseek_tools` (DeepSeek-V3/R1 templates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Protocol

from rollout_dataset.backend.deepseek_tools import (
    DeepSeekStreamingToolParser,
    deepseek_marker_ids,
    parse_deepseek_tool_calls,
    render_deepseek_calls,
)
from rollout_dataset.backend.hermes import ParsedOutput, StreamingToolParser, parse_tool_calls
from rollout_dataset.backend.template import render_assistant_text

__all__ = ["TOOL_CALL_PARSERS", "DEFAULT_TOOL_CALL_PARSER", "ToolCallFormat", "ToolStream", "make_tool_call_format"]

#: the `--tool-call-parser` names the local backend knows (vLLM's names)
TOOL_CALL_PARSERS = ("hermes", "deepseek_v3")
DEFAULT_TOOL_CALL_PARSER = "hermes"


class ToolStream(Protocol):
    """One streamed choice's tool-call reader."""

    #: a delta so far held tool calls
    tools_streamed: bool

    def feed(self, delta_text: str, delta_ids: list[int]) -> dict[str, Any] | None:
        """Read one token's text and id; returns the wire delta or None."""
        ...


class _HermesStream:
    """The hermes reader, which re-reads the whole text on every token, behind `ToolStream`."""

    def __init__(self) -> None:
        self.parser = StreamingToolParser()
        self.text = ""
        self.tools_streamed = False

    def feed(self, delta_text: str, delta_ids: list[int]) -> dict[str, Any] | None:
        if not delta_text:
            return None
        self.text += delta_text
        delta = self.parser.update(self.text)
        if delta and "tool_calls" in delta:
            self.tools_streamed = True
        return delta


@dataclass(frozen=True)
class ToolCallFormat:
    """A tool-call parser bound to the serving tokenizer.

    Args:
        name: one of `TOOL_CALL_PARSERS`.
        marker_ids: deepseek_v3's `<｜tool▁calls▁begin｜>`, `<｜tool▁call▁begin｜>`, `<｜tool▁call▁end｜>` ids.
    """

    name: str = DEFAULT_TOOL_CALL_PARSER
    marker_ids: tuple[int, int, int] | None = None

    @property
    def reads_end_of_reasoning(self) -> bool:
        """Returns: vLLM hands this parser the (empty) content of the token that ends the reasoning, so
        that token's chunk carries `{"content": ""}` (deepseek_v3)."""
        return self.name == "deepseek_v3"

    @property
    def content_never_null_when_forced(self) -> bool:
        """Returns: with `tool_choice` `required` or a named function vLLM reads the reply as for `auto`
        and answers `content` "" where there is none (deepseek_v3, whose strict structural tag makes
        vLLM parse forced calls from the model's own markup)."""
        return self.name == "deepseek_v3"

    def render(self, content: str | None, tool_calls: Iterable[Mapping[str, Any]]) -> str:
        """Args: content: the text; tool_calls: `{"name", "arguments"}` items.
        Returns: the assistant turn's text as the template renders it (no end-of-turn token)."""
        if self.name == "deepseek_v3":
            return render_deepseek_calls(content, tool_calls)
        return render_assistant_text(content, tool_calls)

    def parse(self, text: str) -> ParsedOutput:
        """Args: text: the reply's content. Returns: content and tool calls, as vLLM's parser splits them."""
        return parse_deepseek_tool_calls(text) if self.name == "deepseek_v3" else parse_tool_calls(text)

    def stream(self) -> ToolStream:
        """Returns: a fresh reader for one streamed choice."""
        if self.name == "deepseek_v3":
            assert self.marker_ids is not None
            return DeepSeekStreamingToolParser(*self.marker_ids)
        return _HermesStream()


def make_tool_call_format(name: str | None, tokenizer: Any) -> ToolCallFormat:
    """Bind a tool-call parser to the serving tokenizer.

    Args:
        name: one of `TOOL_CALL_PARSERS` (None: `hermes`).
        tokenizer: the serving tokenizer.

    Returns:
        The format.

    Raises:
        ValueError: unknown name, or the vocabulary lacks the parser's markers (vLLM refuses it too).
    """
    name = name or DEFAULT_TOOL_CALL_PARSER
    if name not in TOOL_CALL_PARSERS:
        raise ValueError(f"unknown tool-call parser {name!r}; choose from {', '.join(TOOL_CALL_PARSERS)}")
    if name == "deepseek_v3":
        return ToolCallFormat(name, deepseek_marker_ids(tokenizer))
    return ToolCallFormat(name)
