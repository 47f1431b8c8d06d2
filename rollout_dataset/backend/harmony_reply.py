"""gpt-oss Harmony replies: what the scripted model samples, and how vLLM 0.32 parses it.

Sampling (`harmony_reply_ids`): a policy's answer becomes the ids a gpt-oss model samples after the
prompt's `<|start|>assistant`: an analysis message (the policy's `reasoning`), then either tool
calls (each `commentary` to `functions.NAME`, content type `<|constrain|>json`, the last closed by
`<|call|>`; text beside the calls is a commentary preamble before them) or a `final` message
closed by `<|return|>`. Each message is rendered by the genuine encoding (`HarmonyEncoding.render`).

Parsing (`HarmonyReplyParser`), as vLLM 0.32's `HarmonyParser` (`vllm/parser/harmony.py`) with
`--reasoning-parser openai_gptoss` and `--tool-call-parser openai`: the ids go one by one through
`openai_harmony.StreamableParser`; analysis text is `reasoning` (only with the reasoning parser;
dropped otherwise), final text and commentary without a recipient are `content`, a message to
`functions.NAME` is a tool call (arguments re-serialised by `json.dumps(json.loads(...))` when the
content type is JSON or absent). Several messages of one kind join with `\\n`. A reply that ends
mid-message (`length`) is flushed: the unfinished message's text becomes `content`. Reasoning tokens:
the non-special ids sampled in the analysis channel or in commentary to a recipient. Streamed: the
delta of each id, a tool call's first delta carrying `id`, `type`, `index` and `name` (arguments "")
once its header is read, later deltas the argument text. Checked against a genuine vLLM 0.32 serving
a weight-scripted tiny gpt-oss (`tests/test_real_vllm_harmony.py`) for tool calls, final answers
and cut replies; replies with analysis follow vLLM's source (such a model cannot say them).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from rollout_dataset.backend.hermes import make_tool_call_id
from rollout_dataset.backend.policies import PolicyOutput

__all__ = ["HARMONY_REASONING_PARSER", "BUILTIN_RECIPIENTS", "harmony_reply_ids", "HarmonyReplyParser",
           "is_function_recipient"]

#: vLLM's name of the gpt-oss reasoning parser (`--reasoning-parser openai_gptoss`)
HARMONY_REASONING_PARSER = "openai_gptoss"


def harmony_reply_ids(tokenizer: Any, out: PolicyOutput) -> list[int]:
    """The ids a gpt-oss model samples for a policy's answer, without the final `<|return|>`.

    Args:
        tokenizer: a `HarmonyTokenizer`.
        out: the policy's answer (`reasoning`, `text`, `tool_calls`; `token_ids` are used as given).

    Returns:
        The ids; a tool-call reply ends with `<|call|>`, a final answer leaves `<|return|>` to the
        engine (the tokenizer's eos).
    """
    if out.token_ids is not None:
        return list(out.token_ids)
    from openai_harmony import Message, Role

    enc = tokenizer.encoding
    messages = []
    if out.reasoning is not None:
        messages.append(Message.from_role_and_content(Role.ASSISTANT, out.reasoning).with_channel("analysis"))
    if out.tool_calls:
        if out.text:
            messages.append(Message.from_role_and_content(Role.ASSISTANT, out.text).with_channel("commentary"))
        for call in out.tool_calls:
            args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
            messages.append(Message.from_role_and_content(Role.ASSISTANT, args).with_channel("commentary")
                            .with_recipient(f"functions.{call.name}").with_content_type("<|constrain|>json"))
    else:
        messages.append(Message.from_role_and_content(Role.ASSISTANT, out.text).with_channel("final"))
    ids: list[int] = []
    for message in messages:
        ids += list(enc.render(message))
    header = [tokenizer.token_id("<|start|>")] + enc.encode("assistant")
    if ids[: len(header)] == header:  # the prompt already ends with <|start|>assistant
        ids = ids[len(header):]
    end = tokenizer.token_id("<|end|>")
    if not out.tool_calls and ids and ids[-1] == end:
        ids = ids[:-1]  # the engine appends <|return|>
    return ids


def _recipient(raw: str | None) -> str | None:
    """vLLM's `_normalize_recipient`: an older Harmony may leave `<|constrain|>...` in it."""
    if raw is None:
        return None
    cut = raw.find("<|constrain|>")
    return raw if cut < 0 else (raw[:cut].rstrip() or None)


#: Harmony's built-in tool namespaces: a recipient in them is never a function call
BUILTIN_RECIPIENTS = ("python", "browser", "container")


def is_function_recipient(recipient: str | None, function_names: frozenset[str] | None = None) -> bool:
    """vLLM's `is_function_recipient`: whether a message's recipient is a function tool.

    Args:
        recipient: the message's recipient (``functions.NAME``, a bare name, ``assistant``, ...).
        function_names: the request's function tool names (the Responses endpoint passes them: a
            bare name is a function only when among them); None (the chat endpoint): any bare name.

    Returns:
        True for a function call.
    """
    if not recipient or recipient.startswith("<|") or recipient == "assistant":
        return False
    if recipient.startswith("functions."):
        return len(recipient) > len("functions.")
    if recipient.split(".", 1)[0] in BUILTIN_RECIPIENTS:
        return False
    return function_names is None or recipient in function_names


def _kind(channel: str | None, recipient: str | None) -> str:
    if is_function_recipient(recipient):
        return "tool"
    if channel == "analysis":
        return "reasoning"
    if channel == "final" or (channel == "commentary" and recipient is None):
        return "content"
    return "ignore"


class HarmonyReplyParser:
    """One choice's reply, fed one sampled id at a time (or parsed whole).

    Args:
        tokenizer: a `HarmonyTokenizer`.
        reasoning: the reasoning parser is on (analysis text is surfaced as `reasoning`).
        tools: tool calls are parsed (tools offered, `tool_choice` not `none`).
    """

    def __init__(self, tokenizer: Any, reasoning: bool, tools: bool) -> None:
        from openai_harmony import Role, StreamableParser

        self.tokenizer = tokenizer
        self.reasoning = reasoning
        self.tools = tools
        self._parser = StreamableParser(tokenizer.encoding, role=Role.ASSISTANT)
        self._done = 0
        self._pending: list[int] = []
        self._next_call = 0
        self.messages: list[Any] = []
        self.reasoning_tokens = 0
        #: what the last `feed` read, as vLLM's `Segment`: (channel, recipient, text delta); None for
        #: an id the parser refused
        self.segment: tuple[str | None, str | None, str] | None = None
        #: the message the last `feed` (or `finish`) completed, else None
        self.completed: Any = None
        #: `finish` completed a message the reply left open (vLLM's `last_append_flush_status`)
        self.flushed = False

    def _poll(self) -> Any:
        done = self._parser.messages
        if len(done) <= self._done:
            return None
        message = done[self._done]
        message.recipient = _recipient(message.recipient)  # as vLLM's `_poll_completed_message`
        self._done += 1
        self.messages.append(message)
        return message

    def feed(self, token_id: int) -> dict[str, Any] | None:
        """Parse one sampled id.

        Args:
            token_id: the id.

        Returns:
            The chat delta it makes (`reasoning`, `content` and/or `tool_calls`), or None.
        """
        from openai_harmony import HarmonyError

        before = _recipient(self._parser.current_recipient)
        self.segment = self.completed = None
        try:
            self._parser.process(token_id)
        except HarmonyError:
            return None
        channel, recipient = self._parser.current_channel, _recipient(self._parser.current_recipient)
        piece = self._parser.last_content_delta or ""
        self.completed = self._poll()
        if self.completed is not None:
            self.segment = (self.completed.channel, _recipient(self.completed.recipient), "")
            self._pending = []
            return None
        self.segment = (channel, recipient, piece)
        self._pending.append(token_id)
        if (channel == "analysis" or (channel == "commentary" and recipient is not None)) \
                and not self.tokenizer.encoding.is_special_token(token_id):
            self.reasoning_tokens += 1
        kind = _kind(channel, recipient)
        if kind == "reasoning" and self.reasoning and piece:
            return {"reasoning": piece}
        if kind == "content" and piece:
            return {"content": piece}
        if kind == "tool" and self.tools:
            assert recipient is not None
            if before != recipient:
                call = {"id": make_tool_call_id(), "type": "function", "index": self._next_call,
                        "function": {"name": recipient.removeprefix("functions."), "arguments": piece}}
                self._next_call += 1
                return {"tool_calls": [call]}
            if piece:
                return {"tool_calls": [{"index": self._next_call - 1, "function": {"arguments": piece}}]}
        return None

    def finish(self) -> str | None:
        """End the reply (vLLM's `flush`).

        Returns:
            The text of a message left unfinished inside its header (it becomes `content`), or None.
            `completed` is then the message the end completed (a message cut in its body is completed
            as far as it got), and `flushed` whether there was one.
        """
        from openai_harmony import HarmonyError, Message, Role

        try:
            self._parser.process_eos()
            self.completed = self._poll()
        except HarmonyError:
            text = self.tokenizer.decode(self._pending)
            self.completed = Message.from_role_and_content(Role.ASSISTANT, text).with_channel("final")
            self.messages.append(self.completed)
            self.flushed = True
            return text
        self.flushed = self.completed is not None
        return None

    def parse(self, ids: Sequence[int]) -> tuple[str | None, str | None, list[dict[str, Any]]]:
        """Parse a whole reply (vLLM's non-streaming path).

        Args:
            ids: every sampled id.

        Returns:
            `(reasoning, content, tool_calls)`: None where vLLM answers null; tool calls in the
            OpenAI shape (`id`, `type`, `function.name`, `function.arguments` as a JSON string).
        """
        for t in ids:
            self.feed(t)
        self.finish()
        reasoning, content, calls = [], [], []
        for message in self.messages:
            if message.author.role != "assistant" or not message.content:
                continue
            text = message.content[0].text
            recipient = _recipient(message.recipient)
            kind = _kind(message.channel, recipient)
            if kind == "reasoning" and self.reasoning and text:
                reasoning.append(text)
            elif kind == "content" and text:
                content.append(text)
            elif kind == "tool" and self.tools:
                arguments = text
                if message.content_type is None or "json" in message.content_type:
                    try:
                        arguments = json.dumps(json.loads(text))
                    except ValueError:
                        pass
                calls.append({"id": make_tool_call_id(), "type": "function",
                              "function": {"name": str(recipient).removeprefix("functions."),
                                           "arguments": arguments}})
        return "\n".join(reasoning) or None, "\n".join(content) or None, calls
