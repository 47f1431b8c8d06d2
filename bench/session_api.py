"""Benchmark: the proxy's session API under load (docs/session-api.md).

On loopback: the local backend (its own process, echo policy) and the recording proxy (its own process,
`rollout-dataset proxy`). `--sessions` harnesses run at once, each `--turns` chat calls of one
conversation in its own session (each call extends the last by its answer and a new user message).
Three configurations, interleaved over `--rounds`:

  * `off`: `--no-session-api`; the harnesses only;
  * `on, unread`: the API on (with a token), nobody reads it: what it costs model traffic;
  * `on, pulled`: each harness, the moment its last answer arrives, pulls its session's sequences
    (`GET /sessions/{id}/sequences` until every call is settled) like a trainer would;
  * `rllm-model-gateway, pulled` (`--rllm`): rLLM's gateway (PyPI 0.1.0, in its own venv
    `.venv-rllm-gw`, never a project dependency; sqlite store, its defaults) on the same stream, each
    harness pulling its session's traces (`GET /sessions/{id}/traces` until it holds every call). Its
    traces are per-call records; ours are trainable sequences (graph, masks, findings) built from them.

Figures: for `on, pulled`, the time from a session's last answer to its sequences being served (p50,
p99, max); for each configuration, the proxy's CPU (psutil, user + system of its processes) per model
call, and the calls per second.

    .venv/bin/python bench/session_api.py [--sessions 256] [--turns 3] [--rounds 2] [--workers 1] [--rllm] [--quick]

Prints a markdown table and saves bench/results/session_api.json (`--workers 2`: session_api_workers2.json;
`--quick`: ..._quick.json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_overhead import free_port, pct, process_cpu_s, start_backend  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-" + os.urandom(8).hex()
CONFIGS = ("off", "on, unread", "on, pulled")
RLLM = "rllm-model-gateway, pulled"
RLLM_VENV = ROOT / ".venv-rllm-gw"


def start_proxy(upstream: str, trace_dir: str, api: bool, workers: int = 1) -> tuple[subprocess.Popen, str]:
    """The recording proxy in its own process(es), the session API on (with a token) or off."""
    args = [sys.executable, "-m", "rollout_dataset.cli", "proxy", "--upstream", upstream, "--trace-dir", trace_dir,
            "--workers", str(workers)]
    env = {**os.environ, "ROLLOUT_SESSION_API_TOKEN": TOKEN} if api else dict(os.environ)
    if not api:
        args.append("--no-session-api")
        env.pop("ROLLOUT_SESSION_API_TOKEN", None)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env, cwd=str(ROOT))
    assert proc.stdout is not None
    base = proc.stdout.readline().strip()
    if not base.startswith("http"):
        raise RuntimeError("the proxy did not print its base URL")
    return proc, base.removesuffix("/v1")


def start_rllm(upstream: str, db: str) -> tuple[subprocess.Popen, str]:
    """rllm-model-gateway in its own process (its own venv), once /health answers."""
    exe = RLLM_VENV / "bin" / "rllm-model-gateway"
    if not exe.exists():
        raise SystemExit(f"{exe} missing: python3 -m venv {RLLM_VENV} && {RLLM_VENV}/bin/pip install "
                         "rllm-model-gateway==0.1.0")
    port = free_port()
    proc = subprocess.Popen([str(exe), "--host", "127.0.0.1", "--port", str(port), "--worker", upstream,
                             "--store", "sqlite", "--db-path", db, "--log-level", "warning"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc, f"http://127.0.0.1:{port}"
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.terminate()
    raise RuntimeError("rllm-model-gateway did not answer /health within 60 s")


def cpu_s(pid: int) -> float:
    """CPU seconds of the proxy: its process and its workers (`--workers N`)."""
    return process_cpu_s(pid)


async def harness(client: httpx.AsyncClient, root: str, session: str, turns: int, pull: str | None,
                  served_after: list[float], call_ms: list[float], read_ms: list[float], failed: list[str]) -> None:
    """One session's conversation; with `pull`, then its sequences as soon as its last answer arrived."""
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    url = f"{root}/sessions/{session}/v1/chat/completions"
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Turn {turn}: say something short about the number {turn}."})
        t = time.perf_counter()
        try:
            r = await client.post(url, json={"model": "local", "messages": messages, "max_tokens": 16})
        except httpx.HTTPError:
            failed.append(session)
            return
        if r.status_code != 200:  # counted; the session is not pulled (it holds fewer calls)
            failed.append(session)
            return
        call_ms.append((time.perf_counter() - t) * 1000)
        messages.append({k: v for k, v in r.json()["choices"][0]["message"].items() if v is not None})
    last = time.perf_counter()
    if pull is None:
        return
    while True:
        asked = time.perf_counter()
        if await pulled(client, root, session, turns, pull):
            break
        await asyncio.sleep(0.005)
    done = time.perf_counter()
    served_after.append((done - last) * 1000)
    read_ms.append((done - asked) * 1000)


async def pulled(client: httpx.AsyncClient, root: str, session: str, turns: int, kind: str) -> bool:
    """One read of the session from the API of `kind` (ours or rLLM's): whether it holds every call."""
    if kind == RLLM:
        r = await client.get(f"{root}/sessions/{session}/traces")
        if r.status_code == 404:
            return False
        r.raise_for_status()
        return len(r.json()) >= turns
    r = await client.get(f"{root}/sessions/{session}/sequences", headers={"authorization": f"Bearer {TOKEN}"})
    r.raise_for_status()
    document = r.json()
    if document["settled_calls"] == turns and document["calls_in_flight"] == 0:
        assert any(s["trainable"] for s in document["sequences"]), session
        return True
    return False


