"""On-policy prompts: the pure part (no I/O) of the proxy's ``--on-policy`` mode.

Harnesses speak chat messages, so the server re-renders and re-tokenizes the model's earlier replies
on every turn; the prompt of turn k+1 then often does not hold the ids sampled at turn k. In
on-policy mode the proxy builds, for a chat request that continues an earlier call of the same
session, the prompt the model would see had it kept its own tokens::

    parent's prompt ids + parent's sampled ids + the template's tokens after that turn's end
    + the server's rendering of the new messages

and sends it as vLLM's ``kv_transfer_params.prompt_token_ids``. This module finds the parent call
(`SessionMemory`), splits the server's render into framing and content (`plan_splice`, from two
renders that differ only in the reply's content) and says what each call's continuity is
(`Continuity`). Talking to the server (``/tokenize``, ``/detokenize``, the probe) lives in
`rollout_dataset.proxy.on_policy_upstream`.

Repair rule: the reply's content comes from the sampled ids when their decoded text equals the
text the server renders from what the harness sent back; the framing around it (role header,
separators, the end-of-turn token the template adds after a reply cut by ``max_tokens``) comes from
the server's render, except framing the template puts between the role header and the reply in
history but not in its generation prompt: the model generated right after the header, so that is
where its ids go. A changed content (reasoning dropped, a reply edited, a rewritten system prompt)
is left as the server renders it, and the record says why.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from rollout_dataset.reasoning import MAX_BOUNDARY_MERGE, THINK_CLOSE, describe_edit, explain_content_change
from rollout_dataset.tokenizers import common_prefix
from rollout_dataset.wire.content import content_text
from rollout_dataset.wire.responses_chat import RESPONSES_ENDPOINT, input_to_messages, tools_to_chat

__all__ = [
    "Continuity",
    "InflightCalls",
    "ParentLookup",
    "PastCall",
    "SessionMemory",
    "SplicePlan",
    "TEMPLATE_FIELDS",
    "as_chat_endpoint_reads",
    "blank_reply",
    "common_prefix",
    "common_suffix",
    "content_mismatch_detail",
    "explain_content_change",
    "restore_reasoning",
    "drift_of",
    "message_key",
    "past_call_from_record",
    "plan_splice",
    "reply_key",
    "response_reply",
    "sends_prompt_ids",
    "request_context",
    "responses_as_chat",
    "text_only",
    "tool_arguments",
]

# Chat request fields that change how the server renders the messages: a parent must share them.
TEMPLATE_FIELDS = ("model", "tools", "chat_template", "chat_template_kwargs", "add_generation_prompt",
                   "continue_final_message", "documents", "add_special_tokens")

# At most this many framing tokens may sit between the role header and the reply in history
# (a newline, as in the tiny ChatML template): more means the template inserts something else.
MAX_HEADER_FRAMING = 2


@dataclass
class Continuity:
    """How a call's prompt relates to the tokens the model sampled before it.

    Attributes:
        status: ``exact`` (the prompt holds the parent's sampled ids as they were sampled, or
            nothing was sampled before), ``repaired`` (the proxy sent its own prompt ids),
            ``reasoning_dropped`` (the chat template drops earlier reasoning by design, e.g. Qwen3
            before a new user message: the server's render was sent, a new sequence starts),
            ``not_repaired`` (the server's render was sent; `reason` says why: an unexplained break).
        parent_index: arrival index of the call this one continues, or None.
        reason: a short code for not_repaired (``no_parent``, ``content_changed``, ...) or for
            exact calls with no parent (``new_conversation``; ``reply_pasted``: an earlier call's
            messages and reply with other messages put in front, as in a handoff to a new conversation).
        detail: a sentence for people.
        drift: for repaired calls, where the server's render and the sent prompt first differ:
            ``{"position", "server_tokens", "sent_tokens"}`` (sizes of the differing spans).
        tokenize_ms: time spent on the extra ``/tokenize``/``/detokenize``/probe calls.
        causes: when several causes met in the turn (e.g. a BPE merge at the reply boundary, the
            reasoning dropped and whitespace drift), each of them in the order found, `reason` the one
            that decided the status; None otherwise.
    """

    status: str
    parent_index: int | None = None
    reason: str | None = None
    detail: str | None = None
    drift: dict[str, int] | None = None
    tokenize_ms: float | None = None
    causes: list[str] | None = None

    def __post_init__(self) -> None:
        if self.causes is not None:  # one cause is `reason` alone
            self.causes = sorted(set(self.causes), key=self.causes.index)
            if len(self.causes) < 2:
                self.causes = None

    def as_record(self) -> dict[str, Any]:
        """Returns: the trace record's ``continuity`` object (``causes`` only when several met)."""
        out: dict[str, Any] = {"status": self.status, "parent_index": self.parent_index, "reason": self.reason,
                               "detail": self.detail, "drift": self.drift, "tokenize_ms": self.tokenize_ms}
        if self.causes:
            out["causes"] = list(self.causes)
        return out


def text_only(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether every message's content is text (a string, null, or a list of text parts).

    Args:
        messages: chat messages.

    Returns:
        False when some content part is not ``{"type": "text", ...}`` (an image, audio, a file).
    """
    for message in messages:
        content = message.get("content")
        if content is None or isinstance(content, str):
            continue
        if not isinstance(content, list):
            return False
        for part in content:
            if isinstance(part, str):
                continue
            if not isinstance(part, Mapping) or part.get("type") != "text":
                return False
    return True


def _text(content: Any) -> str:
    return content_text(content, any_text=True, other=_json_sorted)


def _json_sorted(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def tool_arguments(value: Any) -> Any:
    """A tool call's arguments parsed when they are JSON text (``{}`` for empty), else as they are."""
    if isinstance(value, str):
        try:
            return json.loads(value) if value else {}
        except ValueError:
            return value
    return value


def message_key(message: Any) -> str:
    """A stable key of a chat message for prefix matching (content parts joined, arguments parsed).

    Args:
        message: one chat message as the harness sent it.

    Returns:
        A hex digest; equal for messages a template renders alike in practice.
    """
    if not isinstance(message, Mapping):
        canon: Any = message
    else:
        calls = []
        for call in message.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, Mapping) else None
            fn = fn if isinstance(fn, Mapping) else {}
            calls.append([fn.get("name"), tool_arguments(fn.get("arguments"))])
        canon = [message.get("role"), _text(message.get("content")), calls, message.get("tool_call_id"),
                 message.get("name"), message.get("reasoning_content") or message.get("reasoning")]
    raw = json.dumps(canon, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha1(raw.encode("utf-8")).hexdigest()


def request_context(body: Mapping[str, Any]) -> str:
    """The rendering context of a chat request: the fields besides messages that shape its prompt.

    Args:
        body: the parsed chat request.

    Returns:
        A canonical JSON string of `TEMPLATE_FIELDS` present in the body.
    """
    return json.dumps({k: body[k] for k in TEMPLATE_FIELDS if k in body}, sort_keys=True, default=str)


def responses_as_chat(body: Mapping[str, Any]) -> dict[str, Any]:
    """A `/v1/responses` request as the chat request vLLM 0.32 renders for it (for on-policy mode).

    vLLM's Responses endpoint turns `instructions` and `input` into chat messages and its tools into
    chat tools, then renders them with the chat template as its chat endpoint does, and generates from
    ``kv_transfer_params.prompt_token_ids`` when given (`_reused_prompt_token_ids` runs on both; seen
    on the genuine server: its `input_messages` ids equal `/tokenize`'s render of these messages, for
    every reasoning shape a harness sends back). So a Responses call is bridged as this chat request.

    Args:
        body: the Responses request (not modified).

    Returns:
        ``{"model", "messages", "tools"?, "chat_template_kwargs"?, "max_tokens"?, "kv_transfer_params"?}``
        (`rollout_dataset.wire.responses_chat`).
    """
    chat: dict[str, Any] = {"messages": input_to_messages(dict(body))}
    tools = tools_to_chat(body.get("tools"))
    if tools:
        chat["tools"] = tools
    for key in ("model", "chat_template_kwargs", "kv_transfer_params"):
        if key in body:
            chat[key] = body[key]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    return chat


def as_chat_endpoint_reads(messages: Sequence[Any]) -> list[Any]:
    """Messages as vLLM's chat endpoint reads them before rendering, for its ``/tokenize``.

    vLLM 0.32's chat request renames a message's ``reasoning_content`` to ``reasoning`` (kept when both
    are there), and renders ``reasoning``; its ``/tokenize`` drops ``reasoning_content`` instead, so the
    render on-policy mode asks for would lack reasoning the chat endpoint shows the model (opencode and
    LiteLLM send reasoning back as ``reasoning_content``).

    Args:
        messages: chat messages as the harness sent them (not modified).

    Returns:
        The messages, each dict with ``reasoning_content`` moved to ``reasoning``.
    """
    out: list[Any] = []
    for message in messages:
        if isinstance(message, Mapping) and "reasoning_content" in message:
            moved = {k: v for k, v in message.items() if k != "reasoning_content"}
            if message["reasoning_content"] is not None and moved.get("reasoning") is None:
                moved["reasoning"] = message["reasoning_content"]
            message = moved
        out.append(message)
    return out


def blank_reply(message: Mapping[str, Any]) -> dict[str, Any]:
    """The same assistant turn with nothing in it (no content, calls or reasoning).

    Args:
        message: an assistant message.

    Returns:
        ``{"role": "assistant", "content": ""}`` (plus its ``name`` if any).
    """
    out: dict[str, Any] = {"role": message.get("role", "assistant"), "content": ""}
    if "name" in message:
        out["name"] = message["name"]
    return out


@dataclass
class PastCall:
    """What on-policy mode remembers of a finished chat call.

    Attributes:
        index: its arrival index in the session.
        message_keys: `message_key` of each request message.
        context: its `request_context`.
        messages: the request's messages (for the server's render of the parent prompt).
        prompt_ids: the prompt ids the engine used.
        completion_ids: the ids it sampled (first choice).
        finish_reason: the first choice's finish reason.
        server_rendered: its prompt ids are the chat endpoint's own render of `messages` (nobody
            sent prompt ids: not the proxy, not the harness), so `/tokenize` must give the same ids.
        endpoint: the call's endpoint (`/v1/chat/completions`, or `/v1/responses`: its messages are
            `responses_as_chat`'s).
        reply_key: `reply_key` of the reply it answered with (None when unknown): finds the reply
            where a harness pastes it into another conversation.
    """

    index: int
    message_keys: list[str]
    context: str
    messages: list[Any]
    prompt_ids: Sequence[int]  # a list, kept as an array("q") once stored (a third of the memory)
    completion_ids: Sequence[int]
    finish_reason: str | None = None
    text_chars: int = 0
    server_rendered: bool = True
    endpoint: str = "/v1/chat/completions"
    reply_key: str | None = None


def past_call_from_record(record: Mapping[str, Any]) -> PastCall | None:
    """A possible parent rebuilt from a trace record (one another proxy worker wrote).

    What `SessionMemory.remember` gets from a finished call, read back from its record: a
    successful ``/v1/chat/completions`` or ``/v1/responses`` call (read as `responses_as_chat`) with
    prompt and sampled ids. The record's request is the harness's (credential fields redacted;
    messages, tools and template options verbatim), so a message a redaction changed only fails to
    match, never matches wrongly.

    Args:
        record: one parsed trace record.

    Returns:
        The call, or None when the record cannot be a parent.
    """
    request = record.get("request")
    prompt, completion = record.get("prompt_token_ids"), record.get("completion_token_ids")
    endpoint = record.get("endpoint")
    if endpoint == RESPONSES_ENDPOINT and isinstance(request, Mapping):
        request = responses_as_chat(request)
    if (endpoint not in ("/v1/chat/completions", RESPONSES_ENDPOINT) or record.get("status") != 200
            or record.get("error") is not None or not isinstance(record.get("index"), int)
            or not isinstance(request, Mapping) or not isinstance(request.get("messages"), list)
            or not isinstance(prompt, list) or not isinstance(completion, list)):
        return None
    messages = request["messages"]
    continuity = record.get("continuity")
    repaired = isinstance(continuity, Mapping) and continuity.get("status") == "repaired"  # the proxy sent ids
    upstream = record.get("upstream")  # a Messages call: the chat answer its reply came in
    answer = upstream.get("response") if isinstance(upstream, Mapping) else record.get("response")
    reply = response_reply(answer)
    return PastCall(record["index"], [message_key(m) for m in messages], request_context(request), messages,
                    prompt, completion, record.get("finish_reason"),
                    server_rendered=not repaired and not sends_prompt_ids(request), endpoint=str(endpoint),
                    reply_key=reply_key(reply) if reply is not None else None)


def response_reply(response: Any) -> Mapping[str, Any] | None:
    """The first choice's message of a chat completion (as returned, or reassembled from its stream).

    Args:
        response: the response body.

    Returns:
        The message, or None when the body is no chat completion.
    """
    choices = response.get("choices") if isinstance(response, Mapping) else None
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) else None
    message = first.get("message") if first is not None else None
    return message if isinstance(message, Mapping) else None


def reply_key(message: Mapping[str, Any]) -> str:
    """A key of an assistant reply that holds wherever a harness puts it (`SessionMemory.find_parent`).

    What harnesses change when they send a reply back is left out: reasoning (a field, or a leading
    think block in the text), whitespace around the text, tool-call ids, the text of a reply that
    carries tool calls (some drop it).

    Args:
        message: the response's message, or an assistant message of a request.

    Returns:
        A hex digest.
    """
    text = _text(message.get("content")).strip()
    if text.startswith("<think>") and THINK_CLOSE in text:
        text = text.split(THINK_CLOSE, 1)[1].strip()
    calls = []
    for call in message.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, Mapping) else None
        fn = fn if isinstance(fn, Mapping) else {}
        calls.append([fn.get("name"), tool_arguments(fn.get("arguments"))])
    raw = json.dumps(["" if calls else text, calls], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha1(raw.encode("utf-8")).hexdigest()


def sends_prompt_ids(request: Mapping[str, Any]) -> bool:
    """Whether a chat request gives the server its prompt ids (`kv_transfer_params.prompt_token_ids`).

    Args:
        request: the request body.

    Returns:
        True when the prompt the server used may not be its own render of the messages.
    """
    params = request.get("kv_transfer_params")
    return isinstance(params, Mapping) and params.get("prompt_token_ids") is not None


@dataclass
class ParentLookup:
    """The result of `SessionMemory.find_parent`.

    Attributes:
        parent: the call this request continues, or None.
        reason: why there is none (``new_conversation``, ``no_parent``, ``context_changed``).
        detail: a sentence for people.
    """

    parent: PastCall | None
    reason: str | None = None
    detail: str | None = None


class InflightCalls:
    """Calls of each session that on-policy mode prepared and that have not finished yet.

    A harness can send its next request as soon as it has read the answer's last event (Codex acts on
    a Responses stream's `response.completed`), before the proxy has written that call's record and
    remembered it as a parent. A request whose messages extend an unfinished call's messages by an
    assistant reply continues that call, so it waits for it (at most `wait_s`) before its parent is
    looked up; any other request does not wait.

    Args:
        wait_s: the longest wait for one unfinished call.
    """

    def __init__(self, wait_s: float = 10.0) -> None:
        self.wait_s = wait_s
        self._calls: dict[str, dict[int, tuple[list[str], asyncio.Event]]] = {}
        self._next = 0

    def begin(self, session: str, message_keys: list[str]) -> int:
        """Register a prepared call.

        Args:
            session: the proxy session.
            message_keys: `message_key` of each of its messages.

        Returns:
            A token for `end`.
        """
        self._next += 1
        self._calls.setdefault(session, {})[self._next] = (list(message_keys), asyncio.Event())
        return self._next

    def end(self, session: str, token: int) -> None:
        """The call finished (remembered as a parent, or failed): wake whoever waits for it.

        Args:
            session: the proxy session.
            token: `begin`'s token.
        """
        calls = self._calls.get(session)
        entry = calls.pop(token, None) if calls is not None else None
        if entry is not None:
            entry[1].set()
        if calls is not None and not calls:
            del self._calls[session]

    async def wait_for_parents(self, session: str, message_keys: Sequence[str],
                               messages: Sequence[Any]) -> int:
        """Wait for the unfinished calls this request continues (each at most `wait_s`).

        Args:
            session: the proxy session.
            message_keys: the request's `message_key`s.
            messages: the request's messages.

        Returns:
            How many unfinished calls it waited for.
        """
        waits = []
        for keys, done in list(self._calls.get(session, {}).values()):
            k = len(keys)
            if (k < len(message_keys) and list(message_keys[:k]) == keys and isinstance(messages[k], Mapping)
                    and messages[k].get("role") == "assistant"):
                waits.append(done.wait())
        for wait in waits:
            try:
                await asyncio.wait_for(wait, self.wait_s)
            except asyncio.TimeoutError:
                pass
        return len(waits)


class SessionMemory:
    """Finished chat calls per session, bounded: the least recently used sessions, and each
    session's oldest calls, are forgotten first (a forgotten parent means ``no_parent``, never a
    wrong prompt).

    Args:
        max_sessions: sessions kept.
        max_calls: calls kept per session.
        max_ids: prompt + sampled ids kept over all sessions (8 bytes each as stored; the kept
            messages' text counts as one id per 8 characters).
    """

    def __init__(self, max_sessions: int = 1024, max_calls: int = 128, max_ids: int = 64_000_000) -> None:
        self._sessions: OrderedDict[str, list[PastCall]] = OrderedDict()
        self.max_sessions = max_sessions
        self.max_calls = max_calls
        self.max_ids = max_ids
        self.n_ids = 0
        self.inflight = InflightCalls()  # shared with the memory: every upstream lane's calls

    @staticmethod
    def _size(call: PastCall) -> int:
        """Ids held, plus the messages' text counted as one id per 8 characters (same bytes)."""
        return len(call.prompt_ids) + len(call.completion_ids) + call.text_chars // 8

    def remember(self, session: str, call: PastCall) -> None:
        """Keep a finished call as a possible parent.

        Args:
            session: the proxy session.
            call: the call.
        """
        calls = self._sessions.pop(session, [])
        if any(c.index == call.index for c in calls):  # known already (another worker's record read twice)
            self._sessions[session] = calls
            return
        call.prompt_ids = array("q", call.prompt_ids)  # a third of a list of ints' memory
        call.text_chars = sum(len(_text(m.get("content"))) for m in call.messages if isinstance(m, Mapping))
        call.completion_ids = array("q", call.completion_ids)
        calls.append(call)
        if len(calls) > 1 and calls[-2].index > call.index:  # arrival order, whichever worker's record came first
            calls.sort(key=lambda c: c.index)
        self.n_ids += self._size(call)
        for old in calls[: max(0, len(calls) - self.max_calls)]:
            self.n_ids -= self._size(old)
        del calls[: max(0, len(calls) - self.max_calls)]
        self._sessions[session] = calls
        while self._sessions and (len(self._sessions) > self.max_sessions or self.n_ids > self.max_ids):
            oldest_session, oldest = next(iter(self._sessions.items()))
            if len(oldest) > 1 and len(self._sessions) <= self.max_sessions:
                self.n_ids -= self._size(oldest.pop(0))
            else:
                self._sessions.popitem(last=False)
                self.n_ids -= sum(self._size(c) for c in oldest)

    def find_parent(self, session: str, messages: Sequence[Any], context: str) -> ParentLookup:
        """The latest call whose messages this request extends by an assistant reply and more turns.

        Args:
            session: the proxy session.
            messages: the request's messages.
            context: the request's `request_context`.

        Returns:
            The lookup; `parent` is the candidate with the longest message prefix (latest on ties).
        """
        keys = [message_key(m) for m in messages]
        has_reply = any(isinstance(m, Mapping) and m.get("role") == "assistant" for m in messages)
        best: PastCall | None = None
        closest: tuple[int, int] | None = None  # (shared messages, call index)
        for call in reversed(self._sessions.get(session, [])):
            k = len(call.message_keys)
            if (k < len(keys) and keys[:k] == call.message_keys and isinstance(messages[k], Mapping)
                    and messages[k].get("role") == "assistant"):
                if best is None or k > len(best.message_keys):
                    best = call
                continue
            shared = next((i for i, (a, b) in enumerate(zip(keys, call.message_keys)) if a != b),
                          min(len(keys), k))
            if closest is None or shared > closest[0]:
                closest = (shared, call.index)
        if best is not None:
            if best.context != context:
                return ParentLookup(None, "context_changed",
                                    f"continues call #{best.index} but its tools or template options differ")
            return ParentLookup(best)
        if not has_reply:
            return ParentLookup(None, "new_conversation", "no assistant reply in the messages: nothing was sampled")
        pasted = self._pasted_from(session, messages, keys)
        if pasted is not None:
            return ParentLookup(None, "reply_pasted",
                                f"these messages extend no earlier call: they hold call #{pasted}'s messages and reply "
                                "with other messages put in front (a handoff to a new conversation), so nothing "
                                "sampled in this context comes before this call: a new sequence starts")
        if closest is None:
            return ParentLookup(None, "no_parent", "no earlier call of this session holds tokens to continue")
        shared, index = closest
        role = messages[shared].get("role") if shared < len(messages) and isinstance(messages[shared], Mapping) else None
        return ParentLookup(None, "no_parent",
                            f"no earlier call is extended by these messages; closest is call #{index}, "
                            f"which differs at message {shared} (role {role!r})")


    def _pasted_from(self, session: str, messages: Sequence[Any], keys: Sequence[str]) -> int | None:
        """The call whose conversation a request that extends no earlier call carries with other messages
        put in front of it (a handoff: terminus-2 pastes its questions reply after its first prompt), else
        None (a rewritten or trimmed history, a forgotten parent, a reply nobody sampled: ``no_parent``).

        Args:
            session: the proxy session.
            messages: the request's messages.
            keys: their `message_key`.

        Returns:
            That call's index: the request's first assistant message is its reply, and its messages
            end the ones before that reply.
        """
        j = next((i for i, m in enumerate(messages) if isinstance(m, Mapping) and m.get("role") == "assistant"), None)
        if j is None:
            return None
        key = reply_key(messages[j])
        for call in reversed(self._sessions.get(session, [])):
            k = len(call.message_keys)
            if call.reply_key == key and 0 < k < j and list(keys[j - k:j]) == call.message_keys:
                return call.index
        return None


def common_suffix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """Args: a, b: id lists. limit: the largest suffix to consider. Returns: their common suffix length."""
    n = min(len(a), len(b), limit)
    i = 0
    while i < n and a[len(a) - 1 - i] == b[len(b) - 1 - i]:
        i += 1
    return i


def drift_of(server_ids: Sequence[int], sent_ids: Sequence[int]) -> dict[str, int]:
    """Where two prompts differ.

    Args:
        server_ids: the server's own render.
        sent_ids: the prompt the proxy sends.

    Returns:
        ``{"position": first differing index, "server_tokens": size of the server's differing span,
        "sent_tokens": size of the sent differing span}``.
    """
    pos = common_prefix(server_ids, sent_ids)
    tail = common_suffix(server_ids, sent_ids, min(len(server_ids), len(sent_ids)) - pos)
    return {"position": pos, "server_tokens": len(server_ids) - pos - tail, "sent_tokens": len(sent_ids) - pos - tail}


@dataclass
class SplicePlan:
    """What to send for a continuing call, before the content check.

    Attributes:
        target: the on-policy prompt ids (None when not repairable; see `reason`).
        sampled_content: the parent's sampled ids of the reply's content (end-of-turn id removed).
        rendered_content: the server's ids of the same reply's content (with `boundary` merged into
            its start, when there is one).
        reason: why not repairable (None when `target` is set).
        detail: a sentence for people.
        boundary: the last ids of the parent's render that the history's render merged with the start
            of the reply (a BPE merge across the reply boundary); their text must open the decoded
            `rendered_content`, and the rest of it is the reply. Empty when the render holds the
            parent's render as it is.
    """

    target: list[int] | None
    sampled_content: list[int] = field(default_factory=list)
    rendered_content: list[int] = field(default_factory=list)
    reason: str | None = None
    detail: str | None = None
    boundary: list[int] = field(default_factory=list)

    @property
    def needs_text_check(self) -> bool:
        """Returns: whether the content's ids differ or merged across the boundary (then the decoded
        texts must be compared)."""
        return self.target is not None and (bool(self.boundary) or self.sampled_content != self.rendered_content)


def plan_splice(parent: PastCall, parent_render: Sequence[int], render: Sequence[int],
                blank_render: Sequence[int]) -> SplicePlan:
    """Build the on-policy prompt of a call continuing `parent`.

    Args:
        parent: the call continued (its prompt ids and sampled ids).
        parent_render: the server's render of the parent's messages (generation prompt added).
        render: the server's render of this request's messages.
        blank_render: the same with the parent's reply emptied (`blank_reply`): the two renders
            share everything but the reply's content, which locates it.

    Returns:
        The plan: a target, or the reason there is none.
    """
    n_par = len(parent_render)
    boundary: list[int] = []
    if list(render[:n_par]) != list(parent_render):
        pos = common_prefix(render, parent_render)
        if n_par - pos > MAX_BOUNDARY_MERGE or list(blank_render[:n_par]) != list(parent_render):
            return SplicePlan(None, reason="history_rerendered",
                              detail=f"the server renders the earlier conversation differently now "
                                     f"(first difference at token {pos} of {n_par})")
        # the reply's first characters merged with the earlier prompt's last ids (the empty reply's
        # render does not): the reply's render starts at `pos`, its text checked by the caller
        boundary = list(parent_render[pos:])
    start = common_prefix(render, blank_render)
    if boundary:
        start = n_par - len(boundary)
    elif start < n_par:
        return SplicePlan(None, reason="framing_unclear",
                          detail=f"the reply's render starts inside the parent's prompt (token {start} < {n_par})")
    end = len(render) - common_suffix(render, blank_render, min(len(render), len(blank_render)) - start)
    if start - n_par > MAX_HEADER_FRAMING and not boundary:
        return SplicePlan(None, reason="framing_unclear",
                          detail=f"the template puts {start - n_par} tokens between the role header and the reply "
                                 f"in history that its generation prompt lacks")
    rendered = list(render[start:end])
    rest = list(render[end:])
    sampled = list(parent.completion_ids)
    if not rest:
        return SplicePlan(None, reason="framing_unclear", detail="nothing follows the reply in the server's render")
    if sampled and sampled[-1] == rest[0]:  # the sampled end-of-turn token is the template's
        return SplicePlan(list(parent.prompt_ids) + sampled + rest[1:], sampled_content=sampled[:-1],
                          rendered_content=rendered, boundary=boundary)
    if parent.finish_reason != "length":
        return SplicePlan(None, sampled_content=sampled, rendered_content=rendered, reason="end_of_turn_differs",
                          detail=f"the reply ended with id {sampled[-1] if sampled else None} where the template "
                                 f"closes the turn with id {rest[0]}")
    # cut by max_tokens: the template's end-of-turn token (rest[0]) closes the turn
    return SplicePlan(list(parent.prompt_ids) + sampled + rest, sampled_content=sampled, rendered_content=rendered,
                      boundary=boundary)


def restore_reasoning(message: Mapping[str, Any], sampled_text: str) -> dict[str, Any]:
    """The assistant turn as the harness sent it, with the sampled reasoning block put back.

    The content becomes the sampled text up to and including ``</think>`` followed by the content
    the harness sent (tool calls stay in `tool_calls`), the form reasoning templates read; any
    reasoning field the harness sent is dropped so the reasoning appears once.

    Args:
        message: the assistant message from the request.
        sampled_text: the decoded sampled ids of that turn (they hold ``</think>``).

    Returns:
        The restored message (a new dict).
    """
    head = sampled_text[: sampled_text.index(THINK_CLOSE) + len(THINK_CLOSE)]
    content = message.get("content")
    text = content if isinstance(content, str) else "".join(
        str(p.get("text", "")) for p in content or [] if isinstance(p, Mapping))
    out = {k: v for k, v in message.items() if k not in ("reasoning", "reasoning_content")}
    out["content"] = head + "\n\n" + text.lstrip("\n")
    return out


def content_mismatch_detail(sampled_text: str, rendered_text: str) -> str:
    """A sentence saying where a reply's rendered text departs from its sampled text.

    Args:
        sampled_text: the decoded sampled ids.
        rendered_text: the decoded ids the server renders from the harness's message.

    Returns:
        The sentence (texts are not quoted: they are in the record already).
    """
    pos = next((i for i, (a, b) in enumerate(zip(sampled_text, rendered_text)) if a != b),
               min(len(sampled_text), len(rendered_text)))
    hint = ""
    if sampled_text.endswith(rendered_text) and len(rendered_text) < len(sampled_text):
        hint = " (the history drops the start of the reply, e.g. its reasoning)"
    elif (edit := describe_edit(sampled_text, rendered_text)) is not None:
        hint = f" ({edit})"
    return (f"the reply in the history ({len(rendered_text)} chars) differs from the sampled text "
            f"({len(sampled_text)} chars) from char {pos}{hint}")
