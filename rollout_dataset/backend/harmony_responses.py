"""`/v1/responses` on a Harmony (gpt-oss) backend: vLLM 0.32's gpt-oss Responses path.

The request's `instructions` and `input` become chat messages (`rollout_dataset.wire.responses_chat`)
rendered by `openai-harmony` as the chat endpoint renders them (`harmony_request_prompt`; the
Responses `reasoning.effort` is the chat `reasoning_effort`). The policy's answer is sampled as
Harmony messages (`harmony_reply_ids`) and read back by the chat path's parser (`HarmonyReplyParser`),
then each message becomes output items as vLLM's `harmony_to_response_output`
(`vllm/entrypoints/openai/responses/harmony.py`) makes them: an analysis message a `reasoning` item
(`reasoning_text` content), commentary to `functions.NAME` (or to a bare name among the request's
function tools) a `function_call` item with the sampled argument text, final text and commentary
without a recipient a `message` item (`output_text`, `logprobs` null). A message the end of the reply
completed (cut by `max_output_tokens`) is `incomplete`, and so is the response. Streamed, the events
follow `_process_harmony_streaming_events` and `streaming_events.py`: an item is added at its first
text delta (`response.output_text.delta`, `response.reasoning_text.delta`,
`response.function_call_arguments.delta`, one per sampled id), its done events come when its message
ends, a message that never had a delta gets none, and the final response reuses the streamed ids.
Usage counts reasoning tokens as the chat path does and gives per-turn lists of one turn. Output
logprobs are refused before (`responses_endpoint`: vLLM's 400 `logprobs are not supported with
gpt-oss models`). Messages
to other recipients (built-in tools, MCP) are not emulated: they give no item.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable

from starlette.responses import JSONResponse, Response, StreamingResponse

from rollout_dataset.backend.emitted import generate_choices
from rollout_dataset.backend.engine import Generation
from rollout_dataset.backend.harmony_endpoint import harmony_request_prompt
from rollout_dataset.backend.harmony_reply import HarmonyReplyParser, harmony_reply_ids, is_function_recipient
from rollout_dataset.backend.params import CommonParams, check_context
from rollout_dataset.backend.policies import PolicyOutput, PolicyRequest
from rollout_dataset.wire.responses_chat import reasoning_item

__all__ = ["harmony_responses", "harmony_output_items", "harmony_message_dict"]

def _text(message: Any) -> str:
    return message.content[0].text if message.content else ""


def harmony_message_dict(message: Any) -> dict[str, Any]:
    """A Harmony message as vLLM 0.32 writes it in `input_messages`/`output_messages`.

    Args:
        message: an `openai_harmony.Message`.

    Returns:
        `Message.to_dict()`, its content type without the `<|constrain|>` marker (vLLM's
        `oss-harmony` writes `json` where `openai-harmony` 0.0.8 keeps `<|constrain|>json`).
    """
    out = message.to_dict()
    if isinstance(out.get("content_type"), str):
        out["content_type"] = out["content_type"].removeprefix("<|constrain|>")
    return out


def _function_item(name: str, arguments: str, status: str, new_id: Callable[[], str]) -> dict[str, Any]:
    suffix = new_id()
    return {"arguments": arguments, "call_id": f"call_{suffix}", "name": name, "type": "function_call",
            "id": f"fc_{suffix}", "async": None, "caller": None, "namespace": None, "status": status}


def _text_part(text: str) -> dict[str, Any]:
    return {"annotations": [], "text": text, "type": "output_text", "logprobs": None}


def _message_item(item_id: str, parts: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {"id": item_id, "content": parts, "role": "assistant", "status": status, "type": "message", "phase": None}


def harmony_output_items(message: Any, function_names: frozenset[str], incomplete: bool,
                         new_id: Callable[[], str]) -> list[dict[str, Any]]:
    """The Responses output items of one reply message (vLLM's `harmony_to_response_output`).

    Args:
        message: a Harmony message of the reply (`HarmonyReplyParser.messages`).
        function_names: the request's function tool names.
        incomplete: the end of the reply completed this message (cut by `max_output_tokens`).
        new_id: a fresh 16-hex id suffix.

    Returns:
        The items, in order (none for a message to another recipient).
    """
    if message.author.role != "assistant":
        return []
    status = "incomplete" if incomplete else "completed"
    recipient = message.recipient
    if recipient is not None:
        if not is_function_recipient(recipient, function_names):
            return []
        return [_function_item(recipient.removeprefix("functions."), c.text, status, new_id) for c in message.content]
    if message.channel == "analysis":
        return [reasoning_item(f"rs_{new_id()}", c.text, None) for c in message.content]
    if message.channel in ("commentary", "final"):
        return [_message_item(f"msg_{new_id()}", [_text_part(c.text) for c in message.content], status)]
    return []


class _EventState:
    """vLLM's `StreamingState` with the events it makes (payloads without `sequence_number`)."""

    def __init__(self, function_names: frozenset[str], new_id: Callable[[], str]) -> None:
        self.names = function_names
        self.new_id = new_id
        self.output_index = 0
        self.content_index = -1
        self.item_id = ""
        self.call_id = ""
        self.added = False
        self.function_started = False
        self.done_items: list[list[dict[str, Any]]] = []  # per completed message, the items sent done

    def _where(self) -> dict[str, Any]:
        return {"item_id": self.item_id, "output_index": self.output_index}

    def delta(self, channel: str | None, recipient: str | None, text: str) -> list[tuple[str, dict[str, Any]]]:
        """Events for one text delta (vLLM's `emit_content_delta_events`)."""
        out: list[tuple[str, dict[str, Any]]] = []
        if recipient is None and channel in ("final", "commentary"):
            if not self.added:
                self.added, self.item_id, self.content_index = True, f"msg_{self.new_id()}", self.content_index + 1
                out.append(("response.output_item.added", {"item": _message_item(self.item_id, [], "in_progress"),
                                                           "output_index": self.output_index}))
                out.append(("response.content_part.added", {
                    "content_index": self.content_index, **self._where(),
                    "part": {"annotations": [], "text": "", "type": "output_text", "logprobs": []}}))
            out.append(("response.output_text.delta", {"content_index": self.content_index, "delta": text,
                                                       **self._where(), "logprobs": []}))
        elif recipient is None and channel == "analysis":
            if not self.added:
                self.added, self.item_id, self.content_index = True, f"rs_{self.new_id()}", self.content_index + 1
                out.append(("response.output_item.added", {"item": reasoning_item(self.item_id, None, "in_progress"),
                                                           "output_index": self.output_index}))
                out.append(("response.content_part.added", {"content_index": self.content_index, **self._where(),
                                                            "part": {"text": "", "type": "reasoning_text"}}))
            out.append(("response.reasoning_text.delta", {"content_index": self.content_index, "delta": text,
                                                          **self._where()}))
        elif is_function_recipient(recipient, self.names):
            if not self.function_started:
                self.function_started = True
                self.item_id, self.call_id = f"fc_{self.new_id()}", f"call_{self.new_id()}"
                item = _function_item(str(recipient).removeprefix("functions."), "", "in_progress", lambda: "")
                item.update(id=self.item_id, call_id=self.call_id)
                out.append(("response.output_item.added", {"item": item, "output_index": self.output_index}))
            out.append(("response.function_call_arguments.delta", {"delta": text, **self._where()}))
        return out

    def done(self, message: Any) -> list[tuple[str, dict[str, Any]]]:
        """Events for a completed message (vLLM's `emit_previous_item_done_events`), then the next item."""
        out: list[tuple[str, dict[str, Any]]] = []
        items: list[dict[str, Any]] = []
        if self.added or self.function_started:
            text, where = _text(message), self._where()
            if message.recipient is not None:
                if is_function_recipient(message.recipient, self.names):
                    name = message.recipient.removeprefix("functions.")
                    item = _function_item(name, text, "completed", lambda: "")
                    item.update(id=self.item_id, call_id=self.call_id)
                    items.append(item)
                    out.append(("response.function_call_arguments.done", {"arguments": text, **where, "name": name}))
                    # vLLM builds this item with the event's own fields, and they stay in it
                    out.append(("response.output_item.done", {
                        "item": {**item, "output_index": self.output_index, "sequence_number": -1},
                        "output_index": self.output_index}))
            elif message.channel == "analysis":
                part = {"text": text, "type": "reasoning_text"}
                items.append(reasoning_item(self.item_id, text, "completed"))
                out += [("response.reasoning_text.done", {"content_index": self.content_index, **where, "text": text}),
                        ("response.content_part.done", {"content_index": self.content_index, **where, "part": part}),
                        ("response.output_item.done", {"item": items[-1], "output_index": self.output_index})]
            elif message.channel in ("commentary", "final"):
                items.append(_message_item(self.item_id, [_text_part(text)], "completed"))
                out += [("response.output_text.done", {"content_index": self.content_index, **where, "logprobs": [],
                                                       "text": text}),
                        ("response.content_part.done", {"content_index": self.content_index, **where,
                                                        "part": _text_part(text)}),
                        ("response.output_item.done", {"item": items[-1], "output_index": self.output_index})]
        self.done_items.append(items)
        self.output_index += 1
        self.content_index, self.added, self.function_started, self.call_id = -1, False, False, ""
        return out


def _stream_events(g: Generation, parser: HarmonyReplyParser, state: _EventState) -> list[tuple[str, dict]]:
    """The item events of a reply, one sampled id at a time (vLLM's one-token stream)."""
    events: list[tuple[str, dict]] = []
    for step in g.steps:
        parser.feed(step.token_id)
        if parser.segment is not None and parser.segment[2]:
            events += state.delta(*parser.segment)
        elif parser.completed is not None:
            events += state.done(parser.completed)
    rest = parser.finish()
    if rest:
        events += state.delta("final", None, rest)
    if parser.completed is not None:
        events += state.done(parser.completed)
    return events


def _reuse_streamed_ids(items: list[dict[str, Any]], streamed: list[dict[str, Any]]) -> None:
    """vLLM's `reuse_streamed_item_ids`: a message's items take the ids streamed for it, paired by type."""
    remaining = list(streamed)
    for item in items:
        for j, sent in enumerate(remaining):
            if sent["type"] == item["type"]:
                item["id"] = sent["id"]
                if item["type"] == "function_call":
                    item["call_id"] = sent["call_id"]
                del remaining[j]
                break


def _usage(n_in: int, n_out: int, reasoning_tokens: int) -> dict[str, Any]:
    return {"input_tokens": n_in,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0, "input_tokens_per_turn": [n_in],
                                     "cached_tokens_per_turn": [0]},
            "output_tokens": n_out,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens, "tool_output_tokens": 0,
                                      "output_tokens_per_turn": [n_out], "tool_output_tokens_per_turn": [0]},
            "total_tokens": n_in + n_out}


