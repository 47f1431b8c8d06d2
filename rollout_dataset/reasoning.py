"""Why a reply the model sampled is not held, as sampled, by the next prompt: the rule, read from texts.

One definition shared by the proxy's on-policy mode (`rollout_dataset.proxy.on_policy_upstream`) and
the export's prefix-break findings (`rollout_dataset.export.findings`). Pure: no tokenizer, no I/O.

Reasoning models sample a reasoning part before their answer: a ``<think>...</think>`` block
(Qwen3, DeepSeek-R1 style) or, for gpt-oss Harmony, ``analysis`` channel messages before the
``commentary`` (tool call) or ``final`` message. Chat templates drop that part from earlier turns by
design (Qwen3 before a new user message; Harmony before a later final answer), and Harmony renders
``<|end|>`` in history where the model sampled ``<|return|>``. The cause of a break is named from what
the texts show, never from the mere presence of a think block.
"""

from __future__ import annotations

import re

from typing import Any, Mapping

from rollout_dataset.wire.content import content_text

__all__ = [
    "BREAK_STATUS",
    "MAX_BOUNDARY_MERGE",
    "THINK_CLOSE",
    "THINK_OPEN",
    "describe_edit",
    "explain_content_change",
    "explain_reply_break",
    "harness_sent_reasoning",
    "message_reasoning",
    "odd_reasoning",
    "only_reasoning_removed",
    "reasoning_text",
    "split_reasoning",
]

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
#: Harmony: the header of each message the model samples after its first one
HARMONY_NEXT_MESSAGE = "<|start|>assistant"
HARMONY_ANALYSIS = "<|channel|>analysis"
HARMONY_MESSAGE = "<|message|>"
#: end-of-message tokens a sampled reply may end with (ChatML, Harmony final / tool call / message)
END_MARKERS = ("<|im_end|>", "<|return|>", "<|call|>", "<|end|>", "<|endoftext|>", "<｜end▁of▁sentence｜>")

#: at most this many ids at the end of an earlier prompt may merge with the reply's first characters in
#: the next prompt (Qwen3 renders an earlier reply as ``<|im_start|>assistant\n`` + content, and the
#: generation prompt's ``\n`` with the parser's leading ``\n\n`` is one BPE token there): the earlier
#: prompt's text must still open the next prompt's text for the break to be read at the reply
MAX_BOUNDARY_MERGE = 2

#: the continuity status each break cause stands for: by design (``reasoning_dropped``) or a real,
#: unexplained-by-design break (``not_repaired``; on-policy mode repairs the harness and whitespace ones)
BREAK_STATUS: dict[str, str] = {
    "template_dropped_reasoning": "reasoning_dropped",
    "reply_all_reasoning": "reasoning_dropped",
    "end_of_turn_rerendered": "reasoning_dropped",
    "harness_dropped_reasoning": "not_repaired",
    "whitespace_drift": "not_repaired",
    "reply_boundary_merged": "not_repaired",
    "harmony_rerendered": "not_repaired",
    "content_changed": "not_repaired",
    "history_rerendered": "not_repaired",
    "reply_changed": "not_repaired",
}


def split_reasoning(text: str) -> tuple[str | None, str]:
    """The sampled reasoning part of a reply's text, and what follows it.

    Args:
        text: a reply as decoded from the sampled ids (special tokens kept).

    Returns:
        ``(reasoning, rest)``: ``reasoning`` runs through ``</think>`` (Qwen3 / DeepSeek-R1), or through
        the header of the last Harmony message when analysis messages come before it; None when the text
        has no closed reasoning part (then ``rest`` is the whole text).
    """
    if THINK_CLOSE in text:
        head, tail = text.split(THINK_CLOSE, 1)
        return head + THINK_CLOSE, tail
    if HARMONY_ANALYSIS in text and HARMONY_NEXT_MESSAGE in text:
        cut = text.rindex(HARMONY_NEXT_MESSAGE) + len(HARMONY_NEXT_MESSAGE)
        return text[:cut], text[cut:]
    return None, text


