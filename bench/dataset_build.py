"""Benchmark of the dataset builder (issue 5). Prints a table and saves bench/results/dataset_build.json.

Measures, on synthetic schema-faithful rollouts (default: 50 turns, 8k-token context):
- build throughput vs a bare pyarrow write of the same arrays (JSON read + one table per config with
  the naive encoding: full prompt_ids per turn, raw request/response JSON, sequences as they are);
- peak RSS of a build as the rollout count grows (a fresh subprocess per size);
- dataset bytes per config and per unique token; whole dataset / sequences config; what the seed's
  full-prompt turns encoding would have cost;
- parquet writer variants side by side on the same tables (zstd levels per column kind, BYTE_STREAM_SPLIT);
- a second storage point with more distinct rollouts (the marginal ratio, without the fixed card/footer bytes);
- both storage points in each `samples` mode side by side: "preview" (default; one bounded row per rollout)
  and "full" (samples.md split into parts, lossless);
- `datasets.load_dataset(dir, "sequences")` time vs `pyarrow.parquet.read_table`: first call in a fresh
  process (library imports included), first call with an empty cache in a warm process, and cached.

- the trace-viewer sessions (companion repo, not in the whole) and the stored tokenizer (a fixed cost).

Usage: python bench/dataset_build.py [--turns 50] [--context 8192] [--sizes 10,40,160] [--quick]

With --scale (issue 14): build throughput and peak RSS at 1k / 5k / 20k rollouts with 1 and 2 workers,
side by side with the code of --baseline-ref (see bench/dataset_build_scale.py); saved to
bench/results/dataset_build_scale.json (--quick: small sizes, dataset_build_scale_quick.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rollout_dataset.builder import CONFIG_NAMES, build
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/support/: the synthetic fixtures
from support.synthetic_dataset import write_synthetic_rollout
from rollout_dataset.builder.rows import read_artifact, sample_rows
from rollout_dataset.builder.writer import ROW_GROUP_BYTES, ConfigWriter

RESULTS = Path(__file__).resolve().parent / "results" / "dataset_build.json"

# VmHWM of the child itself (ru_maxrss would carry the parent's high-water mark across fork+exec)
_RSS_CHILD = """
import sys, time
from rollout_dataset.builder import build
t = time.perf_counter()
r = build([sys.argv[1]], sys.argv[2], progress=False, row_group_bytes=int(sys.argv[3]))
hwm = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM")][0]
print(len(r.added), time.perf_counter() - t, hwm)
"""

_LOAD_CHILD = """
import sys, time
t0 = time.perf_counter()
import datasets
t1 = time.perf_counter()
ds = datasets.load_dataset(sys.argv[1], "sequences", split="train")  # fresh process, empty cache
t2 = time.perf_counter()
ds = datasets.load_dataset(sys.argv[2], "sequences", split="train")  # same files elsewhere: empty cache, warm imports
t3 = time.perf_counter()
ds = datasets.load_dataset(sys.argv[2], "sequences", split="train")  # cached
t4 = time.perf_counter()
print(len(ds), t2 - t1, t3 - t2, t4 - t3)
"""

# Writer variants measured side by side on the built dataset's tables (the last one is what the builder uses).
_VARIANTS = ("zstd-default (previous)", "text-19", "text-19 lists-12", "text-19 lists-12 bss-f32 (used)",
             "text-19 lists-19 bss-f32")


def _variant_options(schema: pa.Schema, variant: str) -> dict:
    dictionary = [f.name for f in schema if not pa.types.is_list(f.type)]
    levels, encodings = {}, {}
    for f in schema:
        if pa.types.is_list(f.type):
            leaf = f"{f.name}.list.element"
            if "lists-12" in variant or "lists-19" in variant:
                levels[leaf] = 19 if "lists-19" in variant else 12
            if "bss" in variant and pa.types.is_floating(f.type.value_type):
                encodings[leaf] = "BYTE_STREAM_SPLIT"
        elif "text-19" in variant and pa.types.is_string(f.type):
            levels[f.name] = 19
    return {"use_dictionary": dictionary, "compression_level": levels or None, "column_encoding": encodings or None}


def _encoding_table(ds_dir: Path, work: Path) -> dict:
    """Bytes per config (and write seconds) of each writer variant on the same tables."""
    out = {}
    readme = (ds_dir / "README.md").stat().st_size
    for variant in _VARIANTS:
        sizes, secs = {}, 0.0
        for config in CONFIG_NAMES:
            table = pq.read_table(sorted((ds_dir / "data" / config).glob("*.parquet")))
            dst = work / "variant.parquet"
            t = time.perf_counter()
            opts = {k: v for k, v in _variant_options(table.schema, variant).items() if v is not None}
            with pq.ParquetWriter(dst, table.schema, compression="zstd", write_page_index=True, **opts) as w:
                w.write_table(table)
            secs += time.perf_counter() - t
            if not pq.read_table(dst).equals(table):
                raise SystemExit(f"variant {variant}: {config} did not read back equal")
            sizes[config] = dst.stat().st_size
        whole = sum(sizes.values()) + readme
        out[variant] = {"bytes_per_config": sizes, "whole_bytes": whole, "write_seconds": round(secs, 3),
                        "whole_over_sequences": round(whole / sizes["sequences"], 3)}
    return out


def _samples_bytes(folders: list[Path], out: Path, preview_chars: int) -> int:
    """Bytes of a `samples` shard holding the preview rows of `folders` at one preview size."""
    w = ConfigWriter("samples", out)
    for folder in folders:
        art = read_artifact(folder)
        w.add(sample_rows(art, "preview", preview_chars=preview_chars))
    w.close()
    size = out.stat().st_size
    out.unlink()
    return size


def _replicate(src: Path, dst: Path, copies: int) -> None:
    """`copies` artifact folders from the ones in `src`, each with a fresh rollout_id (files hard-linked)."""
    base = sorted(p for p in src.iterdir() if p.is_dir())
    for k in range(copies):
        folder = dst / f"r{k:05d}"
        folder.mkdir(parents=True)
        orig = base[k % len(base)]
        for f in orig.iterdir():
            if f.name != "summary.json":
                os.link(f, folder / f.name)
        summary = json.loads((orig / "summary.json").read_text())
        summary["rollout_id"] = uuid.uuid4().hex
        (folder / "summary.json").write_text(json.dumps(summary))


def _bare_pyarrow(folders: list[Path], out: Path) -> float:
    """Read the same artifacts and write the same arrays with plain pyarrow (naive encoding)."""
    t = time.perf_counter()
    seq, turns, trace = [], [], []
    for folder in folders:
        rollout = json.loads((folder / "rollout.json").read_text())
        doc = json.loads((folder / "turns.json").read_text())
        calls = json.loads((folder / "trace.json").read_text())["calls"]
        for s in rollout["sequences"]:
            seq.append({"input_ids": s["input_ids"], "loss_mask": s["loss_mask"], "logprobs": s["logprobs"]})
        for x in doc["turns"]:
            turns.append({"prompt_ids": x["prompt_ids"], "output_ids": x["output_ids"],
                          "per_token_logps": x["per_token_logps"], "mask": x["mask"]})
        for c in calls:
            trace.append({"request": json.dumps(c["request"]), "response": json.dumps(c["response"])})
    out.mkdir(parents=True, exist_ok=True)
    types = {"input_ids": pa.list_(pa.int32()), "loss_mask": pa.list_(pa.int8()), "logprobs": pa.list_(pa.float32()),
             "prompt_ids": pa.list_(pa.int32()), "output_ids": pa.list_(pa.int32()),
             "per_token_logps": pa.list_(pa.float32()), "mask": pa.list_(pa.int8()),
             "request": pa.string(), "response": pa.string()}
    for name, rows in (("sequences", seq), ("turns", turns), ("trace", trace)):
        schema = pa.schema([(k, types[k]) for k in rows[0]])
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), out / f"{name}.parquet", compression="zstd")
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--context", type=int, default=8192)
    parser.add_argument("--unique", type=int, default=10, help="distinct synthetic rollouts generated")
    parser.add_argument("--sizes", default="10,40,160", help="rollout counts for the RSS series")
    parser.add_argument("--unique-large", type=int, default=40,
                        help="distinct rollouts of the second storage point (marginal bytes per rollout)")
    parser.add_argument("--text", choices=["code", "random"], default="code",
                        help="synthetic content: real code through the built-in tokenizer, or random ids")
    parser.add_argument("--quick", action="store_true", help="small run (5 turns, 1k context, sizes 4,8)")
    parser.add_argument("--scale", action="store_true",
                        help="issue 14: throughput and peak RSS at --scale-sizes rollouts, 1 and 2 workers, vs a baseline")
    parser.add_argument("--scale-sizes", default="1000,5000,20000", help="rollout counts of --scale")
    parser.add_argument("--scale-unique", type=int, default=500,
                        help="distinct rollouts generated for --scale (replicated by hard links up to the largest size)")
    parser.add_argument("--scratch", default="/tmp/rollout-dataset-bench-scale",
                        help="--scale's scratch folder (generated rollouts are kept there and reused)")
    parser.add_argument("--baseline-ref", default="b7a7924",
                        help="git ref whose code is --scale's baseline ('' for none)")
    parser.add_argument("--baseline-pythonpath", default=None, metavar="DIR",
                        help="a folder holding the baseline's rollout_dataset package (instead of --baseline-ref)")
    args = parser.parse_args()
    if args.scale:
        _scale(args)
        return
    if args.quick:
        args.turns, args.context, args.unique, args.sizes, args.unique_large = 5, 1024, 4, "4,8", 8
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-dataset-"))
    try:
        src = work / "unique"
        t = time.perf_counter()
        for k in range(args.unique):
            write_synthetic_rollout(src / f"u{k:03d}", seed=k, n_turns=args.turns, context_tokens=args.context,
                                    with_aux=True, with_retry=True, task_index=k, text=args.text)
        gen_s = time.perf_counter() - t
        folders = sorted(p for p in src.iterdir())
        artifact_bytes = sum(f.stat().st_size for f in src.rglob("*") if f.is_file())

        # build vs bare pyarrow (best of 2 each)
        build_times, bare_times = [], []
        for _rep in range(2):
            shutil.rmtree(work / "ds", ignore_errors=True)
            t = time.perf_counter()
            result = build(folders, work / "ds", progress=False)
            build_times.append(time.perf_counter() - t)
            shutil.rmtree(work / "bare", ignore_errors=True)
            bare_times.append(_bare_pyarrow(folders, work / "bare"))
        bare_bytes = {p.stem: p.stat().st_size for p in (work / "bare").glob("*.parquet")}

        # storage
        summary = pq.read_table(next((work / "ds" / "data" / "summary").glob("*.parquet"))).to_pylist()
        unique_tokens = sum(r["n_unique_tokens"] for r in summary)
        per_config = result.bytes_per_config
        whole = sum(per_config.values()) + (work / "ds" / "README.md").stat().st_size
        # not in `whole`: the trace-viewer sessions go to the companion repo; the tokenizer is a fixed cost
        traces_bytes = sum(p.stat().st_size for p in (work / "ds" / "traces").rglob("*") if p.is_file())
        tokenizer_bytes = sum(p.stat().st_size for p in (work / "ds" / "tokenizer").rglob("*") if p.is_file())

        encodings = _encoding_table(work / "ds", work)

        # a second storage point with more distinct rollouts: what the fixed costs (card, footers) hide
        for k in range(args.unique, args.unique_large):
            write_synthetic_rollout(src / f"u{k:03d}", seed=k, n_turns=args.turns, context_tokens=args.context,
                                    with_aux=True, with_retry=True, task_index=k, text=args.text)
        large = build(sorted(p for p in src.iterdir()), work / "ds-large", progress=False).bytes_per_config
        whole_large = sum(large.values()) + (work / "ds-large" / "README.md").stat().st_size
        seq_delta = large["sequences"] - per_config["sequences"]
        marginal = round((whole_large - whole) / seq_delta, 3) if seq_delta > 0 else None

        # the same two storage points in each samples mode
        modes = {}
        for mode in ("preview", "full"):
            point = {}
            for label, chosen in (("small", folders), ("large", sorted(p for p in src.iterdir()))):
                dst = work / f"ds-{mode}-{label}"
                b = build(chosen, dst, progress=False, samples=mode).bytes_per_config
                point[label] = {"rollouts": len(chosen), "bytes_per_config": b,
                                "whole_bytes": sum(b.values()) + (dst / "README.md").stat().st_size}
                shutil.rmtree(dst)
            sm, lg = point["small"], point["large"]
            delta = lg["bytes_per_config"]["sequences"] - sm["bytes_per_config"]["sequences"]
            modes[mode] = {
                **point,
                "whole_over_sequences_small": round(sm["whole_bytes"] / sm["bytes_per_config"]["sequences"], 3),
                "whole_over_sequences_large": round(lg["whole_bytes"] / lg["bytes_per_config"]["sequences"], 3),
                "marginal_whole_over_sequences": round((lg["whole_bytes"] - sm["whole_bytes"]) / delta, 3)
                if delta > 0 else None,
                "marginal_by_config_over_sequences": {
                    c: round((lg["bytes_per_config"][c] - sm["bytes_per_config"][c]) / delta, 3)
                    for c in CONFIG_NAMES} if delta > 0 else None,
            }

        # the preview size's share: samples bytes per added rollout over sequences bytes per added rollout
        all_folders = sorted(p for p in src.iterdir())
        preview_sizes = {}
        delta_seq = modes["preview"]["large"]["bytes_per_config"]["sequences"] - \
            modes["preview"]["small"]["bytes_per_config"]["sequences"]
        whole_wo_samples = modes["preview"]["marginal_whole_over_sequences"] - \
            modes["preview"]["marginal_by_config_over_sequences"]["samples"]
        for chars in (2_000, 4_000, 8_000, 16_000):
            small_b = _samples_bytes(folders, work / "s.parquet", chars)
            large_b = _samples_bytes(all_folders, work / "s.parquet", chars)
            share = round((large_b - small_b) / delta_seq, 3) if delta_seq > 0 else None
            preview_sizes[chars] = {"samples_over_sequences_per_added_rollout": share,
                                    "marginal_whole_over_sequences": round(whole_wo_samples + share, 3)
                                    if share is not None else None}

        # RSS as the rollout count grows: default row-group buffers, and small ones (plateau sooner)
        rss = []
        for n in sizes:
            dst = work / f"rss-{n}"
            _replicate(src, dst / "in", n)
            for buffer_mb in (ROW_GROUP_BYTES // 2**20, 4):
                out_dir = dst / ("ds" if buffer_mb != 4 else "ds-small")
                proc = subprocess.run([sys.executable, "-c", _RSS_CHILD, str(dst / "in"), str(out_dir),
                                       str(buffer_mb * 2**20)], capture_output=True, text=True)
                if proc.returncode:
                    raise SystemExit(f"build of {n} rollouts failed:\n{proc.stderr}")
                added, secs, maxrss_kb = proc.stdout.split()
                rss.append({"rollouts": int(added), "row_group_buffer_mb": buffer_mb, "seconds": round(float(secs), 2),
                            "peak_rss_mb": round(int(maxrss_kb) / 1024, 1)})
            shutil.rmtree(dst / "in")

        # load_dataset vs pyarrow read, on the small dataset and the largest RSS one
        loads = []
        for ds_dir in (work / "ds", work / f"rss-{sizes[-1]}" / "ds"):
            files = sorted((ds_dir / "data" / "sequences").glob("*.parquet"))
            t = time.perf_counter()
            for _ in range(3):
                pq.read_table(files)
            pa_read = (time.perf_counter() - t) / 3
            env = dict(os.environ, HF_DATASETS_CACHE=str(work / f"hfcache-{len(loads)}"), HF_HUB_OFFLINE="1",
                       HF_DATASETS_DISABLE_PROGRESS_BARS="1")
            twin = work / f"twin-{len(loads)}"
            shutil.copytree(ds_dir, twin)
            proc = subprocess.run([sys.executable, "-c", _LOAD_CHILD, str(ds_dir), str(twin)], env=env,
                                  capture_output=True, text=True, check=True)
            n_rows, first, cold, warm = proc.stdout.split()
            loads.append({"rows": int(n_rows), "sequences_bytes": sum(f.stat().st_size for f in files),
                          "pyarrow_read_seconds": round(pa_read, 4),
                          "load_dataset_first_in_process_seconds": round(float(first), 3),
                          "load_dataset_cold_seconds": round(float(cold), 3),
                          "load_dataset_warm_seconds": round(float(warm), 3),
                          "first_in_process_ratio": round(float(first) / pa_read, 2),
                          "cold_ratio": round(float(cold) / pa_read, 2),
                          "warm_ratio": round(float(warm) / pa_read, 2), "target_ratio": 2.0})
    finally:
        shutil.rmtree(work, ignore_errors=True)

    out = {
        "setup": {"text": args.text, "turns": args.turns, "context_tokens": args.context, "unique_rollouts": args.unique,
                  "generate_seconds": round(gen_s, 2), "artifact_bytes": artifact_bytes,
                  "python": sys.version.split()[0], "pyarrow": pa.__version__, "cpus": os.cpu_count()},
        "build": {"seconds": round(min(build_times), 3), "bare_pyarrow_seconds": round(min(bare_times), 3),
                  "ratio": round(min(build_times) / min(bare_times), 2),
                  "rollouts_per_second": round(args.unique / min(build_times), 2), "target_ratio": 2.0},
        "storage": {"bytes_per_config": per_config, "whole_dataset_bytes": whole, "unique_tokens": unique_tokens,
                    "bytes_per_unique_token": {c: round(b / unique_tokens, 3) for c, b in per_config.items()},
                    "whole_over_sequences": round(whole / per_config["sequences"], 3), "target": 1.5,
                    "traces_companion_repo_bytes": traces_bytes, "tokenizer_bytes": tokenizer_bytes,
                    "naive_turns_full_prompt_bytes": bare_bytes.get("turns"),
                    "naive_trace_raw_json_bytes": bare_bytes.get("trace"),
                    "large": {"unique_rollouts": args.unique_large, "bytes_per_config": large,
                              "whole_dataset_bytes": whole_large,
                              "whole_over_sequences": round(whole_large / large["sequences"], 3),
                              "marginal_whole_over_sequences": marginal},
                    "samples_modes": modes,
                    "preview_size_sensitivity": preview_sizes,
                    "encodings": encodings},
        "rss": rss,
        "load": loads,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    name = RESULTS if not args.quick else RESULTS.with_name("dataset_build_quick.json")
    name.write_text(json.dumps(out, indent=2) + "\n")

    print(f"dataset build benchmark: {args.unique} rollouts x {args.turns} turns, {args.context}-token context")
    print(f"  build {out['build']['seconds']}s vs bare pyarrow {out['build']['bare_pyarrow_seconds']}s "
          f"-> {out['build']['ratio']}x (target <= 2x)")
    print(f"  {'config':<15} {'bytes':>12} {'bytes/unique token':>20}")
    for c in CONFIG_NAMES:
        print(f"  {c:<15} {per_config[c]:>12} {out['storage']['bytes_per_unique_token'][c]:>20}")
    print(f"  whole dataset {whole} bytes = {out['storage']['whole_over_sequences']}x sequences (target <= 1.5x); "
          f"naive full-prompt turns alone would be {bare_bytes.get('turns')} bytes")
    st = out["storage"]
    print(f"  not in the whole: trace-viewer sessions (companion repo) {st['traces_companion_repo_bytes']} bytes "
          f"= {round(st['traces_companion_repo_bytes'] / per_config['sequences'], 3)}x sequences; "
          f"tokenizer/ {st['tokenizer_bytes']} bytes (fixed)")
    print(f"  {args.unique_large} distinct rollouts: whole {st['large']['whole_dataset_bytes']} bytes = "
          f"{st['large']['whole_over_sequences']}x sequences; marginal (per added rollout) "
          f"{st['large']['marginal_whole_over_sequences']}x")
    print("  samples mode side by side (whole dataset / sequences config):")
    print(f"    {'mode':<8} {args.unique:>4} rollouts {args.unique_large:>4} rollouts {'per added rollout':>18} "
          f"{'samples/seq per added':>22} {'trace/seq per added':>20}")
    for mode, m in modes.items():
        mb = m["marginal_by_config_over_sequences"] or {}
        print(f"    {mode:<8} {m['whole_over_sequences_small']:>13} {m['whole_over_sequences_large']:>13} "
              f"{m['marginal_whole_over_sequences']!s:>18} {mb.get('samples')!s:>22} {mb.get('trace')!s:>20}")
    print("  preview size -> per added rollout (samples/seq, whole/seq): " + ", ".join(
        f"{c} chars ({v['samples_over_sequences_per_added_rollout']}, {v['marginal_whole_over_sequences']})"
        for c, v in preview_sizes.items()))
    print(f"  writer variants on the {args.unique}-rollout tables:")
    print(f"    {'variant':<34} {'sequences':>10} {'trace':>8} {'samples':>8} {'whole':>8} {'whole/seq':>9} {'write s':>8}")
    for variant, v in st["encodings"].items():
        b = v["bytes_per_config"]
        print(f"    {variant:<34} {b['sequences']:>10} {b['trace']:>8} {b['samples']:>8} {v['whole_bytes']:>8} "
              f"{v['whole_over_sequences']:>9} {v['write_seconds']:>8}")
    for mb in sorted({r["row_group_buffer_mb"] for r in rss}, reverse=True):
        print(f"  peak RSS ({mb} MB row-group buffers): " + ", ".join(
            f"{r['rollouts']} rollouts {r['peak_rss_mb']} MB ({r['seconds']}s)" for r in rss
            if r["row_group_buffer_mb"] == mb))
    for ld in loads:
        print(f"  load sequences ({ld['rows']} rows, {ld['sequences_bytes']} bytes) vs pyarrow {ld['pyarrow_read_seconds']}s: "
              f"first in a process {ld['load_dataset_first_in_process_seconds']}s ({ld['first_in_process_ratio']}x), "
              f"cold cache {ld['load_dataset_cold_seconds']}s ({ld['cold_ratio']}x), "
              f"warm {ld['load_dataset_warm_seconds']}s ({ld['warm_ratio']}x) (target <= 2x)")
    print(f"saved {name}")


def _scale(args: argparse.Namespace) -> None:
    """--scale: see bench/dataset_build_scale.py."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from dataset_build_scale import print_table, run_scale

    sizes = [100, 200, 400] if args.quick else [int(s) for s in args.scale_sizes.split(",")]
    unique = min(args.scale_unique, 50) if args.quick else args.scale_unique
    name = RESULTS.with_name("dataset_build_scale_quick.json" if args.quick else "dataset_build_scale.json")
    out = run_scale(sizes, unique=unique, scratch=Path(args.scratch), baseline_ref=args.baseline_ref or None,
                    baseline_pythonpath=Path(args.baseline_pythonpath) if args.baseline_pythonpath else None,
                    quick=args.quick, partial=name)
    name.write_text(json.dumps(out, indent=2) + "\n")
    print_table(out)
    print(f"saved {name}")


if __name__ == "__main__":
    main()
