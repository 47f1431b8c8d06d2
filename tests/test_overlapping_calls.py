"""Overlapping calls: a harness that sends requests at once, answered out of order, loses nothing.

The local backend delays one answer by its `x-backend-delay-ms` header, so a call sent first ends
last, as on a real server. Records are listed by arrival everywhere (`trace_integrity.in_arrival_order`)
while the session file keeps the order calls ended and its chain still verifies.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx
import orjson
import pytest

from rollout_dataset.backend import LocalBackend
from rollout_dataset.backend.app import ANSWER_DELAY_HEADER
from rollout_dataset.capture import capture_rollout
from rollout_dataset.graph import build_graph
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.schema.check import validate_path
from rollout_dataset.trace_integrity import chain, in_arrival_order

SLOW_MS = 600


def _body(text: str, stream: bool) -> dict:
    body = {"model": "local", "messages": [{"role": "user", "content": text}], "max_tokens": 8,
            "logprobs": True, "return_token_ids": True}
    if stream:
        body["stream"] = True
    return body


class _SlowArrival:
    """The backend's ASGI app, noting when a call asking for a delayed answer has reached it."""

    def __init__(self, app):
        self.app = app
        self.arrived = asyncio.Event()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and any(k == ANSWER_DELAY_HEADER.encode() for k, _ in scope["headers"]):
            self.arrived.set()
        await self.app(scope, receive, send)


async def _call(client: httpx.AsyncClient, url: str, body: dict, delay_ms: int = 0) -> None:
    headers = {ANSWER_DELAY_HEADER: str(delay_ms)} if delay_ms else {}
    response = await client.post(url, json=body, headers=headers)
    assert response.status_code == 200, response.text
    await response.aread()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_calls_answered_out_of_order_are_read_back_by_arrival_with_the_chain_intact(tmp_path: Path, stream):
    backend = LocalBackend(policy="echo")
    backend.app = arrivals = _SlowArrival(backend.app)
    async with backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path) as proxy:
            url = proxy.session_base_url("s") + "/chat/completions"
            async with httpx.AsyncClient(timeout=30) as client:
                slow = asyncio.ensure_future(_call(client, url, _body("first, slow", stream), SLOW_MS))
                await asyncio.wait_for(arrivals.arrived.wait(), 30)  # the first is in flight upstream
                await _call(client, url, _body("second, fast", stream))
                await slow
            seal = proxy.seal("s")
    written = [orjson.loads(line)["index"] for line in (tmp_path / "s.jsonl").read_bytes().splitlines()]
    assert written == [1, 0]  # the file holds them in the order they ended
    records = read_trace(tmp_path / "s.jsonl", seal=seal)  # the chain verifies against the proxy's seal
    assert [r["index"] for r in records] == [0, 1]
    assert records[0]["request"]["messages"][0]["content"] == "first, slow"
    assert records[1]["started_at"] < records[0]["ended_at"]  # they overlapped


def _record(index: int, prompt: list[int], sampled: list[int], started: float, ended: float) -> dict:
    return {"index": index, "endpoint": "/v1/chat/completions", "call_id": f"c{index}", "started_at": started,
            "ended_at": ended, "request": {"messages": [{"role": "user", "content": "x"}]},
            "response": {"choices": [{"message": {"role": "assistant", "content": "y"}}]},
            "prompt_token_ids": prompt, "completion_token_ids": sampled, "per_token_logps": [0.0] * len(sampled),
            "capture_level": "tokens"}


def test_a_call_sent_before_another_ended_is_never_its_continuation():
    # call 1's prompt extends call 0's prompt + sampled ids, but it arrived while call 0 was in flight
    records = [_record(0, [1, 2], [], started=10.0, ended=12.0), _record(1, [1, 2, 3], [4], started=11.0, ended=11.5)]
    assert build_graph(records).get(1).parent is None