def reasoning_text(text: str) -> str | None:
    """The reasoning a reply's text holds, without its markers (think block or Harmony analysis), or None.

    Args:
        text: a decoded reply.

    Returns:
        The text between ``<think>`` and ``</think>``, stripped of newlines at its ends.
    """
    head, _ = split_reasoning(text)
    if head is None:
        return None
    if THINK_CLOSE not in head:  # Harmony: the analysis messages' text
        parts = [p.split("<|message|>", 1)[-1].split("<|end|>", 1)[0]
                 for p in head.split(HARMONY_ANALYSIS)[1:]]
        return "\n".join(parts) or None
    inner = head[: -len(THINK_CLOSE)]
    if THINK_OPEN in inner:
        inner = inner.split(THINK_OPEN, 1)[1]
    return inner.strip("\n")


def _squash(text: str) -> str:
    return "".join(text.split())


def explain_content_change(sampled_text: str, rendered_text: str) -> str:
    """Why the reply the server renders from the history differs from the reply the model sampled.

    Args:
        sampled_text: the decoded sampled ids of the reply's content.
        rendered_text: the decoded ids the server renders there from what the harness sent back.

    Returns:
        ``"reasoning_dropped"`` when the render is the sampled text after its reasoning part, whitespace
        aside (a reply sent back with the parser's leading newlines, a newline doubled before a tool call), ``"whitespace_drift"`` when the texts differ only in
        whitespace (e.g. a doubled newline before ``<tool_call>``: the tool parser leaves a trailing
        newline in `content` and the template adds one), ``"reply_all_reasoning"`` when the reply was
        all reasoning (an opened ``<think>`` never closed) and the history holds nothing of it, else
        ``"content_changed"``.
    """
    head, after = split_reasoning(sampled_text)
    if head is not None and _squash(after) == _squash(rendered_text) and (after.strip() or not rendered_text.strip()):
        return "reasoning_dropped"
    if _squash(sampled_text) == _squash(rendered_text):
        return "whitespace_drift"
    if head is None and sampled_text.lstrip().startswith(THINK_OPEN) and not rendered_text.strip():
        return "reply_all_reasoning"
    return "content_changed"


#: where a reply's tool calls begin: hermes (`<tool_call>`), DeepSeek-V3/R1 (`<｜tool▁calls▁begin｜>`)
TOOL_CALL_OPENERS = ("<tool_call>", "<｜tool▁calls▁begin｜>")
_THINK_BLOCK = re.compile(re.escape(THINK_OPEN) + r".*?" + re.escape(THINK_CLOSE), re.S)
#: a Harmony analysis message with the header of the message after it (canonical headers)
_HARMONY_ANALYSIS_MESSAGE = re.compile(re.escape(HARMONY_ANALYSIS + HARMONY_MESSAGE) + r".*?"
                                       + re.escape("<|end|>" + HARMONY_NEXT_MESSAGE), re.S)


def only_reasoning_removed(earlier_text: str, later_text: str) -> bool:
    """Whether a history was rendered again with think blocks left out and nothing else changed.

    Qwen3's template keeps the reasoning of the assistant turns after the last user message; once a new
    user message comes, it renders those same turns again without it, deep inside the earlier prompt.
    Harmony does the same with analysis messages (compared with headers written one way and
    ``<|return|>`` read as ``<|end|>``, as the history renders them).

    Args:
        earlier_text: the earlier prompt (and what was sampled after it) from the first differing id, decoded.
        later_text: the new prompt from the same id, decoded.

    Returns:
        True when `earlier_text` holds a closed think block (or Harmony analysis message) and, with those
        taken out and whitespace ignored, opens `later_text` (its own taken out too).
    """
    if HARMONY_MESSAGE in earlier_text + later_text:  # Harmony: analysis messages, headers written one way
        earlier_text, later_text = (harmony_canonical(t).replace("<|return|>", "<|end|>")
                                    for t in (earlier_text, later_text))
        drop = _HARMONY_ANALYSIS_MESSAGE
    else:
        drop = _THINK_BLOCK
    stripped = drop.sub("", earlier_text)
    if stripped == earlier_text:
        return False
    return _squash(drop.sub("", later_text)).startswith(_squash(stripped))


