"""A built dataset's rollouts as the documents `atif.export.trajectory_document` reads.

The `trace` rows give each call's request (messages restored from their delta encoding by
`builder.readers.trace_request`) and answer, the `turns` and `sequences` rows its token ids and
logprobs (`builder.readers.turn_token_arrays`), the `summary` row the rollout's facts. So
`export --format atif` works on a dataset folder as on artifact folders.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

from rollout_dataset.builder.readers import trace_request, turn_token_arrays
from rollout_dataset.trace_integrity import in_arrival_order

__all__ = ["is_dataset_dir", "dataset_rollouts"]


def is_dataset_dir(path: str | Path) -> bool:
    """True for a folder `build` wrote (it holds `data/summary/*.parquet`).

    Args:
        path: a folder.

    Returns:
        Whether it is a built dataset.
    """
    return any((Path(path) / "data" / "summary").glob("*.parquet"))


def _rows(dataset: Path, config: str) -> dict[str, list[dict[str, Any]]]:
    import pyarrow.parquet as pq

    by_rollout: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for shard in sorted((dataset / "data" / config).glob("*.parquet")):
        for row in pq.read_table(shard).to_pylist():
            by_rollout[row["rollout_id"]].append(row)
    return by_rollout


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _request(trace_rows: list[dict[str, Any]], call_index: int, label: str) -> Any:
    """A call's request restored from the rollout's trace rows; a failure names the rollout (`label`)."""
    try:
        return trace_request(trace_rows, call_index)
    except ValueError as exc:
        raise ValueError(f"{label}: {exc}; nothing of it written") from None


def _source(summary: dict[str, Any]) -> str:
    """`` (imported from FILE)`` for a summary row of a rollout imported from ATIF, else ``""``."""
    imported = _json(summary.get("imported_from"))
    return f" (imported from {imported['file']})" if isinstance(imported, dict) and imported.get("file") else ""


def dataset_rollouts(dataset: str | Path) -> Iterator[tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any],
                                                         dict[str, Any]]]:
    """Each rollout of a built dataset as ``(records, rollout, summary, task)`` for `trajectory_document`.

    Args:
        dataset: the dataset folder.

    Yields:
        The trace records (requests restored, ids from the token configs), a rollout document with
        the capture level and each call's role, the summary row (harness version as provenance), and
        a task with the tokenizer.

    Raises:
        ValueError: a request cell was cut to the cell limit and cannot be restored.
        KeyError: the rows of a rollout do not refer to each other as `build` writes them.
    """
    dataset = Path(dataset)
    traces, turns, sequences = _rows(dataset, "trace"), _rows(dataset, "turns"), _rows(dataset, "sequences")
    for summaries in _rows(dataset, "summary").values():
        summary = dict(summaries[0])
        rid = summary["rollout_id"]
        trace_rows, turn_rows = traces.get(rid, []), turns.get(rid, [])
        tokens = summary.get("capture_level") == "tokens"
        arrays = turn_token_arrays(turn_rows, sequences.get(rid, [])) if tokens and turn_rows else {}
        records = []
        for row in trace_rows:
            ids = arrays.get(row["call_index"])
            records.append({
                "index": row["call_index"], "call_id": row["call_id"], "session": row["session"],
                "harness_session_id": row.get("harness_session_id"), "endpoint": row["endpoint"],
                "status": row.get("status"), "started_at": row.get("started_at"),
                "request": _request(trace_rows, row["call_index"], f"rollout {rid}{_source(summary)}"),
                "response": _json(row["response_json"]),
                "prompt_token_ids": ids["prompt_ids"] if ids else None,
                "completion_token_ids": ids["output_ids"] if ids else None,
                "per_token_logps": ids["per_token_logps"] if ids else None,
                "finish_reason": row.get("finish_reason"), "usage": _json(row.get("usage")),
                "requested_sampling_params": _json(row.get("requested_sampling_params")) or {},
                "capture_level": row.get("capture_level"),
            })
        records = in_arrival_order(records)
        rollout = {"session_id": trace_rows[0]["session"] if trace_rows else rid,
                   "capture_level": summary.get("capture_level"),
                   "calls": [{"index": t["call_index"], "role": t["role"]} for t in turn_rows]}
        summary["provenance"] = {"harness": {"version": summary.get("harness_version")}}
        yield records, rollout, summary, {"config": {"tokenizer": summary.get("tokenizer")}}