async def harmony_responses(state: Any, body: dict[str, Any], common: CommonParams, messages: list[dict[str, Any]],
                            chat_tools: list[dict[str, Any]] | None, max_out: int | None, req: PolicyRequest,
                            respond: Callable[[Any, PolicyRequest], Awaitable[PolicyOutput]],
                            response: Callable[..., dict[str, Any]], event: Callable[[str, int, dict], bytes],
                            new_id: Callable[[], str]) -> Response:
    """Answer one `/v1/responses` call on a Harmony backend.

    Args:
        state: the `BackendState` (its tokenizer a `HarmonyTokenizer`).
        body: the checked request body.
        common: its sampling parameters.
        messages: its `instructions` and `input` as chat messages.
        chat_tools: its function tools in the chat shape, or None.
        max_out: `max_output_tokens`, or None.
        req: what the policy answers.
        respond: the app's policy call.
        response: builds the response object (`responses_endpoint._response`'s keywords).
        event: encodes one SSE event (kind, sequence number, payload).
        new_id: a fresh 16-hex id suffix.

    Returns:
        The JSON response, or vLLM's event stream when `stream` is true.

    Raises:
        RequestError: a reasoning effort Harmony does not take, a message it cannot render, or a
            prompt over the context.
    """
    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    tok = state.tokenizer
    prompt_ids = harmony_request_prompt(state, {"reasoning_effort": effort}, messages, chat_tools)
    max_tokens = check_context(state.max_model_len, len(prompt_ids), max_out)
    (g,) = await generate_choices(state, respond, req, common, prompt_ids, max_tokens,
                                  reply_ids=lambda out: harmony_reply_ids(tok, out), stop_token_ids=tok.stop_token_ids)
    names = frozenset(t["function"]["name"] for t in chat_tools or () if isinstance(t.get("function"), dict))
    parser = HarmonyReplyParser(tok, True, True)
    stream_state = _EventState(names, new_id)
    item_events = _stream_events(g, parser, stream_state)
    output: list[dict[str, Any]] = []
    for i, message in enumerate(parser.messages):
        items = harmony_output_items(message, names, parser.flushed and i == len(parser.messages) - 1, new_id)
        if common.stream and i < len(stream_state.done_items):
            _reuse_streamed_ids(items, stream_state.done_items[i])
        output += items
    incomplete = not output or g.finish_reason == "length"
    raw = None
    if body.get("enable_response_messages") is True:
        raw = ([harmony_message_dict(m) for m in _prompt_messages(state, effort, messages, chat_tools)],
               [harmony_message_dict(m) for m in parser.messages])
    final = response(status="incomplete" if incomplete else "completed", output=output,
                     usage=_usage(len(prompt_ids), len(g.steps), parser.reasoning_tokens), incomplete=incomplete,
                     messages=raw, max_tokens=max_tokens)
    if not common.stream:
        return JSONResponse(final)
    start = response(status="in_progress", output=[], usage=None, incomplete=False, messages=None,
                     max_tokens=max_tokens)
    return StreamingResponse(_events(start, final, item_events, event), media_type="text/event-stream")


def _prompt_messages(state: Any, effort: str | None, messages: list[dict[str, Any]],
                     chat_tools: list[dict[str, Any]] | None) -> list[Any]:
    from rollout_dataset.harmony import harmony_prompt_messages

    return harmony_prompt_messages(messages, chat_tools, effort, state.tokenizer.start_date)


async def _events(start: dict, final: dict, item_events: list[tuple[str, dict]],
                  event: Callable[[str, int, dict], bytes]) -> AsyncIterator[bytes]:
    kinds = [("response.created", {"response": start}), ("response.in_progress", {"response": start})]
    kinds += item_events + [("response.completed", {"response": final})]
    for seq, (kind, payload) in enumerate(kinds):
        yield event(kind, seq, payload)
