"""Benchmark: what checking a request body against its published shape costs per call
(`rollout_dataset.schema.api_requests`: the proxy and the local backend run it on every `/v1/responses`
and `/v1/messages` call before anything else).

Bodies shaped like a long agent session (Codex on Responses, Claude Code on Messages): `--turns` rounds of
assistant text, a tool call and its output, about 1 KiB of text each. Per API, the time of one check of
the valid body (the compiled jsonschema-rs validator answers), and of the same body with one bad field in
its last item (the reference jsonschema validator then names the field), median over `--repeat` runs.

Prints a markdown table and saves bench/results/request_validation.json.

    .venv/bin/python bench/request_validation.py [--turns 200] [--repeat 50]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from rollout_dataset.schema.api_requests import messages_request_problem, responses_request_problem

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "request_validation.json"
TEXT = "The quick brown fox jumps over the lazy dog. " * 23  # about 1 KiB


def responses_body(turns: int) -> dict[str, Any]:
    """A Codex-shaped `/v1/responses` body with `turns` rounds of text, a function call and its output."""
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": TEXT}]}]
    for i in range(turns):
        items += [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": TEXT}]},
                  {"type": "function_call", "call_id": f"c{i}", "name": "shell", "arguments": json.dumps({"cmd": TEXT})},
                  {"type": "function_call_output", "call_id": f"c{i}", "output": TEXT}]
    return {"model": "m", "instructions": TEXT, "input": items, "stream": True, "store": False,
            "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}], "tool_choice": "auto"}


def messages_body(turns: int) -> dict[str, Any]:
    """A Claude-Code-shaped `/v1/messages` body with `turns` rounds of text, a tool use and its result."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": TEXT}]
    for i in range(turns):
        messages += [{"role": "assistant", "content": [{"type": "text", "text": TEXT},
                                                       {"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"cmd": TEXT}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": TEXT}]}]
    return {"model": "m", "max_tokens": 1024, "system": TEXT, "messages": messages, "stream": True,
            "tools": [{"name": "Bash", "input_schema": {"type": "object"}}]}


def median_ms(check: Callable[[Any], str | None], body: Any, repeat: int) -> float:
    """The median time of one check, in milliseconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        check(body)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    rows = []
    for api, build, check, break_last in (
        ("responses", responses_body, responses_request_problem,
         lambda body: body["input"][-1].pop("call_id")),
        ("messages", messages_body, messages_request_problem,
         lambda body: body["messages"][-1]["content"][0].pop("tool_use_id")),
    ):
        body = build(args.turns)
        bad = copy.deepcopy(body)
        break_last(bad)
        assert check(body) is None and check(bad) is not None
        rows.append({"api": api, "body_kib": round(len(json.dumps(body)) / 1024),
                     "valid_ms": round(median_ms(check, body, args.repeat), 2),
                     "invalid_ms": round(median_ms(check, bad, args.repeat), 2)})
    print("| API | body (KiB) | valid body (ms) | one bad field (ms) |\n|---|---|---|---|")
    for row in rows:
        print(f"| {row['api']} | {row['body_kib']} | {row['valid_ms']} | {row['invalid_ms']} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"turns": args.turns, "repeat": args.repeat, "python": platform.python_version(),
                                   "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                                   "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