def test_a_call_sent_after_another_ended_continues_it():
    records = [_record(0, [1, 2], [3], started=10.0, ended=11.0), _record(1, [1, 2, 3, 5], [4], started=11.2, ended=12.0)]
    assert build_graph(records).get(1).parent == 0


def test_a_trace_json_listed_by_arrival_validates_though_its_chain_runs_in_the_order_calls_ended(tmp_path: Path):
    from rollout_dataset.trace_integrity import TraceSeal, record_digest

    ended_order = chain([_record(1, [7], [8], 1.0, 1.5), _record(0, [1], [2], 0.9, 2.0)])
    doc = {"schema_version": 1, "session": "s", "calls": in_arrival_order(ended_order),
           "seal": TraceSeal(2, record_digest(ended_order[-1])).to_dict()}
    from rollout_dataset.schema.check import _check_trace

    assert _check_trace(doc) == []
    doc["calls"] = ended_order  # listed in the order they ended: the arrival rule names it
    assert _check_trace(doc) == [("$.calls[1].index", "is 0, not after the previous call's 1")]


# A `cmd:` harness that sends two requests at once (the first one slow), then continues the second.
OVERLAPPING_AGENT = r'''
import json, os, sys, threading, urllib.request
base, model = sys.argv[1], sys.argv[2]
def call(messages, delay_ms=0):
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}
    if delay_ms:
        headers["x-backend-delay-ms"] = str(delay_ms)
    body = {"model": model, "messages": messages, "max_tokens": 16, "stream": STREAM}
    raw = urllib.request.urlopen(urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                                                        headers=headers), timeout=60).read()
    return raw
STREAM = os.environ.get("AGENT_STREAM") == "1"
first = [{"role": "user", "content": "title this session"}]
second = [{"role": "user", "content": open(os.environ["ROLLOUT_TASK_FILE"]).read()}]
slow = threading.Thread(target=call, args=(first, 600))
slow.start()
threading.Event().wait(0.15)
call(second)
slow.join()
call(second + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "go on"}])
'''


@pytest.mark.parametrize("stream", ["0", "1"], ids=["whole", "streamed"])
def test_a_capture_whose_harness_overlaps_calls_succeeds_and_lists_them_by_arrival(tmp_path: Path, monkeypatch, stream):
    script = tmp_path / "agent.py"
    script.write_text(OVERLAPPING_AGENT)
    monkeypatch.setenv("AGENT_STREAM", stream)
    out = tmp_path / "out"
    result = capture_rollout(CaptureConfig(out_dir=out, task_index=0, timeout_s=120,
                                           harness=f"cmd:{sys.executable} {script} {{base_url}} {{model}}"))
    assert result.ok, (result.errors, result.validation_failures)
    assert validate_path(out) == []
    calls = json.loads((out / "trace.json").read_text())["calls"]
    assert [c["index"] for c in calls] == [0, 1, 2]
    assert calls[1]["started_at"] < calls[0]["ended_at"]  # the first two overlapped


def test_a_batch_whose_harness_overlaps_calls_keeps_every_rollout(tmp_path: Path, monkeypatch):
    from rollout_dataset.cli import main

    script = tmp_path / "agent.py"
    script.write_text(OVERLAPPING_AGENT)
    monkeypatch.setenv("AGENT_STREAM", "1")
    out = tmp_path / "batch"
    harness = f"harness=cmd:{sys.executable} {script} {{base_url}} {{model}}"
    assert main(["batch", "--smoke", "--env-option", harness, "--concurrency", "1", "--no-progress",
                 "--out", str(out)]) == 0
    folders = sorted(p.parent for p in (out / "rollouts").glob("*/summary.json"))
    assert len(folders) == 2 and all(validate_path(folder) == [] for folder in folders)
    for folder in folders:
        calls = json.loads((folder / "trace.json").read_text())["calls"]
        assert [c["index"] for c in calls] == [0, 1, 2] and calls[1]["started_at"] < calls[0]["ended_at"]
