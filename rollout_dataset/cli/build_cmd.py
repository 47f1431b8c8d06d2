"""`rollout-dataset build ARTIFACT_DIR... --out DATASET_DIR`: artifact folders -> Hub-ready dataset.

Every artifact folder is checked as `validate` checks it; the first invalid one stops the build
with one line (``error: file: json.path: reason``) and exit 1, and `--out` is left as it was (the
dataset is staged beside it and swapped in whole). `--out` must be new, empty, or a dataset this
tool built. There is no option to skip invalid folders: run `validate` and move them out.

``--append`` adds to an existing dataset as new shards (`builder.append`); ``--executor ray`` builds
parts as Ray tasks and merges them (`builder.distributed`); both options live in `cli/build_extend.py`.

With ``PUSH_TO_DATASET=org/name`` set (and ``HF_TOKEN``; ``PUSH_PRIVATE=1`` for a new private
repo), the dataset is pushed (append-safe) when the build finishes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments.

    Args:
        parser: the sub-command's parser.
    """
    parser.add_argument("artifacts", nargs="*", metavar="ARTIFACT_DIR",
                        help="artifact folders, or folders holding artifact folders (at least one, unless --node-dir); also "
                             "ATIF trajectories: Harbor trial or job folders, trajectory.json / *.atif.json files "
                             "(docs/atif.md)")
    parser.add_argument("--out", required=True, metavar="DATASET_DIR",
                        help="dataset folder to create (or extend: rollouts already in it are skipped); must be new, "
                             "empty, or a dataset built by rollout-dataset (anything else is refused)")
    parser.add_argument("--template", default=None, help="dataset card template (default: dataset_card.md)")
    parser.add_argument("--pretty-name", default="Agent rollouts (rollout-dataset)", help="the card's title")
    parser.add_argument("--license", default="apache-2.0", help="the card's license id")
    parser.add_argument("--language", action="append", default=None, metavar="CODE",
                        help="language of the text for the card (repeatable; default en)")
    parser.add_argument("--homepage", default=None, metavar="URL", help="homepage URL shown on the card")
    parser.add_argument("--repository", default=None, metavar="URL", help="source repository URL shown on the card")
    parser.add_argument("--citation-file", default=None, metavar="FILE",
                        help="BibTeX entry for the card's citation block (default: generated)")
    parser.add_argument("--samples", choices=("preview", "full"), default="preview",
                        help="samples config: 'preview' (default; one viewer-sized row per rollout) or 'full' "
                             "(the whole samples.md, split into parts, lossless)")
    parser.add_argument("--workers", type=_positive_int, default=1, metavar="N",
                        help="processes that build in parallel, each a contiguous slice of the inputs (default 1); "
                             "the dataset's rows are the same, in the same order, for any N")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--skip-invalid", action="store_true",
                        help="leave out each artifact folder the schema check refuses, or whose token ids are of "
                             "another tokenizer than the dataset's (named on stderr, in the summary and on the card), "
                             "instead of failing the build")
    from rollout_dataset.cli.build_extend import add_extended_arguments

    add_extended_arguments(parser)  # --append, --executor ray, --parts, --node-dir


def _positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1")
    return value


