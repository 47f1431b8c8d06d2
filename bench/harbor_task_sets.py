"""How public Harbor task sets load here, and where `--harbor-env auto` would run each task.

For each set given as ``LABEL=DIR`` (LABEL names its source, e.g. ``owner/repo@commit:subdir``):
the folders holding a ``task.toml``, how many load (`load_harbor_set`), why the others are skipped,
how many are multi-step, and per task what its environment needs (`read_task_needs`) and what
`choose_environment(..., "auto")` picks on this machine (Harbor's preflight of docker, podman and
singularity, run once at the start), or why it refuses. Nothing is run. Prints a table and saves `bench/results/harbor_task_sets.json`.

Run: `PYTHONPATH=. .venv/bin/python bench/harbor_task_sets.py owner/repo@sha:sub=/path/to/set ...`.
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import re
from pathlib import Path


def _reason(line: str) -> str:
    """A skip line's reason, without the folder (for counting)."""
    text = line.split(": ", 2)[-1]
    return re.sub(r"'[^']*'", "'…'", text)[:120]


def _one_set(label: str, folder: Path, runtimes: dict) -> dict:
    from rollout_dataset.errors import RolloutDatasetError
    from rollout_dataset.harbor.environments import choose_environment, read_task_needs
    from rollout_dataset.tasks.harbor_format import load_harbor_set

    folders = sorted(p for p in folder.iterdir() if p.is_dir() and (p / "task.toml").is_file())
    tasks, skipped = load_harbor_set(folder)
    choices: collections.Counter = collections.Counter()
    refusals: collections.Counter = collections.Counter()
    needs_image = 0
    for task in tasks:
        task_dir = Path(task.metadata["harbor_dir"])
        needs_image += read_task_needs(task_dir).needs_image
        try:
            choices[choose_environment(task_dir, "auto", preflight=lambda names: {n: runtimes[n] for n in names}).name] += 1
        except RolloutDatasetError as exc:
            refusals[re.sub(r"^\S+: ", "", str(exc)).split(" (checked")[0][:140]] += 1
    return {"set": label, "folders": len(folders), "loaded": len(tasks), "skipped": len(skipped),
            "skip_reasons": dict(collections.Counter(_reason(s) for s in skipped).most_common(5)),
            "multi_step": sum(1 for t in tasks if t.metadata["harbor"].get("steps")),
            "needs_image": needs_image, "auto_choice": dict(choices), "auto_refused": dict(refusals.most_common(5))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="+", metavar="LABEL=DIR")
    args = parser.parse_args()
    from rollout_dataset.harbor.adapter import find_harbor
    from rollout_dataset.harbor.environments import LOCAL_RUNTIMES, harbor_preflight

    harbor = find_harbor()
    runtimes = harbor_preflight(harbor, LOCAL_RUNTIMES) if harbor else {n: "Harbor is not installed" for n in LOCAL_RUNTIMES}
    print(f"runtimes here (Harbor's preflight, once): {runtimes}")
    rows = []
    for spec in args.sets:
        label, _, path = spec.rpartition("=")
        row = _one_set(label or path, Path(path), runtimes)
        rows.append(row)
        print(f"{row['set'][:70]:70s} folders {row['folders']:5d}  loaded {row['loaded']:5d}  skipped "
              f"{row['skipped']:3d}  multi-step {row['multi_step']:3d}  needs image {row['needs_image']:5d}  "
              f"auto {row['auto_choice']}")
    total = {k: sum(r[k] for r in rows) for k in ("folders", "loaded", "skipped", "multi_step", "needs_image")}
    print(f"total: {total}")
    out = Path(__file__).resolve().parent / "results" / "harbor_task_sets.json"
    out.write_text(json.dumps({"machine": platform.platform(), "runtimes": runtimes, "rows": rows, "total": total},
                              indent=1) + "\n")
    print(f"saved {out}")


if __name__ == "__main__":
    main()
