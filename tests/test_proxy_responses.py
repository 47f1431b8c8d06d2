"""Token-exact capture of the Responses API through the proxy, against the local backend's
`/v1/responses`: the harness sees what it would see without the proxy (object by object with the
openai SDK, streaming and not), the record holds prompt ids, completion ids and logprobs, and the
graph and export treat these calls like chat calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from rollout_dataset.backend import LocalBackend
from rollout_dataset.export import export_rollout
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.schema import schema_errors

TOOLS = [{"type": "function", "name": "bash", "description": "run a command", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]
SCRIPT = [{"text": "", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}]
VOLATILE = {"id", "created_at", "call_id", "item_id"}  # differ between any two calls, proxy or not


def _stable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _stable(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_stable(v) for v in obj]
    return obj


@pytest.fixture
async def stack(tmp_path: Path):
    async with LocalBackend(policy="script", script={"steps": SCRIPT, "final": "two files."}) as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path / "traces") as proxy:
            yield backend, proxy


def sdk(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0)


async def test_non_streaming_answer_is_the_same_object_and_the_record_holds_ids_and_logprobs(stack):
    backend, proxy = stack
    kwargs = {"model": "local", "input": "say something", "instructions": "be terse", "max_output_tokens": 40}
    direct = await sdk(backend.base_url).responses.create(**kwargs)
    proxied = await sdk(proxy.base_url).responses.create(**kwargs)
    assert _stable(proxied.model_dump()) == _stable(direct.model_dump())
    assert proxied.model_dump()["input_messages"] is None and proxied.output[0].content[0].logprobs is None
    truth = (await sdk(backend.base_url).responses.create(
        **kwargs, extra_body={"enable_response_messages": True},
        include=["message.output_text.logprobs"])).model_dump()
    (record,) = read_trace(proxy.trace_path())
    assert schema_errors(record, "trace_record") == []
    assert record["upstream_changes"] == {"enable_response_messages": True,
                                          "include": ["message.output_text.logprobs"]}
    assert record["prompt_token_ids"] == truth["input_messages"][0]["tokens"]
    assert record["completion_token_ids"] == truth["output_messages"][0]["tokens"]
    assert record["per_token_logps"] == [e["logprob"] for e in truth["output"][0]["content"][0]["logprobs"]]
    assert record["capture_level"] == "tokens" and record["token_source"] == "response_messages"


async def test_streamed_events_are_the_same_and_the_record_comes_from_response_completed(stack):
    backend, proxy = stack
    kwargs = {"model": "local", "input": "say something longer please", "stream": True}

    async def events(base_url: str) -> list[dict]:
        stream = await sdk(base_url).responses.create(**kwargs)
        return [_stable(event.model_dump()) async for event in stream]

    direct, proxied = await events(backend.base_url), await events(proxy.base_url)
    assert proxied == direct and proxied[-1]["type"] == "response.completed"
    assert all(e.get("logprobs") in (None, []) for e in proxied if e["type"] == "response.output_text.delta")
    (record,) = read_trace(proxy.trace_path())
    assert record["stream"] is True and record["capture_level"] == "tokens" and record["completion_token_ids"]
    # as vLLM's stream: no logprob for the end-of-sequence token, so none are recorded, and a note says why
    assert record["per_token_logps"] is None and any("end-of-sequence" in n for n in record["notes"])
    assert record["usage"]["output_tokens"] == len(record["completion_token_ids"])


async def test_a_harness_that_asks_for_response_messages_itself_keeps_them(stack):
    _, proxy = stack
    answer = await sdk(proxy.base_url).responses.create(model="local", input="hi",
                                                        extra_body={"enable_response_messages": True})
    assert answer.model_dump()["input_messages"][0]["type"] == "raw_message_tokens"
    (record,) = read_trace(proxy.trace_path())
    assert record["upstream_changes"] == {"include": ["message.output_text.logprobs"]}


async def test_a_function_call_turn_and_its_output_export_as_one_agent_sequence(stack):
    _, proxy = stack
    client = sdk(proxy.base_url)
    first = await client.responses.create(model="local", input="list files", tools=TOOLS)
    call = [item for item in first.output if item.type == "function_call"][0]
    assert call.name == "bash" and json.loads(call.arguments) == {"command": "ls"}
    history = [{"role": "user", "content": "list files"}, call.model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": call.call_id, "output": "a.py\nb.py"}]
    second = await client.responses.create(model="local", input=history, tools=TOOLS)
    assert second.output_text == "two files."
    records = read_trace(proxy.trace_path())
    assert [r["finish_reason"] for r in records] == ["tool_calls", "stop"]
    document = export_rollout(records, session_id="s", capture_level="tokens")
    agent = [s for s in document["sequences"] if s["role"] == "agent"]
    assert len(agent) == 1 and agent[0]["n_turns"] == 2 and document["trainable"]
    assert "retokenization_skew" not in json.dumps(document)


async def test_the_openai_agents_sdk_with_its_default_responses_api_is_captured_token_exact(stack):
    agents = pytest.importorskip("agents")
    _, proxy = stack
    agents.set_tracing_disabled(True)
    ran = []

    @agents.function_tool
    def bash(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return "a.py\nb.py"

    model = agents.OpenAIResponsesModel(model="local", openai_client=sdk(proxy.session_base_url("agents")))
    agent = agents.Agent(name="coder", instructions="You are terse.", tools=[bash], model=model)
    result = await agents.Runner.run(agent, "list files")
    assert ran == ["ls"] and result.final_output == "two files."
    records = read_trace(proxy.trace_path("agents"))
    assert [r["endpoint"] for r in records] == ["/v1/responses"] * 2
    assert all(r["capture_level"] == "tokens" and r["prompt_token_ids"] and r["completion_token_ids"] for r in records)
    # vLLM's Responses API gives logprobs for output text only: the function-call turn has none
    assert records[0]["per_token_logps"] is None and any("logprobs" in n for n in records[0]["notes"])
    assert len(records[1]["per_token_logps"]) == len(records[1]["completion_token_ids"])
    document = export_rollout(records, session_id="agents", capture_level="tokens")
    agent_seqs = [s for s in document["sequences"] if s["role"] == "agent"]
    assert len(agent_seqs) == 1 and agent_seqs[0]["n_turns"] == 2


def _responses_upstream(answer: dict[str, Any] | None = None, events: list[dict[str, Any]] | None = None):
    """A model server whose `/v1/responses` answers with `answer`, or streams `events` (and nothing after)."""
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    async def responses(request):
        if events is not None:
            text = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
            return Response(text, media_type="text/event-stream")
        return Response(json.dumps(answer), media_type="application/json")

    return Starlette(routes=[Route("/v1/responses", responses, methods=["POST"])])


def _answer(output_ids: list[Any]) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": "completed", "model": "m",
            "output": [{"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": "hi", "annotations": []}]}],
            "input_messages": [{"type": "raw_message_tokens", "message": "", "tokens": [1, 2, 3]}],
            "output_messages": [{"type": "raw_message_tokens", "message": "", "tokens": output_ids}],
            "usage": {"input_tokens": 3, "output_tokens": len(output_ids), "total_tokens": 3 + len(output_ids)}}


async def _one_record(tmp_path: Path, app: Any, body: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    import httpx
    from proxy_fakes import serve

    async with serve(app) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces") as proxy:
            async with httpx.AsyncClient(timeout=10) as client:
                reply = await client.post(proxy.base_url + "/responses", json=body)
    (record,) = read_trace(proxy.trace_path())
    assert schema_errors(record, "trace_record") == []
    return reply, record


async def test_responses_token_ids_that_are_not_integers_are_ignored_and_named(tmp_path):
    reply, record = await _one_record(tmp_path, _responses_upstream(_answer(["a", None, 1.5, True])),
                                      {"model": "m", "input": "hello"})
    assert reply.status_code == 200
    assert record["completion_token_ids"] is None and record["capture_level"] == "text"
    assert any("output_messages" in note and "not integers" in note for note in record["notes"])


async def test_a_responses_stream_that_ends_before_its_final_event_is_recorded_as_cut_short(tmp_path):
    started = {**_answer([7, 8]), "status": "in_progress", "output": [], "input_messages": None,
               "output_messages": None}
    events = [{"type": "response.created", "response": started},
              {"type": "response.output_text.delta", "delta": "hi", "item_id": "m1", "output_index": 0,
               "content_index": 0, "logprobs": []}]
    _, record = await _one_record(tmp_path, _responses_upstream(events=events),
                                  {"model": "m", "input": "hello", "stream": True})
    assert record["error"]["kind"] == "upstream_disconnect"
    assert "response.completed" in record["error"]["message"]


async def test_an_answer_that_is_not_a_json_object_is_recorded_with_a_note_naming_it(tmp_path):
    reply, record = await _one_record(tmp_path, _responses_upstream([1, 2]), {"model": "m", "input": "hello"})
    assert reply.json() == [1, 2] and record["response"] == [1, 2]
    assert record["capture_level"] == "none"
    assert any("not a JSON object" in note for note in record["notes"])


async def test_responses_logprobs_that_are_not_numbers_are_named_as_such(tmp_path):
    answer = _answer([7])
    answer["output"][0]["content"][0]["logprobs"] = [{"token": "hi", "logprob": "high", "bytes": [], "top_logprobs": []}]
    _, record = await _one_record(tmp_path, _responses_upstream(answer), {"model": "m", "input": "hello"})
    assert record["per_token_logps"] is None and record["completion_token_ids"] == [7]
    assert any("not all numbers" in note for note in record["notes"]), record["notes"]
