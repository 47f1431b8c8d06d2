"""Opt-in: on-policy mode's two server parts, the local backend against a genuine vLLM 0.32 server,
key by key; and the proxy's mode against that server (set REAL_VLLM_URL, see test_real_vllm_wire.py)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from rollout_dataset.proxy import CaptureProxy, read_trace

from test_real_vllm_wire import HELLO, PLAIN, REAL, TOOLS, _both, _shape, _stream_shapes, pair  # noqa: F401

pytestmark = [pytest.mark.real_vllm, pytest.mark.skipif(not REAL, reason="set REAL_VLLM_URL to compare with vLLM")]

RENDER_CASES = {
    "generation_prompt": {"messages": HELLO},
    "no_generation_prompt": {"messages": HELLO, "add_generation_prompt": False},
    "tools": {"messages": HELLO, "tools": TOOLS},
    "template_kwargs": {"messages": HELLO, "chat_template_kwargs": {"enable_thinking": False}},
    "token_strs": {"messages": HELLO, "return_token_strs": True},
}


@pytest.mark.parametrize("case", sorted(RENDER_CASES))
async def test_tokenize_with_messages_has_vllms_keys_and_types(pair, case):
    real, local = await _both(pair, "/tokenize", RENDER_CASES[case], root=True)
    assert real.status_code == local.status_code == 200
    assert _shape(local.json()) == _shape(real.json())
    for answer in (real.json(), local.json()):
        assert answer["count"] == len(answer["tokens"])


async def _own_render(h, base_root: str, model: str) -> list[int]:
    out = await h.post(base_root + "/tokenize", json={"model": model, "messages": HELLO})
    return out.json()["tokens"]


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_with_given_prompt_ids_has_vllms_keys_and_echoes_the_ids(pair, stream):
    h, local, real_model = pair
    bodies = {}
    for name, root, model in (("real", REAL[: -len("/v1")], real_model), ("local", local.root_url, "local")):
        ids = await _own_render(h, root, model)
        ids = ids[:-1] + ids  # not the render of the messages: the server must use them as given
        bodies[name] = {"messages": HELLO, "return_token_ids": True, "max_tokens": 4, "stream": stream,
                        "kv_transfer_params": {"prompt_token_ids": ids}}
    real = await h.post(f"{REAL}/chat/completions", json={**bodies["real"], "model": real_model,
                                                          "structured_outputs": {"regex": PLAIN}})
    mine = await h.post(f"{local.base_url}/chat/completions", json={**bodies["local"], "model": "local"})
    assert real.status_code == mine.status_code == 200
    if stream:
        assert _stream_shapes(mine.text) == _stream_shapes(real.text)
        firsts = [json.loads(r.text.split("\n")[0][6:]) for r in (real, mine)]
    else:
        assert _shape(mine.json()) == _shape(real.json())
        firsts = [real.json(), mine.json()]
    for first, name in zip(firsts, ("real", "local")):
        assert first["prompt_token_ids"] == bodies[name]["kv_transfer_params"]["prompt_token_ids"]


@pytest.mark.parametrize("ids", [[], [1, -2], "abc", [10 ** 9]], ids=["empty", "negative", "string", "unknown"])
async def test_bad_prompt_ids_are_refused_as_vllm_does(pair, ids):
    h, local, real_model = pair
    body = {"messages": HELLO, "kv_transfer_params": {"prompt_token_ids": ids}}
    real = await h.post(f"{REAL}/chat/completions", json={**body, "model": real_model})
    mine = await h.post(f"{local.base_url}/chat/completions", json={**body, "model": "local"})
    assert mine.status_code == real.status_code == 400
    assert mine.json() == real.json()


async def test_the_proxy_mode_makes_every_turn_extend_the_previous_one_on_vllm(tmp_path: Path):
    async with httpx.AsyncClient(timeout=120) as h:
        model = (await h.get(f"{REAL}/models")).json()["data"][0]["id"]
        async with CaptureProxy(REAL, tmp_path, on_policy=True) as proxy:
            messages = [{"role": "user", "content": "Tell me something."}]
            for turn in range(3):
                r = await h.post(proxy.session_base_url("s") + "/chat/completions",
                                 json={"model": model, "messages": messages, "max_tokens": 12, "seed": turn})
                assert r.status_code == 200 and r.json()["prompt_token_ids"] is None  # the harness did not ask
                messages = messages + [{"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]},
                                       {"role": "user", "content": f"More ({turn})."}]
            records = read_trace(proxy.trace_path("s"))
    for parent, child in zip(records, records[1:]):
        status = child["continuity"]["status"]
        if child["continuity"]["reason"] == "content_changed":
            continue  # a sampled text that does not round-trip is left as the server renders it
        assert status in ("exact", "repaired"), child["continuity"]
        head = parent["prompt_token_ids"] + parent["completion_token_ids"]
        assert child["prompt_token_ids"][: len(head)] == head
