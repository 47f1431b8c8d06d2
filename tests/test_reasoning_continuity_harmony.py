"""On-policy continuity for gpt-oss Harmony, on the genuine encoding (openai-harmony, o200k offline).

The local backend serves Harmony (`tokenizer="harmony"`, reasoning parser `openai_gptoss`); the script
policy samples analysis + a commentary tool call per step, then analysis + a final answer. Harmony
re-renders a sampled tool call's header and drops analysis before a final answer; the proxy bridges
the tool loop from the sampled ids and lets a new user turn start a new sequence.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from rollout_dataset.backend import LocalBackend
from rollout_dataset.export import export_rollout
from rollout_dataset.export.continuity import continuity_of
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.proxy.on_policy_harmony import parse_harmony_reply, reply_change

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command",
                                           "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}]
STEPS = [{"reasoning": f"Plan {k}.", "tool_calls": [{"name": "bash", "arguments": {"cmd": f"echo {k}"}}]}
         for k in range(3)] + [{"reasoning": "All done.", "text": "Done."}, {"reasoning": "Again.", "text": "Yes."}]


async def _session(tmp_path: Path, keep_analysis: bool) -> list[dict]:
    async with LocalBackend(tokenizer="harmony", policy="script", script={"steps": STEPS},
                            reasoning_parser="openai_gptoss", harmony_start_date="2026-12-04") as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path, on_policy=True) as proxy:
            url = proxy.session_base_url("s") + "/chat/completions"
            async with httpx.AsyncClient(timeout=60) as client:
                messages: list[dict] = [{"role": "user", "content": "run three commands"}]
                for k in range(5):
                    response = await client.post(url, json={"model": "local", "messages": messages, "tools": TOOLS})
                    assert response.status_code == 200, response.text
                    reply = response.json()["choices"][0]["message"]
                    sent = {"role": "assistant", "content": reply["content"]}
                    if keep_analysis:
                        sent["reasoning"] = reply["reasoning"]
                    if reply.get("tool_calls"):
                        sent["tool_calls"] = reply["tool_calls"]
                    messages.append(sent)
                    for call in reply.get("tool_calls") or []:
                        messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"out {k}"})
                    if not reply.get("tool_calls"):
                        messages.append({"role": "user", "content": "sure?"})
            return read_trace(proxy.trace_path("s"), seal=proxy.seal("s"))


def _statuses(records: list[dict]) -> list[tuple[str, str | None]]:
    by_index = continuity_of(records)
    return [(by_index[r["index"]]["status"], by_index[r["index"]]["reason"]) for r in records]


def _held(records: list[dict]) -> list[bool]:
    return [child["prompt_token_ids"][: len(p := parent["prompt_token_ids"] + parent["completion_token_ids"])] == p
            for parent, child in zip(records, records[1:])]


async def test_a_harmony_tool_loop_whose_harness_drops_analysis_gets_it_back(tmp_path):
    records = await _session(tmp_path, keep_analysis=False)
    assert _statuses(records)[:4] == [("exact", "new_conversation")] + [("repaired", "harness_dropped_reasoning")] * 3
    assert _held(records)[:3] == [True, True, True]  # each prompt holds every id sampled before it


async def test_a_harmony_tool_loop_that_keeps_analysis_is_bridged_over_the_rerendered_call_header(tmp_path):
    records = await _session(tmp_path, keep_analysis=True)
    assert _statuses(records)[1:4] == [("repaired", "harmony_rerendered")] * 3
    assert _held(records)[:3] == [True, True, True]


async def test_a_new_user_turn_after_a_final_answer_is_reasoning_dropped_a_new_sequence(tmp_path):
    records = await _session(tmp_path, keep_analysis=False)
    assert _statuses(records)[4] == ("reasoning_dropped", "template_dropped_reasoning")
    assert _held(records)[3] is False  # analysis dropped, <|end|> for <|return|>: the server's render was sent


async def test_a_harmony_tool_loop_exports_as_one_trainable_sequence_and_the_next_user_turn_as_another(tmp_path):
    from rollout_dataset.tokenizers import load_tokenizer

    records = await _session(tmp_path, keep_analysis=False)
    doc = export_rollout(records, session_id="s", capture_level="tokens", tokenizer=load_tokenizer("harmony"))
    assert doc["stats"]["n_trainable_sequences"] == 2
    assert [f for f in doc["findings"] if f["code"] == "prefix_break" and "not_repaired" in f["message"]] == []


def test_a_reply_the_harness_edited_is_content_changed_not_restored():
    sampled = parse_harmony_reply("<|channel|>analysis<|message|>Plan.<|end|><|start|>assistant to=functions.bash"
                                  '<|channel|>commentary <|constrain|>json<|message|>{"cmd": "ls"}<|call|>')
    call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": '{"cmd":"ls"}'}}
    assert reply_change(sampled, {"role": "assistant", "content": None, "tool_calls": [call]}) == "reasoning_dropped"
    assert reply_change(sampled, {"role": "assistant", "content": None, "reasoning": "Plan.",
                                  "tool_calls": [call]}) == "same"
    edited = {**call, "function": {"name": "bash", "arguments": '{"cmd": "rm -rf /"}'}}
    assert reply_change(sampled, {"role": "assistant", "content": None, "tool_calls": [edited]}) == "content_changed"


def test_a_rerendered_tool_call_header_is_named_harmony_rerendered_not_content_changed():
    from rollout_dataset.reasoning import explain_reply_break

    sampled = ("<|channel|>analysis<|message|>Plan.<|end|><|start|>assistant to=functions.bash"
               '<|channel|>commentary <|constrain|>json<|message|>{"cmd": "ls"}<|call|>')
    call = ' to=functions.bash<|channel|>commentary json<|message|>{"cmd": "ls"}<|call|><|start|>functions.bash'
    assert explain_reply_break(sampled, "<|channel|>analysis<|message|>Plan.<|end|><|start|>assistant" + call) == \
        "harmony_rerendered"
    assert explain_reply_break(sampled, call) == "reasoning_dropped"  # the analysis is missing too
    assert explain_reply_break(sampled, call.replace('"ls"', '"rm"')) == "content_changed"


async def test_a_server_whose_tokenize_renders_otherwise_than_its_chat_endpoint_is_not_bridged():
    from rollout_dataset.proxy.on_policy import PastCall
    from rollout_dataset.proxy.on_policy_harmony import TOKENIZE_DIFFERS, harmony_bridge

    start_assistant, call = [200006, 173781], [200012]
    chat_render = [1, 2, 3] + start_assistant  # what the chat endpoint generated the first call from
    jinja_render = [1, 9, 3] + start_assistant  # what /tokenize says for the same messages

    async def tokenize(body, messages, headers):
        return jinja_render, None

    async def detokenize(model, ids, headers):
        return "<|start|>assistant" if ids == start_assistant else "<|call|>"

    first = [{"role": "user", "content": "w"}]
    parent = PastCall(0, ["k"], "", first, chat_render, [5] + call, "tool_calls")
    known: dict = {}
    messages = first + [{"role": "assistant", "content": None, "tool_calls": []}, {"role": "tool", "content": "x"}]
    decided = await harmony_bridge(tokenize, detokenize, known, {"model": "m"}, messages, parent, [])
    assert (decided.status, decided.reason, known) == ("not_repaired", TOKENIZE_DIFFERS, {"m": TOKENIZE_DIFFERS})


def _tokenize_writing_tool_results_as_openai_harmony_0_0_8(backend: LocalBackend) -> None:
    """Make the backend's /tokenize disagree with its chat endpoint on later turns only: tool results'
    headers in `openai-harmony` 0.0.8's form, where the chat endpoint writes vLLM's (oss-harmony 0.0.11)."""
    import json
    import re

    from starlette.responses import JSONResponse
    from starlette.routing import Route

    original = next(r for r in backend.app.router.routes if getattr(r, "path", None) == "/tokenize").endpoint
    tok = backend.tokenizer

    async def tokenize(request):
        answer = json.loads((await original(request)).body)
        text = re.sub(r"<\|start\|>(functions\.\w+)<\|channel\|>commentary to=assistant<\|message\|>",
                      r"<|start|>\1 to=assistant<|channel|>commentary<|message|>", tok.decode(answer["tokens"]))
        return JSONResponse({**answer, "tokens": tok.encode(text), "count": len(tok.encode(text))})

    backend.app.router.routes.insert(0, Route("/tokenize", tokenize, methods=["POST"]))


async def _conversation(tmp_path: Path, steps: list[dict], extra: dict, disagree_later: bool = False) -> list[dict]:
    """One call per step: a tool call's result is sent back, a final answer is followed by a new user turn;
    the harness drops the analysis."""
    async with LocalBackend(tokenizer="harmony", policy="script", script={"steps": steps},
                            reasoning_parser="openai_gptoss", harmony_start_date="2026-12-04") as backend:
        if disagree_later:
            _tokenize_writing_tool_results_as_openai_harmony_0_0_8(backend)
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path, on_policy=True) as proxy:
            url = proxy.session_base_url("s") + "/chat/completions"
            async with httpx.AsyncClient(timeout=60) as client:
                messages: list[dict] = [{"role": "user", "content": "weather?"}]
                for _ in steps:
                    response = await client.post(url, json={"model": "local", "messages": messages, "tools": TOOLS,
                                                            **extra})
                    assert response.status_code == 200, response.text
                    reply = response.json()["choices"][0]["message"]
                    messages.append({"role": "assistant", "content": reply["content"],
                                     **({"tool_calls": reply["tool_calls"]} if reply.get("tool_calls") else {})})
                    for call in reply.get("tool_calls") or []:
                        messages.append({"role": "tool", "tool_call_id": call["id"], "content": "sunny"})
                    if not reply.get("tool_calls"):
                        messages.append({"role": "user", "content": "sure?"})
            return read_trace(proxy.trace_path("s"), seal=proxy.seal("s"))


async def test_a_later_call_the_chat_endpoint_rendered_is_checked_against_tokenize_too(tmp_path):
    steps = [{"reasoning": "Need it.", "tool_calls": [{"name": "bash", "arguments": {"cmd": "weather"}}]},
             {"reasoning": "Got it.", "text": "Sunny."}, {"text": "Yes."}, {"text": "Sure."}]
    records = await _conversation(tmp_path, steps, {}, disagree_later=True)
    # call 2 (a new user turn) was sent as the harness sent it: the chat endpoint rendered its tool result,
    # and /tokenize renders that result otherwise, so call 3 and every later call are not bridged
    assert _statuses(records)[2][0] == "reasoning_dropped"
    assert _statuses(records)[3] == ("not_repaired", "tokenize_differs")


async def test_a_harness_that_sets_reasoning_effort_is_still_bridged(tmp_path):
    steps = [{"reasoning": f"Plan {k}.", "tool_calls": [{"name": "bash", "arguments": {"cmd": f"echo {k}"}}]}
             for k in range(2)]
    records = await _conversation(tmp_path, steps, {"reasoning_effort": "high"})
    assert _statuses(records)[1] == ("repaired", "harness_dropped_reasoning")  # /tokenize rendered "Reasoning: high"
