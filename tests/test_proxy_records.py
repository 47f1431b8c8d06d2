"""Records: exactly one per generation call whatever the upstream answers, durable before success,
tamper-evident (hash chain + seal), repaired after a crash, and a bounded proxy."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from proxy_fakes import FakeVLLM, FaultyUpstream, serve
from rollout_dataset.errors import TraceIntegrityError
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.schema import schema_errors
from rollout_dataset.schema.check import validate_path
from rollout_dataset.trace_integrity import TraceSeal, record_digest

MESSAGES = [{"role": "user", "content": "hi"}]


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


async def _three_calls(tmp_path: Path) -> tuple[Path, TraceSeal]:
    fake = FakeVLLM()
    async with serve(fake.app) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "t") as proxy:
            async with httpx.AsyncClient(timeout=10) as client:
                for _ in range(3):
                    r = await client.post(proxy.session_base_url("s") + "/chat/completions",
                                          json={"model": "ok", "messages": MESSAGES})
                    assert r.status_code == 200
            return proxy.trace_path("s"), proxy.seal("s")


# ---- tamper evidence -------------------------------------------------------------------------

async def test_each_record_carries_the_digest_of_the_one_before(tmp_path: Path):
    path, seal = await _three_calls(tmp_path)
    records = read_trace(path, seal=seal)
    assert records[0]["prev_sha256"] is None
    assert [r["prev_sha256"] for r in records[1:]] == [record_digest(r) for r in records[:-1]]
    assert seal == TraceSeal(3, record_digest(records[-1]))


@pytest.mark.parametrize("tamper, position", [
    (lambda lines: [lines[0], lines[2]], 1),                       # a record deleted
    (lambda lines: [lines[1], lines[0], lines[2]], 0),             # reordered
    (lambda lines: [lines[0], lines[1].replace(b'"hi"', b'"ho"'), lines[2]], 2),  # edited
])
async def test_read_trace_names_the_file_and_record_where_the_chain_breaks(tmp_path: Path, tamper, position):
    path, _ = await _three_calls(tmp_path)
    path.write_bytes(b"".join(tamper(_lines(path))))
    with pytest.raises(TraceIntegrityError) as info:
        read_trace(path)
    assert info.value.file == str(path) and info.value.index == position and str(path) in str(info.value)


async def test_a_cut_tail_or_an_edited_last_record_is_caught_against_the_proxys_seal(tmp_path: Path):
    path, seal = await _three_calls(tmp_path)
    lines = _lines(path)
    path.write_bytes(b"".join(lines[:2]))
    assert len(read_trace(path)) == 2  # the chain alone cannot see a cut tail
    with pytest.raises(TraceIntegrityError, match="wrote 3 record"):
        read_trace(path, seal=seal)
    path.write_bytes(b"".join(lines[:2]) + lines[2].replace(b'"hi"', b'"ho"'))
    with pytest.raises(TraceIntegrityError, match="edited"):
        read_trace(path, seal=seal)


async def test_validate_reports_a_call_removed_from_a_sealed_trace_json(tmp_path: Path):
    path, seal = await _three_calls(tmp_path)
    records = read_trace(path, seal=seal)
    doc = tmp_path / "trace.json"
    doc.write_text(json.dumps({"schema_version": 1, "session": "s", "seal": seal.to_dict(), "calls": records}))
    assert validate_path(doc) == []
    doc.write_text(json.dumps({"schema_version": 1, "session": "s", "seal": seal.to_dict(), "calls": records[:2]}))
    failures = validate_path(doc)
    assert failures and "trace integrity" in failures[0][2] and "wrote 3 record" in failures[0][2]
    doc.write_text(json.dumps({"schema_version": 1, "session": "s", "calls": [records[0], records[2]]}))
    assert any(p == "$.calls[1]" and "trace integrity" in r for _, p, r in validate_path(doc))


# ---- crash and restart -------------------------------------------------------------------------

def _start_proxy_process(upstream: str, trace_dir: Path, limit_file_bytes: int | None = None) -> tuple[subprocess.Popen, str]:
    def limits() -> None:
        if limit_file_bytes is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_bytes, limit_file_bytes))

    proc = subprocess.Popen([sys.executable, "-m", "rollout_dataset.cli", "proxy", "--upstream", upstream,
                             "--trace-dir", str(trace_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=limits)
    return proc, proc.stdout.readline().strip()


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=20)


async def test_a_restarted_proxy_moves_a_cut_last_line_aside_and_continues_index_and_chain(tmp_path: Path):
    fake = FakeVLLM()
    trace_dir = tmp_path / "t"
    async with serve(fake.app) as root, httpx.AsyncClient(timeout=10) as client:
        proc, base = _start_proxy_process(root, trace_dir)
        try:
            for _ in range(2):
                assert (await client.post(base.replace("/v1", "/sessions/s/v1") + "/chat/completions",
                                          json={"model": "ok", "messages": MESSAGES})).status_code == 200
        finally:
            _kill(proc)  # kill -9, then the line a crash cuts in the middle of its write
        path = trace_dir / "s.jsonl"
        whole = _lines(path)
        path.write_bytes(b"".join(whole) + whole[-1][: len(whole[-1]) // 2])
        proc, base = _start_proxy_process(root, trace_dir)
        try:
            assert (await client.post(base.replace("/v1", "/sessions/s/v1") + "/chat/completions",
                                      json={"model": "ok", "messages": MESSAGES})).status_code == 200
        finally:
            _kill(proc)
    records = read_trace(path)
    assert [r["index"] for r in records] == [0, 1, 2]
    assert records[2]["prev_sha256"] == record_digest(records[1])
    assert any("s.jsonl.cut-1" in note for note in records[2]["notes"])
    assert (trace_dir / "s.jsonl.cut-1").read_bytes() == whole[-1][: len(whole[-1]) // 2]


# ---- durability before success --------------------------------------------------------------

async def test_a_record_that_cannot_be_written_fails_the_call_loudly_and_leaves_whole_lines(tmp_path: Path):
    fake = FakeVLLM()
    trace_dir = tmp_path / "t"
    async with serve(fake.app) as root, httpx.AsyncClient(timeout=10) as client:
        proc, base = _start_proxy_process(root, trace_dir, limit_file_bytes=6000)  # room for about one record
        try:
            url = base + "/chat/completions"
            statuses, answers = [], []
            for _ in range(3):
                r = await client.post(url, json={"model": "ok", "messages": MESSAGES})
                statuses.append(r.status_code)
                answers.append(r.json())
            stream = await client.post(url, json={"model": "ok", "messages": MESSAGES, "stream": True})
        finally:
            _kill(proc)
    assert statuses[0] == 200 and statuses[-1] == 500
    error = answers[-1]["error"]
    assert error["type"] == "record_write_failed" and "File too large" in error["message"]
    assert "default.jsonl" in error["message"]
    events = [line for line in stream.text.splitlines() if line.startswith("data: ")]
    assert "record_write_failed" in events[-1] and "[DONE]" not in stream.text
    records = read_trace(trace_dir / "default.jsonl")  # whole lines only: the cut one was taken back
    assert len(records) == statuses.count(200)


async def test_trace_files_go_through_a_bounded_cache_of_open_handles(tmp_path: Path):
    fake = FakeVLLM()
    trace_dir = tmp_path / "t"

    def open_trace_files() -> int:
        fds = Path("/proc/self/fd")
        return sum(1 for fd in fds.iterdir() if str(trace_dir) in os.path.realpath(fd) if fd.exists())

    async with serve(fake.app) as root:
        async with CaptureProxy(upstream=root, trace_dir=trace_dir, max_open_files=2) as proxy:
            async with httpx.AsyncClient(timeout=10) as client:
                peak = 0
                for n in range(6):
                    r = await client.post(proxy.session_base_url(f"s{n % 3}") + "/chat/completions",
                                          json={"model": "ok", "messages": MESSAGES})
                    assert r.status_code == 200
                    peak = max(peak, open_trace_files())
    assert peak <= 2
    for n in range(3):
        assert len(read_trace(trace_dir / f"s{n}.jsonl")) == 2


# ---- one record, whatever the upstream answers ------------------------------------------------

@pytest.fixture
async def faulty(tmp_path: Path):
    async with serve(FaultyUpstream()) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "t", upstream_timeout=5) as proxy:
            async with httpx.AsyncClient(timeout=10) as client:
                yield proxy, client


def _one_valid_record(proxy: CaptureProxy) -> dict:
    records = read_trace(proxy.trace_path(), seal=proxy.seal())
    assert len(records) == 1
    assert schema_errors(records[0], "trace_record") == []
    return records[0]


@pytest.mark.parametrize("mode", ["index_list", "choices_dict", "wrong_ids", "invalid_json", "deep", "surrogate",
                                  "fail500", "chunked"])
async def test_a_malformed_answer_reaches_the_harness_as_it_came_and_leaves_one_record(faulty, mode):
    proxy, client = faulty
    r = await client.post(proxy.base_url + "/chat/completions", json={"model": mode, "messages": MESSAGES})
    assert r.status_code == (500 if mode == "fail500" else 200)
    record = _one_valid_record(proxy)
    assert record["status"] == r.status_code
    if mode in ("invalid_json", "deep"):
        assert isinstance(record["response"], str) and record["response"][:5] in r.text  # kept as text
    if mode == "surrogate":
        assert record["response"]["choices"][0]["message"]["content"] == "a\udcffb"
    if mode == "chunked":
        assert record["response"]["choices"][0]["message"]["content"] == "ok" == r.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("mode, last", [("index_list", "[DONE]"), ("invalid_json", "[DONE]"), ("ok", "[DONE]"),
                                        ("surrogate", "[DONE]"),
                                        ("drop", "upstream_disconnect")])
async def test_a_malformed_stream_is_forwarded_ends_with_a_terminating_event_and_leaves_one_record(faulty, mode, last):
    proxy, client = faulty
    r = await client.post(proxy.base_url + "/chat/completions",
                          json={"model": mode, "messages": MESSAGES, "stream": True})
    events = [line for line in r.text.splitlines() if line.startswith("data: ")]
    assert last in events[-1]
    record = _one_valid_record(proxy)
    assert record["stream"] is True and record["response"] is not None


async def test_a_request_nested_a_thousand_deep_gets_a_400_and_one_record_with_its_bytes(faulty):
    proxy, client = faulty
    deep = '{"model":"ok","messages":' + "[" * 1000 + "]" * 1000 + "}"
    r = await client.post(proxy.base_url + "/chat/completions", content=deep,
                          headers={"content-type": "application/json"})
    assert r.status_code == 400 and "nested too deep" in r.json()["error"]["message"]
    record = _one_valid_record(proxy)
    assert record["request"] == deep


async def test_a_request_nested_300_deep_is_forwarded_and_recorded_as_text(faulty):
    proxy, client = faulty
    body = '{"model":"ok","messages":[{"role":"user","content":"x"}],"extra":' + "[" * 300 + "]" * 300 + "}"
    r = await client.post(proxy.base_url + "/chat/completions", content=body,
                          headers={"content-type": "application/json"})
    assert r.status_code == 200
    record = _one_valid_record(proxy)
    assert record["request"] == body and any("nested deeper" in n for n in record["notes"])


async def test_a_lone_surrogate_in_a_request_is_recorded_as_sent(faulty):
    proxy, client = faulty
    body = '{"model":"ok","messages":[{"role":"user","content":"a\\udcffb"}]}'
    r = await client.post(proxy.base_url + "/chat/completions", content=body,
                          headers={"content-type": "application/json"})
    assert r.status_code == 200
    assert _one_valid_record(proxy)["request"]["messages"][0]["content"] == "a\udcffb"


# ---- memory bound ------------------------------------------------------------------------------

async def test_bodies_past_the_in_flight_limit_get_a_503_naming_it_and_are_recorded(tmp_path: Path):
    fake = FakeVLLM()
    async with serve(fake.app) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "t", max_inflight_bytes=50_000) as proxy:
            async with httpx.AsyncClient(timeout=10) as client:
                big = {"model": "ok", "messages": [{"role": "user", "content": "x" * 60_000}]}
                r = await client.post(proxy.base_url + "/chat/completions", json=big)
                small = await client.post(proxy.base_url + "/chat/completions",
                                          json={"model": "ok", "messages": MESSAGES})
    assert r.status_code == 503 and "max_inflight_bytes" in r.json()["error"]["message"]
    assert small.status_code == 200  # the refused call gave its bytes back
    refused, ok = read_trace(tmp_path / "t" / "default.jsonl")
    assert refused["status"] == 503 and refused["error"]["kind"] == "proxy_overloaded"


async def test_concurrent_bodies_share_one_in_flight_budget(tmp_path: Path):
    fake = FakeVLLM()
    async with serve(fake.app) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "t", max_inflight_bytes=100_000) as proxy:
            async with httpx.AsyncClient(timeout=20) as client:
                body = {"model": "slow", "messages": [{"role": "user", "content": "x" * 40_000}]}
                replies = await asyncio.gather(*(client.post(proxy.base_url + "/chat/completions", json=body)
                                                 for _ in range(4)))
    statuses = sorted(r.status_code for r in replies)
    assert statuses == [200, 200, 503, 503]
    assert len(read_trace(tmp_path / "t" / "default.jsonl")) == 4


# ---- unencodable text ---------------------------------------------------------------------------

async def test_the_local_backend_answers_a_request_holding_a_lone_surrogate(start_local_backend):
    backend = await start_local_backend(policy="script", script=["fine"])
    body = '{"model":"local","messages":[{"role":"user","content":"a\\udcffb"}]}'
    async with httpx.AsyncClient(timeout=20) as client:
        r = await client.post(backend.base_url + "/chat/completions", content=body,
                              headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "fine"


async def test_the_local_backend_answers_for_a_policy_that_emits_a_lone_surrogate(start_local_backend):
    backend = await start_local_backend(policy="script", script=["x\udcffy"])
    async with httpx.AsyncClient(timeout=20) as client:
        r = await client.post(backend.base_url + "/chat/completions", json={"model": "local", "messages": MESSAGES})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "x\ufffdy"


def test_a_capture_whose_agent_meets_a_lone_surrogate_still_writes_valid_artifacts(tmp_path: Path):
    from rollout_dataset.capture import capture_rollout
    from rollout_dataset.recipes.coding import CaptureConfig

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": [{"name": "run", "arguments": {"command": "echo X\udcffY"}},
                                            {"name": "submit", "arguments": {}}]}))
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", task_index=0, timeout_s=120,
                                           policy="script", script=script, max_turns=3))
    assert validate_path(result.out_dir) == []
    trace = json.loads((result.out_dir / "trace.json").read_text(encoding="utf-8"))
    assert trace["seal"]["records"] == len(trace["calls"]) >= 2


def test_artifacts_holding_a_lone_surrogate_are_written_and_read_back(tmp_path: Path):
    from rollout_dataset.capture.artifacts import write_artifacts

    write_artifacts(tmp_path, {"turns.json": {"text": "a\udcffb"}, "samples.md": "a\udcffb"}, [])
    assert json.loads((tmp_path / "turns.json").read_text(encoding="utf-8"))["text"] == "a\udcffb"
    assert (tmp_path / "samples.md").read_text(encoding="utf-8") == "a\\udcffb"


def test_a_capture_whose_agent_truncates_its_own_trace_does_not_pass_it_off_as_clean(tmp_path: Path):
    """The agent empties its session's trace file mid-rollout: either it cannot reach the file (the
    sandbox hides it) and the trace is whole, or the capture fails with TraceIntegrityError."""
    import tempfile
    import uuid

    from rollout_dataset.capture import capture_rollout
    from rollout_dataset.recipes.coding import CaptureConfig

    rollout_id = uuid.uuid4().hex
    target = f"{tempfile.gettempdir()}/rollout-trace-*/{rollout_id}.jsonl"
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": [
        {"name": "run", "arguments": {"command": "echo one"}},
        {"name": "run", "arguments": {"command": f"for f in {target}; do : > \"$f\" && echo emptied; done"}},
        {"name": "submit", "arguments": {}}]}))
    config = CaptureConfig(out_dir=tmp_path / "out", task_index=0, timeout_s=120, policy="script",
                           script=script, max_turns=4, rollout_id=rollout_id)
    try:
        result = capture_rollout(config)
    except TraceIntegrityError as exc:
        assert rollout_id in exc.file
        return
    trace = json.loads((result.out_dir / "trace.json").read_text(encoding="utf-8"))
    assert trace["seal"]["records"] == len(trace["calls"]) >= 3
    assert validate_path(result.out_dir) == []


@pytest.mark.parametrize("mode", ["big", "chunked_big"])
async def test_an_answer_past_the_in_flight_limit_gets_a_503_and_is_recorded(tmp_path: Path, mode):
    async with serve(FaultyUpstream()) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "t", max_inflight_bytes=100_000) as proxy:
            async with httpx.AsyncClient(timeout=10) as client:
                r = await client.post(proxy.base_url + "/chat/completions", json={"model": mode, "messages": MESSAGES})
    assert r.status_code == 503 and "max_inflight_bytes" in r.json()["error"]["message"]
    (record,) = read_trace(tmp_path / "t" / "default.jsonl")
    assert record["status"] == 503 and record["error"]["kind"] == "proxy_overloaded"


async def test_a_compressed_answer_is_counted_as_it_decodes_and_gets_a_503_past_the_in_flight_limit(tmp_path: Path):
    import gzip

    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    async def chat(request):  # 5 MB decoded from a 5 kB body whose content-length is the encoded size
        return Response(gzip.compress(b" " * 5_000_000), media_type="application/json",
                        headers={"content-encoding": "gzip"})

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    async with serve(app) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "t", max_inflight_bytes=100_000) as proxy:
            async with httpx.AsyncClient(timeout=10) as client:
                r = await client.post(proxy.base_url + "/chat/completions", json={"model": "m", "messages": MESSAGES})
    assert r.status_code == 503 and "max_inflight_bytes" in r.json()["error"]["message"]
    (record,) = read_trace(tmp_path / "t" / "default.jsonl")
    assert record["status"] == 503 and record["error"]["kind"] == "proxy_overloaded"


async def test_a_passed_through_stream_past_the_in_flight_limit_ends_with_a_503_event_and_is_recorded(tmp_path: Path):
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    event = b"data: " + b"x" * 20_000 + b"\n\n"

    async def events(request):  # an event stream of an endpoint the proxy does not read: passed through
        async def body():
            for _ in range(10):
                yield event
                await asyncio.sleep(0.01)
        return StreamingResponse(body(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/events", events, methods=["POST"])])
    async with serve(app) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "t", max_inflight_bytes=100_000) as proxy:
            async with httpx.AsyncClient(timeout=10) as client:
                r = await client.post(proxy.base_url + "/events", json={})
    assert r.status_code == 200 and len(r.content) < 10 * len(event)
    last = r.text.rstrip().rsplit("\n\n", 1)[-1]
    assert last.startswith("data: ") and json.loads(last[6:])["error"]["type"] == "proxy_overloaded"
    (record,) = read_trace(tmp_path / "t" / "default.jsonl")
    assert record["error"]["kind"] == "proxy_overloaded" and "max_inflight_bytes" in record["error"]["message"]


async def test_a_400_whose_body_breaks_off_records_the_status_and_names_the_disconnect(tmp_path):
    from proxy_fakes import serve_raw

    async def answer(head: bytes) -> tuple[bytes, bool]:  # a 400's head and part of its body, then close
        return (b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n"
                b'{"error": {"message": "x', True)

    async with serve_raw(answer) as (root, _):
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces") as proxy:
            async with httpx.AsyncClient(timeout=30) as client:
                r = await client.post(proxy.base_url + "/chat/completions", json={"model": "m", "messages": MESSAGES})
    assert r.status_code == 502 and "dropped the connection" in r.json()["error"]["message"]
    (record,) = read_trace(proxy.trace_path())
    assert record["error"]["kind"] == "upstream_status"  # the first failure: the 400
    assert [n for n in record["notes"] if n.startswith("then upstream_disconnect: ")], record["notes"]
