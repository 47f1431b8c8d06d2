"""Benchmark: on-policy mode against a model server — prefix continuity with the mode on vs off, and
what the extra /tokenize calls cost per call.

Runs N multi-turn chat conversations through the recording proxy (in this process, on loopback),
once with `on_policy=False` and once with `on_policy=True`, against `--upstream URL` (the genuine
vLLM server of ../shared/tools/real-vllm, REAL_VLLM_URL by default) or, without one, the local
backend with a script policy that emits non-canonical token ids. A turn is "continuous" when its
prompt ids start with the previous call's prompt ids + sampled ids. Reported per mode: the share
of continuing turns that are continuous; with the mode on, the share per recorded continuity status
and the continuity among turns whose text round-trips (every status but content_changed); the mean
latency per continuing call (mode on minus mode off: the added latency) and the mean time spent in
the extra calls (`continuity.tokenize_ms`). Conversations alternate modes call by call, so both
see the same server load. Prints a table and saves bench/results/on_policy[_real_vllm].json.

    REAL_VLLM_URL=http://127.0.0.1:18000/v1 .venv/bin/python bench/on_policy.py [--conversations 20] [--turns 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rollout_dataset.proxy import CaptureProxy, read_trace  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def continuous(parent: dict, child: dict) -> bool:
    head = (parent.get("prompt_token_ids") or []) + (parent.get("completion_token_ids") or [])
    return bool(head) and (child.get("prompt_token_ids") or [])[: len(head)] == head


async def conversation(client: httpx.AsyncClient, urls: dict[bool, str], model: str, index: int, turns: int,
                       max_tokens: int) -> None:
    """One conversation per mode, their calls interleaved (same load for both)."""
    history = {mode: [{"role": "system", "content": "You are a helpful assistant."},
                      {"role": "user", "content": f"Conversation {index}: tell me something."}] for mode in urls}
    for turn in range(turns):
        for mode, url in urls.items():
            body = {"model": model, "messages": history[mode], "max_tokens": max_tokens, "temperature": 1.0,
                    "seed": index * 1000 + turn}
            r = await client.post(url + "/chat/completions", json=body)
            r.raise_for_status()
            message = r.json()["choices"][0]["message"]
            history[mode] = history[mode] + [{"role": "assistant", "content": message.get("content") or ""},
                                             {"role": "user", "content": f"Go on ({turn + 1})."}]


def measure(records: list[dict]) -> dict:
    """Continuity and latency of the continuing calls of one mode's traces (one list per conversation)."""
    pairs = [(a, b) for a, b in zip(records, records[1:]) if b["session"] == a["session"]]
    n = len(pairs)
    ok = sum(continuous(a, b) for a, b in pairs)
    out = {"continuing_calls": n, "continuous": ok, "continuous_share": ok / n if n else None,
           "latency_ms_mean": statistics.fmean(b["latency_ms"] for _, b in pairs) if n else None,
           "latency_ms_median": statistics.median(b["latency_ms"] for _, b in pairs) if n else None}
    with_mode = [b for _, b in pairs if b.get("continuity")]
    if with_mode:
        status = Counter(b["continuity"]["status"] for b in with_mode)
        reasons = Counter(b["continuity"]["reason"] for b in with_mode if b["continuity"]["status"] == "not_repaired")
        round_trip = [(a, b) for a, b in pairs if b["continuity"]["reason"] != "content_changed"]
        out.update({
            "status": dict(status), "not_repaired_reasons": dict(reasons),
            "round_trip_turns": len(round_trip),
            "continuous_share_of_round_trip_turns":
                sum(continuous(a, b) for a, b in round_trip) / len(round_trip) if round_trip else None,
            "tokenize_ms_mean": statistics.fmean(b["continuity"]["tokenize_ms"] for b in with_mode),
            "tokenize_ms_median": statistics.median(b["continuity"]["tokenize_ms"] for b in with_mode),
        })
        drifts = [b["continuity"]["drift"] for b in with_mode if b["continuity"].get("drift")]
        if drifts:  # repaired calls: the differing spans, the server's re-render vs the ids sent
            for side in ("server_tokens", "sent_tokens"):
                sizes = [d[side] for d in drifts]
                out[f"drift_{side}_median"] = statistics.median(sizes)
                out[f"drift_{side}_max"] = max(sizes)
    return out


