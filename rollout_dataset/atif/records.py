"""An ATIF trajectory's model calls as the trace records a capture writes.

Each agent step that called a model becomes one chat-completion record: the request is the chat so
far (system and user steps, earlier answers, tool results), the answer is the step's message,
reasoning and tool calls, and the ids and logprobs come from the step's `metrics`. Rebuilt as a
valid OpenAI chat: each tool call is answered by a `tool` message (docs/atif.md says how results
without a `source_call_id` are matched), image parts are kept as `image_url` parts naming the
image (never as text). Pure: no I/O.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterator

from rollout_dataset.atif.export import EXTRA_KEY
from rollout_dataset.trace_integrity import in_arrival_order

__all__ = ["ours", "is_model_step", "message_text", "records_of", "ImportedCalls"]


def ours(obj: dict[str, Any]) -> dict[str, Any]:
    """This project's own fields of an ATIF object (its `extra.rollout_dataset`), or {}."""
    extra = obj.get("extra")
    mine = extra.get(EXTRA_KEY) if isinstance(extra, dict) else None
    return mine if isinstance(mine, dict) else {}


def is_model_step(step: dict[str, Any]) -> bool:
    """Whether a step is a model call (an agent step not copied from elsewhere, with calls)."""
    return step["source"] == "agent" and step.get("llm_call_count") != 0 and not step.get("is_copied_context")



def message_text(message: Any) -> str:
    """The text of an ATIF message (a string, or content parts: their text parts joined, images left out).

    Args:
        message: a step's `message` or a result's `content`.

    Returns:
        The text ("" for none).
    """
    if isinstance(message, str):
        return message
    return "".join(str(p.get("text") or "") for p in message or [] if isinstance(p, dict) and p.get("type") == "text")


def _content(message: Any) -> Any:
    """An ATIF message as chat content: a string; parts with an image as OpenAI parts, the image an `image_url`
    naming its file (or its data URL), never text made up for it; any other part as it is."""
    if isinstance(message, str) or message is None:
        return message or ""
    if all(isinstance(p, dict) and p.get("type") == "text" for p in message):
        return message_text(message)
    parts: list[Any] = []
    for part in message:
        source = part.get("source") if isinstance(part, dict) else None
        if isinstance(part, dict) and part.get("type") == "text":
            parts.append({"type": "text", "text": str(part.get("text") or "")})
        elif isinstance(part, dict) and part.get("type") == "image" and isinstance(source, dict):
            url = source.get("path") or source.get("url")
            if url is None and isinstance(source.get("data"), str):
                url = f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            parts.append(part)
    return parts


def _assistant(step: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant",
                               "content": None if ours(step).get("content_null") is True else _content(step["message"])}
    if step.get("reasoning_content"):
        message["reasoning_content"] = step["reasoning_content"]
    calls = []
    for call in step.get("tool_calls") or []:
        mine = ours(call)
        arguments = mine["raw_arguments"] if "raw_arguments" in mine else json.dumps(call["arguments"], ensure_ascii=False)
        calls.append({"id": None if mine.get("id_missing") else call["tool_call_id"], "type": "function",
                      "function": {"name": call["function_name"], "arguments": arguments}})
    if calls:
        message["tool_calls"] = calls
    return message


