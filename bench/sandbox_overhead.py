"""Benchmark: what the sandbox adds to running a small program, and how long verifying takes.

Measures on this machine (the first two interleaved):
  * a bare ``subprocess.run([python, "-c", "pass"])`` (the floor: interpreter start-up);
  * the same command through ``Sandbox.run`` (namespaces, rlimits, output capture);
  * ``verify_solution`` of every built-in reference solution (all held-out tests, default workers).
Prints a markdown table and saves bench/results/sandbox_overhead.json. Shared machines are noisy:
read the median, and compare runs made back to back.

    .venv/bin/python bench/sandbox_overhead.py [--runs 40]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rollout_dataset.sandbox import Sandbox, verify_solution
from rollout_dataset.tasks import builtin_tasks

RESULTS = Path(__file__).resolve().parent / "results" / "sandbox_overhead.json"


def _times(fn, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_ms": round(statistics.median(ordered) * 1000, 2),
            "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 2),
            "n": len(ordered)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    cmd = [sys.executable, "-c", "pass"]
    bare, sandboxed = [], []
    with Sandbox() as box:
        for _ in range(args.runs):  # interleaved, so both see the same machine load
            bare += _times(lambda: subprocess.run(cmd, check=True, capture_output=True), 1)
            sandboxed += _times(lambda: box.run(cmd), 1)
    tasks = builtin_tasks()
    n_tests = sum(len(t.held_out_tests) for t in tasks)
    start = time.perf_counter()
    rewards = [verify_solution(t, t.reference_solution).env_reward for t in tasks]
    verify_s = time.perf_counter() - start
    result = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0]},
        "isolation": Sandbox.isolation(),
        "bare_subprocess": _summary(bare),
        "sandbox_run": _summary(sandboxed),
        "verify_all_references": {"tasks": len(tasks), "held_out_tests": n_tests, "seconds": round(verify_s, 2),
                                  "per_test_ms": round(verify_s / n_tests * 1000, 2),
                                  "all_rewards_1": all(r == 1.0 for r in rewards)},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print("| what | median ms | p90 ms |\n| --- | --- | --- |")
    for key in ("bare_subprocess", "sandbox_run"):
        print(f"| {key} | {result[key]['median_ms']} | {result[key]['p90_ms']} |")
    v = result["verify_all_references"]
    print(f"\nverify: {v['tasks']} tasks, {v['held_out_tests']} held-out tests in {v['seconds']} s "
          f"({v['per_test_ms']} ms/test, all rewards 1.0: {v['all_rewards_1']}); "
          f"load average {result['machine']['load_avg_1m']:.1f}")
    print(f"saved {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
