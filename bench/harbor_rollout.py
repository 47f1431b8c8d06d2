"""Benchmark of terminus-2 on Harbor tasks: a captured rollout vs Harbor alone, and the proxy's share.

For each built-in Harbor task (`--tasks harbor-builtin`), `--repeats` times:

- Harbor alone: ``harbor trials start --agent terminus-2`` in the bubblewrap environment, straight
  at the model server (no proxy, no capture);
- captured: `capture_rollout` with `--harness terminus-2` (proxy, trace, export, artifacts, checks).

The model server is the local backend's oracle (default) or a genuine vLLM at `--base-url`
(`--model`). Prints a table and saves `bench/results/harbor_rollout[_vllm].json`.
Run: `PYTHONPATH=. .venv/bin/python bench/harbor_rollout.py [--repeats 3] [--base-url URL --model NAME]`.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path


def _harbor_alone(task_dir: Path, base_url: str, model: str, kwargs: dict, budget: float) -> tuple[float, int]:
    from rollout_dataset.harbor.adapter import run_terminus

    with tempfile.TemporaryDirectory() as trials:
        t = time.perf_counter()
        run = run_terminus(task_dir, Path(trials), base_url=base_url, model=model, api_key="EMPTY", timeout_s=budget,
                           agent_kwargs=kwargs)
        wall = time.perf_counter() - t
    if run.reward is None:
        raise SystemExit(f"Harbor alone gave no reward on {task_dir.name}: {run.exception or run.stderr_tail[-300:]}")
    steps = len([s for s in (run.trajectory or {}).get("steps") or [] if s.get("source") == "agent"])
    return wall, steps


def _captured(index: int, base_url: str | None, model: str | None, seed: int, budget: float) -> tuple[float, dict]:
    from rollout_dataset.capture import capture_rollout
    from rollout_dataset.recipes.coding import CaptureConfig

    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        result = capture_rollout(CaptureConfig(out_dir=Path(out) / "r", harness="terminus-2", tasks="harbor-builtin",
                                               task_index=index, rollout_seed=seed, base_url=base_url, model=model,
                                               max_tokens=16 if base_url else 2048, timeout_s=budget))
        wall = time.perf_counter() - t
    return wall, result.summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rollouts per task and mode (default 3)")
    parser.add_argument("--base-url", default=None, help="a genuine vLLM (default: the embedded local backend)")
    parser.add_argument("--model", default=None, help="its served model name")
    parser.add_argument("--agent-timeout", type=float, default=600.0,
                        help="terminus-2's time budget (a random-weight model never finishes: use ~20)")
    args = parser.parse_args()

    from rollout_dataset.backend.server import run_backend_in_thread
    from rollout_dataset.envs.registry import register_builtin_policies
    from rollout_dataset.recipes.coding.harbor_tasks import terminus_agent_kwargs
    from rollout_dataset.tasks import load_tasks

    register_builtin_policies()
    tasks = load_tasks("harbor-builtin")
    rows = []
    for index, task in enumerate(tasks):
        alone, captured, calls, alone_steps, agent_s, export_s = [], [], [], [], [], []
        for seed in range(args.repeats):
            kwargs = terminus_agent_kwargs(temperature=1.0, max_tokens=16 if args.base_url else 2048, seed=seed,
                                           context_tokens=None, max_turns=30)
            if args.base_url:
                wall, steps = _harbor_alone(Path(task.metadata["harbor_dir"]), args.base_url, args.model, kwargs,
                                            args.agent_timeout)
            else:
                with run_backend_in_thread(policy="oracle") as backend:
                    wall, steps = _harbor_alone(Path(task.metadata["harbor_dir"]), backend.base_url,
                                                backend.served_model_name, kwargs, args.agent_timeout)
            alone.append(wall)
            alone_steps.append(steps)
            wall, summary = _captured(index, args.base_url, args.model, seed, args.agent_timeout)
            captured.append(wall)
            calls.append(summary["captured_calls"])
            agent_s.append(summary["timings"]["agent_s"])
            export_s.append(summary["timings"]["export_s"])
        row = {"task": task.task_id, "harbor_alone_s_median": round(statistics.median(alone), 3),
               "captured_s_median": round(statistics.median(captured), 3),
               "overhead_s_median": round(statistics.median(captured) - statistics.median(alone), 3),
               "calls_median": statistics.median(calls), "harbor_alone_calls_median": statistics.median(alone_steps),
               "captured_agent_s_median": round(statistics.median(agent_s), 3),
               "captured_export_s_median": round(statistics.median(export_s), 3)}
        # Harbor's own run inside the capture (the proxy in the path) against Harbor alone
        row["proxy_overhead_s_median"] = round(row["captured_agent_s_median"] - row["harbor_alone_s_median"], 3)
        row["overhead_per_call_ms"] = round(1000 * row["overhead_s_median"] / max(1, row["calls_median"]), 1)
        # with a time budget (a model that never finishes) the wall times are equal by construction:
        # the rate of calls in that time is the comparison
        row["captured_calls_per_s"] = round(row["calls_median"] / row["captured_agent_s_median"], 2)
        row["harbor_alone_calls_per_s"] = round(row["harbor_alone_calls_median"] / row["harbor_alone_s_median"], 2)
        rows.append(row)
        print(f"{task.task_id:18s} harbor alone {row['harbor_alone_s_median']:6.2f} s   captured "
              f"{row['captured_s_median']:6.2f} s   overhead {row['overhead_s_median']:+6.2f} s "
              f"({row['calls_median']} calls; Harbor inside the capture {row['captured_agent_s_median']:.2f} s, "
              f"{row['proxy_overhead_s_median']:+.2f} s vs alone; export {row['captured_export_s_median']:.2f} s)")
    results = {"machine": platform.platform(), "python": platform.python_version(), "repeats": args.repeats,
               "agent_timeout_s": args.agent_timeout,
               "server": args.base_url or "embedded local backend (oracle)", "rows": rows}
    name = "harbor_rollout_vllm.json" if args.base_url else "harbor_rollout.json"
    out = Path(__file__).resolve().parent / "results" / name
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"saved {out}")


if __name__ == "__main__":
    main()