def describe_edit(sampled_text: str, rendered_text: str) -> str | None:
    """How the reply in the history was edited, when the texts show it (for a ``content_changed`` break).

    The sampled text's reasoning part is left out when the history holds none of it; whitespace is
    ignored; the history's text is read up to its first end-of-turn marker.

    Args:
        sampled_text: the decoded sampled reply.
        rendered_text: the reply as the history holds it (decoded), possibly followed by later turns.

    Returns:
        A clause: ``"the harness cut the reply's text"`` (the history holds a shorter start of it),
        ``"the harness added text to the reply"``, ``"the harness changed a tool call (name or
        arguments)"`` (the text before the first ``<tool_call>`` or ``<｜tool▁calls▁begin｜>`` is the same),
        ``"the history holds no tool call where the model sampled tool-call markup: ..."`` (such as
        markup never closed, which vLLM's `deepseek_v3` parser drops from the message), or None.
    """
    body = _strip_end(sampled_text)
    rendered = rendered_text
    for marker in END_MARKERS:
        rendered = rendered.split(marker, 1)[0]
    head, after = split_reasoning(body)
    if head is not None and not _squash(rendered).startswith(_squash(head)):
        body = after
    s_text, s_calls = _split_calls(_squash(body))
    r_text, r_calls = _split_calls(_squash(rendered))
    if s_text == r_text:
        if s_calls and not r_calls:
            return "the history holds no tool call where the model sampled tool-call markup: the parser read none in it, or the harness left it out"
        return "the harness changed a tool call (name or arguments)" if s_calls != r_calls else None
    if s_text.startswith(r_text):
        return "the harness cut the reply's text"
    if r_text.startswith(s_text):
        return "the harness added text to the reply"
    return None


def _split_calls(text: str) -> tuple[str, str]:
    """The text before a reply's tool calls, and the calls (from the first opener of `TOOL_CALL_OPENERS`)."""
    cuts = [i for i in (text.find(opener) for opener in TOOL_CALL_OPENERS) if i >= 0]
    return (text[: min(cuts)], text[min(cuts):]) if cuts else (text, "")


def _strip_end(text: str) -> str:
    for marker in END_MARKERS:
        if text.endswith(marker):
            return text[: -len(marker)]
    return text


def explain_reply_break(sampled_text: str, following_text: str) -> str:
    """Why a prompt that continues a call does not hold that call's sampled reply as sampled.

    Args:
        sampled_text: the call's sampled ids, decoded (special tokens kept, end-of-turn token included).
        following_text: the next prompt from where the call's prompt ended, decoded the same way (the
            reply as the template rendered it, then the rest of the new prompt).

    Returns:
        ``end_of_turn_rerendered`` (the reply is there, closed by another end token: Harmony's
        ``<|end|>`` for a sampled ``<|return|>``), ``reasoning_dropped`` (the history holds what
        follows the reasoning part, not the reasoning), ``whitespace_drift``, ``reply_all_reasoning``,
        ``harmony_rerendered`` (the same Harmony messages, their headers written another way: vLLM
        renders a tool call ``assistant to=functions.X<|channel|>commentary json`` where gpt-oss
        samples ``<|channel|>commentary to=functions.X <|constrain|>json``) or ``content_changed``.
        A Harmony reply whose headers were re-rendered is judged on its messages (analysis dropped:
        ``reasoning_dropped``).
    """
    cause = _explain_reply_break(sampled_text, following_text)
    if cause != "content_changed" or HARMONY_MESSAGE not in sampled_text + following_text:
        return cause
    canonical = _explain_reply_break(harmony_canonical(sampled_text), harmony_canonical(following_text))
    if canonical == "end_of_turn_rerendered" and _end(sampled_text) == _end_at(following_text, sampled_text):
        return "harmony_rerendered"
    return canonical if canonical != "end_of_turn_rerendered" else "end_of_turn_rerendered"


_HARMONY_HEADER = re.compile(r"(<\|start\|>)?([^<\s]*)([^<]*?)<\|channel\|>(\w+)([^<]*?)(?:<\|constrain\|>)?([^<]*?)"
                             r"<\|message\|>")
_RECIPIENT = re.compile(r"to=(\S+)")


def harmony_canonical(text: str) -> str:
    """Harmony text with every message header written one way, for comparing messages across renders.

    ``[<|start|>AUTHOR][ to=R]<|channel|>C[ to=R][ <|constrain|>T | T]<|message|>`` becomes
    ``[<|start|>AUTHOR]<|channel|>C to=R<|message|>`` (the content type dropped: vLLM writes ``json``
    where gpt-oss samples ``<|constrain|>json``).

    Args:
        text: decoded Harmony ids.

    Returns:
        The text with canonical headers.
    """
    def header(m: re.Match[str]) -> str:
        recipient = _RECIPIENT.search(m.group(3) + " " + m.group(5))
        to = f" to={recipient.group(1)}" if recipient else ""
        return f"{m.group(1) or ''}{m.group(2)}<|channel|>{m.group(4)}{to}<|message|>"

    return _HARMONY_HEADER.sub(header, text)


