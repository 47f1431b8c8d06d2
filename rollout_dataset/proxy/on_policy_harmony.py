"""On-policy mode for gpt-oss Harmony: bridging a tool loop over what the format re-renders.

Harmony is not a chat template the generic splice (`rollout_dataset.proxy.on_policy.plan_splice`)
can locate a reply in: an emptied reply renders nothing at all, and a tool result's header names the
call it answers. Harmony is also regular: every message is ``<|start|>HEADER<|message|>TEXT`` closed
by ``<|end|>``, ``<|call|>`` or ``<|return|>``, rendered alone, and the generation prompt is
``<|start|>assistant``. So for a call continuing a parent whose reply the server rendered as Harmony:

- the reply ended with ``<|call|>`` (a tool call, the loop goes on): the prompt sent is the parent's
  prompt ids + the sampled ids + the server's render of the messages after the reply (tool results
  and the generation prompt), found as the render of the request minus the render of the request cut
  after the reply. The reply the harness sent back must say what was sampled (same calls, arguments
  equal as JSON, same commentary text; its ``reasoning`` the sampled analysis or absent): an absent
  analysis is put back (``harness_dropped_reasoning``), a present one is only re-rendered
  (``harmony_rerendered``: the history writes the call's header ``commentary json`` where the
  model sampled ``commentary <|constrain|>json``). Anything else is ``content_changed``.
- the reply ended with ``<|return|>`` (a final answer, a new user turn follows): Harmony drops the
  analysis before a final answer and writes ``<|end|>`` for ``<|return|>`` by design; the server's
  render is sent and the call is ``reasoning_dropped`` (reason ``template_dropped_reasoning``, or
  ``end_of_turn_rerendered`` when no analysis was sampled): a new sequence starts.
- a reply cut by ``max_tokens`` is left as the server renders it (``not_repaired``).

The server's ``/tokenize`` must render messages as its chat endpoint does: the local backend's does
(`serve --tokenizer harmony`). vLLM 0.32's ``/tokenize`` renders a gpt-oss request with the model's
Jinja chat template instead of Harmony (read in its source, `vllm/entrypoints/serve/tokenize/serving.py`
calls `preprocess_chat`, not the Harmony path), so against it this bridge would splice framing the
chat endpoint does not render (docs/reasoning.md "Limits"). One guard, on every call whose parent
was generated from the chat endpoint's own render (nobody sent prompt ids: a conversation's first
call, and any call sent as the harness sent it, such as a new user turn after a final answer, whose
history holds tool results): ``/tokenize`` is asked for the same messages (with the request's
``reasoning_effort``, which the Harmony render reads), and when its ids differ the server's two
renders disagree: that call and every later call for the model are ``not_repaired``
(``tokenize_differs``), sent as the harness sent them. A parent whose prompt ids the proxy sent
cannot be checked (the server generated from them without rendering).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, Sequence

from rollout_dataset.proxy.on_policy import Continuity, PastCall, tool_arguments
from rollout_dataset.wire.content import content_text

__all__ = ["HARMONY_GENERATION_PROMPT", "HarmonyBridge", "HarmonyMessage", "parse_harmony_reply", "reply_change",
           "harmony_bridge"]

#: what a Harmony render ends with (the generation prompt): two ids on o200k_harmony
HARMONY_GENERATION_PROMPT = "<|start|>assistant"
_ENDS = ("<|end|>", "<|call|>", "<|return|>")
_CHANNEL = re.compile(r"<\|channel\|>(\w+)")
_RECIPIENT = re.compile(r"to=([^\s<]+)")


@dataclass(frozen=True)
class HarmonyMessage:
    """One message of a sampled Harmony reply.

    Attributes:
        channel: ``analysis``, ``commentary``, ``final`` (None when the header names none).
        recipient: e.g. ``functions.get_weather``, or None.
        text: the message's text.
    """

    channel: str | None
    recipient: str | None
    text: str


@dataclass
class HarmonyBridge:
    """A repairable Harmony continuation.

    Attributes:
        target: the prompt ids to send.
        render: the server's render of the request.
        max_model_len: the server's context length (None: unknown).
        reason: ``harness_dropped_reasoning`` or ``harmony_rerendered``.
    """

    target: list[int]
    render: list[int]
    max_model_len: int | None
    reason: str


def parse_harmony_reply(text: str) -> list[HarmonyMessage]:
    """The messages of a sampled reply's text (it starts after the prompt's ``<|start|>assistant``).

    Args:
        text: the decoded sampled ids.

    Returns:
        The messages in order (a message cut before its end marker included as far as it got).
    """
    out = []
    for segment in text.split("<|start|>"):
        if not segment:
            continue
        header, sep, body = segment.partition("<|message|>")
        if not sep:
            continue
        for end in _ENDS:
            if body.endswith(end):
                body = body[: -len(end)]
                break
        channel = _CHANNEL.search(header)
        recipient = _RECIPIENT.search(header)
        out.append(HarmonyMessage(channel.group(1) if channel else None, recipient.group(1) if recipient else None,
                                  body))
    return out


def _text(content: Any) -> str:
    return content_text(content, any_text=True, other=lambda _: "")


def reply_change(sampled: Sequence[HarmonyMessage], message: Mapping[str, Any]) -> str:
    """How the assistant message a harness sent back relates to the reply the model sampled.

    Args:
        sampled: the sampled reply's messages.
        message: the harness's assistant message (``content``, ``tool_calls``, ``reasoning``).

    Returns:
        ``same`` (the same reply; its analysis sent back as sampled), ``reasoning_dropped`` (the
        same reply without the sampled analysis), or ``content_changed``.
    """
    analysis = "\n".join(m.text for m in sampled if m.channel == "analysis")
    calls = [(m.recipient.removeprefix("functions."), tool_arguments(m.text)) for m in sampled
             if m.recipient and m.recipient.startswith("functions.")]
    said = "\n".join(m.text for m in sampled if m.channel == "final" or (m.channel == "commentary"
                                                                          and not m.recipient))
    sent_calls = []
    for call in message.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, Mapping) else None
        fn = fn if isinstance(fn, Mapping) else {}
        sent_calls.append((fn.get("name"), tool_arguments(fn.get("arguments"))))
    if sent_calls != calls or _text(message.get("content")) != said:
        return "content_changed"
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    if not reasoning:
        return "reasoning_dropped" if analysis else "same"
    return "same" if reasoning == analysis else "content_changed"


Tokenize = Callable[[dict[str, Any], list[Any], Any], Awaitable[tuple[list[int], int | None]]]
Detokenize = Callable[[Any, list[int], Any], Awaitable[str]]


#: what `harmony_bridge` learnt of a model's server: Harmony, not Harmony, or Harmony whose /tokenize disagrees
HARMONY, OTHER, TOKENIZE_DIFFERS = "harmony", "other", "tokenize_differs"
_TOKENIZE_DIFFERS = ("the server's /tokenize renders this conversation to other ids than its chat endpoint did "
                     "(vLLM 0.32 renders gpt-oss chat through the model's chat template there): the request is sent "
                     "as the harness sent it")


async def harmony_bridge(tokenize: Tokenize, detokenize: Detokenize, known: dict[Any, str], parsed: dict[str, Any],
                         messages: list[Any], parent: PastCall, headers: Any) -> Continuity | HarmonyBridge | None:
    """Decide a Harmony continuation (see the module docstring).

    Args:
        tokenize: the mode's ``/tokenize`` call (body, messages, headers) -> (ids, max_model_len).
        detokenize: the mode's ``/detokenize`` call (model, ids, headers) -> text.
        known: per model name, what the server is (`HARMONY`, `OTHER`, `TOKENIZE_DIFFERS`; filled here).
        parsed: the harness's request.
        messages: its messages.
        parent: the call it continues.
        headers: headers for the server.

    Returns:
        None when the server does not render Harmony (the generic splice applies); a `Continuity`
        when the call is sent as the server renders it; a `HarmonyBridge` to send.

    Raises:
        Exception: the server calls' own errors (the caller records them).
    """
    model = parsed.get("model")
    if known.get(model) == OTHER:
        return None
    if known.get(model) == TOKENIZE_DIFFERS:
        return Continuity("not_repaired", parent.index, TOKENIZE_DIFFERS, _TOKENIZE_DIFFERS)
    parent_render, _ = await tokenize(parsed, parent.messages, headers)
    if model not in known:
        harmony = await detokenize(model, parent_render[-2:], headers) == HARMONY_GENERATION_PROMPT
        known[model] = HARMONY if harmony else OTHER
    if known[model] == OTHER:
        return None
    idx, k = parent.index, len(parent.message_keys)
    if parent.server_rendered and list(parent.prompt_ids) != list(parent_render):  # the chat render, re-asked
        known[model] = TOKENIZE_DIFFERS
        return Continuity("not_repaired", idx, TOKENIZE_DIFFERS, _TOKENIZE_DIFFERS)
    sampled_ids = list(parent.completion_ids)
    sampled = parse_harmony_reply(await detokenize(model, sampled_ids, headers)) if sampled_ids else []
    message = messages[k] if isinstance(messages[k], Mapping) else {}
    change = reply_change(sampled, message)
    if change == "content_changed":
        return Continuity("not_repaired", idx, "content_changed",
                          "the reply in the history says something else than the sampled Harmony messages")
    if parent.finish_reason == "length" or not sampled_ids:
        return Continuity("not_repaired", idx, "end_of_turn_differs",
                          "the reply was cut by max_tokens: Harmony closes it in history with a marker it never sampled")
    if any(m.channel == "final" for m in sampled):
        analysis = any(m.channel == "analysis" for m in sampled)
        return Continuity("reasoning_dropped", idx, "template_dropped_reasoning" if analysis else "end_of_turn_rerendered",
                          "Harmony re-renders a turn that ended with a final answer by design (its analysis dropped, "
                          "<|end|> for the sampled <|return|>); the turn starts a new sequence")
    j = k + 1
    while j < len(messages) and isinstance(messages[j], Mapping) and messages[j].get("role") == "assistant":
        j += 1
    (render, max_model_len), (cut, _) = await asyncio.gather(tokenize(parsed, messages, headers),
                                                             tokenize(parsed, list(messages[:j]), headers))
    n = len(parent_render) - 2
    if render[:n] != parent_render[:n] or render[: len(cut) - 2] != cut[:-2]:
        return Continuity("not_repaired", idx, "history_rerendered",
                          "the server renders the earlier conversation differently now")
    target = list(parent.prompt_ids) + sampled_ids + list(render[len(cut) - 2:])
    return HarmonyBridge(target, list(render), max_model_len,
                         "harness_dropped_reasoning" if change == "reasoning_dropped" else "harmony_rerendered")
