"""Opt-in: real harnesses against a genuine vLLM 0.32 serving the scripted Qwen3 reasoning model, on-policy.

Each harness needs a server serving its script (`real_model/build_scripted_qwen3.py --script HARNESS
--max-len 32768`, served with `--max-model-len 32768 --reasoning-parser qwen3 --enable-auto-tool-choice
--tool-call-parser hermes`): a tool call that runs `echo penguin`, then a final answer (or mini-swe-agent's
submit command, or terminus-2's `task_complete`), so each harness finishes in a few turns. Set
`REAL_VLLM_REASONING_HARNESSES` to `HARNESS=URL[,HARNESS=URL...]` (e.g.
`terminus-2=http://127.0.0.1:18100/v1,opencode=http://127.0.0.1:18101/v1`); harnesses not named are skipped.

With `--on-policy`: no turn is `not_repaired`; a tool loop under one user message is one sequence
(opencode, Claude Code, mini-swe-agent: every later turn `repaired`); terminus-2, whose every observation
is a user message, starts a new sequence at each, `reasoning_dropped`. A terminus-2 server with a short
context (`--max-model-len 4096`: terminus-2 then hands its work off to a new conversation before each
turn) is named `terminus-2-handoff`: its handoff calls read `exact`/`reply_pasted`, never `not_repaired`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.genuine_templates import qwen3_tokenizer_dir

from rollout_dataset.capture import capture_rollout
from rollout_dataset.recipes.coding import CaptureConfig

SERVERS = dict(item.split("=", 1) for item in os.environ.get("REAL_VLLM_REASONING_HARNESSES", "").split(",") if "=" in item)
pytestmark = [pytest.mark.real_vllm, pytest.mark.harness,
              pytest.mark.skipif(not SERVERS, reason="set REAL_VLLM_REASONING_HARNESSES to run harnesses on vLLM")]


def capture(tmp_path: Path, name: str) -> tuple[dict, list[dict], dict]:
    """One on-policy capture of harness `name` against its server; returns summary, records, rollout.json."""
    if name not in SERVERS:
        pytest.skip(f"no server for {name} in REAL_VLLM_REASONING_HARNESSES")
    harness = name.removesuffix("-handoff")
    extra = {}
    if harness == "terminus-2":
        from rollout_dataset.tasks.harbor_format import HARBOR_BUILTIN_SOURCE

        extra["tasks"] = HARBOR_BUILTIN_SOURCE
    out = tmp_path / "art"
    result = capture_rollout(CaptureConfig(out_dir=out, base_url=SERVERS[name], harness=harness, on_policy=True,
                                           tokenizer=str(qwen3_tokenizer_dir()), timeout_s=400, **extra))
    assert result.errors == []
    read = lambda f: json.loads((out / f).read_text())  # noqa: E731
    return read("summary.json"), read("trace.json")["calls"], read("rollout.json")


def agent_sequences(document: dict) -> list[dict]:
    return [s for s in document["sequences"] if s["role"] == "agent"]


@pytest.mark.parametrize("name", ["opencode", "claude-code", "mini-swe-agent"])
def test_a_tool_loop_finishes_as_one_sequence_with_no_turn_not_repaired(tmp_path, name):
    summary, _, document = capture(tmp_path, name)
    continuity, n_agent = summary["continuity"], summary["agent_turns"]
    assert summary["stop_reason"] == "harness_exit" and n_agent >= 2
    assert continuity["not_repaired"] == 0 and continuity["repaired"] == n_agent - 1
    assert len(agent_sequences(document)) == 1


def test_terminus_2_finishes_and_each_observation_turn_is_reasoning_dropped(tmp_path):
    summary, records, document = capture(tmp_path, "terminus-2")
    statuses = [r["continuity"]["status"] for r in records]
    assert summary["stop_reason"] == "harness_exit"
    assert statuses == ["exact"] + ["reasoning_dropped"] * (len(records) - 1) and len(records) >= 3
    assert len(agent_sequences(document)) == len(records)


def test_terminus_2_handoffs_start_new_sequences_never_not_repaired(tmp_path):
    _, records, _ = capture(tmp_path, "terminus-2-handoff")
    reasons = [(r["continuity"]["status"], r["continuity"]["reason"]) for r in records]
    assert ("exact", "reply_pasted") in reasons
    assert not [r for r in reasons if r[0] == "not_repaired"]
