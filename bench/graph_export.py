"""Benchmark: prefix graph + rollout export on a synthetic 200-call rollout with a 32k-token context.

Prints the figures and saves them to bench/results/graph_export.json. Times are the median of
several runs (wall clock, perf_counter); peak memory comes from a separate tracemalloc run (Python
allocations made by the step itself, the input records excluded).

    python bench/graph_export.py [--calls 200] [--context 32000] [--repeats 5]
"""

from __future__ import annotations

import sys
import argparse
import json
import platform
import statistics
import time
import tracemalloc
from pathlib import Path

from rollout_dataset.export import export_rollout, turns_document
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/support/: the synthetic fixtures
from support.synthetic_records import synthetic_chain
from rollout_dataset.graph import build_graph


def _time(fn, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def _peak(fn) -> int:
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--context", type=int, default=32000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "graph_export.json"))
    args = parser.parse_args()

    records = synthetic_chain(args.calls, args.context)
    total_prompt = sum(len(r["prompt_token_ids"]) for r in records)

    def graph():
        return build_graph(records)

    def export():
        return export_rollout(records, session_id="bench", capture_level="tokens")

    doc = export()
    assert doc["stats"]["n_turns"] == args.calls and doc["stats"]["n_roots"] == 1

    def turns():
        return turns_document(doc, records)

    # Two conversations interleaved call by call: the previous call is never the parent.
    a, b = synthetic_chain(args.calls // 2, args.context, seed=1), synthetic_chain(args.calls // 2, args.context, seed=2)
    mixed = [dict(r, index=i) for i, r in enumerate(x for pair in zip(a, b) for x in pair)]
    assert build_graph(mixed).stats()["n_roots"] == 2

    def interleaved():
        return export_rollout(mixed, session_id="bench", capture_level="tokens")

    # Every prompt re-rendered (its first token changed, as when a template drops earlier think
    # blocks): 200 roots, no known prefix, every prompt hashed whole, a prefix-break finding each.
    broken = [dict(r, prompt_token_ids=[60000 + i] + r["prompt_token_ids"][1:]) for i, r in enumerate(records)]
    assert build_graph(broken).stats()["n_roots"] == args.calls

    def root_per_call():
        return export_rollout(broken, session_id="bench", capture_level="tokens")

    # The same records as read back from trace.jsonl: no list or message object shared between calls.
    chain_loaded = [json.loads(json.dumps(r)) for r in records]
    broken_loaded = [json.loads(json.dumps(r)) for r in broken]

    def chain_json_loaded():
        return export_rollout(chain_loaded, session_id="bench", capture_level="tokens")

    def root_per_call_json_loaded():
        return export_rollout(broken_loaded, session_id="bench", capture_level="tokens")

    figures = {
        "calls": args.calls,
        "last_prompt_tokens": len(records[-1]["prompt_token_ids"]),
        "total_prompt_tokens": total_prompt,
        "repeats": args.repeats,
        "graph_s_median": round(_time(graph, args.repeats), 4),
        "export_s_median": round(_time(export, args.repeats), 4),
        "turns_document_s_median": round(_time(turns, args.repeats), 4),
        "export_interleaved_two_sessions_s_median": round(_time(interleaved, args.repeats), 4),
        "export_root_per_call_s_median": round(_time(root_per_call, args.repeats), 4),
        "export_json_loaded_s_median": round(_time(chain_json_loaded, args.repeats), 4),
        "export_root_per_call_json_loaded_s_median": round(_time(root_per_call_json_loaded, args.repeats), 4),
        "graph_peak_mib": round(_peak(graph) / 2**20, 1),
        "export_peak_mib": round(_peak(export) / 2**20, 1),
        "export_root_per_call_peak_mib": round(_peak(root_per_call) / 2**20, 1),
        "note": "export_rollout includes building the graph; interleaved = two conversations alternating; "
                "root_per_call = every prompt re-rendered (200 roots of ~16k tokens, a prefix-break finding "
                "each; its output alone is 200 sequences of ~16k ids, mask and logprobs); json_loaded = the "
                "same records as read from trace.jsonl (no objects shared between calls); "
                "medians of wall-clock runs on a shared 2-core machine",
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
    print(f"saved to {out}")


if __name__ == "__main__":
    main()
