"""`make demo`: the main job on the embedded default.

Starts the local backend (built-in tokenizer, `oracle` policy) once, captures a few rollouts of the
built-in harness over several tasks through the recording proxy, builds them into a multi-config
parquet dataset (`./demo-dataset`), loads every config back with `datasets.load_dataset`, prints the
summary table, and pushes the dataset when `PUSH_TO_DATASET=org/name` is set (with `HF_TOKEN`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from rollout_dataset.artifact_files import SUMMARY_FILE
from pathlib import Path
from typing import Sequence

__all__ = ["capture_demo_rollouts", "build_and_load", "format_summaries", "main"]

logger = logging.getLogger(__name__)

DEFAULT_ARTIFACTS = Path("demo-artifacts")
DEFAULT_DATASET = Path("demo-dataset")
_MARKER = ".rollout-dataset-demo"  # only folders holding it are cleared by a new demo run


def _fresh_folder(path: Path) -> Path:
    """Empty a folder this demo made before (it holds the marker); refuse to touch anything else."""
    import shutil

    if path.exists() and any(path.iterdir()):
        if not (path / _MARKER).exists():
            raise FileExistsError(f"{path} exists and was not made by the demo; pass another folder or remove it")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    _mark(path)
    return path


def _mark(path: Path) -> None:
    (path / _MARKER).write_text("made by `make demo`; cleared by the next demo run\n", encoding="utf-8")


def capture_demo_rollouts(out_root: str | Path = DEFAULT_ARTIFACTS, task_indices: Sequence[int] = (0, 1, 2, 3, 4, 5),
                          seed: int = 0, timeout_s: float = 120.0) -> list[Path]:
    """Capture one oracle rollout per task index against one shared local backend.

    Args:
        out_root: folder that receives one artifact folder per rollout (``<out_root>/<index>``).
        task_indices: which tasks (indices into the list selected by `seed`); the rollout seed of
            each is its index, so the oracle's wrong-first-attempt draws differ.
        seed: the dataset seed.
        timeout_s: wall-time budget per rollout.

    Returns:
        The artifact folders, in capture order.

    Raises:
        RuntimeError: a capture failed (its errors are in the message).
    """
    from rollout_dataset.backend import LocalBackend, make_policy
    from rollout_dataset.capture import capture_rollout
    from rollout_dataset.recipes.coding import CaptureConfig
    from rollout_dataset.server_runner import serve_in_thread
    from rollout_dataset.envs.registry import register_builtin_policies
    from rollout_dataset.tokenizers import load_tokenizer

    register_builtin_policies()

    out_root = Path(out_root)
    dirs: list[Path] = []
    tokenizer = load_tokenizer("builtin")
    with serve_in_thread(lambda: LocalBackend(tokenizer=tokenizer, policy=make_policy("oracle"),
                                              served_model_name="local"), name="demo-backend") as backend:
        for index in task_indices:
            config = CaptureConfig(out_dir=out_root / f"rollout-{index:03d}", base_url=backend.base_url, model="local",
                                   tokenizer="builtin", task_index=index, seed=seed, rollout_seed=index,
                                   timeout_s=timeout_s)
            result = capture_rollout(config)
            if not result.ok:
                raise RuntimeError(f"capture of task index {index} failed: {result.errors} {result.validation_failures}")
            dirs.append(result.out_dir)
    return dirs


def build_and_load(artifact_dirs: Sequence[Path], dataset_dir: str | Path = DEFAULT_DATASET) -> dict[str, int]:
    """Build the dataset from artifact folders and load every config back with `datasets.load_dataset`.

    Args:
        artifact_dirs: the rollouts' artifact folders.
        dataset_dir: the dataset folder to build into.

    Returns:
        Rows per config, as `load_dataset` returned them.

    Raises:
        ArtifactError: an artifact folder could not be read.
        ValueError: a loaded config's features differ from the declared ones.
    """
    import datasets

    from rollout_dataset.builder import CONFIG_NAMES, build, features

    result = build(artifact_dirs, dataset_dir, progress=False)
    datasets.disable_progress_bars()
    rows = {}
    for name in CONFIG_NAMES:
        split = datasets.load_dataset(str(result.out_dir), name, split="train")
        if split.features != features(name):
            raise ValueError(f"config {name!r} loaded with features that differ from the declared ones")
        rows[name] = split.num_rows
    return rows


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def format_summaries(dirs: Sequence[Path]) -> str:
    """A table of the captured rollouts' summaries.

    Args:
        dirs: artifact folders.

    Returns:
        Markdown table text.
    """
    import json

    rows = ["| rollout | task | calls | agent turns | tool calls | reward | after penalties | stop |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for d in dirs:
        s = json.loads((Path(d) / SUMMARY_FILE).read_text(encoding="utf-8"))
        rows.append(f"| {s['rollout_id'][:8]} | {s['task_id']} | {s['captured_calls']} | {s['agent_turns']} | "
                    f"{s['tool_calls_total']} | {_num(s['env_reward'])} | {_num(s['reward_after_penalties'])} | "
                    f"{s['stop_reason']} |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo.

    Args:
        argv: command-line arguments (``--out``, ``--n``).

    Returns:
        The exit code.
    """
    parser = argparse.ArgumentParser(description="Capture oracle rollouts on the local backend, build and load the dataset.")
    parser.add_argument("--out", default=str(DEFAULT_ARTIFACTS), help="artifact root folder")
    parser.add_argument("--dataset", default=str(DEFAULT_DATASET), help="dataset folder")
    parser.add_argument("--n", type=int, default=6, help="number of rollouts (task indices 0..n-1)")
    args = parser.parse_args(argv)
    from rollout_dataset.cli import quiet_third_party_banners

    quiet_third_party_banners()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from rollout_dataset.cli.push_env import maybe_push_from_env

    artifacts, dataset = _fresh_folder(Path(args.out)), _fresh_folder(Path(args.dataset))
    dirs = capture_demo_rollouts(artifacts, range(args.n))
    print(format_summaries(dirs))
    print(f"\nartifacts: {artifacts.resolve()}  (check them: rollout-dataset validate {args.out})")
    (dataset / _MARKER).unlink()  # `build` takes only an empty folder or a dataset it built
    rows = build_and_load(dirs, dataset)
    _mark(dataset)
    print(f"\ndataset: {dataset.resolve()}  (dataset card: {dataset / 'README.md'})")
    print("load_dataset(..., name) rows: " + ", ".join(f"{name}={n}" for name, n in rows.items()))
    pushed = maybe_push_from_env(dataset)
    if pushed is None:
        print(f"\nto publish it: PUSH_TO_DATASET=org/name HF_TOKEN=... rollout-dataset push {args.dataset} --repo org/name")
    else:
        print(f"\npushed to {pushed.url or pushed.repo_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
