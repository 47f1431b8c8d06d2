"""A call cut before its answer ended (its harness killed mid-stream, a capture's `--timeout-s`)
stays in the trace and the rollout document, is named in findings with its partial answer, lies on
no sequence, and does not lower the capture level of the calls that completed.

Each cut here is real: a client in its own process, on loopback, streams an answer from the local
backend through the proxy and is SIGKILLed after a few events (chat completions, Messages, Responses).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import httpx
import pytest

from rollout_dataset.backend import LocalBackend
from rollout_dataset.capture import capture_rollout
from rollout_dataset.export import capture_level_of, export_rollout, turns_document
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.schema import schema_errors
from rollout_dataset.schema.check import validate_path

LONG = "Tell me about " + " ".join(f"item{k}" for k in range(40))

#: endpoint -> (path, request body for `content`); each streams `content` echoed back token by token
BODIES = {
    "chat": ("/chat/completions", lambda content, stream: {
        "model": "local", "messages": [{"role": "user", "content": content}], "stream": stream}),
    "messages": ("/messages", lambda content, stream: {
        "model": "local", "max_tokens": 200, "messages": [{"role": "user", "content": content}], "stream": stream}),
    "responses": ("/responses", lambda content, stream: {
        "model": "local", "input": [{"role": "user", "content": content}], "stream": stream}),
}

#: a client in its own process: POSTs the body, prints each line of the answer as it comes
CLIENT = """
import sys, httpx
url, body, stream, delay_ms = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
print("sent", flush=True)
with httpx.Client(timeout=120) as client:
    with client.stream("POST", url, content=body, headers={"content-type": "application/json", "x-backend-delay-ms": delay_ms}) as answer:
        for line in answer.iter_lines():
            if line.startswith("data:"):
                print(line[:60], flush=True)
"""


async def _killed_client(url: str, body: dict, *, stream: bool, after_lines: int) -> None:
    """Run the client in a process and SIGKILL it once it printed `after_lines` data lines (0: once it sent)."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", CLIENT, url, json.dumps(body),
                                                "1" if stream else "0", "0" if stream else "10000", stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    seen = -1
    while seen < after_lines:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line, "the client ended before it could be killed mid-answer"
        seen += 1
    if not stream:
        await asyncio.sleep(3)  # the request reaches the proxy, which waits 10 s for the slow answer
    os.kill(proc.pid, signal.SIGKILL)
    await proc.wait()


async def _records(proxy: CaptureProxy, session: str, n: int) -> list[dict]:
    path = proxy.trace_path(session)
    for _ in range(1500):  # the proxy notices the client gone and writes the cut call's record
        if path.exists() and len(path.read_text().splitlines()) >= n:
            break
        await asyncio.sleep(0.02)
    return read_trace(path)


async def _capture(tmp_path, api: str, *, complete_first: bool, stream: bool = True) -> list[dict]:
    """One session: optionally a whole call, then one whose client is killed mid-answer; its records."""
    path, make = BODIES[api]
    async with LocalBackend(policy="echo", token_delay=0.05) as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path) as proxy:
            url = proxy.session_base_url("s") + path
            if complete_first:
                async with httpx.AsyncClient(timeout=120) as client:
                    answer = await client.post(url, json=make("Say hello there", False))
                    assert answer.status_code == 200, answer.text
            await _killed_client(url, make(LONG, stream), stream=stream, after_lines=8 if stream else 0)
            return await _records(proxy, "s", 2 if complete_first else 1)


def _document(records: list[dict]) -> dict:
    document = export_rollout(records, session_id="s", capture_level=capture_level_of(records))
    assert schema_errors(document, "rollout") == []
    return document


async def test_a_responses_call_cut_mid_stream_does_not_lower_the_capture_level_of_the_completed_calls(tmp_path):
    records = await _capture(tmp_path, "responses", complete_first=True)  # its ids come only with its last event
    assert records[1]["error"]["kind"] == "client_disconnect"
    assert capture_level_of(records) == "tokens"
    document = _document(records)
    assert document["stats"]["n_trainable_tokens"] > 0 and document["trainable"]


@pytest.mark.parametrize("api", sorted(BODIES))
async def test_a_call_cut_mid_stream_lies_on_no_sequence(tmp_path, api):
    records = await _capture(tmp_path, api, complete_first=True)
    document = _document(records)
    assert [c["index"] for c in document["calls"]] == [0]
    assert all(1 not in row["node_ids"] for row in document["sequences"])


