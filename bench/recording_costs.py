"""Benchmark: where the recording proxy's CPU goes, stage by stage, on the answers of the local backend.

`bench/proxy_overhead.py` measures the proxy whole, next to the pass-through floor and the least
recording. This script takes the same calls apart: it fetches, once, the answers the proxy sees in
that bench (a non-streamed chat call of 8 tokens and a 256-token stream, both with the token ids
and logprobs the proxy asks for), then times, in this process, each stage the proxy runs on them,
with the proxy's own functions:

  per streamed event: httpx-sse's `EventSource` decoding (the reads as the proxy sees them, one
  event per read), parsing the data (`loads_event`), folding it into the record
  (`StreamAssembler.add`), stripping what the harness did not ask for (`strip_response`), encoding
  and framing what the harness gets (`dumps_event`, `encode_event`);
  per call: parsing the request (`loads`), adding the token fields (`prepare_request`), parsing the
  answer, stripping and re-encoding it, the record's token fields (`token_fields`), and the chained
  trace line (`chained_line`: the encoded line and the digest of its canonical form).

Medians of repeated runs, in microseconds. Prints a table and saves bench/results/recording_costs.json.

    PYTHONPATH=. .venv/bin/python bench/recording_costs.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import EventSource

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_overhead import MESSAGES, free_port, start_backend  # noqa: E402 - the same calls as that bench

from rollout_dataset.proxy.jsoncodec import dumps_event, loads, loads_event  # noqa: E402
from rollout_dataset.proxy.recorder import chained_line  # noqa: E402
from rollout_dataset.proxy.streaming import StreamAssembler  # noqa: E402
from rollout_dataset.proxy.tokens import prepare_request, strip_response, token_fields  # noqa: E402
from rollout_dataset.wire.sse import encode_event  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "recording_costs.json"
STREAM_TOKENS = 256


def fetch(upstream: str) -> tuple[bytes, bytes, bytes]:
    """(the request body, its non-streamed answer, the bytes of a 256-token stream), ids and logprobs asked."""
    request = json.dumps({"model": "local", "messages": MESSAGES, "max_tokens": 8, "temperature": 0}).encode()
    token_req = prepare_request("chat", json.loads(request), request)
    answer = httpx.post(upstream + "/chat/completions", content=token_req.body,
                        headers={"content-type": "application/json"}, timeout=30).content
    stream_body = {"model": "local", "messages": [{"role": "user", "content": " ".join(["hello"] * (STREAM_TOKENS + 16))}],
                   "max_tokens": STREAM_TOKENS, "temperature": 0, "stream": True, "return_token_ids": True,
                   "logprobs": True}
    stream = httpx.post(upstream + "/chat/completions", json=stream_body, timeout=30).content
    return request, answer, stream


def timed(fn: Callable[[], Any], per: int, repeat: int) -> float:
    """Median microseconds of one unit of `fn`'s work (`fn` does `per` units)."""
    fn()
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - start) / per * 1e6)
    return statistics.median(runs)


class _Reads(httpx.Response):
    """A stream whose text arrives one event per read, as the proxy reads a token stream at its pace."""

    def __init__(self, reads: list[str]) -> None:
        super().__init__(200, headers={"content-type": "text/event-stream"})
        self._reads = reads

    async def aiter_text(self, chunk_size: int | None = None) -> AsyncIterator[str]:
        for text in self._reads:
            yield text


def stream_stages(stream: bytes, repeat: int) -> dict[str, float]:
    """Microseconds per streamed event of each stage the proxy runs on it."""
    frames = [part + b"\n\n" for part in stream.split(b"\n\n") if part.strip()]
    reads = [frame.decode() for frame in frames]
    datas = [frame[len(b"data: "):-2].decode() for frame in frames if not frame.startswith(b"data: [DONE]")]
    n = len(datas)
    token_req = prepare_request("chat", {"model": "local", "messages": []}, b"{}")
    chunks = [loads_event(d, digits_checked=True)[0] for d in datas]
    stripped = [strip_response(c, token_req) for c in chunks]
    encoded = [dumps_event(s) for s in stripped]

    async def decode() -> None:
        async for _ in EventSource(_Reads(reads)).aiter_sse():
            pass

    loop = asyncio.new_event_loop()

    def fold() -> None:
        assembler = StreamAssembler("chat")
        for chunk in chunks:
            assembler.add(chunk)
        assembler.response()

    figures = {
        "decode (httpx-sse EventSource)": timed(lambda: loop.run_until_complete(decode()), len(reads), repeat),
        "parse (loads_event)": timed(lambda: [loads_event(d, digits_checked=True) for d in datas], n, repeat),
        "fold into the record (StreamAssembler)": timed(fold, n, repeat),
        "strip (strip_response)": timed(lambda: [strip_response(c, token_req) for c in chunks], n, repeat),
        "encode (dumps_event)": timed(lambda: [dumps_event(s) for s in stripped], n, repeat),
        "frame (encode_event)": timed(lambda: [encode_event(e) for e in encoded], n, repeat),
    }
    loop.close()
    return figures


def call_stages(request: bytes, answer: bytes, repeat: int, per: int = 2000) -> dict[str, float]:
    """Microseconds per non-streamed call of each stage the proxy runs on it."""
    parsed_request = loads(request)[0]
    token_req = prepare_request("chat", parsed_request, request)
    parsed_answer = loads(answer)[0]
    fields = token_fields(parsed_answer, "chat")
    record = {"schema_version": 1, "index": 0, "call_id": "c" * 32, "session": "bench", "request": parsed_request,
              "response": parsed_answer, "upstream_changes": token_req.changes, **fields, "notes": [], "error": None}
    raw = {"request": request, "response": answer}

    def each(fn: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(per):
                fn()  # the result dropped at once, as the proxy drops what it no longer needs
        return run

    return {
        "parse the request (loads)": timed(each(lambda: loads(request)), per, repeat),
        "add the token fields (prepare_request)": timed(each(lambda: prepare_request("chat", parsed_request, request)),
                                                         per, repeat),
        "parse the answer (loads)": timed(each(lambda: loads(answer)), per, repeat),
        "strip and re-encode it (strip_response, dumps_event)": timed(
            each(lambda: dumps_event(strip_response(parsed_answer, token_req))), per, repeat),
        "token fields (token_fields)": timed(each(lambda: token_fields(parsed_answer, "chat")), per, repeat),
        "the chained trace line (chained_line)": timed(
            each(lambda: chained_line(dict(record), raw, False, "0" * 64, [])), per, repeat),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15, help="timed runs per stage (the median is kept)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    port = free_port()
    backend = start_backend(port)
    try:
        request, answer, stream = fetch(f"http://127.0.0.1:{port}/v1")
    finally:
        backend.terminate()
        backend.wait(timeout=15)
    per_event = stream_stages(stream, args.repeat)
    per_call = call_stages(request, answer, args.repeat)
    lines = ["| per streamed event | µs |", "| --- | --- |"]
    lines += [f"| {name} | {us:.2f} |" for name, us in per_event.items()]
    lines.append(f"| all of them | {sum(per_event.values()):.2f} |")
    lines += ["", "| per non-streamed call | µs |", "| --- | --- |"]
    lines += [f"| {name} | {us:.1f} |" for name, us in per_call.items()]
    lines.append(f"| all of them | {sum(per_call.values()):.1f} |")
    print("\n".join(lines))
    doc = {"created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"python": platform.python_version(), "platform": platform.platform()},
           "stream_tokens": STREAM_TOKENS, "us_per_streamed_event": per_event, "us_per_call": per_call}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nsaved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
