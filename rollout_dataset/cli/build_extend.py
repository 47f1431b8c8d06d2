"""The `build` command's `--append` and `--executor ray` options (kept apart from `build_cmd`).

- ``--append``: add to an existing dataset folder as new shards (`builder.append.append_to_dataset`);
  the folder must be a dataset this tool built, and keeps its stored card options.
- ``--executor ray [--parts N] [--node-dir NODE_ID=PATH ...]``: one Ray task per part
  (`builder.distributed.build_on_ray`); ``RAY_ADDRESS`` selects the cluster, as for `batch`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rollout_dataset.errors import ConfigError

__all__ = ["add_extended_arguments", "wants_extended", "run_extended"]


def add_extended_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``--append``, ``--executor``, ``--parts`` and ``--node-dir``.

    Args:
        parser: the build command's parser.
    """
    parser.add_argument("--append", action="store_true",
                        help="add to the existing dataset --out as new shards (rollouts already there are skipped; "
                             "existing shards are never rewritten); refused unless --out is a rollout-dataset dataset")
    parser.add_argument("--executor", choices=["local", "ray"], default="local",
                        help="local (default) or ray: one Ray task builds each part, the driver merges them "
                             "(RAY_ADDRESS selects the cluster; pip install 'rollout-dataset[ray]')")
    parser.add_argument("--parts", type=int, default=None, metavar="N",
                        help="with --executor ray: split the artifact folders into N tasks (default: the cluster's CPUs)")
    parser.add_argument("--node-dir", action="append", default=[], metavar="NODE_ID=PATH",
                        help="with --executor ray: a folder only Ray node NODE_ID holds, built there (repeatable)")


def wants_extended(args: argparse.Namespace) -> bool:
    """Whether the options need `run_extended` rather than the plain build."""
    return bool(args.append or args.executor == "ray" or args.node_dir or args.parts is not None)


def _node_dirs(specs: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for spec in specs:
        node, sep, path = spec.partition("=")
        if not sep or not node or not path:
            raise ConfigError(f"--node-dir {spec!r}: expected NODE_ID=PATH (a Ray node id, then a path on that node)")
        out.setdefault(node, []).append(path)
    return out


def run_extended(args: argparse.Namespace, **card: Any) -> Any:
    """Append and/or build on Ray, as the options say.

    Args:
        args: the parsed build arguments.
        card: the card options `build` takes (pretty_name, license, language, homepage, repository,
            citation); ignored by ``--append`` (the dataset keeps its own).

    Returns:
        A `BuildResult`.

    Raises:
        ConfigError: ``--parts``/``--node-dir`` without ``--executor ray``, ``--workers`` with it, or a bad
            ``--node-dir``.
        RolloutDatasetError: whatever the build raises.
    """
    if args.executor != "ray":
        if args.parts is not None or args.node_dir:
            raise ConfigError("--parts and --node-dir go with --executor ray")
        from rollout_dataset.builder.append import append_to_dataset

        return append_to_dataset(args.artifacts, args.out, template=args.template, progress=not args.no_progress,
                                 samples=args.samples, workers=getattr(args, "workers", 1))
    if getattr(args, "workers", 1) > 1:
        raise ConfigError("--workers goes with a local build; with --executor ray the parts run in parallel "
                          "(--parts N)")
    from rollout_dataset.builder.card_info import CardOptions, load_card_options
    from rollout_dataset.builder.distributed import build_on_ray

    if args.append:
        from rollout_dataset.builder.append import require_dataset

        require_dataset(Path(args.out))
        options = load_card_options(args.out)
    else:
        options = CardOptions(**{**card, "language": tuple(card.get("language") or ("en",))})
    return build_on_ray(args.artifacts, args.out, parts=args.parts, node_dirs=_node_dirs(args.node_dir),
                        template=args.template, options=options, progress=not args.no_progress, samples=args.samples)
