"""Benchmark of ATIF import and export (docs/atif.md). Prints a table and saves bench/results/atif_import.json.

- import throughput: `--trials` synthetic Harbor trial folders (`<trial>/agent/trajectory.json` +
  `result.json`), each the ATIF export of a synthetic rollout (`tests/support/synthetic_dataset.py`,
  `--turns` agent turns, `--context` tokens, ids and logprobs included), imported into artifact
  folders by `atif.importer.write_imported` (what `build` does before building): trajectories/s and
  the importing process's peak RSS (a child process, so the figure is the import's alone);
- size: bytes of one exported `trajectory.json` vs the whole artifact folder it came from, and vs
  its `turns.json` (the file holding the same ids and logprobs).

Usage: python bench/atif_import.py [--trials 1000] [--turns 5] [--context 2048]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/support/: the synthetic fixtures
from support.synthetic_dataset import write_synthetic_rollout  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "atif_import.json"


def _child(job: str, stage: str) -> None:
    """Import every trial under `job` into `stage`; print timing and peak RSS as JSON."""
    from rollout_dataset.atif.importer import find_atif_sources, write_imported

    t0 = time.perf_counter()
    sources = find_atif_sources([job])
    folders, refused = write_imported(sources, stage)
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "imported": len(folders), "refused": len(refused),
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--child", nargs=2, metavar=("JOB", "STAGE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return
    from rollout_dataset.atif.export import trajectory_of_folder

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        art = root / "art"
        write_synthetic_rollout(art, n_turns=args.turns, context_tokens=args.context, with_aux=True)
        trajectory = trajectory_of_folder(art)
        trajectory.pop("trajectory_id")  # each trial gets its own rollout id from its result.json
        text = json.dumps(trajectory, ensure_ascii=False) + "\n"
        folder_bytes = sum(p.stat().st_size for p in art.iterdir())
        sizes = {"trajectory_bytes": len(text.encode()), "artifact_folder_bytes": folder_bytes,
                 "turns_json_bytes": (art / "turns.json").stat().st_size}
        job = root / "job"
        for n in range(args.trials):
            trial = job / f"trial-{n:05d}"
            (trial / "agent").mkdir(parents=True)
            (trial / "agent" / "trajectory.json").write_text(text, encoding="utf-8")
            (trial / "result.json").write_text(json.dumps({
                "id": f"{n:032x}", "task_name": f"task-{n % 50}", "trial_name": trial.name,
                "agent_info": {"name": "builtin", "version": "1"}, "verifier_result": {"rewards": {"reward": n % 2}},
                "exception_info": None, "started_at": "2026-01-01T00:00:00"}), encoding="utf-8")
        stage = root / "stage"
        proc = subprocess.run([sys.executable, __file__, "--child", str(job), str(stage)], capture_output=True,
                              text=True, check=True)
        child = json.loads(proc.stdout.strip().splitlines()[-1])
    result = {
        "command": f"python bench/atif_import.py --trials {args.trials} --turns {args.turns} --context {args.context}",
        "trials": args.trials, "turns": args.turns, "context_tokens": args.context,
        "imported": child["imported"], "refused": child["refused"], "import_seconds": round(child["seconds"], 2),
        "trajectories_per_s": round(child["imported"] / child["seconds"], 1),
        "peak_rss_mib": round(child["peak_rss_mib"], 1), **sizes,
        "trajectory_vs_folder": round(sizes["trajectory_bytes"] / sizes["artifact_folder_bytes"], 3),
        "trajectory_vs_turns_json": round(sizes["trajectory_bytes"] / sizes["turns_json_bytes"], 3),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    width = max(map(len, result))
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
