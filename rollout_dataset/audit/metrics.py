"""Pure scoring math of the logprob audit: captured vs re-scored logprobs of the sampled tokens.

Every figure is computed from the sampled positions only (loss-mask ones of comparable calls):

- ``|Δ| = |captured - scored|`` per token: mean, max, and the share over 1e-3 / 1e-2 / 1e-1;
- KL(sampler ‖ scorer) estimated from tokens drawn from the sampler, with ``log r = scored - captured``:
  k1 = mean(-log r) (unbiased, can be negative) and k3 = mean((r - 1) - log r) (unbiased, never
  negative; Schulman's estimators);
- importance-ratio quantiles of ``exp(scored - captured)`` (what a trainer's ratio starts at);
- the worst positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

__all__ = ["THRESHOLDS", "QUANTILES", "TokenDiffs", "summarize", "worst_positions", "empty_summary"]

THRESHOLDS = (1e-3, 1e-2, 1e-1)
QUANTILES = {"p01": 0.01, "p05": 0.05, "p50": 0.50, "p95": 0.95, "p99": 0.99}


@dataclass
class TokenDiffs:
    """The compared tokens of one unit (a sequence, a rollout, or everything): aligned arrays.

    Args:
        captured: captured logprobs.
        scored: re-scored logprobs.
        sequence_index, position, token_id, call_index: where each token sits.
    """

    captured: list[float] = field(default_factory=list)
    scored: list[float] = field(default_factory=list)
    sequence_index: list[int] = field(default_factory=list)
    position: list[int] = field(default_factory=list)
    token_id: list[int] = field(default_factory=list)
    call_index: list[int] = field(default_factory=list)

    def add(self, captured: float, scored: float, sequence_index: int, position: int, token_id: int,
            call_index: int) -> None:
        """Append one compared token."""
        self.captured.append(float(captured))
        self.scored.append(float(scored))
        self.sequence_index.append(int(sequence_index))
        self.position.append(int(position))
        self.token_id.append(int(token_id))
        self.call_index.append(int(call_index))

    def extend(self, other: "TokenDiffs") -> None:
        """Append every token of another unit."""
        for name in ("captured", "scored", "sequence_index", "position", "token_id", "call_index"):
            getattr(self, name).extend(getattr(other, name))

    def __len__(self) -> int:
        return len(self.captured)


def empty_summary() -> dict[str, Any]:
    """Returns: the summary of zero scored tokens (figures are 0.0, never NaN, so JSON stays valid)."""
    return {"tokens_scored": 0, "mean_abs_diff": 0.0, "max_abs_diff": 0.0,
            **{f"share_over_{t:.0e}".replace("e-0", "e-"): 0.0 for t in THRESHOLDS},
            "kl_k1": 0.0, "kl_k3": 0.0, "ratio_quantiles": {k: 1.0 for k in QUANTILES}}


def summarize(diffs: TokenDiffs) -> dict[str, Any]:
    """The audit.json ``summary`` of a set of compared tokens.

    Args:
        diffs: the compared tokens.

    Returns:
        ``tokens_scored``, ``mean_abs_diff``, ``max_abs_diff``, ``share_over_1e-3/1e-2/1e-1``,
        ``kl_k1``, ``kl_k3`` and ``ratio_quantiles`` (p01, p05, p50, p95, p99).
    """
    if not len(diffs):
        return empty_summary()
    captured = np.asarray(diffs.captured, dtype=np.float64)
    scored = np.asarray(diffs.scored, dtype=np.float64)
    log_ratio = np.clip(scored - captured, -50.0, 50.0)  # log(scorer / sampler) of each sampled token
    abs_diff = np.abs(scored - captured)
    ratio = np.exp(log_ratio)
    out: dict[str, Any] = {"tokens_scored": int(abs_diff.size), "mean_abs_diff": float(abs_diff.mean()),
                           "max_abs_diff": float(abs_diff.max())}
    for t in THRESHOLDS:
        out[f"share_over_{t:.0e}".replace("e-0", "e-")] = float((abs_diff > t).mean())
    out["kl_k1"] = float((-log_ratio).mean())
    out["kl_k3"] = float(((ratio - 1.0) - log_ratio).mean())
    out["ratio_quantiles"] = {k: float(np.quantile(ratio, q)) for k, q in QUANTILES.items()}
    return out


def worst_positions(diffs: TokenDiffs, decode: Callable[[int], str], k: int = 10) -> list[dict[str, Any]]:
    """The `k` tokens with the largest |Δ|, largest first.

    Args:
        diffs: the compared tokens.
        decode: ``token_id -> str`` (the scorer's tokenizer), for a person to read.
        k: how many.

    Returns:
        audit.json ``worst`` entries.
    """
    if not len(diffs):
        return []
    abs_diff = np.abs(np.asarray(diffs.scored) - np.asarray(diffs.captured))
    order = np.argsort(-abs_diff, kind="stable")[:k]
    return [{"sequence_index": diffs.sequence_index[i], "position": diffs.position[i],
             "token_id": diffs.token_id[i], "token": decode(diffs.token_id[i]), "call_index": diffs.call_index[i],
             "captured": diffs.captured[i], "scored": diffs.scored[i], "abs_diff": float(abs_diff[i])}
            for i in order.tolist()]


def shifted_fit(captured: Sequence[float], scored: Sequence[float]) -> tuple[float, float, float]:
    """Mean |Δ| aligned, with the captured values shifted one position left, and one right.

    Args:
        captured, scored: aligned logprobs of consecutive sampled positions.

    Returns:
        ``(aligned, captured[i] vs scored[i+1], captured[i] vs scored[i-1])`` (inf when too short).
    """
    c, s = np.asarray(captured, dtype=np.float64), np.asarray(scored, dtype=np.float64)
    if c.size < 3:
        return float(np.abs(c - s).mean()) if c.size else 0.0, math.inf, math.inf
    return (float(np.abs(c - s).mean()), float(np.abs(c[:-1] - s[1:]).mean()), float(np.abs(c[1:] - s[:-1]).mean()))


def sharpness_slope(captured: Iterable[float], scored: Iterable[float]) -> float | None:
    """Least-squares slope of captured on scored logprobs: about 1/T when the sampler ran at temperature T
    and recorded processed logprobs while the scorer used temperature 1 (None with too few tokens)."""
    c, s = np.asarray(list(captured), dtype=np.float64), np.asarray(list(scored), dtype=np.float64)
    if c.size < 8 or float(np.var(s)) < 1e-12:
        return None
    return float(np.cov(s, c, bias=True)[0, 1] / np.var(s))
