"""Benchmark: real harnesses against a genuine vLLM serving a scripted Qwen3 reasoning model, on-policy off and on.

Opt-in: needs a vLLM server (0.32, CPU build) per harness, each serving the scripted Qwen3 of
`real_model/build_scripted_qwen3.py` built with that harness's script (``--script HARNESS``: a tool call
that runs ``echo penguin``, then a final answer; mini-swe-agent's submit command; terminus-2's
``task_complete``), served with ``--reasoning-parser qwen3 --enable-auto-tool-choice --tool-call-parser
hermes`` and a long context (``--max-len 32768`` at build time, ``--max-model-len 32768``): opencode,
Codex and Claude Code send 10-20k-token prompts.

Each harness is captured (`rollout_dataset.capture.capture_rollout`, the `capture` command) with
``--on-policy`` off and on. Per harness and mode, per rollout: agent turns ``exact`` / ``repaired`` /
``reasoning_dropped`` / ``not_repaired`` (mode on: the proxy's recorded continuity; mode off, and
Codex's Responses calls, which the mode does not bridge: each prefix break's named cause,
`rollout_dataset.reasoning.BREAK_STATUS`, as `bench/reasoning_continuity.py` counts them), trainable
sequences, trained tokens; and what the harness sent back of the first reply. Saves
bench/results/reasoning_harnesses.json with the vLLM version and the model (rows of harnesses not run
this time are kept, so servers can be brought up one at a time).

    .venv/bin/python bench/reasoning_harnesses.py --server terminus-2=http://127.0.0.1:18100/v1 \\
        --server opencode=http://127.0.0.1:18101/v1 [--modes off,on] [--rollouts 1]
"""

from __future__ import annotations

import argparse
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
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from reasoning_continuity import STATUSES, figures  # noqa: E402
from support.genuine_templates import qwen3_tokenizer_dir  # noqa: E402

from rollout_dataset.capture import capture_rollout  # noqa: E402
from rollout_dataset.recipes.coding import CaptureConfig  # noqa: E402
from rollout_dataset.tokenizers import load_tokenizer  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "reasoning_harnesses.json"
HARNESSES = ("opencode", "claude-code", "codex", "mini-swe-agent", "terminus-2")
#: harnesses whose on-policy mode is not measured here (Codex's Responses path is built elsewhere)
OFF_ONLY = ("codex",)


def server_facts(url: str) -> dict[str, Any]:
    """The vLLM version and served model at `url` (its /version at the root, /v1/models)."""
    root = url.rstrip("/").removesuffix("/v1")
    with httpx.Client(timeout=30, trust_env=False) as client:
        version = client.get(f"{root}/version").json().get("version")
        models = client.get(f"{url.rstrip('/')}/models").json()["data"]
    return {"vllm_version": version, "served_model": models[0]["id"], "model_root": models[0].get("root"),
            "max_model_len": models[0].get("max_model_len")}


def _assistant_shape(message: dict[str, Any]) -> dict[str, Any]:
    """What a harness sent back of a reply: its keys, the content's opening, its content blocks' types."""
    content = message.get("content")
    shape: dict[str, Any] = {"keys": sorted(message)}
    if "encrypted_content" in message:  # a Responses reasoning item: vLLM refuses one that is set
        shape["encrypted_content_set"] = message["encrypted_content"] is not None
    if isinstance(content, str):
        shape["content_starts"] = content[:24]
    elif isinstance(content, list):
        shape["blocks"] = [{k: (v[:24] if isinstance(v, str) else v) for k, v in b.items() if k != "input"}
                           for b in content if isinstance(b, dict)]
    return shape


