"""The one place that builds a rollout's `summary.json`, `task.json`, `held_out_tests.json` and
`samples.md` documents, and the set of files an artifact folder holds (`rollout_files`) (pure
functions; the pipeline, the ATIF import, the synthetic writer and every environment use them, so a
field or a file is added or renamed once).

Field order is part of the contract (artifacts are compared byte for byte after masking ids and
timestamps): `summary_document` writes the fields every rollout has, then `unscored_reason` when a
verifier scored the rollout, then the capture's `leakage`, `timings`, `errors`, then the
environment's own fields.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping

from rollout_dataset.artifact_files import (
    HELD_OUT_TESTS_FILE,
    ROLLOUT_FILE,
    SAMPLES_FILE,
    TASK_FILE,
    TRACE_FILE,
    TURNS_FILE,
    VISIBLE_TESTS_FILE,
)
from rollout_dataset.envs.base import Score, TaskInfo

__all__ = [
    "NO_TOKENIZER_REASON",
    "RolloutCounts",
    "agent_tool_counts",
    "findings_count",
    "trainable_tokens",
    "summary_document",
    "task_document",
    "held_out_document",
    "samples_text",
    "rollout_files",
]



#: what `samples.md` says when no tokenizer decoded the stream.
NO_TOKENIZER_REASON = "No tokenizer was available (--tokenizer), so the token stream is not rendered."


def agent_tool_counts(turns_doc: Mapping[str, Any]) -> dict[str, int]:
    """Tool calls of the agent's turns, by name (sorted).

    Args:
        turns_doc: the `turns.json` document.

    Returns:
        name -> count.
    """
    counts: Counter[str] = Counter()
    for turn in turns_doc.get("turns", []):
        if turn.get("role", "agent") == "agent":
            counts.update(name for name in turn.get("tool_calls") or [] if isinstance(name, str))
    return dict(sorted(counts.items()))


def trainable_tokens(document: Mapping[str, Any]) -> int:
    """Trainable tokens of a rollout document (its stats, else summed over trainable sequences)."""
    stats = document.get("stats") or {}
    if "n_trainable_tokens" in stats:
        return int(stats["n_trainable_tokens"])
    return sum(int(s.get("n_trainable") or 0) for s in document.get("sequences") or [] if s.get("trainable"))


def findings_count(document: Mapping[str, Any]) -> int:
    """ERROR and WARN findings of a rollout document (document-level and per sequence)."""
    found = list(document.get("findings") or [])
    for seq in document.get("sequences") or []:
        found.extend(seq.get("findings") or [])
    return sum(1 for f in found if isinstance(f, dict) and f.get("level") in ("ERROR", "WARN"))


@dataclass
class RolloutCounts:
    """The counts `summary.json` reports of a rollout's calls and turns.

    Use `RolloutCounts.of(records, document, turns)` for a captured rollout.
    """

    captured_calls: int
    agent_turns: int
    trained_turns: int
    tool_calls_by_name: dict[str, int] = field(default_factory=dict)
    trainable: bool = False
    trainable_tokens: int = 0
    findings_count: int = 0

    @classmethod
    def of(cls, records: list[Any], document: Mapping[str, Any], turns: Mapping[str, Any]) -> "RolloutCounts":
        """The counts of a captured rollout.

        Args:
            records: the trace records.
            document: the rollout document.
            turns: the turns document.

        Returns:
            The counts.
        """
        return cls(captured_calls=len(records),
                   agent_turns=sum(1 for t in turns.get("turns", []) if t.get("role", "agent") == "agent"),
                   trained_turns=sum(1 for t in turns.get("turns", []) if t.get("trained") is True),
                   tool_calls_by_name=agent_tool_counts(turns), trainable=bool(document.get("trainable")),
                   trainable_tokens=trainable_tokens(document), findings_count=findings_count(document))


def summary_document(*, rollout_id: str, created_at: str, task: TaskInfo, model: str, harness: str,
                     counts: RolloutCounts, score: Score, timed_out: bool, stop_reason: str, capture_level: str,
                     timings: Mapping[str, float], errors: list[dict[str, Any]],
                     extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`summary.json` of one rollout (schema `summary`).

    Args:
        rollout_id: the rollout id.
        created_at: when the capture started (`capture.artifacts.utc_now`).
        task: the task.
        model: the model name.
        harness: the harness name.
        counts: calls, turns, tool calls, trainable tokens, findings.
        score: rewards, penalties, held-out tests, leakage.
        timed_out: the wall-time budget ran out.
        stop_reason: why the rollout ended.
        capture_level: `tokens` | `text` | `none`.
        timings: phase -> seconds (written as given).
        errors: the capture's errors.
        extra: the environment's own fields, written last.

    Returns:
        The document.
    """
    summary: dict[str, Any] = {
        "schema_version": 1, "rollout_id": rollout_id, "created_at": created_at, "env": task.env,
        "model": model, "harness": harness, "task_id": task.task_id, "task_index": task.task_index,
        "dataset_seed": task.dataset_seed, "rollout_seed": task.rollout_seed, "captured_calls": counts.captured_calls,
        "agent_turns": counts.agent_turns, "trained_turns": counts.trained_turns,
        "tool_calls_by_name": dict(counts.tool_calls_by_name),
        "tool_calls_total": sum(counts.tool_calls_by_name.values()),
        "held_out_tests": score.held_out_tests, "held_out_passed": score.held_out_passed,
        "env_reward": score.env_reward, "reward_after_penalties": score.reward_after_penalties,
        "penalties": score.penalties,
    }
    if score.verifier:
        summary["unscored_reason"] = score.unscored_reason
    summary.update({
        "timed_out": timed_out, "stop_reason": stop_reason, "capture_level": capture_level,
        "trainable": counts.trainable, "trainable_tokens": counts.trainable_tokens,
        "findings_count": counts.findings_count,
        "leakage": {"checked": score.leakage_hits is not None, "hits": list(score.leakage_hits or [])},
        "timings": dict(timings), "errors": errors,
    })
    summary.update(extra or {})
    return summary


