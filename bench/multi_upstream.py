"""Several model servers behind one proxy: throughput, sticky share and added latency at 256 sessions.

Starts ``--upstreams`` local backends (`rollout-dataset serve --policy echo`, one process each) and, for
each ``--workers`` value, the recording proxy (`rollout-dataset proxy`, its own process) three ways:

* ``direct``: no proxy, each session sent straight to the backend its id hashes to (the floor);
* ``1 upstream``: the proxy in front of the first backend only;
* ``N upstreams``: the proxy with ``--upstream`` given for every backend.

Each run drives ``--sessions`` concurrent sessions (default 256), each making ``--calls`` non-streamed
chat calls in turn (default 4; one connection per session), bounded by ``--budget-s`` seconds (default
120) of wall time per run; then ``--serial-calls`` pairs of calls one after another (default 100, after 5
unmeasured), each pair through the proxy and then straight to the same server: the latency the proxy
adds to a call without queueing is the median of the pairs' differences (other processes' load hits
both halves of a pair alike). It prints and saves (bench/results/multi_upstream.json): calls/s and
latency p50/p99 under load, throughput against "1 upstream" with the same workers, the added latency
per call (paired; also the p50 difference under load against ``direct``) and, from the trace files,
the sticky share (sessions whose calls all went to one model server) and the sessions per server.

    .venv/bin/python bench/multi_upstream.py [--upstreams 4] [--sessions 256] [--calls 4] [--workers 1 2]
        [--budget-s 120]

All processes share this machine's cores: on 2 cores four backends, the proxy and the load generator
compete, so "N upstreams" cannot show more model capacity than the cores give; the figure to read is
that spreading costs nothing over one upstream and keeps every session on one server.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from rollout_dataset.proxy.upstream_pool import rendezvous_rank  # noqa: E402  (the proxy's own ranking)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "multi_upstream.json"


def _spawn(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    """`rollout-dataset ARGS` in a child process, once it printed its base URL."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "rollout_dataset.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("http"):
        proc.kill()
        raise SystemExit(f"rollout-dataset {args[0]} did not start (got {line!r})")
    return proc, line


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _drive(base_for: dict[str, str], calls: int, budget_s: float) -> dict[str, object]:
    """Every session makes `calls` chat calls in turn on its own connection; latencies in ms."""
    latencies: list[float] = []
    failures = 0

    async def session(name: str) -> None:
        nonlocal failures
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=1)) as http:
            for n in range(calls):
                body = {"model": "local", "messages": [{"role": "user", "content": f"{name} turn {n}"}],
                        "max_tokens": 8}
                t0 = time.perf_counter()
                try:
                    response = await http.post(base_for[name] + "/chat/completions", json=body)
                    ok = response.status_code == 200
                except httpx.HTTPError:
                    ok = False
                latencies.append((time.perf_counter() - t0) * 1000.0)
                failures += not ok

    t0 = time.perf_counter()
    tasks = [asyncio.ensure_future(session(name)) for name in base_for]
    done, pending = await asyncio.wait(tasks, timeout=budget_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    wall = time.perf_counter() - t0
    return {"calls": len(latencies), "failed": failures, "unfinished_sessions": len(pending), "wall_s": round(wall, 2),
            "calls_per_s": round(len(latencies) / wall, 1),
            "latency_ms_p50": round(_quantile(latencies, 0.5) or 0, 2),
            "latency_ms_p99": round(_quantile(latencies, 0.99) or 0, 2)}


async def _paired(proxied: str, direct: str, calls: int) -> dict[str, object]:
    """`calls` pairs of chat calls one after another, through the proxy then straight to the same server
    (after 5 unmeasured pairs): the added latency per call is the median of the pairs' differences, so the
    load other processes put on the machine hits both halves of a pair alike."""
    proxy_ms: list[float] = []
    direct_ms: list[float] = []
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=2)) as http:
        for n in range(calls + 5):
            body = {"model": "local", "messages": [{"role": "user", "content": f"serial {n}"}], "max_tokens": 8}
            times = []
            for base in (proxied, direct):
                t0 = time.perf_counter()
                response = await http.post(base + "/chat/completions", json=body)
                times.append((time.perf_counter() - t0) * 1000.0 if response.status_code == 200 else None)
            if n >= 5 and None not in times:
                proxy_ms.append(times[0])
                direct_ms.append(times[1])
    added = [a - b for a, b in zip(proxy_ms, direct_ms)]
    return {"serial_pairs": len(added), "serial_proxy_ms_p50": round(_quantile(proxy_ms, 0.5) or 0, 3),
            "serial_direct_ms_p50": round(_quantile(direct_ms, 0.5) or 0, 3),
            "added_ms_per_call_p50": round(_quantile(added, 0.5) or 0, 3),
            "added_ms_per_call_p90": round(_quantile(added, 0.9) or 0, 3)}


