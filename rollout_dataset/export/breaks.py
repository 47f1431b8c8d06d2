"""The cause of a prefix break, from the ids: the earlier call's sampled ids against the next prompt.

A prefix break is a call whose messages extend an earlier call's history while its prompt ids do not
hold that call's prompt + sampled ids. The cause is read from where the two first differ:

- before the earlier reply: ``template_dropped_reasoning`` when the only change is think blocks left
  out of earlier turns (Qwen3 after a new user message), else ``history_rerendered`` (the template
  renders the same history differently),
  unless the difference lies in the earlier prompt's last ids and its text still opens the next
  prompt's: the reply's first characters merged with them into other ids (a BPE merge across the
  reply boundary, Qwen3's ``assistant\n`` + a reply sent back with its leading ``\n\n``), and the
  break is read at the reply as below (``reply_boundary_merged`` when nothing else changed);
- at the reply, with a tokenizer to decode the ids (`rollout_dataset.reasoning.explain_reply_break`):
  ``template_dropped_reasoning`` (the history holds what followed the reasoning, and the template
  leaves the reasoning out even when it is sent back: checked by re-rendering the harness's history
  with the sampled reasoning put back, never guessed from a think block), ``harness_dropped_reasoning``
  (the harness sent the reply back without its reasoning where the template keeps it),
  ``end_of_turn_rerendered`` (Harmony renders ``<|end|>`` where ``<|return|>`` was sampled),
  ``whitespace_drift`` (e.g. a doubled newline before ``<tool_call>``), ``reply_all_reasoning`` (the
  reply was all reasoning; its content is empty), ``harmony_rerendered`` (the same Harmony messages
  with their headers written another way: vLLM's ``commentary json`` for a sampled
  ``commentary <|constrain|>json`` tool call), ``content_changed``;
- without a tokenizer: ``reply_changed`` (the ids show where, not why).

`rollout_dataset.reasoning.BREAK_STATUS` maps each cause to a continuity status.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from rollout_dataset.graph import TurnNode
from rollout_dataset.reasoning import (
    BREAK_STATUS,
    MAX_BOUNDARY_MERGE,
    describe_edit,
    only_reasoning_removed,
    explain_reply_break,
    harness_sent_reasoning,
    reasoning_text,
)
from rollout_dataset.tokenizers import common_prefix, template_messages
from rollout_dataset.wire.chat_tools import template_tools

__all__ = ["BreakCause", "CAUSE_TAG", "REASONING_CAUSES", "explain_break", "template_keeps_reasoning"]

log = logging.getLogger(__name__)

#: causes after which the new sequence's prompt lacks reasoning the model sampled earlier
REASONING_CAUSES = frozenset({"template_dropped_reasoning", "harness_dropped_reasoning", "reply_all_reasoning"})

#: how a prefix_break finding's message names its cause code: ``... [template_dropped_reasoning] ...``
CAUSE_TAG = re.compile(r"\[([a-z_]+)\]")

_SENTENCES = {
    "history_rerendered": "the chat template rendered the same history differently",
    "template_dropped_reasoning": "the chat template drops earlier reasoning here by design",
    "harness_dropped_reasoning": "the harness sent the reply back without its reasoning, which the template keeps here",
    "end_of_turn_rerendered": "the template closes the reply with another end-of-turn token than the sampled one",
    "whitespace_drift": "the reply differs from the sampled one only in whitespace (e.g. a doubled newline "
                        "before a tool call: the tool parser left a newline in content and the template adds one)",
    "reply_all_reasoning": "the reply was all reasoning (no end of reasoning sampled), so its content is empty",
    "harmony_rerendered": "the history holds the same Harmony messages with their headers written another way "
                          "(a tool call's `commentary json` for the sampled `commentary <|constrain|>json`)",
    "content_changed": "the reply in the history differs from the sampled one",
    "reply_boundary_merged": "the reply's first characters merged with the end of the earlier prompt into other ids "
                             "(a BPE merge across the reply boundary)",
    "reply_changed": "the reply in the history differs from the sampled ids (give a tokenizer to name why)",
}


@dataclass(frozen=True)
class BreakCause:
    """Why a call's prompt does not hold an earlier call's sampled ids.

    Attributes:
        cause: a code (see the module docstring).
        status: the continuity status it stands for (``reasoning_dropped`` or ``not_repaired``).
        position: the first differing prompt position.
        sentence: the cause for people.
    """

    @property
    def tagged(self) -> str:
        """Returns: the sentence with the code in brackets (`CAUSE_TAG` reads it back)."""
        return f"{self.sentence} [{self.cause}]"

    cause: str
    status: str
    position: int
    sentence: str

    @property
    def reasoning_absent(self) -> bool:
        """Returns: whether reasoning sampled earlier is absent from the new prompt."""
        return self.cause in REASONING_CAUSES


def _decode(tokenizer: Any, ids: list[int]) -> str:
    return str(tokenizer.decode(ids, skip_special_tokens=False))


def template_keeps_reasoning(tokenizer: Any, messages: list[Any], at: int, reasoning: str,
                             tools: list[Any] | None = None, kwargs: dict[str, Any] | None = None) -> bool | None:
    """Whether the chat template keeps an assistant turn's reasoning when it is sent back.

    Args:
        tokenizer: a tokenizer with a chat template.
        messages: the harness's request messages.
        at: the position of the assistant turn.
        reasoning: the reasoning the model sampled there (markers removed).
        tools: the request's tools.
        kwargs: the request's ``chat_template_kwargs``.

    Returns:
        True/False from the render of the messages with ``reasoning_content`` put back (the field
        Qwen3-style templates read); None when the template could not render them.
    """
    restored = template_messages(messages)
    restored[at] = {**restored[at], "reasoning_content": reasoning}
    try:
        text = tokenizer.apply_chat_template(restored, tools=template_tools(tools), add_generation_prompt=True,
                                             tokenize=False, **(kwargs or {}))
    except Exception as exc:  # noqa: BLE001 - any template failure means "unknown", named by the caller
        log.debug("re-rendering with reasoning put back failed: %s", exc)
        return None
    return reasoning.strip() in str(text)


def explain_break(earlier: TurnNode, call: TurnNode, tokenizer: Any = None,
                  kwargs: dict[str, Any] | None = None) -> BreakCause:
    """Name why `call`'s prompt does not hold `earlier`'s prompt + sampled ids.

    Args:
        earlier: the call whose history `call`'s messages extend.
        call: the call that started a new root.
        tokenizer: decodes ids (``decode``) and renders chat (``apply_chat_template``); optional.
        kwargs: `call`'s ``chat_template_kwargs``.

    Returns:
        The cause.
    """
    held = list(earlier.prompt_ids) + list(earlier.sampled_ids)
    pos = common_prefix(held, list(call.prompt_ids))
    n_prompt = len(earlier.prompt_ids)
    following: str | None = None
    if tokenizer is not None and n_prompt - MAX_BOUNDARY_MERGE <= pos < n_prompt:
        boundary = _decode(tokenizer, list(earlier.prompt_ids[pos:]))
        after = _decode(tokenizer, list(call.prompt_ids[pos:]))
        if after.startswith(boundary):  # merged across the reply boundary: read the break at the reply
            following = after[len(boundary):]
    elif tokenizer is not None and pos >= n_prompt:
        following = _decode(tokenizer, list(call.prompt_ids[n_prompt:]))
    merged = pos < n_prompt and following is not None
    edit: str | None = None
    history_reasoning = False
    if pos < n_prompt and following is None and tokenizer is not None:
        # the same messages rendered again without the reasoning of earlier turns (Qwen3 after a new user turn)
        history_reasoning = only_reasoning_removed(_decode(tokenizer, held[pos:]),
                                                   _decode(tokenizer, list(call.prompt_ids[pos:])))
    if history_reasoning:
        cause = "template_dropped_reasoning"
    elif pos < n_prompt and following is None:
        cause = "history_rerendered"
    elif following is None:
        cause = "reply_changed"
    else:
        sampled = _decode(tokenizer, list(earlier.sampled_ids))
        kind = explain_reply_break(sampled, following)
        if merged and following.startswith(sampled):
            kind = "reply_boundary_merged"
        if kind == "content_changed":
            edit = describe_edit(sampled, following)
        cause = kind
        if kind == "reasoning_dropped":
            at = len(earlier.request_messages)
            sent = call.request_messages[at] if at < len(call.request_messages) else None
            if harness_sent_reasoning(sent):  # sent back, yet absent: the template left it out
                cause = "template_dropped_reasoning"
            else:
                reasoning = reasoning_text(sampled)
                keeps = (template_keeps_reasoning(tokenizer, call.request_messages, at, reasoning,
                                                  call.request_tools, kwargs)
                         if reasoning and hasattr(tokenizer, "apply_chat_template") else None)
                # the template drops it even when put back: by design; else the harness dropped it
                cause = "template_dropped_reasoning" if keeps is False else "harness_dropped_reasoning"
    sentence = _SENTENCES[cause]
    if edit is not None:
        sentence += f": {edit}"
    if history_reasoning:
        sentence += " (earlier turns' reasoning, left out of the history once a new user message came)"
    if merged and cause != "reply_boundary_merged":
        sentence += "; the reply's first characters also merged with the end of the earlier prompt into other ids"
    return BreakCause(cause, BREAK_STATUS.get(cause, "not_repaired"), pos, sentence)
