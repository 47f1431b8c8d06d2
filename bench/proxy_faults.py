"""Load under faults: every call leaves exactly one readable record, and the proxy's memory stays flat.

Runs, on loopback, three processes:
  * a faulty model server (this script with ``--role upstream``, aiohttp): answers OpenAI chat
    calls, streamed or not, and fails on purpose when the request's ``model`` says so;
  * the recording proxy (`rollout-dataset proxy`, its own process) under a small descriptor limit
    (``RLIMIT_NOFILE``, default 128) with more sessions than descriptors, so trace files must go
    through its bounded cache of open handles;
  * this client: ``--calls`` calls (default 5,000) at concurrency ``--concurrency`` (48) over
    ``--sessions`` sessions (200), of which 5% get an upstream 500, 2% a stream the upstream cuts
    mid-way, 1% a malformed answer (wrong types, invalid JSON, 1,000-deep nesting, a lone
    surrogate; rotated) and 1% a client that disconnects mid-stream; the rest are normal, half
    of them streamed.
Then stops the proxy, reads every trace file with `read_trace` (chain checked) and prints and saves
(bench/results/proxy_faults.json): calls made, records, unparseable files, calls answered with
record_write_failed, streams that ended without a terminating event, and the proxy's RSS sampled
every 0.5 s (first, peak, last, and the slope over the second half of the run).

    .venv/bin/python bench/proxy_faults.py [--calls 5000] [--concurrency 48] [--nofile 128] [--workers 1] [--on-policy]
        [--upstream-host 127.0.0.1] [--seed 0]

With ``--workers N`` the proxy serves from N worker processes (each under the descriptor limit); the
RSS figures are then the parent's only. With ``--on-policy`` the proxy runs in on-policy mode, and the
figures add each record's continuity (status:reason; ``proxy_error`` where the mode itself failed).
With ``--upstream-host localhost`` the proxy is given the upstream by host name, which it must look up
for every new upstream connection while descriptors run out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "proxy_faults.json"
MESSAGES = [{"role": "user", "content": "Say hello."}]
OUT_OF_DESCRIPTORS = "out of file descriptors"  # the start of the proxy's warning (proxy.descriptors)
MALFORMED = ["index_list", "choices_dict", "wrong_ids", "invalid_json", "deep", "surrogate"]
CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None, "token_ids": [7]}]}
FULL = {"id": "x", "object": "chat.completion", "created": 1, "model": "m", "prompt_token_ids": [1, 2, 3],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop",
                     "token_ids": [7, 8], "logprobs": None}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
MALFORMED_BODIES = {
    "index_list": json.dumps({**FULL, "choices": [{**FULL["choices"][0], "index": [0]}, FULL["choices"][0]]}),
    "choices_dict": json.dumps({**FULL, "choices": {"0": {"message": "x"}}, "usage": []}),
    "wrong_ids": json.dumps({**FULL, "id": 7, "prompt_token_ids": ["a", 1],
                             "choices": [{"index": 0, "message": {"content": 5}, "token_ids": [1, "x"]}]}),
    "invalid_json": '{"id": "x", "choices": [',
    "deep": "[" * 1000 + "]" * 1000,
    "surrogate": json.dumps({**FULL, "choices": [{**FULL["choices"][0],
                                                  "message": {"role": "assistant", "content": "a\udcffb"}}]}),
}


# ---- the faulty model server ------------------------------------------------------------------

async def _chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    mode = body.get("model", "ok")
    if mode == "fail500":
        return web.json_response({"error": {"message": "engine dead", "type": "InternalServerError", "code": 500}},
                                 status=500)
    if mode in MALFORMED_BODIES:
        return web.Response(text=MALFORMED_BODIES[mode], content_type="application/json")
    if not body.get("stream"):
        return web.json_response(FULL)
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    for i in range(4):
        await resp.write(f"data: {json.dumps(CHUNK)}\n\n".encode())
        if mode == "drop" and i == 1:
            request.transport.close()  # cut mid-stream, no terminating chunk
            return resp
        await asyncio.sleep(0.05 if mode == "slowstream" else 0)
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


def serve_upstream(port: int) -> None:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", _chat)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# ---- the run ------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def plan(calls: int, seed: int) -> list[str]:
    """The fault of each call: exact shares, shuffled."""
    shares = {"fail500": 0.05, "drop": 0.02, "malformed": 0.01, "disconnect": 0.01}
    kinds: list[str] = []
    for kind, share in shares.items():
        kinds += [kind] * round(calls * share)
    kinds += ["ok"] * (calls - len(kinds))
    random.Random(seed).shuffle(kinds)
    return kinds


async def one_call(session: aiohttp.ClientSession, base: str, n: int, kind: str, stats: Counter) -> bool:
    """Make one call; returns whether the harness got a successful (2xx) answer."""
    stream = kind in ("drop", "disconnect") or (kind == "ok" and n % 2 == 0)
    model = {"ok": "ok", "fail500": "fail500", "drop": "drop", "disconnect": "slowstream",
             "malformed": MALFORMED[n % len(MALFORMED)]}[kind]
    body = {"model": model, "messages": MESSAGES, "stream": stream}
    try:
        async with session.post(base + "/chat/completions", json=body) as resp:
            if kind == "disconnect":
                await resp.content.readany()
                resp.close()  # the harness goes away mid-stream
                stats["client_disconnects"] += 1
                return False
            data = await resp.read()
            stats[f"status_{resp.status}"] += 1
            if b"record_write_failed" in data:
                stats["record_write_failed"] += 1
            if stream and resp.status == 200:
                events = [line for line in data.decode("utf-8", "replace").splitlines() if line.startswith("data: ")]
                if not events or not (events[-1] == "data: [DONE]" or '"error"' in events[-1]):
                    stats["streams_without_terminating_event"] += 1
                return events[-1] == "data: [DONE]" if events else False
            return 200 <= resp.status < 300
    except aiohttp.ClientError as exc:
        stats[f"client_error_{type(exc).__name__}"] += 1
    return False


async def drive(base: str, kinds: list[str], sessions: int, concurrency: int, pid: int,
                samples: list[tuple[float, int]]) -> tuple[Counter, Counter, Counter, float]:
    stats: Counter = Counter()
    per_session: Counter = Counter()
    successes: Counter = Counter()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(len(kinds)):
        queue.put_nowait(n)
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    t0 = time.monotonic()

    async def sampler() -> None:
        while True:
            value = rss_kib(pid)
            if value is not None:
                samples.append((round(time.monotonic() - t0, 2), value))
            await asyncio.sleep(0.5)

    async def worker() -> None:
        async with aiohttp.ClientSession(connector=connector, connector_owner=False,
                                         timeout=aiohttp.ClientTimeout(total=60)) as http:
            while True:
                try:
                    n = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                session = f"s{n % sessions}"
                per_session[session] += 1
                if await one_call(http, base.replace("/v1", f"/sessions/{session}/v1"), n, kinds[n], stats):
                    successes[session] += 1

    sampling = asyncio.ensure_future(sampler())
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.monotonic() - t0
    sampling.cancel()
    await connector.close()
    return stats, per_session, successes, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", default="bench", choices=["bench", "upstream"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=48)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--nofile", type=int, default=128, help="RLIMIT_NOFILE of the proxy process")
    parser.add_argument("--max-open-files", type=int, default=16, help="the proxy's trace-handle cache")
    parser.add_argument("--workers", type=int, default=1, help="the proxy's worker processes")
    parser.add_argument("--on-policy", action="store_true",
                        help="run the proxy with --on-policy (each call first reads others' records in its file)")
    parser.add_argument("--upstream-host", default="127.0.0.1",
                        help="how the proxy names the upstream (e.g. localhost: a host name it must look up)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS), help="where to save the figures")
    args = parser.parse_args()
    if args.role == "upstream":
        serve_upstream(args.port)
        return 0

    sys.path.insert(0, str(ROOT))
    from rollout_dataset.errors import SchemaValidationError, TraceIntegrityError
    from rollout_dataset.proxy import read_trace

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, __file__, "--role", "upstream", "--port", str(up_port)], env=env,
                                stderr=subprocess.DEVNULL)  # it logs every cut it makes on purpose
    trace_dir = Path(tempfile.mkdtemp(prefix="proxy-faults-"))

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, args.nofile))

    proxy = subprocess.Popen([sys.executable, "-m", "rollout_dataset.cli", "proxy", "--upstream",
                              f"http://{args.upstream_host}:{up_port}/v1", "--trace-dir", str(trace_dir), "--upstream-timeout",
                              "30", "--max-open-files", str(args.max_open_files), "--workers", str(args.workers)]
                             + (["--on-policy"] if args.on_policy else []),
                             env=env, stdout=subprocess.PIPE, stderr=open(trace_dir.with_suffix(".log"), "w"),
                             text=True, preexec_fn=limit)
    try:
        base = proxy.stdout.readline().strip()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait for the upstream to listen
            try:
                socket.create_connection(("127.0.0.1", up_port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        kinds = plan(args.calls, args.seed)
        samples: list[tuple[float, int]] = []
        stats, per_session, successes, elapsed = asyncio.run(drive(base, kinds, args.sessions, args.concurrency, proxy.pid,
                                                        samples))
        time.sleep(0.5)  # let the proxy finish recording the disconnected calls
    finally:
        proxy.send_signal(signal.SIGINT)
        try:
            proxy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proxy.kill()
        upstream.terminate()
        upstream.wait(timeout=10)

    records = 0
    unparseable: list[str] = []
    mismatched = 0
    unrecorded_successes = 0
    errors: Counter = Counter()
    continuity: Counter = Counter()  # on-policy mode: status:reason of every record
    for session, made in per_session.items():
        path = trace_dir / f"{session}.jsonl"
        if not path.exists():
            unrecorded_successes += successes[session]
            continue
        try:
            found = read_trace(path)
        except (OSError, SchemaValidationError, TraceIntegrityError) as exc:
            unparseable.append(f"{path.name}: {exc}"[:300])
            continue
        unrecorded_successes += max(0, successes[session] - sum(1 for r in found if r.get("error") is None))
        records += len(found)
        mismatched += len(found) != made
        for record in found:
            errors[(record.get("error") or {}).get("kind", "none")] += 1
            if "continuity" in record:
                continuity[f"{record['continuity'].get('status')}:{record['continuity'].get('reason')}"] += 1
    values = [kib for _, kib in samples]
    half = samples[len(samples) // 2:]
    slope = 0.0
    if len(half) >= 2:
        xs, ys = [t for t, _ in half], [v for _, v in half]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        var = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0
    result = {
        "calls": args.calls, "concurrency": args.concurrency, "sessions": args.sessions,
        "upstream_host": args.upstream_host, "seed": args.seed,
        "proxy_rlimit_nofile": args.nofile, "proxy_max_open_files": args.max_open_files, "proxy_workers": args.workers,
        "faults": dict(Counter(kinds)), "elapsed_s": round(elapsed, 2), "calls_per_s": round(args.calls / elapsed, 1),
        "records": records, "records_equal_calls": records == args.calls,
        "sessions_with_wrong_count": mismatched, "unparseable_trace_files": len(unparseable),
        "successes": sum(successes.values()), "successes_without_a_record": unrecorded_successes,
        "unparseable_examples": unparseable[:3], "record_error_kinds": dict(errors),
        "on_policy": args.on_policy, "continuity": dict(continuity),
        "out_of_descriptor_warnings": trace_dir.with_suffix(".log").read_text().count(OUT_OF_DESCRIPTORS),
        "client": dict(stats),
        "proxy_rss_kib": {"first": values[0] if values else None, "peak": max(values) if values else None,
                          "last": values[-1] if values else None,
                          "slope_second_half_kib_per_s": round(slope, 1), "samples": samples},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    rss = result["proxy_rss_kib"]
    print(f"calls {args.calls} at concurrency {args.concurrency} over {args.sessions} sessions, proxy "
          f"RLIMIT_NOFILE={args.nofile}, {args.workers} worker(s), {elapsed:.1f} s ({result['calls_per_s']} calls/s)")
    print(f"faults: {dict(Counter(kinds))}")
    print(f"records {records} (== calls: {records == args.calls}), sessions with a wrong count {mismatched}, "
          f"unparseable trace files {len(unparseable)}")
    print(f"successful answers {sum(successes.values())}, of them without a record: {unrecorded_successes}")
    print(f"client saw: {dict(stats)}")
    print(f"record error kinds: {dict(errors)}")
    if args.on_policy:
        print(f"on-policy continuity (status:reason): {dict(continuity)}")
    print(f"proxy warnings 'out of file descriptors': {result['out_of_descriptor_warnings']}")
    print(f"proxy RSS KiB: first {rss['first']}, peak {rss['peak']}, last {rss['last']}, "
          f"slope over the second half {rss['slope_second_half_kib_per_s']} KiB/s")
    print(f"saved {out}")
    return 0 if records == args.calls and not unparseable and not unrecorded_successes else 1


if __name__ == "__main__":
    sys.exit(main())
