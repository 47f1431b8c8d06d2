"""One screen of text about a rollout document: what you read after a capture (``show``)."""

from __future__ import annotations

from typing import Any

__all__ = ["summarise"]


def _lengths(values: list[int], limit: int = 12) -> str:
    if len(values) <= limit:
        return str(values)
    head = ", ".join(str(v) for v in values[: limit // 2])
    tail = ", ".join(str(v) for v in values[-limit // 2:])
    return f"[{head}, ... {len(values) - limit} more ..., {tail}]"


def summarise(document: dict[str, Any]) -> str:
    """Render a rollout document as one screen of text.

    Shows the graph shape, each sequence's role and lengths, and every finding that is not INFO
    (each once, rollout-level and call-level alike).

    Args:
        document: a rollout document (``export_rollout`` output or a parsed ``rollout.json``).

    Returns:
        The text, without a trailing newline.

    Raises:
        KeyError: the document lacks ``stats`` or ``sequences``.
    """
    stats = document["stats"]
    lines = [
        f"session {document.get('session_id')}  {document.get('rollout_type')}  "
        f"capture={document.get('capture_level')}  trainable={document.get('trainable')}",
        f"  graph ({stats.get('mode')}): {stats['n_turns']} calls, {stats['n_roots']} root(s), "
        f"{stats['n_forks']} fork(s), {stats['n_discarded']} discarded, depth {stats.get('max_depth')}",
        f"  training: {stats['n_trainable_sequences']}/{stats['n_sequences']} sequence(s) trainable, "
        f"{stats['n_trainable_tokens']} trainable tokens",
    ]
    for k, row in enumerate(document["sequences"]):
        lines.append(
            f"  seq {k} [{row['role']:<9}] root={row['root_id']:<4} turns={row['n_turns']:<3} "
            f"prompt={row['prompt_len']:<6} len={len(row['input_ids']):<7} trainable={row['n_trainable']:<6} "
            f"{'TRAIN' if row['trainable'] else '-':<5} turn_lengths={_lengths(row['turn_lengths'])}"
        )
    seen = set()
    shown = []
    for f in document.get("findings", []) + [f for row in document["sequences"] for f in row.get("findings", [])]:
        key = (f.get("code"), f.get("call_index"), f.get("message"))
        if f.get("level") == "INFO" or key in seen:
            continue
        seen.add(key)
        shown.append(f"  {f['level']:<5} {f['code']}: {f['message']}")
    if shown:
        lines.append(f"  findings ({len(shown)} not INFO):")
        lines.extend(shown[:20])
        if len(shown) > 20:
            lines.append(f"  ... {len(shown) - 20} more (see rollout.json)")
    else:
        lines.append("  findings: none above INFO")
    return "\n".join(lines)
