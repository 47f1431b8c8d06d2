"""`bench/dataset_build.py --scale`: build throughput and peak memory as the rollout count grows (issue 14).

Synthetic 10-turn / 2k-context rollouts (`tests/support/synthetic_dataset.py`, with an auxiliary root and a discarded
retry). A pool of distinct rollouts is generated once into a scratch folder (reused by later runs:
`--scratch`, default /tmp/rollout-dataset-bench-scale) and replicated up to the largest size by hard
links, each replica with its own summary.json (a fresh rollout_id); so 20k rollouts take ~0.1 GB of
disk, not ~11 GB. Each build runs in a fresh subprocess that reports:

- wall seconds, rollouts/s, and CPU seconds (its own and its worker processes'), so rollouts per
  CPU-second, which a busy machine distorts less than wall time;
- peak RSS of the building process (VmHWM) and the largest of its worker processes (RUSAGE_CHILDREN).

Sizes (default 1000, 5000, 20000) x workers (1, 2), plus today's baseline: the same build with the
code of `--baseline-ref` (default b7a7924, the main before the streaming build; `git archive` into the
scratch folder) or of `--baseline-pythonpath DIR`, on the smallest size. Ratios side by side:
current 1 worker / baseline (goal >= 2), 2 workers / 1 worker (goal >= 1.6), peak RSS largest / smallest
size (goal <= 1.2, each < 1 GB).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/support/: the synthetic fixtures

# One build in a fresh process. argv: list file of folders, out dir, workers (0: the baseline's
# signature, no workers argument). Prints one JSON line.
_CHILD = """
import json, pathlib, resource, sys, time
import rollout_dataset
from rollout_dataset.builder import build
folders = open(sys.argv[1]).read().split()
workers = int(sys.argv[3])
kw = {} if workers == 0 else {"workers": workers}
if __name__ == "__main__":
    t = time.perf_counter()
    r = build(folders, sys.argv[2], progress=False, **kw)
    wall = time.perf_counter() - t
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    hwm = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM")][0]
    print(json.dumps({"package": str(pathlib.Path(rollout_dataset.__file__).parent), "added": len(r.added),
                      "wall_s": wall, "cpu_s": me.ru_utime + me.ru_stime,
                      "workers_cpu_s": kids.ru_utime + kids.ru_stime, "peak_rss_mb": int(hwm) / 1024,
                      "worker_peak_rss_mb": kids.ru_maxrss / 1024}))
"""


def _gen_one(args: tuple[str, int]) -> None:
    from support.synthetic_dataset import write_synthetic_rollout

    folder, seed = args
    write_synthetic_rollout(folder, seed=seed, n_turns=10, context_tokens=2048, with_aux=True, with_retry=True,
                            task_index=seed % 8)


def _pool(scratch: Path, unique: int, procs: int) -> tuple[list[Path], float]:
    """The distinct rollouts (generated once, in `procs` processes)."""
    pool = scratch / f"pool-{unique}"
    done = pool / ".complete"
    t = time.perf_counter()
    if not done.exists():
        shutil.rmtree(pool, ignore_errors=True)
        pool.mkdir(parents=True)
        jobs = [(str(pool / f"u{k:05d}"), k) for k in range(unique)]
        with ProcessPoolExecutor(procs, mp_context=multiprocessing.get_context("spawn")) as ex:
            list(ex.map(_gen_one, jobs, chunksize=16))
        done.write_text("ok")
    return sorted(p for p in pool.iterdir() if p.is_dir()), time.perf_counter() - t


def _replicas(scratch: Path, pool: list[Path], n: int) -> tuple[list[Path], float]:
    """`n` artifact folders: the pool's files hard-linked, each with its own rollout_id."""
    root = scratch / f"replicas-{len(pool)}"
    t = time.perf_counter()
    root.mkdir(parents=True, exist_ok=True)
    folders = []
    for k in range(n):
        folder = root / f"r{k:06d}"
        folders.append(folder)
        if (folder / "summary.json").exists():
            continue
        folder.mkdir(exist_ok=True)
        orig = pool[k % len(pool)]
        for f in orig.iterdir():
            if f.name != "summary.json" and not (folder / f.name).exists():
                os.link(f, folder / f.name)
        summary = json.loads((orig / "summary.json").read_text())
        summary["rollout_id"] = uuid.UUID(int=k + 1).hex
        tmp = folder / ".summary.tmp"
        tmp.write_text(json.dumps(summary))
        tmp.replace(folder / "summary.json")
    return folders, time.perf_counter() - t


def _baseline_tree(scratch: Path, ref: str) -> Path:
    """The package at `ref`, unpacked with `git archive` (no worktree, the repository untouched)."""
    tree = scratch / f"baseline-{ref}"
    if not (tree / "rollout_dataset").is_dir():
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "rollout_dataset", "dataset_card.md"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def _run(folders: list[Path], out: Path, workers: int, pythonpath: Path) -> dict:
    listing = out.with_suffix(".list")
    listing.write_text("\n".join(map(str, folders)))
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    # cwd: the scratch folder, since `python -c` puts the working folder first on sys.path (before
    # PYTHONPATH): run from the repository, the baseline would import the current package
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(listing), str(out), str(workers)], env=env,
                          capture_output=True, text=True, cwd=str(out.parent))
    shutil.rmtree(out, ignore_errors=True)
    listing.unlink()
    if proc.returncode:
        raise SystemExit(f"build of {len(folders)} rollouts (workers={workers}) failed:\n{proc.stderr[-3000:]}")
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    if r.pop("package") != str(pythonpath / "rollout_dataset"):
        raise SystemExit(f"the build imported the package from {r['package']}, not {pythonpath}")
    cpu = r["cpu_s"] + r["workers_cpu_s"]
    r.update(rollouts=len(folders), workers=workers, rollouts_per_s=round(len(folders) / r["wall_s"], 2),
             rollouts_per_cpu_s=round(len(folders) / cpu, 2))
    for k in ("wall_s", "cpu_s", "workers_cpu_s", "peak_rss_mb", "worker_peak_rss_mb"):
        r[k] = round(r[k], 2)
    return r