@pytest.mark.parametrize("api", sorted(BODIES))
async def test_a_call_cut_mid_stream_is_named_in_findings_with_its_partial_answer(tmp_path, api):
    records = await _capture(tmp_path, api, complete_first=True)
    document = _document(records)
    [cut] = document["cut_calls"]
    assert (cut["call_index"], cut["call_id"], cut["kind"]) == (1, records[1]["call_id"], "client_disconnect")
    assert cut["partial_text"] and LONG.startswith(cut["partial_text"].strip()[:20])
    [named] = [f for f in document["findings"] if f["code"] == "call_cut"]
    assert named["call_index"] == 1 and records[1]["call_id"] in named["message"] and "client_disconnect" in named["message"]


@pytest.mark.parametrize("api", sorted(BODIES))
async def test_a_call_cut_mid_stream_shows_its_partial_answer_in_the_turns_document(tmp_path, api):
    records = await _capture(tmp_path, api, complete_first=True)
    turns = turns_document(_document(records), records)
    assert schema_errors(turns, "turns") == []
    assert [t["call_index"] for t in turns["turns"]] == [0]
    assert [c["call_index"] for c in turns["cut_calls"]] == [1] and turns["cut_calls"][0]["partial_text"]


async def test_a_responses_stream_cut_mid_answer_records_the_text_that_arrived(tmp_path):
    records = await _capture(tmp_path, "responses", complete_first=False)
    [item] = [i for i in records[0]["response"]["output"] if i.get("type") == "message"]
    assert item["content"][0]["text"] and LONG.startswith(item["content"][0]["text"].strip()[:20])


@pytest.mark.parametrize("api", sorted(BODIES))
async def test_a_rollout_whose_every_call_was_cut_stays_below_tokens(tmp_path, api):
    records = await _capture(tmp_path, api, complete_first=False)
    assert capture_level_of(records) != "tokens"
    document = _document(records)
    assert not document["trainable"] and document["stats"]["n_trainable_tokens"] == 0
    assert [c["call_index"] for c in document["cut_calls"]] == [0]


@pytest.mark.parametrize("api", sorted(BODIES))
async def test_a_call_not_streamed_whose_client_was_killed_is_named_in_findings(tmp_path, api):
    path, make = BODIES[api]
    async with LocalBackend(policy="echo") as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path) as proxy:
            url = proxy.session_base_url("s") + path
            async with httpx.AsyncClient(timeout=120) as client:
                assert (await client.post(url, json=make("Say hello there", False))).status_code == 200
            slow = make(LONG, False)
            await _killed_client(url, slow, stream=False, after_lines=0)
            records = await _records(proxy, "s", 2)
    document = _document(records)
    assert capture_level_of(records) == "tokens" and document["trainable"]
    assert [(c["call_index"], c["kind"]) for c in document["cut_calls"]] == [(1, "client_disconnect")]


#: an external harness: one whole Responses call, then one streamed until the capture's timeout kills it
HARNESS = """
import json, os, urllib.request
def post(content, stream):
    body = {"model": os.environ["ROLLOUT_MODEL"], "input": [{"role": "user", "content": content}], "stream": stream}
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/responses", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    return urllib.request.urlopen(req, timeout=300)
post("Say hello there", False).read()
with post(%r, True) as answer:
    for line in answer:
        pass
"""


async def test_a_capture_whose_harness_timed_out_mid_stream_keeps_its_completed_calls_trainable(tmp_path):
    client = tmp_path / "client.py"
    client.write_text(HARNESS % ("Tell me about " + " ".join(f"item{k}" for k in range(300))))
    async with LocalBackend(policy="echo", token_delay=0.05) as backend:
        config = CaptureConfig(out_dir=tmp_path / "runs" / "out", task_index=0, base_url=backend.base_url,
                               harness=f"cmd:{sys.executable} {client}", timeout_s=8)
        result = await asyncio.to_thread(capture_rollout, config)
    document = json.loads((result.out_dir / "rollout.json").read_text())
    assert validate_path(result.out_dir) == []
    assert result.summary["timed_out"] and document["capture_level"] == "tokens"
    assert document["stats"]["n_trainable_tokens"] > 0
    assert [(c["call_index"], c["endpoint"]) for c in document["cut_calls"]] == [(1, "/v1/responses")]