def _end(text: str) -> str | None:
    return next((m for m in END_MARKERS if text.endswith(m)), None)


def _end_at(following: str, sampled: str) -> str | None:
    """The end marker that closes the reply in `following` (the first after its last message header)."""
    body = harmony_canonical(_strip_end(sampled))
    rest = harmony_canonical(following)[len(body):]
    return next((m for m in END_MARKERS if rest.startswith(m)), None)


def _explain_reply_break(sampled_text: str, following_text: str) -> str:
    """`explain_reply_break` on texts as given."""
    body = _strip_end(sampled_text)
    if body and following_text.startswith(body):
        return "end_of_turn_rerendered"
    head, after = split_reasoning(body)
    if head is not None and after.strip() and (
            following_text.lstrip().startswith(after.strip()) or _squash(following_text).startswith(_squash(after))):
        return "reasoning_dropped"
    if _squash(body) and _squash(following_text).startswith(_squash(body)):
        return "whitespace_drift"
    if head is None and body.lstrip().startswith(THINK_OPEN):
        return "reply_all_reasoning"
    return "content_changed"


def harness_sent_reasoning(message: Any) -> bool:
    """Whether an assistant message the harness sent back carries reasoning.

    Args:
        message: one request message.

    Returns:
        True for a non-empty ``reasoning_content``/``reasoning``/``thinking`` field, or content holding
        a closed think block or a Harmony analysis channel.
    """
    if not isinstance(message, Mapping):
        return False
    if _reasoning_field(message) is not None:
        return True
    text = _content_text(message)
    return THINK_CLOSE in text or HARMONY_ANALYSIS in text


#: the message fields that carry reasoning, in the order they are looked at
_REASONING_FIELDS = ("reasoning_content", "reasoning", "thinking")


def _reasoning_field(message: Mapping[str, Any]) -> str | None:
    """The first reasoning field holding non-empty text, or None."""
    return next((k for k in _REASONING_FIELDS if isinstance(message.get(k), str) and message.get(k)), None)


def message_reasoning(message: Any) -> str | None:
    """The reasoning text a chat message carries in a field (`reasoning_content`, `reasoning`, `thinking`).

    A field that is present but null or empty does not hide the next one: a client that writes
    ``"reasoning_content": null`` beside vLLM's ``"reasoning": "..."`` still has its reasoning read.

    Args:
        message: one chat message (a request's or an answer's).

    Returns:
        The first of those fields holding non-empty text, or None.
    """
    if not isinstance(message, Mapping):
        return None
    field = _reasoning_field(message)
    return message[field] if field is not None else None


def _content_text(message: Mapping[str, Any]) -> str:
    """A message's content as text: the string, or its parts' ``text`` joined ("" otherwise)."""
    return content_text(message.get("content"), strings=False, any_text=True, other=_nothing)


def _nothing(_: Any) -> str:
    return ""


def odd_reasoning(message: Any) -> str | None:
    """What is ambiguous about the reasoning in an assistant message a harness sent back, if anything.

    Chat templates read reasoning from a field or from a think block in `content` (Qwen3's splits
    `content` at ``</think>``): a message holding both, or a ``</think>`` with no ``<think>`` before it,
    is rendered as the template decides, and the recorded prompt ids are the only truth about it.

    Args:
        message: one request message.

    Returns:
        A clause naming the ambiguity (``"reasoning both in reasoning_content and as a think block in
        content"``, ``"a </think> in content with no <think> before it"``), or None.
    """
    if not isinstance(message, Mapping) or message.get("role") != "assistant":
        return None
    text = _content_text(message)
    field = _reasoning_field(message)
    if field and THINK_CLOSE in text:
        return f"reasoning both in {field} and as a think block in content"
    if THINK_CLOSE in text and THINK_OPEN not in text.split(THINK_CLOSE, 1)[0]:
        return f"a {THINK_CLOSE} in content with no {THINK_OPEN} before it"
    return None
