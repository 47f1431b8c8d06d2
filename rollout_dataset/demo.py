"""`make demo`: the main job on the embedded default.

Starts the local backend (built-in tokenizer, `oracle` policy) once, captures a few rollouts of
the built-in harness over several tasks through the recording proxy, and prints their summaries.
`capture_demo_rollouts` returns the artifact folders, so later steps (building and loading the
dataset, pushing it) plug in after it; see `main`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Sequence

__all__ = ["capture_demo_rollouts", "format_summaries", "main"]

logger = logging.getLogger(__name__)

DEFAULT_ARTIFACTS = Path("demo-artifacts")


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
    from rollout_dataset.backend import LocalBackend, load_tokenizer, make_policy
    from rollout_dataset.capture import CaptureConfig, capture_rollout, serve_in_thread

    out_root = Path(out_root)
    dirs: list[Path] = []
    tokenizer = load_tokenizer("builtin")
    with serve_in_thread(lambda: LocalBackend(tokenizer=tokenizer, policy=make_policy("oracle"),
                                              served_model_name="local"), name="demo-backend") as backend:
        for index in task_indices:
            config = CaptureConfig(out_dir=out_root / f"rollout-{index:03d}", base_url=backend.base_url, model="local",
                                   tokenizer="builtin", task_index=index, seed=seed, rollout_seed=index,
                                   timeout_s=timeout_s, push=False)
            result = capture_rollout(config)
            if not result.ok:
                raise RuntimeError(f"capture of task index {index} failed: {result.errors} {result.validation_failures}")
            dirs.append(result.out_dir)
    return dirs


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
        s = json.loads((Path(d) / "summary.json").read_text(encoding="utf-8"))
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
    parser = argparse.ArgumentParser(description="Capture a few oracle rollouts on the local backend.")
    parser.add_argument("--out", default=str(DEFAULT_ARTIFACTS), help="artifact root folder")
    parser.add_argument("--n", type=int, default=6, help="number of rollouts (task indices 0..n-1)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    dirs = capture_demo_rollouts(args.out, range(args.n))
    print(format_summaries(dirs))
    print(f"\nartifacts: {Path(args.out).resolve()}  (check them: rollout-dataset validate {args.out})")
    # Next steps of the main job (dataset build, load, push) take `dirs` from here.
    return 0


if __name__ == "__main__":
    sys.exit(main())
