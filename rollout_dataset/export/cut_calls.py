"""Calls cut before their answer ended: kept out of the graph, kept in the rollout document.

A harness killed mid-stream (capture's ``--timeout-s``, a batch time limit, ``kill -9``), a model
server that dropped or timed out, a proxy shut down: the call's record holds an error and an answer
that never ended (`rollout_dataset.graph.cut_reason`). Such a call is no graph node, lies on no
sequence and does not lower the rollout's capture level; the document lists it in ``cut_calls``
with why it was cut and the partial answer as it came, and a ``call_cut`` finding names it.
"""

from __future__ import annotations

from typing import Any, Iterable

from rollout_dataset.export.findings import finding
from rollout_dataset.graph import cut_reason
from rollout_dataset.reasoning import message_reasoning
from rollout_dataset.wire.records import call_answer_chat

__all__ = ["cut_calls", "cut_call_findings"]

#: characters of a cut call's partial answer quoted in its finding (the whole text is in ``cut_calls``)
EXCERPT_CHARS = 200


def _partial_text(record: dict[str, Any]) -> tuple[str, str]:
    """The partial answer's content and reasoning text (tool calls' names and arguments as text)."""
    message = call_answer_chat(record)
    if message is None:
        response = record.get("response")
        return (response if isinstance(response, str) else "", "")
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    text = content if isinstance(content, str) else ""
    for call in message.get("tool_calls") or ():
        fn = (call or {}).get("function") or {} if isinstance(call, dict) else {}
        text += f"\n[tool call {fn.get('name')}: {fn.get('arguments') or ''}]"
    return text, message_reasoning(message) or ""


def cut_calls(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rollout document's ``cut_calls``: each call cut before its answer ended, in arrival order.

    Args:
        records: the session's trace records.

    Returns:
        One entry per cut call: ``call_index``, ``call_id``, ``endpoint``, ``status``, ``stream``,
        ``kind`` and ``message`` (the record's error), ``partial_text`` and ``partial_reasoning``
        (what arrived of the answer, as text), ``n_partial_ids`` (sampled ids that arrived).
    """
    out = []
    for record in sorted(records, key=lambda r: int(r.get("index", 0))):
        why = cut_reason(record)
        if why is None:
            continue
        text, reasoning = _partial_text(record)
        ids = record.get("completion_token_ids")
        out.append({
            "call_index": int(record.get("index", 0)),
            "call_id": str(record.get("call_id", "")),
            "endpoint": str(record.get("endpoint", "")),
            "status": record.get("status") if isinstance(record.get("status"), int) else None,
            "stream": bool(record.get("stream")),
            "kind": why["kind"],
            "message": why["message"],
            "partial_text": text,
            "partial_reasoning": reasoning,
            "n_partial_ids": len(ids) if isinstance(ids, list) else 0,
        })
    return out


def cut_call_findings(cut: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ``call_cut`` finding per cut call (from `cut_calls`), naming it, why, and what arrived.

    Args:
        cut: the rollout's cut calls.

    Returns:
        The findings (level WARN: they gate nothing, as the call lies on no sequence).
    """
    out = []
    for c in cut:
        text = c["partial_text"]
        excerpt = text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + f"[... {len(text) - EXCERPT_CHARS} more]"
        arrived = (f"{len(text)} characters of text, {len(c['partial_reasoning'])} of reasoning, "
                   f"{c['n_partial_ids']} sampled ids arrived" + (f": {excerpt!r}" if text else ""))
        out.append(finding(
            "call_cut",
            f"call {c['call_index']} ({c['endpoint']}, call_id {c['call_id']}) was cut before its answer ended "
            f"({c['kind']}: {c['message']}); {arrived}. Kept in the trace and in cut_calls, on no sequence",
            call_index=c["call_index"]))
    return out
