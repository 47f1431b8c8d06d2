"""The logprob audit: re-score every trainable sequence and compare with the captured logprobs.

`audit(path, scorer)` streams the rollouts (`readers.iter_rollouts`), decides per call whether its
captured logprobs are comparable (`comparability`), scores the sequences in batches, and returns one
audit.json document per rollout (see docs/audit.md) plus the overall summary. `write_results` puts
audit.json into each artifact folder, or an `audit` config into a dataset.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from rollout_dataset.audit.metrics import TokenDiffs, sharpness_slope, shifted_fit, summarize, worst_positions
from rollout_dataset.audit.readers import AuditRollout, iter_rollouts
from rollout_dataset.audit.scorers import Scorer, ScoreRequest

__all__ = ["comparability", "RolloutAudit", "audit_rollout", "audit", "MISMATCH_MEAN_ABS_DIFF"]

logger = logging.getLogger(__name__)

#: a rollout whose mean |Δ| is over this gets a diagnosis (shift, temperature, tokenizer)
MISMATCH_MEAN_ABS_DIFF = 1e-2


def _num(params: dict[str, Any], name: str) -> float | None:
    value = params.get(name)
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan


def comparability(params: dict[str, Any] | None, scorer_supports_temperature: bool) -> tuple[float | None, str | None]:
    """The temperature to score a call at, or why its captured logprobs are not comparable.

    Args:
        params: the call's effective sampling params (as sent upstream); None when not recorded.
        scorer_supports_temperature: the scorer can apply a temperature (transformers) or scores at 1 only.

    Returns:
        ``(temperature, None)`` when comparable, else ``(None, reason)``.
    """
    if params is None:
        return None, "no effective sampling params recorded for this call (the server did not say)"
    top_p, top_k = _num(params, "top_p"), params.get("top_k")
    if top_p is not None and not math.isclose(top_p, 1.0):
        return None, f"top_p={params['top_p']}: the captured logprobs are renormalised over the nucleus"
    if top_k not in (None, -1, 0):
        return None, f"top_k={top_k}: the captured logprobs are renormalised over the top k"
    temperature = _num(params, "temperature")
    temperature = 1.0 if temperature is None else temperature
    if math.isnan(temperature) or temperature <= 0:
        return None, f"temperature={params.get('temperature')}: greedy or unreadable, no distribution to compare"
    if math.isclose(temperature, 1.0):
        return 1.0, None
    mode = params.get("logprobs_mode")
    if mode == "raw_logprobs":
        return None, f"raw_logprobs mode at temperature={temperature}: logprobs before temperature, not the sampler's"
    if not scorer_supports_temperature:
        return None, (f"temperature={temperature}: the server scores prompt tokens at temperature 1 only; "
                      "use --model for this call")
    return temperature, None


@dataclass
class RolloutAudit:
    """The audit of one rollout: its audit.json document and the compared tokens."""

    rollout: AuditRollout
    doc: dict[str, Any]
    diffs: TokenDiffs = field(default_factory=TokenDiffs)


def _diagnose(seq_pairs: list[tuple[list[float], list[float]]], prompts: list[list[int]], scorer: Scorer,
              max_id: int) -> list[dict[str, str]]:
    """Why a rollout's logprobs disagree: wrong tokenizer, shifted by one position, another temperature."""
    out = []
    vocab = scorer.vocab_size()
    if vocab is not None and max_id >= vocab:
        out.append({"code": "wrong_tokenizer", "message": f"token id {max_id} is outside the scorer's vocabulary "
                                                          f"({vocab} ids): the ids come from another tokenizer"})
        return out
    bad = sum(1 for p in prompts if p and (c := scorer.canonical_ids(p)) is not None and c != p)
    if prompts and bad == len([p for p in prompts if p]) and bad:
        out.append({"code": "wrong_tokenizer", "message": f"{bad} of {len(prompts)} prompts do not re-encode to "
                    "their own ids under the scorer's tokenizer: the ids come from another tokenizer"})
        return out
    aligned = left = right = 0.0
    for captured, scored in seq_pairs:
        fit_aligned, fit_left, fit_right = shifted_fit(captured, scored)
        aligned, left, right = aligned + fit_aligned, left + fit_left, right + fit_right
    if min(left, right) < 0.5 * aligned:
        side = "one position later" if left < right else "one position earlier"
        out.append({"code": "logprobs_shifted", "message": f"the captured logprobs match the scores {side} "
                    f"(mean |Δ| {min(left, right) / max(len(seq_pairs), 1):.2g} shifted vs "
                    f"{aligned / max(len(seq_pairs), 1):.2g} aligned)"})
        return out
    slope = sharpness_slope([x for c, _ in seq_pairs for x in c], [x for _, s in seq_pairs for x in s])
    if slope is not None and abs(slope - 1.0) > 0.1:
        out.append({"code": "temperature_mismatch", "message": f"the captured logprobs scale as {slope:.2f} x the "
                    f"scores: sampled at about temperature {1.0 / slope:.2f}, not the recorded one"})
        return out
    out.append({"code": "logprob_mismatch", "message": "the captured logprobs differ from the scores (another model, "
                "revision, dtype or chat template)"})
    return out