async def run(upstream: str, conversations: int, turns: int, max_tokens: int, concurrency: int) -> dict:
    async with httpx.AsyncClient(timeout=300) as client:
        model = (await client.get(upstream.rstrip("/") + "/models")).json()["data"][0]["id"]
        with tempfile.TemporaryDirectory(prefix="bench-on-policy-") as tmp:
            async with CaptureProxy(upstream, Path(tmp) / "off", on_policy=False) as off, \
                    CaptureProxy(upstream, Path(tmp) / "on", on_policy=True) as on:
                gate = asyncio.Semaphore(concurrency)

                async def one(i: int) -> None:
                    async with gate:
                        urls = {False: off.session_base_url(f"c{i}"), True: on.session_base_url(f"c{i}")}
                        await conversation(client, urls, model, i, turns, max_tokens)

                t0 = time.perf_counter()
                await asyncio.gather(*(one(i) for i in range(conversations)))
                wall = time.perf_counter() - t0
                traces = {mode: [r for i in range(conversations)
                                 for r in read_trace(proxy.trace_path(f"c{i}"))]
                          for mode, proxy in ((False, off), (True, on))}
    off_m, on_m = measure(traces[False]), measure(traces[True])
    added = (on_m["latency_ms_mean"] - off_m["latency_ms_mean"]) if off_m["latency_ms_mean"] is not None else None
    return {"upstream_model": model, "conversations": conversations, "turns": turns, "max_tokens": max_tokens,
            "concurrency": concurrency, "wall_s": wall, "mode_off": off_m, "mode_on": on_m,
            "added_latency_ms_per_continuing_call": added}


def local_backend_upstream():
    """The local backend with a policy whose replies are tokenized one character at a time."""
    from rollout_dataset.backend import LocalBackend
    from rollout_dataset.tokenizers import load_tokenizer

    tok = load_tokenizer("builtin")

    class CharPolicy:
        run_in_thread = False

        def respond(self, request):
            from rollout_dataset.backend import PolicyOutput

            text = f"Reply {request.turn}: something for you."
            return PolicyOutput(token_ids=[i for ch in text for i in tok.encode(ch, add_special_tokens=False)])

    return LocalBackend(policy=CharPolicy())


def table(result: dict) -> str:
    off, on = result["mode_off"], result["mode_on"]
    rows = [
        "| | mode off | mode on |", "| --- | --- | --- |",
        f"| continuing calls | {off['continuing_calls']} | {on['continuing_calls']} |",
        f"| exact prefix continuity | {off['continuous_share']:.0%} | {on['continuous_share']:.0%} |",
        f"| continuity, turns whose text round-trips | | {on.get('continuous_share_of_round_trip_turns') or 0:.0%} "
        f"({on.get('round_trip_turns')}) |",
        f"| recorded status | | {on.get('status')} |",
        f"| mean latency per continuing call (ms) | {off['latency_ms_mean']:.1f} | {on['latency_ms_mean']:.1f} |",
        f"| median latency per continuing call (ms) | {off['latency_ms_median']:.1f} | {on['latency_ms_median']:.1f} |",
        f"| extra /tokenize time per call, mean / median (ms) | | {on.get('tokenize_ms_mean', 0):.1f} / "
        f"{on.get('tokenize_ms_median', 0):.1f} |",
    ]
    if "drift_server_tokens_median" in on:
        rows.append(f"| drift of a repaired call, re-render vs sampled tokens, median (max) | | "
                    f"{on['drift_server_tokens_median']} ({on['drift_server_tokens_max']}) vs "
                    f"{on['drift_sent_tokens_median']} ({on['drift_sent_tokens_max']}) |")
    return "\n".join(rows)


async def amain(args: argparse.Namespace) -> dict:
    if args.upstream:
        return await run(args.upstream, args.conversations, args.turns, args.max_tokens, args.concurrency)
    async with local_backend_upstream() as backend:
        return await run(backend.base_url, args.conversations, args.turns, args.max_tokens, args.concurrency)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", default=os.environ.get("REAL_VLLM_URL"),
                        help="model server base URL (default REAL_VLLM_URL; none: the local backend)")
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--save-as", default=None, metavar="NAME",
                        help="results file name under bench/results/ (default on_policy[_real_vllm].json; "
                             "e.g. on_policy_smollm2.json for genuine weights)")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=1,
                        help="conversations in flight (1: latencies without queueing)")
    args = parser.parse_args()
    result = asyncio.run(amain(args))
    result["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count()}
    result["upstream"] = "real vLLM " + args.upstream if args.upstream else "local backend (non-canonical ids)"
    print(table(result))
    name = args.save_as or ("on_policy_real_vllm.json" if args.upstream else "on_policy.json")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / name).write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {RESULTS / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
