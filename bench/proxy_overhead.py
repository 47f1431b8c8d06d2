"""Benchmark: what the recording proxy adds, next to a LiteLLM proxy, in front of the same backend.

Runs, on loopback, in one go:
  * the local backend (`rollout-dataset serve`), or `--upstream URL` for a server you already run;
  * the recording proxy (`rollout-dataset proxy`, its own process, writing traces to a temp dir), and
    the same with `--workers 2`;
  * the pass-through floor (`bench/passthrough_floor.py`): the proxy's own server and upstream client
    forwarding bytes and recording nothing, so the proxy's cost above it is what recording costs, and
    its cost is what moving the bytes costs here (`--no-floor` leaves it out);
  * the least recording (`bench/passthrough_floor.py --least-recording`): the floor plus the least
    work any recording proxy under this project's rules must do (parse and add the token fields to
    the request; decode each event with httpx-sse, parse it, strip it and re-encode it; append the
    call as one line), so its cost over the floor bounds what recording can cost on this stack;
  * the peers, each installed by this script into a venv of its own (never a project dependency) and
    run as its users run it: rLLM's gateway (`rllm-model-gateway`, sqlite store, calls under
    `/sessions/{id}/v1`), measured in the proxy's phase; Agent Lightning's `LLMProxy`
    (`agentlightning`, bench/peers/agent_lightning_proxy.py, calls under `/rollout/{id}/attempt/{id}/v1`)
    and a LiteLLM proxy (`litellm[proxy]`), each in a phase of its own (`--skip-peers`, `--skip-litellm`
    leave them out).
Then measures, per target, non-streaming latency at concurrency 1 and 32, time to first token when
streaming (concurrency 1), and throughput at concurrency 32; "added" figures are target minus
direct, measured in the same phase with calls interleaved (the LiteLLM-based peers get phases of
their own, started only then, so their idle background work does not tax the others). The client is aiohttp, the
cheapest here, so that the 2 cores go to the servers.

Streaming (`--stream-tokens` per stream, 256 by default, at concurrency 32): streamed chunks per
second through each target, and for the proxies the CPU they spent per chunk forwarded: the CPU
time of the proxy's processes (psutil: the parent and its workers, user + system) over the chunks
the clients received, the proxies each in their own process so the figure is theirs alone.

The goals (`GOALS`) are checked on the run's own figures and saved with them: ahead of every peer
side by side (added latency and CPU per call), and at most 1.10x the least recording's CPU per call
and 1.25x per streamed chunk.

Prints a markdown table and saves bench/results/proxy_overhead.json (`--quick`: fewer calls, a
rough figure in a minute; saved as proxy_overhead_quick.json).

    .venv/bin/python bench/proxy_overhead.py [--calls 300] [--streams 256] [--skip-litellm] [--quick] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import aiohttp
import httpx
import psutil

from rollout_dataset.proxy.redact import redact_url

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "proxy_overhead.json"
LITELLM_VENV = Path(os.environ.get("LITELLM_VENV", Path(tempfile.gettempdir()) / "rollout-dataset-bench-litellm"))
RLLM_VENV = Path(os.environ.get("RLLM_VENV", Path(tempfile.gettempdir()) / "rollout-dataset-bench-rllm"))
AGL_VENV = Path(os.environ.get("AGL_VENV", Path(tempfile.gettempdir()) / "rollout-dataset-bench-agl"))
RLLM = "rLLM gateway"
AGL = "Agent Lightning proxy"
LITELLM = "LiteLLM proxy"
PEERS = (RLLM, AGL, LITELLM)
# A target URL ending in this asks the server directly for what the proxy adds (ids + logprobs):
# the server's own cost of token capture, apart from the proxy's.
CAPTURE = "#capture"
FLOOR = "pass-through floor"  # the target name of bench/passthrough_floor.py
LEAST = "least recording"  # the target name of bench/passthrough_floor.py --least-recording
# The recording proxy's goals, checked on each run's own side-by-side figures: (what, over, under, at most).
GOALS = (("CPU per call", "rollout-dataset proxy", LEAST, 1.10),
         ("CPU per streamed chunk", "rollout-dataset proxy", LEAST, 1.25))
# LiteLLM refuses to start without a master key; every target gets the same bearer header.
BENCH_KEY = "sk-bench-" + os.urandom(8).hex()
MESSAGES = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Say hello in a few words."}]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def start_backend(port: int) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        import uvicorn
        from rollout_dataset.backend import create_backend_app
        uvicorn.run(create_backend_app(), host="127.0.0.1", port={port}, log_level="warning", access_log=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code])
    wait_http(f"http://127.0.0.1:{port}/health", proc, 120)
    return proc


def _started(command: list[str], what: str, env: dict | None = None, cwd: str | None = None) -> tuple[subprocess.Popen, str]:
    """A server in its own process, once it has printed its base URL (its first line)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=cwd)
    base = proc.stdout.readline().strip()
    if not base.startswith("http"):
        raise RuntimeError(f"{what} did not print its base URL")
    return proc, base


