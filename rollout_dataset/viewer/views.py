"""What the pages show, computed from a rollout's dataset rows: JSON-ready dicts, no HTML.

* `index_record` — one index row (rewards, counts, audit figures) from a source's index record.
* `rollout_view` — one rollout's page minus its tokens: header (task, examples, held-out tests,
  rewards, stop reason, timings), conversation, calls (sampling requested vs effective, what the
  proxy changed, context fitting, latency, errors), the prefix graph (nodes and edges), sequences
  (counts; their tokens come by window), the audit summary and the Crafter decisions.
* `token_window` — ``count`` tokens of one sequence from ``start``: id, decoded text, special or
  not, loss mask, logprob, the call that sampled it (or whose prompt brought it), and the audit's
  scorer logprob where an audit exists. A call the sequence row's findings name `logprobs_missing`
  has its logprobs as null (unknown), not the 0.0 the dataset stores there.

All text stays data: the front end inserts it with ``textContent``, never as HTML.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rollout_dataset.export.findings import LOGPROBS_MISSING
from rollout_dataset.graph import harness_session_tree
from rollout_dataset.reasoning import THINK_CLOSE, THINK_OPEN

#: Harmony's markers of an analysis message (`<|channel|>analysis<|message|>...<|end|>`)
HARMONY_CHANNEL, HARMONY_ANALYSIS_NAME, HARMONY_END = "<|channel|>", "analysis", "<|end|>"
#: ChatML (Qwen3, the built-in tokenizer): a turn's start (its role follows) and end
CHATML_START, CHATML_END, CHATML_ASSISTANT = "<|im_start|>", "<|im_end|>", "assistant"
#: Harmony: a message's start (its author's token follows), and the other tokens that end a message
HARMONY_START, HARMONY_AUTHOR, HARMONY_OTHER_ENDS = "<|start|>", "assistant", ("<|call|>", "<|return|>")

__all__ = ["index_record", "logprobs_missing_calls", "page_json", "reasoning_positions", "rollout_view", "token_window", "MAX_WINDOW"]

#: the most tokens one window request returns.
MAX_WINDOW = 4096


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _finite(value: Any) -> Any:
    """NaN and infinities (JSON has none) as None, at any depth."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def logprobs_missing_calls(sequence: dict[str, Any]) -> set[int]:
    """The calls of a sequence whose per-token logprobs were never captured.

    The dataset stores 0.0 at their sampled positions (a float32 list has no nulls); the sequence
    row's findings name each such call (`LOGPROBS_MISSING`, with its ``call_index``).

    Args:
        sequence: a `sequences` row, its ``findings`` parsed (a cell that is not a list names none).

    Returns:
        The calls' arrival indices.
    """
    findings = sequence.get("findings")
    if not isinstance(findings, list):
        return set()
    return {int(f["call_index"]) for f in findings
            if isinstance(f, dict) and f.get("code") == LOGPROBS_MISSING and isinstance(f.get("call_index"), int)}


