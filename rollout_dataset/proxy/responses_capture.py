"""Token capture for the Responses API (`/v1/responses`): what to ask vLLM for, what to strip, where ids
come from.

vLLM 0.32 gives a Responses answer its token ids when asked `enable_response_messages: true`:
`input_messages` and `output_messages` are lists of ``{"type": "raw_message_tokens", "message",
"tokens"}`` (the prompt's and the output's ids), in the final `response.completed` event when
streaming too; `include: ["message.output_text.logprobs"]` adds per-token logprobs to the
`output_text` parts. The proxy asks for both, records them, and gives the harness the answer as the
server sends it when not asked: `input_messages`/`output_messages` null, `output_text` parts with
`logprobs: null` (whole objects) or `[]` (stream deltas). Logprobs cover output text only: when they
do not cover every output id (a vLLM 0.32 Responses *stream* leaves out tokens that add no text of
their own: the end-of-sequence token, a function call's tokens, bytes of an unfinished character;
whole answers cover every id), `per_token_logps` stays null and a note says why: ids are exact, logprobs
are never padded or guessed.

vLLM 0.32 serving a gpt-oss model refuses that `include` with HTTP 400 ("logprobs are not supported
with gpt-oss models"). When the harness did not ask for it itself, the refusal is the proxy's doing:
the relay sends the call once more without the proxy's `include` (`without_logprobs`; the harness's
body as it came, `enable_response_messages` still added), remembers the model once that call succeeds
(`LogprobRefusals`, so later calls do not pay the refused round trip), and the record says why it
has no logprobs. Only that exact refusal counts (`refuses_logprobs`): any other 400, even one whose
message mentions logprobs, goes to the harness as the server sent it. That server's `input_messages`/`output_messages` are Harmony messages without
token ids, so such a record is at level ``text``, and its notes say so.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from rollout_dataset.proxy.jsoncodec import dumps_standard

__all__ = ["partial_response", "LOGPROBS_INCLUDE", "LOGPROBS_REFUSAL_MESSAGE", "LOGPROBS_REFUSAL_PARAM", "LOGPROBS_REFUSED_NOTE",
           "LogprobRefusals", "ResponsesAssembler",
           "prepare_responses", "strip_responses", "responses_token_fields", "refuses_logprobs",
           "without_logprobs"]

#: the `include` value that asks for output-text logprobs
LOGPROBS_INCLUDE = "message.output_text.logprobs"
#: vLLM 0.32's whole error message (and `param`) refusing output logprobs for a gpt-oss model
LOGPROBS_REFUSAL_MESSAGE = "logprobs are not supported with gpt-oss models"
LOGPROBS_REFUSAL_PARAM = "logprobs"
#: the note of a record whose call was sent without the proxy's logprob request
LOGPROBS_REFUSED_NOTE = ("the server refuses output logprobs on /v1/responses (vLLM's gpt-oss path answers "
                         f"HTTP 400 '{LOGPROBS_REFUSAL_MESSAGE}'): sent without the proxy's "
                         f"include of {LOGPROBS_INCLUDE}, recorded without logprobs")
#: largest error body read to tell a logprob refusal (bytes)
REFUSAL_BODY_CAP = 64 * 1024
_FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")


def prepare_responses(parsed: dict[str, Any], limits: dict[str, Any] | None = None) -> tuple[bool, bool, dict, bytes]:
    """The upstream body of a Responses call.

    Args:
        parsed: the harness's body (not modified).
        limits: output limits from context fitting.

    Returns:
        ``(asked_ids, asked_logprobs, changes, body)``: what the harness asked for itself, the fields
        the proxy added or changed (with the values sent), and the upstream body.
    """
    asked_ids = parsed.get("enable_response_messages") is True
    include = parsed.get("include")
    asked_logprobs = isinstance(include, list) and LOGPROBS_INCLUDE in include
    changes: dict[str, Any] = {}
    if not asked_ids:
        changes["enable_response_messages"] = True
    if not asked_logprobs:
        changes["include"] = (list(include) if isinstance(include, list) else []) + [LOGPROBS_INCLUDE]
    changes.update(limits or {})
    body = {**parsed, **changes}
    return asked_ids, asked_logprobs, changes, dumps_standard(body)  # a lone surrogate stays an escape


def refuses_logprobs(status: int, body: bytes) -> bool:
    """Whether an answer is the server's refusal of output logprobs on `/v1/responses`.

    vLLM 0.32 (`responses/serving.py`, `_validate_create_responses_input`) answers a gpt-oss model's
    call that includes the output-text logprobs with HTTP 400, an error whose message is "logprobs are
    not supported with gpt-oss models" and whose `param` is ``logprobs``.

    Args:
        status: the answer's HTTP status.
        body: the answer's body (JSON).

    Returns:
        True only for an HTTP 400 whose ``error`` object has exactly that message and `param`: a 400 that
        merely mentions logprobs (vLLM's validation errors echo the harness's input values) is the
        harness's to see, and must not make the proxy drop logprobs for the model.
    """
    if status != 400:
        return False
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return False
    error = parsed.get("error") if isinstance(parsed, dict) else None
    return (isinstance(error, dict) and error.get("message") == LOGPROBS_REFUSAL_MESSAGE
            and error.get("param") == LOGPROBS_REFUSAL_PARAM)


def without_logprobs(parsed: dict[str, Any], changes: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """The upstream body of a Responses call without the proxy's logprob request.

    Args:
        parsed: the harness's body (not modified).
        changes: the fields `prepare_responses` added or changed.

    Returns:
        ``(changes, body)``: the changes still made (the harness's own `include`, if any, goes as it
        came) and the upstream body.
    """
    kept = {key: value for key, value in changes.items() if key != "include"}
    return kept, dumps_standard({**parsed, **kept})


class LogprobRefusals:
    """The models whose server refused the output-text logprobs, most recent last (bounded).

    Args:
        size: how many models are remembered (the oldest is forgotten first).
    """

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._models: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, model: object) -> bool:
        return isinstance(model, str) and model in self._models

    def add(self, model: object) -> None:
        """Remember that the server refused logprobs for `model` (a name that is not a string is not kept)."""
        if not isinstance(model, str):
            return
        self._models[model] = None
        self._models.move_to_end(model)
        while len(self._models) > self.size:
            self._models.popitem(last=False)


def _strip_parts(item: Any) -> Any:
    """A message item with its output_text parts' logprobs nulled (a copy), or the item itself."""
    if not isinstance(item, dict) or not isinstance(item.get("content"), list):
        return item
    if not any(isinstance(p, dict) and p.get("logprobs") for p in item["content"]):
        return item
    return {**item, "content": [{**p, "logprobs": None} if isinstance(p, dict) and p.get("logprobs") else p
                                for p in item["content"]]}