async def phase(root: str, pid: int, sessions: int, turns: int, pull: str | None, tag: str) -> dict:
    served_after: list[float] = []
    call_ms: list[float] = []
    read_ms: list[float] = []
    failed: list[str] = []
    limits = httpx.Limits(max_connections=sessions * 2, max_keepalive_connections=sessions * 2)
    async with httpx.AsyncClient(timeout=300, limits=limits, trust_env=False) as client:
        before, t0 = cpu_s(pid), time.perf_counter()
        await asyncio.gather(*(harness(client, root, f"{tag}-{i}", turns, pull, served_after, call_ms, read_ms, failed)
                               for i in range(sessions)))
        wall, cpu = time.perf_counter() - t0, cpu_s(pid) - before
    calls = len(call_ms) + len(failed)  # calls made (a failed one ends its session)
    return {"calls": calls, "wall_s": wall, "proxy_cpu_s": cpu, "served_after_ms": served_after, "call_ms": call_ms,
            "read_ms": read_ms, "failed_sessions": len(failed)}


def summarise(runs: list[dict]) -> dict:
    calls = sum(r["calls"] for r in runs)
    out = {"calls": calls, "failed_sessions": sum(r["failed_sessions"] for r in runs), "proxy_cpu_us_per_call": 1e6 * sum(r["proxy_cpu_s"] for r in runs) / calls,
           "calls_per_s": calls / sum(r["wall_s"] for r in runs)}
    latency = [v for r in runs for v in r["call_ms"]]
    out.update({"call_ms_p50": statistics.median(latency), "call_ms_p99": pct(latency, 99)})
    served = [v for r in runs for v in r["served_after_ms"]]
    if served:
        out.update({"sessions_pulled": len(served), "served_after_ms_p50": statistics.median(served),
                    "served_after_ms_p99": pct(served, 99), "served_after_ms_max": max(served)})
        reads = [v for r in runs for v in r["read_ms"]]
        out.update({"last_read_ms_p50": statistics.median(reads), "last_read_ms_p99": pct(reads, 99)})
    return out


async def run(args: argparse.Namespace) -> dict:
    port = free_port()
    backend = start_backend(port)
    upstream = f"http://127.0.0.1:{port}/v1"
    configs = CONFIGS + ((RLLM,) if args.rllm else ())
    results: dict[str, list[dict]] = {name: [] for name in configs}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-session-api-") as tmp:
            for round_ in range(args.rounds):
                for name in configs:
                    folder = os.path.join(tmp, f"{round_}-{configs.index(name)}")
                    if name == RLLM:
                        os.makedirs(folder)
                        proc, root = start_rllm(upstream, os.path.join(folder, "traces.db"))
                    else:
                        proc, root = start_proxy(upstream, folder, name != "off", args.workers)
                    try:
                        # warm-up: connections and the first-call costs, not measured
                        await phase(root, proc.pid, 8, 1, None, "warm")
                        results[name].append(await phase(root, proc.pid, args.sessions, args.turns,
                                                         name if "pulled" in name else None, f"r{round_}"))
                    finally:
                        proc.terminate()
                        proc.wait(30)
                    print(f"round {round_} {name}: {summarise(results[name][-1:])}", file=sys.stderr)
    finally:
        backend.terminate()
        backend.wait(30)
    return {name: summarise(runs) for name, runs in results.items()}


def markdown(table: dict, args: argparse.Namespace) -> str:
    lines = [f"{args.sessions} concurrent sessions x {args.turns} chat calls, {args.rounds} round(s), local backend "
             f"(echo), proxy in its own process ({args.workers} worker(s)); {os.cpu_count()} cores, shared", "",
             "| target | sessions failed | proxy CPU per call | calls/s | model call p50 / p99 | last answer -> "
             "sequences served p50 / p99 / max | the read that served them p50 / p99 |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, row in table.items():
        served = (f"{row['served_after_ms_p50']:.1f} / {row['served_after_ms_p99']:.1f} / "
                  f"{row['served_after_ms_max']:.1f} ms | {row['last_read_ms_p50']:.1f} / {row['last_read_ms_p99']:.1f} ms"
                  if "served_after_ms_p50" in row else "- | -")
        lines.append(f"| {name} | {row['failed_sessions']} | {row['proxy_cpu_us_per_call']:.0f} µs | {row['calls_per_s']:.0f} | "
                     f"{row['call_ms_p50']:.0f} / {row['call_ms_p99']:.0f} ms | {served} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="64 sessions, 1 round")
    parser.add_argument("--workers", type=int, default=1, help="the proxy's --workers")
    parser.add_argument("--rllm", action="store_true", help="also rllm-model-gateway on the same stream (.venv-rllm-gw)")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.rounds = 64, 1
    table = asyncio.run(run(args))
    text = markdown(table, args)
    print(text)
    name = "session_api" + (f"_workers{args.workers}" if args.workers != 1 else "") + ("_quick" if args.quick else "")
    out = ROOT / "bench" / "results" / f"{name}.json"
    out.write_text(json.dumps({"args": vars(args), "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                                               "load_1m": os.getloadavg()[0]},
                               "results": table}, indent=2) + "\n")
    print(f"saved {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