def audit_rollout(rollout: AuditRollout, scorer: Scorer, worst_k: int = 10) -> RolloutAudit:
    """Audit one rollout.

    Args:
        rollout: the rollout.
        scorer: the scorer.
        worst_k: worst positions kept.

    Returns:
        The `RolloutAudit` (its ``doc`` follows the audit.json contract, plus ``rollout_id`` and
        ``findings``).

    Raises:
        ScorerError: the scorer failed.
    """
    not_comparable: dict[int, str] = {}
    temps: dict[int, float] = {}
    for call_index in sorted({c for s in rollout.sequences for c in s.node_ids}):
        t, reason = comparability(rollout.sampling.get(call_index) if rollout.sampling else None,
                                  scorer.supports_temperature)
        if reason:
            not_comparable[call_index] = reason
        elif t is not None:  # comparability gives a temperature whenever it gives no reason
            temps[call_index] = t
    requests, owners = [], []
    for seq in rollout.sequences:
        if not seq.trainable or not seq.input_ids:
            continue
        want = {pos: temps[call] for pos, call in seq.sampled_calls() if call in temps and pos > 0}
        if want:
            requests.append(ScoreRequest(seq.input_ids, want))
            owners.append(seq)
    scored = scorer.score(requests) if requests else []
    diffs = TokenDiffs()
    sequences_doc, pairs, prompts, max_id = [], [], [], -1
    for seq, row in zip(owners, scored):
        calls = dict(seq.sampled_calls())
        c_list, s_list = [], []
        for pos in sorted(p for p in calls if calls[p] in temps):
            score = row[pos]
            if score is None:
                continue
            diffs.add(seq.logprobs[pos], score, seq.sequence_index, pos, seq.input_ids[pos], calls[pos])
            c_list.append(float(seq.logprobs[pos]))
            s_list.append(float(score))
        sequences_doc.append({"sequence_index": seq.sequence_index,
                              "scorer_logprobs": [None if v is None else float(v) for v in row]})
        pairs.append((c_list, s_list))
        first = min(calls) if calls else len(seq.input_ids)
        prompts.append(list(seq.input_ids[:first]))
        max_id = max(max_id, max(seq.input_ids))
    summary = summarize(diffs)
    findings = []
    if summary["tokens_scored"] and summary["mean_abs_diff"] > MISMATCH_MEAN_ABS_DIFF:
        findings = _diagnose(pairs, prompts, scorer, max_id)
    doc = {"scorer": scorer.kind, "model": scorer.model, "dtype": scorer.dtype, "url": scorer.url,
           "rollout_id": rollout.rollout_id, "summary": summary, "sequences": sequences_doc,
           "not_comparable": [{"call_index": k, "reason": v} for k, v in sorted(not_comparable.items())],
           "worst": worst_positions(diffs, scorer.decode, worst_k), "findings": findings}
    return RolloutAudit(rollout, doc, diffs)


def audit(path: str | Path, scorer: Scorer, *, worst_k: int = 10, progress: bool = False) -> Iterator[RolloutAudit]:
    """Audit every rollout under `path`, one at a time (bounded memory).

    Args:
        path: artifact folder, tree of them, or built dataset.
        scorer: the scorer.
        worst_k: worst positions kept per rollout.
        progress: show a tqdm bar on stderr (off by default; the CLI turns it on). The bar opens
            once the first rollout is scored, so an input or scorer that fails at once prints only
            its error.

    Yields:
        One `RolloutAudit` per rollout.

    Raises:
        ArtifactError: the input is absent or corrupt.
        ScorerError: the scorer failed.
    """
    from tqdm import tqdm

    bar = None
    try:
        for rollout in iter_rollouts(path):
            result = audit_rollout(rollout, scorer, worst_k)
            if bar is None:
                bar = tqdm(desc="audit", unit="rollout", disable=not progress)
            bar.update(1)
            yield result
    finally:
        if bar is not None:
            bar.close()


def dumps(doc: dict[str, Any]) -> str:
    """audit.json text (compact sequences, indented rest)."""
    return json.dumps(doc, indent=1, ensure_ascii=False)