def _observations(step: dict[str, Any], answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The step's results as the messages that follow the answer: a valid OpenAI sequence.

    A result naming its call (`source_call_id`) is that call's `tool` message. Results naming none
    answer the step's still unanswered tool calls in order (terminus-2 writes one terminal output
    for a batch of keystroke calls); a call left without a result gets a `tool` message with empty
    content; results left over follow as `user` messages.
    """
    named: list[dict[str, Any]] = []
    loose: list[Any] = []
    for result in (step.get("observation") or {}).get("results") or []:
        call_id = result.get("source_call_id") or ours(result).get("tool_call_id")
        content = _content(result.get("content"))
        if call_id is not None:
            named.append({"role": "tool", "tool_call_id": call_id, "content": content})
        else:
            loose.append(content)
    answered = {m["tool_call_id"] for m in named}
    open_calls = [c["id"] for c in answer.get("tool_calls") or [] if c["id"] is not None and c["id"] not in answered]
    if not open_calls or not (named or loose):  # nothing answers the calls (the last step): nothing made up
        return named + [{"role": "user", "content": c} for c in loose]
    filled = [{"role": "tool", "tool_call_id": cid, "content": loose[k] if k < len(loose) else ""}
              for k, cid in enumerate(open_calls)]
    return named + filled + [{"role": "user", "content": c} for c in loose[len(open_calls):]]


def _seconds(timestamp: Any) -> float | None:
    """An ISO 8601 time as epoch seconds; None when absent, unparsable or out of the datetime range."""
    if not isinstance(timestamp, str):
        return None
    try:
        return _dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):  # year 1 at +01:00 is before year 1 in UTC
        return None


@dataclass
class _Call:
    order: int
    call_index: int | None
    where: str
    step: dict[str, Any]
    messages: list[dict[str, Any]]
    tools: list[Any]
    model: str | None


def _calls(doc: dict[str, Any], where: str, order: list[int]) -> Iterator[_Call]:
    """The model calls of one trajectory and its subagents, with the chat each one was sent."""
    agent = doc["agent"]
    tools = agent.get("tool_definitions") or []
    messages: list[dict[str, Any]] = []
    for i, step in enumerate(doc["steps"]):
        mine = ours(step)
        if step["source"] in ("system", "user"):
            role = mine.get("chat_role") if mine.get("chat_role") in ("developer", "system", "user") else step["source"]
            messages.append({"role": role, "content": _content(step["message"])})
            continue
        if is_model_step(step):
            order[0] += 1
            index = mine.get("call_index")
            yield _Call(order[0], index if isinstance(index, int) and index >= 0 else None, f"{where}.steps[{i}]", step,
                        list(messages), mine.get("tool_definitions", tools), step.get("model_name") or agent.get("model_name"))
        sent_back = mine.get("sent_back")  # the reply as the harness sent it back (an export said it differed)
        answer = sent_back if isinstance(sent_back, dict) else _assistant(step)
        messages.append(answer)
        messages.extend(_observations(step, answer))
    for k, sub in enumerate(doc.get("subagent_trajectories") or []):
        yield from _calls(sub, f"{where}.subagent_trajectories[{k}]", order)


def _level(calls: list[_Call]) -> tuple[str, str | None]:
    """`tokens` when every call has its prompt and completion ids, else `text` and the first missing field.

    Logprobs are not needed: a step without them is token-exact with ``per_token_logps`` null, as a
    captured call whose server gave none (a streamed Responses call; the export's `logprobs_missing`).
    """
    if not calls:
        return "text", "the trajectory has no model step"
    for call in calls:
        metrics = call.step.get("metrics") or {}
        for field in ("prompt_token_ids", "completion_token_ids"):
            if metrics.get(field) is None:
                return "text", f"{call.where}.metrics.{field} is missing, so no token-exact sequences"
    return "tokens", None


def _record(call: _Call, index: int, session: str, level: str, source: str) -> dict[str, Any]:
    step, metrics, mine = call.step, call.step.get("metrics") or {}, ours(call.step)
    answer = _assistant(step)
    usage = None
    if metrics.get("prompt_tokens") is not None or metrics.get("completion_tokens") is not None:
        usage = {"prompt_tokens": metrics.get("prompt_tokens"), "completion_tokens": metrics.get("completion_tokens")}
        if metrics.get("cached_tokens") is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": metrics["cached_tokens"]}
    request: dict[str, Any] = {"model": call.model, "messages": call.messages}
    if call.tools:
        request["tools"] = call.tools
    finish = mine.get("finish_reason")
    at = _seconds(step.get("timestamp"))
    tokens = level == "tokens"
    sampling = mine.get("requested_sampling_params") if isinstance(mine.get("requested_sampling_params"), dict) else {}
    return {
        "schema_version": 1, "index": index, "call_id": hashlib.sha256(f"{source}:{call.where}".encode()).hexdigest()[:32],
        "session": session, "started_at": at or 0.0, "ended_at": at or 0.0, "latency_ms": 0.0, "method": "POST",
        "endpoint": "/v1/chat/completions", "stream": False, "status": 200, "request_headers": {}, "request": request,
        "upstream_changes": {},
        "response": {"object": "chat.completion", "model": call.model,
                     "choices": [{"index": 0, "message": answer, "finish_reason": finish}], "usage": usage},
        "prompt_token_ids": metrics.get("prompt_token_ids") if tokens else None,
        "completion_token_ids": metrics.get("completion_token_ids") if tokens else None,
        "per_token_logps": metrics.get("logprobs") if tokens else None,
        "finish_reason": finish, "usage": usage, "requested_sampling_params": sampling,
        "effective_sampling_params": sampling, "capture_level": level, "token_source": None,
        "harness_session_id": None,
        "notes": [f"imported from ATIF {source} {call.where}" + ("" if at else "; no usable timestamp: times are 0")],
        "error": None,
    }


@dataclass
class ImportedCalls:
    """The trace records of a trajectory and what the import needs besides.

    Attributes:
        records: the records, in index order.
        level: `tokens` or `text`.
        level_reason: why the level is below `tokens` (None when it is not).
        id_steps: ``id(step dict) -> call index`` of each model step whose ids and logprobs the
            records hold (every model step at level `tokens`; none at `text`).
    """

    records: list[dict[str, Any]]
    level: str
    level_reason: str | None
    id_steps: dict[int, int]


def records_of(doc: dict[str, Any], session: str, source: str) -> ImportedCalls:
    """The trace records of a checked trajectory.

    Args:
        doc: the trajectory (from `read_trajectory`).
        session: the session name the records carry.
        source: the file's name, for the records' notes.

    Returns:
        The records (keeping the arrival indices an exported trajectory recorded in
        `extra.rollout_dataset.call_index` when every call has a distinct one, else the document's
        order: main path, then subagents), their capture level and why it is below tokens.
    """
    calls = list(_calls(doc, "$", [0]))
    level, reason = _level(calls)
    recorded = [c.call_index for c in calls]
    indices: list[int] = [i for i in recorded if i is not None]
    if len(indices) != len(calls) or len(set(indices)) != len(indices):
        indices = list(range(len(calls)))
    records = [_record(call, idx, session, level, source) for call, idx in zip(calls, indices)]
    id_steps = {id(call.step): idx for call, idx in zip(calls, indices)} if level == "tokens" else {}
    return ImportedCalls(in_arrival_order(records), level, reason, id_steps)