def _strip_response(resp: dict[str, Any], asked_ids: bool, asked_logprobs: bool,
                    top_logprobs_set: bool) -> dict[str, Any] | None:
    out: dict[str, Any] | None = None
    if not asked_logprobs and not top_logprobs_set and resp.get("top_logprobs") == 0:
        out = {**resp, "top_logprobs": None}  # vLLM echoes 0 only when output logprobs are included
    if not asked_ids:
        for key in ("input_messages", "output_messages"):
            if resp.get(key) is not None:
                out = out if out is not None else dict(resp)
                out[key] = None
    if not asked_logprobs and isinstance(resp.get("output"), list):
        items = [_strip_parts(item) for item in resp["output"]]
        if any(a is not b for a, b in zip(items, resp["output"])):
            out = out if out is not None else dict(resp)
            out["output"] = items
    return out


def strip_responses(obj: Any, asked_ids: bool, asked_logprobs: bool, top_logprobs_set: bool = False) -> Any | None:
    """What the harness gets: a Responses object or stream event without what it did not ask for.

    Args:
        obj: a parsed response, or one stream event's data.
        asked_ids: the harness asked `enable_response_messages` itself.
        asked_logprobs: the harness asked the output-text logprobs itself.
        top_logprobs_set: the harness set `top_logprobs` itself (else vLLM's 0 becomes null again).

    Returns:
        The edited copy, or None when nothing changes (forward the original bytes).
    """
    if not isinstance(obj, dict) or (asked_ids and asked_logprobs):
        return None
    kind = obj.get("type")
    if isinstance(obj.get("response"), dict):  # response.created / in_progress / completed ...
        inner = _strip_response(obj["response"], asked_ids, asked_logprobs, top_logprobs_set)
        return None if inner is None else {**obj, "response": inner}
    if kind is None or kind == "response":
        return _strip_response(obj, asked_ids, asked_logprobs, top_logprobs_set)
    if asked_logprobs:
        return None
    if kind == "response.output_text.delta" and obj.get("logprobs"):
        return {**obj, "logprobs": []}
    if kind == "response.content_part.done" and isinstance(obj.get("part"), dict) and obj["part"].get("logprobs"):
        return {**obj, "part": {**obj["part"], "logprobs": None}}
    if kind == "response.output_item.done":
        item = _strip_parts(obj.get("item"))
        return None if item is obj.get("item") else {**obj, "item": item}
    return None


