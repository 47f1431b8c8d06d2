"""Readers: the exact arrays and requests back from the compact `turns` and `trace` rows.

These are the inverse of the encodings in `rows.py`, for users of the published dataset: pass the
rows of ONE rollout (filter on `rollout_id`).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from rollout_dataset.builder.rows import response_message

__all__ = ["turn_token_arrays", "turn_prompt_ids", "trace_request", "sequence_to_trl"]


def _one_rollout(rows: Sequence[dict[str, Any]], what: str) -> None:
    ids = {r["rollout_id"] for r in rows}
    if len(ids) > 1:
        raise ValueError(f"{what}: rows of {len(ids)} rollouts given; pass the rows of one rollout_id")


def turn_token_arrays(turn_rows: Sequence[dict[str, Any]],
                      sequence_rows: Sequence[dict[str, Any]]) -> dict[int, dict[str, list]]:
    """Rebuild every turn's full token arrays from the `turns` (and `sequences`) rows of ONE rollout.

    Args:
        turn_rows: the rollout's `turns` rows, in dataset order.
        sequence_rows: the rollout's `sequences` rows (any order).

    Returns:
        ``{call_index: {"prompt_ids", "output_ids", "per_token_logps", "mask"}}``, exactly as in turns.json.

    Raises:
        ValueError: rows of several rollouts, or a reference to a missing sequence or call.
    """
    _one_rollout(list(turn_rows) + list(sequence_rows), "turn_token_arrays")
    seqs = {r["sequence_index"]: r for r in sequence_rows}
    out: dict[int, dict[str, list]] = {}
    for t in turn_rows:
        n_p, n_o = t["n_prompt_ids"], t["n_output_ids"]
        if t["sequence_index"] >= 0:
            s = seqs.get(t["sequence_index"])
            if s is None:
                raise ValueError(f"turn call_index {t['call_index']}: sequence_index {t['sequence_index']} "
                                 "not among the sequence rows given")
            ids, lps = list(s["input_ids"]), list(s["logprobs"])
            prompt, output, logps = ids[:n_p], ids[n_p:n_p + n_o], lps[n_p:n_p + n_o]
        else:
            prefix: list[int] = []
            if t["prefix_call_index"] >= 0:
                src = out.get(t["prefix_call_index"])
                if src is None:
                    raise ValueError(f"turn call_index {t['call_index']}: prefix_call_index "
                                     f"{t['prefix_call_index']} not an earlier turn")
                prefix = (src["prompt_ids"] + src["output_ids"])[: t["prefix_len"]]
            prompt = prefix + list(t["prompt_ids_delta"])
            output, logps = list(t["output_ids"]), list(t["per_token_logps"])
        mask = list(t["mask"]) if t["mask"] else [0] * n_p + [1] * n_o
        out[t["call_index"]] = {"prompt_ids": prompt, "output_ids": output, "per_token_logps": logps, "mask": mask}
    return out


def turn_prompt_ids(turn_rows: Sequence[dict[str, Any]], sequence_rows: Sequence[dict[str, Any]],
                    call_index: int) -> list[int]:
    """The full prompt_ids of one turn.

    Args:
        turn_rows: the rollout's `turns` rows.
        sequence_rows: the rollout's `sequences` rows.
        call_index: the turn's `call_index`.

    Returns:
        The prompt token ids, exactly as the server saw them.

    Raises:
        KeyError: no turn with that call_index.
    """
    arrays = turn_token_arrays(turn_rows, sequence_rows)
    if call_index not in arrays:
        raise KeyError(f"no turn with call_index {call_index}; known: {sorted(arrays)}")
    return arrays[call_index]["prompt_ids"]


def trace_request(rows: Sequence[dict[str, Any]], call_index: int) -> Any:
    """The full request of one call from the `trace` rows of ONE rollout.

    Args:
        rows: the rollout's `trace` rows.
        call_index: the call's `call_index`.

    Returns:
        The request as the harness sent it (messages restored).

    Raises:
        KeyError: no such call; ValueError: the request cell was truncated (cannot be restored).
    """
    _one_rollout(rows, "trace_request")
    by_index = {r["call_index"]: r for r in rows}

    def build(idx: int) -> Any:
        if idx not in by_index:
            raise KeyError(f"no trace row with call_index {idx}")
        r = by_index[idx]
        try:
            req = json.loads(r["request_json"])
        except json.JSONDecodeError:
            raise ValueError(f"call_index {idx}: request_json was cut to the cell limit; it cannot be restored") \
                from None
        if r["messages_prefix_call_index"] >= 0:
            src = by_index.get(r["messages_prefix_call_index"])
            if src is None:
                raise KeyError(f"no trace row with call_index {r['messages_prefix_call_index']}")
            history = build(src["call_index"])["messages"]
            message = None if src["truncated"] and _is_cut(src["response_json"]) else \
                response_message(json.loads(src["response_json"]))
            history = history + ([message] if message is not None else [])
            req = dict(req, messages=history[: r["messages_prefix_len"]] + req["messages"])
        return req

    return build(call_index)


def _is_cut(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return True
    return False


def sequence_to_trl(row: dict[str, Any]) -> dict[str, list]:
    """A `sequences` row as TRL-style ``prompt_ids`` / ``completion_ids`` / ``logprobs``.

    The prompt is ``input_ids[:prompt_len]``; the completion is everything after it, which for a
    multi-turn row also holds the tool results and template tokens between turns. Those context
    tokens are kept in ``completion_ids`` and masked out by ``completion_mask`` (the row's
    ``loss_mask[prompt_len:]``: 1 on sampled tokens, 0 on context), so a trainer that supports a
    completion mask (TRL's GRPO/``tool_mask``) trains exactly on the sampled tokens.

    Args:
        row: one row of the `sequences` config.

    Returns:
        ``{"prompt_ids", "completion_ids", "completion_mask", "logprobs"}`` where ``logprobs`` aligns
        to ``completion_ids``.
    """
    p = int(row["prompt_len"])
    ids = list(row["input_ids"])
    return {
        "prompt_ids": ids[:p],
        "completion_ids": ids[p:],
        "completion_mask": list(row["loss_mask"])[p:],
        "logprobs": list(row["logprobs"])[p:],
    }
