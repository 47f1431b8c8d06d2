"""report.md of a batch: title, timestamp, model, configuration, a table per strategy, top seeds,
the plots inline and links to the raw files. Pure: it renders from the documents the runner wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from rollout_dataset.builder.card import markdown_text, table_cell

__all__ = ["render_report", "TOP_SEEDS"]

TOP_SEEDS = 10

_EXPLAIN = {
    "coding": "Final return = the rollout's reward after penalties (fraction of held-out tests passed); "
    "step reward = the sum of per-decision rewards for visible examples that newly pass (the achievements).",
    "crafter": "Final return = the number of Crafter achievements unlocked in the episode (0–22); "
    "Crafter's own return is in batch_result.json extra.crafter_return. "
    "Step reward = the sum of per-decision rewards for newly unlocked achievements.",
    "*": "Final return = the environment's outcome reward for the episode; "
    "step reward = the sum of per-decision rewards for newly unlocked achievements.",
}


def _num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return f"{float(value):.{digits}f}"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A GFM table; each cell is Markdown already (a rollout-derived name through `markdown_text`)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(table_cell(c) for c in row) + " |" for row in rows]
    return lines


def _rel(path: Path, out_dir: Path) -> str:
    try:
        return path.resolve().relative_to(out_dir.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def render_report(
    *,
    summary: Mapping[str, Any],
    stats_by_seed: Mapping[str, Any],
    snapshot: Mapping[str, Any],
    plots: Mapping[str, Mapping[str, Path]],
    out_dir: Path,
    top_seeds: int = TOP_SEEDS,
) -> str:
    """Render the batch report as Markdown.

    Args:
        summary: the `summary/summary.json` document.
        stats_by_seed: the `summary/stats_by_seed.json` document.
        snapshot: the `summary/config_snapshot.json` document.
        plots: strategy -> kind (`hist`, `scatter`, `ecdf`) -> PNG path.
        out_dir: the batch folder (links are relative to it).
        top_seeds: how many seeds to list per strategy.

    Returns:
        The Markdown text.
    """
    cfg = snapshot.get("config", {})
    step = cfg.get("step_rewards", {})
    counts = summary["counts"]
    lines = [
        "# Batch evaluation: stepwise vs final returns",
        "",
        f"- **Generated:** {summary['created_at']}",
        f"- **Model:** {markdown_text(summary.get('model') or 'n/a')}",  # the server's name for it: text
        f"- **Environment:** {cfg.get('env', 'coding')}; **inference URL:** "
        + (cfg["base_url"] if cfg.get("base_url") else f"local backend ({snapshot.get('inference_url') or 'one per rollout'})"),
        f"- **Seeds:** {counts['seeds']} × {counts['rollouts_per_seed']} rollouts "
        f"({counts['rollouts_finished']} of {counts['rollouts_planned']} finished, {counts['rollouts_scored']} scored); "
        f"max turns {cfg.get('max_turns')}; executor {cfg.get('executor')}",
        f"- **Agent turns per rollout:** mean {_num(summary['turns']['mean'], 2)}, "
        f"zero-turn rollouts {counts['zero_turn_rollouts']}",
        f"- **Step rewards:** mode {step.get('mode')}, indicator_lambda {step.get('indicator_lambda')}, "
        f"weights {snapshot.get('weights') or '{}'} , k_limits {snapshot.get('k_limits') or '{}'}",
        f"- **Code:** rollout-dataset {snapshot.get('package_version')}"
        + (f", git {snapshot['git_sha'][:12]}" if snapshot.get("git_sha") else ""),
        "",
        _EXPLAIN.get(cfg.get("env", "coding"), _EXPLAIN["*"])
        + " Correlations are over rollouts with both values; n/a when undefined (fewer than two pairs or a constant side).",
        "",
        "## Global aggregates",
        "",
    ]
    rows = []
    for strategy, agg in summary["strategies"].items():
        rows.append(
            [
                strategy,
                agg["n"],
                _num(agg["final_return"]["mean"]),
                _num(agg["final_return"]["median"]),
                _num(agg["final_return"]["std"]),
                _num(agg["step_reward_sum"]["mean"]),
                _num(agg["step_reward_sum"]["median"]),
                _num(agg["step_reward_sum"]["std"]),
                _num(agg["step_indicator_sum"]["mean"]),
                _num(agg["pearson_step_vs_final"]),
                _num(agg["spearman_step_vs_final"]),
            ]
        )
    lines += _table(
        [
            "strategy",
            "n",
            "final mean",
            "final median",
            "final std",
            "step mean",
            "step median",
            "step std",
            "indicator mean",
            "Pearson r",
            "Spearman ρ",
        ],
        rows,
    )
    for strategy, seeds in stats_by_seed.get("strategies", {}).items():
        lines += ["", f"## Top seeds by final return ({strategy})", ""]
        lines += _table(
            ["seed", "task", "n", "final mean", "step mean", "indicator mean"],
            [
                [
                    s["seed"],
                    markdown_text(s.get("task_id") or "n/a"),  # a task source's name: text, never Markdown or HTML
                    s["n"],
                    _num(s["final_return"]["mean"]),
                    _num(s["step_reward_sum"]["mean"]),
                    _num(s["step_indicator_sum"]["mean"]),
                ]
                for s in seeds[:top_seeds]
            ],
        )
    notes = cfg.get("notes") or []
    if notes:  # e.g. the Harbor task folders skipped because they do not load
        lines += ["", "## Notes", ""] + [f"- {markdown_text(str(note))}" for note in notes]
    lines += ["", "## Plots", ""]
    for strategy, kinds in plots.items():
        lines.append(f"### {strategy}")
        lines.append("")
        for kind, label in (("hist", "Histogram of step reward"), ("scatter", "Step reward vs final return"), ("ecdf", "ECDF of indicator sum")):
            if kind in kinds:
                lines.append(f"![{label} ({strategy})]({_rel(kinds[kind], out_dir)})")
                lines.append("")
    lines += ["## Raw files", ""]
    for strategy in summary["strategies"]:
        lines.append(f"- [runs/{strategy}.jsonl](runs/{strategy}.jsonl): one record per rollout")
    lines += [
        "- [summary/summary.json](summary/summary.json): aggregates per strategy",
        "- [summary/stats_by_seed.json](summary/stats_by_seed.json): aggregates per seed",
        "- [summary/config_snapshot.json](summary/config_snapshot.json): arguments, weights, k-limits, version",
        "- [rollouts/](rollouts/): the artifacts of every rollout (batch_result.json holds the per-decision records)",
        "",
    ]
    return "\n".join(lines)