def page_json(value: Any) -> str:
    """The JSON text the pages read (the server's API and the static export alike).

    Rollout text may hold a lone surrogate (a harness can send one as an escape; the trace keeps it),
    which UTF-8 cannot hold: it is written as its ``\\uXXXX`` escape, which the page's ``JSON.parse``
    reads back as the same code unit. NaN and infinities, which JSON has not, become null.

    Args:
        value: a JSON-ready value (anything else is written as its ``str``).

    Returns:
        The JSON text, every character of it encodable as UTF-8.
    """
    text = json.dumps(_finite(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _share(continuity: Any) -> float | None:
    return continuity.get("exact_share") if isinstance(continuity, dict) else None


def index_record(row: dict[str, Any]) -> dict[str, Any]:
    """One index-page row from a source's index record.

    Args:
        row: from `RolloutSource.index_rows`.

    Returns:
        A flat dict of the columns the index shows (missing figures are None).
    """
    stepwise, audit = row.get("stepwise"), row.get("audit")
    stepwise = stepwise if isinstance(stepwise, dict) else {}
    audit = audit if isinstance(audit, dict) else {}
    return {
        "id": row["id"], "error": row.get("error"), "task_id": row.get("task_id"), "env": row.get("env"),
        "harness": row.get("harness"), "model": row.get("model"), "group_id": row.get("group_id"),
        "env_reward": row.get("env_reward"), "reward_after_penalties": row.get("reward_after_penalties"),
        "stepwise_reward_sum": stepwise.get("reward_sum"), "stepwise_indicator_sum": stepwise.get("indicator_sum"),
        "calls": row.get("captured_calls"), "agent_turns": row.get("agent_turns"),
        "tokens": row.get("longest_sequence_tokens"), "trainable_tokens": row.get("trainable_tokens"),
        "capture_level": row.get("capture_level"), "trainable": row.get("trainable"),
        "findings": row.get("findings_count"), "continuity_share": _share(row.get("continuity")),
        "stop_reason": row.get("stop_reason"),
        "audit_mean_abs_diff": audit.get("mean_abs_diff"), "audit_max_abs_diff": audit.get("max_abs_diff"),
        "audit_share_over_1e-2": audit.get("share_over_1e-2"), "audit_kl_k3": audit.get("kl_k3"),
    }


def _loads(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _graph(trace: list[dict[str, Any]], sequences: list[dict[str, Any]], calls_doc: Any,
           turns: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Nodes (calls) and edges (prompt extends the parent's tokens) of the prefix graph.

    From rollout.json's calls where they are at hand (artifact folders); in a dataset, from the
    sequences' paths plus each turn stored off a sequence (a discarded retry), whose prompt extends
    the tokens of its ``prefix_call_index``.
    """
    roles: dict[int, str] = {}
    for seq in sequences:
        for node in seq.get("node_ids") or []:
            roles.setdefault(int(node), seq.get("role") or "agent")
    edges: set[tuple[int, int]] = set()
    discarded: set[int] = set()
    if isinstance(calls_doc, list):  # rollout.json's calls: parent, role and discarded recorded
        for c in calls_doc:
            if isinstance(c, dict) and isinstance(c.get("index"), int):
                if isinstance(c.get("parent"), int):
                    edges.add((c["parent"], c["index"]))
                if c.get("role"):
                    roles[c["index"]] = c["role"]
                if c.get("discarded"):
                    discarded.add(c["index"])
    else:
        for seq in sequences:
            ids = [int(n) for n in seq.get("node_ids") or []]
            edges.update(zip(ids, ids[1:]))
            if seq.get("role") == "discarded" and ids:
                discarded.add(ids[-1])
        for index, turn in turns.items():
            if turn.get("sequence_index", 0) < 0 and (turn.get("prefix_call_index") or -1) >= 0:
                edges.add((int(turn["prefix_call_index"]), index))
            if turn.get("role") == "discarded":
                discarded.add(index)
            elif turn.get("role"):
                roles.setdefault(index, turn["role"])
    known = {t["call_index"] for t in trace}  # a folder that fails validation may have calls but no trace
    edges = {(a, b) for a, b in edges if a in known and b in known}
    children = {a for a, _ in edges}
    has_parent = {b for _, b in edges}
    nodes = []
    for t in trace:
        i = t["call_index"]
        nodes.append({"id": i, "role": "discarded" if i in discarded else roles.get(i, "none"),
                      "root": i not in has_parent, "fork": sum(1 for a, _ in edges if a == i) > 1,
                      "leaf": i not in children, "discarded": i in discarded,
                      "finish_reason": t.get("finish_reason"), "error": bool(t.get("error")),
                      "harness_session": t.get("harness_session_id")})
    return {"nodes": nodes, "edges": sorted([a, b] for a, b in edges)}


def _message_view(message: dict[str, Any]) -> dict[str, Any]:
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        calls.append({"id": call.get("id"), "name": function.get("name"), "arguments": function.get("arguments")})
    return {"role": message.get("role"), "content": message.get("content"),
            "reasoning": message.get("reasoning_content"), "tool_calls": calls,
            "tool_call_id": message.get("tool_call_id")}


def rollout_view(loaded: dict[str, Any], rid: str, tokenizer_note: str | None = None) -> dict[str, Any]:
    """Everything one rollout's page shows except the tokens (fetched by window).

    Args:
        loaded: from `RolloutSource.rollout_rows`.
        rid: the rollout's id in the source (its URL).
        tokenizer_note: why ids are shown undecoded, when they are.

    Returns:
        The page's data (see the module docstring).
    """
    rows, extra = loaded["rows"], loaded["extra"]
    summary = (rows.get("summary") or [{}])[0]
    task = (rows.get("task") or [{}])[0]
    trace = sorted(rows.get("trace") or [], key=lambda r: r["call_index"])
    turns = {t["call_index"]: t for t in rows.get("turns") or []}
    sequences = sorted(rows.get("sequences") or [], key=lambda r: r["sequence_index"])
    fit = summary.get("context_fit")
    fit = fit if isinstance(fit, dict) else {}
    lowered: dict[int | None, list[Any]] = {}  # call index -> its context-fit entries
    for entry in fit.get("lowered") or []:
        if isinstance(entry, dict):
            lowered.setdefault(entry.get("index"), []).append(entry)
    continuity = extra.get("call_continuity") or {}
    calls = []
    for t in trace:
        turn = turns.get(t["call_index"], {})
        calls.append({
            "index": t["call_index"], "endpoint": t.get("endpoint"), "status": t.get("status"),
            "stream": t.get("stream"), "latency_ms": t.get("latency_ms"), "ttft_ms": t.get("ttft_ms"),
            "finish_reason": t.get("finish_reason"), "capture_level": t.get("capture_level"),
            "token_source": t.get("token_source"), "n_prompt_ids": t.get("n_prompt_ids"),
            "n_completion_ids": t.get("n_completion_ids"), "role": turn.get("role"), "trained": turn.get("trained"),
            "tool_calls": turn.get("tool_calls") or [],
            "requested_sampling_params": t.get("requested_sampling_params"),
            "effective_sampling_params": t.get("effective_sampling_params"),
            "upstream_changes": t.get("upstream_changes"), "notes": t.get("notes") or [], "error": t.get("error"),
            "context_fit": lowered.get(t["call_index"], []), "continuity": continuity.get(t["call_index"]),
            "harness_session": t.get("harness_session_id"), "harness_parent_session": t.get("harness_parent_session_id"),
            "model_server": _loads(t.get("model_server")),
        })
    conversations = []
    for conv in sorted(rows.get("conversations") or [], key=lambda r: r["sequence_index"]):
        conversations.append({"sequence_index": conv["sequence_index"],
                              "messages": [_message_view(m) for m in conv.get("messages") or []],
                              "tools": _loads(conv.get("tools"))})
    audit = extra.get("audit") if isinstance(extra.get("audit"), dict) else None
    seq_views = []
    previous_root = None
    for s in sequences:
        seq_views.append({"index": s["sequence_index"], "role": s.get("role"), "trainable": s.get("trainable"),
                          "root_id": s.get("root_id"), "node_ids": s.get("node_ids"), "n_turns": s.get("n_turns"),
                          "prompt_len": s.get("prompt_len"), "n_trainable": s.get("n_trainable"),
                          "n_tokens": len(s.get("input_ids") or []), "findings": s.get("findings"),
                          "logprobs_missing_calls": sorted(logprobs_missing_calls(s)),
                          "new_root": previous_root is not None and s.get("root_id") != previous_root})
        previous_root = s.get("root_id")
    crafter = extra.get("crafter") if isinstance(extra.get("crafter"), dict) else None
    return {
        "id": rid, "rollout_id": summary.get("rollout_id"), "errors": loaded["errors"], "tokenizer_note": tokenizer_note,
        "summary": {k: v for k, v in summary.items() if k not in ("sampling_params",)},
        "task": task, "visible_tests": (rows.get("visible_tests") or [{}])[0].get("text"),
        "held_out_tests": [{"input": h.get("input"), "output": h.get("output")}
                           for h in sorted(rows.get("held_out_tests") or [], key=lambda r: r["test_index"])],
        "calls": calls, "graph": _graph(trace, sequences, extra.get("calls"), turns), "sequences": seq_views,
        "harness_sessions": [h.as_dict() for h in harness_session_tree(
            (t["call_index"], t.get("harness_session_id"), t.get("harness_parent_session_id")) for t in trace)],
        "conversations": conversations, "continuity": summary.get("continuity") or extra.get("continuity"),
        "context_fit": summary.get("context_fit"),
        "audit": None if audit is None else {k: audit.get(k) for k in ("scorer", "model", "dtype", "summary",
                                                                       "not_comparable", "worst")},
        "crafter": None if crafter is None else {"decisions": crafter.get("decisions") or [],
                                                 "unlocked": crafter.get("unlocked") or [],
                                                 "achievements_unlocked": crafter.get("achievements_unlocked"),
                                                 "crafter_return": crafter.get("crafter_return")},
        "totals": {"calls": len(trace), "tokens": sum(v["n_tokens"] for v in seq_views),
                   "trainable_tokens": sum(int(v["n_trainable"] or 0) for v in seq_views),
                   "sequences": len(seq_views)},
    }


def _call_spans(sequence: dict[str, Any], trace: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    """(first position, end of sampled span, call) per call on the path: its prompt delta then its sampled tokens."""
    n_prompt = {t["call_index"]: int(t.get("n_prompt_ids") or 0) for t in trace}
    spans, start = [], 0
    for node, sampled in zip(sequence.get("node_ids") or [], sequence.get("turn_lengths") or []):
        end = n_prompt.get(int(node), start) + int(sampled)
        spans.append((start, end, int(node)))
        start = end
    return spans


def reasoning_positions(ids: list[Any], start: int, end: int, tokenizer: Any) -> set[int]:
    """Positions in ``[start, end)`` inside a reasoning block (``<think>`` through ``</think>`` in an
    assistant turn, for ChatML: a ``<think>`` in a user's text opens none; or a Harmony analysis message
    of the assistant: ``<|channel|>analysis`` through the token that ends it,
    ``<|end|>``, or ``<|call|>`` for a built-in tool call; a tool's answer on the analysis channel, such
    as ``<|start|>python to=assistant<|channel|>analysis``, is no reasoning).

    The state is followed from the sequence's start, so a window that opens inside a block is marked.

    Args:
        ids: the sequence's ids.
        start: the window's first position.
        end: one past its last.
        tokenizer: knows the think tokens (None, or a vocabulary without them: nothing is marked).

    Returns:
        The marked positions.
    """
    convert = getattr(tokenizer, "convert_tokens_to_ids", None)
    if convert is None:
        return set()
    unknown = getattr(tokenizer, "unk_token_id", None)
    opened, closed = convert(THINK_OPEN), convert(THINK_CLOSE)
    channel, analysis = convert(HARMONY_CHANNEL), convert(HARMONY_ANALYSIS_NAME)
    harmony = all(isinstance(t, int) and t != unknown for t in (channel, analysis, convert(HARMONY_END)))
    if harmony:  # an assistant's analysis message opens at <|channel|>analysis and closes at its end token
        return _harmony_analysis_positions(ids, start, end, convert)
    if not isinstance(opened, int) or not isinstance(closed, int) or unknown in (opened, closed):
        return set()
    turn_start, turn_end = convert(CHATML_START), convert(CHATML_END)
    chatml = all(isinstance(t, int) and t != unknown for t in (turn_start, turn_end))
    author = list(tokenizer.encode(CHATML_ASSISTANT, add_special_tokens=False)) if chatml else []
    by_assistant = True  # ChatML: after the first turn header, a think block opens only in an assistant turn
    # (never in a user's text); ids with no header at all (a raw completion) are the model's
    inside, marked = False, set()
    for position in range(end):
        token = int(ids[position])
        if chatml and token == turn_start:
            by_assistant = [int(t) for t in ids[position + 1:position + 1 + len(author)]] == author
        if token == opened and by_assistant:
            inside = True
        if inside and position >= start:
            marked.add(position)
        if token == closed or (chatml and token == turn_end):
            inside = False
    return marked


def _harmony_analysis_positions(ids: list[Any], start: int, end: int, convert: Any) -> set[int]:
    """`reasoning_positions` for Harmony ids: the assistant's analysis messages, each through its end token."""
    channel, analysis, begin, author = (convert(t) for t in (HARMONY_CHANNEL, HARMONY_ANALYSIS_NAME, HARMONY_START,
                                                             HARMONY_AUTHOR))
    closing = {convert(HARMONY_END), *(convert(t) for t in HARMONY_OTHER_ENDS)}
    by_assistant = True  # a sampled reply's first message has its header in the prompt (<|start|>assistant)
    inside, marked = False, set()
    for position in range(end):
        token = int(ids[position])
        if token == begin:
            by_assistant = position + 1 < len(ids) and int(ids[position + 1]) == author
        if token == channel and by_assistant and position + 1 < len(ids) and int(ids[position + 1]) == analysis:
            inside = True
        if inside and position >= start:
            marked.add(position)
        if token in closing:
            inside = False
    return marked


def token_window(loaded: dict[str, Any], sequence_index: int, start: int, count: int, tokenizer: Any) -> dict[str, Any]:
    """``count`` tokens of one sequence from ``start``, decoded one by one with special tokens kept.

    Args:
        loaded: from `RolloutSource.rollout_rows`.
        sequence_index: the sequence (`sequences` row ``sequence_index``).
        start: the first position.
        count: how many (at most `MAX_WINDOW`).
        tokenizer: decodes ids (None: ids only).

    Returns:
        ``{"total", "start", "tokens": [[id, text, special, mask, logprob, call, scorer_logprob, reasoning],
        ...], "call_starts": [position, ...]}``; ``reasoning`` marks a token inside a think block
        (`reasoning_positions`); ``logprob`` is null where it is unknown (a call in
        `logprobs_missing_calls`, or past the row's logprobs).

    Raises:
        KeyError: no such sequence.
    """
    rows, extra = loaded["rows"], loaded["extra"]
    sequence = next((s for s in rows.get("sequences") or [] if s["sequence_index"] == sequence_index), None)
    if sequence is None:
        raise KeyError(f"no sequence {sequence_index}")
    ids = sequence.get("input_ids") or []
    total = len(ids)
    start = max(0, min(int(start), total))
    end = min(total, start + max(0, min(int(count), MAX_WINDOW)))
    window = [int(i) for i in ids[start:end]]
    mask = sequence.get("loss_mask") or []
    logprobs = sequence.get("logprobs") or []
    audit = extra.get("audit") if isinstance(extra.get("audit"), dict) else {}
    scored = next((s.get("scorer_logprobs") for s in audit.get("sequences") or []
                   if isinstance(s, dict) and s.get("sequence_index") == sequence_index), None) or []
    spans = _call_spans(sequence, rows.get("trace") or [])
    missing = logprobs_missing_calls(sequence)
    texts = [str(i) for i in window]
    specials: set[int] = set()
    if tokenizer is not None and window:
        texts = tokenizer.batch_decode([[i] for i in window], skip_special_tokens=False,
                                       clean_up_tokenization_spaces=False)
        specials = set(getattr(tokenizer, "all_special_ids", []) or [])
        specials.update(int(k) for k in (getattr(tokenizer, "added_tokens_decoder", None) or {}))
    reasoning = reasoning_positions(ids, start, end, tokenizer)
    tokens = []
    span = 0
    for offset, token in enumerate(window):
        position = start + offset
        while span < len(spans) - 1 and position >= spans[span][1]:
            span += 1
        call = spans[span][2] if spans else None
        lp = float(logprobs[position]) if position < len(logprobs) and call not in missing else None
        score = scored[position] if position < len(scored) else None
        tokens.append([token, texts[offset], token in specials, int(mask[position]) if position < len(mask) else 0,
                       lp, call, score, position in reasoning])
    return {"sequence_index": sequence_index, "total": total, "start": start, "tokens": tokens,
            "call_starts": [s for s, _, _ in spans if start <= s < end]}
