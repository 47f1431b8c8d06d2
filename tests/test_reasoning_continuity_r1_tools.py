"""On-policy continuity of DeepSeek-R1 tool loops, each reply sent back in a real harness's shape.

The local backend serves R1's genuine tokenizer with `--reasoning-parser deepseek_r1
--tool-call-parser deepseek_v3` (the replies are R1's tool-call markup) and a tool template written
for this project in R1's layout (`tests/support/deepseek_r1_tools.py`: R1's shipped template cannot
render a tool call sent back on vLLM 0.32). R1's templates leave every earlier reply's reasoning out,
inside a tool loop too: each turn after the first is `reasoning_dropped`, never `not_repaired`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from support.deepseek_r1_tools import REPLIES, deepseek_r1_tool_tokenizer
from support.harness_echo import ECHOES, TOOLS, drive, script_steps

from rollout_dataset.backend import LocalBackend
from rollout_dataset.export import export_rollout
from rollout_dataset.export.breaks import CAUSE_TAG
from rollout_dataset.export.continuity import continuity_of
from rollout_dataset.proxy import CaptureProxy, read_trace

R1_ECHOES = [e for e in ECHOES if e != "harmony_reasoning"]


@pytest.fixture(scope="module")
def tokenizer():
    return deepseek_r1_tool_tokenizer()


async def capture(tmp_path: Path, tokenizer: Any, echo: str, *, on_policy: bool = True, turns: int = 3,
                  edit: Any = None, steps: list[dict] | None = None, kind: str = "tool_loop") -> tuple[list[dict], dict]:
    script = {"steps": steps or script_steps("tool_loop", turns), "final": "Done."}
    async with LocalBackend(tokenizer=tokenizer, policy="script", script=script, reasoning_parser="deepseek_r1",
                            tool_call_parser="deepseek_v3") as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path, on_policy=on_policy) as proxy:
            url = proxy.session_base_url("s") + "/chat/completions"
            async with httpx.AsyncClient(timeout=60) as client:
                async def post(messages: list[dict]) -> dict:
                    if edit is not None:
                        edit(messages)
                    body = {"model": "local", "messages": messages, "max_tokens": 96, "tools": TOOLS}
                    response = await client.post(url, json=body)
                    assert response.status_code == 200, response.text
                    return response.json()["choices"][0]["message"]

                await drive(post, kind, turns, echo)
            records = read_trace(proxy.trace_path("s"), seal=proxy.seal("s"))
    return records, export_rollout(records, session_id="s", capture_level="tokens", tokenizer=tokenizer)


def statuses(records: list[dict]) -> list[tuple[str, str | None]]:
    by_index = continuity_of(records)
    return [(by_index[r["index"]]["status"], by_index[r["index"]]["reason"]) for r in records]


async def test_the_loop_calls_tools_in_r1_markup(tmp_path, tokenizer):
    records, _ = await capture(tmp_path, tokenizer, "verbatim", turns=2)
    message = records[0]["response"]["choices"][0]["message"]
    assert message["content"] == "\n\nLet me look.\n" and message["reasoning"] == "\nPlan 0.\n"
    assert message["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"cmd": "echo 0"}'}
    assert "<｜tool▁calls▁begin｜>" in tokenizer.decode(records[0]["completion_token_ids"])


@pytest.mark.parametrize("echo", R1_ECHOES)
async def test_every_turn_of_an_r1_tool_loop_is_reasoning_dropped_never_not_repaired(tmp_path, tokenizer, echo):
    records, _ = await capture(tmp_path, tokenizer, echo)
    assert statuses(records) == [("exact", "new_conversation")] + [("reasoning_dropped",
                                                                      "template_dropped_reasoning")] * 2


async def test_an_r1_tool_loop_keeps_the_tool_results_after_the_sampled_ids(tmp_path, tokenizer):
    # the template drops the reasoning only: the next prompt is the earlier prompt, the reply after
    # </think>, then the tool results
    records, _ = await capture(tmp_path, tokenizer, "content_only", turns=2)
    first, second = records
    sampled = tokenizer.decode(first["completion_token_ids"])
    after_think = sampled.split("</think>")[-1]
    assert tokenizer.decode(second["prompt_token_ids"]).startswith(
        tokenizer.decode(first["prompt_token_ids"]) + after_think)


async def test_without_the_mode_each_break_is_named_template_dropped_reasoning(tmp_path, tokenizer):
    _, doc = await capture(tmp_path, tokenizer, "verbatim", on_policy=False)
    causes = [CAUSE_TAG.search(f["message"]).group(1) for f in doc["findings"] if f["code"] == "prefix_break"]
    assert causes == ["template_dropped_reasoning"] * 2


async def test_a_harness_that_rewrites_a_calls_arguments_is_named_for_it(tmp_path, tokenizer):
    def rewrite(messages: list[dict]) -> None:
        for m in messages:
            for c in m.get("tool_calls") or []:
                c["function"]["arguments"] = '{"cmd": "rm -rf /"}'

    records, _ = await capture(tmp_path, tokenizer, "content_only", edit=rewrite)
    record = continuity_of(records)[records[1]["index"]]
    assert (record["status"], record["reason"]) == ("not_repaired", "content_changed")
    assert "the harness changed a tool call" in record["detail"]


async def test_a_think_end_inside_a_calls_arguments_is_still_read_as_the_reasoning_drop(tmp_path, tokenizer):
    steps = [{"reasoning": "Plan.", "text": "Let me look.",
              "tool_calls": [{"name": "bash", "arguments": {"cmd": "grep '</think>' log"}}]},
             {"reasoning": "All done.", "text": "Done."}]
    records, _ = await capture(tmp_path, tokenizer, "verbatim", turns=2, steps=steps)
    assert records[0]["response"]["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == (
        '{"cmd": "grep \'</think>\' log"}')
    assert statuses(records)[1] == ("reasoning_dropped", "template_dropped_reasoning")


async def test_a_call_never_closed_is_named_as_markup_the_history_lost_not_as_a_harness_edit(tmp_path, tokenizer):
    # vLLM's deepseek_v3 parser drops unfinished markup from the message, so the harness sees no call
    # and asks again: the next prompt cannot hold the sampled markup
    steps = [{"token_ids": tokenizer.encode(REPLIES["never_closed"], add_special_tokens=False)}, {"text": "Done."}]
    records, _ = await capture(tmp_path, tokenizer, "content_only", turns=2, steps=steps, kind="loop_then_chat")
    assert records[0]["response"]["choices"][0]["message"]["content"] == "\n\nLet me look."
    record = continuity_of(records)[records[1]["index"]]
    assert (record["status"], record["reason"]) == ("not_repaired", "content_changed")
    assert "the history holds no tool call where the model sampled tool-call markup" in record["detail"]
