"""`/v1/responses` on `serve --tokenizer harmony`: vLLM 0.32's gpt-oss Responses path.

The Harmony reply is parsed by the chat path's parser into Responses items: analysis -> `reasoning`,
commentary to `functions.NAME` -> `function_call`, final -> `message` (vLLM's
`vllm/entrypoints/openai/responses/harmony.py` and `streaming_events.py`). The replay test compares
the local backend with answers recorded from a genuine vLLM 0.32 serving a weight-scripted tiny
gpt-oss (`tests/data/real_vllm_harmony_responses.json`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from rollout_dataset.backend import LocalBackend, PolicyOutput

DATE = "2026-12-04"
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
SCRIPT = {"steps": [{"reasoning": "Need the weather tool.", "text": "Checking.",
                     "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                    {"reasoning": "It is sunny.", "text": "Sunny in Paris."}]}
RECORDED = json.loads((Path(__file__).parent / "data" / "real_vllm_harmony_responses.json").read_text())
_IDS = ("id", "call_id", "item_id", "created_at")


@pytest.fixture(scope="module")
def harmony():
    with LocalBackend.start_in_thread(tokenizer="harmony", policy="script", script=SCRIPT,
                                      reasoning_parser="openai_gptoss", harmony_start_date=DATE) as backend:
        yield backend


def _post(backend: LocalBackend, **body: Any) -> httpx.Response:
    return httpx.post(f"{backend.base_url}/responses", json={"model": "local", "input": "Weather in Paris?",
                                                              "tools": TOOLS, **body}, timeout=60)


def _events(backend: LocalBackend, **body: Any) -> list[dict]:
    with httpx.stream("POST", f"{backend.base_url}/responses", timeout=60,
                      json={"model": "local", "input": "Weather in Paris?", "tools": TOOLS, "stream": True,
                            **body}) as r:
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]


def _after_call(first: dict) -> list[dict]:
    call = next(item for item in first["output"] if item["type"] == "function_call")
    return [{"role": "user", "content": "Weather in Paris?"}, *first["output"],
            {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]


def test_a_tool_call_reply_is_reasoning_then_preamble_message_then_function_call_items(harmony):
    answer = _post(harmony).json()
    assert [item["type"] for item in answer["output"]] == ["reasoning", "message", "function_call"]
    reasoning, preamble, call = answer["output"]
    assert reasoning["content"] == [{"text": "Need the weather tool.", "type": "reasoning_text"}]
    assert preamble["content"][0]["text"] == "Checking."
    assert (call["name"], call["arguments"], call["status"]) == ("get_weather", '{"city": "Paris"}', "completed")
    assert "<tool_call>" not in json.dumps(answer) and "<|" not in json.dumps(answer)


def test_a_final_answer_after_the_tool_result_is_reasoning_then_output_text(harmony):
    answer = _post(harmony, input=_after_call(_post(harmony).json())).json()
    assert [(item["type"], item.get("status")) for item in answer["output"]] == [("reasoning", None),
                                                                                  ("message", "completed")]
    assert answer["output"][1]["content"][0]["text"] == "Sunny in Paris."
    assert answer["status"] == "completed"


def test_usage_counts_the_analysis_and_call_ids_as_reasoning_tokens(harmony):
    usage = _post(harmony).json()["usage"]
    assert usage["output_tokens_details"]["reasoning_tokens"] > 0
    assert usage["input_tokens_details"]["input_tokens_per_turn"] == [usage["input_tokens"]]


def test_streamed_reasoning_text_and_arguments_arrive_as_their_own_deltas(harmony):
    kinds = [e["type"] for e in _events(harmony)]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert "response.reasoning_text.delta" in kinds and "response.function_call_arguments.delta" in kinds
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta") \
        < kinds.index("response.function_call_arguments.delta")
    assert kinds[-1] == "response.completed"


def test_the_streamed_final_response_reuses_the_streamed_item_ids(harmony):
    events = _events(harmony)
    done = [e["item"]["id"] for e in events if e["type"] == "response.output_item.done"]
    assert done == [item["id"] for item in events[-1]["response"]["output"]]


def test_a_reply_cut_by_max_output_tokens_is_incomplete(harmony):
    answer = _post(harmony, max_output_tokens=4).json()
    assert (answer["status"], answer["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})


def test_output_logprobs_are_refused_as_vllm_refuses_them_for_gpt_oss(harmony):
    r = _post(harmony, include=["message.output_text.logprobs"])
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "logprobs are not supported with gpt-oss models"


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("ID" if k in _IDS else _strip(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _without_prefix_cache(answer: dict) -> dict:
    """vLLM's prefix cache wrote or read part of a repeated prompt; the backend has no cache (zeros)."""
    details = (answer.get("usage") or {}).get("input_tokens_details")
    if details:
        details.update(cached_tokens=0, cache_write_tokens=0, cached_tokens_per_turn=[0])
    return answer


