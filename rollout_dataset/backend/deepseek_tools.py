"""DeepSeek-V3/R1 tool calls, as vLLM 0.32's `deepseek_v3` tool parser reads them (`--tool-call-parser deepseek_v3`).

DeepSeek-R1's chat template renders an assistant turn's tool calls as
`content<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\nARGS\\n```<｜tool▁call▁end｜>`,
further calls each after a `\\n`, then `<｜tool▁calls▁end｜>` (and the eos). The markers are single tokens
of the V3/R1 vocabulary. What vLLM 0.32 answers, read in `vllm/tool_parsers/deepseekv3_tool_parser.py`
and `vllm/parser/abstract_parser.py` and checked by running them (`tests/test_real_vllm_deepseek_tools.py`):

- Non-streaming. No `<｜tool▁calls▁begin｜>` in the content: no tool calls, the content as it came. Else
  every call written on the lines above is a tool call, its `arguments` the text between the fences as
  it came (never checked as JSON), `content` the text before `<｜tool▁calls▁begin｜>` (null when empty or
  whitespace only); text after the calls is dropped. A call whose markup is not complete (never
  closed, arguments over several lines) is dropped silently: with none left, the message is the content
  before the markup and no tool calls (finish reason `stop`). A call whose type is not `function`
  fails the whole parse: the full text is the content, markup included.
- Streaming (one token per chunk). Content deltas until the `<｜tool▁calls▁begin｜>` id is sampled;
  the marker tokens themselves give `{"content": ""}` or nothing; a call's name delta (`id`, `type`,
  `index`, `function.name`) once `NAME\\n` is complete; then argument fragments as the text between
  the fences grows (a trailing `\\n` or backtick held back). The stream and the whole answer can
  differ for broken markup, as on vLLM: a call never closed streams its name and arguments (finish
  reason `tool_calls`) where the whole answer has no tool call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from rollout_dataset.backend.hermes import ParsedOutput, make_tool_call_id

__all__ = [
    "CALLS_BEGIN", "CALLS_END", "CALL_BEGIN", "CALL_END", "CALL_SEP",
    "render_deepseek_calls", "parse_deepseek_tool_calls", "DeepSeekStreamingToolParser", "deepseek_marker_ids",
]

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
CALL_SEP = "<｜tool▁sep｜>"

# `.` stops at a newline: a call's type, name and arguments each sit on one line
_CALL_RE = re.compile(f"{CALL_BEGIN}(.*){CALL_SEP}(.*)\n```json\n(.*)\n```{CALL_END}")
_STREAM_CALL_RE = re.compile(f"(.*){CALL_SEP}(.*)\n```json\n(.*[^\n`])")
_STREAM_NAME_RE = re.compile(f"(.*){CALL_SEP}(.*)\n")


def render_deepseek_calls(content: str | None, tool_calls: Iterable[Mapping[str, Any]]) -> str:
    """The text of an assistant turn with tool calls, as DeepSeek-R1's template renders it (no eos).

    Args:
        content: the text before the calls (may be empty or None).
        tool_calls: `{"name": str, "arguments": JSON string or mapping}` items.

    Returns:
        The content, then the calls block; the content alone when there are no calls.
    """
    import json

    calls = []
    for c in tool_calls:
        args = c.get("arguments", {})
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        calls.append(f"{CALL_BEGIN}function{CALL_SEP}{c['name']}\n```json\n{args}\n```{CALL_END}")
    body = content or ""
    return body + (CALLS_BEGIN + "\n".join(calls) + CALLS_END if calls else "")


def parse_deepseek_tool_calls(text: str) -> ParsedOutput:
    """Split a reply's content into content and tool calls, as vLLM 0.32's `deepseek_v3` parser does.

    Args:
        text: the reply's content (after a reasoning parser took the reasoning out).

    Returns:
        The parts; `called` is True once the markup opened, even when no call in it was complete
        (vLLM then answers the content before the markup and no tool calls).
    """
    if CALLS_BEGIN not in text:
        return ParsedOutput(content=text)
    calls = []
    for kind, name, arguments in _CALL_RE.findall(text):
        if kind != "function":  # vLLM's ToolCall refuses any other type: the parse fails as a whole
            return ParsedOutput(content=text)
        calls.append({"id": make_tool_call_id(), "type": "function",
                      "function": {"name": name, "arguments": arguments}})
    content = text[: text.find(CALLS_BEGIN)]
    return ParsedOutput(content=content or None, tool_calls=calls, called=True)


def deepseek_marker_ids(tokenizer: Any) -> tuple[int, int, int]:
    """The ids of `<｜tool▁calls▁begin｜>`, `<｜tool▁call▁begin｜>` and `<｜tool▁call▁end｜>`.

    Args:
        tokenizer: the serving tokenizer.

    Returns:
        The three ids.

    Raises:
        ValueError: the vocabulary lacks one of the markers (vLLM refuses to start then too).
    """
    vocab = tokenizer.get_vocab()
    missing = [m for m in (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END) if m not in vocab]
    if missing:
        raise ValueError(f"--tool-call-parser deepseek_v3: the tokenizer has no {', '.join(missing)} token")
    return vocab[CALLS_BEGIN], vocab[CALL_BEGIN], vocab[CALL_END]


def _args_delta(index: int, arguments: str) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, "function": {"arguments": arguments}}]}


@dataclass
class DeepSeekStreamingToolParser:
    """One streamed choice's tool-call reader: feed it each content token (after the reasoning).

    Args:
        calls_begin_id: the id of `<｜tool▁calls▁begin｜>`.
        call_begin_id: the id of `<｜tool▁call▁begin｜>`.
        call_end_id: the id of `<｜tool▁call▁end｜>`.
    """

    calls_begin_id: int
    call_begin_id: int
    call_end_id: int
    tools_streamed: bool = False
    _text: str = ""
    _ids: list[int] = field(default_factory=list)
    _tool: int = -1
    _name_sent: bool = False
    _parsed: list[dict[str, str]] = field(default_factory=list)

    def feed(self, delta_text: str, delta_ids: Sequence[int]) -> dict[str, Any] | None:
        """Read one more piece of the content.

        Args:
            delta_text: the text the token adds ("" for the `</think>` token that ends the reasoning).
            delta_ids: the token's id (none for the `</think>` token).

        Returns:
            The wire delta (`{"content": ...}` or `{"tool_calls": [...]}`), or None for nothing to send.
        """
        prev_ids = self._ids
        self._text += delta_text
        self._ids = prev_ids + list(delta_ids)
        delta = self._delta(prev_ids, delta_text, len(delta_ids))
        if delta and "tool_calls" in delta:
            self.tools_streamed = True
        return delta

    def _delta(self, prev_ids: list[int], delta_text: str, n_ids: int) -> dict[str, Any] | None:
        text, ids = self._text, self._ids
        if self.calls_begin_id not in ids:
            return {"content": delta_text}
        piece = delta_text.replace(CALLS_BEGIN, "").replace(CALLS_END, "")
        opened, closed = ids.count(self.call_begin_id), ids.count(self.call_end_id)
        was_opened, was_closed = prev_ids.count(self.call_begin_id), prev_ids.count(self.call_end_id)
        if opened == closed and was_closed == closed and CALL_END not in piece:
            return {"content": piece}  # between calls, or the markers themselves
        portion: str | None = None
        after_text: str | None = None
        if CALL_END in piece:
            # vLLM reads the call from the text with this token's text counted twice, as it does
            portion = (text + piece).split(CALL_BEGIN)[-1].split(CALL_END)[0].rstrip()
            piece = piece.split(CALL_END)[0].rstrip()
            after_text = piece
        if opened > closed and opened > was_opened:  # a new call begins
            portion = text.split(CALL_BEGIN)[-1] if n_ids > 1 else None
            after_text = None
            self._tool += 1
            self._name_sent = False
        elif opened > closed:  # inside a call
            portion, after_text = text.split(CALL_BEGIN)[-1], None
        elif opened == closed and closed >= was_closed:  # the call closes
            if self._tool >= len(self._parsed):  # nothing parsed for this call (vLLM: an IndexError it swallows)
                return None
            if self._parsed[self._tool].get("arguments"):
                if '"}' not in piece:
                    return None
                return _args_delta(self._tool, piece[: piece.rindex('"}')] + '"}')
        else:
            return {"content": piece.replace(CALL_BEGIN, "").replace(CALL_END, "")}
        call: dict[str, str] = {}
        if portion:
            m = _STREAM_CALL_RE.match(portion) or _STREAM_NAME_RE.match(portion)
            if m is None:
                return None
            call = {"name": m.group(2), "arguments": m.group(3) if m.re is _STREAM_CALL_RE else ""}
        if not self._name_sent:
            if not call.get("name"):
                return None
            self._name_sent = True
            return {"tool_calls": [{"id": make_tool_call_id(), "type": "function", "index": self._tool,
                                    "function": {"name": call["name"]}}]}
        if portion is None:
            return {"content": piece} if after_text is not None else None
        if len(self._parsed) <= self._tool:
            self._parsed.append({})
        before, now = self._parsed[self._tool].get("arguments"), call.get("arguments")
        delta = None
        if now and not before:
            delta = _args_delta(self._tool, now)
        elif now and before and len(now) > len(before) and now.startswith(before):
            delta = _args_delta(self._tool, now[len(before):])
        self._parsed[self._tool] = call
        return delta
