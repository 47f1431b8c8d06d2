"""On-policy mode when a harness pastes an earlier reply into a new conversation (terminus-2's handoff).

terminus-2 (Harbor) summarizes when its context runs low: a summary call, a call that asks questions in
a new conversation ("You are picking up work from a previous AI agent…"), a call that answers them, and
then the main loop goes on from ``[first message, the questions prompt, the questions reply, the
handoff]``. That last request carries a reply the model sampled, but after other messages than it was
sampled after: nothing sampled in this context comes before it, so it continues no call and a new
sequence starts (``exact``, ``reply_pasted``), never ``not_repaired``. Local backend serving Qwen3's
genuine template with vLLM 0.32's ``qwen3`` parser; the messages are this project's, in terminus-2's
shapes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.genuine_templates import qwen3_tokenizer_dir

from rollout_dataset.backend import LocalBackend
from rollout_dataset.export import export_rollout
from rollout_dataset.export.continuity import continuity_of
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.tokenizers import load_tokenizer

TASK = "Create hello.txt holding the word hello."


def reply(analysis: str, done: bool) -> dict[str, Any]:
    return {"reasoning": f"Thinking about: {analysis}", "text": json.dumps(
        {"analysis": analysis, "plan": "Type it.", "commands": [], "task_complete": done})}


@pytest.fixture(scope="module")
def qwen3():
    return load_tokenizer(str(qwen3_tokenizer_dir()))


async def run(tmp_path: Path, tokenizer: Any, requests: list[Any], n_steps: int, on_policy: bool = True,
              same: bool = False) -> tuple[list[dict], dict]:
    """Post each request (a list of messages, or a function of the replies so far) through proxy + backend."""
    steps = [reply("the same", False)] * n_steps if same else [reply(f"step {i}", False) for i in range(n_steps)]
    script = {"steps": steps, "final": "Done."}
    async with LocalBackend(tokenizer=tokenizer, policy="script", script=script, reasoning_parser="qwen3") as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path, on_policy=on_policy) as proxy:
            url = proxy.session_base_url("s") + "/chat/completions"
            replies: list[str] = []
            async with httpx.AsyncClient(timeout=60) as client:
                for request in requests:
                    messages = request(replies) if callable(request) else request
                    response = await client.post(url, json={"model": "local", "messages": messages, "max_tokens": 128})
                    assert response.status_code == 200, response.text
                    replies.append(response.json()["choices"][0]["message"]["content"])  # as LiteLLM hands it on
            records = read_trace(proxy.trace_path("s"), seal=proxy.seal("s"))
    return records, export_rollout(records, session_id="s", capture_level="tokens", tokenizer=tokenizer)


def statuses(records: list[dict]) -> list[tuple[str, str | None]]:
    by_index = continuity_of(records)
    return [(by_index[r["index"]]["status"], by_index[r["index"]]["reason"]) for r in records]


def handoff_session() -> list[Any]:
    """terminus-2's calls around one summarization (`Terminus2._summarize`), as functions of the replies."""
    first = {"role": "user", "content": f"You are an AI assistant solving tasks in a terminal.\n\nTask: {TASK}"}
    summary_prompt = "You are about to hand off your work to another AI agent. Please provide a summary."

    def loop(r: list[str]) -> list[dict]:
        return [first, {"role": "assistant", "content": r[0]}, {"role": "user", "content": "New Terminal Output:\n$ "}]

    def questions_prompt(r: list[str]) -> str:
        return (f"You are picking up work from a previous AI agent on this task:\n\n**Original Task:** {TASK}\n\n"
                f"**Summary from Previous Agent:**\n{r[2]}\n\nPlease begin by asking several questions.")

    return [
        [first],
        loop,
        lambda r: loop(r) + [{"role": "assistant", "content": r[1]}, {"role": "user", "content": summary_prompt}],
        lambda r: [{"role": "user", "content": questions_prompt(r)}],
        lambda r: loop(r) + [{"role": "assistant", "content": r[1]}, {"role": "user", "content": summary_prompt},
                             {"role": "assistant", "content": r[2]},
                             {"role": "user", "content": "The next agent has a few questions for you:\n\n" + r[3]}],
        lambda r: [first, {"role": "user", "content": questions_prompt(r)}, {"role": "assistant", "content": r[3]},
                   {"role": "user", "content": "Here are the answers the other agent provided.\n\n" + r[4]}],
        lambda r: [first, {"role": "user", "content": questions_prompt(r)}, {"role": "assistant", "content": r[3]},
                   {"role": "user", "content": "Here are the answers the other agent provided.\n\n" + r[4]},
                   {"role": "assistant", "content": r[5]}, {"role": "user", "content": "New Terminal Output:\n$ "}],
    ]