def task_document(task: TaskInfo) -> dict[str, Any]:
    """`task.json` (schema `task`).

    Args:
        task: the task.

    Returns:
        The document.
    """
    return {"schema_version": 1, "env": task.env, "task_id": task.task_id, "task_index": task.task_index,
            "title": task.title, "instruction": task.instruction, "source": task.source,
            "dataset_seed": task.dataset_seed, "rollout_seed": task.rollout_seed, "n_prompts": task.n_prompts,
            "config": dict(task.config)}


def held_out_document(task: TaskInfo) -> dict[str, Any]:
    """`held_out_tests.json` (schema `held_out_tests`): lists none for an environment without tests.

    Args:
        task: the task.

    Returns:
        The document.
    """
    return {"schema_version": 1, "task_id": task.task_id,
            "tests": [{"input": t["input"], "output": t["output"]} for t in task.held_out_tests]}


def rollout_files(*, trace: dict[str, Any], document: dict[str, Any], turns: dict[str, Any], task: TaskInfo,
                  samples: str) -> dict[str, Any]:
    """The files of an artifact folder that follow from the trace, the export and the task: `trace.json`,
    `rollout.json`, `turns.json`, `task.json`, `visible_tests.txt`, `held_out_tests.json`, `samples.md`.

    `summary.json` and `trajectory.json` are the caller's (a capture and an import make them differently).

    Args:
        trace: the `trace.json` document.
        document: the rollout document (`export_rollout`).
        turns: the turns document (`turns_document`).
        task: the task (`task.json`, `visible_tests.txt`, `held_out_tests.json`).
        samples: the `samples.md` text (`samples_text`).

    Returns:
        File name -> a JSON-ready document, or the text of a text file.
    """
    return {TRACE_FILE: trace, ROLLOUT_FILE: document, TURNS_FILE: turns, TASK_FILE: task_document(task),
            VISIBLE_TESTS_FILE: task.visible_tests, HELD_OUT_TESTS_FILE: held_out_document(task),
            SAMPLES_FILE: samples}


def samples_text(document: dict[str, Any], records: list[dict[str, Any]], tokenizer: Any, header: dict[str, Any],
                 reason: str | None = None) -> str:
    """`samples.md`: the token stream decoded by `tokenizer`, else the header and why it is not rendered.

    Args:
        document: the rollout document.
        records: the trace records.
        tokenizer: anything that decodes ids (a loaded tokenizer, or the server's own
            `/detokenize` as the capture opens it), or None.
        header: the header fields (`rollout`, `task`, `reward`, ...).
        reason: the sentence written instead of the stream when `tokenizer` is None (default: no
            tokenizer was available).

    Returns:
        The text; only the header and the reason when nothing could decode.
    """
    from rollout_dataset.render import render_samples

    if tokenizer is not None:
        return render_samples(document, records, tokenizer, header=header)
    lines = [f"# Rollout {header.get('rollout')}", ""]
    lines += [f"- {k}: {v}" for k, v in header.items()]
    lines += ["", reason or NO_TOKENIZER_REASON]
    return "\n".join(lines) + "\n"