def start_proxy(upstream: str, trace_dir: str, workers: int = 1, source: str | None = None) -> tuple[subprocess.Popen, str]:
    """The recording proxy in its own process; `source`: the package from another checkout (PYTHONPATH)."""
    args = [sys.executable, "-m", "rollout_dataset.cli", "proxy", "--upstream", upstream, "--trace-dir", trace_dir]
    if workers != 1:
        args += ["--workers", str(workers)]
    env = {**os.environ, "PYTHONPATH": source} if source else None
    # `python -m` puts the working directory first on sys.path: run another checkout from its own
    return _started(args, "the recording proxy", env=env, cwd=source)


def start_floor(upstream: str, least_recording: bool = False) -> tuple[subprocess.Popen, str]:
    """`bench/passthrough_floor.py`: the proxy's own server and upstream client, forwarding, recording nothing
    (or, with `least_recording`, doing only the work every recording proxy must do)."""
    flags = ["--least-recording"] if least_recording else []
    return _started([sys.executable, str(Path(__file__).with_name("passthrough_floor.py")), *flags, upstream],
                    LEAST if least_recording else FLOOR, cwd=str(ROOT))


def ensure_venv(venv: Path, *requirements: str) -> Path:
    """A peer's venv of its own (bench only, never a project dependency), created once; returns its bin folder."""
    if not (venv / ".installed").exists():
        print(f"installing {' '.join(requirements)} into {venv} (bench only) ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", *requirements], check=True)
        (venv / ".installed").touch()
    return venv / "bin"


