"""The local backend over HTTP on 127.0.0.1 (port 0), driven with the `openai` SDK and httpx."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import openai
import pytest

from rollout_dataset.backend import bigram_for_tokenizer
from rollout_dataset.tokenizers import chat_prompt_ids

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
                                           "parameters": {"type": "object",
                                                          "properties": {"command": {"type": "string"}},
                                                          "required": ["command"]}}}]
STEPS = [{"text": "Let me look.", "tool_calls": [{"name": "bash", "arguments": {"command": "ls -la"}}]},
         "There are two files."]
USER = [{"role": "user", "content": "What is here?"}]
IDS = {"return_token_ids": True}


def _client(backend) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=backend.base_url, api_key="test-key", max_retries=0)


@pytest.fixture
async def scripted(start_local_backend):
    return await start_local_backend(policy="script", script=STEPS)


async def test_models_lists_the_served_model(local_backend):
    models = await _client(local_backend).models.list()
    assert [m.id for m in models.data] == ["local"]
    assert local_backend.base_url.endswith("/v1") and local_backend.base_url.startswith("http://127.0.0.1:")


async def test_chat_echo_returns_prompt_and_completion_ids(local_backend, builtin_tokenizer):
    r = await _client(local_backend).chat.completions.create(model="local", messages=USER, extra_body=IDS)
    assert r.choices[0].message.content == "What is here?"
    assert r.choices[0].finish_reason == "stop"
    raw = r.model_dump()
    assert raw["prompt_token_ids"] == chat_prompt_ids(builtin_tokenizer, USER)
    ids = raw["choices"][0]["token_ids"]
    assert ids[-1] == builtin_tokenizer.eos_token_id
    assert builtin_tokenizer.decode(ids[:-1]) == "What is here?"
    assert r.usage.prompt_tokens == len(raw["prompt_token_ids"]) and r.usage.completion_tokens == len(ids)


async def test_token_id_keys_are_null_when_not_requested(local_backend):
    async with httpx.AsyncClient() as h:
        body = (await h.post(f"{local_backend.base_url}/chat/completions", json={"messages": USER})).json()
        assert body["prompt_token_ids"] is None and body["choices"][0]["token_ids"] is None
        text = (await h.post(f"{local_backend.base_url}/chat/completions",
                             json={"messages": USER, "stream": True})).text
    chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    assert "prompt_token_ids" in chunks[0] and chunks[0]["prompt_token_ids"] is None
    assert all(c["choices"][0]["token_ids"] is None for c in chunks[1:])


async def test_logprobs_are_the_bigram_models_and_recomputable(local_backend, builtin_tokenizer):
    r = await _client(local_backend).chat.completions.create(
        model="local", messages=USER, logprobs=True, top_logprobs=3, extra_body=IDS)
    raw = r.model_dump()
    model = bigram_for_tokenizer(builtin_tokenizer)
    ids = raw["choices"][0]["token_ids"]
    prev = [raw["prompt_token_ids"][-1]] + ids[:-1]
    content = raw["choices"][0]["logprobs"]["content"]
    assert [c["logprob"] for c in content] == pytest.approx([model.logprob(p, t) for p, t in zip(prev, ids)])
    assert len({round(c["logprob"], 6) for c in content}) > 1
    for c, p in zip(content, prev):
        assert len(c["top_logprobs"]) == 3 and c["top_logprobs"][0]["token"] == c["token"]
        best = model.top(p, 1)[0]
        assert max(t["logprob"] for t in c["top_logprobs"]) == pytest.approx(max(best[1], c["logprob"]))


async def test_return_tokens_as_token_ids_reports_token_id_strings(local_backend):
    r = await _client(local_backend).chat.completions.create(
        model="local", messages=USER, logprobs=True, extra_body={**IDS, "return_tokens_as_token_ids": True})
    raw = r.model_dump()
    assert [c["token"] for c in raw["choices"][0]["logprobs"]["content"]] == [
        f"token_id:{i}" for i in raw["choices"][0]["token_ids"]]


async def test_streamed_chat_matches_the_non_streamed_one(local_backend):
    client = _client(local_backend)
    full = (await client.chat.completions.create(model="local", messages=USER, logprobs=True, seed=3,
                                                 extra_body=IDS)).model_dump()
    stream = await client.chat.completions.create(model="local", messages=USER, logprobs=True, seed=3, stream=True,
                                                  stream_options={"include_usage": True}, extra_body=IDS)
    chunks = [c.model_dump() async for c in stream]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[0]["prompt_token_ids"] == full["prompt_token_ids"]
    body = [c for c in chunks[1:] if c["choices"]]
    assert "".join(c["choices"][0]["delta"]["content"] or "" for c in body) == full["choices"][0]["message"]["content"]
    assert [i for c in body for i in c["choices"][0]["token_ids"]] == full["choices"][0]["token_ids"]
    lps = [e["logprob"] for c in body for e in c["choices"][0]["logprobs"]["content"]]
    assert lps == [e["logprob"] for e in full["choices"][0]["logprobs"]["content"]]
    assert body[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(lps)


async def test_stream_without_include_usage_has_no_usage_chunk(local_backend):
    stream = await _client(local_backend).chat.completions.create(model="local", messages=USER, stream=True)
    chunks = [c async for c in stream]
    assert all(c.choices for c in chunks) and chunks[-1].choices[0].finish_reason == "stop"


async def test_max_tokens_gives_finish_reason_length(local_backend):
    r = await _client(local_backend).chat.completions.create(model="local", messages=USER, max_tokens=2,
                                                             extra_body=IDS)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 2
    assert len(r.model_dump()["choices"][0]["token_ids"]) == 2


async def test_max_completion_tokens_is_honoured(local_backend):
    r = await _client(local_backend).chat.completions.create(model="local", messages=USER, max_completion_tokens=1)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 1


async def test_stop_string_cuts_the_content(local_backend):
    r = await _client(local_backend).chat.completions.create(model="local", messages=USER, stop=[" is"])
    assert r.choices[0].message.content == "What"
    assert r.choices[0].finish_reason == "stop" and r.model_dump()["choices"][0]["stop_reason"] == " is"


async def test_n_gives_several_choices(local_backend):
    r = await _client(local_backend).chat.completions.create(model="local", messages=USER, n=2)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].message.content == r.choices[1].message.content


async def test_scripted_tool_call_is_parsed_and_streamed_like_hermes(scripted):
    client = _client(scripted)
    r = await client.chat.completions.create(model="local", messages=USER, tools=TOOLS, extra_body=IDS)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert msg.content == "Let me look.\n"
    assert msg.tool_calls[0].function.name == "bash" and msg.tool_calls[0].id.startswith("chatcmpl-tool-")
    assert json.loads(msg.tool_calls[0].function.arguments) == {"command": "ls -la"}
    stream = await client.chat.completions.create(model="local", messages=USER, tools=TOOLS, stream=True,
                                                  extra_body=IDS)
    chunks = [c async for c in stream]
    deltas = [c.choices[0].delta for c in chunks]
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert "".join(d.content or "" for d in deltas) == "Let me look.\n"
    assert calls[0].function.name == "bash"
    assert json.loads("".join(tc.function.arguments or "" for tc in calls)) == {"command": "ls -la"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    streamed_ids = [i for c in chunks[1:] for i in c.model_dump()["choices"][0]["token_ids"]]
    assert streamed_ids == r.model_dump()["choices"][0]["token_ids"]


async def test_tool_round_trip_prompt_starts_with_previous_prompt_and_completion(scripted):
    client = _client(scripted)
    first = await client.chat.completions.create(model="local", messages=USER, tools=TOOLS, extra_body=IDS)
    msg = first.choices[0].message
    history = USER + [msg.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}),
                      {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "a.py\nb.py"}]
    second = await client.chat.completions.create(model="local", messages=history, tools=TOOLS, extra_body=IDS)
    a, b = first.model_dump(), second.model_dump()
    prefix = a["prompt_token_ids"] + a["choices"][0]["token_ids"]
    assert b["prompt_token_ids"][: len(prefix)] == prefix
    assert second.choices[0].message.content == "There are two files."


async def test_tool_calls_are_not_parsed_when_tool_choice_is_none(scripted):
    r = await _client(scripted).chat.completions.create(model="local", messages=USER, tools=TOOLS,
                                                        tool_choice="none")
    assert r.choices[0].finish_reason == "stop" and not r.choices[0].message.tool_calls
    assert "<tool_call>" in r.choices[0].message.content


async def test_same_seed_gives_the_same_ids(scripted):
    client = _client(scripted)
    a, b = [(await client.chat.completions.create(model="local", messages=USER, tools=TOOLS, seed=7,
                                                  extra_body=IDS)).model_dump()["choices"][0]["token_ids"]
            for _ in range(2)]
    assert a == b


async def test_chat_template_kwargs_reach_the_template(local_backend, builtin_tokenizer):
    r = await _client(local_backend).chat.completions.create(
        model="local", messages=USER, extra_body={**IDS, "chat_template_kwargs": {"enable_thinking": False}})
    think_end = builtin_tokenizer.convert_tokens_to_ids("</think>")
    assert think_end in r.model_dump()["prompt_token_ids"]


async def test_completions_stream_and_not(local_backend, builtin_tokenizer):
    client = _client(local_backend)
    r = await client.completions.create(model="local", prompt="hello world", max_tokens=50, logprobs=2,
                                        extra_body=IDS)
    raw = r.model_dump()
    assert r.choices[0].text == "hello world" and r.choices[0].finish_reason == "stop"
    assert raw["choices"][0]["prompt_token_ids"] == builtin_tokenizer.encode("hello world")
    assert len(raw["choices"][0]["logprobs"]["tokens"]) == len(raw["choices"][0]["token_ids"])
    stream = await client.completions.create(model="local", prompt="hello world", max_tokens=50, stream=True,
                                             stream_options={"include_usage": True}, extra_body=IDS)
    chunks = [c.model_dump() async for c in stream]
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == "hello world"
    assert chunks[0]["choices"][0]["prompt_token_ids"] == raw["choices"][0]["prompt_token_ids"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == r.usage.completion_tokens


async def test_completions_default_to_16_tokens(local_backend):
    r = await _client(local_backend).completions.create(model="local", prompt="word " * 40)
    assert r.usage.completion_tokens == 16 and r.choices[0].finish_reason == "length"


async def test_tokenize_and_detokenize_at_the_root(local_backend, builtin_tokenizer):
    async with httpx.AsyncClient(base_url=local_backend.root_url) as h:
        t = (await h.post("/tokenize", json={"prompt": "hello world", "return_token_strs": True})).json()
        assert t == {"count": 2, "max_model_len": 131072, "tokens": builtin_tokenizer.encode("hello world"),
                     "token_strs": builtin_tokenizer.convert_ids_to_tokens(t["tokens"])}
        m = (await h.post("/tokenize", json={"messages": USER, "tools": TOOLS})).json()
        assert m["tokens"] == chat_prompt_ids(builtin_tokenizer, USER, TOOLS)
        d = (await h.post("/detokenize", json={"tokens": m["tokens"]})).json()
        assert d["prompt"].startswith("<|im_start|>system\n# Tools")
        assert (await h.get("/health")).status_code == 200


@pytest.mark.parametrize(
    "path, body, status, param",
    [
        ("/v1/chat/completions", {"model": "nope", "messages": USER}, 404, "model"),
        ("/v1/chat/completions", {"messages": USER, "top_logprobs": 2}, 400, "top_logprobs"),
        ("/v1/chat/completions", {"messages": USER, "max_tokens": 10**6}, 400, "max_tokens"),
        ("/v1/chat/completions", {"messages": USER, "temperature": -1}, 400, "temperature"),
        ("/v1/chat/completions", {"messages": "x"}, 400, "body.messages"),
        ("/v1/chat/completions", {"messages": USER, "stream": True, "prompt_logprobs": 1}, 400, "prompt_logprobs"),
        ("/v1/completions", {"model": "local"}, 400, "prompt"),
        ("/v1/chat/completions", {"messages": USER, "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/chat/completions", {"messages": USER, "stream_options": {"include_usage": True}}, 400,
         "stream_options"),
        ("/v1/chat/completions", {"messages": USER, "logprobs": True, "top_logprobs": 21}, 400, "logprobs"),
        ("/detokenize", {"tokens": "x"}, 400, "body.tokens"),
    ],
)
async def test_bad_requests_get_vllms_error_body(local_backend, path, body, status, param):
    async with httpx.AsyncClient(base_url=local_backend.root_url) as h:
        r = await h.post(path, json=body)
    assert r.status_code == status
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == status and err["param"] == param and err["message"]


async def test_malformed_json_is_a_400_and_the_server_keeps_serving(local_backend):
    async with httpx.AsyncClient(base_url=local_backend.base_url) as h:
        r = await h.post("/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["type"] == "Bad Request"
        assert (await h.post("/chat/completions", json={"messages": USER})).status_code == 200
        assert (await h.get("/nothing")).json() == {"detail": "Not Found"}


async def test_openai_sdk_raises_on_a_bad_request(local_backend):
    with pytest.raises(openai.NotFoundError):
        await _client(local_backend).chat.completions.create(model="other", messages=USER)


def test_threaded_backend_serves_sync_callers(local_backend_thread):
    r = httpx.post(f"{local_backend_thread.base_url}/chat/completions", json={"messages": USER})
    assert r.json()["choices"][0]["message"]["content"] == "What is here?"


def test_serve_command_prints_its_base_url_once_listening(tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps(["scripted hello"]))
    proc = subprocess.Popen([sys.executable, "-m", "rollout_dataset.cli", "serve", "--port", "0", "--policy", "script",
                             "--script", str(script), "--served-model-name", "m"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        r = httpx.post(f"{url}/chat/completions", json={"model": "m", "messages": USER}, timeout=30)
        assert r.json()["choices"][0]["message"]["content"] == "scripted hello"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.returncode == 0


def test_start_in_thread_on_the_class_builds_the_backend_from_keywords():
    from rollout_dataset.backend import LocalBackend

    with LocalBackend.start_in_thread(policy="script", script=["from the class"], served_model_name="m") as backend:
        r = httpx.post(f"{backend.base_url}/chat/completions", json={"model": "m", "messages": USER})
    assert r.json()["choices"][0]["message"]["content"] == "from the class"


async def test_prompt_filling_the_context_is_refused_and_output_is_clamped(start_local_backend):
    backend = await start_local_backend(policy="echo", max_model_len=64)
    async with httpx.AsyncClient(base_url=backend.base_url) as h:
        r = await h.post("/completions", json={"prompt": "word " * 100})
        assert r.status_code == 400 and r.json()["error"]["param"] == "input_tokens"
        r = await h.post("/completions", json={"prompt": "word " * 40, "max_tokens": 60})
        body = r.json()
        assert body["usage"]["prompt_tokens"] < 64
        assert body["usage"]["total_tokens"] == 64 and body["choices"][0]["finish_reason"] == "length"


async def test_client_leaving_mid_stream_does_not_disturb_the_backend(start_local_backend):
    backend = await start_local_backend(policy="echo", token_delay=0.05)
    async with httpx.AsyncClient(base_url=backend.base_url) as h:
        async with h.stream("POST", "/chat/completions",
                            json={"messages": [{"role": "user", "content": "one two three four five six"}],
                                  "stream": True}) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    break
        r = await h.post("/chat/completions", json={"messages": USER})
    assert r.json()["choices"][0]["message"]["content"] == "What is here?"


@pytest.mark.parametrize("tool_choice, finish", [("auto", "tool_calls"), ("required", "tool_calls"),
                                                 ({"type": "function", "function": {"name": "bash"}}, "stop")])
async def test_finish_reason_follows_vllms_rule_for_each_tool_choice(scripted, tool_choice, finish):
    client = _client(scripted)
    r = await client.chat.completions.create(model="local", messages=USER, tools=TOOLS, tool_choice=tool_choice)
    assert r.choices[0].finish_reason == finish and r.choices[0].message.tool_calls
    stream = await client.chat.completions.create(model="local", messages=USER, tools=TOOLS, tool_choice=tool_choice,
                                                  stream=True)
    chunks = [c async for c in stream]
    assert chunks[-1].choices[0].finish_reason == finish


async def test_logprob_tokens_of_incomplete_characters_are_empty_as_in_vllm(start_local_backend):
    backend = await start_local_backend(policy="script", script=["é✓ ok"])
    r = await _client(backend).chat.completions.create(model="local", messages=USER, logprobs=True, top_logprobs=1)
    content = r.model_dump()["choices"][0]["logprobs"]["content"]
    assert "".join(e["token"] for e in content[:-1]) == "é✓ ok"
    assert any(e["token"] == "" and e["bytes"] == [] for e in content)
    assert content[-1]["token"] == "<|im_end|>"


async def test_listening_socket_disables_nagle_so_kept_alive_replies_are_not_delayed(local_backend):
    import socket

    assert local_backend._sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
