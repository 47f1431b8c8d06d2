"""Memory bound: the proxy's peak RSS while many large request bodies arrive at once.

Starts the faulty-server role of `bench/proxy_faults.py` as the upstream and the recording proxy
(`rollout-dataset proxy`, its own process, with ``--max-inflight-mb``), sends ``--bodies``
concurrent chat requests of ``--body-mb`` MiB each, samples the proxy's RSS every 0.1 s, and prints
and saves (bench/results/proxy_memory.json) the peak RSS, the statuses the clients got and the
records written (every refusal is a recorded 503).

    .venv/bin/python bench/proxy_memory.py [--bodies 16] [--body-mb 60] [--max-inflight-mb 256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "proxy_memory.json"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def drive(base: str, body: bytes, n: int, pid: int) -> tuple[Counter, int]:
    peak = 0
    done = asyncio.Event()

    async def sampler() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_kib(pid))
            await asyncio.sleep(0.1)

    async def one(http: aiohttp.ClientSession) -> int:
        async with http.post(base + "/chat/completions", data=body,
                             headers={"content-type": "application/json"}) as resp:
            await resp.read()
            return resp.status

    task = asyncio.ensure_future(sampler())
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
        statuses = await asyncio.gather(*(one(http) for _ in range(n)), return_exceptions=True)
    done.set()
    await task
    return Counter(s if isinstance(s, int) else type(s).__name__ for s in statuses), peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bodies", type=int, default=16)
    parser.add_argument("--body-mb", type=float, default=60.0)
    parser.add_argument("--max-inflight-mb", type=float, default=256.0)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from rollout_dataset.proxy import read_trace

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, str(ROOT / "bench" / "proxy_faults.py"), "--role", "upstream",
                                 "--port", str(up_port)], env=env, stderr=subprocess.DEVNULL)
    trace_dir = Path(tempfile.mkdtemp(prefix="proxy-memory-"))
    proxy = subprocess.Popen([sys.executable, "-m", "rollout_dataset.cli", "proxy", "--upstream",
                              f"http://127.0.0.1:{up_port}/v1", "--trace-dir", str(trace_dir), "--max-inflight-mb",
                              str(args.max_inflight_mb)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        base = proxy.stdout.readline().strip()
        time.sleep(1.0)
        idle = rss_kib(proxy.pid)
        content = "x" * int(args.body_mb * 1024 * 1024)
        body = json.dumps({"model": "ok", "messages": [{"role": "user", "content": content}]}).encode()
        del content
        t0 = time.monotonic()
        statuses, peak = asyncio.run(drive(base, body, args.bodies, proxy.pid))
        elapsed = time.monotonic() - t0
    finally:
        proxy.send_signal(signal.SIGINT)
        try:
            proxy.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proxy.kill()
        upstream.terminate()
        upstream.wait(timeout=10)
    records = read_trace(trace_dir / "default.jsonl")
    result = {"bodies": args.bodies, "body_mb": args.body_mb, "max_inflight_mb": args.max_inflight_mb,
              "statuses": {str(k): v for k, v in statuses.items()}, "records": len(records),
              "refusals_recorded": sum(1 for r in records if r["status"] == 503),
              "proxy_rss_idle_mib": round(idle / 1024, 1), "proxy_rss_peak_mib": round(peak / 1024, 1),
              "elapsed_s": round(elapsed, 2)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{args.bodies} concurrent bodies of {args.body_mb} MiB, --max-inflight-mb {args.max_inflight_mb}: "
          f"proxy RSS idle {result['proxy_rss_idle_mib']} MiB, peak {result['proxy_rss_peak_mib']} MiB; "
          f"statuses {result['statuses']}; records {len(records)} ({result['refusals_recorded']} refusals)")
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