def _placement(trace_dir: Path) -> dict[str, object]:
    """Sticky share and sessions per model server, from the trace files."""
    sticky = sessions = 0
    per_server: Counter[str] = Counter()
    for path in trace_dir.glob("*.jsonl"):
        servers = {(json.loads(line).get("model_server") or {}).get("url")
                   for line in path.read_text().splitlines() if line.strip()}
        sessions += 1
        sticky += len(servers) == 1
        per_server.update(servers)
    return {"sessions_recorded": sessions, "sticky_share": round(sticky / sessions, 4) if sessions else None,
            "sessions_per_server": dict(sorted(per_server.items(), key=lambda kv: str(kv[0])))}


def _hash_pick(name: str, urls: list[str]) -> str:
    return urls[int(hashlib.sha256(name.encode()).hexdigest(), 16) % len(urls)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstreams", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--calls", type=int, default=4, help="calls per session")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--budget-s", type=float, default=120.0, help="wall-time bound of each run")
    parser.add_argument("--serial-calls", type=int, default=100, help="pairs of calls for the added latency")
    args = parser.parse_args()
    names = [f"s{i:04d}" for i in range(args.sessions)]
    backends = [_spawn(["serve", "--port", "0", "--policy", "echo"]) for _ in range(args.upstreams)]
    urls = [url for _, url in backends]
    runs: list[dict[str, object]] = []
    try:
        direct = asyncio.run(_drive({n: _hash_pick(n, urls) for n in names}, args.calls, args.budget_s))
        runs.append({"setup": "direct", "workers": 0, **direct})
        print(json.dumps(runs[-1]), flush=True)
        for workers in args.workers:
            for label, given in (("1 upstream", urls[:1]), (f"{len(urls)} upstreams", urls)):
                with tempfile.TemporaryDirectory(prefix="bench-multi-") as tmp:
                    flags = [arg for url in given for arg in ("--upstream", url)]
                    proxy, base = _spawn(["proxy", *flags, "--trace-dir", tmp, "--workers", str(workers),
                                          "--max-open-files", "64"])
                    try:
                        root = base.removesuffix("/v1")
                        figures = asyncio.run(_drive({n: f"{root}/sessions/{n}/v1" for n in names}, args.calls,
                                                     args.budget_s))
                        # a fresh session at rest goes to its ranked-first server: the direct half calls that one
                        same = given[rendezvous_rank("serial", given)[0]]
                        figures.update(asyncio.run(_paired(f"{root}/sessions/serial/v1", same, args.serial_calls)))
                    finally:
                        _stop(proxy)
                    run: dict[str, object] = {"setup": label, "workers": workers, **figures}
                    run["added_ms_p50_under_load"] = round(float(figures["latency_ms_p50"]) - float(direct["latency_ms_p50"]), 2)
                    if len(given) > 1:
                        run.update(_placement(Path(tmp)))
                    runs.append(run)
                    print(json.dumps(run), flush=True)
    finally:
        for proc, _ in backends:
            _stop(proc)
    single = {r["workers"]: r["calls_per_s"] for r in runs if r["setup"] == "1 upstream"}
    for run in runs:
        if run["setup"] not in ("direct", "1 upstream") and single.get(run["workers"]):
            run["throughput_vs_1_upstream"] = round(float(run["calls_per_s"]) / float(single[run["workers"]]), 2)
    result = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "settings": {"upstreams": args.upstreams, "sessions": args.sessions, "calls": args.calls,
                           "budget_s": args.budget_s}, "runs": runs}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(f"saved {RESULTS}")


if __name__ == "__main__":
    main()
