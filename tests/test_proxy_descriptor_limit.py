"""A proxy that runs out of file descriptors still records every call it answers.

The recorders hold spare descriptors (`TraceRecorder.SPARE_DESCRIPTORS`) and give them up for the
moment a record needs a file: the single-process recorder the session's trace file, the multi-worker
one (`SharedTraceRecorder`) also the session's state file, which reserves the arrival index. The
proxies and recorders run in their own processes under a low ``RLIMIT_NOFILE``.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from proxy_fakes import serve_raw
from support.cli_servers import spawn_cli_server, stop_cli_server
from rollout_dataset.proxy import read_trace

_ANSWER = (b'{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant",'
           b'"content":"ok"},"finish_reason":"stop"}]}')


async def _slow_answer(head: bytes) -> tuple[bytes, bool]:
    await asyncio.sleep(0.5)  # calls overlap, so the proxy's sockets take its descriptors
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(_ANSWER)
            + _ANSWER, True)


async def _overlapping_calls(base: str, calls: int) -> list[httpx.Response | None]:
    """`calls` chat calls at once, each in its own session ``s<n>``; None for a connection reset unread."""
    limits = httpx.Limits(max_connections=calls, max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits, timeout=20) as http:
        async def call(n: int) -> httpx.Response | None:
            try:
                return await http.post(base.replace("/v1", f"/sessions/s{n}/v1") + "/chat/completions",
                                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            except httpx.TransportError:  # a connection the server reset before reading it
                return None

        return await asyncio.wait_for(asyncio.gather(*(call(n) for n in range(calls))), 30)


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_proxy_out_of_descriptors_records_every_call_it_answers(tmp_path: Path, workers: int):
    calls = 100
    async with serve_raw(_slow_answer) as (root, _):
        proc, base = spawn_cli_server(["proxy", "--upstream", root + "/v1", "--trace-dir", str(tmp_path / "t"),
                                       "--workers", str(workers), "--max-open-files", "4"],
                                      preexec_fn=_limit_descriptors)
        try:
            answers = await _overlapping_calls(base, calls)
        finally:
            stop_cli_server(proc)
    answered = {n: r for n, r in enumerate(answers) if r is not None}
    out_of_descriptors = [r for r in answered.values() if "Too many open files" in r.text]
    assert out_of_descriptors, "the proxy never ran out of descriptors: the test did not test anything"
    for n, response in answered.items():
        path = tmp_path / "t" / f"s{n}.jsonl"
        assert path.exists(), f"call {n} answered {response.status_code} {response.text[:300]} without a record"
        records = read_trace(path)
        assert [(r["index"], r["status"]) for r in records] == [(0, response.status_code)]


async def test_a_proxy_out_of_descriptors_says_so_once_naming_the_limit_and_what_to_change(tmp_path: Path):
    with open(tmp_path / "stderr", "w") as stderr:
        async with serve_raw(_slow_answer) as (root, _):
            proc, base = spawn_cli_server(["proxy", "--upstream", root + "/v1", "--trace-dir", str(tmp_path / "t"),
                                           "--max-open-files", "4"], preexec_fn=_limit_descriptors, stderr=stderr)
            try:
                answers = await _overlapping_calls(base, 100)
            finally:
                stop_cli_server(proc)
    assert any(r is None or "Too many open files" in r.text for r in answers), "the proxy never ran out"
    said = (tmp_path / "stderr").read_text()
    assert said.count("out of file descriptors (RLIMIT_NOFILE 40)") == 1, said[-3000:]
    assert "raise `ulimit -n`" in said


#: the scripts below: lower the limit to 64 and hold every descriptor left (`held`)
_TAKE_EVERY_DESCRIPTOR = r"""
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
held = []
while True:  # every other descriptor in use
    try:
        held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        break
"""

#: then: `still_full` (every borrowed descriptor went back to the spares), and give `held` back
_STILL_FULL_THEN_GIVE_BACK = r"""
try:
    os.close(os.open(os.devnull, os.O_RDONLY))
    still_full = False
except OSError:
    still_full = True
for fd in held:
    os.close(fd)
"""


def _run_at_the_limit(script: str, *args: str) -> dict:
    """Run a script of this file in a child process; its one line of JSON output."""
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


_AT_THE_LIMIT = r"""
import json, os, resource, sys
from pathlib import Path
from rollout_dataset.proxy.recorder import TraceRecorder, read_trace
from rollout_dataset.proxy.shared_recorder import SharedTraceRecorder

kind, trace_dir, resume = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "resume"
recorder_class = {"single": TraceRecorder, "shared": SharedTraceRecorder}[kind]
if resume:  # a session file from before: picked up (read, a cut last line moved aside) at the limit
    before = recorder_class(trace_dir)
    for n in range(2):
        before.write("s", {"index": before.next_index("s"), "text": f"before {n}"})
    before.close()
    path = trace_dir / "s.jsonl"
    path.write_bytes(path.read_bytes() + b'{"index": 2, "cut')
    for state in trace_dir.glob(".proxy-state/*"):
        state.unlink()  # the state is rebuilt from the trace file
