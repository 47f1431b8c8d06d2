"""One screen of text about a rollout document: what you read after a capture (``show``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rollout_dataset.export.breaks import CAUSE_TAG as _CAUSE

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
    continuity = document.get("continuity")
    if isinstance(continuity, dict):
        reasons = ", ".join(f"{k} {v}" for k, v in (continuity.get("not_repaired_reasons") or {}).items())
        lines.append(
            f"  on-policy continuity: {continuity.get('agent_turns')} agent turn(s): exact {continuity.get('exact')}, "
            f"repaired {continuity.get('repaired')}, reasoning_dropped {continuity.get('reasoning_dropped', 0)}, "
            f"not_repaired {continuity.get('not_repaired')}" + (f" ({reasons})" if reasons else ""))
    causes = Counter(m.group(1) for f in document.get("findings", []) if f.get("code") == "prefix_break"
                     for m in [_CAUSE.search(str(f.get("message")))] if m)
    if causes:
        lines.append("  prefix breaks by cause: " + ", ".join(f"{k} {v}" for k, v in sorted(causes.items())))
    for k, row in enumerate(document["sequences"]):
        lines.append(
            f"  seq {k} [{row['role']:<9}] root={row['root_id']:<4} turns={row['n_turns']:<3} "
            f"prompt={row['prompt_len']:<6} len={len(row['input_ids']):<7} trainable={row['n_trainable']:<6} "
            f"{'TRAIN' if row['trainable'] else '-':<5} turn_lengths={_lengths(row['turn_lengths'])}"
            + ("  earlier reasoning absent" if row.get("earlier_reasoning_absent") else "")
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
