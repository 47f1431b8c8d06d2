"""On-policy continuity of a rollout's agent turns, from the trace records' ``continuity`` field.

The proxy's on-policy mode records, per chat call, whether its prompt holds the ids the model
sampled before it (``exact``), was rebuilt from them (``repaired``), or was left as the server
renders it (``not_repaired``, with a reason). This module counts those over the agent turns of a
rollout document: the figure rollout.json, summary.json and the dataset card report.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

from rollout_dataset.schema import load_schema

__all__ = ["STATUSES", "continuity_of", "continuity_summary", "merge_continuity"]

# one definition: the trace record schema's enum (exact, repaired, not_repaired)
STATUSES: tuple[str, ...] = tuple(
    load_schema("trace_record")["properties"]["continuity"]["properties"]["status"]["enum"])


def continuity_of(records: Iterable[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The recorded continuity per call index.

    Args:
        records: trace records.

    Returns:
        ``{index: continuity object}`` for the records that carry one (on-policy mode only).
    """
    return {r["index"]: r["continuity"] for r in records
            if isinstance(r.get("continuity"), dict) and isinstance(r.get("index"), int)}


def continuity_summary(calls: Iterable[dict[str, Any]], by_index: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """Shares of agent turns that were exact, repaired and not repaired.

    Args:
        calls: the rollout document's ``calls`` (each with ``index`` and ``role``).
        by_index: `continuity_of` the same records.

    Returns:
        ``{"agent_turns", "exact", "repaired", "not_repaired", "unrecorded", "exact_share",
        "repaired_share", "not_repaired_share", "not_repaired_reasons"}``, or None when no call
        carries a continuity (captured without on-policy mode). ``unrecorded`` counts agent turns
        without one; shares are over all agent turns.
    """
    if not by_index:
        return None
    agent = [c["index"] for c in calls if c.get("role") == "agent"]
    counts = Counter(by_index[i]["status"] for i in agent if i in by_index)
    reasons = Counter(by_index[i].get("reason") or "unknown" for i in agent
                      if i in by_index and by_index[i]["status"] == "not_repaired")
    out: dict[str, Any] = {"agent_turns": len(agent)}
    out.update({s: counts.get(s, 0) for s in STATUSES})
    out["unrecorded"] = len(agent) - sum(counts.get(s, 0) for s in STATUSES)
    out.update({f"{s}_share": (counts.get(s, 0) / len(agent) if agent else None) for s in STATUSES})
    out["not_repaired_reasons"] = dict(sorted(reasons.items()))
    return out


def merge_continuity(summaries: Iterable[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The continuity over many rollouts (for a dataset card).

    Args:
        summaries: `continuity_summary` of each rollout (None for rollouts without the mode).

    Returns:
        The same shape summed over the rollouts that have one, plus ``rollouts``; None if none has.
    """
    present = [s for s in summaries if isinstance(s, dict)]
    if not present:
        return None
    out: dict[str, Any] = {"rollouts": len(present)}
    for key in ("agent_turns", *STATUSES, "unrecorded"):
        out[key] = sum(int(s.get(key) or 0) for s in present)
    n = out["agent_turns"]
    out.update({f"{s}_share": (out[s] / n if n else None) for s in STATUSES})
    reasons: Counter[str] = Counter()
    for s in present:
        reasons.update(s.get("not_repaired_reasons") or {})
    out["not_repaired_reasons"] = dict(sorted(reasons.items()))
    return out