class ResponsesAssembler:
    """Keeps what a Responses stream's record needs: the final response object (same interface as
    `rollout_dataset.proxy.streaming.StreamAssembler`)."""

    def __init__(self) -> None:
        self.chunks = 0
        self.errors: list[Any] = []
        self._final: dict[str, Any] | None = None
        self._latest: dict[str, Any] | None = None

    def add(self, event: Any) -> None:
        """Take one parsed event."""
        self.chunks += 1
        if not isinstance(event, dict):
            return
        if event.get("type") == "error" or "error" in event and event.get("type") is None:
            self.errors.append(event)
        if isinstance(event.get("response"), dict):
            self._latest = event["response"]
            if event.get("type") in _FINAL_EVENTS:
                self._final = event["response"]

    @property
    def finished(self) -> bool:
        """Whether a final event (``response.completed`` / ``.incomplete`` / ``.failed``) came."""
        return self._final is not None

    def response(self) -> dict[str, Any] | None:
        """The final response object (the last one seen when the stream ended early)."""
        return self._final if self._final is not None else self._latest


def _ids_of(messages: Any, field: str, notes: list[str]) -> list[int] | None:
    """The token ids of `input_messages` / `output_messages`, or None (with a note when they are not integers)."""
    if not isinstance(messages, list) or not messages:
        return None
    if not any(isinstance(m, dict) and "tokens" in m for m in messages):
        if all(isinstance(m, dict) and "role" in m for m in messages):
            notes.append(f"{field} are Harmony messages without token ids (vLLM's gpt-oss Responses path)")
        return None
    ids: list[int] = []
    for message in messages:
        tokens = message.get("tokens") if isinstance(message, dict) else None
        if not isinstance(tokens, list):
            return None
        ids.extend(tokens)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        notes.append(f"{field} tokens are not integers; ignored")
        return None
    return ids