async def test_a_reply_pasted_into_a_handoff_conversation_starts_a_new_sequence_never_not_repaired(tmp_path, qwen3):
    records, doc = await run(tmp_path, qwen3, handoff_session(), 7)
    assert statuses(records) == [
        ("exact", "new_conversation"), ("reasoning_dropped", "template_dropped_reasoning"),
        ("reasoning_dropped", "template_dropped_reasoning"), ("exact", "new_conversation"),
        ("reasoning_dropped", "template_dropped_reasoning"), ("exact", "reply_pasted"),
        ("reasoning_dropped", "template_dropped_reasoning")]
    assert "call #3's messages and reply" in continuity_of(records)[5]["detail"]
    agent = [s for s in doc["sequences"] if s["role"] == "agent"]
    assert len(agent) == 7 and all(s["n_turns"] == 1 for s in agent)  # every sequence token-exact, one turn each


async def test_without_the_mode_the_export_names_no_break_at_the_handoff(tmp_path, qwen3):
    records, doc = await run(tmp_path, qwen3, handoff_session(), 7, on_policy=False)
    breaks = {f["call_index"]: f["message"] for f in doc["findings"] if f["code"] == "prefix_break"}
    assert records[5]["index"] not in breaks  # a new conversation, as the mode reads it
    assert all("template_dropped_reasoning" in m for m in breaks.values()) and len(breaks) == 4


async def test_a_second_handoff_word_for_word_the_first_does_not_hide_the_break_before_it(tmp_path, qwen3):
    # a model that says the same each time: the second questions call repeats the first word for word,
    # yet the answers call after it extends the second summary call (a reasoning drop, named)
    first = {"role": "user", "content": f"Task: {TASK}"}
    summary, asks = {"role": "user", "content": "Hand off: summarize."}, "You are picking up work. Summary:\n"

    def handed(r: list[str]) -> list[dict]:
        return [first, {"role": "user", "content": asks + r[1]}, {"role": "assistant", "content": r[2]},
                {"role": "user", "content": "Answers:\n" + r[3]}]

    second_round = lambda r: handed(r) + [{"role": "assistant", "content": r[4]}, summary]  # noqa: E731
    calls = [[first], lambda r: [first, {"role": "assistant", "content": r[0]}, summary],
             lambda r: [{"role": "user", "content": asks + r[1]}],
             lambda r: [first, {"role": "assistant", "content": r[0]}, summary, {"role": "assistant", "content": r[1]},
                        {"role": "user", "content": "Questions:\n" + r[2]}],
             handed, second_round, lambda r: [{"role": "user", "content": asks + r[5]}],
             lambda r: second_round(r) + [{"role": "assistant", "content": r[5]},
                                          {"role": "user", "content": "Questions:\n" + r[6]}]]
    records, doc = await run(tmp_path, qwen3, calls, 8, on_policy=False, same=True)
    assert records[6]["request"]["messages"] == records[2]["request"]["messages"]  # word for word
    breaks = {f["call_index"]: f["message"] for f in doc["findings"] if f["code"] == "prefix_break"}
    assert 4 not in breaks and "template_dropped_reasoning" in breaks[7]


async def test_an_assistant_message_nobody_sampled_still_reads_no_parent(tmp_path, qwen3):
    written = [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi! (written by the harness)"},
               {"role": "user", "content": TASK}]
    records, _ = await run(tmp_path, qwen3, [[{"role": "user", "content": TASK}], written], 2)
    assert statuses(records) == [("exact", "new_conversation"), ("not_repaired", "no_parent")]


async def test_a_pasted_reply_after_one_nobody_sampled_still_reads_no_parent(tmp_path, qwen3):
    def mixed(r: list[str]) -> list[dict]:
        return [{"role": "user", "content": "Earlier."}, {"role": "assistant", "content": "Written by the harness."},
                {"role": "user", "content": TASK}, {"role": "assistant", "content": r[0]},
                {"role": "user", "content": "Go on."}]

    records, _ = await run(tmp_path, qwen3, [[{"role": "user", "content": TASK}], mixed], 2)
    assert statuses(records)[1] == ("not_repaired", "no_parent")
