"""Hermes tool-call parsing, as vLLM's `hermes` tool parser does it (non-streaming and streaming).

Output text of the form `content<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>` gives
a message with `content` = the text before the first `<tool_call>` (None when empty) and
`tool_calls` whose `arguments` are JSON strings (`json.dumps(..., ensure_ascii=False)`). Text that
does not parse is returned as content with no tool calls.

The streaming parser re-reads the whole text so far on every token and sends only what is new:
content before the first tag (holding back a suffix that could be the start of `<tool_call>`), then
per call one delta with `index`, `id`, `type` and `function.name` once the name is complete, then
argument fragments (`function.arguments` only) as the arguments text grows.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from rollout_dataset.backend.template import TOOL_CALL_END, TOOL_CALL_START
from rollout_dataset.wire.content import is_json

__all__ = ["ParsedOutput", "parse_tool_calls", "StreamingToolParser", "make_tool_call_id"]

_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
_NAME_RE = re.compile(r'"name"\s*:\s*"([^"]+)"')
_ARGS_RE = re.compile(r'"arguments"\s*:\s*')


def make_tool_call_id() -> str:
    """Returns: a fresh tool-call id in vLLM's form, `chatcmpl-tool-<32 hex>`."""
    return f"chatcmpl-tool-{secrets.token_hex(16)}"


@dataclass
class ParsedOutput:
    """The message parts of a generation.

    Args:
        content: the visible text (None when empty and tools were called).
        tool_calls: OpenAI-style tool calls (`id`, `type`, `function.name`, `function.arguments`).
        called: the parser's own `tools_called` where it differs from "some call was parsed" (vLLM's
            `deepseek_v3` says True once its markup opened, with no complete call in it); None: the same.
    """

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    called: bool | None = None

    @property
    def tools_called(self) -> bool:
        """Returns: whether the parser found tool-call markup (for hermes: whether any call was parsed)."""
        return bool(self.tool_calls) if self.called is None else self.called


def parse_tool_calls(text: str) -> ParsedOutput:
    """Split output text into content and hermes tool calls.

    Args:
        text: the generated text.

    Returns:
        The parsed message parts; on any parse failure the whole text is the content.
    """
    if TOOL_CALL_START not in text:
        return ParsedOutput(content=text)
    try:
        calls = []
        for closed, open_ended in _CALL_RE.findall(text):
            obj = json.loads(closed if closed else open_ended)
            calls.append(
                {
                    "id": make_tool_call_id(),
                    "type": "function",
                    "function": {
                        "name": obj["name"],
                        "arguments": json.dumps(obj["arguments"], ensure_ascii=False),
                    },
                }
            )
    except Exception:  # noqa: BLE001 - model text that is not a well-formed tool call stays content, as vLLM's hermes parser does
        return ParsedOutput(content=text)
    content = text[: text.find(TOOL_CALL_START)]
    return ParsedOutput(content=content or None, tool_calls=calls)


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class StreamingToolParser:
    """Turns the growing output text into vLLM-shaped stream deltas (content or tool_calls)."""

    def __init__(self) -> None:
        self._sent_content = 0
        self._names: list[str | None] = []
        self._sent_args: list[str] = []

    def _content(self, text: str) -> str | None:
        if TOOL_CALL_START in text:
            end = text.index(TOOL_CALL_START)
        else:
            end = len(text) - _partial_suffix(text, TOOL_CALL_START)
        if end > self._sent_content:
            out = text[self._sent_content : end]
            self._sent_content = end
            return out
        return None

    @staticmethod
    def _call_bodies(text: str) -> list[tuple[str, bool]]:
        bodies: list[tuple[str, bool]] = []
        pos = 0
        while True:
            start = text.find(TOOL_CALL_START, pos)
            if start < 0:
                return bodies
            body_start = start + len(TOOL_CALL_START)
            end = text.find(TOOL_CALL_END, body_start)
            if end >= 0:
                bodies.append((text[body_start:end].strip(), True))
                pos = end + len(TOOL_CALL_END)
                continue
            raw = text[body_start:]
            cut = _partial_suffix(raw, TOOL_CALL_END)
            raw = (raw[:-cut] if cut else raw).strip()
            bodies.append((raw, bool(raw) and is_json(raw)))
            return bodies

    @staticmethod
    def _args_text(body: str, complete: bool) -> str | None:
        m = _ARGS_RE.search(body)
        if not m:
            return None
        raw = body[m.end() :]
        if complete:
            raw = raw.rstrip()
            if raw.endswith("}"):
                raw = raw[:-1].rstrip()
        return raw

    def update(self, text: str) -> dict[str, Any] | None:
        """Feed the whole output text so far.

        Args:
            text: all text generated up to and including the newest token.

        Returns:
            A delta (`{"content": ...}` and/or `{"tool_calls": [...]}`), or None when nothing is new.
        """
        content = self._content(text)
        deltas: list[dict[str, Any]] = []
        for i, (body, complete) in enumerate(self._call_bodies(text)):
            if i >= len(self._names):
                self._names.append(None)
                self._sent_args.append("")
            if self._names[i] is None:
                m = _NAME_RE.search(body)
                if not m:
                    break
                self._names[i] = m.group(1)
                deltas.append(
                    {"id": make_tool_call_id(), "type": "function", "index": i, "function": {"name": m.group(1)}}
                )
            args = self._args_text(body, complete)
            if args is not None and len(args) > len(self._sent_args[i]):
                diff = args[len(self._sent_args[i]) :]
                self._sent_args[i] = args
                deltas.append({"index": i, "function": {"arguments": diff}})
        if not content and not deltas:
            return None
        if not deltas:
            return {"content": content}
        # vLLM sets content explicitly (null when there is none) next to tool-call deltas
        return {"content": content or None, "tool_calls": deltas}
