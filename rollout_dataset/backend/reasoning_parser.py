"""vLLM 0.32's reasoning parsers `qwen3` and `deepseek_r1`, for the local backend (`--reasoning-parser`).

vLLM ships these inside its server (no library exposes them), so the rule is kept here, small, and
checked against a genuine vLLM 0.32 CPU server (`tests/test_real_vllm_reasoning.py`). What vLLM 0.32
does, read in `vllm/parser/qwen3.py` + `vllm/parser/engine/` (qwen3), `vllm/reasoning/basic_parsers.py`
+ `deepseek_r1_reasoning_parser.py` (deepseek_r1) and `vllm/parser/abstract_parser.py` (streaming):

- The message key is `reasoning` (not `reasoning_content`); usage gains
  `completion_tokens_details: {"reasoning_tokens": N}` (streamed usage chunk too).
- `token_ids` and logprobs cover every sampled id, `<think>` and `</think>` included.
- qwen3: the reply starts in reasoning (a leading `<think>` is optional and dropped; so is any
  `<think>` inside reasoning); `</think>` ends it (a later `</think>` is dropped from content); a
  `<tool_call>` inside reasoning also ends it (the call is parsed as a tool call); no end: `content`
  null. Reasoning keeps its whitespace; empty reasoning is null. `chat_template_kwargs.enable_thinking:
  false`: everything is content. Reasoning tokens: ids before the end, `<think>` not counted.
- deepseek_r1: text up to and including the first `<think>` is dropped; up to the first `</think>`
  is reasoning (possibly ""), the rest content (null when empty); no `</think>`: all reasoning,
  content null, no tool calls. Reasoning tokens: ids strictly inside `<think>`…`</think>` only.
- Streaming (one token per chunk): the `<think>` and `</think>` chunks carry `delta: {}` (ids and
  logprobs only), reasoning chunks `{"reasoning": text}` (deepseek_r1 also for a token with no text,
  such as the eos: `{"reasoning": ""}`; qwen3 sends `{}`), then content/tool-call deltas as without a
  parser. Before the first token vLLM looks at the prompt: if reasoning already ended there, the
  whole reply streams as content (qwen3: the last of `</think>` / `<think>` / `<|im_start|>` /
  `<|im_end|>` counting back is `</think>`, or thinking is off; deepseek_r1: the last of
  `<think>` / `</think>` anywhere in the prompt is `</think>`). Only streaming does this check, so a
  streamed and a non-streamed answer to such a prompt differ, as on vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

__all__ = ["REASONING_PARSERS", "ReasoningParser", "ReasoningStream", "make_reasoning_parser"]

#: the `--reasoning-parser` names the local backend knows (vLLM's names)
REASONING_PARSERS = ("qwen3", "deepseek_r1")

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL_START = "<tool_call>"
TURN_BOUNDARIES = ("<|im_start|>", "<|im_end|>")


@dataclass
class ReasoningParser:
    """One parser bound to a tokenizer.

    Args:
        name: `qwen3` or `deepseek_r1`.
        start_id: the id of `<think>`.
        end_id: the id of `</think>`.
        tool_start_id: the id of `<tool_call>` (None when the vocabulary has no such token).
        boundary_ids: ids of the ChatML turn markers (qwen3's prompt check stops at them).
    """

    name: str
    start_id: int
    end_id: int
    tool_start_id: int | None = None
    boundary_ids: frozenset[int] = field(default_factory=frozenset)

    def split(self, text: str, thinking: bool = True) -> tuple[str | None, str | None]:
        """Split a whole reply into (reasoning, content), as vLLM 0.32's non-streaming path does.

        Args:
            text: the decoded reply (special tokens kept).
            thinking: False when the request set `chat_template_kwargs.enable_thinking: false`.

        Returns:
            `(reasoning, content)`; None where vLLM answers null.
        """
        if self.name == "deepseek_r1":
            head, sep, tail = text.partition(THINK_START)
            rest = tail if sep else head
            if THINK_END not in rest:
                return rest, None
            reasoning, _, content = rest.partition(THINK_END)
            return reasoning, content or None
        if not thinking:
            return None, text
        end = text.find(THINK_END)
        tool = text.find(TOOL_CALL_START)
        if end >= 0 and (tool < 0 or end < tool):
            reasoning, content = text[:end], text[end + len(THINK_END):].replace(THINK_END, "")
        elif tool >= 0:
            reasoning, content = text[:tool], text[tool:]
        else:
            reasoning, content = text, ""
        reasoning = reasoning.replace(THINK_START, "")
        return reasoning or None, content or None

    def reasoning_tokens(self, ids: Sequence[int], thinking: bool = True) -> int:
        """The `completion_tokens_details.reasoning_tokens` vLLM 0.32 reports for these sampled ids.

        Args:
            ids: the sampled ids.
            thinking: False with `enable_thinking: false`.

        Returns:
            The count.
        """
        count = 0
        if self.name == "deepseek_r1":
            depth = 0
            for t in ids:
                if t == self.start_id:
                    depth += 1
                elif t == self.end_id:
                    depth = max(0, depth - 1)
                elif depth > 0:
                    count += 1
            return count
        if not thinking:
            return 0
        for t in ids:
            if t == self.end_id or t == self.tool_start_id:
                break
            if t != self.start_id:
                count += 1
        return count

    def prompt_ends_reasoning(self, prompt_ids: Sequence[int], thinking: bool = True) -> bool:
        """Whether vLLM's streaming path treats reasoning as already over before the first token.

        Args:
            prompt_ids: the prompt's ids.
            thinking: False with `enable_thinking: false`.

        Returns:
            True: the whole reply streams as content.
        """
        if self.name == "qwen3" and not thinking:
            return True
        for t in reversed(prompt_ids):
            if t == self.end_id:
                return True
            if t == self.start_id:
                return False
            if self.name == "qwen3" and t in self.boundary_ids:
                break
        return False

    def stream(self, prompt_ids: Sequence[int], thinking: bool = True) -> "ReasoningStream":
        """Args: prompt_ids: the prompt; thinking: see `split`. Returns: a fresh per-choice stream state."""
        return ReasoningStream(self, ended=self.prompt_ends_reasoning(prompt_ids, thinking))


@dataclass
class ReasoningStream:
    """The per-choice state of a streamed reply: feed it one sampled token at a time.

    Args:
        parser: the parser.
        ended: reasoning is over (what follows is content).
    """

    parser: ReasoningParser
    ended: bool = False

    def feed(self, token_id: int, delta_text: str) -> tuple[dict[str, Any] | None, str | None]:
        """Classify one sampled token.

        Args:
            token_id: the sampled id.
            delta_text: the text it adds (may be "" while bytes are held).

        Returns:
            `(reasoning_delta, content_delta)`: a `{"reasoning": ...}` delta while reasoning, else
            None; the text to hand to the content/tool-call path once reasoning has ended (None
            while reasoning or on the `</think>` token itself).
        """
        p = self.parser
        if self.ended:
            return None, delta_text
        if token_id == p.end_id:
            self.ended = True
            return None, None
        if token_id == p.start_id:
            return None, None
        if p.name == "qwen3" and token_id == p.tool_start_id:
            self.ended = True  # an implicit end: the tool call is parsed as one
            return None, delta_text
        if not delta_text and p.name == "qwen3":
            return None, None  # deepseek_r1 streams `{"reasoning": ""}` for a token with no text (the eos)
        return {"reasoning": delta_text}, None


def make_reasoning_parser(name: str, tokenizer: Any) -> ReasoningParser:
    """Bind a reasoning parser to a tokenizer.

    Args:
        name: one of `REASONING_PARSERS`.
        tokenizer: the serving tokenizer.

    Returns:
        The parser.

    Raises:
        ValueError: unknown name, or the vocabulary lacks `<think>`/`</think>` (vLLM refuses it too).
    """
    if name not in REASONING_PARSERS:
        raise ValueError(f"unknown reasoning parser {name!r}; choose from {', '.join(REASONING_PARSERS)}")
    vocab = tokenizer.get_vocab()
    start, end = vocab.get(THINK_START), vocab.get(THINK_END)
    if start is None or end is None:
        raise ValueError(f"--reasoning-parser {name}: the tokenizer has no {THINK_START}/{THINK_END} tokens")
    boundaries = frozenset(vocab[t] for t in TURN_BOUNDARIES if t in vocab)
    return ReasoningParser(name, start, end, vocab.get(TOOL_CALL_START), boundaries)