def _citation(path: str | None) -> str | None:
    """The BibTeX text of --citation-file (None when not given)."""
    from pathlib import Path

    from rollout_dataset.errors import ConfigError

    if path is None:
        return None
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"--citation-file {path}: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    """Build the dataset, print what was written, push when PUSH_TO_DATASET is set.

    Args:
        args: the parsed arguments.

    Returns:
        0 on success, 1 on an invalid artifact, a refused --out or a failed push, 2 without inputs
        (errors: one ``error:`` line on stderr, `rollout_dataset.cli.reporting`).
    """
    from rollout_dataset.atif.importer import imported_inputs
    from rollout_dataset.builder.staging import terminate_raises
    from rollout_dataset.cli.build_extend import wants_extended
    from rollout_dataset.cli.reporting import EXIT_FAILED, EXIT_USAGE, report_error

    if not args.artifacts and not args.node_dir:
        return report_error("give at least one artifact folder (or --node-dir with --executor ray)", EXIT_USAGE)
    if args.skip_invalid and wants_extended(args):
        return report_error("--skip-invalid works with a plain build, not with --append or --executor ray", EXIT_USAGE)
    try:
        # SIGTERM while importing raises too, so the import folder is removed on the way out
        with terminate_raises(), imported_inputs(args.artifacts, args.out) as inputs:
            for _file, reason in inputs.refused:  # the reason names the file and the field
                print(f"refused: {reason} (left out of the dataset)", file=sys.stderr)
            if not inputs.paths and not args.node_dir:
                return report_error(f"no input left to build: all {len(inputs.refused)} ATIF trajectories were "
                                    "refused", EXIT_FAILED, note=f"{args.out} left as it was")
            args.artifacts = inputs.paths
            return _build_and_report(args, inputs.source_named)
    except OSError as exc:  # the import folder could not be written: nothing of it is left
        return report_error(exc, EXIT_FAILED, note=f"{args.out} left as it was")


def _build_and_report(args: argparse.Namespace, named: Callable[[str], str] = str) -> int:
    """Build (or append, or build on Ray) from `args.artifacts`, report, push: `run`'s exit code.

    `named` turns a message naming an import folder into one naming the ATIF file it was imported from.
    """
    from rollout_dataset.builder import build
    from rollout_dataset.builder.inputs import first_failure_line
    from rollout_dataset.errors import RolloutDatasetError, SchemaValidationError
    from rollout_dataset.cli.push_env import maybe_push_from_env
    from rollout_dataset.cli.reporting import EXIT_FAILED, error_line, report_error

    from rollout_dataset.cli.build_extend import run_extended, wants_extended

    try:
        card = dict(pretty_name=args.pretty_name, license=args.license, language=args.language or ("en",),
                    homepage=args.homepage, repository=args.repository, citation=_citation(args.citation_file))
        if wants_extended(args):
            result = run_extended(args, **card)
        else:
            result = build(args.artifacts, args.out, template=args.template, progress=not args.no_progress,
                           samples=args.samples, workers=args.workers, skip_invalid=args.skip_invalid, **card)
    except SchemaValidationError as exc:
        folder = Path(exc.failures[0][0]).parent if exc.failures else None
        return report_error(named(first_failure_line(exc, folder)), EXIT_FAILED,
                            note=f"{args.out} left as it was; --skip-invalid leaves such folders out instead")
    except RolloutDatasetError as exc:
        return report_error(named(error_line(exc)), EXIT_FAILED)
    except OSError as exc:  # a full disk, a permission: named by the OS error, the dataset untouched
        return report_error(named(error_line(exc)), EXIT_FAILED, note=f"{args.out} left as it was")
    refused = result.refused  # empty for --append and --executor ray: they check every folder strictly
    for folder, reason in refused:
        print(named(f"refused: {folder}: left out of the dataset: {reason}"), file=sys.stderr)
    print(f"{result.out_dir}: {result.total_rollouts} rollouts "
          f"({len(result.added)} added, {len(result.skipped)} already there"
          f"{f', {len(refused)} refused by the schema check and left out' if refused else ''})")
    width = max(len(c) for c in result.rows)
    print(f"  {'config':<{width}}  {'rows added':>10}  {'bytes (all shards)':>18}")
    for config, rows in result.rows.items():
        print(f"  {config:<{width}}  {rows:>10}  {result.bytes_per_config.get(config, 0):>18}")
    if result.cut_cells:
        print(f"  note: {result.cut_cells} text cell(s) over 1 MB were cut with a marker (trace.truncated)")
    try:
        pushed = maybe_push_from_env(result.out_dir)
    except RolloutDatasetError as exc:
        return report_error(exc, EXIT_FAILED)
    if pushed is not None:
        print(f"pushed to {pushed.url}: {len(pushed.added)} rollouts added, {len(pushed.skipped)} already there, "
              f"{pushed.total_rollouts} in total")
    else:
        print(f"load it: datasets.load_dataset({str(result.out_dir)!r}, 'sequences'); "
              f"push it: rollout-dataset push {result.out_dir} --repo org/name")
    return 0
