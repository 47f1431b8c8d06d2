"""The proxy's fast paths keep behaviour: JSON parsed as the standard library does, records that read back the
same, bodies decoded as httpx decodes them."""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import random
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from proxy_fakes import FakeVLLM, serve
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.proxy.jsoncodec import dumps_event, encode_record, loads, loads_event
from rollout_dataset.schema import schema_errors


@pytest.mark.parametrize("text", [b'{"seed": 123456789012345678901234567890}', b"-0", b"-0.0", b"1e2",
                                  b'{"a": 1, "a": 2}', b'"\\ud800"', b"\xef\xbb\xbf{}", b'{"x": 2.5e-07}',
                                  '{"t": "é"}'.encode("utf-16"), b"[1e400, -1e400]", b'"\xed\xa0\x80"',
                                  b"[0.0001234567890123456789, 18446744073709551615, -9223372036854775809]",
                                  b"[9007199254740993.0, 5e-324, 1.7976931348623157e308]",
                                  b"[" * 600 + b"]" * 600, b'{"a": [' + b"{}, " * 700 + b"1]}"])
def test_loads_gives_the_standard_librarys_value(text: bytes):
    value, nonfinite = loads(text)
    assert repr(value) == repr(json.loads(text)) and nonfinite is False


@pytest.mark.parametrize("text", [b'{"temperature": NaN}', b"[Infinity]", '{"l": -Infinity}'])
def test_loads_reports_nonfinite_constants(text: bytes | str):
    value, nonfinite = loads(text)
    assert nonfinite is True and repr(value) == repr(json.loads(text))


def test_loads_refuses_nesting_the_standard_library_refuses_although_orjson_would_parse_it():
    with pytest.raises(ValueError, match="nested too deep"):
        loads(b"[" * 1000 + b"]" * 1000)


@pytest.mark.parametrize("text", [b'{"a": ', b"\xff{}", "\ufeff{}"])
def test_loads_raises_the_standard_librarys_error(text: bytes | str):
    with pytest.raises(ValueError) as ours:
        loads(text)
    with pytest.raises(ValueError) as theirs:
        json.loads(text)
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("text", ['{"seed": 123456789012345678901234567890}', '[-9223372036854775809]',
                                  '[18446744073709551616]', '{"lp": -0.00012345678901234567}', "[1e400]",
                                  '"\\ud800"', '{"a": 1, "a": 2}', "-0", '{"x": 2.5e-07, "ids": [1, 2]}',
                                  '{"t": "\u00e9\u2028"}', "[NaN]"])
def test_loads_event_gives_the_standard_librarys_value(text: str):
    assert repr(loads_event(text)) == repr(loads(text))


@pytest.mark.parametrize("value", [{"seed": 2 ** 80}, {"t": "a\udcffb"}, {"x": [1e-05, 1e16, -0.0]}, {"n": None}])
def test_dumps_event_reads_back_as_the_same_value(value):
    assert repr(json.loads(dumps_event(value))) == repr(value)


def test_encoded_records_read_back_as_the_same_values():
    rng = random.Random(0)
    floats = [-rng.random() * 10 ** rng.randint(-12, 3) for _ in range(2000)] + [1e-05, 1e16, -0.0, 5e-324]
    record = {"per_token_logps": floats, "ids": list(range(50)), "text": "é\u2028\x00\x7f/\"\\", "none": None,
              "nested": {"ok": True, "usage": {"prompt_tokens": 3}}}
    line = encode_record(record)
    assert b"\n" not in line and json.loads(line) == record
    assert [repr(x) for x in json.loads(line)["per_token_logps"]] == [repr(x) for x in floats]


def test_records_orjson_cannot_encode_fall_back_to_the_standard_encoder():
    record = {"seed": 2 ** 80, "t": math.nan}
    assert encode_record({"seed": 2 ** 80}) == b'{"seed":1208925819614629174706176}'
    assert encode_record(record, nonfinite=True) == b'{"seed":1208925819614629174706176,"t":NaN}'


async def test_a_request_holding_nan_is_recorded_with_nan(tmp_path: Path):
    body = b'{"model": "ok", "messages": [{"role": "user", "content": "hi"}], "temperature": NaN}'
    async with serve(FakeVLLM().app) as root:
        async with CaptureProxy(upstream=root + "/v1", trace_dir=tmp_path) as proxy:
            async with httpx.AsyncClient(timeout=10) as client:
                response = await client.post(proxy.base_url + "/chat/completions", content=body,
                                             headers={"content-type": "application/json"})
    assert response.status_code == 200
    (record,) = read_trace(proxy.trace_path())
    assert math.isnan(record["requested_sampling_params"]["temperature"])
    assert b'"temperature":NaN' in proxy.trace_path().read_bytes().split(b'"request":')[0]
    assert schema_errors(record, "trace_record") == []


def _upstream(endpoint) -> Starlette:
    return Starlette(routes=[Route("/v1/chat/completions", endpoint, methods=["POST"])])


CHUNK = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": "café"}, "finish_reason": "stop"}]}


async def _one_call(tmp_path: Path, app: Starlette, **body) -> tuple[httpx.Response, dict]:
    async with serve(app) as root:
        async with CaptureProxy(upstream=root + "/v1", trace_dir=tmp_path) as proxy:
            async with httpx.AsyncClient(timeout=10) as client:
                response = await client.post(proxy.base_url + "/chat/completions",
                                             json={"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                                   **body})
    (record,) = read_trace(proxy.trace_path())
    assert schema_errors(record, "trace_record") == []
    return response, record


async def test_a_compressed_upstream_body_is_decoded_before_it_is_recorded(tmp_path: Path):
    answer = {**CHUNK, "object": "chat.completion",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "café"}, "finish_reason": "stop"}]}

    async def chat(request: Request) -> Response:
        return Response(gzip.compress(json.dumps(answer).encode()), media_type="application/json",
                        headers={"content-encoding": "gzip"})

    response, record = await _one_call(tmp_path, _upstream(chat))
    assert response.json() == answer and "content-encoding" not in response.headers
    assert record["response"] == answer


async def test_a_stream_in_another_charset_is_recorded_as_that_charset_decodes(tmp_path: Path):
    async def chat(request: Request) -> Response:
        async def events():
            yield f"data: {json.dumps(CHUNK, ensure_ascii=False)}\n\n".encode("latin-1")
            yield b"data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream; charset=latin-1")

    response, record = await _one_call(tmp_path, _upstream(chat), stream=True)
    assert record["response"]["choices"][0]["message"]["content"] == "café"
    # the events are re-framed as UTF-8, and the header says so: the harness decodes the same text
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    first = response.text.split("\n\n")[0].removeprefix("data: ")
    assert json.loads(first)["choices"][0]["delta"]["content"] == "café"


@pytest.mark.parametrize("cut", [None, 3, 17])  # whole, or cut after that many of the integer's 25 digits
async def test_a_stream_event_holding_an_integer_beyond_64_bits_is_recorded_and_forwarded_exactly(tmp_path, cut):
    big = 2 ** 80 + 1
    event = f"data: {json.dumps({**CHUNK, 'created': big})}\n\n".encode()
    split = None if cut is None else event.index(str(big).encode()) + cut

    async def chat(request: Request) -> Response:
        async def events():
            for piece in ([event] if split is None else [event[:split], event[split:]]):
                yield piece
                await asyncio.sleep(0.05)  # a read of its own
            yield b"data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")

    response, record = await _one_call(tmp_path, _upstream(chat), stream=True)
    assert record["response"]["created"] == big
    assert json.loads(response.text.split("\n\n")[0].removeprefix("data: "))["created"] == big