def sent_back(records: list[dict]) -> dict[str, Any] | None:
    """The first assistant message of the latest request holding one (Messages: also the chat sent upstream)."""
    for record in reversed(records):
        request = record.get("request") or {}
        items = request.get("messages") or request.get("input") or []
        replies = [m for m in items if isinstance(m, dict) and (m.get("role") == "assistant" or m.get("type") in
                                                                ("reasoning", "function_call"))]
        if not replies:
            continue
        out: dict[str, Any] = {"endpoint": record.get("endpoint"), "sent": _assistant_shape(replies[0])}
        upstream = (record.get("upstream") or {}).get("request") or {}
        up = [m for m in upstream.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant"]
        if up:
            out["sent_upstream"] = _assistant_shape(up[0])
        return out
    return None


def capture_one(harness: str, url: str, on_policy: bool, timeout_s: float, seed: int) -> dict[str, Any]:
    """One capture; returns its records, summary and the shape it sent back."""
    config: dict[str, Any] = {}
    if harness == "terminus-2":
        from rollout_dataset.tasks.harbor_format import HARBOR_BUILTIN_SOURCE

        config["tasks"] = HARBOR_BUILTIN_SOURCE
    with tempfile.TemporaryDirectory(prefix="reasoning-harness-") as tmp:
        out = Path(tmp) / "art"
        result = capture_rollout(CaptureConfig(out_dir=out, base_url=url, harness=harness, on_policy=on_policy,
                                               tokenizer=str(qwen3_tokenizer_dir()), timeout_s=timeout_s,
                                               rollout_seed=seed, **config))
        records = json.loads((out / "trace.json").read_text())["calls"]
        summary = json.loads((out / "summary.json").read_text())
    return {"records": records, "summary": summary, "errors": list(result.errors)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", action="append", required=True, metavar="HARNESS=URL",
                        help=f"a vLLM base URL serving HARNESS's script (harnesses: {', '.join(HARNESSES)})")
    parser.add_argument("--modes", default="off,on", help="on-policy modes to run: off, on or off,on")
    parser.add_argument("--rollouts", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=240.0, help="wall budget of each harness run (s)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    servers = dict(s.split("=", 1) for s in args.server)
    unknown = sorted(set(servers) - set(HARNESSES))
    if unknown:
        parser.error(f"--server: unknown harness {unknown[0]!r} (known: {', '.join(HARNESSES)})")
    tokenizer = load_tokenizer(str(qwen3_tokenizer_dir()))
    rows = []
    for harness in [h for h in HARNESSES if h in servers]:
        facts = server_facts(servers[harness])
        for mode in args.modes.split(","):
            if mode == "on" and harness in OFF_ONLY:
                continue
            runs = [capture_one(harness, servers[harness], mode == "on", args.timeout, seed)
                    for seed in range(args.rollouts)]
            row = {"harness": harness, "on_policy": mode == "on", **facts,
                   **figures([r["records"] for r in runs], tokenizer),
                   "harness_version": ((runs[0]["summary"].get("provenance") or {}).get("harness") or {}).get("version"),
                   "stop_reasons": [r["summary"].get("stop_reason") for r in runs],
                   "env_rewards": [r["summary"].get("env_reward") for r in runs],
                   "captured_calls": [len(r["records"]) for r in runs],
                   "errors": [e for r in runs for e in r["errors"]],
                   "continuity_reasons": dict(sorted(Counter(
                       f"{c['status']}/{c['reason']}" for r in runs for rec in r["records"]
                       if isinstance(c := rec.get("continuity"), dict)).items())),
                   "sent_back": sent_back(runs[0]["records"])}
            rows.append(row)
            print(json.dumps({k: row[k] for k in ("harness", "on_policy", "agent_turns_per_rollout", "causes",
                                                  "continuity_reasons")}),
                  flush=True)
    print(f"{'harness':<15} {'mode':<4} {'turns':>5} {'exact':>5} {'repair':>6} {'r_drop':>6} {'not_rep':>7} "
          f"{'seqs':>5} {'tokens':>7}  stop")
    for row in rows:
        print(f"{row['harness']:<15} {'on' if row['on_policy'] else 'off':<4} {row['agent_turns_per_rollout']:>5.1f} "
              + " ".join(f"{row[f'{s}_per_rollout']:>{w}.1f}" for s, w in zip(STATUSES, (5, 6, 6, 7)))
              + f" {row['trainable_sequences_per_rollout']:>5.1f} {row['trained_tokens_per_rollout']:>7.1f}"
              f"  {row['stop_reasons']} {row['causes']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    key = lambda row: (row["harness"], row["on_policy"], row["max_model_len"])  # noqa: E731
    if args.out.exists():  # one server at a time: rows of other harnesses (or context lengths) are kept
        fresh = {key(row) for row in rows}
        rows = [row for row in json.loads(args.out.read_text())["rows"] if key(row) not in fresh] + rows
    args.out.write_text(json.dumps({"command": "bench/reasoning_harnesses.py", "rollouts": args.rollouts,
                                    "python": platform.python_version(),
                                    "model": "scripted Qwen3 (real_model/build_scripted_qwen3.py --script HARNESS "
                                             "--max-len 32768): Qwen3's genuine tokenizer and template",
                                    "server_flags": "--reasoning-parser qwen3 --enable-auto-tool-choice "
                                                    "--tool-call-parser hermes --max-model-len 32768",
                                    "rows": rows}, indent=1) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