def start_litellm(upstream: str, model: str, workdir: str) -> tuple[subprocess.Popen, str]:
    exe = ensure_venv(LITELLM_VENV, "litellm[proxy]") / "litellm"
    port = free_port()
    config = Path(workdir) / "litellm.yaml"
    config.write_text(json.dumps({"model_list": [{"model_name": model, "litellm_params": {
        "model": f"hosted_vllm/{model}", "api_base": upstream, "api_key": "none"}}],
        "litellm_settings": {"drop_params": False, "telemetry": False}}))
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "NO_DOCS": "True",
           "LITELLM_MASTER_KEY": BENCH_KEY}
    proc = subprocess.Popen([str(exe), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
                             "--num_workers", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/health/liveliness", proc, 180)
    return proc, base + "/v1"


def start_rllm_gateway(upstream: str, workdir: str) -> tuple[subprocess.Popen, str]:
    """rLLM's model gateway (PyPI `rllm-model-gateway`) with its sqlite trace store, one upstream worker; its
    base URL is a session's (`/sessions/{id}/v1`), as a trainer gives each rollout, so every call is recorded."""
    exe = ensure_venv(RLLM_VENV, "rllm-model-gateway==0.1.0") / "rllm-model-gateway"
    port = free_port()
    proc = subprocess.Popen([str(exe), "--host", "127.0.0.1", "--port", str(port), "--worker", upstream, "--store",
                             "sqlite", "--db-path", os.path.join(workdir, "rllm-gateway.db"), "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/health", proc, 120)
    return proc, base + "/sessions/bench/v1"


def start_agent_lightning(upstream: str, model: str) -> tuple[subprocess.Popen, str]:
    """Agent Lightning's `LLMProxy` (PyPI `agentlightning`, bench/peers/agent_lightning_proxy.py), as its users
    serve a vLLM server: calls under `/rollout/{id}/attempt/{id}/v1` so its store records them per rollout.
    No master key: its launcher's own health check cannot send one (LiteLLM's override for local use)."""
    python = ensure_venv(AGL_VENV, "agentlightning==0.3.0", "litellm[proxy]") / "python"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR",
           "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true"}
    env.pop("LITELLM_MASTER_KEY", None)
    return _started([str(python), str(Path(__file__).with_name("peers") / "agent_lightning_proxy.py"), upstream,
                     model, str(free_port()), str(free_port())], AGL, env=env)


def goals(per_call: dict[str, float], chunk_cpu: dict[str, float], table: dict[str, dict]) -> list[dict]:
    """Each goal with this run's figure and whether it is met (`None` where a target was left out)."""
    checked = []
    for what, over, under, at_most in GOALS:
        figures = per_call if what == "CPU per call" else chunk_cpu
        ratio = figures[over] / figures[under] if over in figures and under in figures else None
        checked.append({"goal": f"{over} / {under}, {what}", "at_most": at_most, "ratio": ratio,
                        "met": None if ratio is None else ratio <= at_most})
    ours_cpu, ours_added = per_call.get("rollout-dataset proxy"), table.get("rollout-dataset proxy", {}).get("added_c1_p50_ms")
    for peer in PEERS:
        if peer in per_call and ours_cpu is not None:
            checked.append({"goal": f"ahead of {peer}, CPU per call", "ratio": ours_cpu / per_call[peer],
                            "at_most": 1.0, "met": ours_cpu < per_call[peer]})
        theirs = table.get(peer, {}).get("added_c1_p50_ms")
        if theirs is not None and ours_added is not None:
            checked.append({"goal": f"ahead of {peer}, added latency p50", "ratio": ours_added / theirs if theirs else None,
                            "at_most": 1.0, "met": ours_added < theirs})
    return checked


def stop(proc: subprocess.Popen) -> None:
    """Terminate a started server, killing it (and its children) when it does not stop within 15 s."""
    if proc.poll() is not None:
        return
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
    for child in children:
        if child.is_running():
            child.kill()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[idx]


async def one_call(session: aiohttp.ClientSession, base: str, model: str, stream: bool, max_tokens: int) -> float:
    """One chat call; returns its latency (non-streaming) or its time to first content chunk, in ms."""
    body = {"model": model, "messages": MESSAGES, "max_tokens": max_tokens, "temperature": 0, "seed": 0}
    if base.endswith(CAPTURE):  # what the proxy asks upstream, asked directly
        base = base[: -len(CAPTURE)]
        body.update(return_token_ids=True, logprobs=True)
    if stream:
        body["stream"] = True
    t0 = time.perf_counter()
    async with session.post(base + "/chat/completions", json=body) as resp:
        resp.raise_for_status()
        if not stream:
            await resp.json()
            return (time.perf_counter() - t0) * 1000
        first = None
        async for line in resp.content:
            if first is None and line.startswith(b"data:") and b'"content"' in line:
                first = (time.perf_counter() - t0) * 1000
    return first if first is not None else float("nan")


async def measure(bases: dict[str, str], model: str, calls: int, max_tokens: int, rounds: int = 4,
                  pids: dict[str, int] | None = None, c32_calls: int | None = None) -> dict[str, dict]:
    """Every phase interleaves the targets (call by call at c=1, round by round at c=32), so the load
    other processes put on the machine hits every target alike. Targets with a pid in `pids` also
    get the CPU their processes spent per call at c=32, over `c32_calls` calls (the kernel counts CPU
    in 10 ms ticks: 4,608 calls of about 0.2 ms each put a tick under 1% of the figure)."""
    pids = pids or {}
    out: dict[str, dict] = {name: {} for name in bases}
    headers = {"authorization": f"Bearer {BENCH_KEY}"}
    connector = aiohttp.TCPConnector(limit=64, keepalive_timeout=3)  # aiohttp: the cheapest client here
    async with aiohttp.ClientSession(connector=connector, headers=headers,
                                     timeout=aiohttp.ClientTimeout(total=120)) as session:
        for base in bases.values():  # warm-up: connections, caches
            await asyncio.gather(*(one_call(session, base, model, False, max_tokens) for _ in range(32)))
        seq: dict[str, list[float]] = {n: [] for n in bases}
        ttft: dict[str, list[float]] = {n: [] for n in bases}
        for _ in range(calls):
            for name, base in bases.items():
                seq[name].append(await one_call(session, base, model, False, max_tokens))
        for _ in range(max(50, calls // 2)):
            for name, base in bases.items():
                ttft[name].append(await one_call(session, base, model, True, max_tokens))
        lat: dict[str, list[float]] = {n: [] for n in bases}
        wall: dict[str, float] = {n: 0.0 for n in bases}
        cpu: dict[str, float] = {n: 0.0 for n in bases}
        per_worker = max(2, (c32_calls or calls * 4) // (32 * rounds))
        for _ in range(rounds):
            for name, base in bases.items():

                async def worker(name: str = name, base: str = base) -> None:
                    for _ in range(per_worker):
                        lat[name].append(await one_call(session, base, model, False, max_tokens))

                cpu0 = process_cpu_s(pids[name]) if name in pids else 0.0
                t0 = time.perf_counter()
                await asyncio.gather(*(worker() for _ in range(32)))
                wall[name] += time.perf_counter() - t0
                if name in pids:
                    cpu[name] += process_cpu_s(pids[name]) - cpu0
        for name in bases:
            out[name] = {
                "c1_p50_ms": statistics.median(seq[name]), "c1_p99_ms": pct(seq[name], 99),
                "c32_p50_ms": statistics.median(lat[name]), "c32_p99_ms": pct(lat[name], 99),
                "ttft_p50_ms": statistics.median(ttft[name]), "ttft_p99_ms": pct(ttft[name], 99),
                "c32_throughput_rps": len(lat[name]) / wall[name], "c32_calls": len(lat[name]),
                "c1_calls": len(seq[name]),
            }
            if name in pids:
                out[name]["c32_cpu_ms_per_call"] = cpu[name] / len(lat[name]) * 1000
    return out


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its children (a multi-worker proxy's workers)."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


async def one_stream(session: aiohttp.ClientSession, base: str, model: str, tokens: int) -> int:
    """One streamed chat call of `tokens` tokens (the echo policy repeats the long prompt); returns the
    number of data chunks received (without the final [DONE])."""
    body = {"model": model, "messages": [{"role": "user", "content": " ".join(["hello"] * (tokens + 16))}],
            "max_tokens": tokens, "temperature": 0, "stream": True}
    chunks = 0
    async with session.post(base + "/chat/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.content:
            if line.startswith(b"data:") and not line.startswith(b"data: [DONE]"):
                chunks += 1
    return chunks


async def measure_streams(bases: dict[str, str], pids: dict[str, int], model: str, streams: int, tokens: int,
                          concurrency: int = 32, rounds: int = 4) -> dict[str, dict]:
    """Streamed chunks/s per target and, for targets with a pid, its CPU microseconds per chunk.

    Rounds interleave the targets, so the load other processes put on the machine hits each alike."""
    headers = {"authorization": f"Bearer {BENCH_KEY}"}
    connector = aiohttp.TCPConnector(limit=concurrency * 2, keepalive_timeout=3)
    chunks = {n: 0 for n in bases}
    wall = {n: 0.0 for n in bases}
    cpu = {n: 0.0 for n in bases}
    async with aiohttp.ClientSession(connector=connector, headers=headers,
                                     timeout=aiohttp.ClientTimeout(total=600)) as session:
        for base in bases.values():  # warm-up
            await asyncio.gather(*(one_stream(session, base, model, 16) for _ in range(concurrency)))
        per_round = max(concurrency, streams // rounds)
        for _ in range(rounds):
            for name, base in bases.items():
                queue = list(range(per_round))

                async def worker(queue: list[int] = queue, base: str = base) -> int:
                    got = 0
                    while queue:
                        queue.pop()
                        got += await one_stream(session, base, model, tokens)
                    return got

                cpu0 = process_cpu_s(pids[name]) if name in pids else 0.0
                t0 = time.perf_counter()
                chunks[name] += sum(await asyncio.gather(*(worker() for _ in range(concurrency))))
                wall[name] += time.perf_counter() - t0
                if name in pids:
                    cpu[name] += process_cpu_s(pids[name]) - cpu0
    out = {}
    for name in bases:
        out[name] = {"streams": per_round * rounds, "chunks": chunks[name], "chunks_per_s": chunks[name] / wall[name]}
        if name in pids:
            out[name]["cpu_us_per_chunk"] = cpu[name] / chunks[name] * 1e6
    return out


def added(results: dict[str, dict]) -> dict[str, dict]:
    direct = results["direct"]
    table = {}
    for name, r in results.items():
        if name == "direct":
            continue
        table[name] = {
            "added_c1_p50_ms": r["c1_p50_ms"] - direct["c1_p50_ms"],
            "added_c1_p99_ms": r["c1_p99_ms"] - direct["c1_p99_ms"],
            "added_c32_p50_ms": r["c32_p50_ms"] - direct["c32_p50_ms"],
            "added_c32_p99_ms": r["c32_p99_ms"] - direct["c32_p99_ms"],
            "added_ttft_p50_ms": r["ttft_p50_ms"] - direct["ttft_p50_ms"],
            "throughput_vs_direct_c32": r["c32_throughput_rps"] / direct["c32_throughput_rps"],
        }
    return table


def markdown(results: dict[str, dict], table: dict[str, dict]) -> str:
    rows = [
        ("added latency p50, c=1 (ms)", "added_c1_p50_ms", "{:+.2f}"),
        ("added latency p99, c=1 (ms)", "added_c1_p99_ms", "{:+.2f}"),
        ("added latency p50, c=32 (ms)", "added_c32_p50_ms", "{:+.2f}"),
        ("added latency p99, c=32 (ms)", "added_c32_p99_ms", "{:+.2f}"),
        ("added TTFT p50, streaming, c=1 (ms)", "added_ttft_p50_ms", "{:+.2f}"),
        ("throughput vs direct, c=32", "throughput_vs_direct_c32", "{:.2f}x"),
    ]
    names = [n for n in table if n != "direct, asking ids+logprobs" and not n.startswith("_")] + (
        ["direct, asking ids+logprobs"] if "direct, asking ids+logprobs" in table else [])
    lines = ["| metric | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    for label, key, fmt in rows:
        lines.append(f"| {label} | " + " | ".join(fmt.format(table[n][key]) for n in names) + " |")
    direct = results["direct (phase 1)"]
    lines.append(f"\ndirect baseline (phase 1): p50 {direct['c1_p50_ms']:.2f} ms at c=1, p50 {direct['c32_p50_ms']:.2f} ms at "
                 f"c=32, {direct['c32_throughput_rps']:.0f} calls/s at c=32, TTFT p50 {direct['ttft_p50_ms']:.2f} ms")
    ours = table.get("rollout-dataset proxy", {})
    if "proxy_only_c1_p50_ms" in ours:
        lines.append(f"the proxy alone, against direct calls asking the same ids+logprobs: "
                     f"{ours['proxy_only_c1_p50_ms']:+.2f} ms p50 at c=1, {ours['proxy_only_ttft_p50_ms']:+.2f} ms TTFT, "
                     f"{ours['throughput_vs_direct_asking_ids_c32']:.2f}x throughput at c=32")
    per_call = {n: r["c32_cpu_ms_per_call"] for n, r in results.items() if "c32_cpu_ms_per_call" in r}
    if per_call:
        lines.append("CPU per non-streamed call at c=32 (the proxy's processes): "
                     + ", ".join(f"{n} {ms:.3f} ms" for n, ms in per_call.items()))
    streaming = results.get("_streaming")
    if streaming:
        lines.append("\n| streaming, c=32 | chunks/s | proxy CPU µs per chunk |\n| --- | --- | --- |")
        for name, figures in streaming.items():
            cpu = figures.get("cpu_us_per_chunk")
            lines.append(f"| {name} | {figures['chunks_per_s']:.0f} | " + (f"{cpu:.1f}" if cpu is not None else "—")
                         + " |")
    chunk_cpu = {n: f["cpu_us_per_chunk"] for n, f in (streaming or {}).items() if "cpu_us_per_chunk" in f}
    for over, under in (("rollout-dataset proxy", FLOOR), (LEAST, FLOOR), ("rollout-dataset proxy", LEAST)):
        if over in per_call and under in per_call:
            line = f"{over} over {under}: {per_call[over] / per_call[under]:.2f}x its CPU per call"
            if over in chunk_cpu and under in chunk_cpu:
                line += f", {chunk_cpu[over] / chunk_cpu[under]:.2f}x its CPU per streamed chunk"
            lines.append(line)
    ratio = ours.get("litellm_added_p50_ratio")
    if ratio:
        lines.append(f"LiteLLM adds {ratio:.1f}x the latency the recording proxy adds (p50, c=1).")
    lines.append("\n| goal | this run | at most | met |\n| --- | --- | --- | --- |")
    for goal in goals(per_call, chunk_cpu, table):
        figure = "—" if goal["ratio"] is None else f"{goal['ratio']:.2f}x"
        met = {None: "not measured", True: "yes", False: "NO"}[goal["met"]]
        lines.append(f"| {goal['goal']} | {figure} | {goal['at_most']:.2f}x | {met} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", help="an already running OpenAI-compatible server (.../v1); default: start "
                                           "the local backend")
    parser.add_argument("--model", default=None, help="model name (default: the server's first model)")
    parser.add_argument("--calls", type=int, default=300, help="calls per target at concurrency 1")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--c32-calls", type=int, default=4608,
                        help="calls per target at concurrency 32 (latency, throughput and CPU per call)")
    parser.add_argument("--skip-litellm", action="store_true")
    parser.add_argument("--skip-peers", action="store_true",
                        help="leave out rLLM's gateway and Agent Lightning's proxy (each installed into a venv of its own)")
    parser.add_argument("--also", action="append", default=[], metavar="NAME=URL",
                        help="measure another OpenAI-compatible base URL too (e.g. a bare pass-through proxy)")
    parser.add_argument("--streams", type=int, default=256, help="streams per target in the streaming phase")
    parser.add_argument("--stream-tokens", type=int, default=256, help="tokens (chunks) per stream")
    parser.add_argument("--workers", type=int, default=2, help="workers of the multi-worker proxy target")
    parser.add_argument("--baseline", metavar="DIR", default=None,
                        help="a checkout of another version (e.g. `git worktree add /tmp/main main`): its proxy (one worker, and --workers) is "
                             "measured side by side with this one in every phase (c=32 ratio, CPU per chunk)")
    parser.add_argument("--no-floor", action="store_true",
                        help="leave out the pass-through floor (bench/passthrough_floor.py: the proxy's server and "
                             "upstream client forwarding bytes, recording nothing) and the least recording")
    parser.add_argument("--quick", action="store_true", help="fewer calls and streams: a rough figure in a minute")
    parser.add_argument("--out", default=None, help="where to save the figures (default bench/results/"
                                                    "proxy_overhead.json, or proxy_overhead_quick.json with --quick)")
    args = parser.parse_args()
    if args.quick:
        args.calls, args.streams, args.c32_calls = min(args.calls, 60), min(args.streams, 64), min(args.c32_calls, 256)
    args.out = args.out or str(RESULTS.with_name("proxy_overhead_quick.json") if args.quick else RESULTS)

    procs: list[subprocess.Popen] = []
    workdir = tempfile.mkdtemp(prefix="proxy-bench-")
    try:
        if args.upstream:
            upstream = args.upstream.rstrip("/")
        else:
            port = free_port()
            procs.append(start_backend(port))
            upstream = f"http://127.0.0.1:{port}/v1"
        model = args.model or httpx.get(upstream + "/models", timeout=10).json()["data"][0]["id"]
        bases = {"direct": upstream, "direct, asking ids+logprobs": upstream + CAPTURE}
        proxy_pids: dict[str, int] = {}  # the targets whose CPU is measured, and streamed through

        def target(name: str, started: tuple[subprocess.Popen, str]) -> None:
            procs.append(started[0])
            bases[name] = started[1]
            proxy_pids[name] = started[0].pid

        multi = f"rollout-dataset proxy, {args.workers} workers"
        target("rollout-dataset proxy", start_proxy(upstream, os.path.join(workdir, "traces")))
        target(multi, start_proxy(upstream, os.path.join(workdir, "traces-workers"), args.workers))
        if not args.no_floor:  # what moving the bytes costs on this stack: the proxy's cost above it is recording's
            target(FLOOR, start_floor(upstream))
            target(LEAST, start_floor(upstream, least_recording=True))  # and the least any recording adds to it
        if args.baseline:  # another version's proxy, side by side in every phase
            target("baseline proxy", start_proxy(upstream, os.path.join(workdir, "traces-baseline"),
                                                 source=args.baseline))
            target(f"baseline proxy, {args.workers} workers",
                   start_proxy(upstream, os.path.join(workdir, "traces-baseline-workers"), args.workers,
                               source=args.baseline))
        if not args.skip_peers:  # a recording peer, measured interleaved with the proxy
            target(RLLM, start_rllm_gateway(upstream, workdir))
        for extra in args.also:
            name, _, url = extra.partition("=")
            bases[name] = url.rstrip("/")
        # Phase 1: direct vs the recording proxy (and --also targets). Phase 2, with LiteLLM started
        # only then (its idle background work would otherwise tax phase 1): direct vs LiteLLM.
        # Each phase interleaves its own direct baseline; "added" is relative to that baseline.
        phases = [asyncio.run(measure(bases, model, args.calls, args.max_tokens, pids=proxy_pids,
                                      c32_calls=args.c32_calls))]
        stream_bases = {"direct": upstream, **{name: bases[name] for name in proxy_pids}}
        streaming = asyncio.run(measure_streams(stream_bases, proxy_pids, model, args.streams, args.stream_tokens))
        # The LiteLLM-based peers, each in a phase of its own, started only then, and stopped after it
        own_phases = [] if args.skip_peers else [(AGL, lambda: start_agent_lightning(upstream, model))]
        if not args.skip_litellm:
            own_phases.append((LITELLM, lambda: start_litellm(upstream, model, workdir)))
        for name, start in own_phases:
            peer_proc, peer_base = start()
            procs.append(peer_proc)
            phases.append(asyncio.run(measure({"direct": upstream, name: peer_base}, model, args.calls,
                                              args.max_tokens, pids={name: peer_proc.pid}, c32_calls=args.c32_calls)))
            # they stream far slower: a quarter of the streams, measured against direct again
            streaming.update(asyncio.run(measure_streams(
                {f"direct ({name} phase)": upstream, name: peer_base}, {name: peer_proc.pid},
                model, max(32, args.streams // 4), args.stream_tokens)))
            stop(peer_proc)
        table: dict[str, dict] = {}
        results: dict[str, dict] = {}
        for number, phase in enumerate(phases, start=1):
            table.update(added(phase))
            for name, figures in phase.items():
                results[name if name != "direct" else f"direct (phase {number})"] = figures
        ours, capture = table["rollout-dataset proxy"], results["direct, asking ids+logprobs"]
        ours["proxy_only_c1_p50_ms"] = results["rollout-dataset proxy"]["c1_p50_ms"] - capture["c1_p50_ms"]
        ours["proxy_only_ttft_p50_ms"] = results["rollout-dataset proxy"]["ttft_p50_ms"] - capture["ttft_p50_ms"]
        ours["throughput_vs_direct_asking_ids_c32"] = (results["rollout-dataset proxy"]["c32_throughput_rps"]
                                                       / capture["c32_throughput_rps"])
        if LITELLM in table:
            ours, theirs = table["rollout-dataset proxy"], table[LITELLM]
            table["rollout-dataset proxy"]["litellm_added_p50_ratio"] = (
                theirs["added_c1_p50_ms"] / ours["added_c1_p50_ms"] if ours["added_c1_p50_ms"] > 0 else None)
        results["_streaming"] = streaming
        trace_files = list(Path(workdir, "traces").glob("*.jsonl")) + list(Path(workdir, "traces-workers").glob("*.jsonl"))
        recorded = sum(sum(1 for _ in open(f)) for f in trace_files)
        doc = {
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "upstream": "local backend" if not args.upstream else redact_url(args.upstream),  # never its credentials
            "model": model, "max_tokens": args.max_tokens, "calls_c1": args.calls, "quick": args.quick,
            "load_average_at_end": os.getloadavg(), "stream_tokens": args.stream_tokens,
            "targets": {k: v for k, v in results.items() if k != "_streaming"}, "added": table,
            "streaming_c32": streaming, "proxy_records_written": recorded,
            "goals": goals({n: r["c32_cpu_ms_per_call"] for n, r in results.items() if "c32_cpu_ms_per_call" in r},
                           {n: f["cpu_us_per_chunk"] for n, f in streaming.items() if "cpu_us_per_chunk" in f}, table),
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
        print(markdown(results, table))
        print(f"\nsaved {args.out}")
    finally:
        for proc in reversed(procs):
            stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def run() -> int:
    """`main`, with a target's failed answer named in one line (a peer's 500 is the peer's, not a crash)."""
    try:
        return main()
    except aiohttp.ClientResponseError as exc:
        print(f"proxy_overhead: {exc.request_info.real_url} answered {exc.status} {exc.message}; the run stopped "
              "there (rLLM's gateway answers 500 when its upstream connection resets: run again, or --skip-peers)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(run())