class _Replay:
    """Emits the ids the genuine server's model samples."""

    run_in_thread = False

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def respond(self, request):
        return PolicyOutput(token_ids=self.ids)


@pytest.fixture(scope="module")
def replays():
    with LocalBackend.start_in_thread(tokenizer="harmony", policy=_Replay(RECORDED["call"]["token_ids"]),
                                      served_model_name="gptoss", reasoning_parser="openai_gptoss",
                                      harmony_start_date=DATE) as call, \
            LocalBackend.start_in_thread(tokenizer="harmony", policy=_Replay(RECORDED["final"]["token_ids"]),
                                         served_model_name="gptoss", reasoning_parser="openai_gptoss",
                                         harmony_start_date=DATE) as final:
        yield {"call": call, "final": final}


@pytest.mark.parametrize("model,case", [(m, c) for m in ("call", "final") for c in RECORDED[m]["cases"]])
def test_the_answer_and_stream_equal_genuine_vllm_for_the_same_sampled_ids(replays, model, case):
    recorded, backend = RECORDED[model]["cases"][case], replays[model]
    r = httpx.post(f"{backend.base_url}/responses", json=recorded["request"], timeout=60)
    assert r.status_code == recorded["status"]
    assert _strip(r.json()) == _strip(_without_prefix_cache(recorded["response"]))
    if recorded["events"]:
        with httpx.stream("POST", f"{backend.base_url}/responses", timeout=60,
                          json={**recorded["request"], "stream": True}) as s:
            events = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ")]
        for event in recorded["events"]:
            if "response" in event:
                _without_prefix_cache(event["response"])
        assert _strip(events) == _strip(recorded["events"])


FROM_VLLM_CODE = json.loads((Path(__file__).parent / "data" / "vllm_harmony_response_items.json").read_text())


@pytest.mark.parametrize("case", [c for c in FROM_VLLM_CODE if not c.startswith("_")])
def test_replies_with_analysis_give_the_items_and_events_vllm_code_gives(case):
    expected = FROM_VLLM_CODE[case]
    body = {"model": "local", "input": "w", "tools": [{"type": "function", "name": "get_weather",
                                                       "parameters": {"type": "object"}}]}
    with LocalBackend.start_in_thread(tokenizer="harmony", policy=_Replay(expected["token_ids"]),
                                      harmony_start_date=DATE) as backend:
        items = httpx.post(f"{backend.base_url}/responses", json=body, timeout=60).json()["output"]
        with httpx.stream("POST", f"{backend.base_url}/responses", json={**body, "stream": True}, timeout=60) as s:
            events = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ")][2:-1]
    for event in expected["events"]:
        event["sequence_number"] = "ID"  # vLLM numbers them when it sends them
    assert _strip(items) == _strip(expected["items"])
    assert _strip([{**e, "sequence_number": "ID"} for e in events]) == _strip(expected["events"])
