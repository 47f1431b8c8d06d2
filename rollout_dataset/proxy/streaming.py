"""Reassemble a streamed chat/completions response into the object a non-streamed call returns.

SSE parsing itself is httpx-sse's (`httpx_sse.EventSource`, in `rollout_dataset.proxy.stream_relay`);
this module only folds the parsed chunks: content and reasoning text, tool-call
deltas merged by index, finish and stop reasons, usage, prompt ids (first chunk), completion ids
and logprobs concatenated over chunks.
"""

from __future__ import annotations

from typing import Any

__all__ = ["StreamAssembler"]


_TOP_KEYS = ("id", "created", "model", "system_fingerprint", "service_tier")


class _Choice:
    __slots__ = ("index", "role", "text", "extra_text", "tool_calls", "token_ids", "prompt_token_ids",
                 "logprobs", "finish_reason", "stop_reason", "seen_logprobs", "seen_ids")

    def __init__(self, index: int) -> None:
        self.index = index
        self.role: str | None = None
        self.text: list[str] = []
        self.extra_text: dict[str, list[str]] = {}
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.token_ids: list[int] = []
        self.prompt_token_ids: list[int] | None = None
        self.logprobs: dict[str, list[Any]] = {}
        self.finish_reason: str | None = None
        self.stop_reason: Any = None
        self.seen_logprobs = False
        self.seen_ids = False


class StreamAssembler:
    """Fold parsed stream chunks of one call into a full response.

    Args:
        kind: ``"chat"`` (chat.completion.chunk) or ``"completions"`` (text_completion).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.top: dict[str, Any] = {}
        self.prompt_token_ids: list[int] | None = None
        self.usage: dict[str, Any] | None = None
        self.errors: list[Any] = []
        self.chunks = 0
        self._choices: dict[int, _Choice] = {}
        self._missing_top: tuple[str, ...] = _TOP_KEYS  # top-level keys not seen yet (the first one seen wins)
        self._top_seen = 0

    def add(self, chunk: Any) -> None:
        """Fold one parsed chunk in (non-dict chunks are ignored).

        Args:
            chunk: one parsed SSE data payload.
        """
        if not isinstance(chunk, dict):
            return
        self.chunks += 1
        if "error" in chunk and chunk["error"]:
            self.errors.append(chunk["error"])
        if self._missing_top:
            for key in self._missing_top:
                if key in chunk:
                    self.top[key] = chunk[key]
            if len(self.top) != self._top_seen:
                self._top_seen = len(self.top)
                self._missing_top = tuple(key for key in _TOP_KEYS if key not in self.top)
        if isinstance(chunk.get("prompt_token_ids"), list):
            self.prompt_token_ids = chunk["prompt_token_ids"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for raw in chunk.get("choices") or ():
            if isinstance(raw, dict):
                self._add_choice(raw)

    def _add_choice(self, raw: dict[str, Any]) -> None:
        index = raw.get("index", 0)
        choice = self._choices.get(index)
        if choice is None:
            choice = self._choices[index] = _Choice(index)
        if self.kind == "chat":
            delta = raw.get("delta") or {}
            if isinstance(delta, dict):
                self._add_delta(choice, delta)
        elif isinstance(raw.get("text"), str):
            choice.text.append(raw["text"])
        if isinstance(raw.get("token_ids"), list):
            choice.token_ids.extend(raw["token_ids"])
            choice.seen_ids = True
        if isinstance(raw.get("prompt_token_ids"), list):
            choice.prompt_token_ids = raw["prompt_token_ids"]
        lp = raw.get("logprobs")
        if isinstance(lp, dict):
            choice.seen_logprobs = True
            for key, value in lp.items():
                if isinstance(value, list):
                    choice.logprobs.setdefault(key, []).extend(value)
        if raw.get("finish_reason") is not None:
            choice.finish_reason = raw["finish_reason"]
        if raw.get("stop_reason") is not None:
            choice.stop_reason = raw["stop_reason"]

    @staticmethod
    def _add_delta(choice: _Choice, delta: dict[str, Any]) -> None:
        for key, value in delta.items():
            if value is None:
                continue
            if key == "role":
                choice.role = value
            elif key == "content":
                choice.text.append(value)
            elif key == "tool_calls":
                for call in value or ():
                    StreamAssembler._add_tool_call(choice, call)
            elif isinstance(value, str):
                choice.extra_text.setdefault(key, []).append(value)

    @staticmethod
    def _add_tool_call(choice: _Choice, call: dict[str, Any]) -> None:
        idx = call.get("index", len(choice.tool_calls))
        merged = choice.tool_calls.get(idx)
        if merged is None:
            merged = choice.tool_calls[idx] = {"id": None, "type": "function",
                                               "function": {"name": None, "arguments": ""}}
        if call.get("id"):
            merged["id"] = call["id"]
        if call.get("type"):
            merged["type"] = call["type"]
        fn = call.get("function") or {}
        if fn.get("name"):
            if merged["function"]["name"] is None:
                merged["function"]["name"] = fn["name"]
            elif fn["name"] != merged["function"]["name"]:
                merged["function"]["name"] += fn["name"]
        if fn.get("arguments"):
            merged["function"]["arguments"] += fn["arguments"]

    def response(self) -> dict[str, Any]:
        """The reassembled response, shaped like the non-streamed one.

        Returns:
            ``chat.completion`` (or ``text_completion``) object with every field the chunks held,
            including ``prompt_token_ids``, per-choice ``token_ids`` and ``logprobs``.
        """
        out: dict[str, Any] = dict(self.top)
        out["object"] = "chat.completion" if self.kind == "chat" else "text_completion"
        choices = []
        for index in sorted(self._choices):
            c = self._choices[index]
            if self.kind == "chat":
                message: dict[str, Any] = {"role": c.role or "assistant", "content": "".join(c.text) or None}
                for key, parts in c.extra_text.items():
                    message[key] = "".join(parts)
                if c.tool_calls:
                    message["tool_calls"] = [c.tool_calls[i] for i in sorted(c.tool_calls)]
                choice: dict[str, Any] = {"index": index, "message": message}
            else:
                choice = {"index": index, "text": "".join(c.text)}
                if c.prompt_token_ids is not None:
                    choice["prompt_token_ids"] = c.prompt_token_ids
            choice["logprobs"] = dict(c.logprobs) if c.seen_logprobs else None
            choice["finish_reason"] = c.finish_reason
            choice["stop_reason"] = c.stop_reason
            choice["token_ids"] = c.token_ids if c.seen_ids else None
            choices.append(choice)
        out["choices"] = choices
        out["usage"] = self.usage
        if self.kind == "chat" or self.prompt_token_ids is not None:
            out["prompt_token_ids"] = self.prompt_token_ids
        return out
