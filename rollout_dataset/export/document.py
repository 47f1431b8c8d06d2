"""Trace records -> the rollout document (``rollout.json``) and the turns document (``turns.json``).

The rollout document is everything a trainer needs, precomputed and labelled, never filtered:
every call in arrival order (discarded ones flagged), the graph's stats, one labelled sequence per
root-to-leaf path with its findings, rollout-level findings, and ``trainable``, the single gate.
Its layout is declared once, in ``schema/schemas/rollout.schema.json``; ``turns.json`` in
``turns.schema.json``.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

from rollout_dataset.export.breaks import BreakCause
from rollout_dataset.export.continuity import continuity_of, continuity_summary
from rollout_dataset.export.findings import (
    call_findings,
    finding,
    has_error,
    prefix_breaks,
    retokenization_findings,
    stored_conversation_findings,
)
from rollout_dataset.export.sequences import AGENT, AUXILIARY, DISCARDED, PathSequence, assign_roles, build_sequences
from rollout_dataset.export.cut_calls import cut_calls, cut_call_findings
from rollout_dataset.graph import RolloutGraph, build_graph, is_generation_record

__all__ = ["SCHEMA_VERSION", "CAPTURE_LEVELS", "capture_level_of", "export_rollout", "turns_document"]

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
CAPTURE_LEVELS = ("tokens", "text", "none")


def capture_level_of(records: Iterable[dict[str, Any]]) -> str:
    """The rollout's capture level: the lowest level among its completed generation calls.

    A call cut before its answer ended (`rollout_dataset.graph.cut_reason`: the harness killed
    mid-stream, a timeout) does not count: it is named in findings and trained on nowhere. A
    rollout whose every call was cut has no completed call, so its level is ``"none"``.

    Args:
        records: trace records.

    Returns:
        ``"tokens"``, ``"text"`` or ``"none"`` (``"none"`` when there is no completed generation call).
    """
    levels = [r.get("capture_level", "none") for r in records if is_generation_record(r)]
    if not levels:
        return "none"
    return str(max(levels, key=lambda lv: CAPTURE_LEVELS.index(lv) if lv in CAPTURE_LEVELS else len(CAPTURE_LEVELS)))


def _chat_template_kwargs(record: dict[str, Any]) -> dict[str, Any]:
    request = record.get("request")
    kwargs = request.get("chat_template_kwargs") if isinstance(request, dict) else None
    return dict(kwargs) if isinstance(kwargs, dict) else {}


def _node_roles(graph: RolloutGraph, sequences: list[PathSequence]) -> dict[int, str]:
    rank = {AGENT: 0, AUXILIARY: 1, DISCARDED: 2}
    roles: dict[int, str] = {}
    for seq in sequences:
        for node_id in seq.node_ids:
            if node_id not in roles or rank[seq.role] < rank[roles[node_id]]:
                roles[node_id] = seq.role
    return roles


def _earlier_reasoning_absent(root_index: int, causes: dict[int, BreakCause],
                              recorded: dict[int, dict[str, Any]]) -> bool:
    """Whether the prompt of a sequence starting at `root_index` lacks reasoning sampled before it."""
    if root_index in causes:
        return causes[root_index].reasoning_absent
    return (recorded.get(root_index) or {}).get("status") == "reasoning_dropped"


def export_rollout(
    records: Iterable[dict[str, Any]],
    *,
    session_id: str,
    metadata: dict[str, Any] | None = None,
    capture_level: str,
    rollout_type: str | None = None,
    tokenizer: Any = None,
    include_discarded: bool = True,
) -> dict[str, Any]:
    """Build the rollout document of one session.

    Args:
        records: the session's trace records (every call; non-generation calls stay out of the graph).
        session_id: the proxy session id.
        metadata: free-form metadata carried into the document (task id, model, harness, ...).
        capture_level: ``tokens`` (a training rollout) or ``text``/``none`` (structure only: token
            arrays empty, nothing trainable).
        rollout_type: ``train`` or ``eval``; defaults to ``train`` at ``tokens`` and ``eval`` below.
        tokenizer: a Hugging Face tokenizer; when given, each call's request is re-rendered through
            its chat template and compared to the server's prompt ids (``retokenization_skew``).
        include_discarded: keep sequences whose role is ``discarded`` (labelled, on by default).

    Returns:
        The rollout document (see ``rollout.schema.json``).

    Raises:
        ValueError: an unknown capture level or rollout type, or a malformed record.
    """
    if capture_level not in CAPTURE_LEVELS:
        raise ValueError(f"capture_level must be one of {CAPTURE_LEVELS}, got {capture_level!r}")
    rollout_type = rollout_type or ("train" if capture_level == "tokens" else "eval")
    if rollout_type not in ("train", "eval"):
        raise ValueError(f"rollout_type must be 'train' or 'eval', got {rollout_type!r}")
    records = list(records)
    graph = build_graph(records)
    with_tokens = capture_level == "tokens"
    trainable_capture = with_tokens and rollout_type == "train"
    by_index = {int(r.get("index", -1)): r for r in records}

    # Call-level findings first: they gate the sequences through those calls.
    per_call: dict[int, list[dict[str, Any]]] = {}
    for node in graph.nodes():
        record = by_index.get(node.index, {})
        found = call_findings(node, tokens_expected=with_tokens) + stored_conversation_findings(record)
        repaired = (record.get("continuity") or {}).get("status") == "repaired"  # differs by design, recorded
        if tokenizer is not None and with_tokens and not repaired:
            found += retokenization_findings(node, tokenizer, _chat_template_kwargs(by_index.get(node.index, {})))
        per_call[node.node_id] = found

    rollout_findings: list[dict[str, Any]] = []
    cut = cut_calls(records)
    if not len(graph):
        what = "no completed generation call" if cut else "no generation call"
        rollout_findings.append(finding("no_generation_calls", f"session {session_id}: the trace holds {what}"))
    rollout_findings += cut_call_findings(cut)
    if not with_tokens:
        rollout_findings.append(
            finding("eval_capture", f"capture level {capture_level!r}: structure only, token arrays empty, nothing trainable")
        )
    break_findings, break_causes = prefix_breaks(
        graph, tokenizer if with_tokens else None, lambda i: _chat_template_kwargs(by_index.get(i, {})) or {})
    rollout_findings += break_findings
    recorded_continuity = continuity_of(records)
    rollout_gate_ok = not has_error(rollout_findings)

    sequences = build_sequences(graph, with_tokens=with_tokens)
    assign_roles(graph, sequences)
    rows: list[dict[str, Any]] = []
    for seq in sequences:
        if seq.role == DISCARDED and not include_discarded:
            continue
        found = [f for node_id in seq.node_ids for f in per_call[node_id]]
        if not (len(seq.input_ids) == len(seq.loss_mask) == len(seq.logprobs)):
            found.append(
                finding(
                    "length_mismatch",
                    f"sequence ending at call {seq.node_ids[-1]}: input_ids {len(seq.input_ids)}, "
                    f"loss_mask {len(seq.loss_mask)}, logprobs {len(seq.logprobs)}",
                )
            )
        n_trainable = seq.n_trainable
        trainable = trainable_capture and seq.role == AGENT and n_trainable > 0 and rollout_gate_ok and not has_error(found)
        rows.append(
            {
                "role": seq.role,
                "root_id": seq.root_id,
                "node_ids": seq.node_ids,
                "n_turns": seq.n_turns,
                "prompt_len": seq.prompt_len,
                "turn_lengths": seq.turn_lengths,
                "n_trainable": n_trainable if trainable_capture else 0,
                "input_ids": seq.input_ids,
                "loss_mask": seq.loss_mask if trainable_capture else [0] * len(seq.loss_mask),
                "logprobs": seq.logprobs,
                "trainable": trainable,
                "findings": found,
                "earlier_reasoning_absent": _earlier_reasoning_absent(
                    graph.get(seq.root_id).index, break_causes, recorded_continuity),
            }
        )

    roles = _node_roles(graph, sequences)
    trained = {i for row in rows if row["trainable"] for i in row["node_ids"]}
    calls = []
    for node in graph.nodes():
        calls.append(
            {
                "index": node.index,
                "call_id": node.call_id,
                "endpoint": node.endpoint,
                "parent": node.parent,
                "root": graph.root_of(node.node_id),
                "children": list(node.children),
                "role": roles.get(node.node_id, AUXILIARY),
                "discarded": graph.is_discarded(node.node_id),
                "trained": node.node_id in trained,
                "n_prompt_ids": len(node.prompt_ids),
                "n_sampled_ids": len(node.sampled_ids),
                "n_tools": node.n_tools,
                "tool_calls": node.tool_call_names,
                "finish_reason": node.finish_reason,
                "harness_session_id": node.harness_session_id,
                "requested_sampling_params": node.requested_sampling_params,
                "effective_sampling_params": node.effective_sampling_params,
                "findings": per_call[node.node_id],
            }
        )
        if node.index in recorded_continuity:
            calls[-1]["continuity"] = recorded_continuity[node.index]["status"]

    call_level = [f for node in graph.nodes() for f in per_call[node.node_id]]
    trainable_rows = [r for r in rows if r["trainable"]]
    stats = {
        **graph.stats(),
        "n_sequences": len(rows),
        "n_trainable_sequences": len(trainable_rows),
        "n_trainable_tokens": sum(r["n_trainable"] for r in trainable_rows),
    }
    document = {
        "schema_version": SCHEMA_VERSION,
        "session_id": session_id,
        "metadata": dict(metadata or {}),
        "capture_level": capture_level,
        "rollout_type": rollout_type,
        "trainable": bool(trainable_rows) and rollout_gate_ok,
        "stats": stats,
        "calls": calls,
        "sequences": rows,
        "findings": rollout_findings + call_level,
        "continuity": continuity_summary(calls, recorded_continuity),
    }
    if cut:  # calls cut before their answer ended: out of the graph, kept here with their partial answer
        document["cut_calls"] = cut
    harness_sessions = graph.harness_sessions()
    if harness_sessions:  # the harness's own sessions, subagents under their parents (present only then)
        document["harness_sessions"] = [session.as_dict() for session in harness_sessions]
    log.debug("exported session %s: %s", session_id, stats)
    return document


def turns_document(source: dict[str, Any] | RolloutGraph, records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The turns document (``turns.json``): one entry per generation call, in arrival order.

    ``role`` is the call's role (``agent`` when it lies on any agent sequence, else ``auxiliary``,
    else ``discarded``); ``trained`` says it lies on a trainable agent sequence; ``mask`` is derived
    (0 on every prompt id, 1 on every output id). Below capture level ``tokens`` the id arrays are
    empty and ``per_token_logps`` is null.

    Args:
        source: the rollout document from ``export_rollout``, or a graph (then roles and
            ``trained`` are computed here, at the records' own capture level).
        records: the same trace records.

    Returns:
        ``{"schema_version": 1, "mask_is_derived": True, "turns": [...]}`` and, when some call was
        cut before its answer ended, ``cut_calls`` as in the rollout document (see ``turns.schema.json``).
    """
    records = list(records)
    if isinstance(source, RolloutGraph):
        level = capture_level_of(records)
        document = export_rollout(records, session_id="", capture_level=level)
        graph = source
    else:
        document = source
        graph = build_graph(records)
    calls = {c["index"]: c for c in document.get("calls", [])}
    with_tokens = document.get("capture_level") == "tokens"
    turns = []
    for turn, node in enumerate(graph.nodes()):
        call = calls.get(node.index, {})
        use = with_tokens and node.has_ids
        prompt = node.prompt_ids if use else []
        output = node.sampled_ids if use else []
        lps = node.sampled_logprobs if use else None
        turns.append(
            {
                "turn": turn,
                "call_index": node.index,
                "role": call.get("role", AUXILIARY),
                "trained": bool(call.get("trained", False)),
                "tool_calls": node.tool_call_names,
                "n_prompt_ids": len(prompt),
                "n_output_ids": len(output),
                "prompt_ids": prompt,
                "output_ids": output,
                "per_token_logps": lps,
                "mask": [0] * len(prompt) + [1] * len(output),
                "finish_reason": node.finish_reason,
            }
        )
    out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "mask_is_derived": True, "turns": turns}
    if document.get("cut_calls"):  # calls cut before their answer ended: no turn, their partial answer here
        out["cut_calls"] = document["cut_calls"]
    return out
