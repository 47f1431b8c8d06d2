"""A rollout document's sequence as the trainer row the dataset holds (the `sequences` config).

One definition of the row, used by the dataset build (`builder.rows.sequence_rows`, which adds the
rollout-level columns from `summary.json`) and by the proxy's session API (which serves it live), so
a row pulled from a running proxy equals the row `build` later writes.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["SEQUENCE_ROW_FIELDS", "ROLLOUT_LEVEL_FIELDS", "json_cell", "sequence_row"]

#: the `sequences` columns that come from the rollout document, in the dataset's order.
SEQUENCE_ROW_FIELDS = ("sequence_index", "role", "trainable", "root_id", "node_ids", "n_turns", "prompt_len",
                       "n_trainable", "turn_lengths", "input_ids", "loss_mask", "logprobs", "findings",
                       "earlier_reasoning_absent")
#: the `sequences` columns that come from the rollout's summary (its id, group and rewards).
ROLLOUT_LEVEL_FIELDS = ("rollout_id", "group_id", "env_reward", "reward_after_penalties")


def json_cell(value: Any) -> str:
    """A value as the dataset's JSON text cell (compact, non-ASCII kept, keys in their order).

    Args:
        value: any JSON value.

    Returns:
        The JSON text.
    """
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=False)


def sequence_row(sequence: dict[str, Any], index: int) -> dict[str, Any]:
    """One sequence of a rollout document (`export_rollout`) as its `sequences` row, without the
    rollout-level columns (`ROLLOUT_LEVEL_FIELDS`).

    Args:
        sequence: an item of the document's ``sequences``.
        index: its position in that list (the row's ``sequence_index``).

    Returns:
        The columns `SEQUENCE_ROW_FIELDS`, ``findings`` as JSON text.
    """
    mask = sequence.get("loss_mask") or []
    return {
        "sequence_index": index,
        "role": sequence.get("role"),
        "trainable": bool(sequence.get("trainable")),
        "root_id": sequence.get("root_id"),
        "node_ids": sequence.get("node_ids") or [],
        "n_turns": sequence.get("n_turns"),
        "prompt_len": sequence.get("prompt_len"),
        "n_trainable": sequence.get("n_trainable", int(sum(mask))),
        "turn_lengths": sequence.get("turn_lengths") or [],
        "input_ids": sequence.get("input_ids") or [],
        "loss_mask": mask,
        "logprobs": sequence.get("logprobs") or [],
        "findings": json_cell(sequence.get("findings", sequence.get("validation", []))),
        "earlier_reasoning_absent": bool(sequence.get("earlier_reasoning_absent")),
    }
