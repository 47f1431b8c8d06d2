"""How public Harbor task sets load here, and where `--harbor-env auto` would run each task.

For each set given as ``LABEL=DIR`` (LABEL names its source, e.g. ``owner/repo@commit:subdir``):
the folders holding a ``task.toml``, how many load (`load_harbor_set`), why the others are skipped,
how many are multi-step, and per task what its environment needs (`read_task_needs`) and what
`choose_environment(..., "auto")` picks on this machine (Harbor's preflight of docker, podman and
singularity, run once at the start), or why it refuses. With `--oracle`, each task `auto` puts in the bwrap environment is run once with Harbor's
`oracle` agent (its `solution/solve.sh`) there: the share scoring 1.0 shows how faithful the
environment is to the image it stands in for. Prints a table and saves `bench/results/harbor_task_sets.json`.

Run: `PYTHONPATH=. .venv/bin/python bench/harbor_task_sets.py [--oracle] owner/repo@sha:sub=/path/to/set ...`.
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import re
import subprocess
import tempfile
import time
from pathlib import Path


def _reason(line: str) -> str:
    """A skip line's reason, without the folder (for counting)."""
    text = line.split(": ", 2)[-1]
    return re.sub(r"'[^']*'", "'…'", text)[:120]


def _oracle(task_dir: Path) -> dict:
    """Harbor's oracle agent on one task in the bwrap environment: its reward, exception and wall time."""
    from rollout_dataset.harbor.adapter import ENVIRONMENT_SPEC, _harbor_env, _package_path, find_harbor

    with tempfile.TemporaryDirectory(prefix="oracle-") as trials:
        argv = [str(find_harbor()), "trials", "start", "-p", str(task_dir), "--trials-dir", trials, "--trial-name", "t",
                "--agent", "oracle", "--env", ENVIRONMENT_SPEC]
        start = time.monotonic()
        try:
            subprocess.run(argv, env=_harbor_env("none", _package_path(Path(trials) / ".package")), cwd=trials,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
        except subprocess.TimeoutExpired:
            return {"task": task_dir.name, "reward": None, "exception": "timed out after 900 s", "wall_s": 900.0}
        wall = round(time.monotonic() - start, 1)
        try:
            result = json.loads((Path(trials) / "t" / "result.json").read_text())
        except (OSError, ValueError):
            return {"task": task_dir.name, "reward": None, "exception": "no result.json", "wall_s": wall}
    reward = ((result.get("verifier_result") or {}).get("rewards") or {}).get("reward")
    exc = result.get("exception_info") or {}
    return {"task": task_dir.name, "reward": reward, "wall_s": wall,
            "exception": f"{exc.get('exception_type')}: {str(exc.get('exception_message'))[:200]}" if exc else None}


def _one_set(label: str, folder: Path, runtimes: dict, oracle: bool = False) -> dict:
    from rollout_dataset.errors import RolloutDatasetError
    from rollout_dataset.harbor.environments import choose_environment, read_task_needs
    from rollout_dataset.tasks.harbor_format import load_harbor_set

    folders = sorted(p for p in folder.iterdir() if p.is_dir() and (p / "task.toml").is_file())
    tasks, skipped = load_harbor_set(folder)
    choices: collections.Counter = collections.Counter()
    refusals: collections.Counter = collections.Counter()
    needs_image = 0
    oracle_runs = []
    for task in tasks:
        task_dir = Path(task.metadata["harbor_dir"])
        needs_image += read_task_needs(task_dir).needs_image
        try:
            name = choose_environment(task_dir, "auto", preflight=lambda names: {n: runtimes[n] for n in names}).name
            choices[name] += 1
            if oracle and name == "bwrap" and (task_dir / "solution").is_dir():
                oracle_runs.append(_oracle(task_dir))
        except RolloutDatasetError as exc:
            refusals[re.sub(r"^\S+: ", "", str(exc)).split(" (checked")[0][:140]] += 1
    return {"set": label, "folders": len(folders), "loaded": len(tasks), "skipped": len(skipped),
            "skip_reasons": dict(collections.Counter(_reason(s) for s in skipped).most_common(5)),
            "multi_step": sum(1 for t in tasks if t.metadata["harbor"].get("steps")),
            "needs_image": needs_image, "auto_choice": dict(choices), "auto_refused": dict(refusals.most_common(5)),
            "oracle_bwrap": oracle_runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="+", metavar="LABEL=DIR")
    parser.add_argument("--oracle", action="store_true", help="run Harbor's oracle on the tasks auto puts in bwrap")
    args = parser.parse_args()
    from rollout_dataset.harbor.adapter import find_harbor
    from rollout_dataset.harbor.environments import LOCAL_RUNTIMES, harbor_preflight

    harbor = find_harbor()
    runtimes = harbor_preflight(harbor, LOCAL_RUNTIMES) if harbor else {n: "Harbor is not installed" for n in LOCAL_RUNTIMES}
    print(f"runtimes here (Harbor's preflight, once): {runtimes}")
    rows = []
    for spec in args.sets:
        label, _, path = spec.rpartition("=")
        row = _one_set(label or path, Path(path), runtimes, oracle=args.oracle)
        rows.append(row)
        print(f"{row['set'][:70]:70s} folders {row['folders']:5d}  loaded {row['loaded']:5d}  skipped "
              f"{row['skipped']:3d}  multi-step {row['multi_step']:3d}  needs image {row['needs_image']:5d}  "
              f"auto {row['auto_choice']}")
    total = {k: sum(r[k] for r in rows) for k in ("folders", "loaded", "skipped", "multi_step", "needs_image")}
    runs = [r for row in rows for r in row["oracle_bwrap"]]
    if runs:
        total["oracle_bwrap_runs"] = len(runs)
        total["oracle_bwrap_reward_1"] = sum(1 for r in runs if r["reward"] == 1)
    print(f"total: {total}")
    out = Path(__file__).resolve().parent / "results" / "harbor_task_sets.json"
    out.write_text(json.dumps({"machine": platform.platform(), "runtimes": runtimes, "rows": rows, "total": total},
                              indent=1) + "\n")
    print(f"saved {out}")


if __name__ == "__main__":
    main()
