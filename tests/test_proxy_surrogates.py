"""A request holding a lone surrogate (``"\\ud800"``, valid JSON, no valid Unicode text) is forwarded as the
escape it came as and recorded, whatever the proxy adds to it (token ids, logprobs, output limits), on every
endpoint that re-encodes the body: never a 500 from the proxy's own encoder."""

from __future__ import annotations

import json

import httpx
import pytest
from starlette.responses import JSONResponse

from proxy_fakes import FakeVLLM, serve
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.proxy.context_fit import ContextPolicy
from rollout_dataset.proxy.responses_capture import prepare_responses

LONE = '"a\\ud800b"'  # the JSON text of a string holding a lone surrogate


class _FakeWithContext(FakeVLLM):
    """The fake model server, with vLLM's ``max_model_len`` in /v1/models (context fitting needs it)."""

    async def models(self, request):
        return JSONResponse({"object": "list", "data": [{"id": "ok", "object": "model", "max_model_len": 4096}]})


def _post(client: httpx.AsyncClient, url: str, body: str):
    return client.post(url, content=body.encode(), headers={"content-type": "application/json"})


@pytest.mark.parametrize("extra", ['"return_token_ids":false', '"logprobs":false', '"max_tokens":8'],
                         ids=["no-token-ids-asked", "no-logprobs-asked", "a-limit-the-proxy-keeps"])
async def test_a_chat_request_the_proxy_re_encodes_keeps_its_lone_surrogate(tmp_path, extra):
    fake = FakeVLLM()
    body = '{"model":"ok","messages":[{"role":"user","content":' + LONE + '}],' + extra + '}'
    async with serve(fake.app) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path, context=ContextPolicy(max_tokens_cap=4)) as proxy:
            async with httpx.AsyncClient(timeout=20) as client:
                r = await _post(client, proxy.base_url + "/chat/completions", body)
    assert r.status_code == 200, r.text
    assert fake.requests[-1]["messages"][0]["content"] == "a\ud800b"  # upstream got the same string
    assert fake.requests[-1]["return_token_ids"] is True
    (record,) = read_trace(tmp_path / "default.jsonl")
    assert record["status"] == 200 and record["request"]["messages"][0]["content"] == "a\ud800b"


def test_a_responses_body_the_proxy_re_encodes_keeps_its_lone_surrogate_as_an_escape():
    _, _, changes, body = prepare_responses({"model": "m", "input": "a\ud800b"})
    assert changes and b'"a\\ud800b"' in body  # JSON's escape: the same string upstream
    assert json.loads(body)["input"] == "a\ud800b"


async def test_context_fitting_tokenizes_a_prompt_with_a_lone_surrogate(tmp_path):
    fake = _FakeWithContext()
    body = '{"model":"ok","messages":[{"role":"user","content":' + LONE + '}],"max_tokens":100000}'
    async with serve(fake.app) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path, context=ContextPolicy(fit_context=True)) as proxy:
            async with httpx.AsyncClient(timeout=20) as client:
                r = await _post(client, proxy.base_url + "/chat/completions", body)
    assert r.status_code == 200, r.text
    (record,) = read_trace(tmp_path / "default.jsonl")
    assert record["status"] == 200 and record["upstream_changes"]["max_tokens"] < 4096, record["notes"]
    assert fake.requests[-1]["messages"][0]["content"] == "a\ud800b"