def run_scale(sizes: list[int], *, unique: int, scratch: Path, baseline_ref: str | None,
              baseline_pythonpath: Path | None, quick: bool, partial: Path | None = None) -> dict:
    """Run the series; returns the results (also saved and printed by `main`).

    `partial`: a file rewritten after each build with the builds so far (a stopped run keeps its figures).
    """
    scratch.mkdir(parents=True, exist_ok=True)
    free_gb = shutil.disk_usage(scratch).free / 1e9
    pool, gen_s = _pool(scratch, unique, max(1, os.cpu_count() or 1))
    folders, rep_s = _replicas(scratch, pool, max(sizes))
    baseline = None
    tree = baseline_pythonpath or (_baseline_tree(scratch, baseline_ref) if baseline_ref else None)
    if tree is not None:  # first: the figure every ratio of the speed goal needs
        baseline = _run(folders[:sizes[0]], scratch / "out-baseline", 0, tree)
        baseline["code"] = str(baseline_pythonpath or baseline_ref)
        print(f"  baseline ({baseline['code']}), {sizes[0]} rollouts: {baseline}", flush=True)
    builds: list[dict] = []
    for n in sizes:
        for workers in (1, 2):
            builds.append(_run(folders[:n], scratch / f"out-{n}-w{workers}", workers, REPO))
            print(f"  {n:>6} rollouts, {workers} worker(s): {builds[-1]}", flush=True)
            if partial is not None:
                partial.write_text(json.dumps({"partial": True, "baseline": baseline, "builds": builds}, indent=2)
                                   + "\n")
    one = {b["rollouts"]: b for b in builds if b["workers"] == 1}
    two = {b["rollouts"]: b for b in builds if b["workers"] == 2}
    small, large = min(sizes), max(sizes)
    ratios = {
        "peak_rss_largest_over_smallest_1_worker": round(one[large]["peak_rss_mb"] / one[small]["peak_rss_mb"], 3),
        "peak_rss_largest_over_smallest_2_workers": round(
            (two[large]["peak_rss_mb"] + 2 * two[large]["worker_peak_rss_mb"])
            / (two[small]["peak_rss_mb"] + 2 * two[small]["worker_peak_rss_mb"]), 3),
        "two_over_one_worker_rollouts_per_s": {n: round(two[n]["rollouts_per_s"] / one[n]["rollouts_per_s"], 3)
                                               for n in sizes},
    }
    if baseline:
        ratios["one_worker_over_baseline_rollouts_per_s"] = round(one[small]["rollouts_per_s"]
                                                                  / baseline["rollouts_per_s"], 3)
        ratios["one_worker_over_baseline_rollouts_per_cpu_s"] = round(one[small]["rollouts_per_cpu_s"]
                                                                      / baseline["rollouts_per_cpu_s"], 3)
    return {"setup": {"shape": "10 turns, 2048-token context, aux root, discarded retry (tests/support/synthetic_dataset.py)",
                      "sizes": sizes, "unique_rollouts": unique, "generate_seconds": round(gen_s, 1),
                      "replicate_seconds": round(rep_s, 1), "scratch": str(scratch), "scratch_free_gb": round(free_gb, 1),
                      "cpus": os.cpu_count(), "load_average_at_end": os.getloadavg(), "quick": quick,
                      "python": sys.version.split()[0]},
            "goals": {"peak_rss_ratio_max": 1.2, "peak_rss_mb_max": 1024, "one_worker_over_baseline_min": 2.0,
                      "two_over_one_worker_min": 1.6},
            "builds": builds, "baseline": baseline, "ratios": ratios}


def print_table(out: dict) -> None:
    """The figures side by side."""
    print(f"dataset build at scale ({out['setup']['shape']}); load average at end {out['setup']['load_average_at_end']}")
    print(f"  {'rollouts':>8} {'workers':>7} {'wall s':>8} {'rollouts/s':>10} {'per CPU-s':>9} "
          f"{'peak RSS MB':>11} {'worker peak MB':>14}")
    rows = out["builds"] + ([dict(out["baseline"], workers="base")] if out["baseline"] else [])
    for b in rows:
        print(f"  {b['rollouts']:>8} {b['workers']!s:>7} {b['wall_s']:>8} {b['rollouts_per_s']:>10} "
              f"{b['rollouts_per_cpu_s']:>9} {b['peak_rss_mb']:>11} {b['worker_peak_rss_mb']:>14}")
    r = out["ratios"]
    print(f"  peak RSS largest/smallest size: 1 worker {r['peak_rss_largest_over_smallest_1_worker']}x, "
          f"2 workers (parent + 2 workers) {r['peak_rss_largest_over_smallest_2_workers']}x (goal <= 1.2x, < 1 GB)")
    print(f"  2 workers / 1 worker rollouts/s: {r['two_over_one_worker_rollouts_per_s']} (goal >= 1.6x)")
    if "one_worker_over_baseline_rollouts_per_s" in r:
        print(f"  1 worker / baseline rollouts/s: {r['one_worker_over_baseline_rollouts_per_s']}x "
              f"(per CPU-second {r['one_worker_over_baseline_rollouts_per_cpu_s']}x) (goal >= 2x)")