def responses_token_fields(response: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    """Fill a record's token fields from a Responses object (see `rollout_dataset.proxy.tokens.token_fields`).

    Args:
        response: the full response (or a stream's final one), as the server sent it.
        out: the token-field dict to fill (defaults already set).

    Returns:
        `out`.
    """
    notes: list[str] = out["notes"]
    usage = response.get("usage")
    out["usage"] = usage if isinstance(usage, dict) else None
    output = [item for item in response.get("output") or () if isinstance(item, dict)]
    calls = any(item.get("type") == "function_call" for item in output)
    details = response.get("incomplete_details") or {}
    if response.get("status") == "incomplete" and isinstance(details, dict) and details.get("reason") == "max_output_tokens":
        out["finish_reason"] = "length"
    elif calls:
        out["finish_reason"] = "tool_calls"
    elif response.get("status") == "completed":
        out["finish_reason"] = "stop"
    else:
        out["finish_reason"] = response.get("status")
    out["prompt_token_ids"] = _ids_of(response.get("input_messages"), "input_messages", notes)
    out["completion_token_ids"] = _ids_of(response.get("output_messages"), "output_messages", notes)
    if out["prompt_token_ids"] is not None and out["completion_token_ids"] is not None:
        out["capture_level"] = "tokens"
        out["token_source"] = "response_messages"
    else:
        out["capture_level"] = "text"
        notes.append("the server returned no input_messages/output_messages token ids "
                     "(enable_response_messages); recorded as text")
    values: list[Any] = []
    for item in output:
        for part in item.get("content") or () if item.get("type") == "message" else ():
            if isinstance(part, dict) and isinstance(part.get("logprobs"), list):
                values.extend(entry.get("logprob") for entry in part["logprobs"] if isinstance(entry, dict))
    ids = out["completion_token_ids"]
    if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        if ids is None or len(values) == len(ids):
            out["per_token_logps"] = [float(v) for v in values]
        else:
            notes.append(f"output-text logprobs cover {len(values)} of {len(ids)} output tokens (a vLLM Responses "
                         "stream sends none for tokens that add no text of their own: the end-of-sequence token, "
                         "a function call's tokens, bytes of an unfinished character); per_token_logps left null")
    elif values:
        notes.append("the server's output-text logprobs are not all numbers; per_token_logps left null")
    elif ids:
        notes.append("the server returned no output-text logprobs for these output tokens; per_token_logps left null")
    if isinstance(usage, dict) and ids is not None and isinstance(usage.get("output_tokens"), int) \
            and usage["output_tokens"] != len(ids):
        notes.append(f"completion ids ({len(ids)}) disagree with usage.output_tokens ({usage['output_tokens']})")
    return out


_DELTA_FIELDS = {"response.output_text.delta": ("message", "output_text"),
                 "response.reasoning_text.delta": ("reasoning", "reasoning_text"),
                 "response.function_call_arguments.delta": ("function_call", None)}


def partial_response(latest: dict[str, Any] | None, events: list[str]) -> dict[str, Any] | None:
    """What a Responses stream cut before its final event had said: the last response object it
    carried (``in_progress``, its ``output`` empty), its ``output`` rebuilt from the events' items
    and text deltas. Run only on a cut stream (no per-event cost on a whole one).

    Args:
        latest: the last response object the stream carried (``response.created``/``.in_progress``), or None.
        events: the events' data as they came (`rollout_dataset.proxy.stream_relay`).

    Returns:
        The partial response (``status`` as the stream left it), or None when the stream carried none.
    """
    items: dict[int, dict[str, Any]] = {}
    for data in events:
        try:
            event = json.loads(data)
        except ValueError:
            continue
        if not isinstance(event, dict) or not isinstance(event.get("output_index"), int):
            continue
        kind, index = event.get("type"), event["output_index"]
        if kind in ("response.output_item.added", "response.output_item.done") and isinstance(event.get("item"), dict):
            items[index] = dict(event["item"])
        elif kind in _DELTA_FIELDS and isinstance(event.get("delta"), str):
            shape, part = _DELTA_FIELDS[kind]
            item = items.setdefault(index, {"type": shape, "status": "in_progress"})
            if part is None:
                item["arguments"] = str(item.get("arguments") or "") + event["delta"]
                continue
            found = item.get("content")
            content: list[Any] = list(found) if isinstance(found, list) else []
            if not content or not isinstance(content[-1], dict) or content[-1].get("type") != part:
                content = [*content, {"type": part, "text": ""}]
            content[-1] = {**content[-1], "text": str(content[-1].get("text") or "") + event["delta"]}
            item["content"] = content
    if latest is None and not items:
        return None
    return {**(latest or {"object": "response", "status": "in_progress"}), "output": [items[k] for k in sorted(items)]}
