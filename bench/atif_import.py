"""Benchmark of ATIF import and export (docs/atif.md). Prints a table and saves bench/results/atif_import.json.

- import throughput: `--trials` synthetic Harbor trial folders (`<trial>/agent/trajectory.json` +
  `result.json`), each the ATIF export of a synthetic rollout (`tests/support/synthetic_dataset.py`,
  `--turns` agent turns, `--context` tokens, ids and logprobs included), imported into artifact
  folders by `atif.importer.write_imported` (what `build` does before building): trajectories/s and
  the importing process's peak RSS (a child process, so the figure is the import's alone);
- size: bytes of one exported `trajectory.json` vs the whole artifact folder it came from, and vs
  its `turns.json` (the file holding the same ids and logprobs).

- the wild (`--wild DIR`: a folder of ATIF files others wrote, one subfolder per source; the
  project-written fixtures of their shapes in tests/data/atif_wild run as a quick check): how many
  files Harbor's validator accepts (`python -m harbor.utils.trajectory_validator`, with
  `--harbor-python`) and PyPI `atif`'s models accept, the
  share imported (of all files, of those Harbor accepts), one `build` of them all, the fields a
  JSON diff of `export(import(x))` against `x` finds changed (logprobs compared as float32, the one
  listed normalisation), and `load_dataset` of every config the card lists (`--reader-python`, a
  venv with `datasets` but not this package). A `SOURCES.json` in DIR (subfolder -> repo, commit,
  paths, licence) is copied into the results. Saved to bench/results/atif_wild.json.

Usage: python bench/atif_import.py [--trials 1000] [--turns 5] [--context 2048]
       python bench/atif_import.py --trials 0 --wild DIR [--harbor-python .venv-harbor/bin/python]
                                   [--reader-python .venv-reader/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/support/: the synthetic fixtures
from support.synthetic_dataset import write_synthetic_rollout  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "atif_import.json"
WILD_RESULTS = RESULTS.with_name("atif_wild.json")
ROOT = Path(__file__).resolve().parents[1]


def _json_diff(source: Any, exported: Any, path: str = "$") -> list[str]:
    """Where `exported` differs from `source` (logprobs compared as float32, the dataset's type)."""
    if isinstance(source, dict) and isinstance(exported, dict):
        out = [f"{path}.{k}: missing" for k in source if k not in exported]
        out += [f"{path}.{k}: added" for k in exported if k not in source]
        for k in source.keys() & exported.keys():
            out += _json_diff(source[k], exported[k], f"{path}.{k}")
        return out
    if isinstance(source, list) and isinstance(exported, list) and len(source) == len(exported):
        return [d for i, (a, b) in enumerate(zip(source, exported)) for d in _json_diff(a, b, f"{path}[{i}]")]
    if ".logprobs[" in path and isinstance(source, float) and isinstance(exported, float):
        return [] if float(np.float32(source)) == exported else [path]
    return [] if source == exported and type(source) is type(exported) else [path]


def _without_content(refusal: str) -> str:
    """A refusal line without the file's content it may quote (an object or list after the field's path):
    the results name the field, never copy others' text."""
    quoted = re.search(r": [\[{]", refusal)
    return refusal if quoted is None else refusal[:quoted.start()] + ": (the value there, not recorded)"


def _harbor_accepts(python: str | None, file: Path) -> bool | None:
    if not python:
        return None
    proc = subprocess.run([python, "-m", "harbor.utils.trajectory_validator", str(file)], capture_output=True,
                          text=True, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HARBOR_TELEMETRY": "0"})
    return proc.returncode == 0


def _atif_accepts(file: Path) -> bool | None:
    try:
        import atif
    except ImportError:
        return None
    try:
        atif.Trajectory.model_validate(json.loads(file.read_text(encoding="utf-8-sig")))
    except ValueError:
        return False
    return True


def wild(folder: Path, harbor_python: str | None, reader_python: str | None) -> dict[str, Any]:
    """The figures on ATIF files others wrote (see the module docstring)."""
    import pyarrow.parquet as pq

    files = sorted(p for p in folder.rglob("*.json") if p.name.endswith(".atif.json") or p.name == "trajectory.json")
    per_file: dict[str, dict[str, Any]] = {str(f.relative_to(folder)): {"harbor": _harbor_accepts(harbor_python, f),
                                                                      "atif": _atif_accepts(f)} for f in files}
    with tempfile.TemporaryDirectory() as tmp:
        out, exported = Path(tmp) / "ds", Path(tmp) / "exported"
        t0 = time.perf_counter()
        build = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "build", str(folder), "--out", str(out),
                                "--no-progress"], capture_output=True, text=True)
        build_seconds = time.perf_counter() - t0
        refused = [line for line in build.stderr.splitlines() if line.startswith("refused:")]
        for line in refused:
            name = line.split(f"{folder}/", 1)[1].split(": ", 1)[0] if f"{folder}/" in line else ""
            if name in per_file:
                per_file[name]["refusal"] = _without_content(line)[:300]
        export = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "export", "--format", "atif", str(out),
                                 "--out", str(exported)], capture_output=True, text=True) if build.returncode == 0 else None
        summaries = [r for p in sorted((out / "data" / "summary").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
        for row in summaries:
            name = json.loads(row["imported_from"])["file"].split("/", 1)[1]
            entry = per_file[name]
            entry.update(imported=True, level=row["capture_level"])
            target = exported / f"{row['rollout_id']}.atif.json"
            if target.is_file():
                entry["diff"] = _json_diff(json.loads((folder / name).read_text(encoding="utf-8-sig")),
                                           json.loads(target.read_text(encoding="utf-8")))
        loads: dict[str, Any] = {}
        if reader_python and build.returncode == 0:
            script = ("import datasets, json, yaml\n"
                      f"meta = yaml.safe_load(open({str(out / 'README.md')!r}).read().split('---')[1])\n"
                      "res = {}\n"
                      "for c in [c['config_name'] for c in meta['configs']]:\n"
                      "    try:\n"
                      f"        res[c] = len(datasets.load_dataset({str(out)!r}, c, split='train'))\n"
                      "    except Exception as exc:\n"
                      "        res[c] = f'{type(exc).__name__}: {exc}'\n"
                      "print(json.dumps(res))\n")
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
            proc = subprocess.run([reader_python, "-c", script], capture_output=True, text=True, cwd=tmp,
                                  env={**env, "HF_HOME": str(Path(tmp) / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"})
            loads = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"error": proc.stderr[-500:]}
            loads["left_out_of_the_card"] = sorted(p.name for p in (out / "data").iterdir() if p.name not in loads)
    accepted = [n for n, e in per_file.items() if e["harbor"] is not False]
    imported = [n for n, e in per_file.items() if e.get("imported")]
    equal = [n for n, e in per_file.items() if e.get("diff") == []]
    return {
        "command": f"python bench/atif_import.py --trials 0 --wild {folder}",
        "files": len(files), "sources": sorted({n.split("/")[0] for n in per_file}),
        "provenance": json.loads((folder / "SOURCES.json").read_text()) if (folder / "SOURCES.json").is_file() else None,
        "harbor_validator_accepts": sum(e["harbor"] is True for e in per_file.values()),
        "atif_models_accept": sum(e["atif"] is True for e in per_file.values()),
        "imported": len(imported), "imported_of_harbor_accepted": f"{len(set(imported) & set(accepted))}/{len(accepted)}",
        "build_exit": build.returncode, "build_seconds": round(build_seconds, 1),
        "export_exit": export.returncode if export else None,
        "round_trip_equal": f"{len(equal)}/{len(imported)}",
        "fields_changed": {n: e["diff"][:5] for n, e in per_file.items() if e.get("diff")},
        "load_dataset": loads,
        "per_file": per_file,
    }


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
    parser.add_argument("--wild", type=Path, default=None, metavar="DIR", help="ATIF files others wrote")
    parser.add_argument("--harbor-python", default=str(ROOT / ".venv-harbor" / "bin" / "python"))
    parser.add_argument("--reader-python", default=str(ROOT / ".venv-reader" / "bin" / "python"))
    parser.add_argument("--child", nargs=2, metavar=("JOB", "STAGE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return
    if args.wild is not None:
        figures = wild(args.wild.resolve(), args.harbor_python if Path(args.harbor_python).is_file() else None,
                       args.reader_python if Path(args.reader_python).is_file() else None)
        WILD_RESULTS.parent.mkdir(parents=True, exist_ok=True)
        WILD_RESULTS.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
        for key, value in figures.items():
            if key != "per_file":
                print(f"{key:<28}  {json.dumps(value)[:400]}")
    if args.trials <= 0:
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
