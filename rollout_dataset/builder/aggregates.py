"""The dataset card's statistics as running, mergeable aggregates of the `summary` rows.

`CardAggregates` folds summary rows in one at a time (`add`), merges with the aggregates of other
rows (`merge`: the rows of another build part, in order), and gives the card's statistics
(`stats`): exactly what `card.card_stats` returns for the same rows in the same order, without
keeping the rows. That is what lets a build stream (memory flat in the rollout count) and build
parts in parallel processes (each returns its aggregates; the parent merges them in part order).

What is kept, and how it grows:

- counts and sums (rollouts, rows per config, trainable, tokens, cut cells, ...): constant;
- counters of names (envs, models, harnesses, tokenizers, versions, ...): one entry per distinct
  name, in first-seen order (the card lists ties in that order, as `Counter.most_common` does);
- distinct sampling params (JSON text, first-seen order) and distinct ``(env, task_id)`` pairs and
  group ids: one entry per distinct value (groups are what the card's per-group statistics count);
- the statistics that show a median (rewards, lengths, rollouts per group): a histogram
  ``value -> count``, exact (mean, median, std, min and max come out as over the full list) and
  one entry per distinct value: integer lengths and rewards repeat, so it stays small; in the worst
  case (every value distinct) it holds one float per rollout, about 100 bytes each.

Merging ``a.merge(b)`` gives the aggregates of a's rows followed by b's rows.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from typing import Any, Iterable

from rollout_dataset.builder.configs import CONFIGS
from rollout_dataset.builder.rows import PREVIEW_CHARS
from rollout_dataset.export.continuity import STATUSES

__all__ = ["CardAggregates", "ROW_COUNT_COLUMN", "LENGTH_COLUMNS", "describe"]

#: config -> summary column holding that config's rows per rollout (None: one row per rollout).
ROW_COUNT_COLUMN = {"summary": None, "task": None, "visible_tests": None, "held_out_tests": "n_held_out_rows",
                    "trace": "n_trace_rows", "turns": "n_turn_rows", "sequences": "n_sequences",
                    "conversations": "n_conversations", "samples": "n_sample_rows"}

#: card label -> summary column of the per-rollout length statistics.
LENGTH_COLUMNS = {"tokens per rollout (distinct positions)": "n_unique_tokens",
                  "longest sequence per rollout (tokens)": "longest_sequence_tokens",
                  "trainable tokens per rollout": "trainable_tokens", "agent turns per rollout": "agent_turns",
                  "tool calls per rollout": "tool_calls_total"}

_FIELDS = {"envs": "env", "models": "model", "harnesses": "harness", "tokenizers": "tokenizer",
           "stop_reasons": "stop_reason", "capture_levels": "capture_level", "samples_modes": "samples_mode"}
_CONTINUITY_KEYS = ("agent_turns", *STATUSES, "unrecorded")


def describe(values: list[float]) -> dict[str, Any]:
    """n, mean, median, std (population), min and max of values, rounded to 4 places.

    Args:
        values: the values (any order: every figure is order-independent).

    Returns:
        The figures; None for each but ``n`` when there are no values.
    """
    if not values:
        return {"n": 0, "mean": None, "median": None, "std": None, "min": None, "max": None}
    return {"n": len(values), "mean": round(statistics.fmean(values), 4),
            "median": round(statistics.median(values), 4),
            "std": round(statistics.pstdev(values), 4) if len(values) > 1 else 0.0,
            "min": round(min(values), 4), "max": round(max(values), 4)}


def _expand(histogram: Counter) -> list[float]:
    """The values of a histogram as a list (each value object repeated: 8 bytes per entry)."""
    out: list[float] = []
    for value, count in histogram.items():
        out.extend([value] * count)
    return out


class CardAggregates:
    """Running aggregates of summary rows, from which the card's statistics are computed.

    Picklable (plain dicts, counters and sets), so a build part in another process returns it.
    """

    def __init__(self) -> None:
        self.n = 0
        self.counters: dict[str, Counter] = {k: Counter() for k in _FIELDS}
        self.params: dict[str, None] = {}  # distinct sampling params (JSON text), first-seen order
        self.rewards: Counter = Counter()
        self.penalised: Counter = Counter()
        self.stepwise: Counter = Counter()
        self.lengths: dict[str, Counter] = {col: Counter() for col in LENGTH_COLUMNS.values()}
        self.per_config = {c.name: 0 for c in CONFIGS}
        self.groups: Counter = Counter()
        self.year: int | None = None
        self.scripted: Counter = Counter()
        self.shas: Counter = Counter()
        self.server_kinds: Counter = Counter()
        self.harness_versions: Counter = Counter()
        self.package_versions: Counter = Counter()
        self.tasks: set[tuple[Any, Any]] = set()
        self.sums = {"trainable": 0, "trainable_tokens": 0, "timed_out": 0, "cut_cells": 0, "unique_tokens": 0,
                     "held_out_tests": 0}
        self.continuity: dict[str, int] = {}  # summed continuity (empty: no rollout has one)
        self.continuity_reasons: Counter = Counter()

    @classmethod
    def from_rows(cls, rows: Iterable[dict[str, Any]]) -> "CardAggregates":
        """Aggregates of summary rows.

        Args:
            rows: summary rows (dicts keyed by the summary columns), in dataset order.

        Returns:
            The aggregates.
        """
        agg = cls()
        for row in rows:
            agg.add(row)
        return agg

    def add(self, r: dict[str, Any]) -> None:
        """Fold in one summary row.

        Args:
            r: the row (dict keyed by the summary columns; JSON columns as JSON text or parsed).
        """
        self.n += 1
        for key, field in _FIELDS.items():
            if r.get(field) is not None:
                self.counters[key][str(r[field])] += 1
        for p in json.loads(r.get("sampling_params") or "[]"):
            self.params.setdefault(json.dumps(p, sort_keys=True), None)
        if r.get("env_reward") is not None:
            self.rewards[float(r["env_reward"])] += 1
        if r.get("reward_after_penalties") is not None:
            self.penalised[float(r["reward_after_penalties"])] += 1
        step = json.loads(r["stepwise"]) if r.get("stepwise") else None
        if isinstance(step, dict) and step.get("reward_sum") is not None:
            self.stepwise[float(step["reward_sum"])] += 1
        for config, column in ROW_COUNT_COLUMN.items():
            self.per_config[config] += 1 if column is None else int(r.get(column) or 0)
        self.groups[str(r.get("group_id"))] += 1
        for col, hist in self.lengths.items():
            if r.get(col) is not None:
                hist[float(r[col])] += 1
        created = str(r.get("created_at") or "")[:4]
        if created.isdigit():
            self.year = max(self.year, int(created)) if self.year is not None else int(created)
        if r.get("scripted"):
            self.scripted[str(r.get("policy") or r.get("server_kind"))] += 1
        if r.get("tokenizer_sha256"):
            self.shas[str(r["tokenizer_sha256"])] += 1
        if r.get("server_kind"):
            self.server_kinds[f"{r.get('server_kind')} {r.get('server_version') or ''}".strip()] += 1
        self.harness_versions[f"{r.get('harness')} {r.get('harness_version') or ''}".strip()] += 1
        if r.get("package_version"):
            self.package_versions[f"{r.get('package_version')}" + (
                f" ({str(r['package_git_sha'])[:12]})" if r.get("package_git_sha") else "")] += 1
        self.tasks.add((r.get("env"), r.get("task_id")))
        self.sums["trainable"] += 1 if r.get("trainable") else 0
        self.sums["trainable_tokens"] += int(r.get("trainable_tokens") or 0)
        self.sums["timed_out"] += 1 if r.get("timed_out") else 0
        self.sums["cut_cells"] += int(r.get("n_cut_cells") or 0)
        self.sums["unique_tokens"] += int(r.get("n_unique_tokens") or 0)
        self.sums["held_out_tests"] += int(r.get("held_out_tests") or 0)
        cont = r.get("continuity")
        cont = json.loads(cont) if isinstance(cont, str) else cont
        if isinstance(cont, dict):
            self.continuity["rollouts"] = self.continuity.get("rollouts", 0) + 1
            for key in _CONTINUITY_KEYS:
                self.continuity[key] = self.continuity.get(key, 0) + int(cont.get(key) or 0)
            self.continuity_reasons.update(cont.get("not_repaired_reasons") or {})

    def merge(self, other: "CardAggregates") -> "CardAggregates":
        """Fold in the aggregates of rows that come after this one's (in place).

        Args:
            other: the later rows' aggregates.

        Returns:
            self.
        """
        self.n += other.n
        for key, counter in other.counters.items():
            self.counters[key].update(counter)
        for p in other.params:
            self.params.setdefault(p, None)
        for mine, theirs in ((self.rewards, other.rewards), (self.penalised, other.penalised),
                             (self.stepwise, other.stepwise), (self.groups, other.groups),
                             (self.scripted, other.scripted), (self.shas, other.shas),
                             (self.server_kinds, other.server_kinds), (self.harness_versions, other.harness_versions),
                             (self.package_versions, other.package_versions),
                             (self.continuity_reasons, other.continuity_reasons)):
            mine.update(theirs)
        for col, hist in other.lengths.items():
            self.lengths[col].update(hist)
        for config, n in other.per_config.items():
            self.per_config[config] += n
        if other.year is not None:
            self.year = max(self.year, other.year) if self.year is not None else other.year
        self.tasks |= other.tasks
        for key, value in other.sums.items():
            self.sums[key] += value
        for key, value in other.continuity.items():
            self.continuity[key] = self.continuity.get(key, 0) + value
        return self

    def _continuity(self) -> dict[str, Any] | None:
        """What `export.continuity.merge_continuity` gives over the rows' continuity summaries."""
        if not self.continuity:
            return None
        out: dict[str, Any] = {"rollouts": self.continuity["rollouts"]}
        for key in _CONTINUITY_KEYS:
            out[key] = self.continuity[key]
        n = out["agent_turns"]
        out.update({f"{s}_share": (out[s] / n if n else None) for s in STATUSES})
        out["not_repaired_reasons"] = dict(sorted(self.continuity_reasons.items()))
        return out

    def stats(self) -> dict[str, Any]:
        """The card's statistics (the shape `card.card_stats` documents).

        Returns:
            The statistics dict.
        """
        n_rewards = sum(self.rewards.values())
        return {
            "n_rollouts": self.n,
            "n_groups": len(self.groups),
            "lengths": {label: describe(_expand(self.lengths[col])) for label, col in LENGTH_COLUMNS.items()},
            "year": self.year,
            "scripted": dict(self.scripted.most_common()),
            "n_scripted": sum(self.scripted.values()),
            "server_kinds": dict(self.server_kinds.most_common()),
            "harness_versions": dict(self.harness_versions.most_common()),
            "package_versions": dict(self.package_versions.most_common()),
            "rollouts_per_group": describe([float(v) for v in self.groups.values()]),
            "tokenizer_sha256s": dict(self.shas.most_common()),
            "tokenizer_dir": bool(self.n) and len(self.shas) == 1 and sum(self.shas.values()) == self.n,
            "rows": dict(self.per_config),
            **{k: dict(v.most_common()) for k, v in self.counters.items()},
            "sampling_params": list(self.params),
            "env_reward": describe(_expand(self.rewards)),
            "unscorable": self.n - n_rewards,
            "reward_after_penalties": describe(_expand(self.penalised)),
            "stepwise_reward_sum": describe(_expand(self.stepwise)),
            "trainable": self.sums["trainable"],
            "trainable_tokens": self.sums["trainable_tokens"],
            "timed_out": self.sums["timed_out"],
            "n_tasks": len(self.tasks),
            "cut_cells": self.sums["cut_cells"],
            "preview_chars": PREVIEW_CHARS,
            "unique_tokens": self.sums["unique_tokens"],
            "held_out_tests": self.sums["held_out_tests"],
            "continuity": self._continuity(),
        }