recorder = recorder_class(trace_dir, max_open_files=1)
""" + _TAKE_EVERY_DESCRIPTOR + r"""
for session in ("s", "t", "s"):
    recorder.write(session, {"index": recorder.next_index(session), "text": "at the limit"})
seals = {session: recorder.seal(session) for session in ("s", "t")}
""" + _STILL_FULL_THEN_GIVE_BACK + r"""
print(json.dumps({"still_full": still_full, "held": len(held),
                  "texts": {s: [r["text"] for r in read_trace(trace_dir / f"{s}.jsonl", seal)] for s, seal in seals.items()},
                  "indices": {s: [r["index"] for r in read_trace(trace_dir / f"{s}.jsonl")] for s in seals},
                  "cut_aside": [p.name for p in trace_dir.glob("*.cut-*")]}))
"""


@pytest.mark.parametrize("resume", ["new", "resume"])
@pytest.mark.parametrize("kind", ["single", "shared"])
def test_a_recorder_writes_its_records_while_every_other_descriptor_is_in_use(tmp_path: Path, kind: str,
                                                                               resume: str):
    result = _run_at_the_limit(_AT_THE_LIMIT, kind, str(tmp_path), resume)
    assert result["held"] > 0 and result["still_full"]
    before = ["before 0", "before 1"] if resume == "resume" else []
    assert result["texts"] == {"s": before + ["at the limit"] * 2, "t": ["at the limit"]}
    assert result["indices"] == {"s": list(range(len(before) + 2)), "t": [0]}
    assert result["cut_aside"] == (["s.jsonl.cut-1"] if resume == "resume" else [])


_READ_AT_THE_LIMIT = r"""
import json, os, resource, sys
from pathlib import Path
from rollout_dataset.proxy.recorder import TraceRecorder
from rollout_dataset.proxy.shared_recorder import SharedTraceRecorder

recorder_class = {"single": TraceRecorder, "shared": SharedTraceRecorder}[sys.argv[1]]
trace_dir = Path(sys.argv[2])
other = recorder_class(trace_dir)  # another worker (or this proxy before a restart)
for n in range(2):
    other.write("s", {"index": other.next_index("s"), "text": f"by the other {n}"})
other.close()
reader = recorder_class(trace_dir, max_open_files=1)
""" + _TAKE_EVERY_DESCRIPTOR + r"""
texts = [r["text"] for r in reader.records_by_others("s")]
""" + _STILL_FULL_THEN_GIVE_BACK + r"""
print(json.dumps({"texts": texts, "still_full": still_full, "held": len(held)}))
"""


@pytest.mark.parametrize("kind", ["single", "shared"])
def test_on_policy_reads_the_records_of_other_workers_while_every_other_descriptor_is_in_use(tmp_path: Path,
                                                                                             kind: str):
    result = _run_at_the_limit(_READ_AT_THE_LIMIT, kind, str(tmp_path))
    assert result["held"] > 0 and result["still_full"]
    assert result["texts"] == ["by the other 0", "by the other 1"]


_THREAD_OPENS = r"""
import asyncio, json, sys, threading
import httpx
from rollout_dataset.proxy.app import ProxyApp
from rollout_dataset.proxy.intake import _problem
from rollout_dataset.proxy.recorder import TraceRecorder
from rollout_dataset.schema.api_requests import (MESSAGES_REQUEST_SCHEMA, RESPONSES_REQUEST_SCHEMA,
                                                 messages_request_problem, responses_request_problem)

ProxyApp("http://127.0.0.1:9", TraceRecorder(sys.argv[1]), httpx.AsyncHTTPTransport())  # the proxy starts
opened = []

def audit(event, args):
    if event in ("open", "os.listdir", "os.scandir") and threading.current_thread() is not threading.main_thread():
        opened.append(f"{event} {args[0]}")

sys.addaudithook(audit)

async def judge():  # the first bad bodies after startup: judged in a worker thread
    return [await _problem(messages_request_problem, {"model": 5}, MESSAGES_REQUEST_SCHEMA),
            await _problem(responses_request_problem, {"model": 5}, RESPONSES_REQUEST_SCHEMA)]

print(json.dumps({"problems": asyncio.run(judge()), "opened": opened}))
"""


def test_judging_a_request_body_off_the_event_loop_opens_no_file(tmp_path: Path):
    # Out of descriptors, the recorder closes a spare and opens a trace file on the slot it freed; a worker
    # thread opening a file in between would take that slot, and the record would fail.
    done = subprocess.run([sys.executable, "-c", _THREAD_OPENS, str(tmp_path)], capture_output=True, text=True,
                          timeout=30, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert all(result["problems"]), result["problems"]
    assert result["opened"] == []
