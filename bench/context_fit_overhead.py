"""What context fitting costs per call (a benchmark script, not a test).

    python bench/context_fit_overhead.py [--calls 200] [--upstream URL --max-tokens 16]

With `--fit-context` the proxy asks the server's `/tokenize` for every generation call's prompt length
(and `/v1/models` once). This measures sequential non-streaming chat calls (a ~1k-token prompt with
tools, `max_tokens: 32000` as opencode asks) through the proxy with fitting off and on, against the
local backend (default, `max_model_len` 65536) or a given server (use a small `--max-tokens` there:
a random-weight model would otherwise sample up to the whole context). Prints a table and saves
bench/results/context_fit_overhead.json (local backend) or context_fit_overhead_upstream.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
import time
from pathlib import Path

import httpx

from rollout_dataset.backend import LocalBackend
from rollout_dataset.proxy import CaptureProxy
from rollout_dataset.proxy.context_fit import ContextPolicy

TOOLS = [{"type": "function", "function": {"name": f"tool{i}", "description": "does a thing " * 20, "parameters": {
    "type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"]}}} for i in range(8)]
MESSAGES = [{"role": "system", "content": "You are a coding agent. " * 60},
            {"role": "user", "content": "What files are in the current directory? Please list them."}]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _run(upstream: str, model: str, calls: int, policy: ContextPolicy | None, max_tokens: int) -> list[float]:
    with tempfile.TemporaryDirectory() as traces:
        async with CaptureProxy(upstream=upstream, trace_dir=traces, context=policy) as proxy:
            async with httpx.AsyncClient(base_url=proxy.base_url, timeout=120) as client:
                body = {"model": model, "messages": MESSAGES, "tools": TOOLS, "max_tokens": max_tokens}
                out = []
                for i in range(calls + 5):
                    t = time.perf_counter()
                    r = await client.post("/chat/completions", json=body)
                    r.raise_for_status()
                    if i >= 5:  # warm-up calls (connections, the /v1/models lookup) are not counted
                        out.append((time.perf_counter() - t) * 1000)
                return out


async def main(args: argparse.Namespace) -> dict:
    if args.upstream:
        upstream = args.upstream
        model = httpx.get(upstream.rstrip("/") + "/models").json()["data"][0]["id"]
        return await _measure(upstream, model, args.calls, "given server", args.max_tokens)
    async with LocalBackend(policy="echo", max_model_len=65536) as backend:
        return await _measure(backend.base_url, "local", args.calls, "local backend (echo policy)", args.max_tokens)


async def _measure(upstream: str, model: str, calls: int, label: str, max_tokens: int) -> dict:
    off = await _run(upstream, model, calls, None, max_tokens)
    on = await _run(upstream, model, calls, ContextPolicy(fit_context=True), max_tokens)
    result = {"upstream": label, "calls": calls, "max_tokens": max_tokens, "machine": platform.platform(),
              "fit_off_ms": {"p50": round(_pct(off, 0.5), 2), "p99": round(_pct(off, 0.99), 2)},
              "fit_on_ms": {"p50": round(_pct(on, 0.5), 2), "p99": round(_pct(on, 0.99), 2)}}
    result["added_p50_ms"] = round(result["fit_on_ms"]["p50"] - result["fit_off_ms"]["p50"], 2)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--upstream", default=None, help="a server's /v1 URL (default: the local backend)")
    parser.add_argument("--max-tokens", type=int, default=32000, help="max_tokens of every call (default 32000)")
    args = parser.parse_args()
    figures = asyncio.run(main(args))
    print(f"{'':12}{'p50 ms':>10}{'p99 ms':>10}")
    for key in ("fit_off_ms", "fit_on_ms"):
        print(f"{key:12}{figures[key]['p50']:>10}{figures[key]['p99']:>10}")
    print(f"fitting adds {figures['added_p50_ms']} ms at p50 ({figures['upstream']})")
    name = "context_fit_overhead_upstream.json" if args.upstream else "context_fit_overhead.json"
    out = Path(__file__).resolve().parent / "results" / name
    out.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"saved {out}")
