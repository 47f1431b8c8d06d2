"""Benchmark: each training recipe of the card (docs/training.md) end to end with TRL on this machine.

Captures four rollouts on the local backend (two built-in tasks, each by the `oracle` and the `echo`
policy: two GRPO groups of two with rewards that differ), builds them into a dataset, and runs each
recipe as the card shows it (the helpers' source first) in a trainer's venv (`make trl-venv`: torch's
CPU wheel, TRL, datasets; never this package) with no MODEL (a tiny random model from the dataset's
tokenizer). Per recipe: steps run, first and last loss, the tokens the loss covered against the tokens
the dataset marks trainable, and wall time (the script's whole run: Python and TRL start-up included).
Prints a table and saves bench/results/training_recipes.json.

    PYTHONPATH=$PWD .venv/bin/python bench/training_recipes.py [--trl-python .venv-trl/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support/: the grouped capture fixture

from rollout_dataset.builder.card import contracts_source, training_recipes  # noqa: E402
from support.training_dataset import build_grouped_dataset  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def run_recipe(trl_python: str, source: str, dataset: Path, cwd: Path) -> tuple[dict, float]:
    """Run one recipe where its placeholder path leads to `dataset`; its figures and wall seconds."""
    (cwd / "path" / "to").mkdir(parents=True)
    (cwd / "path" / "to" / "DATASET_DIR").symlink_to(dataset)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MODEL", "HF_DATASETS_CACHE")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(cwd / "hf"), TRL_EXPERIMENTAL_SILENCE="1")
    started = time.monotonic()
    done = subprocess.run([trl_python, "-c", contracts_source() + "\n" + source], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"error: recipe failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trl-python", default=str(ROOT / ".venv-trl" / "bin" / "python"),
                        help="a Python with torch, trl and datasets (make trl-venv)")
    args = parser.parse_args()
    if not Path(args.trl_python).is_file():
        raise SystemExit(f"error: {args.trl_python} is missing: run `make trl-venv`")
    version = subprocess.run([args.trl_python, "-c", "import trl, torch; print(trl.__version__, torch.__version__)"],
                             capture_output=True, text=True, check=True).stdout.split()
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-recipes-") as tmp:
        dataset = build_grouped_dataset(Path(tmp))
        for name, source in training_recipes().items():
            figures, wall = run_recipe(args.trl_python, source, dataset, Path(tmp) / name)
            results[name] = {**figures, "wall_s": round(wall, 1)}
    print(f"{'recipe':<18} {'steps':>5} {'loss first':>10} {'loss last':>10} {'trained':>8} {'marked':>7} {'wall s':>7}")
    for name, r in results.items():
        print(f"{name:<18} {r['steps']:>5} {r['loss_first']:>10.4f} {r['loss_last']:>10.4f} {r['tokens_trained']:>8} "
              f"{r['tokens_marked']:>7} {r['wall_s']:>7}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "training_recipes.json"
    out.write_text(json.dumps({"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                           "trl": version[0], "torch": version[1],
                                           "load_avg_1m": round(os.getloadavg()[0], 2)},
                               "dataset": "4 captured rollouts (2 tasks x oracle/echo), 2 groups of 2",
                               "recipes": results}, indent=2) + "\n")
    print(f"saved {out}")


if __name__ == "__main__":
    main()
